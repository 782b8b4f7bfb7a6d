"""Time of one kernel on one device: GEMMs, fused attention, and memory-bound (elementwise) kernels.

All functions take numpy arrays or scalars alike and return seconds.
"""

from __future__ import annotations

import numpy as np


def gemm_tiles(tile_m, tile_n, smallest=None):
    """Tile shapes a GEMM library may pick, with their throughput relative to the spec's tile.

    Candidates: the spec's tile, its transpose, and halvings down to `smallest`. A tile of tm x tn does
    2*tm*tn*k FLOPs per (tm + tn)*k operands it loads, so its operand traffic per FLOP grows as
    (1/tm + 1/tn). The spec tile is the one the library uses for large problems, i.e. the smallest that keeps
    the tensor cores fed; a smaller tile runs at the ratio of its arithmetic intensity to the spec tile's
    (it waits on shared-memory / L2 bandwidth), so it only wins where quantisation would waste more.
    """
    smallest = min(64, tile_m, tile_n) if smallest is None else smallest
    ref = tile_m * tile_n / (tile_m + tile_n)
    out = {}
    for a, b in ((tile_m, tile_n), (tile_n, tile_m)):
        x, y = a, b
        while x >= smallest and y >= smallest:
            out[(x, y)] = min(1.0, x * y / (x + y) / ref)
            if x >= y:
                x //= 2
            else:
                y //= 2
    return sorted(out.items())


def gemm_time(m, n, k, peak_flops, max_eff, tile_m, tile_n, units, mem_bw, in_bytes=2.0, out_bytes=2.0, batch=1):
    """Seconds for `batch` independent GEMMs C[m,n] = A[m,k] @ B[k,n] run as one (batched) kernel.

    Compute bound: 2mnk FLOPs (one multiply-add = 2 FLOPs) per GEMM at `max_eff * peak_flops`, the best-shape
    rate a microbenchmark measured, times the useful fraction of the tile slots the kernel occupies:
      tile quantisation  (m*n) / (ceil(m/tm) * ceil(n/tn) * tm * tn)
      wave quantisation  tiles / (ceil(tiles/units) * units),  tiles = batch * ceil(m/tm) * ceil(n/tn)
    whose product is batch*m*n / (waves * units * tm * tn)  (NVIDIA, "Matrix Multiplication Background
    User's Guide", tile and wave quantisation), times the tile's relative throughput, for the best tile of
    `gemm_tiles`. Memory bound: operands and result streamed once, batch * ((m*k + k*n) * in_bytes +
    m*n * out_bytes) at `mem_bw` (achievable bytes/s). The slower of the two wins (roofline, Williams et al.
    2009).
    """
    m, n, k = np.asarray(m, float), np.asarray(n, float), np.asarray(k, float)
    useful = 0.0
    for (tm, tn), rate in gemm_tiles(tile_m, tile_n):
        tiles = batch * np.ceil(m / tm) * np.ceil(n / tn)
        waves = np.ceil(tiles / units)
        useful = np.maximum(useful, rate * batch * m * n / (waves * units * tm * tn))
    t_compute = batch * 2.0 * m * n * k / (peak_flops * max_eff * useful)
    return np.maximum(t_compute, memory_bound_time(gemm_traffic_bytes(m, n, k, in_bytes, out_bytes, batch), mem_bw))


def gemm_traffic_bytes(m, n, k, in_bytes=2.0, out_bytes=2.0, batch=1):
    """Bytes `batch` GEMMs C[m,n] = A[m,k] @ B[k,n] move at least: operands and result streamed once,
    batch * ((m*k + k*n) * in_bytes + m*n * out_bytes) (the roofline's memory side, Williams et al. 2009)."""
    m, n, k = np.asarray(m, float), np.asarray(n, float), np.asarray(k, float)
    return np.asarray(batch, float) * ((m * k + k * n) * in_bytes + m * n * out_bytes)


def memory_bound_time(nbytes, mem_bw):
    """Seconds to stream `nbytes` through HBM at the achievable bandwidth `mem_bw` (bytes/s)."""
    return np.asarray(nbytes, float) / mem_bw


def attention_efficiency(seq, max_eff, half_seq):
    """Fraction of peak a fused attention kernel reaches at sequence length `seq`.

    Calibrated on self-attention (queries = keys = seq). `cost.compute.kernels.attention_ops` gets the queries each device
    holds, s / cp: the kernel's parallel work is (query blocks x heads x batch), and it is that which leaves SMs
    idle on short inputs; with context parallelism the key loop stays s long, which this curve ignores.

    Saturating curve eff = max_eff * seq / (seq + half_seq): short sequences leave the kernel's pipeline and
    the GPU's SMs under-filled. Shape from FlashAttention-2's measured fwd+bwd throughput vs. sequence length
    (Dao 2023, Fig. 4); both constants live in the hardware spec.
    """
    seq = np.asarray(seq, float)
    return max_eff * seq / (seq + half_seq)


def flash_attention_time(flops, seq, peak_flops, max_eff, half_seq):
    """Seconds for a fused attention kernel doing `flops` FLOPs at sequence length `seq`."""
    return np.asarray(flops, float) / (peak_flops * attention_efficiency(seq, max_eff, half_seq))


def shared_core_speedup(busy, job_ranks, host_ranks: int, cores: int):
    """How much faster a rank computes than its measured rate when fewer ranks compute at once (dimensionless).

    Processor sharing (Kleinrock 1967; Linux CFS gives runnable threads equal shares of the cores): on a host of
    C = `cores` cores running R = `host_ranks` single-threaded ranks, a rank's measured rate is r_1 min(1, C/R),
    r_1 its rate on a core of its own. A job of n = min(`job_ranks`, R) ranks that keeps on average
    k = n * `busy` of them computing (`busy`: mean over pipeline stages of their compute per micro-batch over
    the slowest stage's; the others wait on it) runs each at r_1 min(1, C/k). The speed-up is
    min(1, C/k) / min(1, C/R); 1 where every rank computes all the time and the job fills the host.
    """
    n = np.minimum(np.asarray(job_ranks, float), host_ranks)
    k = np.maximum(n * np.asarray(busy, float), 1e-12)
    return np.minimum(1.0, cores / k) / min(1.0, cores / host_ranks)
