"""Measurement files: what `perfmodel execute` writes beside a plan file and `perfmodel validate` reads.

One file per executed plan: the plan it ran (model, hardware, layout), the software and devices it ran on, the
raw per-step wall times of every rank, the peak memory of every rank and how it was measured, the loss per
step, and every way the run departed from the plan (e.g. dropout not run). This module imports no torch.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from pydantic import Field

from .errors import InputError, Schema
from .files import read_json_object, write_atomic
from .hardware import System
from .models import ModelConfig
from .plan import Plan

VERSION = 1


class RankRecord(Schema):
    """What one rank measured."""

    rank: int
    device: str = Field(description="device name, e.g. 'NVIDIA H100 80GB HBM3' or the CPU model")
    step_times_s: list[float] = Field(description="wall seconds of every step, warm-up included")
    peak_memory_bytes: float = Field(description="peak memory of the measured steps (see memory_method)")


class Measurement(Schema):
    """One executed plan."""

    version: int = VERSION
    plan_file: str = Field(description="path of the plan file that was run")
    model: ModelConfig
    hardware: System = Field(description="the spec the plan file was written for")
    plan: Plan
    mesh: dict[str, int]
    stage_layers: list[int]
    device_type: str = Field(description="cpu or cuda")
    backend: str = Field(description="torch.distributed backend: gloo or nccl")
    torch_version: str
    nproc: int = Field(description="processes (ranks) in the run")
    steps: int
    warmup: int = Field(description="leading steps left out of the median")
    dtype: str = Field(description="compute dtype the executor ran: bf16/fp16 autocast on CUDA, fp32 on CPU")
    memory_method: str = Field(description="how peak_memory_bytes was measured")
    ranks: list[RankRecord]
    losses: list[float] = Field(description="mean training loss of every step (over all tokens of the step)")
    notes: list[str] = Field(default_factory=list, description="where the run departs from the plan, and why")
    wall_s: float = Field(description="seconds from model build to the last step, on rank 0")
    created_at: str = ""

    def step_times(self) -> list[float]:
        """Per-step time of the job: the slowest rank in each step (all ranks wait for it at the next sync)."""
        return [max(r.step_times_s[i] for r in self.ranks) for i in range(self.steps)]

    @property
    def step_time_s(self) -> float:
        """Median job step time after warm-up, seconds."""
        return statistics.median(self.step_times()[self.warmup:])

    @property
    def peak_memory_bytes(self) -> float:
        """Peak memory of the most loaded rank, bytes."""
        return max(r.peak_memory_bytes for r in self.ranks)


def measurement_path(plan_path: str | Path) -> Path:
    """Where `execute` writes the measurement of a plan file: beside it, `NAME.measured.json`."""
    p = Path(plan_path)
    return p.with_name(p.name.removesuffix(".json") + ".measured.json")


def write_measurement(m: Measurement, path: str | Path) -> Path:
    """Write atomically: an interrupted run never leaves a half-written file."""
    return write_atomic(path, lambda tmp: Path(tmp).write_text(m.model_dump_json(indent=2) + "\n"), "measurement")


def load_measurement(path: str | Path) -> Measurement:
    path = Path(path)
    data = read_json_object(path, "measurement file")
    if data.get("version") != VERSION:
        raise InputError(f"measurement file {str(path)!r}: version = {data.get('version')!r}; valid version: {VERSION}")
    return Measurement.parse(data, where=f"measurement file {path}")
