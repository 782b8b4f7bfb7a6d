"""`perfmodel calibrate --from-trace PATH...`: a hardware spec calibrated from a profiler trace of one step of the user's
own job (issue 64), through the same fits as the microbenchmarks (`calibrate.fit.fit_all`).

The trace's operators become the calibration's measurements (`calibrate.raw.Measurements`), each at the shape the
job ran it and timed as the job ran it:
- GEMMs: every mm / addmm by (m, n, k, dtype), its kernels' seconds (a CPU's: the operator's span), the median call
  (a CPU trace's: every point's mean call, CPU_PER_CALL);
- attention: each fused attention call (scaled_dot_product_*) by (batch, heads, sequence, head dim), the forward
  and forward + backward;
- memory-bound kernels: layer norm (and RMSNorm), GELU and the residual add at their shapes (forward + backward),
  copies and adds as streaming points;
- collectives: each kind by group size and message size, the median call's seconds.
The fits then set matmul_max and the tile, memory_bandwidth, attention_max and the network tier by collective kind
and group size, so that a plan of another tp, micro-batch or model size is priced from rates by shape and bandwidths
by size and group: what the trace calibrates carries over by mechanism, never as one step-time factor.

On a CPU trace with its plan (`plan`), the host's costs too: per call kind, as the trace's spans show them
(calibrate.trace_host: autograd nodes, eager and view calls, the optimizer's per-tensor calls, collective calls,
each kind's seconds over the calls the stack's profile counts for the traced plan; HostCosts.by_kind), so that
another layout's host is its own counts at those costs. Where the trace cannot tell the kinds apart (no backward
recorded), the step (or `step_s`, the same plan's measured step, which the profiler did not slow) less the
calibrated spec's estimate without host costs is the host's time, priced as the estimate prices it, kernel_s per
operator launch and collective_s per collective call (cost.units.host_counts, as calibrate.host_costs fits them on
its probes); collective_s is the trace's own mean host time of a collective call, kernel_s the rest over the
launches.
"""

from __future__ import annotations

import datetime
import os
import re
from collections import defaultdict
from functools import partial
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..spec.hardware import HostCosts, HostProbe, System, load_hardware
from ..spec.stack import EXECUTOR_STACK
from .raw import AttentionPoint, CommPoint, Environment, FitResult, GemmPoint, Measurements, MemoryPoint
from .trace_reader import (
    RankTrace,
    DTYPES,
    collectives,
    dtype_of,
    gemm_shape,
    innermost_gemm,
    load_traces,
    op_seconds,
)
from .trace_host import host_call_seconds, with_kind_host
from .trace_overlap import overlap_source, trace_overlap
from .trace_summary import Missing, TraceSummary, summarize

NORMS = {"aten::native_layer_norm": "aten::native_layer_norm_backward",
         "aten::_fused_rms_norm": "aten::_fused_rms_norm_backward"}
GELU = ("aten::gelu", "aten::gelu_backward")
OPTIMIZER = re.compile(r"^aten::_fused_adamw?_$|^aten::_foreach_(mul|add|addcmul|addcdiv|lerp|sqrt|div)_")
# A CPU trace's ranks share the host's cores (4 ranks on this VM's 2): a call's span holds the time it was
# descheduled while another rank ran, in proportion to its length on average, but a call shorter than the
# scheduler's slice (~ms) mostly runs whole, so the median of a short shape's calls is its uncontended time (dp4's
# 256x256x256 mm: median 0.40 ms, mean 0.81) while a 28 ms call always shares. The step pays each call's mean (the
# shape's seconds in the step over its calls), which the rates must reproduce: every rank computes at once in the
# steps they price (sustained_fraction 1). A GPU kernel's span is the device's alone: the median resists outliers.
CPU_PER_CALL = np.mean
PRECISION = {"bf16": "bf16", "fp16": "fp16"}  # a GPU GEMM's dtype -> the plan precision it calibrates


def _rank_medians(samples: dict, ranks: int, per_call=np.median) -> dict:
    """key -> (median over ranks of each rank's per-call seconds, [each rank's]) from key -> {rank: [seconds]};
    a rank's per-call seconds are `per_call` of its calls (the median; on a CPU trace the mean, CPU_PER_CALL)."""
    out = {}
    for key, by_rank in samples.items():
        meds = [float(per_call(v)) for _, v in sorted(by_rank.items()) if v]
        if meds:
            out[key] = (float(np.median(meds)), meds)
    return out


def trace_measurements(traces: list[RankTrace], label: str) -> Measurements:
    """The calibration measurements a run's traces hold (see the module docstring)."""
    t0 = traces[0]
    cpu = t0.device_type == "cpu"
    _medians = partial(_rank_medians, per_call=CPU_PER_CALL if cpu else np.median)
    gemm, attn_f, attn_b, norm, gelu, add, stream, comm = (defaultdict(lambda: defaultdict(list)) for _ in range(8))
    for t in traces:
        for op in t.ops:
            if not t.in_steps(op.t0):
                continue
            name = op.name
            if innermost_gemm(op):
                shape, (dt, _) = gemm_shape(op), dtype_of(op.types)
                prec = "bf16" if cpu else PRECISION.get(dt)
                # a dimension off 16 bytes runs cuBLAS's alignment-1 kernels, which the spec prices apart
                # (Accelerator.unaligned_matmul_tflops, cost.kernels.unaligned): not the aligned rate fitted here
                aligned = shape is not None and (cpu or all(d % 8 == 0 for d in shape))
                if aligned and prec is not None:
                    gemm[(*shape, dt, prec)][t.rank].append(op_seconds(t, op))
            elif name.startswith("aten::_scaled_dot_product") and op.dims and len(op.dims[0]) == 4:
                # the SDPA op, q as [batch, heads, seq, head_dim] (the flash / efficient ops inside it take q
                # transposed, [batch, seq, heads, head_dim], and are its own kernels: not counted again)
                key = tuple(op.dims[0]) + (dtype_of(op.types)[0],)  # (batch, heads, seq, head_dim, dtype) of q
                (attn_b if name.endswith("_backward") else attn_f)[key][t.rank].append(op_seconds(t, op))
            elif name in NORMS or name in NORMS.values():
                dims = op.dims[0] if name in NORMS else op.dims[1] if len(op.dims) > 1 else []
                norm[(tuple(dims), name in NORMS)][t.rank].append(op_seconds(t, op))
            elif name in GELU:
                dims = op.dims[0] if name == GELU[0] else op.dims[1] if len(op.dims) > 1 else []
                gelu[(tuple(dims), name == GELU[0])][t.rank].append(op_seconds(t, op))
            elif name in ("aten::add", "aten::add_") and len(op.dims) >= 2 and op.dims[0] == op.dims[1] and op.dims[0]:
                add[tuple(op.dims[0])][t.rank].append(op_seconds(t, op))
                # reads both inputs, writes the first's dtype
                sizes = element_bytes(op.types[:2]) + element_bytes(op.types[:1])
                stream[("add", tuple(op.dims[0]), sizes)][t.rank].append(op_seconds(t, op))
            elif name == "aten::copy_" and len(op.dims) >= 2 and op.dims[0] == op.dims[1] and op.dims[0]:
                # writes the destination's dtype, reads the source's (a cast moves 4 + 2 bytes an element)
                sizes = element_bytes(op.types[:2])
                stream[("copy", tuple(op.dims[0]), sizes)][t.rank].append(op_seconds(t, op))
        for c in collectives(t):
            if c["kind"] in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p") and c["nbytes"] > 0:
                comm[(c["kind"], c["group"], c["nbytes"], c["dtype"])][t.rank].append(c["seconds"])
    n = len(traces)
    points = [GemmPoint(m=m, n=nn, k=k, dtype=dt, precision=prec, source=label, seconds=s, rank_seconds=r)
              for (m, nn, k, dt, prec), (s, r) in _medians(gemm, n).items() if s > 0]
    fwd, bwd = _medians(attn_f, n), _medians(attn_b, n)
    attention = []
    for (b, h, s, d, dt), (sf, rf) in fwd.items():
        if sf <= 0:
            continue
        attention.append(AttentionPoint(batch=b, heads=h, seq=s, head_dim=d, dtype=dt, passes="forward", seconds=sf,
                                        rank_seconds=rf))
        if (b, h, s, d, dt) in bwd:
            sb, rb = bwd[(b, h, s, d, dt)]
            attention.append(AttentionPoint(batch=b, heads=h, seq=s, head_dim=d, dtype=dt, seconds=sf + sb,
                                            rank_seconds=[x + y for x, y in zip(rf, rb)]))
    memory = _layer_points("norm", norm, n, _medians.keywords["per_call"]) + _layer_points(
        "gelu", gelu, n, _medians.keywords["per_call"])
    for dims, (s, r) in _medians(add, n).items():
        memory.append(MemoryPoint(kernel="add", purpose="layer", elements=int(np.prod(dims)), shape=list(dims),
                                  dtype="trace", bytes_moved=0.0, seconds=s, rank_seconds=r))
    for (kernel, dims, size), (s, r) in _medians(stream, n).items():
        elements = int(np.prod(dims))
        moved = elements * size
        dt = "trace"
        if s > 0 and (cpu or moved >= 1 << 20):  # on a GPU a MiB and more: bandwidth, not the launch, sets the time
            memory.append(MemoryPoint(kernel=kernel, purpose="stream", elements=elements, shape=list(dims), dtype=dt,
                                      bytes_moved=float(moved), seconds=s, rank_seconds=r))
    comms = [CommPoint(kind=kind, group_size=g, groups=max(1, t0.world // g), size_bytes=int(nb), dtype=dt, seconds=s,
                       rank_seconds=r) for (kind, g, nb, dt), (s, r) in _medians(comm, n).items() if s > 0]
    env = Environment(device_type=t0.device_type, device_name=t0.device, vendor=t0.vendor, host=t0.host or "trace",
                      torch_version="not recorded in the trace", nproc=t0.world, threads_per_rank=None,
                      cores=_cores(t0),
                      dtype="fp32" if cpu else "bf16", backend=t0.backend, memory_total_bytes=_memory(t0),
                      baseline_bytes=0.0,
                      started_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    return Measurements(env=env, gemm=points, attention=attention, memory=memory, comm=comms, bench_s=0.0)


def element_bytes(types: list) -> int:
    """Bytes per element of the given tensors' dtypes, summed (an unknown dtype: 4)."""
    return sum(DTYPES.get(ty, ("?", 4))[1] for ty in types)


def _layer_points(kernel: str, samples: dict, n: int, per_call=np.median) -> list[MemoryPoint]:
    """Forward + backward layer points of a kernel whose forward (key (dims, True)) and backward (dims, False) were
    both recorded at the same shape."""
    med = _rank_medians(samples, n, per_call)
    out = []
    for (dims, forward), (sf, rf) in med.items():
        if forward and (dims, False) in med and dims:
            sb, rb = med[(dims, False)]
            out.append(MemoryPoint(kernel=kernel, purpose="layer", elements=int(np.prod(dims)), shape=list(dims),
                                   dtype="trace", bytes_moved=0.0, seconds=sf + sb,
                                   rank_seconds=[x + y for x, y in zip(rf, rb)]))
    return out


def _cores(t: RankTrace) -> int | None:
    """The CPUs a CPU trace's ranks shared (System.shared_host): this machine's (execute.host.usable_cores) where the
    trace was recorded here (its host name), else unknown (None: the rates stand as the trace saw them)."""
    import socket

    if t.device_type != "cpu" or not t.host or t.host != socket.gethostname():
        return None
    from ..execute.host import usable_cores

    return usable_cores()


def _memory(t: RankTrace) -> float:
    """Device memory: the trace's deviceProperties on a GPU; on a CPU trace (which records none) this host's."""
    if t.device_type == "cuda":
        return t.device_bytes
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def calibrate_from_trace(paths, hardware: str | Path | None = None, plan_path: str | Path | None = None,
                         name: str | None = None, step_s: float | None = None,
                         require: bool = True) -> tuple[System | None, TraceSummary, FitResult | None]:
    """The spec calibrated from the traces at `paths`, what they measured, and the fit (nothing written).

    `hardware`: the base system of a GPU trace (default: the catalogue system of the trace's GPU); a CPU trace builds
    its spec from the trace alone. `plan_path`: the plan file the traced job ran (its host costs, CPU). `step_s`: that
    plan's measured step, seconds (default: the trace's, which the profiler slowed). A trace that cannot calibrate a
    spec (no GEMM with shapes, say) is refused (InputError) with `require`, else returned as (None, its summary
    with the reason in not_calibrated, None)."""
    from .calibrated_spec import build_system, cpu_template
    from .fit import fit_all
    from .machine import check_name, default_base
    from .measured_tables import fit_groups

    check_name(name)
    traces = load_traces(paths)
    summary = summarize(traces)
    t0 = traces[0]
    label = f"trace {t0.meta.get('perfmodel_plan') or t0.path.name}"
    m = trace_measurements(traces, label)
    cpu = t0.device_type == "cpu"
    why = None
    if not any(p.precision in ("bf16", "fp16") for p in m.gemm):
        why = (f"{len(traces)} trace(s) hold no {'' if cpu else 'bf16/fp16 '}GEMM operator with recorded shapes "
               "(record_shapes=True), which every calibration starts from")
    elif cpu and not any(p.purpose == "stream" for p in m.memory):
        why = "the CPU trace holds no contiguous copy or add to measure the memory bandwidth from"
    if why is not None:
        if require:
            raise InputError(f"--from-trace: {why}; valid: a training step traced with "
                             "torch.profiler(record_shapes=True)")
        missing = Missing(what="a calibrated spec", why=why)
        return None, summary.model_copy(update={"not_calibrated": [missing, *summary.not_calibrated]}), None
    if cpu:
        if hardware is not None:
            raise InputError(f"--hardware {hardware} applies to a GPU trace; a CPU trace's spec is built from the "
                             "trace alone (omit --hardware)")
        template = cpu_template(m, name or f"cpu-trace-{t0.world}p")
    else:
        if hardware is not None:
            template = load_hardware(hardware)
        else:
            try:
                template = default_base(t0.device, t0.device_bytes)
            except InputError:
                raise InputError(f"no catalogue system has the GPU {t0.device!r} the trace ran on; valid: --hardware "
                                 "NAME or SPEC.yaml, the system it ran on (perfmodel hardware list)") from None
        family = template.accelerator.name.split("-")[0].lower()
        if template.accelerator.torch_device != "cuda" or family not in t0.device.lower().replace(" ", ""):
            raise InputError(f"--hardware {hardware}: {template.name}'s accelerator is {template.accelerator.name}, "
                             f"the trace ran on {t0.device}; valid: the system of the GPU the trace ran on (default: "
                             "the catalogue's, by the trace's device name)")
    fit = bounded_network(fit_groups(fit_all(m, template, prefer_tile=None if cpu else
                                             tuple(template.efficiency.matmul_tile)), m, template))
    command = f"perfmodel calibrate --from-trace {' '.join(str(p) for p in paths)}"
    system = build_system(template, fit, m, command, "the trace", name or (template.name if cpu else
                                                                          f"{template.name}-trace"))
    if not cpu:  # what the runtime holds beside the allocator is not in a trace: the base's figure stands
        system = system.model_copy(update={"memory_overhead_gib": template.memory_overhead_gib, "sources": {
            **system.sources, "memory_overhead_gib": template.sources.get("memory_overhead_gib", "the base spec's")}})
    if cpu:
        system = system.model_copy(update={"efficiency": system.efficiency.model_copy(update={
            "sustained_fraction": 1.0, "sources": {**system.efficiency.sources, "sustained_fraction":
                "1: the GEMM and attention rates were timed inside the traced step, every rank computing at once"}})})
        system = with_trace_overlap(system, traces, str(paths[0]) if len(paths) == 1 else f"{len(paths)} paths")
        if plan_path is not None:
            system = with_trace_host(system, traces, plan_path, step_s if step_s is not None else summary.step_s,
                                     summary.step_s)
    elif plan_path is not None:
        summary = summary.model_copy(update={"not_calibrated": [*summary.not_calibrated, Missing(
            what="host costs from --plan", why="a GPU trace's host is priced per call kind on the system's host "
                                                "(System.host_cpu): --plan fits a CPU trace's executor costs only")]})
    return system, summary, fit


def with_trace_overlap(system: System, traces: list[RankTrace], where: str) -> System:
    """`system` with comm_overlap as the trace's collectives beside the backward measured it (calibrate.trace_overlap),
    or as it was where none ran beside compute (the summary's not_calibrated says why)."""
    o = trace_overlap(traces)
    if o.fraction is None:
        return system
    eff = system.efficiency
    return system.model_copy(update={"efficiency": eff.model_copy(update={
        "comm_overlap": float(f"{o.fraction:.3g}"), "comm_overlap_measured": True,
        "sources": {**eff.sources, "comm_overlap": overlap_source(o, where)}})})


UNDETERMINED = 100.0  # a fitted bus bandwidth this far above every measured call's was not measured


def bounded_network(fit: FitResult) -> FitResult:
    """The fit with each collective bandwidth the trace's calls could not determine (all of them latency-bound: a
    fitted 1 / bandwidth near 0) held at the best bus bandwidth a call reached: a job's small messages say how
    long a call waits, not how fast a large one streams."""
    net = fit.network
    if net is None:
        return fit

    def held(f):
        if f.bus_bandwidth > UNDETERMINED * f.best_bus_bandwidth:
            return f.model_copy(update={"bus_bandwidth": f.best_bus_bandwidth})
        return f

    net = held(net).model_copy(update={
        "by_kind": {k: held(v) for k, v in net.by_kind.items()},
        "by_group": {k: {g: held(v) for g, v in groups.items()} for k, groups in net.by_group.items()}})
    return fit.model_copy(update={"network": net})


def optimizer_seconds(traces: list[RankTrace]) -> float:
    """Seconds per step of the optimizer's update kernels (fused / foreach Adam), the mean rank."""
    total = sum(op_seconds(t, o) for t in traces for o in t.ops if t.in_steps(o.t0) and OPTIMIZER.match(o.name))
    return total / sum(len(t.steps) for t in traces)


def with_trace_host(system: System, traces: list[RankTrace], plan_path, step_s: float,
                    traced_s: float | None = None) -> System:
    """`system` with the optimizer's bandwidth and the executor stack's host costs from the traced plan (module
    docstring): the optimizer fraction that makes the estimate's update time the trace's (the same
    bytes, `cost.states.adam_step_bytes`, at a bandwidth in proportion), then the host per call kind as the trace
    recorded it (calibrate.trace_host; `traced_s`: the traced step, for the profiler's own cost), or, where the
    trace cannot tell the kinds apart (no backward recorded), from what is left of the step."""
    from ..cost.estimate import evaluate_plan
    from ..spec.plan_file import load_plan_file

    pf = load_plan_file(plan_path)
    plan = pf.plan.model_copy(update={"stack": EXECUTOR_STACK})
    none = HostCosts(stack=EXECUTOR_STACK, kernel_s=0.0, collective_s=0.0, probes=[])
    bare = system.model_copy(update={"host_costs": none})
    traced_opt = optimizer_seconds(traces)
    est_opt = evaluate_plan(pf.model, bare, plan)[1].time_s.optimizer
    eff = bare.efficiency
    if traced_opt > 0 and est_opt > 0:
        now = eff.optimizer_bandwidth or eff.memory_bandwidth
        fitted = float(min(1.0, now * est_opt / traced_opt))
        eff = eff.model_copy(update={"optimizer_bandwidth": round(fitted, 5), "sources": {
            **eff.sources, "optimizer_bandwidth": f"the traced optimizer update of {Path(plan_path).name}: "
            f"{traced_opt * 1e3:.2f} ms per step for the bytes the estimate moves (calibrate.from_trace)"}})
        bare = bare.model_copy(update={"efficiency": eff})
    by_kind = with_kind_host(bare, traces, plan_path, step_s, traced_s if traced_s is not None else step_s)
    if by_kind is not None:  # the host per call kind, as the trace recorded it (calibrate.trace_host)
        return by_kind
    step, est = evaluate_plan(pf.model, bare, plan)
    kernels, calls = float(step.host_kernels[0]), float(step.host_calls[0])
    collective_s = host_call_seconds(traces)
    gap = step_s - est.step_time_s - collective_s * calls
    kernel_s = max(0.0, gap / kernels) if kernels > 0 else 0.0
    how = (f"from the trace of {Path(plan_path).name}: its step ({step_s * 1e3:.1f} ms) less the calibrated estimate "
           f"without host costs ({est.step_time_s * 1e3:.1f} ms) and {calls:g} collective calls at the trace's own "
           f"{collective_s * 1e6:.1f} us each, over its {kernels:g} operator launches (calibrate.from_trace)")
    probe = HostProbe(name=Path(plan_path).stem, measured_s=step_s, predicted_s=est.step_time_s, kernels=kernels,
                      calls=calls)
    costs = HostCosts(stack=EXECUTOR_STACK, kernel_s=kernel_s, collective_s=collective_s, probes=[probe],
                      sources={"kernel_s": how, "collective_s": "the mean span of the outermost c10d operators on the "
                               "ranks' threads inside the recorded steps (set-up and enqueue; waits left out)"})
    return bare.model_copy(update={"host_costs": costs})
