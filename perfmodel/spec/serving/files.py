"""Serving plan files and their measurements: what `perfmodel validate --sweep cpu-infer` (and `perfmodel infer
--write-plan`) writes for the executor to serve, and what the executor writes beside each (`NAME.served.json`).

A serving plan file holds the model, the hardware spec, the serving layout (`ServePlan`: tp x dp ranks, a static
batch of `concurrency` sequences split over the replicas, input and output lengths) and the prediction for that
static batch: the prefill of a replica's sequences at once, and a decode step at their mean context. A measurement
names its plan by file name only (the plan lies beside it) and records where it ran as data. This module imports
no torch.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Literal

from pydantic import Field

from ...errors import InputError
from ...types import Count, PositiveReal, Schema
from ...files import read_json_object
from ..hardware.system import System
from ..hardware.kernel_tables import spec_folder
from ..measurement import beside
from ..model.config import ModelConfig
from .schema import ServePlan

SERVE_KIND = "serve"


class ServePrediction(Schema):
    """The serving cost's seconds for the plan's static batch on one replica (`serve.batching.static_batch`)."""

    prefill_s: PositiveReal = Field(description="one forward over every prompt of the replica's batch (TTFT)")
    decode_s: PositiveReal = Field(description="one decode step of the batch at the mean context (TPOT)")
    prefill_parts: dict[str, float] = Field(description="prefill seconds by part (serve.step_time.step_parts)")
    decode_parts: dict[str, float] = Field(description="decode-step seconds by part")


class ServePlanFile(Schema):
    kind: Literal["serve"] = Field(SERVE_KIND, description="'serve': a serving plan (a training plan has no kind)")
    created_by: str | None = None
    model: ModelConfig
    hardware: System
    plan: ServePlan
    predicted: ServePrediction

    @property
    def batch(self) -> int:
        """Sequences each replica runs at once."""
        return self.plan.concurrency // self.plan.dp


class ServeMeasurement(Schema):
    """What the executor measured serving one plan: per round, the prefill's seconds and every decode step's."""

    plan_file: str = Field(description="the serving plan file, relative to this file's folder (its name where it "
                                       "lies beside it; files.relative_ref)")
    device_type: Literal["cpu", "cuda"]
    device: str = Field(description="device name (the CPU model or the GPU's)")
    backend: str = Field(description="torch.distributed backend, 'none' on one process")
    torch_version: str
    nproc: Count
    batch: Count = Field(description="sequences each replica ran at once")
    rounds: Count
    warmup: int = Field(ge=0, description="leading rounds left out of the medians")
    prefill_s: list[PositiveReal] = Field(description="each round's prefill, the slowest rank's")
    decode_s: list[list[PositiveReal]] = Field(description="each round's decode steps, the slowest rank's each")
    tokens: list[list[int]] = Field(description="the first replica's greedy tokens for its first sequence, per round "
                                                "(each round draws new prompts)")
    notes: list[str] = Field(default_factory=list)
    created_at: str

    @property
    def prefill_time_s(self) -> float:
        """Median prefill over the rounds after warm-up."""
        return statistics.median(self.prefill_s[self.warmup:])

    @property
    def decode_time_s(self) -> float:
        """Median decode step over the rounds after warm-up (every step of them)."""
        return statistics.median([t for steps in self.decode_s[self.warmup:] for t in steps])


def is_serve_plan(data: dict) -> bool:
    return isinstance(data, dict) and data.get("kind") == SERVE_KIND


def load_serve_plan(path: str | Path) -> ServePlanFile:
    data = read_json_object(path, "serving plan file")
    if not is_serve_plan(data):
        raise InputError(f"{str(path)!r} is not a serving plan file (kind = {data.get('kind')!r}); valid: a file "
                         "with kind 'serve', as perfmodel validate --sweep cpu-infer writes")
    with spec_folder(Path(path).parent):  # its spec's own kernel tables are named relative to the file
        return ServePlanFile.parse(data, where=str(path))


def served_path(plan_path: str | Path) -> Path:
    """Where the measurement of a serving plan goes: beside it, NAME.served.json."""
    return beside(plan_path, "served")


def load_serve_measurement(path: str | Path) -> ServeMeasurement:
    return ServeMeasurement.parse(read_json_object(path, "serving measurement"), where=str(path))
