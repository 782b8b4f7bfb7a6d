"""What a profiler trace measured (`perfmodel calibrate --from-trace PATH --format json`): the step, how busy the device
was and how long it waited for the host, the launch cost, each kernel class's count and seconds, each collective's
bytes and bus bandwidth, each GEMM shape's rate, and what the trace could not determine. Counts and seconds are per
step of the average rank (the sum over the recorded steps and ranks, over steps x ranks); fractions are of the step.
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import Field

from ...types import Schema
from .comms import bus_bandwidth, collectives, group_size_of
from .reader import (
    RankTrace, dtype_of, gemm_shape, host_wait_seconds, innermost_gemm, leaf_work, op_class, op_seconds, union_seconds,
)


class ClassTime(Schema):
    count: float = Field(description="kernels (CPU: leaf operators) of the class per step")
    seconds: float = Field(description="their seconds per step")


class CollectiveTime(Schema):
    calls: float = Field(description="calls per step")
    bytes: float = Field(description="bytes per call (the full tensor, NCCL-tests' size)")
    seconds: float = Field(description="seconds per step in these calls")
    bus_bw_gbps: float = Field(description="NCCL-tests' bus bandwidth of the median call, GB/s")


class GemmTime(Schema):
    calls: float = Field(description="calls per step")
    seconds: float = Field(description="seconds per step")
    tflops: float = Field(description="2 m n k per call over its seconds, TFLOP/s")


class Missing(Schema):
    what: str
    why: str


class JobGemm(Schema):
    """The traced job's GEMM kernels, found by name, against its plan's FLOPs (calibrate.trace.gemm)."""

    plan: str = Field(description="the plan the job ran: --plan's file or --config's files")
    precision: str = Field(description="the dtype of most of the GEMM seconds (kernel names' tags, else the plan's)")
    seconds: dict[str, float] = Field(description="per dtype: GEMM kernel seconds per step, the mean traced rank")
    kernels: float = Field(description="GEMM kernels per step, the mean traced rank")
    batched_s: float = Field(description="seconds per step of batched GEMMs (bmm) left out: a dense model's "
                                         "unfused attention core, priced as attention")
    flops: float = Field(description="the plan's GEMM FLOPs per step on the traced ranks' stages, as the cost model "
                                     "counts them (forward, backward, recomputed forward)")
    tflops: float = Field(description="flops over all the GEMM seconds, TFLOP/s")
    efficiency: float | None = Field(description="flops / sum over dtypes of (seconds x the dtype's dense peak); "
                                                 "null where the device's peak is not known (a GPU the catalogue "
                                                 "lacks: its rate is the trace's)")
    stages: list[int] = Field(description="the pipeline stages of the traced ranks (Megatron-LM's rank order)")
    memory_s: float = Field(0.0, description="seconds per step in memory-bound kernels (the optimizer's update left "
                                             "out), the mean traced rank")
    estimate_s: float | None = Field(None, description="the calibrated spec's GEMM seconds per step of the plan on "
                                                       "those stages (cost model): the trace's, where matmul_max "
                                                       "was fitted to them")


class TraceSummary(Schema):
    """The stable JSON of `calibrate --from-trace --format json`."""

    device: str = Field(description="the device the trace ran on (deviceProperties' name, or the CPU)")
    ranks: int = Field(description="rank traces read")
    steps: int = Field(description="recorded steps per rank (ProfilerStep spans; 1 where the trace has none)")
    step_s: float = Field(description="mean step, seconds (the slowest rank of each step)")
    gpu_busy_fraction: float | None = Field(description="share of the step some kernel or copy ran (null on a CPU)")
    host_wait_fraction: float | None = Field(description="share of the step the GPU sat idle waiting for a launch "
                                                          "call still in progress (null on a CPU)")
    launch_s: float | None = Field(description="mean host seconds of a kernel launch call (null on a CPU)")
    kernels: dict[str, ClassTime] = Field(description="per class: gemm, attention, convolution, memory-bound, copies, "
                                                      "collective")
    collectives: dict[str, CollectiveTime] = Field(description="per 'KIND/GROUP' (all_reduce/8, ...)")
    gemm: dict[str, GemmTime] = Field(description="per 'MxNxK DTYPE' of the GEMM operators")
    not_calibrated: list[Missing] = Field(description="what the trace could not determine, and why")
    job_gemm: JobGemm | None = Field(None, description="the job's GEMM kernels, by name, against its plan's FLOPs "
                                                       "(--plan / --config); null: no plan given")
    assumed: list[str] = Field(default_factory=list, description="what the spec took from elsewhere than the "
                                                                 "trace's measurements, and from where (its base "
                                                                 "system; a GPU the catalogue lacks)")


def summarize(traces: list[RankTrace]) -> TraceSummary:
    """The TraceSummary of one run's rank traces (`trace.reader.load_traces`)."""
    n_steps = min(len(t.steps) for t in traces)
    per = len(traces) * n_steps  # rank-steps the totals are divided by
    step_s = sum(max(t.steps[i][1] - t.steps[i][0] for t in traces) for i in range(n_steps)) / n_steps
    gpu = traces[0].device_type == "cuda"
    classes: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    busy = wait = launch_total = launches = 0.0
    for t in traces:
        span = sum(b - a for a, b in t.steps[:n_steps])
        if gpu:
            inside = [k for k in t.kernels if t.kernel_in_steps(k)]
            for k in inside:
                classes[k["cls"]][0] += 1
                classes[k["cls"]][1] += k["t1"] - k["t0"]
            # busy: the device's time inside the step windows, whichever step launched the kernel
            busy += union_seconds([(max(k["t0"], a), min(k["t1"], b)) for k in t.kernels for a, b in t.steps
                                   if k["t0"] < b and k["t1"] > a]) / span
            wait += host_wait_seconds(t) / span
            calls = [b - a for a, b, _, _ in t.launches if t.in_steps(a)]
            launch_total, launches = launch_total + sum(calls), launches + len(calls)
        else:
            for o in leaf_work(t):
                classes[op_class(o.name)][0] += 1
                classes[op_class(o.name)][1] += o.dur
            for c in collectives(t):
                classes["collective"][0] += 1
                classes["collective"][1] += c["seconds"]
    comm: dict[str, list] = defaultdict(list)
    for t in traces:
        for c in collectives(t):
            comm[f"{c['kind']}/{c['group']}"].append(c)
    gemms: dict[str, list] = defaultdict(list)
    for t in traces:
        for o in t.ops:
            if innermost_gemm(o) and t.in_steps(o.t0):
                shape = gemm_shape(o)
                if shape is not None:
                    gemms[f"{shape[0]}x{shape[1]}x{shape[2]} {dtype_of(o.types)[0]}"].append(
                        (shape, op_seconds(t, o)))
    missing = not_calibrated(traces, gpu, gemms, comm)
    return TraceSummary(
        device=traces[0].device, ranks=len(traces), steps=n_steps, step_s=step_s,
        gpu_busy_fraction=busy / len(traces) if gpu else None, host_wait_fraction=wait / len(traces) if gpu else None,
        launch_s=launch_total / launches if gpu and launches else None,
        kernels={c: ClassTime(count=v[0] / per, seconds=v[1] / per) for c, v in sorted(classes.items())},
        collectives={key: _collective(cs, per) for key, cs in sorted(comm.items())},
        gemm={key: GemmTime(calls=len(v) / per, seconds=sum(s for _, s in v) / per,
                            tflops=_tflops(v)) for key, v in sorted(gemms.items())},
        not_calibrated=missing)


def _tflops(calls: list) -> float:
    flops = sum(2.0 * m * n * k for (m, n, k), _ in calls)
    secs = sum(s for _, s in calls)
    return flops / secs / 1e12 if secs > 0 else 0.0


def _collective(calls: list[dict], per: int) -> CollectiveTime:
    secs = sorted(c["seconds"] for c in calls)
    mid = calls[sorted(range(len(calls)), key=lambda i: calls[i]["seconds"])[len(calls) // 2]]
    return CollectiveTime(calls=len(calls) / per, bytes=sum(c["nbytes"] for c in calls) / len(calls),
                          seconds=sum(secs) / per,
                          bus_bw_gbps=bus_bandwidth(mid["kind"], mid["group"], mid["nbytes"], mid["seconds"]) / 1e9)


def not_calibrated(traces: list[RankTrace], gpu: bool, gemms: dict, comm: dict) -> list[Missing]:
    """What these traces leave undetermined, each with the reason."""
    out = []
    t = traces[0]
    if not all(x.stepped for x in traces):
        out.append(Missing(what="step boundaries", why="no ProfilerStep spans (prof.step() not called): the whole "
                                                        "trace is taken as one step"))
    if not gemms:
        out.append(Missing(what="GEMM rates", why="no GEMM operator with recorded input shapes (record_shapes=True "
                                                  "ties a kernel to its m, n, k; without it, --plan or --config of "
                                                  "the traced job gives its GEMM efficiency)"))
    if not comm:
        out.append(Missing(what="collective bandwidth", why=f"no collective in the trace ({len(traces)} rank(s))"))
    elif any(c["nbytes"] <= 0 for cs in comm.values() for c in cs):
        out.append(Missing(what="some collectives' sizes", why="their NCCL kernels carry no message size and no "
                                                               "record_param_comms op names one: counted and timed, "
                                                               "no bandwidth"))
    elif t.gloo and not all(_determined(x) for x in traces):
        out.append(Missing(what="gloo collectives' group sizes", why="gloo spans name no process group and the "
                           f"trace has process groups of sizes {t.group_sizes}: each call taken over the world"))
    if not gpu:
        out.append(Missing(what="GPU busy, host wait and launch cost", why="a CPU trace: the ranks compute on their "
                                                                           "host threads"))
    elif not t.launches:
        out.append(Missing(what="launch cost", why="no cudaLaunchKernel / hipLaunchKernel calls recorded (CUDA "
                                                    "runtime activity off)"))
    if not any(op_class(o.name) == "attention" for o in t.ops):
        out.append(Missing(what="attention rate", why="no fused attention operator (scaled_dot_product_*) in the "
                                                      "trace"))
    if gpu:
        out.append(Missing(what="communication overlap", why="one layout's trace shows what overlapped in it, not "
                                                              "what another layout's would: the spec's comm_overlap "
                                                              "stands"))
    else:  # a CPU trace's gloo collectives beside the backward measure it (calibrate.trace.overlap)
        from .overlap import trace_overlap

        o = trace_overlap(traces)
        if o.fraction is None:
            out.append(Missing(what="communication overlap", why=o.why))
    return out


def _determined(t: RankTrace) -> bool:
    return group_size_of(t)[1]


def summary_lines(s: TraceSummary) -> list[str]:
    """The summary as the CLI prints it."""
    pct = lambda x: "-" if x is None else f"{x:.1%}"  # noqa: E731
    lines = [f"{s.device}: {s.ranks} rank(s), {s.steps} step(s) of {s.step_s * 1e3:.1f} ms; device busy "
             f"{pct(s.gpu_busy_fraction)}, waiting for the host {pct(s.host_wait_fraction)}, launch "
             + ("-" if s.launch_s is None else f"{s.launch_s * 1e6:.1f} us"),
             f"{'class':14s}{'count/step':>12s}{'ms/step':>10s}"]
    lines += [f"{c:14s}{v.count:12.0f}{v.seconds * 1e3:10.2f}" for c, v in s.kernels.items()]
    if s.collectives:
        lines.append(f"{'collective':18s}{'calls/step':>11s}{'bytes/call':>12s}{'ms/step':>9s}{'bus GB/s':>10s}")
        lines += [f"{k:18s}{v.calls:11.0f}{v.bytes:12.0f}{v.seconds * 1e3:9.2f}{v.bus_bw_gbps:10.3g}"
                  for k, v in s.collectives.items()]
    top = sorted(s.gemm.items(), key=lambda kv: -kv[1].seconds)[:8]
    lines.append(f"{'gemm (top by time)':24s}{'calls/step':>11s}{'ms/step':>9s}{'TFLOP/s':>9s}")
    lines += [f"{k:24s}{v.calls:11.0f}{v.seconds * 1e3:9.2f}{v.tflops:9.3g}" for k, v in top]
    j = s.job_gemm
    if j is not None:
        lines.append(f"job GEMMs ({j.plan}): {j.kernels:.0f} kernels, "
                     + ", ".join(f"{d} {v * 1e3:.2f} ms" for d, v in j.seconds.items())
                     + f" per step for {j.flops / 1e12:.4g} TFLOP: {j.tflops:.4g} TFLOP/s"
                     + (f", {j.efficiency:.1%} of peak" if j.efficiency is not None else "")
                     + (f"; the calibrated spec prices them at {j.estimate_s * 1e3:.2f} ms" if j.estimate_s else "")
                     + (f"; {j.batched_s * 1e3:.2f} ms of batched GEMMs (attention) left out" if j.batched_s else ""))
    lines += [f"assumed: {a}" for a in s.assumed]
    lines += [f"not calibrated: {m.what}: {m.why}" for m in s.not_calibrated]
    return lines
