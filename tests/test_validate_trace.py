"""`perfmodel validate --sweep NAME --calibrate-from-trace [--trace-plan NAME]`: bad combinations refused
in one line before anything runs; the shared scoring (validate.trace_check) on the lent H200's committed gpu-single
run, whose code path a GPU sweep takes; and one real reduced CPU sweep traced, calibrated from one plan's trace and
scored with that plan left out."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from perfmodel import estimate, load_hardware
from perfmodel.errors import InputError
from perfmodel.spec.plan.layout import Plan
from perfmodel.spec.stack.profile import EXECUTOR_STACK
from perfmodel.validate import sweeps
from perfmodel.validate.runner import validate
from perfmodel.validate.trace_check import TRACE_SPEC, calibrate_and_score, plans_of, trace_lines

ROOT = Path(__file__).resolve().parent.parent
H200_RUN = ROOT / "benchmarks" / "results" / "validation" / "gpu-single-h200-traced"
H200_TRACES = ROOT / "benchmarks" / "results" / "traces" / "gpu-single-h200"
CPU_SPEC = {  # hand-made (tests/test_validate.py's): the sweep's own spec, beside the uncalibrated and trace ones
    "name": "cpu-test", "description": "hand-made CPU spec for tests",
    "accelerator": {"name": "cpu-core", "vendor": "generic", "peak_tflops": {"bf16": 0.05, "fp32": 0.05},
                    "hbm_capacity_gib": 8, "hbm_bandwidth_tbps": 0.01, "compute_units": 1, "torch_device": "cpu"},
    "tiers": [{"name": "shm", "domain_size": None, "bandwidth_gbps": 2, "latency_us": 50,
               "collective_efficiency": 0.5}],
    "efficiency": {"matmul_max": {"bf16": 0.8}, "matmul_tile": [1, 1], "attention_max": 0.3,
                   "attention_half_seq": 10, "memory_bandwidth": 0.5},
    "memory_overhead_gib": 0.3,
}


def mape(pairs) -> float:
    """By hand: 100/n sum |p - m| / m."""
    return 100 * sum(abs(p - m) / m for p, m in pairs) / len(pairs)


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0] * len(xs)
    for k, i in enumerate(order):
        r[i] = k
    return r


def rho(p, m) -> float:
    """Spearman without ties: 1 - 6 sum d^2 / (n (n^2 - 1))."""
    n = len(p)
    d2 = sum((a - b) ** 2 for a, b in zip(ranks(p), ranks(m)))
    return 1 - 6 * d2 / (n * (n * n - 1))


@pytest.fixture
def no_executor(monkeypatch):
    def run_plans(*a, **k):
        raise AssertionError("the executor ran although the input was bad")
    monkeypatch.setattr("perfmodel.execute.run_plans.run_plans", run_plans)


@pytest.mark.parametrize("kwargs, match", [
    (dict(plans=[ROOT / "strategies" / "llama-3-70b_1024xh100.json"], calibrate_from_trace=True),
     "--calibrate-from-trace takes a built-in sweep, not plan files"),
    (dict(sweep="cpu-smoke", calibrate_from_trace=True, trace_plan="dp8"),
     "--trace-plan dp8: no plan of sweep cpu-smoke has that name; valid: dp4, dp4-mb1"),
    (dict(sweep="gpu-single", calibrate_from_trace=True, trace_plan="dp4"),
     "--trace-plan dp4: no plan of sweep gpu-single has that name; valid: gpt2-124m-mb1"),
    (dict(sweep="cpu-smoke", trace_plan="dp4"), "--trace-plan dp4 without --calibrate-from-trace"),
    (dict(sweep="cpu-infer", calibrate_from_trace=True), "--calibrate-from-trace with the serving sweep cpu-infer"),
])
def test_bad_combinations_are_refused_in_one_line(kwargs, match, tmp_path, no_executor):
    with pytest.raises(InputError, match=match) as err:
        validate(out_dir=tmp_path / "out", **kwargs)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_the_cli_refuses_them_with_exit_2(tmp_path, capsys, no_executor):
    from perfmodel.cli.main import main

    assert main(["validate", "--sweep", "cpu-smoke", "--calibrate-from-trace", "--trace-plan", "nope", "--out-dir",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--trace-plan nope" in err


def test_default_trace_plans_are_plans_of_their_sweeps():
    for name, plan in (("cpu-smoke", "dp4"), ("gpu-single", "gpt2-355m-mb8")):
        sw = sweeps.get_sweep(name)
        assert sw.trace_plan == plan and plan in [e.name for e in sw.plans]


def test_the_gpu_path_scores_the_committed_h200_sweep():
    """The lent H200's gpu-single run (traced and measured, committed): calibrated from gpt2-355m-mb8's trace, the
    other 13 plans are predicted closer than on the catalogue dgx-h200; every number in the
    table is recomputed here from the plan files and measurements."""
    plans = plans_of(H200_RUN / "plans")
    tc = calibrate_and_score(plans, H200_TRACES, H200_RUN / "plans", "gpt2-355m-mb8", "cuda", base="dgx-h200",
                             sweep_spec=load_hardware("dgx-h200"), sweep_label="catalogue")
    assert [c.label for c in tc.columns] == ["uncalibrated", "trace"]  # the catalogue spec is the uncalibrated one
    bare, trace = tc.column("uncalibrated"), tc.column("trace")
    assert bare.hardware == "dgx-h200" and trace.hardware == "dgx-h200-trace"
    assert bare.plans == len(plans) == 14 and trace.plans == 13
    rows = {r.plan: r for r in tc.rows}
    for name, (pf, m) in plans.items():  # the uncalibrated column is the public estimate on the catalogue system
        plan = pf.plan.model_copy(update={"stack": EXECUTOR_STACK})
        assert rows[name].predicted_step_s["uncalibrated"] == pytest.approx(
            estimate(pf.model, load_hardware("dgx-h200"), plan).step_time_s, rel=1e-9)
        assert rows[name].measured_step_s == m.step_time_s
    scored = [(r.predicted_step_s["trace"], r.measured_step_s) for r in tc.rows if r.plan != "gpt2-355m-mb8"]
    assert trace.step_mape_pct == pytest.approx(mape(scored))
    assert trace.spearman == pytest.approx(rho(*zip(*scored)))
    assert trace.step_mape_pct < bare.step_mape_pct  # 11.5% against 19.6% when committed
    text = "\n".join(trace_lines(tc))
    assert "gpt2-355m-mb8: the plan the trace came from" in text and "13 plans, the traced one left out" in text


def mini_sweep() -> sweeps.Sweep:
    """cpu-smoke's models and kinds of layout on 2 processes, 3 steps: a sweep small enough for the test suite."""
    def p(name, kind, **plan):
        plan.setdefault("micro_batch", 2)
        return sweeps.SweepPlan(name=name, model="tiny-gpt2", kind=kind, plan=Plan(
            stack=EXECUTOR_STACK, gpus=2, global_batch=4, seq_len=128, **plan))
    return sweeps.Sweep(name="cpu-mini", description="test", device="cpu", nproc=2,
                        models={"tiny-gpt2": sweeps.TINY_GPT2}, steps=3, warmup=1, rounds=1, trace_plan="dp2",
                        plans=[p("dp2", "DP", dp=2), p("dp2-mb1", "DP, micro-batch 1", dp=2, micro_batch=1),
                               p("pp2", "PP 1F1B", pp=2, micro_batch=1), p("fsdp2", "FSDP", dp=2, zero=3)])


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the executor)")
def test_a_cpu_sweep_traced_calibrated_from_one_plan_and_scored_on_the_others(tmp_path, monkeypatch):
    monkeypatch.setitem(sweeps.SWEEPS, "cpu-mini", mini_sweep())
    spec = tmp_path / "cpu.yaml"
    spec.write_text(yaml.safe_dump(CPU_SPEC))
    out = tmp_path / "out"
    res = validate(sweep="cpu-mini", hardware=spec, out_dir=out, calibrate_from_trace=True, timeout_s=240,
                   echo=lambda line: None)
    tc = res.trace_calibration
    assert tc.traced_plan == "dp2" and tc.traces == str(out / "traces" / "dp2")
    assert sorted(p.name for p in (out / "traces" / "dp2").iterdir()) == ["rank-0.pt.trace.json.gz",
                                                                         "rank-1.pt.trace.json.gz"]
    assert [c.label for c in tc.columns] == ["uncalibrated", "cpu-test", "trace"]
    assert [c.plans for c in tc.columns] == [4, 4, 3]
    measured = {r.plan: r.measured_step_s for r in res.rows}
    assert {r.plan: r.measured_step_s for r in tc.rows} == measured  # the same measured steps as the sweep's table
    for r in tc.rows:  # the sweep's own column is validate's prediction
        assert r.predicted_step_s["cpu-test"] == pytest.approx(
            next(x.predicted_step_s for x in res.rows if x.plan == r.plan), rel=1e-9)
    scored = [(r.predicted_step_s["trace"], r.measured_step_s) for r in tc.rows if r.plan != "dp2"]
    assert tc.column("trace").step_mape_pct == pytest.approx(mape(scored))
    # the calibrated spec is written and loads; the traced plan's host costs fill its measured step
    system = load_hardware(out / TRACE_SPEC)
    assert system.host_costs is not None and system.host_costs.probes[0].measured_s == measured["dp2"]
    traced = next(r for r in tc.rows if r.plan == "dp2")
    if system.host_costs.kernel_s > 0:
        assert traced.predicted_step_s["trace"] == pytest.approx(measured["dp2"], rel=1e-3)
    text = res.text()
    assert "calibrated from the trace of dp2" in text and "3 plans, the traced one left out" in text
    json.loads(res.model_dump_json())  # the result, trace calibration included, serializes
