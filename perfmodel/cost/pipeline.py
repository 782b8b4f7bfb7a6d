"""Pipeline parallelism: layers per stage, micro-batches in flight, step time and bubble per schedule."""

from __future__ import annotations

import numpy as np


def stage_layers(n_layers: int, pp: int) -> tuple[int, int, int]:
    """(first, largest middle, last) stage layer counts when n_layers are split over pp stages.

    As even as possible; the remainder goes to middle stages first, because the first stage also holds the
    embedding and the last the LM head and loss (e.g. Llama 3 405B: 126 layers over 16 stages gives
    7, 8 x 14, 7; Dubey et al. 2024, Sec. 3.3.2). With pp = 1 the single stage is first and last.
    """
    if pp == 1:
        return n_layers, n_layers, n_layers
    q, r = divmod(n_layers, pp)
    middle_extra = min(r, pp - 2)
    rest = r - middle_extra  # 0, 1 or 2 extra layers for last, then first
    last = q + (1 if rest >= 1 else 0)
    first = q + (1 if rest >= 2 else 0)
    middle = q + (1 if middle_extra > 0 else 0) if pp > 2 else max(first, last)
    return first, middle, last


def in_flight(schedule: str, pp: int, vpp: int, m, rank: int):
    """Micro-batch-chunks whose activations stage `rank` (0-based) holds at its peak, in units of 1/vpp of its layers.

    GPipe: all m micro-batches (Huang et al. 2019). 1F1B: min(pp - rank, m) (Narayanan et al. 2021, Sec. 2.2).
    Interleaved 1F1B: min(2 (pp - rank - 1) + (vpp - 1) pp + 1, m vpp) model chunks, Megatron-LM's warm-up
    count; for rank 0 that is pp vpp (1 + (pp - 1)/(pp vpp)) chunks (Korthikanti et al. 2022, Sec. 4.2.3).
    """
    if schedule == "gpipe":
        return np.asarray(m, float) * vpp
    if schedule == "interleaved":
        return np.minimum(2 * (pp - rank - 1) + (vpp - 1) * pp + 1, np.asarray(m) * vpp)
    return np.minimum(pp - rank, m)


def pipeline_time(m, t_max, t_mean, pp: int, vpp: int):
    """Seconds for m micro-batches through pp stages: m * t_max + (pp - 1) / vpp * t_mean.

    t_max: per-micro-batch time (forward + backward, all chunks) of the slowest stage; t_mean: the mean over
    stages. For equal stages this is (m + pp - 1) t for 1F1B and GPipe and m t + (pp - 1) t / vpp for
    interleaved 1F1B, i.e. bubble fraction (pp - 1) / (vpp m) (Narayanan et al. 2021, Sec. 2.2).
    """
    return np.asarray(m) * t_max + (pp - 1) / vpp * t_mean


def bubble_fraction(m, pp: int, vpp: int):
    """Idle fraction of ideal compute for equal stages: (pp - 1) / (vpp * m)."""
    return (pp - 1) / (vpp * np.asarray(m, float))
