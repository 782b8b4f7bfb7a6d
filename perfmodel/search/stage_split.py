"""Split the layers of a plan into pipeline stages: a dynamic program that balances stage time under each
stage's memory limit.

Step time grows with the slowest stage (pipeline_time: m * t_max + (pp - 1) / vpp * t_mean, and t_mean does
not depend on the split), so the best split minimises the largest per-micro-batch stage time. Stage i holds
layers l_i (>= vpp, so each chunk has a layer), plus the embedding on the first and the LM head and loss on the
last; its time per micro-batch is l_i * t_layer (+ t_embedding | t_head) + sends, and its memory depends on
its rank (1F1B: the first stage holds pp micro-batches in flight, the last one); with interleaving every stage
holds a multiple of vpp layers, so that its chunks stay equal. Both come from the cost
model itself (`evaluate` and `stage_memory` over every (stage, layer count) pair); the DP is the classic
linear-partition recurrence (e.g. Narayanan et al. 2019, PipeDream, Sec. 3.1):

  best[i][l] = min over k of max(best[i-1][l-k], time(i, k))   subject to memory(i, k) <= capacity
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost.host.launch_queue import stage_launches
from ..cost.memory.footprint import stage_memory
from ..cost.memory.fit import memory_limits
from ..cost.pipeline.stages import Stages
from ..cost.step.evaluate import Step, evaluate
from ..cost.layouts import Layouts
from ..spec.hardware.system import System
from ..spec.model.config import ModelConfig
from ..spec.plan.layout import Plan


@dataclass
class StageSplit:
    layers: list[int]
    t_max: float  # seconds per micro-batch of the slowest stage
    memory: list[float]  # bytes per stage
    default_t_max: float
    fits: bool


def _stage_costs(model: ModelConfig, system: System, plan: Plan, step: Step | None = None):
    """time[i, k] and memory[i, k]: stage i (of pp) holding k layers (0..n_layers), from the cost model (`step`:
    the plan on its default split, evaluated, if the caller has it)."""
    n, pp = model.n_layers, plan.pp
    lay = Layouts.from_plan(plan.model_copy(update={"stage_layers": None}))
    step = evaluate(model, system, lay) if step is None else step
    unit = {u: step.unit_time[u][0] for u in ("layer", "embedding", "head")}
    ks = np.arange(n + 1, dtype=float)
    ranks = np.arange(pp)
    shape = (pp, n + 1)
    grid = Stages(layers=np.broadcast_to(ks, shape).reshape(-1, 1),
                  embedding=np.broadcast_to((ranks == 0)[:, None], shape).reshape(-1, 1).astype(float),
                  head=np.broadcast_to((ranks == pp - 1)[:, None], shape).reshape(-1, 1).astype(float),
                  rank=np.broadcast_to(ranks[:, None], shape).reshape(-1, 1).astype(float),
                  valid=np.ones((pp * (n + 1), 1), bool)).with_mtp(model.mtp_layers)
    # the device's seconds per micro-batch, and those it waits on its host (cost.host.launch_queue.stage_launches)
    at = lambda per_unit: grid.seconds({u: per_unit[u][0] for u in per_unit}).reshape(shape)  # noqa: E731
    p2p, sends = float(step.p2p[0]), float(step.send_host[0])
    dev_f = at(step.unit_fwd) + p2p / 2
    dev_b = at({u: step.unit_time[u] - step.unit_fwd[u] for u in unit}) + p2p / 2
    wait = stage_launches(step.host_rates, model, at({u: step.unit_host[u][0] for u in unit}),
                          at({u: step.unit_host[u][1] for u in unit}), sends, dev_f, dev_b, pp, plan.vpp,
                          grid.layers.reshape(shape))[3]
    time = grid.seconds(unit).reshape(shape) + p2p + wait
    by_kind = stage_memory(model, system, lay, grid, per_kind=True)
    return time, by_kind["reserved"].reshape(shape), float(step.stage_time_max[0])


def balance_stages(model: ModelConfig, system: System, plan: Plan, step: Step | None = None) -> StageSplit:
    """The split of `plan` (resolved) that minimises the slowest stage's time with every stage in memory
    (`step`: the plan on its default split evaluated, `cost.step.evaluate.evaluate`, if the caller has it).

    Where no split fits, the one with the smallest largest-stage memory overshoot is returned (fits=False).
    """
    n, pp, vpp = model.n_layers, plan.pp, plan.vpp
    time, mem, default_t = _stage_costs(model, system, plan, step)
    # a split perfmodel moves layers into keeps the headroom (fits, not tight): a tight plan keeps its own split
    cap = step.budget if step is not None else memory_limits(system, plan.stack)[0]
    if pp == 1:
        return StageSplit([n], float(time[0, n]), [float(mem[0, n])], default_t, bool(mem[0, n] <= cap))
    fits = True
    whole = (np.arange(n + 1) % vpp == 0)[None, :]  # equal chunks per stage
    cost = np.where((mem <= cap) & whole, time, np.inf)
    for attempt in range(2):
        best = np.full((pp, n + 1), np.inf)
        choice = np.zeros((pp, n + 1), int)
        best[0, vpp:] = cost[0, vpp:]
        choice[0] = np.arange(n + 1)
        for i in range(1, pp):
            for total in range(vpp * (i + 1), n + 1):
                ks = np.arange(vpp, total - vpp * i + 1)  # layers on stage i; the earlier stages keep >= vpp each
                cand = np.maximum(best[i - 1, total - ks], cost[i, ks])
                j = int(np.argmin(cand))
                best[i, total], choice[i, total] = cand[j], ks[j]
        if np.isfinite(best[pp - 1, n]):
            break
        fits = False  # nothing fits: minimise the largest memory overshoot instead
        cost = np.where(whole, mem - cap, np.inf)
    layers, left = [], n
    for i in range(pp - 1, -1, -1):
        k = int(choice[i, left])
        layers.append(k)
        left -= k
    layers.reverse()
    t_max = float(max(time[i, k] for i, k in enumerate(layers)))
    return StageSplit(layers, t_max, [float(mem[i, k]) for i, k in enumerate(layers)], default_t, fits)
