"""`perfmodel validate`: metrics by hand, the table from synthetic measurements, the built-in sweeps against the
cost model, the plot's points, bad input, the whole flow with a stand-in executor, and (with torch and the
executor present) one short real run on CPU."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from perfmodel import estimate, load_hardware
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import System
from perfmodel.spec.measurement import Measurement, RankRecord, measurement_path
from perfmodel.spec.plan.layout import Plan, layout_label, resolve
from perfmodel.spec.plan.file import load_plan_file, write_plan_file
from perfmodel.search.plan_writer import plan_file
from perfmodel.validate.sweeps import SWEEPS, TINY_GPT2, get_sweep
from perfmodel.cli.commands.validate import add_parser, run
from perfmodel.validate.common import catalogue_system_for
from perfmodel.validate.runner import validate
from perfmodel.validate.metrics import COLUMNS, CPU_MEMORY_CAVEAT, compare, error_pct, mape, spearman, summarize

GiB = 2**30

# A hand-made CPU spec (the numbers only need to be plausible; calibration writes real ones).
CPU_SPEC = {
    "name": "cpu-test", "description": "hand-made CPU spec for tests",
    "accelerator": {"name": "cpu-core", "vendor": "generic", "peak_tflops": {"bf16": 0.05, "fp32": 0.05},
                    "hbm_capacity_gib": 8, "hbm_bandwidth_tbps": 0.01, "compute_units": 1, "torch_device": "cpu"},
    "tiers": [{"name": "shm", "domain_size": None, "bandwidth_gbps": 2, "latency_us": 50,
               "collective_efficiency": 0.5}],
    "efficiency": {"matmul_max": {"bf16": 0.8}, "matmul_tile": [1, 1], "attention_max": 0.3,
                   "attention_half_seq": 10, "memory_bandwidth": 0.5},
    "memory_overhead_gib": 0.3,
}


@pytest.fixture(scope="module")
def cpu() -> System:
    return System.parse(CPU_SPEC)


@pytest.fixture
def cpu_yaml(tmp_path) -> Path:
    import yaml

    p = tmp_path / "cpu.yaml"
    p.write_text(yaml.safe_dump(CPU_SPEC))
    return p


def measurement(model, system, plan, rank_steps, rank_memory, warmup=2, path="x.json", notes=(),
                rounds=1) -> Measurement:
    plan = resolve(plan, model, system)
    return Measurement(
        plan_file=path, model=model, hardware=system, plan=plan,
        mesh={"pp": plan.pp, "dp": plan.dp, "cp": plan.cp, "tp": plan.tp},
        stage_layers=estimate(model, system, plan).stage_layers, device_type=system.accelerator.torch_device,
        backend="gloo", torch_version="2.13.0", nproc=plan.gpus, steps=len(rank_steps[0]) // rounds,
        warmup=warmup, rounds=rounds,
        dtype="fp32", memory_method="peak RSS (test)",
        ranks=[RankRecord(rank=r, device="test cpu", step_times_s=s, peak_memory_bytes=m)
               for r, (s, m) in enumerate(zip(rank_steps, rank_memory))],
        losses=[9.1, 9.0, 8.8], notes=list(notes), wall_s=1.0)


# ---------------------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------------------
def test_error_and_mape_by_hand():
    assert error_pct(110, 100) == pytest.approx(10)
    assert error_pct(0.8, 1.0) == pytest.approx(-20)
    assert mape([110, 90], [100, 100]) == pytest.approx(10)
    assert mape([1, 2, 3], [2, 2, 2]) == pytest.approx(100 / 3)  # |-50%|, 0, 50%
    assert mape([2.0], [2.0]) == 0
    with pytest.raises(ValueError):
        mape([1, 2], [1])


def test_spearman_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1)
    # ranks of y with a tie: [1, 2, 3.5, 5, 3.5]; rho = 8 / sqrt(10 * 9.5)
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    # one swap among 4: d = (0, 0, 1, -1), 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [5, 5, 5]) is None
    assert spearman([1.0], [2.0]) is None


# ---------------------------------------------------------------------------------------------------------
# Table from synthetic measurements
# ---------------------------------------------------------------------------------------------------------
def test_rounds_lowest_median_of_each_rounds_timed_steps(cpu):
    """Two ranks, 2 rounds of 4 steps (1 warm-up each): per-step job time is the slower rank; round 1's timed
    steps [0.9, 0.7, 0.8] (median 0.8), round 2's [0.5, 0.65, 0.6] (median 0.6): the step time is 0.6."""
    plan = Plan(gpus=2, dp=2, micro_batch=2, global_batch=8, seq_len=128)
    r0 = [3, 0.9, 0.7, 0.8, 3, 0.5, 0.6, 0.6]
    r1 = [2, 0.8, 0.6, 0.7, 2, 0.4, 0.65, 0.5]
    m = measurement(TINY_GPT2, cpu, plan, [r0, r1], [1.0 * GiB] * 2, warmup=1, rounds=2)
    assert m.round_steps() == [[0.9, 0.7, 0.8], [0.5, 0.65, 0.6]]
    assert m.step_time_s == pytest.approx(0.6)
    row = compare("r", "DP", 0.66, 1.0 * GiB, m)
    assert row.measured_step_s == pytest.approx(0.6) and row.step_error_pct == pytest.approx(10)
    assert row.step_spread == pytest.approx(0.65 / 0.5)  # within the round kept
    with pytest.raises(ValueError, match="step_times_s has 8 entries; valid: steps x rounds = 4 x 3 = 12"):
        Measurement(**{**m.model_dump(), "rounds": 3})


def test_row_uses_median_of_slowest_rank_after_warmup(cpu):
    plan = Plan(gpus=2, dp=2, micro_batch=2, global_batch=8, seq_len=128)
    # per-step job time = slowest rank: [1, 1, 0.55, 0.6, 0.8]; after 2 warm-up steps the median is 0.6
    m = measurement(TINY_GPT2, cpu, plan, [[1, 1, 0.5, 0.6, 0.7], [1, 1, 0.55, 0.5, 0.8]], [1.0 * GiB, 1.5 * GiB])
    row = compare("dp2", "DP", 0.66, 1.2 * GiB, m)
    assert row.measured_step_s == pytest.approx(0.6)
    assert row.step_spread == pytest.approx(0.8 / 0.55)
    assert row.step_error_pct == pytest.approx(10)
    assert row.measured_memory_gib == pytest.approx(1.5)
    assert row.memory_error_pct == pytest.approx(-20)
    assert row.layout == "dp2 mb2x2" and row.final_loss == pytest.approx(8.8)


def test_table_and_summary_from_synthetic_measurements(cpu):
    plans = {"dp2": Plan(gpus=2, dp=2, micro_batch=2, global_batch=8, seq_len=128),
             "pp2": Plan(gpus=2, pp=2, micro_batch=1, global_batch=8, seq_len=128),
             "tp2": Plan(gpus=2, tp=2, sequence_parallel=True, micro_batch=2, global_batch=8, seq_len=128)}
    measured_s = {"dp2": 0.5, "pp2": 0.4, "tp2": 1.0}
    predicted_s = {"dp2": 0.55, "pp2": 0.3, "tp2": 0.9}  # errors +10%, -25%, -10%; same ranking except dp2/pp2
    rows, ms = [], []
    for name, plan in plans.items():
        t = measured_s[name]
        m = measurement(TINY_GPT2, cpu, plan, [[2 * t, t, t, t]] * 2, [0.5 * GiB, 0.4 * GiB], warmup=1,
                        notes=["dropout is not run"] + (["pp note"] if name == "pp2" else []))
        ms.append(m)
        rows.append(compare(name, name.upper(), predicted_s[name], 0.6 * GiB, m))
    res = summarize(rows, sweep=None, device="cpu", nproc=2, hardware="cpu-test", hardware_source="test",
                    measurements=ms)
    df = res.table
    assert list(df.columns) == COLUMNS and list(df["plan"]) == ["dp2", "pp2", "tp2"]
    assert df["step_error_pct"].tolist() == pytest.approx([10, -25, -10])
    assert res.step_mape_pct == pytest.approx(15)
    assert res.memory_mape_pct == pytest.approx(20)
    # measured ranks pp2 < dp2 < tp2; predicted pp2 < dp2 < tp2: identical order
    assert res.spearman == pytest.approx(1.0)
    text = res.text()
    assert "MAPE 15.0%" in text and "Spearman 1.000" in text and "pp2 dp2" not in text
    assert CPU_MEMORY_CAVEAT in res.notes and "executor (every plan): dropout is not run" in res.notes
    assert "executor (pp2): pp note" in res.notes
    assert "peak memory measured by: peak RSS (test)" in res.notes
    # GPU results carry no CPU caveat
    gpu = summarize(rows, sweep=None, device="cuda", nproc=2, hardware="x", hardware_source="y")
    assert CPU_MEMORY_CAVEAT not in gpu.notes
    # targets: reported per target
    t = SWEEPS["cpu-smoke"].targets
    res.targets = t
    assert res.targets_met() == {"step-time MAPE <= 20%": True, "Spearman >= 0.8": True}


def test_layout_labels(cpu):
    p = resolve(Plan(gpus=4, pp=2, dp=2, vpp=2, micro_batch=1, global_batch=8, seq_len=128), TINY_GPT2, cpu)
    assert layout_label(p) == "pp2 dp2 vpp2 mb1x4"
    p = resolve(Plan(gpus=4, dp=2, tp=2, sequence_parallel=True, zero=3, recompute="selective", micro_batch=2,
                     global_batch=8, seq_len=128), TINY_GPT2, cpu)
    assert layout_label(p) == "dp2 tp2 sp z3 rc-sel mb2x2"


# ---------------------------------------------------------------------------------------------------------
# Sweep definitions
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_sweep_plans_resolve_with_nproc_ranks(name, cpu):
    sw = get_sweep(name)
    system = cpu if sw.device == "cpu" else load_hardware("dgx-h100")
    assert len({e.name for e in sw.plans}) == len(sw.plans)
    for e in sw.plans:
        model = sw.model_of(e)
        assert model.dropout == 0
        plan = resolve(e.plan, model, system)
        assert plan.gpus == plan.tp * plan.pp * plan.cp * plan.dp == sw.nproc, e.name
        est = estimate(model, system, plan)
        assert est.fits_in_memory, e.name


def test_cpu_smoke_covers_the_required_kinds(cpu):
    sw = get_sweep("cpu-smoke")
    assert sw.nproc == 4 and sw.device == "cpu" and len(sw.plans) >= 8
    plans = [resolve(e.plan, sw.model_of(e), cpu) for e in sw.plans]
    axes = lambda p: sum(v > 1 for v in (p.pp, p.dp, p.cp, p.tp))  # noqa: E731
    assert any(p.dp == 4 and p.zero == 0 for p in plans)  # DP
    assert any(p.dp == 4 and p.zero == 3 for p in plans)  # FSDP
    assert any(p.tp == 4 and p.sequence_parallel for p in plans)  # TP+SP
    assert any(p.pp > 1 and p.schedule == "1f1b" for p in plans)  # PP 1F1B
    assert any(p.schedule == "interleaved" and p.vpp == 2 for p in plans)  # PP interleaved
    assert {frozenset(a for a in ("pp", "dp", "tp") if getattr(p, a) > 1) for p in plans if axes(p) == 2} == \
        {frozenset({"pp", "dp"}), frozenset({"dp", "tp"}), frozenset({"pp", "tp"})}  # every 2-D composition
    assert {p.recompute for p in plans} == {"none", "selective", "full"}
    assert len({(p.micro_batch, p.num_microbatches) for p in plans if p.pp == 1 and p.tp == 1}) >= 2
    assert {m.mlp for m in sw.models.values()} == {"gelu", "swiglu"}
    # three axes > 1 need 8 ranks: the separate cpu-3d sweep holds them
    sw3 = get_sweep("cpu-3d")
    assert all(axes(resolve(e.plan, sw3.model_of(e), cpu)) == 3 for e in sw3.plans) and sw3.nproc == 8


def test_sweep_plan_files_are_written_and_load(cpu, tmp_path):
    sw = get_sweep("cpu-smoke")
    for e in sw.plans[:4]:
        path = write_plan_file(plan_file(sw.model_of(e), cpu, e.plan), tmp_path / f"{e.name}.json")
        assert load_plan_file(path).plan.gpus == 4


def test_gpu_single_models_and_plans():
    sw = get_sweep("gpu-single")
    sizes = {k: m.n_params() / 1e9 for k, m in sw.models.items()}
    assert sizes["gpt2-124m"] == pytest.approx(0.124, abs=0.002)
    assert sizes["gpt2-355m"] == pytest.approx(0.355, abs=0.003)
    assert sizes["gpt2-774m"] == pytest.approx(0.774, abs=0.003)
    assert sizes["gpt2-1.5b"] == pytest.approx(1.558, abs=0.01)
    assert 1.0 < sizes["llama-1b"] < 1.5
    plans = [e.plan for e in sw.plans]
    assert sw.nproc == 1 and len(plans) >= 10 and {p.precision for p in plans} == {"bf16"}
    assert {p.recompute for p in plans} == {"none", "selective", "full"}
    assert any(p.global_batch > p.micro_batch for p in plans) and len({p.micro_batch for p in plans}) >= 3


def test_gpu_catalogue_match():
    assert catalogue_system_for("NVIDIA H100 80GB HBM3") == "dgx-h100"
    assert catalogue_system_for("NVIDIA H200") == "dgx-h200"
    assert catalogue_system_for("NVIDIA A100-SXM4-80GB") == "dgx-a100-80gb"
    assert catalogue_system_for("NVIDIA B300 SXM6 AC") == "dgx-b300"
    assert catalogue_system_for("NVIDIA GB300") == "gb300-nvl72"  # not the B300 of an HGX board
    assert catalogue_system_for("NVIDIA GB200") == "gb200-nvl72"
    assert catalogue_system_for("NVIDIA H100 PCIe") is None  # not the SXM part of the catalogue
    assert catalogue_system_for(None) is None


# ---------------------------------------------------------------------------------------------------------
# Plot
# ---------------------------------------------------------------------------------------------------------
def test_plot_points_equal_table(cpu, tmp_path):
    from perfmodel.plots.validation_scatter import validation_axes, validation_figure

    plans = [Plan(gpus=2, dp=2, micro_batch=mb, global_batch=8, seq_len=128) for mb in (1, 2, 4)]
    rows = [compare(f"p{i}", "DP", 0.3 + 0.1 * i, (0.5 + 0.05 * i) * GiB,
                    measurement(TINY_GPT2, cpu, p, [[0.4 + 0.05 * i] * 4] * 2, [0.6 * GiB] * 2))
            for i, p in enumerate(plans)]
    res = summarize(rows, sweep="test", device="cpu", nproc=2, hardware="cpu-test", hardware_source="test")
    fig = validation_axes(res)
    step_ax, mem_ax = fig.axes[:2]
    for ax, pred, meas in ((step_ax, "predicted_step_s", "measured_step_s"),
                           (mem_ax, "predicted_memory_gib", "measured_memory_gib")):
        (pts,) = [c for c in ax.collections if c.get_gid() == "points"]
        xy = pts.get_offsets()
        assert xy[:, 0].tolist() == pytest.approx(res.table[meas].tolist())
        assert xy[:, 1].tolist() == pytest.approx(res.table[pred].tolist())
        assert [t.get_text() for t in ax.texts] == res.table["plan"].tolist()
        assert "(s)" in ax.get_xlabel() or "(GiB)" in ax.get_xlabel()
    assert "Spearman" in step_ax.get_title()
    out = validation_figure(res, tmp_path / "v.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------------------
# Bad input: one line, before anything runs or is written
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def no_executor(monkeypatch):
    """Any call into the executor fails the test."""

    def run_plans(*a, **k):
        raise AssertionError("the executor ran although the input was bad")
    monkeypatch.setattr("perfmodel.execute.run_plans.run_plans", run_plans)


@pytest.mark.parametrize("kwargs, match", [
    (dict(sweep="cpu-smok"), "sweep = 'cpu-smok' is not a built-in sweep; valid: cpu-smoke, cpu-3d, gpu-single"),
    (dict(), "needs plan files or --sweep NAME; valid sweeps: cpu-smoke"),
    (dict(sweep="cpu-smoke", plans=["a.json"]), "not both"),
    (dict(sweep="cpu-smoke", nproc=2), "--nproc = 2 does not match sweep cpu-smoke.*valid --nproc: 4"),
    (dict(sweep="cpu-smoke", device="cuda"), "valid --device: cpu"),
    (dict(sweep="cpu-smoke", hardware="dgx-h100"), "runs on cuda, the plans on cpu"),
    (dict(sweep="cpu-smoke", steps=3, warmup=3), "valid: steps >= 1 and 0 <= warmup < steps"),
    (dict(sweep="cpu-smoke", plot="x.svg"), "--plot 'x.svg'.*ending in .png"),
    (dict(sweep="cpu-smoke", plot="missing-dir/x.png"), "--plot 'missing-dir/x.png': directory 'missing-dir' does not exist"),
    (dict(sweep="cpu-smoke", csv="t.txt"), "--csv 't.txt'.*ending in .csv"),
    (dict(plans=["nope.json"]), "plan file 'nope.json' does not exist"),
    (dict(sweep="gpu-single", hardware="tpu-v5p"), "runs on xla, the plans on cuda"),
    (dict(sweep="cpu-smoke", checkpoint_async=True), "--checkpoint-async without --checkpoint-every"),
])
def test_bad_input(kwargs, match, tmp_path, monkeypatch, no_executor):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=match) as err:
        validate(out_dir=tmp_path / "out", **kwargs)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_bad_out_dir_and_plan_nproc(tmp_path, cpu, no_executor):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="--out-dir .* is a file"):
        validate(sweep="cpu-smoke", out_dir=tmp_path / "file")
    with pytest.raises(InputError, match="cannot be created"):
        validate(sweep="cpu-smoke", out_dir=tmp_path / "file" / "sub")
    sw = get_sweep("cpu-smoke")
    four = write_plan_file(plan_file(TINY_GPT2, cpu, sw.plans[0].plan), tmp_path / "four.json")
    two = write_plan_file(plan_file(TINY_GPT2, cpu, Plan(gpus=2, dp=2, micro_batch=2, global_batch=8, seq_len=128)),
                          tmp_path / "two.json")
    with pytest.raises(InputError, match="plan files need 2 and 4 processes"):
        validate([four, two], out_dir=tmp_path / "o")
    with pytest.raises(InputError, match="--nproc = 2 but the plan files need 4 processes"):
        validate([four], nproc=2, out_dir=tmp_path / "o")
    with pytest.raises(InputError, match="valid --device: cpu"):
        validate([four], device="cuda", out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_plans_that_do_not_fit(tmp_path, cpu, monkeypatch):
    """A sweep leaves out plans predicted not to fit (one OOM would stop the launch); plan files are refused."""
    seen = []

    def run_plans(paths, nproc, **k):
        seen.extend(p.name for p in paths)
        raise SystemExit("stop")  # the test only needs what would run
    monkeypatch.setattr("perfmodel.execute.run_plans.run_plans", run_plans)
    h100 = load_hardware("dgx-h100").model_dump()
    small = System.parse({**h100, "name": "h100-24g", "accelerator": {**h100["accelerator"], "hbm_capacity_gib": 24}})
    (tmp_path / "small.yaml").write_text(json.dumps(small.model_dump()))
    sw = get_sweep("gpu-single")
    fits = [e.name for e in sw.plans if estimate(sw.model_of(e), small, e.plan).fits_in_memory]
    assert 0 < len(fits) < len(sw.plans)
    with pytest.raises(SystemExit):
        validate(sweep="gpu-single", hardware=tmp_path / "small.yaml", out_dir=tmp_path / "o", echo=lambda line: None)
    assert seen == [f"{n}.json" for n in fits]
    tiny = System.parse({**CPU_SPEC, "accelerator": {**CPU_SPEC["accelerator"], "hbm_capacity_gib": 0.31}})
    path = write_plan_file(plan_file(TINY_GPT2, cpu, get_sweep("cpu-smoke").plans[0].plan), tmp_path / "p.json")
    pf = load_plan_file(path)
    path.write_text(pf.model_copy(update={"hardware": tiny}).model_dump_json())
    with pytest.raises(InputError, match="predicted not to fit in memory on cpu-test"):
        validate([path], out_dir=tmp_path / "o2")
    assert not (tmp_path / "o2").exists()


def test_cli_parser_and_errors(tmp_path, no_executor):
    ap = argparse.ArgumentParser(prog="perfmodel")
    add_parser(ap.add_subparsers(dest="cmd"), "validate", "")
    a = ap.parse_args(["validate", "--sweep", "gpu-single", "--nproc", "4", "--out-dir", str(tmp_path / "o")])
    with pytest.raises(InputError, match="valid --nproc: 1"):
        run(a)
    a = ap.parse_args(["validate", "a.json", "--steps", "5", "--plot", "p.png", "--full-calibration"])
    assert a.plans == ["a.json"] and a.steps == 5 and a.full_calibration and a.device == "auto"
    with pytest.raises(SystemExit):
        ap.parse_args(["validate", "--steps", "0"])


# ---------------------------------------------------------------------------------------------------------
# The whole flow with a stand-in executor (no torch): plan files, predictions, CSV, plot
# ---------------------------------------------------------------------------------------------------------
def test_validate_flow_with_stand_in_executor(tmp_path, cpu_yaml, monkeypatch):
    calls = []

    def run_plans(paths, nproc, *, device, steps, warmup, rounds, log_dir, timeout_s, echo, trace_dir=None):
        calls.append((list(paths), nproc, device, steps, warmup, rounds))
        out = []
        for i, p in enumerate(paths):
            pf = load_plan_file(p)
            t = pf.prediction.step_time_s * (1 + 0.05 * i)  # measured 0%, 5%, 10%, ... above the prediction
            # every round but the last disturbed (x2): the step time is the lowest round's median
            times = [t * (2 if k < rounds - 1 else 1) for k in range(rounds) for _ in range(steps)]
            m = measurement(pf.model, pf.hardware, pf.plan, [times] * nproc, [0.5 * GiB] * nproc,
                            warmup=warmup, path=str(p), rounds=rounds)
            out.append(m)
            measurement_path(p).write_text(m.model_dump_json())
        return out

    monkeypatch.setattr("perfmodel.execute.run_plans.run_plans", run_plans)
    out = tmp_path / "out"
    res = validate(sweep="cpu-smoke", nproc=4, hardware=cpu_yaml, out_dir=out, plot=out / "v.png",
                   echo=lambda line: None)
    sw = get_sweep("cpu-smoke")
    assert len(calls) == 1 and calls[0][1:] == (4, "cpu", sw.steps, sw.warmup, sw.rounds)  # one launch, all plans
    assert sw.rounds > 1
    assert [p.name for p in calls[0][0]] == [f"{e.name}.json" for e in sw.plans]
    assert all(load_plan_file(p).hardware.name == "cpu-test" for p in calls[0][0])
    assert res.hardware == "cpu-test" and res.device == "cpu" and res.sweep == "cpu-smoke"
    errs = [-100 * 0.05 * i / (1 + 0.05 * i) for i in range(len(sw.plans))]
    assert res.table["step_error_pct"].tolist() == pytest.approx(errs)
    assert res.spearman == pytest.approx(spearman(res.table["predicted_step_s"].tolist(),
                                                  res.table["measured_step_s"].tolist()))
    csv = pd.read_csv(out / "validation.csv")
    assert list(csv.columns) == COLUMNS and csv["measured_step_s"].tolist() == pytest.approx(
        res.table["measured_step_s"].tolist())
    assert (out / "v.png").stat().st_size > 10_000 and res.plot_path == str(out / "v.png")
    assert "wrote csv" in res.text()
    # memory is compared in the allocated view: no runtime (the spec's 0.3 GiB overhead), no allocator slack
    first = sw.plans[0]
    mb = estimate(sw.model_of(first), System.parse(CPU_SPEC), first.plan).memory_bytes
    assert res.rows[0].predicted_memory_gib == pytest.approx(mb.allocated / GiB)
    assert mb.fragmentation == 0 and mb.device == pytest.approx(mb.allocated + 0.3 * GiB)  # a CPU: no cache
    assert any("memory compared view by view" in n for n in res.notes)


# ---------------------------------------------------------------------------------------------------------
# Real: one short validate on CPU (needs torch and the executor)
# ---------------------------------------------------------------------------------------------------------
def _executor_ready() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    try:
        from perfmodel.execute.run_plans import run_plans  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _executor_ready(), reason="needs torch and perfmodel.execute")
def test_real_validate_on_cpu(tmp_path, cpu, cpu_yaml):
    plans = {"dp2": Plan(gpus=2, dp=2, micro_batch=2, global_batch=8, seq_len=128),
             "pp2": Plan(gpus=2, pp=2, micro_batch=2, global_batch=8, seq_len=128)}
    paths = [write_plan_file(plan_file(TINY_GPT2, cpu, p), tmp_path / f"{n}.json") for n, p in plans.items()]
    res = validate(paths, nproc=2, hardware=cpu_yaml, out_dir=tmp_path / "out", steps=3, warmup=1,
                   timeout_s=120, echo=lambda line: None)
    df = res.table
    assert df["plan"].tolist() == list(plans) and (df["measured_step_s"] > 0).all()
    assert (df["measured_memory_gib"] > 0).all() and res.spearman is not None
    assert all(measurement_path(p).exists() for p in paths)
    assert (tmp_path / "out" / "validation.csv").exists()
