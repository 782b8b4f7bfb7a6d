"""The sweep file (`perfmodel sweep SWEEP.yaml`, docs/sweep.md): base systems, the axes that vary them, how points
are drawn, the workloads every point runs (each with a weight) and the objectives and constraints the report
(`analysis`) ranks them by. `perfmodel sweep schema` prints its JSON schema (sweeps/schema.json)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BeforeValidator, Field, StrictInt, model_validator

from ..errors import InputError
from ..types import MAX_COUNT, Count, Flag, PositiveReal, Real, Schema
from ..files import read_mapping

# Objectives a sweep can rank points by: name -> (direction, unit, what). Per workload each is a column of the
# results; per point the weighted geometric mean over the workloads that have it (`analysis.point_table`).
OBJECTIVES: dict[str, tuple[str, str, str]] = {
    "tokens_per_s_per_gpu": ("max", "tokens/s/GPU", "training tokens/s, or served output tokens/s, per device"),
    "tokens_per_usd": ("max", "tokens/$", "tokens per dollar of device-hours at the list price (goodput counted)"),
    "tokens_per_kwh": ("max", "tokens/kWh", "tokens per facility kWh (training: the step's energy; serving: at the "
                                            "board power)"),
    "step_time_s": ("min", "s", "training step time of the best plan"),
    "time_to_train_days": ("min", "days", "training workloads with `tokens`: wall days, interruptions counted"),
    "cost_usd": ("min", "$", "training workloads with `tokens`: device-hours x list price"),
    "energy_mwh": ("min", "MWh", "training workloads with `tokens`: facility energy"),
    "ttft_s": ("min", "s", "serving workloads: time to first token of the best layout"),
    "tpot_s": ("min", "s", "serving workloads: time per output token of the best layout"),
}

# Named resources an axis can vary (`axes.apply`); any other name is a dotted path into the System spec.
RESOURCES = {
    "flops": "every dtype's peak FLOP/s (accelerator.peak_tflops.*)",
    "hbm_bandwidth": "accelerator.hbm_bandwidth_tbps",
    "hbm_capacity": "accelerator.hbm_capacity_gib",
    "scale_up_size": "devices in the innermost network tier (tiers.0.domain_size; outer tiers stay multiples)",
    "scale_up_bandwidth": "tiers.0.bandwidth_gbps",
    "scale_out_bandwidth": "the outermost tier's bandwidth_gbps",
    "power": "accelerator.tdp_w (and a power model's limit_w)",
    "price": "price.usd_per_device_hour",
    "technology_node": "a preset of hardware_specs/technology_nodes.yaml: flops, memory and links together",
}


NAME = r"^[A-Za-z0-9_+-][A-Za-z0-9_.+-]*$"  # a file name's part: a leading dot would hide it (store.finished)
MAX_POINTS = 10_000_000  # points x workloads are laid out in memory by one process: beyond it, split the sweep


class Axis(Schema):
    """One quantity to vary. `values` or `factors` (of the base system's value) list the points of a grid; `low` /
    `high` give a range that quasi-random sampling draws from (`of` says whether the range holds values or
    factors; `log`: uniform in its logarithm). `technology_node` takes `values` (node names) and its `base`."""

    values: list[Union[StrictInt, Real, str]] | None = Field(None, min_length=1, description="absolute values (grid; "
                                                                 "whole numbers stay whole)")
    factors: list[PositiveReal] | None = Field(None, min_length=1, description="multiples of the base value (grid)")
    low: PositiveReal | None = Field(None, description="range start (sampling)")
    high: PositiveReal | None = Field(None, description="range end (sampling)")
    of: Literal["value", "factor"] = Field("factor", description="what low / high hold")
    log: Flag = Field(False, description="sample the range uniformly in log space")
    integer: Flag = Field(False, description="round sampled values to whole numbers (e.g. a domain size)")
    base: str | None = Field(None, description="technology_node: the node the base system is built in (e.g. N4)")

    @model_validator(mode="after")
    def _one_kind(self):
        given = [k for k in ("values", "factors") if getattr(self, k) is not None]
        ranged = self.low is not None or self.high is not None
        if len(given) + ranged != 1:
            raise ValueError("give exactly one of values, factors or a low / high range")
        if ranged and (self.low is None or self.high is None or not self.low < self.high):
            raise ValueError(f"low = {self.low}, high = {self.high}; valid: both set with low < high")
        if not ranged and (self.log or self.integer or "of" in self.model_fields_set):
            raise ValueError("log, integer and of describe a low / high range; valid: drop them with values or factors")
        return self

    @property
    def ranged(self) -> bool:
        return self.low is not None


class Sampling(Schema):
    """How points are drawn: every combination of the axes' lists (`grid`), or `points` quasi-random draws over
    their ranges (`lhs`: Latin hypercube, `sobol`: scrambled Sobol' sequence, scipy.stats.qmc; a list axis is drawn
    as one of its entries)."""

    method: Literal["grid", "lhs", "sobol"] = "grid"
    points: Count | None = Field(None, description="lhs / sobol: how many points (sobol: a power of 2 is balanced)")
    seed: int = Field(0, ge=0, le=MAX_COUNT, description="lhs / sobol: the generator's seed (same seed, same points)")

    @model_validator(mode="after")
    def _points(self):
        if (self.method == "grid") != (self.points is None):
            raise ValueError(f"method = {self.method} with points = {self.points}; valid: points only with lhs / sobol")
        return self


def _tokens(v):
    """A token count as perfmodel forecast --tokens takes it ('15T', '300B', '2.5e12': YAML reads 1e12 as text)."""
    from ..run.forecast import parse_tokens

    return parse_tokens(v) if isinstance(v, str) else v


class Training(Schema):
    """A training job: its best plan is searched on every point (`search.ranking.search`)."""

    model: str = Field(description="model preset or config path")
    gpus: Count
    global_batch: Count = Field(description="sequences per step")
    seq_len: Count
    precision: Literal["bf16", "fp16", "fp8", "fp4"] = "bf16"
    stack: str | None = Field(None, description="software stack or release (default: perfmodel's)")
    tokens: Annotated[PositiveReal, BeforeValidator(_tokens)] | None = Field(
        None, description="tokens the run trains ('15T', '300B', 2.5e12): time to train, cost and energy")


class Serving(Schema):
    """A serving job: every layout of `gpus` GPUs is predicted at the traffic and the best output tokens/s that meets
    the SLO is kept (`serve.layout_search.rank`)."""

    model: str
    gpus: Count
    input_len: Count = Field(description="prompt tokens per request")
    output_len: Count = Field(description="generated tokens per request")
    concurrency: Count | None = Field(None, description="sequences in flight (default: as many as memory allows)")
    precision: Literal["bf16", "fp16", "fp8", "fp4", "w4a16"] = "bf16"
    stack: str | None = Field(None, description="serving stack (default trtllm)")
    ttft_ms: PositiveReal | None = Field(None, description="SLO: time to first token, ms")
    tpot_ms: PositiveReal | None = Field(None, description="SLO: time per output token, ms")


class Workload(Schema):
    """One job every point runs, with its weight in the point's aggregate."""

    name: str = Field(min_length=1, pattern=NAME, description="short name (letters, digits, _.+-; not first: .)")
    weight: PositiveReal = 1.0
    train: Training | None = None
    serve: Serving | None = None

    @model_validator(mode="after")
    def _one(self):
        if (self.train is None) == (self.serve is None):
            raise ValueError(f"workload {self.name}: give exactly one of train or serve")
        return self

    @property
    def kind(self) -> str:
        return "train" if self.train is not None else "serve"

    @property
    def job(self) -> Training | Serving:
        return self.train if self.train is not None else self.serve


class Constraints(Schema):
    """Which rows make a point infeasible: a training job with no plan that fits, a serving job with no layout that
    meets its SLO."""

    fits: Flag = True
    slo: Flag = True


class Sweep(Schema):
    """A design-space sweep (docs/sweep.md)."""

    name: str = Field(min_length=1, pattern=NAME, description="the results folder's default name (letters, digits, "
                                                               "_.+-; not first: .)")
    description: str = ""
    systems: list[str] = Field(min_length=1, description="base systems: catalogue names or spec paths; every point "
                                                         "is each base system with the axes' values")
    pricing: Literal["datasheet", "tables"] = Field(
        "datasheet", description="datasheet: the systems' measured kernel tables and NCCL fits are set aside, so every "
        "axis moves the price of what it scales (System.on_datasheet); tables: kept (axes that tables would ignore, "
        "flops, hbm_bandwidth and technology_node, are refused)")
    axes: dict[str, Axis] = Field(default_factory=dict, description="name (RESOURCES, or a dotted path into the "
                                                                    "System spec) -> Axis")
    sampling: Sampling = Field(default_factory=Sampling)
    workloads: list[Workload] = Field(min_length=1)
    objectives: list[str] = Field(default_factory=lambda: ["tokens_per_s_per_gpu", "tokens_per_usd"], min_length=1,
                                  description=f"what the report ranks and draws the Pareto front of; valid: "
                                              f"{', '.join(OBJECTIVES)}")
    constraints: Constraints = Field(default_factory=Constraints)
    chunk_points: Count = Field(25, le=10_000, description="points per chunk of one workload: the unit a worker runs, "
                                                          "one Parquet file, and what --resume skips")

    @model_validator(mode="after")
    def _consistent(self):
        for o in self.objectives:
            if o not in OBJECTIVES:
                raise ValueError(f"objectives: {o!r} is not known; valid: {', '.join(OBJECTIVES)}")
        names = [w.name for w in self.workloads]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"workloads: name {dup[0]!r} is used twice; valid: a distinct name per workload")
        ranged = [k for k, a in self.axes.items() if a.ranged]
        if self.sampling.method != "grid" and not self.axes:
            raise ValueError(f"sampling.method = {self.sampling.method} with no axes would draw the same point "
                             f"{self.sampling.points} times; valid: axes to draw, or method grid")
        if self.sampling.method == "grid" and ranged:
            raise ValueError(f"axes.{ranged[0]} has a low / high range, which the grid cannot list; valid: values or "
                             "factors, or sampling.method lhs / sobol")
        if self.pricing == "tables":
            moot = [k for k in self.axes if k in ("flops", "hbm_bandwidth", "technology_node")]
            if moot:
                raise ValueError(f"axes.{moot[0]} with pricing = tables: the measured kernel tables would price every "
                                 "GEMM and attention kernel as the base part's, whatever the axis says; valid: pricing "
                                 "= datasheet, or drop the axis")
        node = self.axes.get("technology_node")
        if node is not None and (node.values is None or node.base is None):
            raise ValueError("axes.technology_node: give values (node names, e.g. [N7, N5, N3]) and base (the base "
                             "systems' node, e.g. N4)")
        for k, a in self.axes.items():
            if k != "technology_node" and a.base is not None:
                raise ValueError(f"axes.{k}.base: only technology_node takes a base node")
            if k != "technology_node" and a.values is not None and any(isinstance(v, str) for v in a.values):
                raise ValueError(f"axes.{k}.values: numbers only (node names belong to technology_node)")
        if self.total_points * len(self.workloads) > MAX_POINTS:
            raise ValueError(f"{self.total_points} points x {len(self.workloads)} workloads = "
                             f"{self.total_points * len(self.workloads)} rows; valid: at most {MAX_POINTS} per sweep "
                             "file (split the systems or the samples over several files)")
        return self

    def rows_key(self) -> dict:
        """What the rows depend on (not the description, objectives or constraints, which only the report reads)."""
        return self.model_dump(mode="json", include={"name", "systems", "pricing", "axes", "sampling", "workloads",
                                                     "chunk_points"})

    @property
    def total_points(self) -> int:
        """Points (systems x axis combinations or samples), before workloads."""
        import math

        per = self.sampling.points if self.sampling.method != "grid" else math.prod(
            len(a.values if a.values is not None else a.factors) for a in self.axes.values())
        return len(self.systems) * per


def load_sweep(path) -> Sweep:
    """A sweep file (YAML or JSON) as a Sweep; InputError naming the field on bad input."""
    from pathlib import Path

    return Sweep.parse(read_mapping(Path(path), f"sweep file {path}"), where=f"sweep file {path}")


def sweep_json_schema() -> dict:
    """JSON schema of a sweep file (`perfmodel sweep schema`; sweeps/schema.json)."""
    return Sweep.model_json_schema()


def check_objective(name: str) -> str:
    """`name` if it is an objective (OBJECTIVES), else InputError listing them."""
    if name not in OBJECTIVES:
        raise InputError(f"objective = {name!r} is not known; valid: {', '.join(OBJECTIVES)}")
    return name


