"""How requests reach a serving deployment, as serving benchmarks send them (the input of
`perfmodel.serve.simulate`), and the latencies a request-level simulation reports (its output)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from ...errors import InputError
from ...types import Schema
from .traces import TraceSource

ARRIVALS = ("closed", "poisson", "constant", "gamma", "burst", "trace")
OPEN_RATED = ("poisson", "constant", "gamma")  # open loops sent at a request rate


class LoadStage(Schema):
    """One stage of an open loop: `rate` requests/s for `duration_s` seconds (inference-perf's `load.stages`,
    `vllm bench serve --request-rate` for one stage, SGLang bench_serving's per-rate runs)."""

    rate: float = Field(gt=0, description="requests per second in this stage, all replicas")
    duration_s: float = Field(gt=0, description="seconds this stage sends for")

    @property
    def requests(self) -> int:
        return max(1, round(self.rate * self.duration_s))


def parse_stages(text: str, where: str = "--stages") -> list[LoadStage]:
    """'2.5@600s;6@600s' (rate@seconds, ';'-separated, the trailing s optional) -> LoadStages; InputError naming
    `where` and the part that is not one."""
    out = []
    for part in str(text).split(";"):
        rate, _, dur = part.strip().partition("@")
        try:
            r, d = float(rate), float(dur.strip().removesuffix("s"))
        except ValueError:
            r = d = math.nan
        if not (math.isfinite(r) and math.isfinite(d) and r > 0 and d > 0):
            raise InputError(f"{where} {text!r}: {part.strip()!r} is not a stage; valid: RATE@SECONDS stages "
                             "separated by ';', each number > 0, e.g. 2.5@600s;6@600s")
        out.append(LoadStage(rate=r, duration_s=d))
    return out


class PrefixSharing(Schema):
    """How the prompts share a prefix (inference-perf's `shared_prefix` data, SGLang bench_serving
    `generated-shared-prefix`): `groups` system prompts of `shared_len` tokens each, every prompt starting with its
    group's, the rest of it (input_len - shared_len) its own. Requests take the groups in turn. The engine's prefix
    cache (`ServingStack.prefix_caching`) serves a system prompt's full KV blocks from the second request of its
    group on (`serve.prefix_cache`)."""

    groups: int = Field(ge=1, le=1_000_000, description="distinct system prompts")
    shared_len: int = Field(ge=0, le=10_000_000, description="tokens of each system prompt, within the prompt")
    users_per_group: int = Field(1, ge=1, le=1_000_000, description="distinct questions per system prompt (kept for "
                                                                     "the record: each is new to the cache)")


class Workload(Schema):
    """Requests as a benchmark client sends them:
    - closed: `concurrency` clients, each sending its next request when the last one ends (vLLM's
      benchmark_serving with --max-concurrency, InferenceMAX, AIConfigurator's collector);
    - poisson: an open loop at `request_rate` requests/s, exponential gaps (benchmark_serving --request-rate);
    - constant: an open loop at fixed gaps of 1 / request_rate (inference-perf `load.type: constant`);
    - gamma: an open loop of gamma-distributed gaps of mean 1 / request_rate and coefficient of variation
      `burstiness_cv` (vLLM bench serve --burstiness b is cv = 1 / sqrt(b); cv 1 is Poisson);
    - burst: every request at t = 0 (benchmark_serving's default rate, inf);
    - trace: the requests of a production trace (`trace`, `spec.serving.traces`), each at its recorded time (over
      `trace.speed`) with its own prompt and output lengths (vllm bench serve's timed trace replay).
    An open loop either sends `requests` at `request_rate`, or runs `stages` one after another, each its rate for
    its seconds (inference-perf's stages; the latencies are then also reported stage by stage).
    Prompt and output lengths are drawn uniformly (a trace's are its own) of the plan's nominal lengths L:
    length_spread below, in [range_ratio x L, L] (SGLang bench_serving's and InferenceMAX's --random-range-ratio;
    1: every request at the nominal lengths); around, integers in [floor(L (1 - r)), ceil(L (1 + r))], r =
    range_ratio < 1 (vllm bench serve --random-range-ratio, vllm/benchmarks/datasets/random.py
    `RandomDataset.get_sampling_params`; 0: the nominal lengths); `prefix` says which part of each prompt is shared.
    `warmup_requests` copies of the first request are sent before the measured run and end before it starts, as
    vllm bench serve --num-warmups sends them (`serve.simulate`); they load the engine and its prefix cache and are
    left out of every statistic."""

    arrival: Literal["closed", "poisson", "constant", "gamma", "burst", "trace"] = Field(
        "closed", description="closed, poisson, constant, gamma, burst or trace")
    concurrency: int | None = Field(None, ge=1, description="closed: clients in all (requests in flight)")
    request_rate: float | None = Field(None, gt=0, description="poisson, constant, gamma: requests per second, all "
                                                               "replicas (or per stage, `stages`)")
    burstiness_cv: float = Field(1.0, gt=0, le=100, description="gamma: the gaps' coefficient of variation")
    stages: list[LoadStage] | None = Field(None, description="open loops: stages run one after another, in place "
                                                             "of request_rate and requests")
    requests: int = Field(1000, ge=1, le=1_000_000, description="requests sent in all (with stages: their sum; "
                                                                 "unused with a trace: its own, trace.limit)")
    range_ratio: float = Field(1.0, ge=0, le=1, description="length_spread below: lengths uniform in [range_ratio "
                                                             "x L, L] (> 0); around: in [L (1 - r), L (1 + r)] (< 1)")
    length_spread: Literal["below", "around"] = Field(
        "below", description="below: SGLang bench_serving's --random-range-ratio; around: vllm bench serve's")
    prefix: PrefixSharing | None = Field(None, description="the prompts' shared system prompts; None: none shared")
    seed: int = Field(0, description="seed of the lengths and arrival gaps drawn")
    trace: TraceSource | None = Field(None, description="arrival = trace: the trace replayed")
    warmup_requests: int = Field(0, ge=0, le=1_000_000, description="copies of the first request sent and ended "
                                                                    "before the measured run, left out of every "
                                                                    "statistic (vllm bench serve --num-warmups)")

    @model_validator(mode="after")
    def _needs(self) -> Workload:
        self._spread_and_trace()
        if self.arrival == "closed" and self.concurrency is None:
            raise InputError("arrival = closed needs concurrency (the clients in flight); valid: an integer >= 1")
        if self.stages is not None:
            if self.arrival not in OPEN_RATED:
                raise InputError(f"stages with arrival = {self.arrival}; valid: arrival one of "
                                 f"{', '.join(OPEN_RATED)} (an open loop at each stage's rate)")
            if not self.stages:
                raise InputError("stages = []; valid: at least one {rate, duration_s}, or leave stages out")
            total = sum(s.requests for s in self.stages)
            if total > 1_000_000:
                raise InputError(f"stages send {total:,} requests; valid: at most 1,000,000 (shorter or slower "
                                 "stages)")
            object.__setattr__(self, "requests", total)
        elif self.arrival in OPEN_RATED and (self.request_rate is None or not math.isfinite(self.request_rate)):
            raise InputError(f"arrival = {self.arrival} needs a finite request_rate (requests/s), got "
                             f"{self.request_rate}; valid: a number > 0, stages, or arrival = burst for every "
                             "request at once")
        return self

    def _spread_and_trace(self) -> None:
        """The length spread's range (vLLM refuses r >= 1: `get_sampling_params`) and a trace's exclusions."""
        r = self.range_ratio
        if self.length_spread == "around" and r >= 1:
            raise InputError(f"range_ratio = {r:g} with length_spread = around: lengths in [L (1 - r), L (1 + r)] "
                             "(vllm bench serve --random-range-ratio); valid: 0 <= range_ratio < 1")
        if self.length_spread == "below" and r <= 0:
            raise InputError(f"range_ratio = {r:g} with length_spread = below: lengths in [range_ratio x L, L]; "
                             "valid: 0 < range_ratio <= 1, or length_spread = around")
        if (self.arrival == "trace") != (self.trace is not None):
            raise InputError(f"arrival = {self.arrival} with trace = {None if self.trace is None else self.trace.path}"
                             "; valid: arrival = trace with a trace file, or neither")
        if self.arrival == "trace":
            given = [f for f in ("concurrency", "request_rate", "stages", "prefix") if getattr(self, f) is not None]
            if given:
                raise InputError(f"{given[0]} with arrival = trace: a trace's requests are sent at their own times, "
                                 f"with their own lengths and shared blocks; valid: leave {given[0]} out")

    def stage_of(self) -> list[tuple[int, int]]:
        """[first request, end) of each stage (one span for a workload without stages)."""
        if self.stages is None:
            return [(0, self.requests)]
        spans, start = [], 0
        for s in self.stages:
            spans.append((start, start + s.requests))
            start += s.requests
        return spans


class LatencyStats(Schema):
    """Mean, median, 90th and 99th percentile of one latency over the requests (seconds)."""

    mean: float
    median: float
    p90: float
    p99: float


class StageServing(Schema):
    """The latencies of the requests one stage of a staged open loop sent (`Workload.stages`)."""

    rate: float = Field(description="the stage's requests per second")
    duration_s: float
    requests: int
    ttft_s: LatencyStats
    tpot_s: LatencyStats
    e2e_s: LatencyStats


class SimulatedServing(Schema):
    """What `perfmodel.serve.simulate` measures over the requests of a workload, all replicas together."""

    workload: Workload
    requests: int = Field(description="requests simulated (all completed)")
    ttft_s: LatencyStats = Field(description="time to first token: arrival to the end of the step that samples it, "
                                             "queueing for admission and the prompt's prefill chunks included")
    tpot_s: LatencyStats = Field(description="per request, (end-to-end - ttft) / (output tokens - 1), as "
                                             "benchmark_serving computes it (requests of one output token left out)")
    e2e_s: LatencyStats = Field(description="arrival to the last token")
    output_tokens_per_s: float = Field(description="generated tokens over the time from the first arrival to the "
                                                   "last completion")
    requests_per_s: float = Field(description="requests completed over the same time")
    mean_batch: float = Field(description="sequences a replica's step runs on average (decoding and prefilling)")
    steps: int = Field(description="engine steps simulated, all replicas")
    priced_parts: int = Field(description="step components (step_time.token_parts, attention_part, ...) evaluated, "
                                           "each once per size on the step pricer's grid")
    stages: list[StageServing] = Field(default_factory=list, description="stage by stage (`Workload.stages`)")
    prefix_hit: float = Field(0.0, description="share of prompt tokens served from the prefix cache")
    preempted: int = Field(0, description="sequences preempted (their KV blocks freed, recomputed later) when the "
                                          "cache ran out")
    notes: list[str] = Field(default_factory=list)
