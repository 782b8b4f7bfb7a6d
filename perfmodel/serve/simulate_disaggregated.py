"""Disaggregated serving request by request (`ServePlan.prefill_dp`): the prefill pool, the router, the KV transfers
and the decode pool of `serve.disaggregated` (which prices them in steady state), each engine run step by step as
`replica_engine.Replica` runs an aggregated replica's, on one clock.

- Front end and router: a request reaches the router its front end (`host_time.frontend_s`) after its client sends
  it. The router sends it to the prefill replica with the fewest prompt tokens routed to it and not yet prefilled,
  and a prefilled request to the decode replica whose unfinished requests hold the fewest tokens (input + output
  each), ties to the first: least-loaded, as NVIDIA Dynamo's router does in a disaggregated deployment (Dynamo
  docs, "Routing Concepts": a worker's cost is its prefill blocks, the prompt tokens routed to it until their first
  token, plus its decode blocks, the active sequences'; "Disaggregated Serving": the prefill router tracks prompt
  load only, the decode stage scores no prefix overlap), with no prefix cache to reuse (random prompts).
  Round-robin is Dynamo's default for aggregated workers, and this project's aggregated simulation's.
- Prefill pool: prefill_dp engines of `disaggregated.prefill_plan`'s layout (prefill_tp x prefill_attention_dp GPUs,
  experts over prefill_ep), each running prompts only: FCFS admission of what its KV cache and max_batch hold (a
  prompt's cache is freed when its prefill ends: the copy to the decode replica holding it is not priced), up to
  max_num_tokens of prompt tokens a step per attention group, a prompt split over steps where it does not fit
  (chunked prefill), priced by `step_time.step_parts` with no decode tokens (the busiest group's prompts). Its
  last chunk's step samples the first token.
- KV transfer: one prompt's cache takes `disaggregated.kv_transfer`'s seconds (its shards at once on the tier the
  deployment spans). The links are serialised: each prefill attention group sends one cache at a time and each
  decode attention group receives one at a time (a transfer starts when the prefill has ended and a sending and a
  receiving link are free), so the links' rate is steady state's R_kv.
- Decode pool: dp engines of tp x attention_dp x pp GPUs, a request admitted (FCFS, KV cache and max_batch) with its
  prompt's cache and first token; decode-only steps as an aggregated replica's, O - 1 tokens each.
TTFT = front end + the wait for and the steps of the prefill + the wait for the links and the KV transfer; TPOT over
the decode replica's steps, the wait for admission included. A decode replica strides over identical steps until
the earliest moment another engine could send it a request (`_horizon`), so no request arrives inside a stride.
The notes name the pools, their limits and how busy each was (the busiest bounds the rate). Not priced: the
prefill replicas' KV blocks held until sent, the first token streamed before the transfer ends. A decode replica
preempts as an aggregated one does (`Replica.preempt`): a preempted request recomputes its prompt and tokens there.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from ..cost.comm.collectives import p2p_tier
from ..errors import InputError
from ..spec.hardware.system import System
from ..spec.model.config import ModelConfig
from ..spec.serving.schema import ServePlan
from ..spec.serving.workload import SimulatedServing, Workload
from .disaggregated import kv_transfer, prefill_plan
from .host_time import frontend_s, plan_stack, release_of
from .replica_engine import Replica, StepPricer, open_arrivals, pool_kv, served


def _next(e: Replica) -> float:
    """When engine `e` next acts: now where it runs or holds requests, else when its next request reaches it."""
    if e.busy() or e.waiting:
        return e.now
    return e.incoming[0][0] if e.incoming else math.inf


class _Links:
    """Serialised KV links: each of a replica's attention groups sends (prefill) or receives (decode) one cache at
    a time; a transfer takes the earliest free link of each end."""

    def __init__(self, replicas: int, groups: int):
        self.free = [[0.0] * groups for _ in range(replicas)]

    def earliest(self, rep: int) -> tuple[int, float]:
        lane = min(range(len(self.free[rep])), key=self.free[rep].__getitem__)
        return lane, self.free[rep][lane]


def simulate_disaggregated(model: ModelConfig, system: System, plan: ServePlan, work: Workload, I: np.ndarray,
                           O: np.ndarray, rng: np.random.Generator) -> SimulatedServing:
    """Serve `work` (lengths I, O drawn) with the resolved disaggregated `plan` request by request (module docstring).
    InputError for an output of one token or a pool that holds no request."""
    if plan.output_len < 2:
        raise InputError(f"output_len = {plan.output_len} with a prefill pool (prefill_dp = {plan.prefill_dp}): the "
                         "prefill makes every token and the decode pool none; valid: output_len >= 2, or no "
                         "prefill_dp")
    n, stack, pplan = len(I), plan_stack(plan), prefill_plan(plan)
    release = release_of(stack, plan)
    pkv, pstate = pool_kv(model, system, pplan, stack, int(I.max()) + 1, "the prefill pool")
    dkv, dstate = pool_kv(model, system, plan, stack, int((I + O).max()), "the decode pool")
    pprice, dprice = StepPricer(model, system, pplan, stack), StepPricer(model, system, plan, stack)
    front = np.array([frontend_s(system, plan, stack, float(i)) for i in I])
    kv_s = {i: kv_transfer(model, system, plan.model_copy(update={"input_len": int(i)}))[0] for i in set(I.tolist())}
    prefills = [Replica(pprice, stack, pkv, I, np.ones(n, dtype=np.int64), pplan.attention_dp, pstate, release,
                        ghost_steps=False) for _ in range(plan.prefill_dp)]
    decodes = [Replica(dprice, stack, dkv, I, O, plan.attention_dp, dstate, release, prefilled=True)
               for _ in range(plan.dp)]
    engines = prefills + decodes
    # the least time a request takes from its client to a decode replica (front end, a prefill step of one token,
    # its transfer), and from a prefill step's start: what bounds a decode replica's strides (_horizon)
    kv_min = min(kv_s.values())
    step_min = pprice(0, 0.0, 1, 1.0, 1)
    loop_min = float(front.min()) + step_min + kv_min
    arrive, first, done = np.zeros(n), np.full(n, np.nan), np.full(n, np.nan)
    pfirst, pdone = np.full(n, np.nan), np.full(n, np.nan)  # the prefill engines' own: their last chunk's step
    on_prefill = np.zeros(n, dtype=np.int64)
    routed: list[dict[int, int]] = [{} for _ in prefills]  # prompt tokens routed and not yet prefilled
    holding: list[dict[int, int]] = [{} for _ in decodes]  # tokens of the requests routed and not ended
    send, recv = _Links(len(prefills), pplan.attention_dp), _Links(len(decodes), plan.attention_dp)
    events: list[tuple[float, int, int]] = []  # (when, 0 to route to prefill | 1 to route to decode, request)
    link_wait = 0.0
    if work.arrival == "closed":
        queue = iter(range(min(work.concurrency, n), n))
        for r in range(min(work.concurrency, n)):
            heapq.heappush(events, (front[r], 0, r))
    else:
        queue = iter(())
        arrive = open_arrivals(work, rng)
        for r in range(n):
            heapq.heappush(events, (arrive[r] + front[r], 0, r))

    def ended(r: int, t: float) -> None:
        done[r] = t
        nxt = next(queue, None)  # a closed loop's client sends its next request
        if nxt is not None:
            arrive[nxt] = t
            heapq.heappush(events, (t + front[nxt], 0, nxt))

    while True:
        times = [_next(e) for e in engines]
        i = min(range(len(engines)), key=times.__getitem__)
        if events and events[0][0] <= times[i]:
            t, kind, r = heapq.heappop(events)
            if kind == 0:  # to the prefill replica with the fewest prompt tokens to go
                for p in routed:
                    for q in [q for q in p if pdone[q] <= t]:
                        del p[q]
                p = min(range(len(prefills)), key=lambda k: sum(routed[k].values()))
                routed[p][r], on_prefill[r] = int(I[r]), p
                prefills[p].send(r, t)
            elif O[r] <= 1:  # its one token came from the prefill
                first[r] = t
                ended(r, t)
            else:  # to the decode replica holding the fewest tokens, over the first free links
                for h in holding:
                    for q in [q for q in h if done[q] <= t]:
                        del h[q]
                d = min(range(len(decodes)), key=lambda k: sum(holding[k].values()))
                holding[d][r] = int(I[r] + O[r])
                (ls, fs), (lr, fr) = send.earliest(on_prefill[r]), recv.earliest(d)
                start = max(t, fs, fr)
                link_wait += start - t
                first[r] = send.free[on_prefill[r]][ls] = recv.free[d][lr] = start + kv_s[int(I[r])]
                decodes[d].send(r, first[r])
            continue
        if not math.isfinite(times[i]):
            break
        e = engines[i]
        e.schedule()
        if i < len(prefills):
            for r in e.step(pfirst, pdone):
                heapq.heappush(events, (pdone[r], 1, r))
        else:
            for r in e.step(first, done, _horizon(times, i, len(prefills), events, kv_min, step_min, loop_min)):
                ended(r, done[r])
    return _summary(work, system, plan, pplan, stack, O, arrive, front, pdone, first, done, prefills, decodes, kv_s, link_wait,
                    len(pprice.cache) + len(dprice.cache))


def _horizon(times: list[float], i: int, n_prefill: int, events: list, kv_min: float, step_min: float,
             loop_min: float) -> float:
    """The earliest moment a request could reach decode engine i from elsewhere: a routing event's transfer, a
    prefill engine's next step and transfer, or another decode engine's next completion sending a closed loop's
    next request through the front end, a prefill step and a transfer."""
    h = events[0][0] + kv_min if events else math.inf
    for k, t in enumerate(times):
        if k != i:
            h = min(h, t + (step_min + kv_min if k < n_prefill else loop_min))
    return h


def _summary(work, system, plan, pplan, stack, O, arrive, front, pdone, first, done, prefills, decodes, kv_s, link_wait,
             priced) -> SimulatedServing:
    n, span = len(arrive), float(done.max() - arrive.min())
    psteps, dsteps = sum(r.steps for r in prefills), sum(r.steps for r in decodes)
    moved = sum(kv_s[int(i)] for i in prefills[0].I)
    busy = {"prefill pool": sum(r.busy_s for r in prefills) / (len(prefills) * span),
            "links": moved / (min(len(prefills) * pplan.attention_dp, len(decodes) * plan.attention_dp) * span)}
    dadmit = {r: t for rep in decodes for r, t in rep.admitted.items()}
    spent = {"in the prefill pool (queue and steps)": float(np.nanmean(pdone - arrive - front)),
             "waiting for a KV link": link_wait / n,
             "waiting for a decode replica's admission": sum(t - first[r] for r, t in dadmit.items()) / n}
    padp = f" x {pplan.attention_dp} attention groups, ep={pplan.ep}" if pplan.attention_dp > 1 else ""
    dadp = f" x {plan.attention_dp} attention groups" if plan.attention_dp > 1 else ""
    notes = [f"disaggregated: {plan.prefill_dp} prefill replica(s) of tp={pplan.tp}{padp} ({plan.prefill_gpus} GPUs): KV "
             f"cache of {prefills[0].kv_tokens:,.0f} tokens each, at most {stack.max_num_tokens} prompt tokens and "
             f"{stack.max_batch} prompts a step per group, {sum(r.batch_sum for r in prefills) / max(psteps, 1):.1f} "
             "prompts (chunks) a step on average",
             f"{plan.dp} decode replica(s) of tp={plan.tp}{dadp} pp={plan.pp}: KV cache of {decodes[0].kv_tokens:,.0f} "
             f"tokens each, at most {stack.max_batch} sequences a group ({plan.stack}), "
             f"{sum(r.batch_sum for r in decodes) / max(dsteps, 1):.1f} a step on average",
             f"KV transfer {1e3 * moved / n:.2f} ms a prompt on {p2p_tier(system, 1, plan.gpus).name}, one at a time "
             "per attention group's link; router: least-loaded (prefill: prompt tokens to go; decode: tokens held)",
             "a request's mean time " + ", ".join(f"{k} {1e3 * max(v, 0.0):,.1f} ms" for k, v in spent.items())
             + "; busy: " + ", ".join(f"{k} {100 * v:.0f}% of the time" for k, v in busy.items())]
    return served(work, O, arrive, first, done, psteps + dsteps, sum(r.batch_sum for r in decodes) / max(dsteps, 1),
                  priced, notes)
