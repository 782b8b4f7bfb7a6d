"""Pipeline parallelism: layers per stage, micro-batches in flight, step time and bubble per schedule."""

from __future__ import annotations

import numpy as np

from ..plan import default_stage_layers


def stage_layers(n_layers: int, pp: int) -> tuple[int, int, int]:
    """(first, largest middle, last) stage layer counts of the default split (plan.default_stage_layers).
    With pp = 1 the single stage is first, middle and last; with pp = 2 "middle" is the larger of the two."""
    split = default_stage_layers(n_layers, pp)
    return split[0], max(split[1:-1] or split), split[-1]


def in_flight(schedule: str, pp: int, vpp: int, m, rank: int):
    """Micro-batch-chunks whose activations stage `rank` (0-based) holds at its peak, in units of 1/vpp of its layers.

    GPipe: all m micro-batches (Huang et al. 2019). 1F1B: min(pp - rank, m) (Narayanan et al. 2021, Sec. 2.2).
    Interleaved 1F1B: min(2 (pp - rank - 1) + (vpp - 1) pp + 1, m vpp) model chunks, Megatron-LM's warm-up
    count; for rank 0 that is pp vpp (1 + (pp - 1)/(pp vpp)) chunks (Korthikanti et al. 2022, Sec. 4.2.3).
    """
    m = np.asarray(m, float)
    gpipe = m * vpp
    interleaved = np.minimum(2 * (pp - rank - 1) + (vpp - 1) * pp + 1, m * vpp)
    one_f_one_b = np.minimum(pp - rank, m)
    return np.where(schedule == "gpipe", gpipe, np.where(schedule == "interleaved", interleaved, one_f_one_b))


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
