"""Fit a hardware spec's efficiency parameters to microbenchmark timings, through the cost model's own formulas.

Every fit predicts each measured time with the function the estimate calls, so that a fitted parameter means
exactly what the estimate uses it for; residuals are relative (log) errors, so a 10 us collective and a 1 s
GEMM weigh alike.
- matmul_max, matmul_tile: `cost.compute.kernel_time.gemm_time` with the accelerator's `compute_units`, the estimate's
  operand bytes (`cost.compute.kernels.GEMM_INPUT_BYTES`, `ACT_BYTES`) and the roofline at the streaming (copy/add)
  bandwidth; for every candidate tile, matmul_max per precision by bounded 1-D least squares of log time
  (scipy `minimize_scalar`), over the GEMMs of `roofline_gemms` (the table's launch-bound shapes left out).
- memory_bandwidth: `cost.compute.kernel_time.memory_bound_time(bytes, peak_bw * eff)` with the bytes per element the
  estimate charges (`cost.compute.kernels.ELEMENTWISE_BYTES`, `residual_bytes`; `cost.memory.states.adam_step_bytes`). The same
  bandwidth bounds GEMMs in `gemm_time` and times the optimizer step, so it is fitted on whole layer training
  steps (`fit_memory_layers`): the estimate's time of a layer's GEMMs, elementwise kernels (norm, GELU or
  SwiGLU, residual add, each as often as the estimate charges it) and AdamW update, against the GEMMs as
  fitted plus the rest as measured.
- attention_max, attention_half_seq: `cost.compute.kernel_time.flash_attention_time` of the estimate's causal FLOPs
  (`cost.compute.kernels.flash_attention_flops`, the FLOPs the estimate charges), scipy
  `least_squares`.
- network tier: `cost.comm.collectives.collective_time` over the phases `cost.comm.collectives.group_phases` builds for each group
  (all_reduce, all_gather, reduce_scatter) and `cost.comm.collectives.p2p_time` (send/recv) are affine in the per-step
  latency a and 1 / bus bandwidth B, so each measurement is t = a * c_lat + c_bw / B with coefficients the
  cost model computes; (log a, log 1/B) by scipy `least_squares` over all kinds and group sizes together
  (the tier's own pair), and again over each kind's points alone (the tier's `by_kind`).
- comm_overlap: (t_c + t_m - t_both) / min(t_c, t_m) of a GEMM loop (t_c), an all-reduce (t_m) and both
  at once (t_both), clipped to [0, 1], median over repeats (`overlap_fraction`).
This module imports no torch.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, minimize_scalar, nnls

from ...cost.comm.collectives import Phase, collective_time, group_phases, p2p_time
from ...cost.compute.kernel_time import flash_attention_time, gemm_time, memory_bound_time
from ...cost.comm.compression import GRAD_BYTES
from ...cost.memory.states import adam_step_bytes
from ...cost.compute.operator_table import layer_families
from ...cost.compute.kernels import (
    ACT_BYTES, ELEMENTWISE_BYTES, GEMM_INPUT_BYTES, flash_attention_flops, residual_bytes,
)
from ...spec.hardware.system import System
from .raw import (
    AttentionPoint, CommPoint, FitPoint, FitResult, GemmPoint, KindNetworkFit, Measurements, MemoryPoint, NetworkFit,
    OverlapRun, Residuals,
)

# Bytes per element the estimate charges each measured kernel, forward + backward (the residual add is one
# add, which the estimate charges once in each direction; adam: per parameter, fp32 gradients as the
# executor keeps them).
COUNTED_BYTES = {
    "adam": adam_step_bytes(GRAD_BYTES["fp32"]),
    "norm": sum(ELEMENTWISE_BYTES["norm"]),
    "gelu": sum(ELEMENTWISE_BYTES["gelu"]),
    "swiglu": sum(ELEMENTWISE_BYTES["swiglu"]),
    "add": residual_bytes(False)[0],
    "cross_entropy": sum(ELEMENTWISE_BYTES["cross_entropy"]),
}
# Times the estimate charges each kernel per layer (`cost.compute.operator_table.layer_families`): each norm, the MLP
# activation, and each residual add once in each direction.
_FAMILIES = layer_families()
LAYER_COUNT = {"norm": _FAMILIES["norm"], "gelu": _FAMILIES["activation"], "swiglu": _FAMILIES["activation"],
               "add": 2 * _FAMILIES["residual"], "cross_entropy": 0, "adam": 0}
TILE_SIDES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TILE_TOLERANCE = 0.05  # a tile within 5% of the best RMS log error fits as well (timings are noisy)
MIN_KIND_POINTS = 3  # a collective kind is fitted apart from the others on at least this many points
MAX_KIND_CONDITION = 1e6  # ... and only if its points tell latency from bandwidth (see `_condition`)


def _log_err(pred, meas) -> np.ndarray:
    return np.log(np.asarray(pred, float)) - np.log(np.asarray(meas, float))


# ---------------------------------------------------------------------------------------------------------
# Peaks taken from the measurements (CPU: no datasheet)
# ---------------------------------------------------------------------------------------------------------

def best_gemm_rate(points: list[GemmPoint], precision: str = "bf16") -> float:
    """Highest FLOP/s (2mnk / seconds) of any measured GEMM of `precision`."""
    return max(2.0 * p.m * p.n * p.k / p.seconds for p in points if p.precision == precision)


def best_stream_bandwidth(points: list[MemoryPoint]) -> float:
    """Highest bytes/s of the plain streaming kernels (copy, add), counting the bytes they really move."""
    rates = [p.bytes_moved / p.seconds for p in points if p.purpose == "stream"]
    return max(rates) if rates else 0.0


# ---------------------------------------------------------------------------------------------------------
# Elementwise kernels -> memory_bandwidth
# ---------------------------------------------------------------------------------------------------------

def counted_bytes(p: MemoryPoint) -> float:
    return COUNTED_BYTES[p.kernel] * p.elements


def memory_points(points: list[MemoryPoint], peak_bw: float, eff: float, opt_eff: float | None = None) -> list[FitPoint]:
    """The elementwise kernels at `eff` of `peak_bw`, the AdamW step at `opt_eff` (None: `eff`)."""
    pts = [p for p in points if p.purpose == "layer" and p.kernel in COUNTED_BYTES]
    bw = [peak_bw * (opt_eff if p.kernel == "adam" and opt_eff is not None else eff) for p in pts]
    pred = memory_bound_time(np.array([counted_bytes(p) for p in pts]), np.array(bw))
    return [FitPoint(quantity="memory", kind=p.kernel, label=f"{p.kernel} {'x'.join(map(str, p.shape))}",
                     measured_s=p.seconds, predicted_s=float(t)) for p, t in zip(pts, np.atleast_1d(pred))]


def fit_optimizer(points: list[MemoryPoint], peak_bw: float) -> float | None:
    """optimizer_bandwidth: the fraction of `peak_bw` at which `cost.compute.kernel_time.memory_bound_time` of the AdamW
    step's bytes (`cost.memory.states.adam_step_bytes` per parameter) reproduces the measured fused AdamW steps, by
    least squares of log time (closed form: the geometric mean of bytes / (peak_bw * seconds)). None when no
    step was measured."""
    pts = [p for p in points if p.purpose == "layer" and p.kernel == "adam"]
    if not pts:
        return None
    logs = [math.log(counted_bytes(p) / (peak_bw * p.seconds)) for p in pts]
    return min(1.0, math.exp(sum(logs) / len(logs)))


def fit_memory(points: list[MemoryPoint], peak_bw: float) -> float:
    """memory_bandwidth (fraction of `peak_bw`, bytes/s) with which the estimate's byte counts reproduce the
    elementwise time of one layer: eff = sum(w bytes) / (peak_bw * sum(w seconds)), w = how often
    the estimate charges each kernel per layer (LAYER_COUNT). Used where no whole layer was measured.

    One fraction cannot fit every kernel (on one CPU thread GELU's tanh costs more than its bytes, an add
    less); matching a layer's sum weighs each kernel by its share of a step.
    """
    pts = [p for p in points if p.purpose == "layer" and p.kernel in COUNTED_BYTES]
    w = np.array([LAYER_COUNT[p.kernel] for p in pts], float)
    if not pts or not w.any():
        raise ValueError("no elementwise layer-kernel measurements to fit memory_bandwidth")
    nbytes = np.array([counted_bytes(p) for p in pts])
    secs = np.array([p.seconds for p in pts])
    return min(1.0, float((w * nbytes).sum() / (peak_bw * (w * secs).sum())))


def fit_memory_layers(m: Measurements, peak_bw: float, gemm_bw: float, matmul_max: float, tile, units: int,
                      peak_flops: float, opt_eff: float | None = None) -> tuple[float, list[FitPoint]]:
    """memory_bandwidth from whole layer steps: the fraction at which the estimate's time of each measured
    layer step (GEMMs by `gemm_time`; elementwise kernels and the AdamW update by `memory_bound_time`, the
    update at `opt_eff` when given (`fit_optimizer`), the rest sharing this bandwidth) equals the GEMMs' time as fitted (roofline at `gemm_bw`) plus the elementwise
    kernels' and the optimizer's measured times; 1-D least squares of log time over the layers (scipy
    `minimize_scalar`).

    One bandwidth cannot fit every kernel: on one CPU thread GELU and norms are compute bound (a few % of
    streaming bandwidth), AdamW and adds stream faster, and GEMM operands hardly touch memory. Matching whole
    layer steps weighs each by its share of a training step, so the estimate's step time comes out right.
    """
    mem = {(p.kernel, tuple(p.shape)): p for p in m.memory if p.purpose == "layer"}
    rows = []
    for layer in m.layers:
        mm, nn, kk = np.array(layer.gemms, float).T
        elem = [(mem[(k, tuple(shape))], count) for k, shape, count in layer.elementwise]
        apart = opt_eff is not None
        nbytes = sum(counted_bytes(p) * c for p, c in elem if not (apart and p.kernel == "adam"))
        opt_s = sum(float(memory_bound_time(counted_bytes(p) * c, peak_bw * opt_eff))
                    for p, c in elem if apart and p.kernel == "adam")
        target = (gemm_shapes_time(mm, nn, kk, "bf16", peak_flops, matmul_max, tile, units, gemm_bw).sum()
                  + sum(p.seconds * c for p, c in elem))
        rows.append((layer, mm, nn, kk, nbytes, target, opt_s))

    def layer_time(row, eff):
        _, mm, nn, kk, nbytes, _, opt_s = row
        bw = peak_bw * eff
        return float(gemm_shapes_time(mm, nn, kk, "bf16", peak_flops, matmul_max, tile, units, bw).sum()
                     + memory_bound_time(nbytes, bw) + opt_s)

    cost = lambda x: sum(math.log(layer_time(r, math.exp(x)) / r[5]) ** 2 for r in rows)
    eff = math.exp(minimize_scalar(cost, bounds=(math.log(1e-4), 0.0), method="bounded",
                                   options={"xatol": 1e-5}).x)
    return eff, [FitPoint(quantity="layer", kind=r[0].model, label=f"{r[0].model} T{r[0].tokens} tp{r[0].tp}",
                          measured_s=r[5], predicted_s=layer_time(r, eff)) for r in rows]


# ---------------------------------------------------------------------------------------------------------
# GEMMs -> matmul_max, matmul_tile
# ---------------------------------------------------------------------------------------------------------

def gemm_shapes_time(m, n, k, precision: str, peak: float, eff: float, tile, units: int, mem_bw: float):
    """Seconds `cost.compute.kernel_time.gemm_time` gives GEMMs of these shapes, as `cost.compute.kernels.Device.datasheet_gemm` calls it
    (fp32 / tf32, a GPU trace's fp32 job's, which no plan prices: 4-byte inputs)."""
    return gemm_time(np.asarray(m, float), np.asarray(n, float), np.asarray(k, float), peak, eff, tile[0], tile[1],
                     units, mem_bw, in_bytes=GEMM_INPUT_BYTES.get(precision, 4.0), out_bytes=ACT_BYTES)


def roofline_gemms(points: list[GemmPoint]) -> list[GemmPoint]:
    """The GEMMs matmul_max is fitted on: all but the GEMM table's (source 'table') of fewer FLOPs than the
    smallest layer or irregular shape of their precision (none: all of them). `gemm_time` has no launch term; the
    table's smallest shapes are launch-bound (16^3 on a CPU thread: ~4 us for 0.2 us of FLOPs) and would bend
    matmul_max and matmul_tile to mimic one, and the table prices them itself."""
    low: dict[str, float] = {}
    for p in points:
        if p.source != "table":
            low[p.precision] = min(low.get(p.precision, math.inf), 2.0 * p.m * p.n * p.k)
    return [p for p in points if p.source != "table" or 2.0 * p.m * p.n * p.k >= low.get(p.precision, 0.0)]


def predict_gemm(pts: list[GemmPoint], peak: float, eff: float, tile, units: int, mem_bw: float) -> np.ndarray:
    m, n, k = ([getattr(p, a) for p in pts] for a in "mnk")
    return gemm_shapes_time(m, n, k, pts[0].precision, peak, eff, tile, units, mem_bw)


def _fit_matmul_max(pts, peak, tile, units, mem_bw) -> tuple[float, float]:
    """(matmul_max, sum of squared log errors) for one precision and tile."""
    secs = np.array([p.seconds for p in pts])
    cost = lambda x: float(np.sum(_log_err(predict_gemm(pts, peak, math.exp(x), tile, units, mem_bw), secs) ** 2))
    res = minimize_scalar(cost, bounds=(math.log(1e-4), 0.0), method="bounded", options={"xatol": 1e-5})
    return math.exp(res.x), float(res.fun)


def fit_gemm(points: list[GemmPoint], peaks: dict[str, float], units: int, mem_bw: float,
             prefer: tuple[int, int] | None = None, sides=TILE_SIDES):
    """matmul_max per precision and one matmul_tile for all.

    Every (tm, tn) with sides from `sides` is tried; of the tiles whose RMS log error is within
    TILE_TOLERANCE of the best, `prefer` (e.g. the catalogue's documented kernel tile) is taken if it is one
    of them, otherwise the smallest (the least quantisation that explains the data: noise does not pick a tile).
    """
    by_prec = {}
    for p in points:
        by_prec.setdefault(p.precision, []).append(p)
    n = len(points)
    trials = {}
    for tile in [(a, b) for a in sides for b in sides] + ([tuple(prefer)] if prefer else []):
        effs, sse = {}, 0.0
        for prec, pts in by_prec.items():
            effs[prec], e = _fit_matmul_max(pts, peaks[prec], tile, units, mem_bw)
            sse += e
        trials[tuple(tile)] = (math.sqrt(sse / n), effs)
    best = min(r for r, _ in trials.values())
    ok = [t for t, (r, _) in trials.items() if r <= best * (1 + TILE_TOLERANCE) + 1e-12]
    tile = tuple(prefer) if prefer and tuple(prefer) in ok else min(ok, key=lambda t: (t[0] * t[1], abs(t[0] - t[1])))
    effs = trials[tile][1]
    fps = []
    for prec, pts in by_prec.items():
        pred = predict_gemm(pts, peaks[prec], effs[prec], tile, units, mem_bw)
        fps += [FitPoint(quantity="gemm", kind=prec, label=f"{p.m}x{p.n}x{p.k} {p.dtype} ({p.source})",
                         measured_s=p.seconds, predicted_s=float(t)) for p, t in zip(pts, pred)]
    return effs, tile, fps


# ---------------------------------------------------------------------------------------------------------
# Attention -> attention_max, attention_half_seq
# ---------------------------------------------------------------------------------------------------------

def attention_flops(p: AttentionPoint) -> float:
    """Forward + backward FLOPs the estimate charges a causal fused attention call (`cost.compute.kernels.attention_ops`)."""
    fwd, bwd = flash_attention_flops(p.batch * p.seq, p.seq, None, p.head_dim, p.heads)
    return float(fwd + bwd)


def fit_attention(points: list[AttentionPoint], peak: float) -> tuple[float, float, list[FitPoint]]:
    """(attention_max, attention_half_seq) reproducing fused attention fwd+bwd times at `peak` (bf16) FLOP/s (the
    forward-only timings are the attention table's: measured_tables)."""
    points = [p for p in points if p.passes == "forward_backward"]
    flops = np.array([attention_flops(p) for p in points])
    seq = np.array([p.seq for p in points], float)
    secs = np.array([p.seconds for p in points])
    eff = flops / (secs * peak)
    resid = lambda x: _log_err(flash_attention_time(flops, seq, peak, x[0], x[1]), secs)
    x0 = [min(1.0, eff.max() * 1.2), float(np.median(seq))]
    res = least_squares(resid, x0, bounds=([1e-6, 0.0], [1.0, 1e7]), x_scale=[0.1, x0[1]])
    amax, half = float(res.x[0]), float(res.x[1])
    pred = flash_attention_time(flops, seq, peak, amax, half)
    return amax, half, [FitPoint(quantity="attention", kind="sdpa", label=f"b{p.batch} h{p.heads} s{p.seq} d{p.head_dim}",
                                 measured_s=p.seconds, predicted_s=float(t)) for p, t in zip(points, pred)]


# ---------------------------------------------------------------------------------------------------------
# Collectives -> latency_us, bandwidth_gbps * collective_efficiency of the innermost tier
# ---------------------------------------------------------------------------------------------------------

def comm_coefficients(p: CommPoint, system: System, nproc: int) -> tuple[float, float]:
    """(c_lat, c_bw) with the cost model's time = latency * c_lat + c_bw / bus_bandwidth for this point.

    The group's phases come from `group_phases` on `system` (a job of `nproc` devices, groups of consecutive
    ranks); all must lie on the innermost tier, the one a one-node calibration measures.
    """
    if p.kind == "p2p":
        return float(p2p_time(0.0, math.inf, 1.0)), float(p2p_time(p.size_bytes, 1.0, 0.0))
    phases = group_phases(system, p.group_size, 1, nproc)
    if any(ph.tier != system.tiers[0].name for ph in phases):
        raise ValueError(f"a group of {p.group_size} spans tiers beyond {system.tiers[0].name}; "
                         "calibrate measures the innermost tier only")
    lat = [Phase(ph.tier, ph.members, math.inf, 1.0) for ph in phases]
    bw = [Phase(ph.tier, ph.members, 1.0, 0.0) for ph in phases]
    return float(collective_time(p.kind, 0.0, lat)), float(collective_time(p.kind, float(p.size_bytes), bw))


def _fit_latency_bandwidth(c: np.ndarray, secs: np.ndarray) -> tuple[float, float]:
    """(latency s, bus bandwidth bytes/s) minimising the log error of t = a * c_lat + c_bw / B: the relative-error
    linear fit (non-negative, scipy `nnls`) as the start, then scipy `least_squares` in (log a, log 1/B)."""
    a0, ib0 = nnls(c / secs[:, None], np.ones(len(secs)))[0]
    x0 = np.log([max(a0, 1e-7), max(ib0, 1e-12)])
    res = least_squares(lambda x: _log_err(np.exp(x[0]) * c[:, 0] + np.exp(x[1]) * c[:, 1], secs), x0)
    return float(np.exp(res.x[0])), float(1.0 / np.exp(res.x[1]))


def _predict_comm(c: np.ndarray, latency: float, bus: float) -> np.ndarray:
    return latency * c[:, 0] + c[:, 1] / bus


def _condition(c: np.ndarray, secs: np.ndarray) -> float:
    """Condition number of the relative-error design matrix (columns c_lat / t, c_bw / t scaled to unit norm):
    large where the points cannot tell latency from bandwidth (one size, or all latency- or bandwidth-bound)."""
    a = c / secs[:, None]
    norms = np.linalg.norm(a, axis=0)
    if not np.all(norms > 0):
        return math.inf
    return float(np.linalg.cond(a / norms))


def fit_network(points: list[CommPoint], system: System, nproc: int) -> tuple[NetworkFit, list[FitPoint]]:
    """Per-step latency and bus bandwidth of the innermost tier: one pair reproducing every collective and
    send (the tier's `latency_us`, `collective_efficiency`), and one pair per kind fitted on that kind's points
    alone (`NetworkTier.by_kind`; the kinds differ: gloo's all-gather and reduce-scatter are not rings).
    A kind with fewer than MIN_KIND_POINTS points or a design matrix conditioned worse than MAX_KIND_CONDITION
    keeps the shared pair. The fit points are predicted as the spec will: each kind with its own pair if it
    has one."""
    c = np.array([comm_coefficients(p, system, nproc) for p in points])
    secs = np.array([p.seconds for p in points])
    kinds = np.array([p.kind for p in points])
    latency, bus = _fit_latency_bandwidth(c, secs)
    shared = _predict_comm(c, latency, bus)
    pred = shared.copy()
    by_kind, fallback = {}, {}
    for kind in dict.fromkeys(kinds):  # measured kinds, in order
        sel = kinds == kind
        n = int(sel.sum())
        if n < MIN_KIND_POINTS:
            fallback[kind] = f"{n} point(s), fewer than {MIN_KIND_POINTS}"
            continue
        cond = _condition(c[sel], secs[sel])
        if not cond <= MAX_KIND_CONDITION:
            fallback[kind] = (f"ill-conditioned: condition number {cond:.3g} of the relative-error design matrix "
                              f"> {MAX_KIND_CONDITION:.0e} (latency and bandwidth not told apart)")
            continue
        k_lat, k_bus = _fit_latency_bandwidth(c[sel], secs[sel])
        if not (math.isfinite(k_lat) and math.isfinite(k_bus) and k_bus > 0):
            fallback[kind] = f"fit did not converge (latency {k_lat}, bus bandwidth {k_bus})"
            continue
        pred[sel] = _predict_comm(c[sel], k_lat, k_bus)
        by_kind[kind] = KindNetworkFit(
            latency_s=k_lat, bus_bandwidth=k_bus, best_bus_bandwidth=float(np.max(c[sel, 1] / secs[sel])), points=n,
            shared_median_abs_error=float(np.median(np.abs(shared[sel] / secs[sel] - 1.0))))
    fit = NetworkFit(latency_s=latency, bus_bandwidth=bus, best_bus_bandwidth=float(np.max(c[:, 1] / secs)),
                     by_kind=by_kind, fallback=fallback)
    return fit, [FitPoint(quantity="comm", kind=p.kind, label=f"{p.kind} n{p.group_size} {p.size_bytes} B",
                          measured_s=p.seconds, predicted_s=float(v)) for p, v in zip(points, pred)]


# ---------------------------------------------------------------------------------------------------------
# Collectives beside compute -> comm_overlap
# ---------------------------------------------------------------------------------------------------------

def overlap_fraction(compute_s: float, comm_s: float, both_s: float) -> float:
    """Fraction of the shorter of compute and communication that ran concurrently with the other:
    (t_c + t_m - t_both) / min(t_c, t_m), clipped to [0, 1]. Serial: t_both = t_c + t_m -> 0; fully concurrent:
    t_both = max(t_c, t_m) -> 1."""
    return min(1.0, max(0.0, (compute_s + comm_s - both_s) / min(compute_s, comm_s)))


def fit_overlap(run: OverlapRun) -> float:
    """comm_overlap: the median over repeats of `overlap_fraction` of each repeat's three times."""
    return float(np.median([overlap_fraction(c, m, b) for c, m, b in zip(run.compute_s, run.comm_s, run.both_s)]))


# ---------------------------------------------------------------------------------------------------------
# Everything
# ---------------------------------------------------------------------------------------------------------

def residual_table(points: list[FitPoint]) -> list[Residuals]:
    """Per (quantity, kind): median and max |predicted / measured - 1| and the geometric-mean bias."""
    if not points:
        return []
    df = pd.DataFrame([dict(quantity=p.quantity, kind=p.kind, err=p.rel_error,
                            log=math.log(p.predicted_s / p.measured_s)) for p in points])
    out = []
    for (q, k), g in df.groupby(["quantity", "kind"], sort=False):
        out.append(Residuals(quantity=q, kind=k, points=len(g), median_abs_error=float(g.err.abs().median()),
                             max_abs_error=float(g.err.abs().max()), bias=float(math.exp(g.log.mean()) - 1)))
    return out


def gemm_roofline_bandwidth(m: Measurements) -> float:
    """The streaming (copy/add) bandwidth in the estimate's bytes: it counts 2 B per GEMM operand element
    (bf16) while the benchmark's dtype may be wider (fp32 on CPU)."""
    size = {"fp32": 4, "bf16": 2, "fp16": 2}.get(m.env.dtype, 2)
    return best_stream_bandwidth(m.memory) * ACT_BYTES / size


def fit_all(m: Measurements, template: System, prefer_tile: tuple[int, int] | None = None) -> FitResult:
    """Fit every efficiency parameter of `template` (whose peaks, compute units and tiers are the reference)
    to the measurements `m`.

    Order: GEMMs (matmul_max, tile) with the roofline at the streaming bandwidth; optimizer_bandwidth from the
    AdamW steps; then memory_bandwidth from whole layers given those (or, with no layer measured, from the elementwise kernels alone); attention;
    the network tier (shared and per kind); comm_overlap. The GEMM residuals reported are those of the final
    spec (at memory_bandwidth).
    """
    acc, nproc = template.accelerator, m.env.nproc
    peak_bw = acc.hbm_bandwidth
    precisions = sorted({p.precision for p in m.gemm})
    peaks = {prec: acc.peak_flops(prec) for prec in precisions}
    gemm_bw = gemm_roofline_bandwidth(m) or peak_bw
    effs, tile, _ = fit_gemm(roofline_gemms(m.gemm), peaks, acc.compute_units, gemm_bw, prefer_tile) if m.gemm else (
        {}, tuple(prefer_tile or template.efficiency.matmul_tile), [])  # a trace without GEMM shapes: none fitted
    layer_pts = []
    opt_eff = fit_optimizer(m.memory, peak_bw)
    if m.layers and "bf16" in effs:
        mem_eff, layer_pts = fit_memory_layers(m, peak_bw, gemm_bw, effs["bf16"], tile, acc.compute_units,
                                               peaks["bf16"], opt_eff)
    elif any(p.purpose == "layer" and LAYER_COUNT.get(p.kernel) for p in m.memory):
        mem_eff = fit_memory(m.memory, peak_bw)
    else:  # a trace with no norm, activation or residual add at a recorded shape: the template's stands
        mem_eff = template.efficiency.memory_bandwidth
    gpts = []
    for prec in precisions:
        pts = [p for p in roofline_gemms(m.gemm) if p.precision == prec]
        pred = predict_gemm(pts, peaks[prec], effs[prec], tile, acc.compute_units, peak_bw * mem_eff)
        gpts += [FitPoint(quantity="gemm", kind=prec, label=f"{p.m}x{p.n}x{p.k} {p.dtype} ({p.source})",
                          measured_s=p.seconds, predicted_s=float(t)) for p, t in zip(pts, pred)]
    if any(p.passes == "forward_backward" for p in m.attention):
        amax, half, apts = fit_attention(m.attention, acc.peak_flops("bf16"))
    else:  # none measured (a trace without fused attention): the template's stand
        amax, half, apts = template.efficiency.attention_max, template.efficiency.attention_half_seq, []
    network, cpts = (None, [])
    if m.comm:
        network, cpts = fit_network(m.comm, template, nproc)
    overlap = fit_overlap(m.overlap) if m.overlap is not None else None
    points = gpts + apts + memory_points(m.memory, peak_bw, mem_eff, opt_eff) + cpts + layer_pts
    return FitResult(peak_flops=peaks, matmul_max=effs, matmul_tile=tile, compute_units=acc.compute_units,
                     attention_max=amax, attention_half_seq=half, peak_bandwidth=peak_bw,
                     best_stream_bandwidth=best_stream_bandwidth(m.memory), gemm_bandwidth=gemm_bw,
                     memory_bandwidth=mem_eff, optimizer_bandwidth=opt_eff, layer_errors=layer_pts, network=network, comm_overlap=overlap,
                     points=points, residuals=residual_table(points))
