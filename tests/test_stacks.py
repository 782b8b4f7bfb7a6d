"""Software-stack profiles, calibration from measured runs, and prediction intervals."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import perfmodel as pm
from perfmodel.calibrate.runs.from_runs import Parts, calibrate_from_runs, fit, interval_from, price
from perfmodel.cost.step.run_fit import COMM_TIME, COMPUTE_TIME
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.stack.frameworks import stack_for_framework
from perfmodel.spec.stack.profile import STACKS, Stack, list_stacks, load_stack

DEV_CSV = Path(__file__).parents[1] / "benchmarks" / "data" / "published_runs_dev.csv"
H100 = load_hardware("dgx-h100")


def plan(**kw):
    base = dict(gpus=16, tp=1, micro_batch=2, global_batch=64, seq_len=4096, zero=3)
    return pm.Plan(**{**base, **kw})


def est(stack, model="llama-3-8b", system=H100, **kw):
    return pm.estimate(model, system, plan(stack=stack, **kw))


def uncited(s: Stack) -> list[str]:
    """The profile's fields that set a number or a choice without a citation in `sources`."""
    cited = [f for f, info in Stack.model_fields.items()
             if info.annotation in (float, int, bool) or f == "optimizer"]
    return [f for f in cited if not s.sources.get(f, "").strip()]


def test_every_stack_loads_and_every_number_cites_its_source():
    assert sorted(STACKS) == list_stacks()
    for name in STACKS:
        s = load_stack(name)
        assert uncited(s) == [], name
        assert s.interval is not None and "python -m benchmarks.evals.published_runs" in s.interval.source


def test_missing_citation_is_caught():
    s = load_stack("nemo")
    bare = s.model_copy(update={"sources": {k: v for k, v in s.sources.items() if k != "comm_ctas"}})
    assert uncited(bare) == ["comm_ctas"]


def test_triton_attention_kernel_is_slower_by_the_profile_ratio(dgx_h100_fixed_clock):
    # composer-fsdp1 runs the Triton kernel at 0.556 of FlashAttention-2's rate (Dao 2023, Sec. 4.1); at one clock
    a = {o.name: o for o in est("composer-fsdp1", system=dgx_h100_fixed_clock).ops if o.kind == "attention"}
    b = {o.name: o for o in est("torchtitan", system=dgx_h100_fixed_clock).ops if o.kind == "attention"}
    for name in a:
        assert a[name].fwd_s == pytest.approx(b[name].fwd_s / 0.556, rel=1e-9)


def test_foreach_adam_moves_twenty_sevenths_of_the_fused_bytes():
    fused = est("megatron-core").time_s.optimizer
    foreach = est("torchtitan").time_s.optimizer
    assert foreach == pytest.approx(fused * 20 / 7, rel=1e-9)
    assert load_stack("composer-fsdp1").optimizer_passes() == pytest.approx(20 / 7)


def test_overlapped_collectives_cost_the_sms_they_hold(tmp_path):
    # NCCL's 16 thread blocks hold 16 of the H100's 132 SMs while a collective overlaps compute
    share = 16 / 132
    assert load_stack("megatron-core").overlap_share(H100.accelerator) == pytest.approx(share)
    assert load_stack("megatron-core").overlap_share(load_hardware("tpu-v5p").accelerator) == 0.0
    free = tmp_path / "free.yaml"  # the same stack with collectives that take no SMs
    free.write_text(Path(pm.__file__).parent.parent.joinpath("hardware_specs/stacks/megatron-core.yaml").read_text()
                    .replace("comm_ctas: 16", "comm_ctas: 0"))
    z3 = lambda e: [c for c in e.comms if c.name.startswith("zero3")]  # noqa: E731
    held, none = z3(est("megatron-core")), z3(est(str(free)))
    # with_overlap: (1 - f) comm + f exposed, f = 1 - share: the step pays share x the part that hid
    extra = sum(c.exposed_s for c in held) - sum(c.exposed_s for c in none)
    assert extra == pytest.approx(share * sum(c.total_s - c.exposed_s for c in none), rel=1e-6)
    assert extra > 0


def test_deepspeed_pipeline_reduces_after_the_flush():
    kw = dict(gpus=32, tp=2, pp=4, micro_batch=1, global_batch=64, zero=1)
    ds, mc = est("deepspeed", **kw), est("megatron-core", **kw)
    red = [c for c in ds.comms if c.name == "dp gradient reduction"][0]
    assert red.exposed_s == pytest.approx(red.seconds_per_call * red.calls, rel=1e-9)
    red_mc = [c for c in mc.comms if c.name == "dp gradient reduction"][0]
    assert red_mc.exposed_s < red.exposed_s


@pytest.mark.parametrize("text,stack", [
    ("NeMo 24.05 (Megatron-Core)", "nemo"), ("NeMo/Megatron-Core (MLPerf Training v3.1, eos)", "nemo"),
    ("torchtitan 2D (Float8)", "torchtitan"), ("MosaicML Composer + llm-foundry (FSDP, FlashAttention)",
                                                "composer-fsdp1"),
    ("Megatron-DeepSpeed", "deepspeed"), ("DeepSpeed ZeRO-3", "deepspeed"), ("Megatron-LM (2021)", "megatron-core"),
    ("plain-torch", "plain-torch"), ("NeMo AutoModel (PyTorch-native, FSDP2) main branch", "nemo-automodel"),
    ("megatron-bridge@26.04", "megatron-bridge@26.04")])
def test_framework_names_map_to_stacks(text, stack):
    assert stack_for_framework(text) == stack


def test_unknown_stack_and_framework_are_refused_in_one_line():
    with pytest.raises(InputError) as e:
        pm.estimate("llama-3-8b", H100, plan(stack="jax"))
    assert "unknown stack 'jax'" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError) as e:
        stack_for_framework("Levanter")
    assert "Levanter" in str(e.value) and "megatron-core" in str(e.value)


def test_interval_is_the_stacks_where_the_spec_has_none():
    e = est("nemo")
    band = load_stack("nemo").interval
    assert e.step_time_s_low == pytest.approx(e.step_time_s * (1 + band.low))
    assert e.step_time_s_high == pytest.approx(e.step_time_s * (1 + band.high))
    assert "80% interval" in e.interval_source


def test_weighted_interval_quantiles_by_hand():
    # ten residuals -0.5 .. 0.4 with equal weight: mid-point cumulative weights 0.05, 0.15, ...; the 10% quantile
    # lies halfway between -0.5 and -0.4, the 90% halfway between 0.3 and 0.4
    band = interval_from(np.arange(-5, 5) / 10, "test")
    assert band.low == pytest.approx(-0.45) and band.high == pytest.approx(0.35)
    assert interval_from(np.array([0.1, 0.2]), "test") is None


# ---------------------------------------------------------------------------------------------------------------
# Calibration from runs
# ---------------------------------------------------------------------------------------------------------------

def nemo_runs() -> pd.DataFrame:
    df = pd.read_csv(DEV_CSV)
    return df[df["source_group"] == "NeMo_launcher_24.05"].dropna(subset=["vocab"]).head(6)


def synthetic(tmp_path, speeds=(0.8, 1.5, 0.0)) -> tuple[Path, Parts]:
    """The NeMo H100 rows with measured times replaced by the model's parts at known speeds and per-step overhead."""
    df = nemo_runs()
    parts = price([c for c in load_cases_from(df)])
    c, n, o = speeds
    df["iter_time_s"] = parts.compute / c + parts.comm / n + parts.host + o
    path = tmp_path / "runs.csv"
    df.to_csv(path, index=False)
    return path, parts


def load_cases_from(df):
    from perfmodel.calibrate.runs.table import to_case

    return [to_case(r) for _, r in df.iterrows()]


def test_fit_recovers_known_speeds_and_predict_uses_them(tmp_path):
    path, parts = synthetic(tmp_path)
    system = calibrate_from_runs(path, H100, "test")
    f = system.run_fit
    # compute dominates these steps and is pinned; exposed communication and host time are a few percent of them,
    # so the priors (log network speed at sd PRIOR_SD[1], log host speed at PRIOR_SD[2], around the spec's 1) hold
    # both near 1, trading the little they explain between them: network_speed short of the truth 1.5
    assert f.compute_speed == pytest.approx(0.8, rel=0.02)
    assert 0.9 < f.network_speed <= 1.5 and 0.9 < f.host_speed < 1.2
    for r in f.runs:
        assert r.predicted_s == pytest.approx(r.measured_s, rel=0.02)
    # the estimate on the calibrated spec: compute / c + comm / n + host + overhead, part by part
    case = load_cases_from(nemo_runs())[0]
    base = pm.estimate(case.model, H100, case.plan).time_s
    cal = pm.estimate(case.model, system, case.plan)
    t = cal.time_s
    assert t.gemm == pytest.approx(base.gemm / f.compute_speed)
    assert t.tp_comm == pytest.approx(base.tp_comm / f.network_speed)
    assert f.step_overhead_s == 0.0  # fitted only where asked (--step-overhead)
    assert t.overhead == pytest.approx(base.overhead / f.host_speed)
    assert t.host == pytest.approx(base.host / f.host_speed)
    want = (sum(getattr(base, k) for k in COMPUTE_TIME) / f.compute_speed
            + sum(getattr(base, k) for k in COMM_TIME) / f.network_speed + (base.host + base.overhead) / f.host_speed)
    assert t.total == pytest.approx(want)
    assert cal.step_time_s_low < cal.step_time_s < cal.step_time_s_high


def test_three_runs_fit_and_leave_one_out_needs_four(tmp_path):
    df = nemo_runs().head(3)
    path = tmp_path / "three.csv"
    df.to_csv(path, index=False)
    f = calibrate_from_runs(path, H100, "test").run_fit
    assert len(f.runs) == 3 and f.loo_mape is None and f.interval is None
    assert all(r.loo_predicted_s is None for r in f.runs)


def test_robust_loss_is_not_pulled_by_one_odd_run():
    parts = Parts(compute=np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), comm=np.array([0.5, 0.2, 0.9, 0.1, 0.4, 0.3]),
                  host=np.zeros(6), measured=np.zeros(6), scopes=np.array(["dgx-h100 / nemo"] * 6))
    parts.measured = parts.compute / 0.9 + parts.comm + 0.0
    parts.measured[2] *= 2.0  # one run twice as slow (a straggler)
    c, _, _, _ = fit(parts)
    assert c == pytest.approx(0.9, rel=0.05)


def test_a_fit_to_large_runs_does_not_move_small_ones_by_a_fixed_time():
    """Runs of 14-94 s that are all 10% slower than the spec, plus host time only in small steps. The
    speeds-only fit (the default) puts compute at 1/1.1 and adds no seconds per step, so a 1.4 s run of the same
    cluster comes out 1.1 x its spec; a per-step overhead (asked for) is what the runs show it to be, here none."""
    compute = np.array([14.0, 60.0, 94.0])
    parts = Parts(compute, 0.02 * compute, np.zeros(3), 1.1 * 1.02 * compute, np.array(["megatron-core"] * 3))
    c, n, h, o = fit(parts)
    assert (h, o) == (1.0, 0.0)  # no host time in the runs: the host speed keeps its prior
    small = Parts(np.array([1.4]), np.array([0.028]), np.zeros(1), np.array([1.0]), np.array(["megatron-core"]))
    assert small.predict((c, n, h, o))[0] == pytest.approx(1.1 * 1.428, rel=0.02)
    assert fit(parts, overhead=True)[3] < 0.01 * 14.0


def test_host_speed_fits_host_bound_runs_and_scales_host_parts():
    """Runs whose steps are mostly host time (launch-bound small work) pin the host speed: a host 1.5x slower
    than the spec's (host seconds x 1.5) is found within 5%, compute left at its spec."""
    rng = np.random.default_rng(1)
    compute = rng.uniform(0.01, 0.05, 8)
    host = rng.uniform(0.05, 0.2, 8)
    parts = Parts(compute, 0.0 * compute, host, compute + 1.5 * host, np.array(["nanogpt"] * 8))
    c, n, h, o = fit(parts)
    assert 1 / h == pytest.approx(1.5, rel=0.05) and c == pytest.approx(1.0, rel=0.05) and o == 0.0


def test_a_speed_the_runs_cannot_pin_is_held_at_its_prior_not_refused():
    """Three runs that are 40x slower than any network could make them push network_speed to its bound: the
    calibration keeps it at the spec's 1, says which speed it held, and widens nothing into a refusal."""
    from perfmodel.calibrate.runs.from_runs import at_bound, fit_held

    compute = np.array([1.0, 2.0, 3.0])
    comm = np.array([0.9, 1.8, 2.7])  # communication-heavy runs
    parts = Parts(compute, comm, np.zeros(3), compute + 60 * comm, np.array(["nemo"] * 3))
    assert "network_speed" in at_bound(fit(parts))
    params, held = fit_held(parts)
    assert held == ["host_speed", "network_speed"] and params[1] == 1.0  # no run waits on its host either
    assert not at_bound(params)


def test_a_fit_applies_only_to_plans_of_the_stacks_it_was_fitted_on(tmp_path):
    """A spec calibrated from NeMo runs prices a NeMo plan with the fitted speeds and a torchtitan plan at the
    spec's own rates, saying so (spec.hardware.system.RunFit.applies_to)."""
    path, _ = synthetic(tmp_path)
    system = calibrate_from_runs(path, H100, "test")
    case = load_cases_from(nemo_runs())[0]
    assert case.plan.stack == "nemo" and system.run_fit.applies_to("nemo")
    other = case.plan.model_copy(update={"stack": "torchtitan", "tp_comm_overlap": None, "grad_dtype": None})
    base = pm.estimate(case.model, H100, other)
    cal = pm.estimate(case.model, system, other)
    assert cal.step_time_s == pytest.approx(base.step_time_s)
    assert any("not of torchtitan" in n for n in cal.notes)
    assert pm.estimate(case.model, system, case.plan).step_time_s != pytest.approx(
        pm.estimate(case.model, H100, case.plan).step_time_s)


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "perfmodel", *argv], capture_output=True, text=True, timeout=120)


def test_cli_calibrate_from_runs_then_predict(tmp_path):
    path, _ = synthetic(tmp_path, (0.8, 1.5, 0.25))  # a quarter second per step outside the model
    spec = tmp_path / "mine.yaml"
    r = _cli("calibrate", "--from-runs", str(path), "--hardware", "dgx-h100", "--output", str(spec),
             "--step-overhead")
    assert r.returncode == 0, r.stderr
    assert "compute_speed" in r.stdout and "leave-one-out MAPE" in r.stdout and "step_overhead_s" in r.stdout
    r = _cli("predict", "--model", "llama-3-8b", "--hardware", str(spec), "--gpus", "16", "--tp", "1", "--pp", "1",
             "--micro-batch", "2", "--global-batch", "64", "--seq-len", "4096", "--zero", "3", "--stack", "nemo",
             "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["step_time_s_low"] < out["step_time_s"] < out["step_time_s_high"]
    assert "leave-one-out" in out["interval_source"] and out["time_s"]["overhead"] > 0.2


@pytest.mark.parametrize("case,needle", [
    ("two", "at least 3 measured runs"),
    ("nocol", "missing column(s) hidden"),
    ("nohw", "needs --hardware"),
    ("device", "drop --device"),
    ("missing", "no such file"),
])
def test_cli_calibrate_from_runs_bad_input(tmp_path, case, needle):
    df = nemo_runs()
    csv = tmp_path / "runs.csv"
    (df.head(2) if case == "two" else df.drop(columns=["hidden"]) if case == "nocol" else df).to_csv(csv, index=False)
    spec = tmp_path / "out.yaml"
    argv = ["calibrate", "--from-runs", str(csv if case != "missing" else tmp_path / "nope.csv"), "--output", str(spec)]
    if case != "nohw":
        argv += ["--hardware", "dgx-h100"]
    if case == "device":
        argv += ["--device", "cpu"]
    r = _cli(*argv)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not spec.exists()


def test_a_run_on_another_accelerator_is_refused(tmp_path):
    df = nemo_runs()
    csv = tmp_path / "runs.csv"
    df.to_csv(csv, index=False)
    with pytest.raises(InputError) as e:
        calibrate_from_runs(csv, load_hardware("dgx-a100-80gb"), "test")
    assert "not the A100" in str(e.value)


def test_profile_intervals_are_the_benchmarks_residuals():
    """Each profile's interval is what benchmarks/evals/published_runs.py builds from the profile-only residuals now
    (perfmodel.calibrate.runs.intervals; regenerate the YAML `interval` blocks when the cost model moves them), and it
    holds what docs/stacks.md says: 70-90% of each held-out group's rows, groups weighted once."""
    from benchmarks.evals import published_runs

    bands, held, q = published_runs.stack_intervals(published_runs.priced(DEV_CSV)[0])
    cover = float(np.mean(list(held.values())))
    assert 0.7 <= cover <= 0.9 and q == 0.1
    for name, band in bands.items():
        shipped = load_stack(name).interval
        assert (shipped.low, shipped.high) == pytest.approx((band.low, band.high), abs=2e-3), name
        assert shipped.held_out == pytest.approx(cover, abs=0.01) and set(shipped.regimes) == set(band.regimes)
        assert shipped.coverage == 0.8
        for r, b in band.regimes.items():
            assert (shipped.regimes[r].low, shipped.regimes[r].high) == pytest.approx((b.low, b.high), abs=2e-3)
    doc = (Path(__file__).parents[1] / "docs" / "stacks.md").read_text()
    assert f"{100 * cover:.1f}% of a held-out group's runs" in doc


def test_chunked_overlap_by_hand():
    from perfmodel.cost.comm.sharded import bucketed, chunked

    # one chunk: 8 buckets behind 0.4 s, the last always waits: max(1/8, 1 - 0.4 * 7/8) = 0.65
    assert float(chunked(1.0, 0.4, 8, 1, 0.0)) == pytest.approx(0.65)
    assert float(chunked(1.0, 0.4, 8, 1, 0.0)) == pytest.approx(float(bucketed(1.0, 0.4, 8)))
    # four chunks: the last (0.25 s, 2 buckets behind 0.1 s) leaves max(0.125, 0.25 - 0.1 / 2) = 0.2; the other
    # three (0.75 s) overlap 0.5 s of later compute: 0.25 left
    assert float(chunked(1.0, 0.4, 8, 4, 0.5)) == pytest.approx(0.45)


def test_interleaving_hides_the_earlier_chunks_gradient_sync():
    kw = dict(gpus=64, tp=8, pp=4, micro_batch=1, global_batch=32, zero=1, seq_len=4096)
    one = pm.estimate("llama-3-70b", H100, pm.Plan(**kw))
    four = pm.estimate("llama-3-70b", H100, pm.Plan(vpp=4, **kw))
    red = lambda e: next(c for c in e.comms if c.name == "dp gradient reduction")  # noqa: E731
    assert red(four).total_s == pytest.approx(red(one).total_s, rel=1e-9)  # the same bytes
    # what hides costs the SMs NCCL holds (16 of 132) in both; interleaving hides more of the rest
    floor = 16 / 132 * red(one).total_s
    assert floor < red(four).exposed_s < red(one).exposed_s


def test_first_and_last_stage_counts_name_the_right_stage():
    kw = dict(gpus=64, tp=8, pp=8, micro_batch=1, global_batch=64, seq_len=4096)
    ruled = pm.estimate("llama-2-70b", H100, pm.Plan(first_stage_layers=10, last_stage_layers=16, **kw))
    listed = pm.estimate("llama-2-70b", H100, pm.Plan(stage_layers=[10, 9, 9, 9, 9, 9, 9, 16], **kw))
    assert ruled.stage_layers == listed.stage_layers == [10, 9, 9, 9, 9, 9, 9, 16]
    assert ruled.bottleneck_stage == listed.bottleneck_stage == "last"
    assert ruled.step_time_s == pytest.approx(listed.step_time_s, rel=1e-12)


@pytest.mark.parametrize("edit,needle", [
    (lambda df: df.assign(iter_time_s=-1.0), "measured step time -1.0"),
    (lambda df: df.assign(n_gpus=df["n_gpus"] * 2), "!= tp*pp*dp*cp"),
    (lambda df: df.assign(iter_time_s=float("nan"), tokens_per_s_total=float("nan"), n_gpus=float("nan")),
     "no step time or throughput"),
    (lambda df: df.assign(model="llama-3-8b", vocab=float("nan")), "is the catalogue's llama-3-8b but the row states"),
    (lambda df: df.assign(stage_layers="inf, 4"), "stage_layers = 'inf, 4'; valid: whole numbers"),
    (lambda df: df.assign(ep="1e400"), "ep = 'inf'; valid: a whole number"),  # pandas reads it as a float
])
def test_calibrate_from_runs_refuses_runs_it_cannot_price(tmp_path, edit, needle):
    csv = tmp_path / "runs.csv"
    edit(nemo_runs()).to_csv(csv, index=False)
    with pytest.raises(InputError) as e:
        calibrate_from_runs(csv, H100, "test")
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("scale,held,note", [
    (1 / 1000, {"compute_speed", "network_speed", "host_speed"}, "cannot pin down compute_speed, network_speed"),
    (1 / 4, {"host_speed"}, "is beyond what any development-set cluster"),  # 4x faster than the spec
])
def test_runs_far_from_the_spec_are_calibrated_and_flagged_not_refused(tmp_path, scale, held, note):
    """Only input errors are refused. Runs 1000x faster than the spec push the speeds to their bounds:
    they are held at the spec's 1 and the interval is no narrower than the stacks'; runs 4x faster give a compute
    speed no dev-set cluster has: kept, and flagged with the runs furthest from the spec."""
    csv = tmp_path / "runs.csv"
    nemo_runs().assign(iter_time_s=lambda df: df["iter_time_s"] * scale).to_csv(csv, index=False)
    f = calibrate_from_runs(csv, H100, "test").run_fit
    assert set(f.held) == held
    assert any(note in n and "furthest from the spec: " in n for n in f.notes), f.notes
    if len(held) == 1:  # the runs 4x faster than the spec: a compute speed of about 4, named in the note
        assert f.compute_speed == pytest.approx(4, rel=0.05)
        assert any(f"compute_speed {f.compute_speed:.3g} is beyond" in n for n in f.notes), f.notes
    # NeMo's runs of large models never wait on their host: its speed is held, and the fit says why
    assert any(n.startswith("host_speed held at the spec's 1: the runs cannot pin it down, no run waits on its host")
               for n in f.notes), f.notes
    if len(held) > 1:
        assert f.compute_speed == 1.0 and "no narrower than the runs' stacks' own" in f.interval.source
        assert f.interval.low <= load_stack("nemo").interval.low and f.interval.high >= load_stack("nemo").interval.high


def test_host_costs_are_charged_per_launch_and_call():
    """A CPU spec with host costs for plain-torch: a plan of that stack pays kernel_s per operator launch and
    collective_s per call (cost.host.launch_queue.launch_seconds), added to the step (a CPU rank's host thread is the one
    that computes: nothing overlaps), as the `host` part; the launches are the estimate's own op rows (forward,
    backward, recomputed forward, per micro-batch) and its comm rows' calls."""
    from perfmodel.cost.estimate import evaluate_plan
    from perfmodel.spec.hardware.system import HostCosts

    cpu = load_hardware(Path(__file__).parent / "fixtures" / "cpu-test.yaml")
    cpu = cpu.model_copy(update={"efficiency": cpu.efficiency.model_copy(update={"comm_overlap": 0.0})})
    costly = cpu.model_copy(update={"host_costs": HostCosts(stack="plain-torch", kernel_s=1e-4, collective_s=2e-3,
                                                            probes=[], sources={})})
    plan = pm.Plan(gpus=2, tp=2, micro_batch=2, global_batch=8, seq_len=128, sequence_parallel=True,
                   recompute="full", stack="plain-torch")
    model = pm.load_model("gpt2-124m").model_copy(update={"n_layers": 2})
    step, base = evaluate_plan(model, cpu, plan)
    _, paid = evaluate_plan(model, costly, plan)
    m = base.num_microbatches
    kernels = sum(o.count * (2 + (o.recompute_s > 0)) for o in base.ops) * m
    calls = sum(c.calls for c in base.comms)
    assert step.host_kernels[0] == pytest.approx(kernels) and step.host_calls[0] == pytest.approx(calls)
    assert paid.step_time_s - base.step_time_s == pytest.approx(1e-4 * kernels + 2e-3 * calls, rel=1e-9)
    assert paid.time_s.host == pytest.approx(1e-4 * kernels + 2e-3 * calls, rel=1e-9)
    assert paid.time_s.overhead == 0 and paid.host_s == pytest.approx(paid.time_s.host, rel=1e-9)
    # another stack's plan pays nothing
    other = plan.model_copy(update={"stack": "torchtitan"})
    assert evaluate_plan(model, costly, other)[1].step_time_s == evaluate_plan(model, cpu, other)[1].step_time_s


def test_sustained_fraction_by_hand_and_reproduces_the_probe():
    """calibrate.host.costs.sustained_fraction = F / (measured - (predicted - F)), F the GEMM + attention seconds: by hand,
    clipped, and a spec carrying it prices the probe at (about) what was measured (the GEMMs of so small a model are
    compute bound, so their time scales as 1 / fraction)."""
    from perfmodel.calibrate.host.costs import SUSTAIN_MODEL, sustain_plan, sustained_fraction
    from perfmodel.cost.estimate import estimate

    assert sustained_fraction(0.3, 0.2, 0.1) == pytest.approx(0.5)  # 0.1 / (0.3 - 0.1)
    assert sustained_fraction(0.2, 0.2, 0.1) == 1.0  # measured as predicted
    assert sustained_fraction(0.05, 0.2, 0.1) == 1.0  # faster than the host and comm alone: no claim on compute
    assert sustained_fraction(100.0, 0.2, 0.1) == 0.05  # floor
    cpu = load_hardware(Path(__file__).parent / "fixtures" / "cpu-test.yaml")
    plan = sustain_plan(4)
    assert plan.gpus == 4 and plan.tp == plan.pp == 1 and plan.zero == 0 and plan.stack == "plain-torch"
    base = estimate(SUSTAIN_MODEL, cpu, plan)
    f = base.time_s.gemm + base.time_s.attention
    measured = base.step_time_s + 0.8 * f  # a step that keeps 1 / 1.8 of the kernels' rates
    frac = sustained_fraction(measured, base.step_time_s, f)
    assert frac == pytest.approx(1 / 1.8)
    slow = cpu.model_copy(update={"efficiency": cpu.efficiency.model_copy(update={"sustained_fraction": frac})})
    assert estimate(SUSTAIN_MODEL, slow, plan).step_time_s == pytest.approx(measured, rel=0.03)


def test_zero1_weight_gather_overlaps_only_where_the_stack_runs_it_so(no_host):
    """overlap_param_gather: a ZeRO-1 plan of a stack that gathers the updated weights inside the optimizer step
    (nemo: apex DistributedFusedAdam's default) pays the whole gather; megatron-core hides part of it behind the next
    forward; ZeRO-2's gather (FSDP-like, in the forward) is the same for both; everything else is unchanged."""
    from perfmodel.cost.estimate import evaluate_plan

    assert load_stack("megatron-core").overlap_param_gather and not load_stack("nemo").overlap_param_gather
    model = pm.load_model("llama-3-8b")
    # the stacks' other differences (nemo: bf16 gradients, tp overlap) held equal
    base = dict(gpus=512, tp=2, pp=2, micro_batch=1, global_batch=256, seq_len=4096, sequence_parallel=True,
                precision="bf16", grad_dtype="fp32", tp_comm_overlap=False)

    def gather(stack, zero):
        step, _ = evaluate_plan(model, H100, pm.Plan(**base, zero=zero, stack=stack))
        c = next(c for c in step.step_comms if c.name == "zero weight all-gather")
        return float(np.ravel(c.seconds)[0]), float(np.ravel(c.exposed)[0]), step

    full, shown, nemo = gather("nemo", 1)
    _, hidden, mcore = gather("megatron-core", 1)
    assert full > 0 and shown == pytest.approx(full, rel=1e-12) and hidden < 0.5 * full
    gap = np.ravel(nemo.time["dp_comm"] - mcore.time["dp_comm"])[0]
    assert gap == pytest.approx(full - hidden, rel=1e-9)
    assert gather("nemo", 2)[1] == pytest.approx(gather("megatron-core", 2)[1], rel=1e-12)


def test_a_stack_yaml_without_overlap_param_gather_still_loads(tmp_path):
    """Profiles written before the field existed load with the earlier behaviour (the gather overlaps)."""
    text = (Path(__file__).parents[1] / "hardware_specs" / "stacks" / "megatron-core.yaml").read_text()
    old = "\n".join(line for line in text.splitlines() if "overlap_param_gather" not in line)
    path = tmp_path / "old-profile.yaml"
    path.write_text(old.replace("name: megatron-core", "name: old-profile"))
    assert load_stack(str(path)).overlap_param_gather is True


@pytest.mark.parametrize("nproc", [1, 2, 3, 4, 5, 6, 7, 8, 16])
def test_executor_probes_are_valid_plans_for_any_process_count(nproc):
    """calibrate runs its probes after the microbenchmarks: each must be a plan the estimate accepts for every
    process count (3, 5, 6, 7 once failed there, the batch of 8 not dividing among the ranks)."""
    from perfmodel.calibrate.host.costs import PROBE_MODEL, SUSTAIN_MODEL, probe_plans, sustain_plan
    from perfmodel.cost.estimate import estimate

    cpu = load_hardware(Path(__file__).parent / "fixtures" / "cpu-test.yaml")
    for name, p in probe_plans(nproc).items():
        assert estimate(PROBE_MODEL, cpu, p).step_time_s > 0, name
    s = sustain_plan(nproc)
    assert s.global_batch == nproc and s.micro_batch == 1 and s.seq_len == 192
    assert estimate(SUSTAIN_MODEL, cpu, s).step_time_s > 0


def test_runs_naming_a_catalogue_model_take_the_shape_they_leave_out(tmp_path):
    """A runs CSV row with `model` = a preset and no shape columns is priced as that preset (vocab included)."""
    df = nemo_runs().head(4).copy()
    df["model"] = "llama-3-8b"
    for col in ("n_layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab"):
        df[col] = np.nan
    df["seq_len"], df["tp"], df["pp"], df["cp"], df["vpp"] = 4096, 1, 1, 1, 1
    df["dp"] = df["n_gpus"]
    df["micro_batch"], df["global_batch"] = 1, df["n_gpus"]
    path = tmp_path / "runs.csv"
    df.to_csv(path, index=False)
    from perfmodel.calibrate.runs.from_runs import cases_of, read_runs_table

    cases = cases_of(read_runs_table(path), H100, "test")
    preset = pm.load_model("llama-3-8b")
    assert all((c.model.vocab, c.model.n_layers, c.model.hidden, c.model.n_kv_heads)
               == (preset.vocab, preset.n_layers, preset.hidden, preset.n_kv_heads) for c in cases)
    # a stated column that differs from the catalogue's: refused, naming it (its head_dim, MoE, MLA would not fit)
    df["n_layers"] = 16
    df.to_csv(path, index=False)
    with pytest.raises(InputError, match=r"states n_layers = 16 \(the catalogue's: 32\); valid: leave the shape"):
        cases_of(read_runs_table(path), H100, "test")


def test_one_run_moves_compute_speed_less_than_twenty():
    """The prior's pull: one run cannot tell a slower compute from a slower network (the prior splits its slowdown,
    mostly onto the network, whose prior is wider), twenty runs with varied communication shares can, and find
    compute 0.8 of the spec's."""
    def parts(n):
        rng = np.random.default_rng(0)
        compute = rng.uniform(1.0, 3.0, n)
        comm = rng.uniform(0.05, 0.5, n) * compute  # not a fixed share, or network and compute are one
        measured = (compute / 0.8 + comm) * (1 + rng.normal(0, 0.02, n))
        return Parts(compute, comm, np.zeros(n), measured, np.array(["dgx-h100 / nemo"] * n))

    c1, n1, _, _ = fit(parts(1))
    c20, n20, _, _ = fit(parts(20))
    assert 0.8 < c20 < 0.83 and n20 == pytest.approx(1.0, abs=0.15)  # 2% noise blurs the split a little
    assert c20 < c1 < 1.0 and n1 < 1.0


def test_runs_table_columns_named_after_plan_fields_set_them(tmp_path):
    """Every plan setting predict takes can be stated in a runs table (calibrate.runs.table.PLAN_COLUMNS): the plan of
    each run has it, and a bad value is refused naming the column, in one line."""
    from perfmodel.calibrate.runs.from_runs import cases_of, read_runs_table

    df = nemo_runs().head(3).copy()
    df["recompute"] = "selective"
    df["recompute_modules"] = "core_attn, mlp"
    df["stack"] = "torchtitan"
    df["overlap_dp_comm"] = "false"
    df["attention"] = "unfused"
    path = tmp_path / "runs.csv"
    df.to_csv(path, index=False)
    for c in cases_of(read_runs_table(path), H100, "test"):
        p = c.plan
        assert (p.recompute_modules, p.stack, p.overlap_dp_comm, p.attention) == (
            ["core_attn", "mlp"], "torchtitan", False, "unfused")
    # an MoE run: a catalogue MoE model with its shape left out, expert parallelism from its column
    moe = nemo_runs().head(3).copy()
    for col in ("n_layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab"):
        moe[col] = np.nan
    moe["model"], moe["ep"], moe["tp"], moe["pp"], moe["cp"], moe["vpp"] = "qwen3-30b-a3b", 8, 1, 1, 1, 1
    moe["dp"], moe["seq_len"], moe["micro_batch"], moe["global_batch"] = moe["n_gpus"], 4096, 1, moe["n_gpus"]
    moe.to_csv(path, index=False)
    cases = cases_of(read_runs_table(path), H100, "test")
    assert all(c.plan.ep == 8 and c.model.moe is not None for c in cases)
    df["overlap_dp_comm"] = "sometimes"
    df.to_csv(path, index=False)
    with pytest.raises(InputError) as e:
        cases_of(read_runs_table(path), H100, "test")
    assert "overlap_dp_comm = 'sometimes'; valid: true or false" in str(e.value) and "\n" not in str(e.value)


def test_launch_queue_takes_the_longer_of_host_and_device_by_hand():
    """cost.host.launch_queue.queued: the host runs ahead of the device between synchronisations. Without pipelining a
    micro-batch is one stretch, max(D_f + D_b, H_f + H_b); in a pipeline each direction ends in a send, max(D_f,
    H_f) + max(D_b, H_b); on a CPU device the two add. Checked on numbers worked by hand."""
    from perfmodel.cost.host.launch_queue import queued, step_seconds

    d_f, d_b, h_f, h_b = np.array([3.0]), np.array([5.0]), np.array([4.0]), np.array([2.0])
    assert queued(d_f, d_b, h_f, h_b, False, False)[0] == 8.0  # max(3 + 5, 4 + 2)
    assert queued(d_f, d_b, h_f, h_b, True, False)[0] == 9.0  # max(3, 4) + max(5, 2)
    assert queued(d_f, d_b, h_f, h_b, False, True)[0] == 14.0  # 3 + 5 + 4 + 2
    assert queued(d_f, d_b, 2 * h_f, 2 * h_b, False, False)[0] == 12.0  # host-bound: 8 + 4
    # the step: one stretch without a pipeline (the host's lead of 2 s hides its 1 s optimizer loop), the
    # update after the last receive in one, everything added on a CPU (pipe 14 holds the host's 6)
    assert step_seconds(8.0, 8.0, 0.5, 6.0, 1.0, False, False) == 8.5  # max(8 + 0.5, 6 + 1)
    assert step_seconds(9.0, 8.0, 0.5, 6.0, 1.0, True, False) == 10.0  # 9 + max(0.5, 1)
    assert step_seconds(14.0, 8.0, 0.5, 6.0, 1.0, False, True) == 15.5  # 14 + 0.5 + 1


def test_host_is_hidden_behind_long_kernels_and_bounds_short_ones():
    """The stack's calls (hardware_specs/stacks, host:) priced on the system's host (hardware_specs/hosts): GPT-2
    124M at micro-batch 1 on one A100 under nanoGPT's eager loop is host-bound (the device idle a fifth of the step,
    waiting on launches, and the note says so); at micro-batch 64 the same launches hide behind the kernels. A layer's host seconds are its
    operators' calls and its own, by kind, x the DGX A100 host's cost per call x the in-context factor of the pass
    (cost.host.launch_queue.IN_CONTEXT), by hand from the two YAML files."""
    from perfmodel.cost.estimate import evaluate_plan
    from perfmodel.cost.host.launch_queue import IN_CONTEXT, PYTHON_KINDS
    from perfmodel.spec.model.operators import LAYER_OPS

    h = load_stack("nanogpt").host
    cost = load_hardware("dgx-a100-80gb").host_cpu.calls
    price = lambda counts, k: sum(n * cost.cost(c) * (IN_CONTEXT[k] if c in PYTHON_KINDS else 1)  # noqa: E731
                                  for c, n in counts.items())
    fwd = sum(price(h.ops[op].forward, "forward") for op in LAYER_OPS) + price(h.layer.forward, "forward")
    bwd = sum(price(h.ops[op].backward, "backward") for op in LAYER_OPS) + price(h.layer.backward, "backward")
    plan = dict(gpus=1, micro_batch=1, global_batch=1, seq_len=1024, stack="nanogpt")
    step, small = evaluate_plan("gpt2-124m", "dgx-a100-80gb", plan)
    assert small.host.layer_forward_s == pytest.approx(fwd, rel=1e-9)
    assert small.host.layer_backward_s == pytest.approx(bwd, rel=1e-9)
    assert small.host_bound and small.time_s.host > 0.2 * small.step_time_s
    assert any(n.startswith("GPU idle") and "host-bound" in n for n in small.notes)
    assert small.step_time_s == pytest.approx(small.host_s, rel=1e-6)  # host-bound: as long as the host takes
    big = evaluate_plan("gpt2-124m", "dgx-a100-80gb", {**plan, "micro_batch": 64, "global_batch": 64})[1]
    assert big.time_s.host == 0 and not big.host_bound and big.host_s == pytest.approx(small.host_s, rel=1e-9)
    # compiled: the compiled layer's calls (one region's entry and kernels) instead of the operators'
    comp = evaluate_plan("gpt2-124m", "dgx-a100-80gb", {**plan, "compile": "model+loss"})[1]
    cl = h.compiled_layer
    assert comp.host.layer_forward_s == pytest.approx(price(cl.forward, "forward"), rel=1e-9)
    assert comp.host.layer_forward_s < small.host.layer_forward_s


def test_tp_overlap_hides_each_collective_behind_its_own_gemm_by_hand():
    """cost.comm.sharded.tp_overlap: a layer's tp seconds split evenly over its GEMMs; each hides behind its own GEMM and
    no more, the GEMM losing `share` of its rate while they overlap."""
    from perfmodel.cost.comm.sharded import Comm, tp_overlap

    c = Comm("tp activations", "all_gather", "tp", nbytes=1.0, seconds=1.0, calls=4, fwd=np.array([4.0]),
             bwd=np.array([8.0]))
    gemm_f = [np.array([0.5]), np.array([2.0])]  # two GEMMs: 2 s of communication beside each
    gemm_b = [np.array([4.0]), np.array([4.0])]
    out = tp_overlap(c, gemm_f, gemm_b, 0.125, np.array([True]))
    # forward: max(0, 2 - 0.5) + 0.125 * 0.5 + max(0, 2 - 2) + 0.125 * 2 = 1.5 + 0.0625 + 0.25
    assert out.fwd[0] == pytest.approx(1.8125)
    # backward: 4 s beside each 4 s GEMM: hidden but for the SMs, 2 * 0.125 * 4
    assert out.bwd[0] == pytest.approx(1.0)
    off = tp_overlap(c, gemm_f, gemm_b, 0.125, np.array([False]))
    assert off.fwd[0] == 4.0 and off.bwd[0] == 8.0


def test_the_405b_example_hides_its_tp_communication_and_fits_with_nemos_gradients():
    """The Llama 3.1 405B example (2048 H100, tp 8 pp 8 cp 2 vpp 8, FP8, NeMo): 3.8 s of exposed TP
    communication without the stack's overlap; most of it hidden with it, and the step within 15% of the measured
    ~14 s (15.8 s since Hopper's measured sustained fraction, 0.81);
    NeMo keeps bf16 gradients (its distributed optimizer), so the plan that ran is not refused."""
    plan = dict(gpus=2048, tp=8, pp=8, cp=2, vpp=8, micro_batch=1, global_batch=1152, seq_len=8192,
                sequence_parallel=True, zero=1, precision="fp8", stack="nemo")
    on = pm.estimate("llama-3.1-405b", H100, plan)
    off = pm.estimate("llama-3.1-405b", H100, {**plan, "tp_comm_overlap": False})
    assert on.plan.tp_comm_overlap and on.plan.grad_dtype == "bf16"  # the stack's defaults, resolved into the plan
    tp = lambda e: next(c for c in e.comms if c.name == "tp activations")  # noqa: E731
    assert tp(on).total_s == pytest.approx(tp(off).total_s, rel=1e-9)  # the same traffic
    assert off.time_s.tp_comm > 3.0 and on.time_s.tp_comm < 0.25 * tp(on).total_s
    assert 14.0 < on.step_time_s < 16.1 < off.step_time_s
    assert on.fits_in_memory and on.memory_verdict in ("fits", "tight")
    fp32 = pm.estimate("llama-3.1-405b", H100, {**plan, "grad_dtype": "fp32"})
    assert fp32.memory_verdict == "does not fit" and "does not fit" in " ".join(fp32.notes)


def test_memory_verdict_is_three_way_by_hand():
    from perfmodel.cost.memory.fit import memory_verdict

    assert list(memory_verdict(np.array([60.0, 70.0, 78.0]), 69.3, 77.0)) == ["fits", "tight", "does not fit"]


def test_stack_host_blocks_are_the_counted_calls():
    """Every profile's host block is what benchmarks/tools/stack_host_profiles.py derives from the calls counted in the
    stacks' own code (benchmarks/results/host/call_counts.json) and the code read: no seconds, never typed in."""
    import json

    from benchmarks.tools import stack_host_profiles

    counts = json.loads(stack_host_profiles.COUNTS.read_text())
    for name, want in stack_host_profiles.profiles(counts).items():
        have = load_stack(name).host.model_dump(exclude_none=True)
        for k, v in want.items():
            if v is None:
                continue
            got = have[k]
            if isinstance(v, dict) and k in ("ops", "llama_style"):
                assert {op: (p["forward"], p["backward"]) for op, p in got.items()} == \
                    {op: (p["forward"], p["backward"]) for op, p in v.items()}, (name, k)
            else:
                assert got == v, (name, k)
    assert load_stack("maxtext").host is None  # one XLA executable per step


def test_old_plan_files_without_the_stacks_fields_load(tmp_path):
    """A plan file written before grad_dtype and tp_comm_overlap defaulted to the stack (its plan without them)
    loads, the stack's values filled in."""
    import json

    from perfmodel.spec.plan.file import load_plan_file

    src = Path(__file__).parents[1] / "strategies" / "llama-3-70b_1024xh100.json"
    data = json.loads(src.read_text())
    for k in ("grad_dtype", "tp_comm_overlap"):
        data["plan"].pop(k)
    (tmp_path / "old.json").write_text(json.dumps(data))
    pf = load_plan_file(tmp_path / "old.json")
    assert pf.plan.grad_dtype == "fp32" and pf.plan.tp_comm_overlap is False


def test_step_overhead_is_a_from_runs_flag(tmp_path, capsys):
    """--step-overhead fits a per-step time to measured runs; with microbenchmarks it is refused in one line, exit 2,
    before any benchmark runs, and nothing is written."""
    from perfmodel.cli.main import main

    assert main(["calibrate", "--device", "cpu", "--step-overhead", "--output", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: --step-overhead applies to --from-runs only (a per-step time fitted to measured runs)"
    assert not list(tmp_path.iterdir())
