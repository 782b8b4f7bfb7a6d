"""`perfmodel calibrate --from-trace` on traces other people wrote and on the lent H200's: what it reads
agrees with an independent count of the same events, a GPU trace calibrates GEMM rates that reproduce the traced
GEMMs, and bad traces are refused in one line (exit 2). The executor's own traces: tests/test_execute_trace.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from perfmodel.calibrate.trace.from_trace import calibrate_from_trace
from perfmodel.calibrate.trace.reader import LAUNCH_CALLS, load_traces
from perfmodel.calibrate.trace.summary import summarize
from perfmodel.cli.main import main
from perfmodel.errors import InputError

HERE = Path(__file__).parent
HTA = HERE / "fixtures" / "traces" / "hta"
H200 = HERE.parent / "benchmarks" / "results" / "traces" / "gpu-single-h200"
FIELDS = {"device", "ranks", "steps", "step_s", "gpu_busy_fraction", "host_wait_fraction", "launch_s", "kernels",
          "collectives", "gemm", "not_calibrated", "job_gemm", "assumed"}


def events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def steps_of(ev: list[dict]) -> list[tuple[float, float]]:
    return [(e["ts"], e["ts"] + e["dur"]) for e in ev
            if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]


def inside(ts: float, steps) -> bool:
    return any(a <= ts < b for a, b in steps)


def independent_busy(ev: list[dict]) -> float:
    """Share of the steps some kernel or copy ran, by marking each tenth of a microsecond (a different method from
    the reader's interval union)."""
    steps, res = steps_of(ev), 10.0  # cells per microsecond
    lo = min(a for a, _ in steps)
    covered = np.zeros(int((max(b for _, b in steps) - lo) * res) + 2, bool)
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and inside(e["ts"], steps):
            covered[int(round((e["ts"] - lo) * res)): int(round((e["ts"] + e["dur"] - lo) * res))] = True
    span = sum(b - a for a, b in steps)
    return covered.sum() / res / span


@pytest.mark.parametrize("files", [["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"], ["nccl_data.json.gz"],
                                   ["mi250_rocm.json.gz"]])
def test_summary_agrees_with_an_independent_count_of_the_same_events(files):
    paths = [HTA / f for f in files]
    s = summarize(load_traces(paths))
    assert s.ranks == len(files)
    evs = [events(p) for p in paths]
    steps = [steps_of(ev) for ev in evs]  # each file's steps, found once (not once per event)
    launches = [e["dur"] for ev, st in zip(evs, steps) for e in ev if e["name"] in LAUNCH_CALLS and inside(e["ts"], st)]
    assert s.launch_s == pytest.approx(np.mean(launches) * 1e-6, rel=0.02)
    assert s.gpu_busy_fraction == pytest.approx(np.mean([independent_busy(ev) for ev in evs]), rel=0.02)
    kernels = sum(1 for ev, st in zip(evs, steps) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and inside(e["ts"], st))
    assert sum(c.count for c in s.kernels.values()) * s.steps * s.ranks == pytest.approx(kernels)
    assert 0 <= s.host_wait_fraction <= 1 - s.gpu_busy_fraction + 1e-9


def test_nccl_collective_bytes_are_the_record_param_comms_sizes():
    """The A100 trace's all-reduces: bytes per call = In msg nelems x the dtype's bytes, as its record_param_comms
    ops state them, and the bus bandwidth NCCL-tests' 2 (n - 1) / n of bytes over the median call's time."""
    path = HTA / "nccl_data.json.gz"
    s = summarize(load_traces([path]))
    ev = events(path)
    comms = {e["args"]["External id"]: e["args"] for e in ev if e["name"] == "record_param_comms"}
    sizes = {"Float": 4, "BFloat16": 2, "Half": 2, "Int": 4, "Long": 8, "Byte": 1}
    nbytes = []
    steps = steps_of(ev)
    for e in ev:
        args = e.get("args", {})
        if e.get("cat") == "kernel" and "AllReduce" in e["name"] and inside(e["ts"], steps):
            rpc = {**comms.get(args.get("External id"), {}), **args}
            nbytes.append(int(rpc["In msg nelems"]) * sizes[rpc["dtype"]])
    ar = s.collectives["all_reduce/2"]
    assert ar.calls * s.steps == len(nbytes)
    assert ar.bytes == pytest.approx(np.mean(nbytes), rel=0.02)


def test_a_rocm_trace_is_read_as_an_amd_gpu():
    s = summarize(load_traces([HTA / "mi250_rocm.json.gz"]))
    assert "AMD" in s.device and s.launch_s > 0  # hipLaunchKernel
    assert set(s.model_dump()) == FIELDS


def test_a_gpu_trace_calibrates_rates_that_reproduce_its_gemms():
    """The lent H200's trace of GPT-2 355M, micro-batch 8: the fitted matmul_max and tile price the aligned GEMMs of
    the trace within the fit's residual, and the result is a loadable dgx-h200 spec."""
    system, summary, fit = calibrate_from_trace([H200 / "gpt2-355m-mb8"], hardware="dgx-h200")
    assert system.name == "dgx-h200-trace" and summary.device == "NVIDIA H200"
    gemm = next(r for r in fit.residuals if r.quantity == "gemm")
    assert gemm.points == 6 and gemm.median_abs_error < 0.15  # the 3 LM-head shapes (50257) are alignment-1 kernels
    assert 0.5 < system.efficiency.matmul_max["bf16"] <= 1.0
    # the executor's GPT-2 layer has six linears (q, k, v, out, MLP in, MLP out), each a forward, an input-gradient
    # and a weight-gradient GEMM: 24 x 6 x 3 + the LM head's 3 = 435 GEMM operators and as many GEMM kernels a step
    assert sum(g.calls for g in summary.gemm.values()) == 435 == summary.kernels["gemm"].count


def test_without_gemm_shapes_it_says_what_it_cannot_calibrate(capsys):
    path = str(HTA / "sampled_rank-0.json.gz")
    assert main(["calibrate", "--from-trace", path, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == FIELDS and out["not_calibrated"][0]["what"] == "a calibrated spec"
    # asked to write a spec it cannot calibrate (no deviceProperties: which GPU?): refused, nothing written
    assert main(["calibrate", "--from-trace", path, "--output", "x.yaml"]) == 2
    assert "records no deviceProperties" in capsys.readouterr().err and not Path("x.yaml").exists()


def bad_traces(tmp: Path) -> dict[str, tuple[Path, str]]:
    good = (HTA / "mi250_rocm.json.gz").read_bytes()
    cases = {"empty": (b"", "is empty"), "truncated gzip": (good[: len(good) // 2], "truncated or damaged gzip"),
             "not JSON": (b"hello, not json", "is not JSON"),
             "no kernels": (json.dumps({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
                                                         "ts": 0, "dur": 10}]}).encode(), "no GPU kernels"),
             "no events list": (b'{"schemaVersion": 1}', "no traceEvents")}
    out = {}
    for name, (data, words) in cases.items():
        p = tmp / f"{name.replace(' ', '_')}.json"
        p.write_bytes(data)
        out[name] = (p, words)
    return out


def test_bad_traces_are_refused_in_one_line_with_exit_2(tmp_path, capsys):
    for name, (path, words) in bad_traces(tmp_path).items():
        assert main(["calibrate", "--from-trace", str(path), "--output", str(tmp_path / "s.yaml")]) == 2, name
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and words in err and str(path) in err, (name, err)
        assert not (tmp_path / "s.yaml").exists()
    assert main(["calibrate", "--from-trace", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["calibrate", "--from-trace", str(HTA / "mi250_rocm.json.gz"), "--device", "cpu"]) == 2
    assert "drop --device" in capsys.readouterr().err
    with pytest.raises(InputError, match="rank 0 appears in 2 files"):
        load_traces([HTA / "nccl_data.json.gz", HTA / "mi250_rocm.json.gz"])


def test_predict_prices_a_plan_on_the_spec_its_trace_calibrates(capsys):
    """predict --trace: the same plan flags priced on the trace's calibrated spec, named after its base; a trace of
    another GPU than --hardware's, --trace with a plan file, and --trace without a plan are refused in one line."""
    trace = str(H200 / "gpt2-355m-mb8")
    flags = ["--model", "gpt2-350m", "--gpus", "1", "--tp", "1", "--pp", "1", "--micro-batch", "8", "--global-batch",
             "8", "--seq-len", "1024", "--stack", "plain-torch", "--format", "json"]
    assert main(["predict", "--trace", trace, *flags]) == 0
    traced = json.loads(capsys.readouterr().out)
    assert main(["predict", "--hardware", "dgx-h200", *flags]) == 0
    catalogue = json.loads(capsys.readouterr().out)
    assert traced["hardware"] == "dgx-h200-trace" and catalogue["hardware"] == "dgx-h200"
    # the trace's GEMMs ran at its own rates: the GEMM part is the calibrated one, not the catalogue table's
    assert traced["time_s"]["gemm"] != pytest.approx(catalogue["time_s"]["gemm"], rel=0.01)
    for bad, words in ((["predict", "--trace", trace, "--hardware", "dgx-h100", *flags[:-2]], "the trace ran on"),
                       (["predict", "--trace", trace], "a plan you describe"),
                       (["predict", "--trace", trace, "--plan", "x.json"], "--trace with --plan")):
        assert main(bad) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and words in err, err


CPU_RUN = HERE.parent / "benchmarks" / "results" / "validation" / "cpu-vm-traced"
CPU_TRACES = HERE.parent / "benchmarks" / "results" / "traces" / "cpu-smoke-vm"


def _op(name, ts, dur, **args):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": 1, "pid": 1, "args": args}


def test_a_cpu_trace_splits_its_step_into_work_host_calls_by_kind_and_waits(tmp_path):
    """calibrate.trace.host on a hand-made 100 us step: each kind's host seconds are its calls' spans less the work
    inside them plus the gap before each, and the gap in which a gloo exchange ended is a wait, not the host's."""
    from perfmodel.calibrate.trace.host import host_kinds

    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "tid": 1, "pid": 1},
          _op("aten::linear", 2, 20),  # starts after a 2 us gap
          _op("aten::addmm", 4, 15), _op("aten::copy_", 5, 3),  # the GEMM with its bias copy: 15 us of work
          _op("aten::view", 24, 2),  # a 2 us gap, 2 us, nothing computed
          _op("autograd::engine::evaluate_function: MmBackward0", 30, 20),  # a 4 us gap
          _op("aten::mm", 33, 12),  # 12 us of work inside the node
          _op("aten::_fused_adamw_", 80, 5),  # after the last node, a 30 us gap in which the all-reduce ended
          _op("aten::detach", 90, 1),  # a 5 us gap
          {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 40, "dur": 30, "tid": 2, "pid": 1,
           "args": {"Input Dims": [[4]], "Input type": ["float"]}}]
    path = tmp_path / "rank-0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": ev, "distributedInfo": {"rank": 0, "world_size": 1}}))
    k = host_kinds(load_traces([path]))
    us = lambda x: x * 1e6  # noqa: E731
    assert us(k["eager"][1]) == pytest.approx(2 + (20 - 15)) and k["eager"][0] == 1
    assert us(k["view"][1]) == pytest.approx(2 + 2) and k["view"][0] == 1
    assert us(k["node"][1]) == pytest.approx(4 + (20 - 12)) and k["node"][0] == 1
    assert us(k["tail"][1]) == pytest.approx(0 + 0 + 5 + 1) and k["tail"][0] == 2  # adamw is work; its gap a wait
    assert us(k["work"]) == pytest.approx(15 + 12 + 5) and us(k["wait"]) == pytest.approx(30)
    # everything in the step is one of work, host, wait or the 9 us after the last op
    host = sum(k[c][1] for c in ("eager", "view", "node", "tail"))
    assert us(k["work"] + host + k["wait"]) + 9 == pytest.approx(us(k["step"]))


def test_a_cpu_trace_prices_the_host_per_call_kind_and_it_carries_to_more_micro_batches():
    """The committed cpu-smoke run (this VM, 4 ranks): calibrated from dp4's trace, the estimate's host of dp4 is
    the trace's own host seconds (its calls by kind, the kinds' costs over the stack profile's counts of them), and
    dp4-mb1, the same 8 sequences as 2 micro-batches of 1 on each rank instead of 1 of 2, adds one more micro-batch's
    forward and backward calls at those costs: the trace's eager, view and autograd-node seconds again. The old
    per-launch fit put dp4's whole unexplained gap (194 ms) on its launches instead."""
    from perfmodel.calibrate.trace.host import host_kinds
    from perfmodel.cost.estimate import evaluate_plan
    from perfmodel.spec.measurement import load_measurement
    from perfmodel.spec.plan.file import load_plan_file

    step_s = load_measurement(CPU_RUN / "plans" / "dp4.measured.json").step_time_s
    system, summary, _ = calibrate_from_trace([CPU_TRACES / "dp4"], plan_path=CPU_RUN / "plans" / "dp4.json",
                                              step_s=step_s)
    assert system.host_costs.by_kind and system.host_costs.kernel_s == 0
    assert all(system.host_cpu.sources[f"calls.{k}_s"].startswith("measured")
               for k in ("eager_op", "view_op", "autograd_node", "list_tensor", "nccl_call"))
    k = host_kinds(load_traces([CPU_TRACES / "dp4"]))
    assert summary.step_s < step_s  # the untraced step is the longer here: no profiler cost is taken off
    host = {}
    for name in ("dp4", "dp4-mb1"):
        pf = load_plan_file(CPU_RUN / "plans" / f"{name}.json")
        step, _ = evaluate_plan(pf.model, system, pf.plan.model_copy(update={"stack": "plain-torch"}))
        host[name] = float(step.host_s[0])
    calls = k["eager"][1] + k["view"][1] + k["node"][1]  # one micro-batch's forward and backward
    nccl = system.host_cpu.calls.nccl_call_s  # the step's one DDP all-reduce call
    assert host["dp4"] == pytest.approx(calls + k["tail"][1] + nccl, rel=1e-6)
    assert host["dp4-mb1"] - host["dp4"] == pytest.approx(calls, rel=1e-6)


def test_a_cpu_trace_times_each_gemm_shape_by_its_mean_call():
    """On a CPU trace the ranks share cores, so a shape's seconds are each rank's mean call (what the step paid), the
    median over ranks (from_trace.CPU_PER_CALL): dp4's 256x256x256 mm, counted here from the spans themselves."""
    import statistics

    from perfmodel.calibrate.trace.from_trace import trace_measurements
    from perfmodel.calibrate.trace.reader import gemm_shape, innermost_gemm, op_seconds

    traces = load_traces([CPU_TRACES / "dp4"])
    point = next(p for p in trace_measurements(traces, "t").gemm if (p.m, p.n, p.k) == (256, 256, 256))
    means = []
    for t in traces:
        calls = [op_seconds(t, o) for o in t.ops if t.in_steps(o.t0) and innermost_gemm(o)
                 and gemm_shape(o) == (256, 256, 256)]
        means.append(sum(calls) / len(calls))
    assert point.seconds == pytest.approx(statistics.median(means), rel=1e-9)
    assert point.seconds > 1.5 * statistics.median(  # the median call misses the time descheduled (0.40 vs 0.81 ms)
        [op_seconds(t, o) for t in traces for o in t.ops if t.in_steps(o.t0) and innermost_gemm(o)
         and gemm_shape(o) == (256, 256, 256)])


def test_ddp_buckets_leave_the_last_bucket_exposed():
    """cost.comm.sharded.ddp_pieces: torch DDP's 1 MiB first bucket, then 25 MiB ones; the last bucket is what is left.
    dp4's 21157888 B of gradients: the trace's two all-reduces, 1051648 and 20106240 B (the model: 1048576 and the
    rest, 20109312, whole tensors left out); 60 MiB: 1 + 25 + 25 + 9, the last 9 MiB."""
    from perfmodel.cost.comm.sharded import bucketed, ddp_pieces

    MiB = 1 << 20
    assert float(ddp_pieces(21157888, (MiB, 25 * MiB))) == pytest.approx(21157888 / 20109312)
    assert float(ddp_pieces(60 * MiB, (MiB, 25 * MiB))) == pytest.approx(60 / 9)
    assert float(ddp_pieces(MiB // 2, (MiB, 25 * MiB))) == 1.0  # one bucket: all of it waits for the backward
    # a long backward hides all but the last bucket: 95% of dp4's reduction exposed
    p = ddp_pieces(21157888, (MiB, 25 * MiB))
    assert float(bucketed(1.0, 100.0, p)) == pytest.approx(20109312 / 21157888)


def _cpu_rank(ops, gloo):
    from perfmodel.calibrate.trace.reader import Op, RankTrace

    return RankTrace(path=Path("rank-0.json"), rank=0, world=2, device="cpu", device_type="cpu", vendor="", host="",
                     backend="gloo", group_sizes=[2], steps=[(0.0, 1.0)], stepped=True,
                     ops=[Op("aten::mm", a, b, 1, None, [[4, 4], [4, 4]], []) for a, b in ops], kernels=[],
                     launches=[], gloo=gloo, comm_args={}, device_bytes=0.0, launched={}, meta={})


def test_a_cpu_trace_measures_comm_overlap_from_its_collectives_beside_the_backward():
    """calibrate.trace.overlap by hand: the mm alone takes 10 ms (its two calls outside any collective); a 4 MB
    all-reduce alone (no operator inside its 40 ms) gives 1e-8 s/B, so the 1 MB one beside compute is t_m = 10 ms;
    inside its 30 ms window the mm ran 15 ms (t_both; half the window: beside compute), 10 ms alone (t_c):
    comm_overlap = (10 + 10 - 15) / min(10, 10) = 0.5. Slowed by all of t_m (25 ms inside): 0, serial."""
    from perfmodel.calibrate.trace.overlap import trace_overlap

    gloo = [{"kind": "all_reduce", "t0": 0.10, "t1": 0.13, "nbytes": 1_000_000, "dtype": "fp32"},
            {"kind": "all_reduce", "t0": 0.50, "t1": 0.54, "nbytes": 4_000_000, "dtype": "fp32"}]
    o = trace_overlap([_cpu_rank([(0.0, 0.01), (0.02, 0.03), (0.10, 0.115)], gloo)])
    assert (o.beside, o.alone) == (1, 1)
    assert (o.t_c, o.t_m, o.t_both) == pytest.approx((0.010, 0.010, 0.015))
    assert o.fraction == pytest.approx(0.5)
    assert trace_overlap([_cpu_rank([(0.0, 0.01), (0.02, 0.03), (0.10, 0.125)], gloo)]).fraction == 0.0
    lone = trace_overlap([_cpu_rank([(0.0, 0.01)], gloo[1:])])  # nothing ran beside compute: the base's stands
    assert lone.fraction is None and "no collective ran beside compute" in lone.why


def test_dp4_trace_calibrates_comm_overlap_near_serial_as_the_microbenchmark():
    """dp4's trace (4 ranks on 2 cores, gloo): its 8 first-bucket all-reduces beside the backward slowed the
    operators inside by more than their alone time (t_both - t_c > t_m): comm_overlap 0, where calibrate --device
    cpu measured 0.075 on the same VM; the summary no longer lists the overlap as not calibrated."""
    from perfmodel.calibrate.trace.overlap import trace_overlap

    dp4 = HERE.parent / "benchmarks" / "results" / "traces" / "cpu-smoke-vm" / "dp4"
    traces = load_traces([dp4])
    o = trace_overlap(traces)
    assert (o.beside, o.alone) == (8, 8)
    assert o.t_both - o.t_c > o.t_m > 0 and o.fraction == 0.0
    assert not any(m.what == "communication overlap" for m in summarize(traces).not_calibrated)
    plan = HERE.parent / "benchmarks" / "results" / "validation" / "cpu-vm-traced" / "plans" / "dp4.json"
    system, _, _ = calibrate_from_trace([dp4], plan_path=plan, step_s=0.4241)
    assert system.efficiency.comm_overlap == 0.0 and system.efficiency.comm_overlap_measured
    assert "calibrate.trace.overlap" in system.efficiency.sources["comm_overlap"]
