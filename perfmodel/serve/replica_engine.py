"""One serving engine run request by request (`Replica`, the engine of `serve.simulate` and
`serve.simulate_disaggregated`): its queue, admission, the steps it runs and each step's price (`StepPricer`, the
step-time model `step_time.step_parts` memoised by size).

- admission, first come first served: a waiting request joins while the replica runs fewer than the stack's
  max_batch sequences and its KV cache holds the request (the whole sequence, input + output, where the stack
  reserves it; else its prompt beside what the running sequences hold now; where the running sequences then
  outgrow the cache, the newest is preempted and recomputed on its return, `Replica.preempt`);
- every step, each decoding sequence gains one token, and the rest of the stack's max_num_tokens goes to the
  admitted prompts in arrival order, a prompt split over steps where it does not fit (chunked prefill: Agrawal et
  al. 2024, "Sarathi-Serve", Sec. 4; vLLM v1's and TensorRT-LLM's in-flight batching schedulers);
- a prompt's last chunk samples its first token at the end of that step (its TTFT); it then decodes one token per
  step (with speculative decoding: runs draft_tokens + 1 tokens and gains the stated mean, tokens_per_step, every
  sequence alike) and leaves after its output length;
- the request path of the stack's release (`host_time`, `EngineRelease`): a request reaches the engine its front
  end after it is sent; a step takes the requests that had reached the engine when it was decided (its start, or
  where the engine schedules ahead, the start of the step before: the wait for the step in flight); the step
  scheduled ahead still runs the sequences that ended before it (a ghost step); where the engine runs prompts
  alone, a step with admitted prompts carries only them and the decodes wait.
A disaggregated deployment's pools run the same engine: a prefill replica's requests end with their first token
(output length 1, no ghost step), a decode replica's arrive prefilled (`prefilled`: admitted decoding, their first
token made).
Between events (an arrival, a completion) a decode-only replica runs identical steps but for the growing context:
they are priced in one stride at the stride's mean context, so a run of 1,000 requests takes some thousands of
priced strides rather than a million steps; a stride also ends at a `horizon` its caller sets (the earliest another
engine could send it a request). A step's components are priced once per size, sizes rounded to a 5% grid above 32
(`_grid`, `StepPricer`): the step model is smooth in them, and the simulation stays fast.
The clock under the power limit is the caller's per window of the run (`Replica.clocks`; `serve.simulate` takes it
from the replica's summed work, `power_mix.mix_clock`), or where none is given each step's own.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np

from ..errors import InputError
from ..spec.hardware.system import System
from ..spec.model.config import ModelConfig
from ..spec.serving.schema import EngineRelease, ServePlan, ServingStack
from ..spec.serving.traces import read_trace
from ..spec.serving.workload import LatencyStats, SimulatedServing, StageServing, Workload
from .kv_cache import kv_bytes_per_token, memory, state_bytes_per_sequence
from .prefix_cache import PrefixCache
from .power_mix import add_mix
from .step_time import draft_job, step_parts

GRID_RATIO = 1.05  # step shapes priced on a 5% grid above GRID_EXACT
GRID_EXACT = 32


def _grid(x: float) -> float:
    """`x` itself up to GRID_EXACT, else the nearest point of a geometric grid of ratio GRID_RATIO."""
    if x <= GRID_EXACT:
        return float(round(x))
    return GRID_EXACT * GRID_RATIO ** round(math.log(x / GRID_EXACT) / math.log(GRID_RATIO))


def pool_kv(model: ModelConfig, system: System, layout: ServePlan, stack, tokens: int, name: str) -> tuple:
    """(KV tokens a replica of `layout` holds, a sequence's fixed state in KV tokens); InputError naming `name` (the
    replicas, a pool) where one of its attention groups holds fewer than `tokens` (a request's cache lives in one
    group)."""
    per = kv_bytes_per_token(model, layout)
    kv = layout.attention_dp * memory(model, system, layout, stack)["kv_cache"] / per
    if kv / layout.attention_dp < tokens:
        where = "per attention group" if layout.attention_dp > 1 else "per replica"
        more = "prefill_tp" if "prefill" in name else "tp or pp"
        raise InputError(f"{model.name} on {system.name}: {name} (tp={layout.tp} pp={layout.pp}) holds "
                         f"{kv / layout.attention_dp:,.0f} KV tokens {where}, fewer than one request of {tokens}; "
                         f"valid: a larger {more}, fp8 weights or KV cache, or shorter sequences")
    return kv, state_bytes_per_sequence(model, layout) / per


class StepPricer:
    """Seconds of one engine step (`step_parts`), each of its components (`step_time.token_parts`,
    `attention_part`, ...) evaluated once per size, sizes on the `_grid`: a step shares most of its components'
    sizes with steps priced before (a decode batch with the prefills of another step, say)."""

    def __init__(self, model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack):
        self.args, self.cache, self.steps, self.mixes = (model, system, plan, stack), {}, {}, {}
        self.draft = draft_job(*self.args)  # a speculative draft's layer, its components memoised beside the model's

    def _part(self, fn, *args):
        job, sizes = args[:4], tuple(_grid(x) if isinstance(x, float | int) and not isinstance(x, bool) else x
                                     for x in args[4:])
        key = (fn.__name__, job[0] is self.args[0], sizes)
        if key not in self.cache:
            self.cache[key] = fn(*job, *sizes)
        return self.cache[key]

    @staticmethod
    def _key(decode: int, context: float, prefills: int, chunk: float, logits: int) -> tuple:
        return (_grid(decode), _grid(context) if decode else 0.0, prefills, _grid(chunk) if prefills else 0.0,
                _grid(logits))

    def __call__(self, decode: int, context: float, prefills: int, chunk: float, logits: int,
                 clock: float | None = None) -> float:
        """The step's seconds at its sizes on the grid, each step shape priced once per clock (its components, then
        the clock: `clock`, the run's, or where None the step's own, `step_time.step_parts`)."""
        key = self._key(decode, context, prefills, chunk, logits)
        if (key, clock) not in self.steps:
            mix = {} if key not in self.mixes else None
            parts = step_parts(*self.args, decode=key[0], context=key[1], prefill_seqs=key[2], prompt=key[3],
                               logits=key[4], part=self._part, draft=self.draft, clock=clock, mix=mix)
            self.steps[key, clock] = float(sum(parts.values()))
            if mix is not None:
                self.mixes[key] = mix
        return self.steps[key, clock]

    def mix(self, decode: int, context: float, prefills: int, chunk: float, logits: int) -> dict:
        """The step's kinds of time at the tables' clock (`power_mix.served_mix`), the step priced first."""
        key = self._key(decode, context, prefills, chunk, logits)
        if key not in self.mixes:
            self(decode, context, prefills, chunk, logits, 1.0)
        return self.mixes[key]


def draw_lengths(nominal: int, n: int, ratio: float, rng: np.random.Generator, spread: str = "below") -> np.ndarray:
    """n lengths (integers, at least 1): spread below, uniform in [ratio x nominal, nominal] (SGLang bench_serving
    --random-range-ratio); around, integers uniform in [floor(nominal (1 - ratio)), ceil(nominal (1 + ratio))], both
    ends included, as vllm bench serve draws them (vllm/benchmarks/datasets/random.py,
    `RandomDataset.get_sampling_params`: `rng.integers(low, high + 1)`, its output's low end at least 1; the
    tokenizer's special tokens it takes off the prompt first are left out here)."""
    if spread == "around":
        if ratio <= 0.0:
            return np.full(n, nominal, dtype=np.int64)
        low, high = max(1, math.floor(nominal * (1 - ratio))), max(1, math.ceil(nominal * (1 + ratio)))
        return rng.integers(low, high + 1, n).astype(np.int64)
    if ratio >= 1.0:
        return np.full(n, nominal, dtype=np.int64)
    return np.maximum(1, np.round(rng.uniform(ratio * nominal, nominal, n))).astype(np.int64)


class Replica:
    """One replica's engine: its queue, its admitted requests and its clock; where `clocks` is given (one per window
    of the run, `windows`), its steps run at them and their kinds of time, with the engine's idle waits, are summed
    per window (`mixes`)."""

    def __init__(self, price: StepPricer, stack: ServingStack, kv_tokens: float, I: np.ndarray, O: np.ndarray,
                 groups: int = 1, state_tokens: float = 0.0, release: EngineRelease | None = None,
                 frontend: np.ndarray | None = None, prefilled: bool = False, ghost_steps: bool = True,
                 prefix: PrefixCache | None = None, group: np.ndarray | None = None,
                 clocks: list[float] | None = None):
        # lengths as Python ints: the loops below index them per sequence, which numpy scalars make slow
        self.price, self.stack, self.kv_tokens, self.I, self.O = price, stack, kv_tokens, I.tolist(), O.tolist()
        # a Gated DeltaNet model's fixed state per request, in KV tokens' bytes (kv_cache.state_bytes_per_sequence)
        self.state_tokens = state_tokens
        # attention data-parallel groups, scheduled as one pool: each has its own max_batch and token budget
        # (a prompt's chunk fits one group's), and kv_tokens is all of theirs together
        self.groups = groups
        # the release's request path: scheduling one step ahead, prompts mixed with decodes, the front end's
        # seconds per request (host_time.frontend_s) between a client's send and the engine
        self.ahead = release is not None and release.async_scheduling
        self.mixed = release is None or release.mixed_prefill
        self.frontend = frontend.tolist() if frontend is not None else [0.0] * len(self.I)
        # a disaggregated decode replica: requests arrive with their prompt's KV cache and first token (admitted
        # decoding); a prefill replica runs no step for the requests that ended (they left with their first token)
        self.prefilled, self.ghost_steps = prefilled, ghost_steps
        # the engine's prefix cache over the workload's system prompts (`prefix_cache`), each request's group
        self.prefix, self.group = prefix, group.tolist() if group is not None else None
        self.incoming: list[tuple[float, int]] = []  # (when it reaches the engine, request id), a heap
        self.waiting: list[int] = []  # reached the engine and seen by its scheduler, in arrival order
        self.prefilling: list[int] = []  # admitted, prompt not done
        self.left: dict[int, int] = {}  # prompt tokens not yet prefilled
        self.decoding: list[int] = []
        self.made: dict[int, float] = {}  # output tokens sampled (fractional: a speculative step's mean gain)
        self.admitted: dict[int, float] = {}  # when each request was admitted (the start of its first step)
        # sequences that ended in the last step but ride in the next, already scheduled without knowing they ended
        # (asynchronous scheduling: the step n + 1 launched before step n's tokens are read)
        self.ghosts = 0
        # tokens a decoding sequence runs and gains per step (speculative decoding: draft_tokens + 1 and the mean
        # accepted, `ServePlan.decode_queries`, `tokens_per_step`; else 1 and 1)
        self.queries, self.gain = price.args[2].decode_queries, price.args[2].tokens_per_step
        self.now, self.steps, self.batch_sum, self.busy_s = 0.0, 0, 0.0, 0.0  # busy_s: seconds of steps run
        self.last_start = 0.0  # when the last step started: where the engine schedules ahead, its decision time
        self.last_ctx = 1.0  # the last decode step's mean context (a step of ghosts alone runs at it)
        # preemption (`preempt`): sequences sent back to the queue, to recompute their prompt and tokens on return
        self.preempted, self.resumed = 0, set()
        # the power limit's clock (`power_mix.mix_clock`): per window of the run (its stages, `windows`), the clock
        # of each and the work its steps ran (their kinds of time, `StepPricer.mix`); None: each step's own clock
        self.clocks, self.starts, self.mixes = clocks, [0.0], [{}]

    def windows(self, starts: list[float]) -> None:
        """The run's windows from these start times on (its stages); a step before the first (a warm-up) counts in
        the first."""
        self.starts, self.mixes = list(starts), [self.mixes[0]] + [{} for _ in starts[1:]]

    def window(self) -> int:
        """The window the step starting now runs in."""
        return max(0, bisect.bisect_right(self.starts, self.now) - 1)

    def clock(self) -> float | None:
        """The clock the step starting now runs at (`clocks`' of its window), None where each step keeps its own."""
        return None if self.clocks is None else self.clocks[min(self.window(), len(self.clocks) - 1)]

    def tally(self, k: int, *sizes) -> None:
        """k steps of these sizes (`StepPricer`'s) start now: their kinds of time add to the window's mix."""
        if self.clocks is not None:
            add_mix(self.mixes[self.window()], self.price.mix(*sizes), k)

    def idle(self, until: float) -> None:
        """The engine waits for a request until `until`, its GPU idle: the wait adds to the windows' mixes as a wait
        (at idle draw; the limit averages the idle seconds of its window with the busy ones), split where a window
        starts."""
        t = self.now
        while self.clocks is not None and t < until:
            w = max(0, bisect.bisect_right(self.starts, t) - 1)
            end = min(until, self.starts[w + 1]) if w + 1 < len(self.starts) else until
            add_mix(self.mixes[w], {"overhead": end - t})
            t = end
        self.now = max(self.now, until)

    def send(self, r: int, when: float) -> None:
        """Request r leaves its client at `when`; it reaches the engine after its front end."""
        heapq.heappush(self.incoming, (when + self.frontend[r], r))

    def busy(self) -> bool:
        return bool(self.prefilling or self.decoding or self.ghosts)

    def held(self, r: int) -> int:
        """KV tokens request r holds now (all it will hold, where the stack reserves the whole sequence)."""
        if self.stack.reserves_whole_sequence:
            return int(self.I[r] + self.O[r] + self.state_tokens)
        return int(self.I[r] + math.ceil(self.made.get(r, 0)) + self.state_tokens)

    def schedule(self) -> None:
        """The scheduler's decision for the step about to start: the requests that reached the engine by then join
        the queue (by this step's start; where it schedules ahead, by the start of the step before, which chose
        this one; an idle engine wakes for the first arrival), and admit() takes what fits."""
        if not self.busy() and not self.waiting and self.incoming:
            self.idle(self.incoming[0][0])  # until a request reaches it
            decision = self.now
        else:
            decision = self.last_start if self.ahead and self.busy() else self.now
        while self.incoming and self.incoming[0][0] <= decision:
            self.waiting.append(heapq.heappop(self.incoming)[1])
        self.admit()

    def admit(self) -> None:
        if not self.waiting:  # most steps of a closed loop: nobody to admit, no need to count the KV in use
            return
        running = self.prefilling + self.decoding
        used = sum(self.held(r) for r in running)
        while self.waiting and len(running) < self.groups * self.stack.max_batch:
            r = self.waiting[0]
            need = self.held(r) + (self.prefilled and not self.stack.reserves_whole_sequence)  # + its first token
            if used + need > self.kv_tokens and running:
                break  # FCFS: the head of the queue waits for KV blocks, the rest behind it
            self.waiting.pop(0)
            self.admitted[r] = self.now
            if r in self.resumed:  # preempted before: recompute its prompt and the tokens it had made
                self.prefilling.append(r)
                hit = self.prefix.admit(self.group[r], int(self.I[r])) if self.prefix is not None else 0
                self.left[r] = int(self.I[r]) + math.ceil(self.made[r]) - hit
            elif self.prefilled:
                self.made[r] = 1
                self.decoding.append(r)
            else:
                self.prefilling.append(r)
                hit = self.prefix.admit(self.group[r], int(self.I[r])) if self.prefix is not None else 0
                self.left[r] = int(self.I[r]) - hit
            running.append(r)
            used += need
        if self.prefix is not None:  # the cached system prompts not in use give way to the running sequences
            self.prefix.fit(self.kv_tokens - used)

    def preempt(self) -> None:
        """Where the engine allocates KV blocks as tokens come (not `reserves_whole_sequence`) and the running
        sequences with this step's new tokens outgrow the cache, send the newest admitted back to the head of the
        queue, its blocks freed, until the rest fit: vLLM V1's scheduler preempts the last of its running list
        and recomputes it when it is admitted again (vllm/v1/core/sched/scheduler.py, `_preempt_request`; Kwon et
        al. 2023, Sec. 4.5, recomputation). One sequence always runs."""
        if self.stack.reserves_whole_sequence:
            return
        running = self.prefilling + self.decoding
        used = sum(self.held(r) for r in running) + len(self.decoding) * self.gain
        while used > self.kv_tokens and len(running) > 1:
            r = max(running, key=lambda x: self.admitted[x])
            running.remove(r)
            used -= self.held(r) + (self.gain if r in self.decoding else 0)
            if r in self.decoding:  # it comes back to recompute its prompt and tokens, then decodes on
                self.decoding.remove(r)
                self.resumed.add(r)
            else:  # a prompt not done: it starts again
                self.prefilling.remove(r)
            self.left.pop(r, None)
            self.waiting.insert(0, r)
            self.preempted += 1

    def step(self, first: np.ndarray, done: np.ndarray, horizon: float = math.inf) -> list[int]:
        """Run one step (or a stride of identical decode steps, ending where the next request to reach the engine
        can join, where the cache would fill, or with the step during which `horizon` falls): returns the requests
        completed."""
        self.preempt()
        dec, ghosts = len(self.decoding), self.ghosts
        self.ghosts = 0
        until = self.incoming[0][0] if self.incoming else math.inf
        if not self.prefilling:  # decode only: stride to the next completion or the step an arrival joins
            if not dec:  # the step scheduled ahead for sequences that had ended: it runs, and yields nothing
                t = self.price(ghosts, self.last_ctx, 0, 0.0, ghosts, self.clock())
                self.tally(1, ghosts, self.last_ctx, 0, 0.0, ghosts)
                self.last_start, self.now = self.now, self.now + t
                self.steps += 1
                self.busy_s += t
                return []
            ctx = float(np.mean([self.I[r] + self.made[r] for r in self.decoding]))
            k = min(math.ceil((self.O[r] - self.made[r]) / self.gain - 1e-9) for r in self.decoding)
            if ghosts:
                k = 1  # the ghosts ride in this step only
            clock = self.clock()
            t = self.price(dec + ghosts, ctx + (k - 1) * self.gain / 2, 0, 0.0, dec + ghosts, clock)
            if math.isfinite(until):  # stop at the step during which it arrives (ahead: the one after that)
                k = max(1, min(k, (math.ceil((until - self.now) / t) if until > self.now else 0) + self.ahead))
            if math.isfinite(horizon):  # a request may be sent from then on: stop at the step it falls in
                k = max(1, min(k, math.ceil((horizon - self.now) / t)))
            if not self.stack.reserves_whole_sequence:  # stop where the cache fills: the next step preempts
                free = self.kv_tokens - sum(self.held(r) for r in self.decoding)
                k = max(1, min(k, math.floor(free / (dec * self.gain))))
            t = self.price(dec + ghosts, ctx + (k - 1) * self.gain / 2, 0, 0.0, dec + ghosts, clock)
            self.tally(k, dec + ghosts, ctx + (k - 1) * self.gain / 2, 0, 0.0, dec + ghosts)
            self.last_start = self.now + (k - 1) * t
            self.last_ctx = ctx + k * self.gain  # where the stride leaves the contexts (a ghost step runs at it)
            self.now += k * t
            self.steps += k
            self.busy_s += k * t
            self.batch_sum += k * dec
            for r in self.decoding:
                self.made[r] = min(self.made[r] + k * self.gain, float(self.O[r]))
        else:
            # prompts alone (the engine's prefill steps run before its decodes): the whole budget, no decode tokens
            decoding = self.decoding if self.mixed else []
            riding = ghosts if self.mixed else 0
            dec = len(decoding)
            budget = max(self.groups * self.stack.max_num_tokens - dec * self.queries, 1)
            per_group = max(self.stack.max_num_tokens - dec * self.queries // self.groups, 1)
            chunks, finishing = [], []
            for r in self.prefilling:
                if budget <= 0:
                    break
                c = min(self.left[r], budget, per_group)
                if not self.stack.chunked_prefill and c < self.left[r]:
                    break  # chunked prefill off: a prompt runs whole or waits for a step with room for it
                chunks.append((r, c))
                budget -= c
            for r, c in chunks:
                self.left[r] -= c
                if self.prefix is not None:  # what the prompt has computed so far is cached
                    self.prefix.progress(self.group[r], self.I[r] - self.left[r])
                if self.left[r] == 0:
                    finishing.append(r)
            ctx = float(np.mean([self.I[r] + self.made[r] for r in decoding])) if dec else 0.0
            tokens = sum(c for _, c in chunks)
            sizes = (dec + riding, ctx, len(chunks), tokens / max(len(chunks), 1), dec + riding + len(finishing))
            t = self.price(*sizes, self.clock())
            self.tally(1, *sizes)
            self.last_start, self.now = self.now, self.now + t
            self.steps += 1
            self.busy_s += t
            self.batch_sum += dec + len(chunks)
            for r in decoding:
                self.made[r] = min(self.made[r] + self.gain, float(self.O[r]))
            for r in finishing:
                self.prefilling.remove(r)
                if r in self.resumed:  # recomputed after a preemption: it decodes on from where it was
                    self.resumed.discard(r)
                else:
                    first[r] = self.now
                    self.made[r] = 1
                self.decoding.append(r)
        ended = [r for r in self.decoding if self.made[r] >= self.O[r] - 1e-9]
        for r in ended:
            self.decoding.remove(r)
            done[r] = self.now
        self.ghosts = len(ended) if self.ahead and self.ghost_steps else 0
        return ended

    def run(self, first: np.ndarray, done: np.ndarray, then=None) -> None:
        """Serve until every request sent has ended; `then(r, t)`: request r ended at t (a closed loop's client
        sends its next one)."""
        while self.incoming or self.waiting or self.busy():
            self.schedule()
            if not (self.prefilling or self.decoding or self.ghosts):
                # requests wait but none fits (cannot happen with an empty replica) or none has reached it yet
                if not self.incoming:
                    break
                self.idle(self.incoming[0][0])
                continue
            for r in self.step(first, done):
                if then is not None:
                    then(r, done[r])


def stats(x: np.ndarray) -> LatencyStats:
    return LatencyStats(mean=float(np.mean(x)), median=float(np.median(x)), p90=float(np.percentile(x, 90)),
                        p99=float(np.percentile(x, 99)))


def gaps(arrival: str, rate: float, n: int, cv: float, rng: np.random.Generator) -> np.ndarray:
    """n gaps (s) between an open loop's sends at `rate` requests/s: exponential (poisson), 1 / rate (constant),
    gamma of shape 1 / cv^2 and mean 1 / rate (gamma: vLLM bench serve's --burstiness is the shape), 0 (burst)."""
    if arrival == "poisson":
        return rng.exponential(1.0 / rate, n)
    if arrival == "constant":
        return np.full(n, 1.0 / rate)
    if arrival == "gamma":
        shape = 1.0 / cv**2
        return rng.gamma(shape, 1.0 / (rate * shape), n)
    return np.zeros(n)


def open_arrivals(work: Workload, rng: np.random.Generator) -> np.ndarray:
    """When an open loop's requests are sent, from t = 0 (`gaps`); with stages, each stage's requests at its own
    rate, the next stage starting where the last one's time ends; a trace's at their recorded times over its speed
    (`spec.serving.traces.read_trace`, nothing drawn)."""
    if work.arrival == "trace":
        return np.array(read_trace(work.trace).arrive, dtype=float)
    if work.stages is None:
        g = gaps(work.arrival, work.request_rate or 0.0, work.requests, work.burstiness_cv, rng)
        return np.cumsum(g) - g[0]
    out, start = [], 0.0
    for s in work.stages:
        g = gaps(work.arrival, s.rate, s.requests, work.burstiness_cv, rng)
        t = np.cumsum(g) - g[0]
        out.append(start + t)
        start += s.duration_s
    return np.concatenate(out)


def _latencies(O: np.ndarray, arrive: np.ndarray, first: np.ndarray, done: np.ndarray) -> tuple:
    """(TTFT, TPOT, E2E) stats of these requests (TPOT over those of more than one output token, as
    benchmark_serving computes it)."""
    ttft, e2e = first - arrive, done - arrive
    many = O > 1
    tpot = (e2e[many] - ttft[many]) / (O[many] - 1) if many.any() else np.zeros(1)
    return stats(ttft), stats(tpot), stats(e2e)


def served(work: Workload, O: np.ndarray, arrive: np.ndarray, first: np.ndarray, done: np.ndarray, steps: int,
           mean_batch: float, priced: int, notes: list[str], prefix_hit: float = 0.0,
           preempted: int = 0) -> SimulatedServing:
    """The latencies and throughput of requests sent at `arrive`, their first token at `first`, their last at
    `done`; with stages, also those of each stage's requests."""
    ttft, tpot, e2e = _latencies(O, arrive, first, done)
    span = float(done.max() - arrive.min())
    stages = []
    if work.stages is not None:
        for s, (a, b) in zip(work.stages, work.stage_of()):
            st = _latencies(O[a:b], arrive[a:b], first[a:b], done[a:b])
            stages.append(StageServing(rate=s.rate, duration_s=s.duration_s, requests=b - a, ttft_s=st[0],
                                       tpot_s=st[1], e2e_s=st[2]))
    return SimulatedServing(workload=work, requests=len(arrive), ttft_s=ttft, tpot_s=tpot,
                            e2e_s=e2e, output_tokens_per_s=float(O.sum()) / span,
                            requests_per_s=len(arrive) / span, mean_batch=mean_batch, steps=steps,
                            priced_parts=priced, notes=notes, stages=stages, prefix_hit=prefix_hit,
                            preempted=preempted)
