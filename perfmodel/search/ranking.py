"""Search every layout of a job (one or several GPU counts): rank them, find the Pareto front, write the best.

For each GPU count: enumerate the valid layouts (`space`), drop those whose most loaded device exceeds the
accelerator's memory (`stage_memory`, counted), time the rest (`evaluate`: the same code as `estimate`) and
rank them by the objective:
  time: step time (ties: less memory);
  cost: GPU-hours per step = step time * gpus / 3600 (the global batch is the same for every GPU count, so
        this is the GPU-time per token up to a constant);
  train-time, train-cost: the same with interruptions and checkpoints counted: step time / goodput, where
        goodput is `perfmodel.run.reliability.goodput_at` for the GPU count (its default interruption rate, restart and
        store, synchronous checkpoints at Daly's interval), which falls as the job grows;
  energy: facility kWh per step, the same counted (`perfmodel.run.energy` at its defaults: the step at its
        activity, lost work computed again, checkpoints and restarts waiting).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..cost.memory.footprint import stage_memory, state_floor
from ..cost.memory.fit import host_limit, memory_budget, memory_limits
from ..cost.step.evaluate import evaluate
from ..errors import InputError
from ..run.energy import Power, activity, facility_kwh, power_for
from ..run.reliability import (
    DEFAULT_STORAGE,
    INTERRUPTION_RATE,
    RESTART_OVERHEAD_S,
    checkpoint_bytes,
    goodput_at,
)
from ..spec.hardware.system import DEFAULT_HEADROOM, System, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.model.catalogue import load_model
from ..spec.plan.layout import Plan
from ..spec.plan.recompute import MAXTEXT_OFFLOADED, MAXTEXT_REMAT
from ..spec.stack.profile import check_compile
from .space import Job, Space, capacity_of, enumerate_layouts, remat_jobs, with_release

PLAN_COLUMNS = ["gpus", "tp", "pp", "dp", "dp_replicate", "cp", "vpp", "ep", "etp", "micro_batch", "recompute",
                "sequence_parallel", "zero", "schedule", "account_for_embedding", "account_for_loss"]
RESULT_COLUMNS = ["step_time_s", "tokens_per_s", "mfu", "memory_gib", "fits_in_memory", "memory_tight",
                  "gpu_hours_per_step",
                  "goodput", "wall_s_per_step", "wall_gpu_hours_per_step", "energy_kwh_per_step"]
OBJECTIVES = {"time": ["step_time_s", "memory_gib"], "cost": ["gpu_hours_per_step", "step_time_s", "memory_gib"],
              "train-time": ["wall_s_per_step", "step_time_s", "memory_gib"],
              "train-cost": ["wall_gpu_hours_per_step", "step_time_s", "memory_gib"],
              "energy": ["energy_kwh_per_step", "step_time_s", "memory_gib"]}
GIB = 2**30


@dataclass
class SearchResult:
    """Ranked feasible plans of every GPU count searched, with what the search counted.

    The ranking is numpy columns (`columns`, `records`); `table` and `counts` are the same as pandas
    DataFrames, built on first use (the search itself does not import pandas)."""

    model: ModelConfig
    system: System
    job: Job  # the job of the first GPU count (global batch, sequence, precision, kernels)
    objective: str
    columns: dict[str, np.ndarray]  # feasible plans, best first: PLAN_COLUMNS + RESULT_COLUMNS
    count_rows: list[dict]  # per GPU count: gpus, enumerated, feasible, pruned_for_memory, seconds
    seconds: float
    notes: list[str] = field(default_factory=list)
    headroom: float = DEFAULT_HEADROOM  # the fit test's (cost.memory.fit.memory_budget)

    @cached_property
    def table(self):
        """The ranked plans as a pandas DataFrame (PLAN_COLUMNS + RESULT_COLUMNS), best first."""
        import pandas as pd

        return pd.DataFrame(self.columns)

    @cached_property
    def counts(self):
        """Per GPU count: enumerated, feasible, pruned_for_memory, seconds (a pandas DataFrame)."""
        import pandas as pd

        return pd.DataFrame(self.count_rows)

    def __len__(self) -> int:
        return len(self.columns["step_time_s"])

    def records(self, top: int = 0) -> list[dict]:
        """The best `top` plans (0: all) as dicts of Python values (None where a value is unknown: NaN)."""
        n = len(self) if top == 0 else min(top, len(self))

        def value(x):
            x = x.item()
            return None if isinstance(x, float) and x != x else x
        return [{k: value(v[i]) for k, v in self.columns.items()} for i in range(n)]

    @property
    def enumerated(self) -> int:
        return sum(r["enumerated"] for r in self.count_rows)

    @property
    def feasible(self) -> int:
        return sum(r["feasible"] for r in self.count_rows)

    def plan(self, rank: int = 0) -> Plan:
        """The plan of row `rank` of the ranked table."""
        job = self.job.model_dump()
        job.update(gpus=int(self.columns["gpus"][rank]), moe_pad_to_capacity=bool(job["moe_pad_to_capacity"]),
                   moe_capacity_factor=capacity_of(self.job))
        policy = str(self.columns["remat_policy"][rank]) if "remat_policy" in self.columns else ""
        if policy:  # a MaxText named policy searched (Space.remat_policy): its tensors
            job.update(recompute_saved=MAXTEXT_REMAT[policy], recompute_offloaded=MAXTEXT_OFFLOADED.get(policy))
        elif self.columns["recompute"][rank] != "names":  # the names policy's tensors: its layouts' alone
            job.update(recompute_saved=None, recompute_offloaded=None)
        return Plan(**{k: self.columns[k][rank].item() for k in PLAN_COLUMNS}, **{
            k: v for k, v in job.items() if k != "gpus"})

    def estimate(self, rank: int = 0):
        """The plan of row `rank` as a full Estimate (breakdowns, stages) of the cost model."""
        from ..cost.estimate import (
            estimate,  # the report's schemas: only where a plan is reported
        )

        return estimate(self.model, self.system, self.plan(rank), self.headroom)

    def summary(self) -> str:
        tight = int(np.sum(self.columns["memory_tight"])) if "memory_tight" in self.columns else 0
        return (f"{self.enumerated} plans enumerated, {self.feasible} feasible "
                f"({self.enumerated - self.feasible} pruned: reserved memory, even at its band's lower end, over "
                f"{memory_budget(self.system, 0.0) / GIB:.1f} GiB, the {self.system.accelerator.hbm_capacity_gib:g}"
                f" GiB less runtime; {tight} of the feasible tight: that room inside their band), "
                f"{self.seconds:.2f} s")

    def pareto(self):
        """Plans no other plan beats on all of step time, GPUs and memory (each at least as good, one better)."""
        return pareto_front(self.table, ["gpus", "step_time_s", "memory_gib"])


def pareto_front(df, keys: list[str]):
    """Rows of DataFrame `df` not dominated on `keys` (all minimised): first key by sweep over its sorted values,
    the other two by a running minimum after sorting on the second (exact for three keys)."""
    import pandas as pd

    first, second, third = keys
    keep = []
    for value in sorted(df[first].unique()):
        pool = df[df[first] <= value].sort_values([second, third, first], kind="stable")
        best = np.minimum.accumulate(pool[third].to_numpy())
        prev = np.concatenate([[np.inf], best[:-1]])
        on_front = pool[third].to_numpy() < prev
        front = pool[on_front]
        keep.append(front[front[first] == value])
    out = pd.concat(keep) if keep else df.iloc[:0]
    return out.drop_duplicates(subset=keys).sort_values([first, second]).reset_index(drop=True)


def _with_policy(columns: dict, policy: np.ndarray) -> dict:
    """`columns` with a remat_policy column after recompute (the MaxText policy of each names layout)."""
    out = {}
    for k, v in columns.items():
        out[k] = v
        if k == "recompute":
            out["remat_policy"] = policy
    return out


def _columns(lay, step, run: dict, power: Power | None) -> dict[str, np.ndarray]:
    goodput = run["goodput"]
    out = {c: np.broadcast_to(getattr(lay, c), (len(lay),)) for c in PLAN_COLUMNS}
    out["step_time_s"] = step.step_time_s
    out["tokens_per_s"] = lay.tokens_per_step / step.step_time_s
    out["mfu"] = step.mfu
    out["memory_gib"] = step.memory["reserved"] / GIB  # the view the fit test reads
    out["fits_in_memory"] = step.fits
    out["memory_tight"] = step.tight
    out["gpu_hours_per_step"] = step.step_time_s * lay.gpus / 3600
    out["goodput"] = np.full(len(lay), goodput)
    out["wall_s_per_step"] = step.step_time_s / goodput
    out["wall_gpu_hours_per_step"] = out["gpu_hours_per_step"] / goodput
    out["energy_kwh_per_step"] = np.full(len(lay), np.nan) if power is None else facility_kwh(
        power, lay.gpus, step.step_time_s * (1 / goodput - run["waiting_per_compute_s"]),
        activity(power, step.time, step.clock), step.step_time_s * run["waiting_per_compute_s"])
    return out


def run_goodput(model: ModelConfig, system: System, gpus: int) -> dict[str, float]:
    """`perfmodel.run.reliability.goodput_at` of a job on `gpus` devices of `system` at the forecast's defaults."""
    return goodput_at(gpus, checkpoint_bytes(model), system.storage or DEFAULT_STORAGE, INTERRUPTION_RATE,
                      RESTART_OVERHEAD_S, "sync")


def _infeasible_message(model: ModelConfig, system: System, lay, total: np.ndarray, host: np.ndarray,
                        gpus: list[int], cap: float) -> str:
    """Why no plan fits: the leanest plan's device memory against the budget, or, where plans fit the device but
    not their host (offloaded activations or optimizer state, cost.memory.fit.host_limit), the leanest host's."""
    on_device = total <= cap
    i = int(np.argmin(np.where(on_device, host, np.inf)) if on_device.any() else np.argmin(total))
    p = {c: np.broadcast_to(getattr(lay, c), (len(lay),))[i] for c in PLAN_COLUMNS}
    at = (f"gpus={p['gpus']} tp={p['tp']} pp={p['pp']} cp={p['cp']} dp={p['dp']} zero={p['zero']} "
          f"recompute={p['recompute']} micro_batch={p['micro_batch']}")
    head = f"no feasible plan for {model.name} on {', '.join(map(str, gpus))} x {system.accelerator.name}: "
    if on_device.any():
        room = host_limit(system)
        return (head + f"every plan that fits the {cap / GIB:.1f} GiB device budget offloads more than its host "
                f"holds: least host memory {host[i] / GIB:.1f} GiB > {room / GIB:.1f} GiB per device at {at}; offload "
                "fewer tensors (recompute_offloaded) or keep the optimizer state on the device, or use more GPUs")
    return (head + f"smallest reserved memory {total[i] / GIB:.1f} GiB > {cap / GIB:.1f} GiB budget (short by "
            f"{(total[i] - cap) / GIB:.1f} GiB) at {at}; use more GPUs or a shorter sequence")


def search(model: ModelConfig | str, hardware: System | str, gpus: int | list[int], global_batch: int, seq_len: int,
           precision: str = "bf16", objective: str = "time", space: Space | dict | None = None,
           headroom: float = DEFAULT_HEADROOM, top: int = 0, **job: object) -> SearchResult:
    """Rank every feasible layout of training `model` on `gpus` devices of `hardware` (one count or several).

    `job` takes the other Job fields (attention, grad_dtype, overlap_dp_comm); `space` narrows the layouts. A layout
    is feasible when its reserved view fits capacity - runtime on every stage; one beyond (capacity - runtime) *
    (1 - headroom) is kept and marked tight (`memory_tight`; cost.memory.fit.memory_verdict). `top` > 0 keeps only the
    best `top` plans in the result, the others dropped (a sweep wants the best alone); 0 keeps all.
    """
    t0 = time.perf_counter()
    if not (isinstance(top, (int, np.integer)) and not isinstance(top, bool) and top >= 0):
        raise InputError(f"top = {top!r}; valid: 0 (every feasible plan) or a positive count of the best to keep")
    model, system = load_model(model), load_hardware(hardware)
    if objective not in OBJECTIVES:
        raise InputError(f"objective = {objective!r} is not known; valid: {', '.join(OBJECTIVES)}")
    counts = [gpus] if isinstance(gpus, (int, np.integer)) else list(gpus) if isinstance(gpus, (list, tuple)) else []
    if not counts or not all(isinstance(g, (int, np.integer)) and not isinstance(g, bool) and g > 0 for g in counts):
        raise InputError(f"gpus = {gpus!r}: give one or more positive GPU counts, e.g. 512 or [256, 512, 1024]")
    space = Space(**space) if isinstance(space, dict) else (space or Space())
    jobs = [Job(gpus=g, global_batch=global_batch, seq_len=seq_len, precision=precision, **job)
            for g in sorted(set(int(g) for g in counts))]
    check_compile(jobs[0].stack, jobs[0].compile)
    released = [with_release(j, model, system) for j in jobs]  # a release line's MoE recipe (spec.stack.release)
    jobs = [j for j, _ in released]
    power = power_for(system, precision=jobs[0].precision)  # the job's precision, checked by Job
    if objective == "energy" and power is None:
        raise InputError(f"objective = energy: {system.accelerator.name} has no published board power (tdp_w); "
                         "valid objectives here: " + ", ".join(o for o in OBJECTIVES if o != "energy"))
    tables, rows, worst, refused = [], [], None, []
    notes = list(dict.fromkeys(n for _, n in released if n))
    memory_budget(system, headroom)  # refuses a headroom outside [0, 1)
    # only plans that do not fit are out: a tight one (the capacity inside its band) stays, marked
    # (memory.fit.memory_verdict)
    cap = memory_limits(system, jobs[0].stack)[1]
    runs = [run for j in jobs for run in remat_jobs(j, space)]  # per GPU count, and per remat policy asked
    for j, j_space, policy in runs:
        t1 = time.perf_counter()
        what = f"GPU count {j.gpus}" + (f", remat policy {policy}" if policy else "")
        try:
            lay = enumerate_layouts(model, system, j, j_space)
        except InputError as err:
            if len(runs) == 1:
                raise
            refused.append(err)  # one count with no layout does not end a sweep over several
            notes.append(f"{what} skipped: {err}")
            continue
        # memory first, on the plans whose states alone fit (cost.memory.footprint.state_floor), so that time is priced
        # only for plans that fit
        maybe, fit = np.flatnonzero(state_floor(model, lay) <= cap), np.zeros(0, bool)
        if len(maybe):
            memory, kind = stage_memory(model, system, lay.take(maybe))
            fit = (memory["reserved"] <= cap) & (memory["host"] <= host_limit(system))
        fits = maybe[fit]
        if len(fits):
            sub = lay.take(fits)
            mem_fits = ({k: v[fit] for k, v in memory.items()}, kind[fit])
            tables.append(_columns(sub, evaluate(model, system, sub, mem_fits, headroom), run_goodput(model, system, j.gpus), power))
            if space.remat_policy:  # which policy's tensors the names layouts keep ('' for the other modes)
                tables[-1] = _with_policy(tables[-1], np.where(sub.recompute == "names", policy, ""))
        else:  # the leanest plan of the count, for the message: every plan's reserved memory
            every = stage_memory(model, system, lay)[0]
            total, host = every["reserved"], every["host"]
            on_device = total <= cap  # the count whose leanest plan comes closest: on the host where some fit
            near = (0, host[on_device].min()) if on_device.any() else (1, total.min())
            if worst is None or near < worst[0]:
                worst = (near, lay, total, host)
        rows.append({"gpus": j.gpus, **({"remat_policy": policy} if space.remat_policy else {}),
                     "enumerated": len(lay), "feasible": len(fits), "pruned_for_memory": len(lay) - len(fits),
                     "seconds": time.perf_counter() - t1})
    if not tables:
        if worst is None:
            raise refused[0]
        raise InputError(_infeasible_message(model, system, *worst[1:], [j.gpus for j in jobs], cap))
    columns = {k: np.concatenate([t[k] for t in tables]) for k in tables[0]}
    order = np.lexsort([columns[k] for k in reversed(OBJECTIVES[objective])])  # stable, first key first
    if top > 0:
        order = order[:top]
    notes += [f"GPU count {r['gpus']}{', remat policy ' + r['remat_policy'] if r.get('remat_policy') else ''}: no "
              "layout fits in memory" for r in rows if r["feasible"] == 0]
    return SearchResult(model=model, system=system, job=jobs[0], objective=objective,
                        columns={k: v[order] for k, v in columns.items()}, count_rows=rows,
                        seconds=time.perf_counter() - t0, notes=notes, headroom=headroom)
