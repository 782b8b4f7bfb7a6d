"""Kernel times looked up in measured tables (`spec.hardware.kernel_tables`), all shapes of a search at once.

Seconds for arrays of shapes, vectorised (no Python loop over shapes), with a mask of the shapes that lie
outside the table's grid, so that a caller can say it extrapolated.
"""

from __future__ import annotations

import numpy as np

from ...spec.hardware.kernel_tables import AttentionGrid, GemmGrid, MoeCurves


def _bracket(axis: np.ndarray, x: np.ndarray):
    """Index i of the grid cell [axis[i], axis[i+1]] holding x, and x's position in it in log space (0..1,
    clipped: outside the grid the edge cell's end value is used and the caller scales from there)."""
    logs = np.log(axis)
    i = np.clip(np.searchsorted(axis, x, side="right") - 1, 0, len(axis) - 2)
    w = (np.log(np.clip(x, axis[0], axis[-1])) - logs[i]) / (logs[i + 1] - logs[i])
    return i, np.clip(w, 0.0, 1.0)


def gemm_table_time(grid: GemmGrid, m, n, k, batch=1):
    """Seconds for `batch` GEMMs Y[m, n] = X[m, k] W[n, k]^T (FLOPs 2 m n k each) from a measured table, and a
    bool mask of the shapes outside its grid.

    Inside the grid: trilinear interpolation of log(seconds) in (log m, log n, log k), exact at measured
    points; log-log is what makes it follow both regimes, since t ~ m n k where the GEMM is compute-bound and
    t ~ (m k + n k + m n) where it is memory- or launch-bound, and a product of powers is linear in logs. Along
    each axis the result stays between the two grid points around it. Outside it (m, n or k
    beyond the largest measured, or below the smallest): the time at the nearest edge scaled by the FLOP ratio
    (compute-bound beyond the top; never cheaper than the smallest measured below the bottom), flagged.
    `batch` GEMMs of one shape run as one batched or grouped kernel (attention heads, a device's local experts:
    Megatron-Core --moe-grouped-gemm), which spreads the tiles of all of them over the SMs: priced as the table's
    one GEMM of batch*m rows, the same FLOPs and tile count. Their separate B operands are not in that time;
    `cost.compute.kernels.Device.gemm_priced` floors it with their traffic.
    """
    m = np.asarray(m, float) * np.asarray(batch, float)
    n, k = np.asarray(n, float), np.asarray(k, float)
    shape = np.broadcast_shapes(m.shape, n.shape, k.shape)
    m, n, k = (np.broadcast_to(x, shape) for x in (m, n, k))
    (im, wm), (jn, wn), (lk, wk) = _bracket(grid.m, m), _bracket(grid.n, n), _bracket(grid.k, k)
    logt = np.log(grid.seconds)
    out = 0.0
    for dm, am in ((0, 1 - wm), (1, wm)):
        for dn, an in ((0, 1 - wn), (1, wn)):
            for dk, ak in ((0, 1 - wk), (1, wk)):
                out = out + am * an * ak * logt[im + dm, jn + dn, lk + dk]
    seconds = np.exp(out)
    above = [np.maximum(x / ax[-1], 1.0) for x, ax in ((m, grid.m), (n, grid.n), (k, grid.k))]
    seconds = seconds * above[0] * above[1] * above[2]
    outside = ((m > grid.m[-1]) | (n > grid.n[-1]) | (k > grid.k[-1]) | (m < grid.m[0]) | (n < grid.n[0])
               | (k < grid.k[0]))
    return seconds, outside


def attention_table_rate(grid: AttentionGrid, head_dim, isl, work):
    """Forward FLOP/s of causal attention from a measured table at prompt length `isl` (queries per sequence)
    and `work` = sequences x query heads, for the table's head dim nearest `head_dim` (in log), and a bool mask
    of the calls outside its grid (another head dim, a length or width beyond the measured).

    Bilinear interpolation of log(FLOP/s) in (log isl, log work), exact at the grid's points. Outside it the
    edge's rate: the rate saturates at long prompts and wide calls (the tables' last doublings change it by
    under 2%), and below the shortest, narrowest call the kernel is launch-bound, which no rate extrapolates.
    """
    isl, work = np.asarray(isl, float), np.asarray(work, float)
    shape = np.broadcast_shapes(isl.shape, work.shape, np.shape(head_dim))
    isl, work = np.broadcast_to(isl, shape), np.broadcast_to(work, shape)
    logs = np.log(grid.head_dim)
    h = np.abs(np.log(np.broadcast_to(np.asarray(head_dim, float), shape))[..., None] - logs).argmin(-1)
    (i, wi), (j, wj) = _bracket(grid.isl, isl), _bracket(grid.work, work)
    logr = np.log(grid.flops_per_s)
    out = 0.0
    for di, ai in ((0, 1 - wi), (1, wi)):
        for dj, aj in ((0, 1 - wj), (1, wj)):
            out = out + ai * aj * logr[h, i + di, j + dj]
    outside = ((grid.head_dim[h] != head_dim) | (isl > grid.isl[-1]) | (isl < grid.isl[0])
               | (work > grid.work[-1]) | (work < grid.work[0]))
    return np.exp(out), outside


def curve_time(x: np.ndarray, seconds: np.ndarray, at: float) -> float:
    """Seconds at `at` on a measured curve (x ascending): log-log between the two points it lies between; below the
    first, the first point's seconds (a fixed floor: a latency, or weights read whatever the few tokens); beyond
    the last, the last point's seconds scaled by at / x[-1] (the work grows with it)."""
    if at <= x[0]:
        return float(seconds[0])
    if at >= x[-1]:
        return float(seconds[-1] * at / x[-1])
    return float(np.exp(np.interp(np.log(at), np.log(x), np.log(seconds))))


def moe_table_time(curves: MoeCurves, key: tuple, tokens: float) -> float | None:
    """Seconds of one fused-MoE forward on one GPU for `tokens` entering the layer, on the measured curve of `key`
    (dtype, hidden, inter, topk, experts, moe_tp, moe_ep) (`curve_time`); None where the table has no such curve."""
    curve = curves.curves.get(key)
    return None if curve is None or tokens <= 0 else curve_time(*curve, tokens)


def allreduce_table_time(curves: dict, gpus: int, nbytes: float) -> float | None:
    """Seconds of one all-reduce of `nbytes` over `gpus` GPUs on a measured curve (`spec.hardware.kernel_tables.
    allreduce_curves`, `curve_time`: the latency floor below it, bandwidth-bound beyond it); None where the table
    did not time that many GPUs."""
    curve = curves.get(int(gpus))
    return None if curve is None or nbytes <= 0 else curve_time(*curve, nbytes)


def decode_table_time(curves: dict, key: tuple, batch: float, keys: float) -> float | None:
    """Seconds of one decode-attention layer call for `batch` sequences of one new token over `keys` keys each, on
    the measured curves of `key` (kv bytes, head dim, q heads, kv heads per GPU; `spec.hardware.kernel_tables.decode_curves`):
    each measured batch's curve over keys (`curve_time`), then log-log between the two batches around `batch`;
    below the smallest batch its time, beyond the largest scaled by batch / largest (the reads grow with it). None
    where the table has no such heads."""
    rows = curves.get(key)
    if rows is None or batch <= 0 or keys <= 0:
        return None
    sizes = sorted(rows)
    if batch <= sizes[0]:
        return curve_time(*rows[sizes[0]], keys)
    if batch >= sizes[-1]:
        return curve_time(*rows[sizes[-1]], keys) * batch / sizes[-1]
    hi = next(b for b in sizes if b >= batch)
    lo = sizes[sizes.index(hi) - 1]
    t_lo, t_hi = curve_time(*rows[lo], keys), curve_time(*rows[hi], keys)
    return float(np.exp(np.interp(np.log(batch), np.log([lo, hi]), np.log([t_lo, t_hi]))))
