"""How requests reach a serving deployment, as serving benchmarks send them (the input of
`perfmodel.serve.simulate`), and the latencies a request-level simulation reports (its output)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from ...errors import InputError
from ...types import Schema

ARRIVALS = ("closed", "poisson", "burst")


class Workload(Schema):
    """Requests as a benchmark client sends them:
    - closed: `concurrency` clients, each sending its next request when the last one ends (vLLM's
      benchmark_serving with --max-concurrency, InferenceMAX, AIConfigurator's collector);
    - poisson: an open loop at `request_rate` requests/s, exponential gaps (benchmark_serving --request-rate);
    - burst: every request at t = 0 (benchmark_serving's default rate, inf).
    Prompt and output lengths are drawn uniformly in [range_ratio x L, L] of the plan's nominal lengths
    (InferenceMAX's --random-range-ratio; 1: every request at the nominal lengths)."""

    arrival: Literal["closed", "poisson", "burst"] = Field("closed", description="closed, poisson or burst")
    concurrency: int | None = Field(None, ge=1, description="closed: clients in all (requests in flight)")
    request_rate: float | None = Field(None, gt=0, description="poisson: requests per second, all replicas")
    requests: int = Field(1000, ge=1, le=1_000_000, description="requests sent in all")
    range_ratio: float = Field(1.0, gt=0, le=1, description="lengths uniform in [range_ratio x L, L]")
    seed: int = Field(0, description="seed of the lengths and arrival gaps drawn")

    @model_validator(mode="after")
    def _needs(self) -> Workload:
        if self.arrival == "closed" and self.concurrency is None:
            raise InputError("arrival = closed needs concurrency (the clients in flight); valid: an integer >= 1")
        if self.arrival == "poisson" and (self.request_rate is None or not math.isfinite(self.request_rate)):
            raise InputError(f"arrival = poisson needs a finite request_rate (requests/s), got {self.request_rate}; "
                             "valid: a number > 0, or arrival = burst for every request at once")
        return self


class LatencyStats(Schema):
    """Mean, median and 99th percentile of one latency over the requests (seconds)."""

    mean: float
    median: float
    p99: float


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
    notes: list[str] = Field(default_factory=list)
