"""`perfmodel calibrate --from-trace PATH...`: a hardware spec calibrated from a profiler trace of one step of the user's
own job, through the same fits as the microbenchmarks (`calibrate.machine.fit.fit_all`).

The trace's operators become the calibration's measurements (`calibrate.machine.raw.Measurements`), each at the shape the
job ran it and timed as the job ran it:
- GEMMs: every mm / addmm by (m, n, k, dtype), its kernels' seconds (a CPU's: the operator's span), the median call
  (a CPU trace's: every point's mean call, CPU_PER_CALL); on a GPU in bf16 / fp16, or where the job ran none, in
  fp32 (tf32 where its kernels ran TF32 tensor-core code: gpu_precision);
- attention: each fused attention call (scaled_dot_product_*) by (batch, heads, sequence, head dim), the forward
  and forward + backward;
- memory-bound kernels: layer norm (and RMSNorm), GELU and the residual add at their shapes (forward + backward),
  copies and adds as streaming points;
- collectives: each kind by group size and message size, the median call's seconds.
The fits then set matmul_max and the tile, memory_bandwidth, attention_max and the network tier by collective kind
and group size, so that a plan of another tp, micro-batch or model size is priced from rates by shape and bandwidths
by size and group: what the trace calibrates carries over by mechanism, never as one step-time factor.

A GPU trace calibrates its base system (calibrate.trace.device: the catalogue's system of its GPU, else the
trace's own device as it measured it). Recorded without shapes (torch.profiler's default), its GEMMs are timed by
kernel name against the FLOPs of the plan the job ran (`--plan`, or `--config` read by perfmodel.ingest:
calibrate.trace.job, trace.gemm), which sets matmul_max; with neither shapes nor a plan the spec holds what else it
measured (collectives, device copies' bandwidth) and names what it lacks, or is refused with it.

On a CPU trace with its plan (`plan`), the host's costs too: per call kind, as the trace's spans show them
(calibrate.trace.host: autograd nodes, eager and view calls, the optimizer's per-tensor calls, collective calls,
each kind's seconds over the calls the stack's profile counts for the traced plan; HostCosts.by_kind), so that
another layout's host is its own counts at those costs. Where the trace cannot tell the kinds apart (no backward
recorded), the step (or `step_s`, the same plan's measured step, which the profiler did not slow) less the
calibrated spec's estimate without host costs is the host's time, priced as the estimate prices it, kernel_s per
operator launch and collective_s per collective call (cost.compute.units.host_counts, as calibrate.host.costs fits them on
its probes); collective_s is the trace's own mean host time of a collective call, kernel_s the rest over the
launches.
"""

from __future__ import annotations

import datetime
import os
from collections import defaultdict
from functools import partial
from pathlib import Path

import numpy as np

from ...errors import InputError
from ...spec.hardware.system import System
from ..machine.raw import AttentionPoint, CommPoint, Environment, FitResult, GemmPoint, Measurements, MemoryPoint
from .reader import Op, RankTrace, DTYPES, dtype_of, gemm_shape, innermost_gemm, load_traces, op_seconds
from .comms import collectives
from .device import catalogue_base, copy_rates, device_from_trace, provisional_device, with_copy_bandwidth
from .gemm import job_gemm, kernel_dtype
from .host import with_trace_host
from .job import JobSource, traced_plan, with_job_matmul, with_job_memory
from .overlap import overlap_source, trace_overlap
from .summary import Missing, TraceSummary, summarize

NORMS = {"aten::native_layer_norm": "aten::native_layer_norm_backward",
         "aten::_fused_rms_norm": "aten::_fused_rms_norm_backward"}
GELU = ("aten::gelu", "aten::gelu_backward")
# A CPU trace's ranks share the host's cores (4 ranks on this VM's 2): a call's span holds the time it was
# descheduled while another rank ran, in proportion to its length on average, but a call shorter than the
# scheduler's slice (~ms) mostly runs whole, so the median of a short shape's calls is its uncontended time (dp4's
# 256x256x256 mm: median 0.40 ms, mean 0.81) while a 28 ms call always shares. The step pays each call's mean (the
# shape's seconds in the step over its calls), which the rates must reproduce: every rank computes at once in the
# steps they price (sustained_fraction 1). A GPU kernel's span is the device's alone: the median resists outliers.
CPU_PER_CALL = np.mean
TWO_BYTE = ("bf16", "fp16")


def gpu_precision(op: Op, dtype: str) -> str | None:
    """The precision a GPU GEMM operator of input `dtype` calibrates: bf16 and fp16 as they are; fp32 as tf32 where
    its kernels ran TF32 tensor-core code (their names' tags: calibrate.trace.gemm.kernel_dtype), else fp32; None
    for any other."""
    if dtype in TWO_BYTE:
        return dtype
    if dtype != "fp32":
        return None

    def names(o: Op) -> list[str]:
        return o.kernel_names + [n for c in o.children for n in names(c)]

    return "tf32" if any(kernel_dtype(k) == "tf32" for k in names(op)) else "fp32"


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
                shape, (dt, size) = gemm_shape(op), dtype_of(op.types)
                prec = "bf16" if cpu else gpu_precision(op, dt)
                # a dimension off 16 bytes runs cuBLAS's alignment-1 kernels, which the spec prices apart
                # (Accelerator.unaligned_matmul_tflops, cost.compute.kernels.unaligned): not the aligned rate fitted here
                aligned = shape is not None and (cpu or all(d % (16 // size) == 0 for d in shape))
                if aligned and prec is not None:
                    gemm[(*shape, dt, prec)][t.rank].append(op_seconds(t, op))
            elif name.startswith("aten::_scaled_dot_product") and op.dims and len(op.dims[0]) == 4:
                # the SDPA op, q as [batch, heads, seq, head_dim] (the flash / efficient ops inside it take q
                # transposed, [batch, seq, heads, head_dim], and are its own kernels: not counted again)
                key = tuple(op.dims[0]) + (dtype_of(op.types)[0],)  # (batch, heads, seq, head_dim, dtype) of q
                (attn_b if name.endswith("_backward") else attn_f)[key][t.rank].append(op_seconds(t, op))
            elif name in NORMS or name in NORMS.values():
                dims = op.dims[0] if name in NORMS and op.dims else op.dims[1] if len(op.dims) > 1 else []
                norm[(tuple(dims), name in NORMS)][t.rank].append(op_seconds(t, op))
            elif name in GELU:
                dims = op.dims[0] if name == GELU[0] and op.dims else op.dims[1] if len(op.dims) > 1 else []
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
    if any(p.precision in TWO_BYTE for p in points):  # a job's fp32 GEMMs (its loss, say) beside its 2-byte ones:
        points = [p for p in points if p.precision in TWO_BYTE]  # the tile and rates are the training precision's
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
    from ...execute.host import usable_cores

    return usable_cores()


def _memory(t: RankTrace) -> float:
    """Device memory: the trace's deviceProperties on a GPU; on a CPU trace (which records none) this host's."""
    if t.device_type == "cuda":
        return t.device_bytes
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def calibrate_from_trace(paths, hardware: str | Path | None = None, plan_path: str | Path | None = None,
                         name: str | None = None, step_s: float | None = None, require: bool = True,
                         job: JobSource | None = None,
                         strict: bool = True) -> tuple[System | None, TraceSummary, FitResult | None]:
    """The spec calibrated from the traces at `paths`, what they measured, and the fit (nothing written).

    `hardware`: the base system of a GPU trace (default: the catalogue system of the trace's GPU, else one of the
    trace's own device: calibrate.trace.device); a CPU trace builds its spec from the trace alone. `plan_path`: the
    plan file the traced job ran (a CPU trace's host costs; a GPU trace's GEMM efficiency, as `job`'s plan or config:
    calibrate.trace.job). `step_s`: that plan's measured step, seconds (default: the trace's, which the profiler
    slowed). `strict`: --hardware naming another GPU than the trace's is refused (else said, and the trace's own
    device taken). A trace that cannot calibrate a spec is refused (InputError) with `require`, else returned as
    (None, its summary with the reason in not_calibrated, None)."""
    from ..machine.calibration import check_name

    check_name(name)
    job = job or JobSource(plan_path=plan_path)
    job.check()
    traces = load_traces(paths)
    summary = summarize(traces)
    t0 = traces[0]
    label = f"trace {t0.meta.get('perfmodel_plan') or t0.path.name}"
    m = trace_measurements(traces, label)
    if t0.device_type == "cpu":
        if job.config:
            raise InputError("--config applies to a GPU trace; a CPU trace's host costs take --plan PLAN.json")
        return _cpu_calibration(paths, traces, m, summary, hardware, job.plan_path, name, step_s, require)
    return _gpu_calibration(paths, traces, m, summary, hardware, job, name, require, strict)


def _refused(summary: TraceSummary, why: str, require: bool, valid: str):
    if require:
        raise InputError(f"--from-trace: {why}; valid: {valid}")
    return None, summary.model_copy(update={"not_calibrated": [Missing(what="a calibrated spec",
                                                                       why=f"{why}; valid: {valid}"),
                                                               *summary.not_calibrated]}), None


def _cpu_calibration(paths, traces, m, summary, hardware, plan_path, name, step_s, require):
    """A CPU trace's spec: its peaks, bandwidths and host as it measured them (module docstring)."""
    from ..machine.calibrated_spec import build_system, cpu_template
    from ..machine.fit import fit_all
    from ..machine.measured_tables import fit_groups

    t0 = traces[0]
    if not any(p.precision in ("bf16", "fp16") for p in m.gemm):
        return _refused(summary, f"{len(traces)} trace(s) hold no GEMM operator with recorded shapes "
                        "(record_shapes=True), which every calibration starts from", require,
                        "a training step traced with torch.profiler(record_shapes=True)")
    if not any(p.purpose == "stream" for p in m.memory):
        return _refused(summary, "the CPU trace holds no contiguous copy or add to measure the memory bandwidth from",
                        require, "a training step traced with torch.profiler(record_shapes=True)")
    if hardware is not None:
        raise InputError(f"--hardware {hardware} applies to a GPU trace; a CPU trace's spec is built from the "
                         "trace alone (omit --hardware)")
    template = cpu_template(m, name or f"cpu-trace-{t0.world}p")
    fit = bounded_network(fit_groups(fit_all(m, template), m, template))
    system = build_system(template, fit, m, command_of(paths), "the trace", name or template.name)
    system = system.model_copy(update={"efficiency": system.efficiency.model_copy(update={
        "sustained_fraction": 1.0, "sources": {**system.efficiency.sources, "sustained_fraction":
            "1: the GEMM and attention rates were timed inside the traced step, every rank computing at once"}})})
    system = with_trace_overlap(system, traces, str(paths[0]) if len(paths) == 1 else f"{len(paths)} paths")
    if plan_path is not None:
        system = with_trace_host(system, traces, plan_path, step_s if step_s is not None else summary.step_s,
                                 summary.step_s)
    return system, summary, fit


def command_of(paths) -> str:
    return f"perfmodel calibrate --from-trace {' '.join(str(p) for p in paths)}"


def _gpu_calibration(paths, traces, m, summary, hardware, job: JobSource, name, require, strict):
    """A GPU trace's spec: the base system (the catalogue's, or the trace's own device) with what the trace measured
    fitted into it: GEMM rates at their shapes, else the job's GEMM efficiency against its plan; attention, the
    memory-bound kernels, the collectives (module docstring; calibrate.trace.job, trace.device)."""
    from ..machine.calibrated_spec import build_system
    from ..machine.fit import fit_all
    from ..machine.measured_tables import fit_groups

    t0 = traces[0]
    base, assumed = catalogue_base(t0, hardware, strict)
    missing = []
    model = plan = gemm_job = None
    if job.named and (base is not None or t0.props):  # (no device at all: the one thing it lacks, below)
        on = base or provisional_device(t0)
        model, plan, plan_label = traced_plan(job, on, t0.world)
        gemm_job = job_gemm(traces, model, on, plan, plan_label, peaks=base is not None)
        missing.append(Missing(what="host costs from the plan", why="a GPU trace's host is priced per call kind on "
                                                                    "the system's host (System.host_cpu): the plan "
                                                                    "fits a CPU trace's executor costs only"))
    try:
        if base is None:  # a GPU the catalogue lacks: the trace's own device, as it measured it
            base, own = device_from_trace(t0, traces, m, None if gemm_job is None else (
                gemm_job.precision, gemm_job.tflops * 1e12), gemm_job.plan if gemm_job else "")
            assumed += own
    except InputError as err:
        if require:
            raise
        return None, summary.model_copy(update={"not_calibrated": [Missing(what="a calibrated spec", why=str(err)),
                                                                   *summary.not_calibrated],
                                                "job_gemm": gemm_job, "assumed": assumed}), None
    if not m.env.memory_total_bytes:  # no deviceProperties: the base's memory (its overhead stands, below)
        m = m.model_copy(update={"env": m.env.model_copy(update={"memory_total_bytes": base.accelerator.hbm_bytes})})
    lacking = sorted({p.precision for p in m.gemm} - set(base.accelerator.peak_tflops))
    if lacking:
        m = m.model_copy(update={"gemm": [p for p in m.gemm if p.precision not in lacking]})
        missing.append(Missing(what=f"{', '.join(lacking)} GEMM rates", why=f"{base.accelerator.name} has no "
                                                                            f"{', '.join(lacking)} peak"))
    shaped = {p.precision for p in m.gemm}
    if not shaped and gemm_job is None:
        why = f"{len(traces)} trace(s) hold no GEMM with recorded shapes"
        valid = ("--plan PLAN.json or --config FILE --from FRAMEWORK of the job it traced, or a trace recorded with "
                 "record_shapes=True")
        if not (m.comm or copy_rates(traces) or any(p.purpose == "layer" for p in m.memory)):
            return _refused(summary, why + " and nothing else a spec is fitted to (no collective with its size, no "
                            "device copy of a MiB or more)", require, valid)
        missing.append(Missing(what="GEMM rates", why=f"{why}; valid: {valid} (the base's matmul_max stands)"))
    fit = bounded_network(fit_groups(fit_all(m, base, prefer_tile=tuple(base.efficiency.matmul_tile)), m, base))
    system = build_system(base, fit, m, command_of(paths), "the trace", name or f"{base.name.removesuffix('-trace')}"
                                                                              "-trace")
    # what the runtime holds beside the allocator is not in a trace: the base's figure stands
    system = system.model_copy(update={"memory_overhead_gib": base.memory_overhead_gib, "sources": {
        **system.sources, "memory_overhead_gib": base.sources.get("memory_overhead_gib", "the base spec's")}})
    system = with_unplanned_precisions(system, fit)
    system = with_copy_bandwidth(system, traces, m)
    if gemm_job is not None:
        if not any(p.purpose == "layer" for p in m.memory):
            system = with_job_memory(system, gemm_job, model, plan)
        system, gemm_job = with_job_matmul(system, gemm_job, model, plan, shaped)
    missing += unmeasured(m, traces, summary, gemm_job)
    not_cal = [x for x in summary.not_calibrated if x.what != "GEMM rates"]  # this calibration's own say
    return system, summary.model_copy(update={"not_calibrated": [*missing, *not_cal], "job_gemm": gemm_job,
                                              "assumed": assumed}), fit


def unmeasured(m: Measurements, traces: list[RankTrace], summary: TraceSummary, job) -> list[Missing]:
    """What a GPU trace leaves at the base's values beyond the summary's list: the GEMM tile (GEMMs timed by the job
    alone), attention where its operators carry no shapes, the memory-bound bandwidth where nothing measured it."""
    out = []
    if job is not None and job.precision not in {p.precision for p in m.gemm}:
        out.append(Missing(what="GEMM tile and rate by shape", why="no GEMM with recorded shapes: matmul_max is the "
                                                                    "job's (its plan's FLOPs), matmul_tile the base's"))
    if not any(p.passes == "forward_backward" for p in m.attention) and not any(
            x.what == "attention rate" for x in summary.not_calibrated):
        out.append(Missing(what="attention rate", why="no fused attention at a recorded shape: the base's "
                                                      "attention_max stands"))
    if not any(p.purpose == "layer" for p in m.memory) and not copy_rates(traces) and not (job and job.memory_s):
        out.append(Missing(what="memory-bound bandwidth", why="no norm, activation or add at a recorded shape and no "
                                                              "device copy of a MiB or more: the base's stands"))
    return out


def with_unplanned_precisions(system: System, fit: FitResult) -> System:
    """`system` with the fitted matmul_max of the precisions no plan prices (fp32, tf32: a job's GEMMs at their
    shapes in fp32), which build_system keeps only for the plan precisions."""
    extra = {p: float(f"{v:.4g}") for p, v in fit.matmul_max.items() if p not in system.efficiency.matmul_max}
    if not extra:
        return system
    eff = system.efficiency
    return system.model_copy(update={"efficiency": eff.model_copy(update={
        "matmul_max": {**eff.matmul_max, **extra}})})


def with_trace_overlap(system: System, traces: list[RankTrace], where: str) -> System:
    """`system` with comm_overlap as the trace's collectives beside the backward measured it (calibrate.trace.overlap),
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
