"""Time of one kernel on one device: GEMMs, fused attention, and memory-bound (elementwise) kernels.

All functions take numpy arrays or scalars alike and return seconds.
"""

from __future__ import annotations

import numpy as np


def gemm_time(m, n, k, peak_flops, max_eff, tile_m, tile_n, units, mem_bw, in_bytes=2.0, out_bytes=2.0, batch=1):
    """Seconds for `batch` GEMMs C[m,n] = A[m,k] @ B[k,n].

    Compute bound: 2mnk FLOPs (one multiply-add = 2 FLOPs) at `max_eff * peak_flops`, the best-shape rate
    a microbenchmark measured, times the useful fraction of the tile slots the kernel occupies:
      tile quantisation  (m*n) / (ceil(m/tile_m) * ceil(n/tile_n) * tile_m * tile_n)
      wave quantisation  tiles / (ceil(tiles/units) * units)
    whose product is (m*n) / (waves * units * tile_m * tile_n)  (NVIDIA, "Matrix Multiplication Background
    User's Guide", sections on tile and wave quantisation). Memory bound: operands and result streamed once,
    (m*k + k*n) * in_bytes + m*n * out_bytes at `mem_bw` (achievable bytes/s). The slower of the two wins
    (roofline, Williams et al. 2009).
    """
    m, n, k = np.asarray(m, float), np.asarray(n, float), np.asarray(k, float)
    tiles = np.ceil(m / tile_m) * np.ceil(n / tile_n)
    waves = np.ceil(tiles / units)
    useful = (m * n) / (waves * units * tile_m * tile_n)
    t_compute = 2.0 * m * n * k / (peak_flops * max_eff * useful)
    t_memory = ((m * k + k * n) * in_bytes + m * n * out_bytes) / mem_bw
    return batch * np.maximum(t_compute, t_memory)


def memory_bound_time(nbytes, mem_bw):
    """Seconds to stream `nbytes` through HBM at the achievable bandwidth `mem_bw` (bytes/s)."""
    return np.asarray(nbytes, float) / mem_bw


def attention_efficiency(seq, max_eff, half_seq):
    """Fraction of peak a fused attention kernel reaches at sequence length `seq` (keys per query block).

    Saturating curve eff = max_eff * seq / (seq + half_seq): short sequences leave the kernel's pipeline and
    the GPU's SMs under-filled. Shape from FlashAttention-2's measured fwd+bwd throughput vs. sequence length
    (Dao 2023, Fig. 4); both constants live in the hardware spec.
    """
    seq = np.asarray(seq, float)
    return max_eff * seq / (seq + half_seq)


def flash_attention_time(flops, seq, peak_flops, max_eff, half_seq):
    """Seconds for a fused attention kernel doing `flops` FLOPs at sequence length `seq`."""
    return np.asarray(flops, float) / (peak_flops * attention_efficiency(seq, max_eff, half_seq))
