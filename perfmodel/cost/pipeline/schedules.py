"""Pipeline parallelism: layers per stage, micro-batches in flight, step time and bubble per schedule."""

from __future__ import annotations

import numpy as np

from ...spec.plan.megatron_split import megatron_chunks
from ...spec.plan.layout import default_stage_layers
from ..layouts import among


def stage_layers(n_layers: int, pp: int, embedding: bool = False, loss: bool = False) -> tuple[int, int, int]:
    """(first, largest middle, last) stage layer counts of the default split (spec.plan.layout.default_stage_layers), or of
    Megatron-LM's accounting of the embedding / loss as layers (spec.plan.megatron_split.megatron_chunks; stage counts do not depend
    on vpp). With pp = 1 the single stage is first, middle and last; with pp = 2 "middle" is the larger of the two."""
    if embedding or loss:
        split = megatron_chunks(n_layers, pp, 1, embedding, loss)  # one chunk per stage
    else:
        split = default_stage_layers(n_layers, pp)
    return split[0], max(split[1:-1] or split), split[-1]


def warmup_forwards(schedule, pp: int, vpp: int, m, rank: int):
    """Forwards pipeline rank `rank` runs before its first backward. GPipe: all m vpp (Huang et al. 2019).
    1F1B: min(pp - rank - 1, m) (Narayanan et al. 2021, Sec. 2.2, PipeDream-Flush). Interleaved 1F1B:
    Megatron-LM's num_warmup_microbatches = min(2 (pp - rank - 1) + (vpp - 1) pp, m vpp)
    (megatron/core/pipeline_parallel/schedules.py)."""
    m = np.asarray(m, float)
    interleaved = np.minimum(2 * (pp - rank - 1) + (vpp - 1) * pp, m * vpp)
    one_f_one_b = np.minimum(pp - rank - 1, m)
    return np.where(among(schedule, ("gpipe",)), m * vpp,
                    np.where(among(schedule, ("interleaved",)), interleaved, one_f_one_b))


def in_flight(schedule: str, pp: int, vpp: int, m, rank: int):
    """Micro-batch-chunks whose activations stage `rank` (0-based) holds at its peak, in units of 1/vpp of its layers.

    GPipe: all m micro-batches (Huang et al. 2019). 1F1B: min(pp - rank, m) (Narayanan et al. 2021, Sec. 2.2).
    Interleaved 1F1B: min(2 (pp - rank - 1) + (vpp - 1) pp + 1, m vpp) model chunks, Megatron-LM's warm-up
    count; for rank 0 that is pp vpp (1 + (pp - 1)/(pp vpp)) chunks (Korthikanti et al. 2022, Sec. 4.2.3).
    """
    return np.minimum(warmup_forwards(schedule, pp, vpp, m, rank) + 1, np.asarray(m, float) * vpp)


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


def schedule_order(schedule: str, pp: int, vpp: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    """The (direction "F" | "B", micro-batch, chunk) blocks pipeline rank `rank` runs, in its order.

    GPipe: every forward, then every backward (Huang et al. 2019). 1F1B: pp - rank - 1 warm-up forwards, then
    one forward / one backward, then the remaining backwards (Narayanan et al. 2021, Sec. 2.2, PipeDream-Flush).
    Interleaved 1F1B: Megatron-LM's order (Narayanan et al. 2021, Sec. 2.2; megatron/core/pipeline_parallel/
    schedules.py): `warmup_forwards` forwards over m vpp virtual micro-batches, where
    forward k is micro-batch (k // (pp vpp)) pp + k % pp of chunk (k // pp) % vpp and backward k runs the
    chunks in reverse; m must be a multiple of pp (spec.plan.layout.resolve checks).
    """
    total, warm = m * vpp, int(warmup_forwards(schedule, pp, vpp, m, rank))  # GPipe: every forward first
    if schedule == "interleaved":
        mb = lambda k: (k // (pp * vpp)) * pp + k % pp
        fwd = lambda k: ("F", mb(k), (k // pp) % vpp)
        bwd = lambda k: ("B", mb(k), vpp - 1 - (k // pp) % vpp)
    else:
        fwd, bwd = (lambda k: ("F", k, 0)), (lambda k: ("B", k, 0))
    steady = [b for i in range(total - warm) for b in (fwd(warm + i), bwd(i))]
    return [fwd(k) for k in range(warm)] + steady + [bwd(k) for k in range(total - warm, total)]


def _dependency(block: tuple[str, int, int], rank: int, pp: int, vpp: int):
    """(rank, block) that must finish before `block` on `rank` starts, or None: a forward waits for the
    previous stage's forward of the same micro-batch (chunk c on rank 0 for chunk c - 1 on the last rank);
    a backward for the next stage's backward (the last chunk's on the last rank for its own forward)."""
    d, i, c = block
    if d == "F":
        if rank > 0:
            return rank - 1, ("F", i, c)
        return (pp - 1, ("F", i, c - 1)) if c > 0 else None
    if rank < pp - 1:
        return rank + 1, ("B", i, c)
    return (0, ("B", i, c + 1)) if c < vpp - 1 else (rank, ("F", i, c))


def schedule_blocks(schedule: str, pp: int, vpp: int, m: int, fwd_s, bwd_s, recompute_s=None):
    """Timeline of one step's pipeline: a DataFrame of blocks (stage, micro_batch, chunk, kind, start_s, end_s).

    fwd_s[r], recompute_s[r], bwd_s[r]: seconds per micro-batch of stage r over all its chunks (each chunk
    takes 1/vpp of them). Each rank runs `schedule_order`; a block starts when its rank is free and its
    `_dependency` has finished (sends cost nothing here: they are inside the stage times). A recomputed
    forward runs right before its backward. For equal stages the makespan is `pipeline_time`:
    (m + pp - 1) t for GPipe and 1F1B, m t + (pp - 1) t / vpp for interleaved 1F1B.
    """
    import pandas as pd

    rec = [0.0] * pp if recompute_s is None else list(recompute_s)
    orders = [schedule_order(schedule, pp, vpp, m, r) for r in range(pp)]
    done: dict[tuple[int, tuple], float] = {}
    nxt, free, rows = [0] * pp, [0.0] * pp, []
    while any(nxt[r] < len(orders[r]) for r in range(pp)):
        progressed = False
        for r in range(pp):
            while nxt[r] < len(orders[r]):
                block = orders[r][nxt[r]]
                dep = _dependency(block, r, pp, vpp)
                if dep is not None and dep not in done:
                    break
                t = max(free[r], done[dep] if dep is not None else 0.0)
                d, i, c = block
                parts = [("forward", fwd_s[r])] if d == "F" else [("recompute", rec[r]), ("backward", bwd_s[r])]
                for kind, seconds in parts:
                    if seconds > 0:
                        rows.append((r, i, c, kind, t, t + seconds / vpp))
                        t += seconds / vpp
                done[(r, block)], free[r] = t, t
                nxt[r] += 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"{schedule} schedule with pp={pp}, vpp={vpp}, m={m} deadlocks")  # a bug, not input
    return pd.DataFrame(rows, columns=["stage", "micro_batch", "chunk", "kind", "start_s", "end_s"])


def interleaved_peak(pp: int, vpp: int, m: int, rank: int, weights) -> tuple[float, np.ndarray]:
    """(peak, held): the most of sum(weights[c] per micro-batch of chunk c it holds) that pipeline rank `rank`
    holds under Megatron-LM's interleaved 1F1B, and how many micro-batches of each chunk it holds then.

    Megatron-Core's order (megatron/core/pipeline_parallel/schedules.py get_schedule_table,
    get_pp_rank_microbatches, forward_backward_pipelining_with_interleaving): micro-batches in groups of
    microbatch_group_size_per_vp_stage = pp (its default), every chunk of a group in turn; the k-th forward runs
    chunk c_k of that table and the k-th backward chunk vpp - 1 - c_k; W = `warmup_forwards` forwards first, then
    one forward and one backward each. With equal weights w the peak is (W + 1) w (`in_flight`); where chunks hold
    unequal layers (Megatron-LM's embedding / loss accounting, first / last stage counts) it is what the held
    chunks hold, not the mean."""
    total = int(m) * vpp
    groups = [min(pp, int(m) - g) for g in range(0, int(m), pp)]
    fwd = np.concatenate([np.repeat(np.arange(vpp), n) for n in groups])  # chunk of the k-th forward
    bwd = vpp - 1 - fwd
    w = np.asarray(weights, float)
    warm = int(warmup_forwards("interleaved", pp, vpp, m, rank))
    f, b = np.cumsum(w[fwd]), np.concatenate([[0.0], np.cumsum(w[bwd])])
    # held after the n-th forward: all of them during the warm-up, then forwards W + i + 1 less backwards i
    held = np.concatenate([f[:warm], f[warm:] - b[: total - warm]])
    at = int(np.argmax(held))
    n_fwd, n_bwd = at + 1, max(at - warm, 0)
    count = np.bincount(fwd[:n_fwd], minlength=vpp) - np.bincount(bwd[:n_bwd], minlength=vpp)
    return float(held[at]), count
