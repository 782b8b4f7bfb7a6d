"""`perfmodel execute --trace DIR`: a Kineto chrome trace per rank of steps run after the timed ones
(execute.tracing), outside the measurement."""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter

import numpy as np

import pytest

torch = pytest.importorskip("torch")  # CI installs torch (README test command); the core install does not

from perfmodel.cli.main import main  # noqa: E402
from perfmodel.execute.tracing import PROFILER_WARMUP, TRACED_STEPS, trace_path  # noqa: E402
from perfmodel.spec.measurement import load_measurement  # noqa: E402
from perfmodel.spec.plan.file import write_plan_file  # noqa: E402
from test_execute import LLAMA, plan_file  # noqa: E402

STEPS = 3


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A two-rank tensor-parallel plan run with --trace: (plan path, trace folder, measurement, printed text)."""
    tmp = tmp_path_factory.mktemp("traced")
    path = write_plan_file(plan_file(LLAMA, gpus=2, tp=2, sequence_parallel=True), tmp / "tp2.json")
    out, traces = tmp / "tp2.measured.json", tmp / "traces"
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["execute", str(path), "--nproc", "2", "--device", "cpu", "--steps", str(STEPS), "--warmup",
                     "1", "--output", str(out), "--trace", str(traces)]) == 0
    return path, traces, load_measurement(out), printed.getvalue()


def read(path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def test_each_rank_writes_its_trace_of_the_steps_after_the_timed_ones(traced):
    path, traces, m, printed = traced
    assert len(m.step_times()) == STEPS  # the traced steps are not among the measured ones
    assert any(f"{TRACED_STEPS} more steps traced" in n for n in m.notes)
    assert f"wrote traces under {traces}" in printed
    assert sorted(os.listdir(traces / "tp2")) == ["rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"]
    for rank in (0, 1):
        trace = read(trace_path(traces, path, rank))
        assert trace["perfmodel_plan"] == "tp2.json" and trace["perfmodel_rank"] == rank
        assert trace["perfmodel_world_size"] == 2
        assert trace["distributedInfo"]["rank"] == rank and trace["distributedInfo"]["world_size"] == 2
        events = trace["traceEvents"]
        steps = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
        # the profiler's warm-up step is run but not recorded: the recorded ones follow it
        assert steps == [f"ProfilerStep#{PROFILER_WARMUP + i}" for i in range(TRACED_STEPS)]
        names = Counter(e["name"] for e in events if e.get("ph") == "X")
        # tensor parallelism with sequence parallelism gathers and reduce-scatters every layer: the c10d ops on
        # the main thread, gloo's own spans (user annotations) on its worker thread
        assert names["gloo:all_gather"] > 0 and names["c10d::reduce_scatter_tensor_coalesced_"] > 0
        mm = [e for e in events if e.get("name") == "aten::mm"]
        assert mm and all("Input Dims" in e["args"] for e in mm)  # shapes recorded (record_shapes)


def test_trace_flag_refuses_what_it_cannot_write(tmp_path, capsys):
    path = write_plan_file(plan_file(LLAMA, gpus=1), tmp_path / "one.json")
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["execute", str(path), "--nproc", "1", "--device", "cpu", "--trace", str(afile)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is a file" in err and "--trace" in err
    other = tmp_path / "other"
    other.mkdir()
    twin = write_plan_file(plan_file(LLAMA, gpus=1), other / "one.json")
    assert main(["execute", str(path), str(twin), "--nproc", "1", "--device", "cpu", "--trace",
                 str(tmp_path / "t")]) == 2
    assert "two plan files named one.json" in capsys.readouterr().err
    assert not (tmp_path / "perfmodel-runs").exists() and not (tmp_path / "t").exists()


def test_a_cpu_trace_calibrates_a_spec_that_reproduces_the_traced_step(traced, tmp_path, capsys):
    """calibrate --from-trace on the executor's own two-rank trace with its plan: the spec's estimate of that plan
    is its measured step (the host costs fill what the trace's rates leave), every GEMM operator is counted, and
    the CLI writes a spec that loads."""
    from perfmodel.calibrate.trace.from_trace import calibrate_from_trace
    from perfmodel.cost.estimate import evaluate_plan
    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.spec.plan.file import load_plan_file

    path, traces, m, _ = traced
    system, summary, fit = calibrate_from_trace([traces / "tp2"], plan_path=path, step_s=m.step_time_s)
    assert summary.ranks == 2 and summary.steps == TRACED_STEPS and summary.gpu_busy_fraction is None
    pf = load_plan_file(path)
    est = evaluate_plan(pf.model, system, pf.plan.model_copy(update={"stack": "plain-torch"}))[1]
    assert system.host_costs.collective_s > 0  # DTensor's functional collectives, on the ranks' own threads
    if system.host_costs.kernel_s > 0:  # the gap was the host's: filled exactly
        assert est.step_time_s == pytest.approx(m.step_time_s, rel=1e-3)
    # independent count: the innermost mm / addmm operators inside the recorded steps, per rank and step
    counts = []
    for rank in (0, 1):
        ev = [e for e in read(trace_path(traces, path, rank))["traceEvents"] if e.get("ph") == "X"]
        steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#")]
        mms = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm")
               and any(a <= e["ts"] < b for a, b in steps)]
        nested = sum(1 for outer in mms for inner in mms if inner is not outer and inner["tid"] == outer["tid"]
                     and outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"])
        counts.append((len(mms) - nested) / len(steps))
    assert sum(g.calls for g in summary.gemm.values()) == pytest.approx(np.mean(counts))
    out = tmp_path / "traced.yaml"
    assert main(["calibrate", "--from-trace", str(traces / "tp2"), "--plan", str(path), "--output", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert load_hardware(out).host_costs.kernel_s >= 0
