"""Request-level serving simulation: requests arrive as a benchmark client sends them (`spec.serving.workload.
Workload`: a closed loop at a concurrency, a Poisson open loop, or a burst) and each replica's engine runs them
step by step, each step priced by the step-time model (`step_time.step_parts`) for the tokens it carries.

An aggregated deployment's replicas each run the engine of `replica_engine.Replica` (admission, chunked prefill
beside the decodes, the request path of the stack's release; its docstring says how): requests go to the replicas
round-robin, a closed loop's clients split evenly, each sending its next request the moment one ends. A
disaggregated deployment (`ServePlan.prefill_dp`) runs its prefill pool, the router, the KV transfers and its decode
pool in `simulate_disaggregated`.

The power limit holds the board's power averaged over a window far longer than a step (`power_mix.mix_clock`), so
a step's compute-bound kernels run at the clock of its replica's sustained work, not its own: the run is priced at
the tables' clock, each replica's steps and idle waits summed per stage (the whole run without stages), and run
again at each stage's clock where its mix is over the limit (`_run`). The disaggregated pools keep each step's own
clock (`simulate_disaggregated`: a prefill pool runs prefills alone, whose own mix is its sustained one).

Preemption: where the engine allocates KV blocks as tokens come, the newest sequences are sent back and recomputed
when the cache fills (`Replica.preempt`). Not priced: the earlier chunks' keys a later chunk of a split prompt
attends (a chunk is priced as a prompt of its own tokens).

A trace (`Workload.arrival = "trace"`, `spec.serving.traces`) is replayed with its own times and lengths, its
requests round-robin over the replicas; a Mooncake trace's `hash_ids` feed the prefix cache block by block
(`prefix_cache.BlockPrefixCache`). A request longer than max_model_len (prompt + output over the model's
max_seq_len, vLLM's default max_model_len) is left out, as vLLM's server rejects it before it reaches the engine, and
so is one longer than a replica's KV cache (no engine could hold it); the notes count them.

Warm-up (`Workload.warmup_requests`), as vllm bench serve --num-warmups runs it (vllm/benchmarks/serve.py,
`benchmark`): after its readiness check, N copies of the first request (`test_input`, made from
`input_requests[0]`) are sent at once, at most --max-concurrency in flight, and awaited (`asyncio.gather`) before
the main run's first request leaves; none is measured. Here they run on the replicas round-robin from t = 0 (a
closed loop: its concurrency at most in flight), the measured run starts when the last one has ended, and every
statistic (latencies, throughput, steps, mean batch, prefix hits, preemptions) counts the measured run alone; what
they leave behind is the prefix cache (the first request's prompt held). AIPerf (genai-perf's successor) runs its
--warmup-request-count the same way, a WARMUP credit phase ended before the PROFILING one; inference-perf has no
warm-up count (a warm-up there is a load stage whose report is set aside).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from ..errors import InputError
from ..spec.hardware.system import System, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.model.catalogue import load_model
from ..spec.serving.schema import ServePlan, resolve_serve
from ..spec.serving.traces import describe, read_trace
from ..spec.serving.workload import SimulatedServing, Workload
from .host_time import frontend_s, plan_stack, release_of
from .prefix_cache import BlockPrefixCache, PrefixCache
from .replica_engine import Replica, StepPricer, draw_lengths, open_arrivals, pool_kv, served
from .simulate_disaggregated import simulate_disaggregated
from .power_mix import mix_clock

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
        if work.arrival == "trace" or work.warmup_requests:
            what = "a trace" if work.arrival == "trace" else f"warmup_requests = {work.warmup_requests}"
            raise InputError(f"{what} with a prefill pool (prefill_dp = {plan.prefill_dp}): replayed on an aggregated "
                             "deployment only; valid: a plan without prefill_dp, or an open or closed loop without "
                             "warm-ups")
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
    """Prompt and output tokens of every request: a trace's own, else drawn about the plan's nominal lengths
    (`draw_lengths`, the workload's spread)."""
    if work.arrival == "trace":
        t = read_trace(work.trace)
        return np.array(t.input_len), np.array(t.output_len)
    n = work.requests
    return (draw_lengths(plan.input_len, n, work.range_ratio, rng, work.length_spread),
            draw_lengths(plan.output_len, n, work.range_ratio, rng, work.length_spread))


def _servable(model: ModelConfig, system: System, plan: ServePlan, stack, I: np.ndarray, O: np.ndarray,
              trace) -> tuple:
    """(KV tokens a replica holds, a sequence's fixed state in KV tokens, the requests served, notes): a trace's
    requests over max_model_len (the model's max_seq_len, vLLM's default) or a replica's KV cache are left out, as
    the server rejects them; drawn lengths past max_seq_len are an InputError (the spread asks for them)."""
    lens = I + O
    if trace is None:
        if lens.max() > model.max_seq_len:
            raise InputError(f"requests of up to {int(lens.max()):,} tokens (prompt + output, lengths drawn around the "
                             f"nominal ones) for {model.name} (max_seq_len = {model.max_seq_len:,}); valid: a smaller "
                             "range_ratio or shorter nominal lengths")
        kv, state = pool_kv(model, system, plan, stack, int(lens.max()), "the replicas")
        return kv, state, np.ones(len(I), dtype=bool), []
    fits = lens <= model.max_seq_len
    notes = []
    if not fits.all():
        notes.append(f"{int((~fits).sum()):,} of the trace's requests over max_model_len = {model.max_seq_len:,} "
                     "tokens (prompt + output) left out: vLLM's server rejects them")
    if not fits.any():
        raise InputError(f"every request of trace {trace.path} is over {model.name}'s max_seq_len = "
                         f"{model.max_seq_len:,} tokens (prompt + output); valid: a model of a longer context")
    kv, state = pool_kv(model, system, plan, stack, int(lens[fits].min()), "the replicas")
    held = kv / plan.attention_dp
    over = fits & (lens + state > held)
    if over.any():
        notes.append(f"{int(over.sum()):,} of the trace's requests longer than a replica's KV cache ({held:,.0f} tokens) "
                     "left out: no engine of this layout could hold them")
    return kv, state, fits & ~over, notes


def _run(model: ModelConfig, system: System, plan: ServePlan, work: Workload) -> RequestRun:
    """The run priced at the clock the power limit sustains over each replica's work (`power_mix.mix_clock`: the
    limit holds the board's power averaged over a window much longer than a step and shorter than a stage): first at
    the tables' clock, each replica's steps' kinds of time and its idle waits summed per window of the run (its
    stages, else the whole run); where a window's mix is over the limit, run again with every step of it at that
    window's clock. One re-run: the slower steps change the mix only through how the engine then batches the same
    work (the re-run's own mix gives a clock within 0.1% of the first on an 8k-prompt burst, a 5k-prompt closed loop
    and an overloaded Poisson run)."""
    price = StepPricer(model, system, plan, plan_stack(plan))
    run, reps = _serve(model, system, plan, work, price, [[1.0]] * plan.dp)
    clocks = [[mix_clock(system, m) for m in rep.mixes] for rep in reps]
    if min(min(c) for c in clocks) >= 1.0:
        return run
    run = _serve(model, system, plan, work, price, clocks)[0]
    low = min(min(c) for c in clocks)
    run.notes.append(f"power limit: compute-bound kernels at {low:.3f} of the tables' clock where the run's sustained "
                     "mix is over it (least of the replicas' stages; power_mix.mix_clock)")
    return run


def _serve(model: ModelConfig, system: System, plan: ServePlan, work: Workload, price: StepPricer,
           clocks: list[list[float]]) -> tuple[RequestRun, list[Replica]]:
    """The run with each replica's steps at its `clocks` (one per window, `Replica.windows`), and the replicas."""
    rng = np.random.default_rng(work.seed)
    I, O = _lengths(plan, work, rng)
    if work.arrival == "closed" and work.concurrency < plan.dp:
        raise InputError(f"concurrency = {work.concurrency} for dp = {plan.dp} replicas; valid: at least {plan.dp} "
                         "(one client per replica)")
    stack = plan_stack(plan)  # the profile with the plan's own scheduler settings
    trace = read_trace(work.trace) if work.arrival == "trace" else None
    kv_tokens, state, keep, left_out = _servable(model, system, plan, stack, I, O, trace)
    # the warm-ups first (copies of the first request served), then the measured requests: ids W.. are measured
    W = work.warmup_requests
    pick = np.concatenate([np.full(W, np.flatnonzero(keep)[0]), np.flatnonzero(keep)]).astype(np.int64)
    I, O = I[pick], O[pick]
    release = release_of(stack, plan)
    front = np.array([frontend_s(system, plan, stack, float(i)) for i in I])
    group, cache = _prefix(work, stack, trace, keep, pick, I)
    reps = [Replica(price, stack, kv_tokens, I, O, plan.attention_dp, state, release, front,
                    prefix=cache() if cache is not None else None, group=group, clocks=clocks[k])
            for k in range(plan.dp)]
    arrive, first, done = np.zeros(len(pick)), np.full(len(pick), np.nan), np.full(len(pick), np.nan)
    start, base = 0.0, (0, 0.0, 0, 0, 0)
    if W:
        _warm_up(reps, work, W, arrive, first, done)
        start = float(np.max(done[:W]))
        base = _counters(reps)
    if work.stages is not None and work.arrival != "closed":  # the stages' windows, from when they start
        starts = start + np.concatenate([[0.0], np.cumsum([s.duration_s for s in work.stages])[:-1]])
        for rep in reps:
            rep.windows(starts.tolist())
    if work.arrival == "closed":
        _run_closed(reps, work.concurrency, arrive, first, done, range(W, len(pick)), start)
    else:
        arrive[W:] = start + open_arrivals(work, rng)[keep]
        for k, rep in enumerate(reps):  # round-robin over the replicas
            for r in range(W + k, len(pick), plan.dp):
                rep.send(r, arrive[r])
            rep.run(first, done)
    groups = f" x {plan.attention_dp} attention groups" if plan.attention_dp > 1 else ""
    notes = [f"{plan.dp} replica(s); KV cache of {reps[0].kv_tokens:,.0f} tokens each; at most "
             f"{reps[0].stack.max_batch} sequences and {reps[0].stack.max_num_tokens} tokens per step{groups} "
             f"({plan.stack})"]
    if trace is not None:
        notes.append(describe(trace, work.trace.speed))
    notes += left_out
    if W:
        notes.append(f"{W} warm-up request(s), copies of the first, sent before the measured run and ended at "
                     f"{start:,.3f} s; left out of every statistic (vllm bench serve --num-warmups)")
    steps, batch, hit_tokens, prompt_tokens, preempted = (a - b for a, b in zip(_counters(reps), base))
    hit = hit_tokens / max(prompt_tokens, 1)
    caches = [r.prefix for r in reps if r.prefix is not None]
    if work.prefix is not None:
        notes.append(f"prefix cache: {100 * hit:.1f}% of prompt tokens served from it" if caches else
                     f"{plan.stack} keeps no prefix cache by default: every prompt prefilled whole")
    elif trace is not None and trace.blocks is not None:
        notes.append(f"prefix cache over the trace's hash_ids ({trace.block_tokens}-token blocks, hits counted in "
                     f"{stack.kv_block_tokens}-token engine blocks): {100 * hit:.1f}% of prompt tokens served from it"
                     if caches else f"{plan.stack} keeps no prefix cache by default: the trace's hash_ids unpriced, "
                     "every prompt prefilled whole")
    if preempted:
        notes.append(f"{preempted:,} preemptions: the KV cache filled, the newest sequences recomputed later")
    m = slice(W, None)
    return RequestRun(work, arrive[m], first[m], done[m], I[m], O[m], steps, batch / max(steps, 1),
                      len(price.cache), hit, preempted, notes), reps


def _prefix(work: Workload, stack, trace, keep: np.ndarray, pick: np.ndarray, I: np.ndarray) -> tuple:
    """(each request's key in the prefix cache, a maker of one replica's cache or None where the stack keeps none):
    the shared system prompts' groups, taken in turn; or a trace's block chains, keyed by request."""
    if work.prefix is not None:
        group = (np.arange(len(keep)) % work.prefix.groups)[pick]
        return group, partial(PrefixCache, work.prefix.shared_len, stack.kv_block_tokens) if stack.prefix_caching \
            else None
    if trace is None or trace.blocks is None:
        return None, None
    chains = [trace.blocks[k] for k in pick]
    make = partial(BlockPrefixCache, chains, I.tolist(), trace.block_tokens, stack.kv_block_tokens)
    return np.arange(len(pick)), make if stack.prefix_caching else None


def _counters(reps: list[Replica]) -> tuple:
    """(steps, sequences over the steps, prefix-hit tokens, prompt tokens admitted, preemptions), all replicas:
    taken after the warm-ups, to count the measured run alone."""
    caches = [r.prefix for r in reps if r.prefix is not None]
    return (sum(r.steps for r in reps), sum(r.batch_sum for r in reps), sum(c.hit_tokens for c in caches),
            sum(c.prompt_tokens for c in caches), sum(r.preempted for r in reps))


def _warm_up(reps: list[Replica], work: Workload, W: int, arrive, first, done) -> None:
    """Requests 0..W-1 (the warm-ups) from t = 0, run to their end: a closed loop's clients at most in flight
    (vllm bench serve's warm-up semaphore of --max-concurrency), an open loop's all at once."""
    if work.arrival == "closed":
        _run_closed(reps, work.concurrency, arrive, first, done, range(W))
        return
    for k, rep in enumerate(reps):
        for r in range(k, W, len(reps)):
            rep.send(r, 0.0)
        rep.run(first, done)


def _run_closed(reps: list[Replica], concurrency: int, arrive, first, done, ids=None, start: float = 0.0) -> None:
    """Each replica's clients (the concurrency split evenly) send their next request the moment one ends, until
    the replica's share of the requests `ids` (default all; split the same way) is sent; the first ones at
    `start`."""
    ids = range(len(arrive)) if ids is None else ids
    n, dp = len(ids), len(reps)
    ids = iter(ids)
    for k, rep in enumerate(reps):
        quota = n // dp + (k < n % dp)
        mine = [next(ids) for _ in range(quota)]
        clients = min(concurrency // dp + (k < concurrency % dp), quota)
        queue = iter(mine[clients:])
        for r in mine[:clients]:  # each client's first request at the start
            arrive[r] = start
            rep.send(r, start)

        def then(r: int, t: float, rep=rep, queue=queue) -> None:
            nxt = next(queue, None)
            if nxt is not None:
                arrive[nxt] = t
                rep.send(nxt, t)

        rep.run(first, done, then)
