"""Grouped GEMMs: a device's local experts in one kernel, against one dense GEMM of the same rows."""

from __future__ import annotations

import numpy as np

from .kernel_time import gemm_traffic_bytes, memory_bound_time


def grouped_slowdown(curve, tokens_per_group, groups):
    """(forward, input gradient, weight gradient) time of a grouped GEMM over that of one dense GEMM of the same
    rows: the accelerator's measured `GroupedGemmSlowdown` at `tokens_per_group` routed tokens per expert,
    interpolated in log tokens and held at the end points beyond them; 1 where `groups` is 1 (one expert per
    device: a plain GEMM) or nothing was measured. Dimensionless, per plan.

    Source: the grouped-GEMM benchmark on a lent H200 (torch._grouped_mm against cuBLAS's torch.mm, bf16, the MoE
    presets' expert shapes; its H200 result is kept with it): a grouped GEMM splits each
    expert's m rows into its own tiles, so a small m leaves tiles part empty and waves part full, and its weight
    gradient reduces over m tokens where the dense GEMM's reduces over g*m (1.8-2.4x at 128 tokens, 1.1-1.25x at
    1024, ~1.05-1.1x from 4096)."""
    one = np.ones(np.broadcast_shapes(np.shape(tokens_per_group), np.shape(groups)))
    if curve is None:
        return one, one, one
    at = np.log(np.maximum(np.asarray(tokens_per_group, float), 1.0))
    x = np.log(np.asarray(curve.tokens_per_group, float))
    grouped = np.asarray(groups) > 1
    return tuple(np.where(grouped, np.interp(at, x, ratios), 1.0) * one
                 for ratios in (curve.forward, curve.input_grad, curve.weight_grad))


def grouped_passes(dev, curve, priced, m, n, k, batch, precision, in_bytes: float, act_bytes: float):
    """(forward, input gradient, weight gradient) seconds of `batch` grouped GEMMs of m rows each (where batch > 1;
    `priced` elsewhere): the measured `grouped_slowdown` times what it was measured against, one dense GEMM of all
    batch*m rows on the part (`Device.gemm`; the weight gradient reducing over batch*m), floored by the traffic of
    the batch separate weights (`cost.compute.kernel_time.gemm_traffic_bytes` at the part's bandwidth), which the dense GEMM's
    one weight does not read. Seconds, per plan."""
    g = np.asarray(batch, float)
    out = []
    for r, old, dense, own in zip(grouped_slowdown(curve, m, batch), priced,
                                  ((m * g, n, k), (m * g, k, n), (k, n, m * g)), ((m, n, k), (m, k, n), (k, n, m))):
        floor = memory_bound_time(gemm_traffic_bytes(*own, in_bytes, act_bytes, batch), dev.mem_bw)
        out.append(np.where(g > 1, np.maximum(r * dev.gemm(*dense, 1, precision), floor), old))
    return tuple(out)
