"""Request-level serving simulation: requests arrive as a benchmark client sends them (`spec.serving.workload.
Workload`: a closed loop at a concurrency, a Poisson open loop, or a burst) and each replica's engine runs them
step by step, each step priced by the step-time model (`step_time.step_parts`) for the tokens it carries.

An aggregated deployment's replicas each run the engine of `replica_engine.Replica` (admission, chunked prefill
beside the decodes, the request path of the stack's release; its docstring says how): requests go to the replicas
round-robin, a closed loop's clients split evenly, each sending its next request the moment one ends. A
disaggregated deployment (`ServePlan.prefill_dp`) runs its prefill pool, the router, the KV transfers and its decode
pool in `simulate_disaggregated`.

Not priced: preemption and recompute when a non-reserving engine's KV cache fills, the earlier chunks' keys a
later chunk of a split prompt attends (a chunk is priced as a prompt of its own tokens).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..spec.hardware.system import System, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.model.catalogue import load_model
from ..spec.serving.schema import ServePlan, resolve_serve
from ..spec.serving.workload import SimulatedServing, Workload
from .host_time import frontend_s, plan_stack, release_of
from .replica_engine import Replica, StepPricer, draw_lengths, open_arrivals, pool_kv, served
from .simulate_disaggregated import simulate_disaggregated

__all__ = ["simulate", "StepPricer"]


def simulate(model: ModelConfig | str, hardware: System | str, plan: ServePlan | dict,
             workload: Workload | dict) -> SimulatedServing:
    """Serve `workload` with `plan` on `hardware` request by request (module docstring): TTFT, TPOT and end-to-end
    latency (mean, median, p99) and throughput; a disaggregated plan's pools, router and KV transfers as
    `simulate_disaggregated` runs them. InputError for a layout `infer` refuses."""
    model, system = load_model(model), load_hardware(hardware)
    plan = ServePlan.parse(plan, where="serving plan") if isinstance(plan, dict) else plan
    plan = resolve_serve(plan, model)
    work = Workload.parse(workload, where="workload") if isinstance(workload, dict) else workload
    rng = np.random.default_rng(work.seed)
    n = work.requests
    I = draw_lengths(plan.input_len, n, work.range_ratio, rng)
    O = draw_lengths(plan.output_len, n, work.range_ratio, rng)
    if plan.disaggregated:
        return simulate_disaggregated(model, system, plan, work, I, O, rng)
    if work.arrival == "closed" and work.concurrency < plan.dp:
        raise InputError(f"concurrency = {work.concurrency} for dp = {plan.dp} replicas; valid: at least {plan.dp} "
                         "(one client per replica)")
    stack = plan_stack(plan)  # the profile with the plan's own scheduler settings
    kv_tokens, state = pool_kv(model, system, plan, stack, int((I + O).max()), "the replicas")
    price = StepPricer(model, system, plan, stack)
    release = release_of(stack, plan)
    front = np.array([frontend_s(system, plan, stack, float(i)) for i in I])
    reps = [Replica(price, stack, kv_tokens, I, O, plan.attention_dp, state, release, front)
            for _ in range(plan.dp)]
    arrive, first, done = np.zeros(n), np.full(n, np.nan), np.full(n, np.nan)
    if work.arrival == "closed":
        _run_closed(reps, work.concurrency, arrive, first, done)
    else:
        arrive = open_arrivals(work, rng)
        for k, rep in enumerate(reps):  # round-robin over the replicas
            for r in range(k, n, plan.dp):
                rep.send(r, arrive[r])
            rep.run(first, done)
    return _summary(work, plan, I, O, arrive, first, done, reps, price)


def _run_closed(reps: list[Replica], concurrency: int, arrive, first, done) -> None:
    """Each replica's clients (the concurrency split evenly) send their next request the moment one ends, until
    the replica's share of the requests (split the same way) is sent."""
    n, dp = len(arrive), len(reps)
    ids = iter(range(n))
    for k, rep in enumerate(reps):
        quota = n // dp + (k < n % dp)
        mine = [next(ids) for _ in range(quota)]
        clients = min(concurrency // dp + (k < concurrency % dp), quota)
        queue = iter(mine[clients:])
        for r in mine[:clients]:  # each client's first request at t = 0
            rep.send(r, 0.0)

        def then(r: int, t: float, rep=rep, queue=queue) -> None:
            nxt = next(queue, None)
            if nxt is not None:
                arrive[nxt] = t
                rep.send(nxt, t)

        rep.run(first, done, then)


def _summary(work, plan, I, O, arrive, first, done, reps, price) -> SimulatedServing:
    groups = f" x {plan.attention_dp} attention groups" if plan.attention_dp > 1 else ""
    notes = [f"{plan.dp} replica(s); KV cache of {reps[0].kv_tokens:,.0f} tokens each; at most "
             f"{reps[0].stack.max_batch} sequences and {reps[0].stack.max_num_tokens} tokens per step{groups} "
             f"({plan.stack})"]
    steps = sum(r.steps for r in reps)
    return served(work, O, arrive, first, done, steps, sum(r.batch_sum for r in reps) / max(steps, 1),
                  len(price.cache), notes)
