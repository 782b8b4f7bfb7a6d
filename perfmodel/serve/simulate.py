"""Request-level serving simulation: requests arrive as a benchmark client sends them (`spec.serving.workload.
Workload`: a closed loop at a concurrency, a Poisson open loop, or a burst) and each replica's engine runs them
step by step, each step priced by the step-time model (`step_time.step_parts`) for the tokens it carries.

An aggregated deployment's replicas each run the engine of `replica_engine.Replica` (admission, chunked prefill
beside the decodes, the request path of the stack's release; its docstring says how): requests go to the replicas
round-robin, a closed loop's clients split evenly, each sending its next request the moment one ends. A
disaggregated deployment (`ServePlan.prefill_dp`) runs its prefill pool, the router, the KV transfers and its decode
pool in `simulate_disaggregated`.

Preemption: where the engine allocates KV blocks as tokens come, the newest sequences are sent back and recomputed
when the cache fills (`Replica.preempt`). Not priced: the earlier chunks' keys a later chunk of a split prompt
attends (a chunk is priced as a prompt of its own tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..spec.hardware.system import System, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.model.catalogue import load_model
from ..spec.serving.schema import ServePlan, resolve_serve
from ..spec.serving.workload import SimulatedServing, Workload
from .host_time import frontend_s, plan_stack, release_of
from .prefix_cache import PrefixCache
from .replica_engine import Replica, StepPricer, draw_lengths, open_arrivals, pool_kv, served
from .simulate_disaggregated import simulate_disaggregated

__all__ = ["simulate", "simulate_requests", "RequestRun", "StepPricer"]


@dataclass
class RequestRun:
    """Every request of an aggregated deployment's simulated run (s from the first send): when it was sent, its
    first and last token, its lengths; and what the replicas did."""

    workload: Workload
    arrive: np.ndarray
    first: np.ndarray
    done: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    steps: int
    mean_batch: float
    priced_parts: int
    prefix_hit: float
    preempted: int
    notes: list[str]


def simulate(model: ModelConfig | str, hardware: System | str, plan: ServePlan | dict,
             workload: Workload | dict) -> SimulatedServing:
    """Serve `workload` with `plan` on `hardware` request by request (module docstring): TTFT, TPOT and end-to-end
    latency (mean, median, p90, p99) and throughput, stage by stage where the workload has stages; a disaggregated
    plan's pools, router and KV transfers as `simulate_disaggregated` runs them. InputError for a layout `infer`
    refuses."""
    model, system, plan, work = _inputs(model, hardware, plan, workload)
    if plan.disaggregated:
        rng = np.random.default_rng(work.seed)
        I, O = _lengths(plan, work, rng)
        return simulate_disaggregated(model, system, plan, work, I, O, rng)
    run = _run(model, system, plan, work)
    return served(work, run.output_len, run.arrive, run.first, run.done, run.steps, run.mean_batch,
                  run.priced_parts, run.notes, run.prefix_hit, run.preempted)


def simulate_requests(model: ModelConfig | str, hardware: System | str, plan: ServePlan | dict,
                      workload: Workload | dict) -> RequestRun:
    """As `simulate`, every request's times rather than their statistics (an aggregated deployment)."""
    model, system, plan, work = _inputs(model, hardware, plan, workload)
    if plan.disaggregated:
        raise InputError("simulate_requests serves one aggregated deployment; valid: a plan without prefill_dp, or "
                         "simulate() for a disaggregated one")
    return _run(model, system, plan, work)


def _inputs(model, hardware, plan, workload) -> tuple:
    model, system = load_model(model), load_hardware(hardware)
    plan = ServePlan.parse(plan, where="serving plan") if isinstance(plan, dict) else plan
    plan = resolve_serve(plan, model)
    work = Workload.parse(workload, where="workload") if isinstance(workload, dict) else workload
    return model, system, plan, work


def _lengths(plan: ServePlan, work: Workload, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = work.requests
    return (draw_lengths(plan.input_len, n, work.range_ratio, rng),
            draw_lengths(plan.output_len, n, work.range_ratio, rng))


def _run(model: ModelConfig, system: System, plan: ServePlan, work: Workload) -> RequestRun:
    rng = np.random.default_rng(work.seed)
    n = work.requests
    I, O = _lengths(plan, work, rng)
    if work.arrival == "closed" and work.concurrency < plan.dp:
        raise InputError(f"concurrency = {work.concurrency} for dp = {plan.dp} replicas; valid: at least {plan.dp} "
                         "(one client per replica)")
    stack = plan_stack(plan)  # the profile with the plan's own scheduler settings
    kv_tokens, state = pool_kv(model, system, plan, stack, int((I + O).max()), "the replicas")
    price = StepPricer(model, system, plan, stack)
    release = release_of(stack, plan)
    front = np.array([frontend_s(system, plan, stack, float(i)) for i in I])
    group = None if work.prefix is None else np.arange(n) % work.prefix.groups  # the groups in turn
    caching = work.prefix is not None and stack.prefix_caching
    reps = [Replica(price, stack, kv_tokens, I, O, plan.attention_dp, state, release, front,
                    prefix=PrefixCache(work.prefix.shared_len, stack.kv_block_tokens) if caching else None,
                    group=group)
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
    groups = f" x {plan.attention_dp} attention groups" if plan.attention_dp > 1 else ""
    notes = [f"{plan.dp} replica(s); KV cache of {reps[0].kv_tokens:,.0f} tokens each; at most "
             f"{reps[0].stack.max_batch} sequences and {reps[0].stack.max_num_tokens} tokens per step{groups} "
             f"({plan.stack})"]
    steps = sum(r.steps for r in reps)
    caches = [r.prefix for r in reps if r.prefix is not None]
    hit = sum(c.hit_tokens for c in caches) / max(sum(c.prompt_tokens for c in caches), 1)
    if work.prefix is not None:
        notes.append(f"prefix cache: {100 * hit:.1f}% of prompt tokens served from it" if caches else
                     f"{plan.stack} keeps no prefix cache by default: every prompt prefilled whole")
    preempted = sum(r.preempted for r in reps)
    if preempted:
        notes.append(f"{preempted:,} preemptions: the KV cache filled, the newest sequences recomputed later")
    return RequestRun(work, arrive, first, done, I, O, steps, sum(r.batch_sum for r in reps) / max(steps, 1),
                      len(price.cache), hit, preempted, notes)


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
