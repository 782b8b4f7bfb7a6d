"""Measurement files: what `perfmodel execute` writes beside a plan file and `perfmodel validate` reads.

One file per executed plan: the plan it ran (model, hardware, layout), the software and devices it ran on, the
raw per-step wall times of every rank, the memory of every rank (the allocated peak, and where measured the
reserved peak, the device memory and what stays allocated between steps) and how each was measured, the loss per
step, every way the run departed from the plan (e.g. dropout not run), and, when it saved checkpoints or resumed
one, each save's time and size and the resume's read time (`CheckpointRecord`; older files without it still
load). This module imports no torch.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from ..errors import InputError
from ..types import Count, Count0, PositiveReal, Real, Schema
from ..files import read_json_object
from .hardware.system import System
from .hardware.kernel_tables import spec_folder, write_with_tables
from .model.config import ModelConfig
from .plan.layout import Plan

VERSION = 1


def job_step_times(rank_step_times: list[list[float]]) -> list[float]:
    """Per-step time of a job from every rank's step times: the slowest rank in each step (all ranks wait for it
    at the next sync)."""
    return [max(steps) for steps in zip(*rank_step_times)]


class RankRecord(Schema):
    """What one rank measured."""

    rank: Count0
    device: str = Field(description="device name, e.g. 'NVIDIA H100 80GB HBM3' or the CPU model")
    step_times_s: list[PositiveReal] = Field(description="wall seconds of every step, warm-up included")
    peak_memory_bytes: Real = Field(ge=0, description="peak allocated memory of the measured steps: what tensors "
                                                      "held (memory_methods['peak_memory_bytes'])")
    peak_reserved_bytes: Real | None = Field(None, ge=0, description="peak the caching allocator reserved over "
                                                                     "the measured steps (CUDA); null: not measured")
    device_bytes: Real | None = Field(None, ge=0, description="device memory in use as NVML reports it (CUDA "
                                                              "context, NCCL, libraries and the allocator's "
                                                              "segments); null: not measured")
    between_steps_bytes: Real | None = Field(None, ge=0, description="allocated memory right after a step (the "
                                                                     "optimizer step and zero_grad done), the "
                                                                     "largest over the measured steps; null: not "
                                                                     "measured")


# The memory a rank records, one field per view (RankRecord), as the cost model predicts them (result.
# MemoryBreakdown: allocated, reserved, device, between_steps).
MEMORY_FIELDS = {"peak_memory_bytes": "allocated", "peak_reserved_bytes": "reserved", "device_bytes": "device",
                 "between_steps_bytes": "between_steps"}


class CheckpointSave(Schema):
    """One checkpoint save as the run measured it (execute/checkpoint/resume.py)."""

    step: Count0 = Field(description="steps done when it was taken; a resume runs step `step` next")
    write_s: Real = Field(ge=0, description="slowest rank: state dict, then torch.distributed.checkpoint writing "
                                            "its shards (async: until the background write finished)")
    blocking_s: Real = Field(ge=0, description="slowest rank: how long training waited (sync: = write_s; async: "
                                               "collecting the state and copying it to host memory)")
    bytes: int = Field(ge=0, strict=True,
                       description="bytes of all ranks' files (shards and .metadata; not the manifest)")


class CheckpointRecord(Schema):
    """Checkpointing of a run (`execute --checkpoint-every K --checkpoint-dir D`, `--resume`)."""

    directory: str = Field(description="where this plan's saves went: D/PLAN")
    every: Count | None = Field(description="steps between saves; null: none saved (a resume only)")
    mode: Literal["sync", "async"] = "sync"
    saves: list[CheckpointSave] = Field(default_factory=list, description="every save of the run, those of the "
                                                                          "launch it resumed included")
    resumed_from_step: Count0 | None = Field(None, description="the step of the save this launch resumed, if any")
    read_s: Real | None = Field(None, ge=0, description="slowest rank: torch.distributed.checkpoint reading the "
                                                        "save and loading it into model and optimizer, on resume")

    @model_validator(mode="after")
    def _resume_read(self):
        if self.resumed_from_step is not None and self.read_s is None:
            raise ValueError(f"resumed_from_step = {self.resumed_from_step} but read_s is null; valid: the seconds "
                             "the resume took to read the save, or resumed_from_step null")
        return self

    def summary(self) -> str:
        """'resumed at step 4 (read 0.12 s), 2 saves (write 0.05 s median, 3.5 MiB each)', as execute prints it."""
        parts = [f"resumed at step {self.resumed_from_step} (read {self.read_s:.2f} s)"] \
            if self.resumed_from_step else []
        if self.saves:
            parts.append(f"{len(self.saves)} save{'s' if len(self.saves) > 1 else ''} ({self.mode}: write "
                         f"{statistics.median(s.write_s for s in self.saves):.2f} s median, "
                         f"{self.saves[-1].bytes / 2**20:.1f} MiB each)")
        return ", ".join(parts) or "no saves"


class Measurement(Schema):
    """One executed plan."""

    version: Count = VERSION
    plan_file: str = Field(description="the plan file that was run, relative to this file's folder (its name where "
                                       "it lies beside it; files.relative_ref)")
    model: ModelConfig
    hardware: System = Field(description="the spec the plan file was written for")
    plan: Plan
    mesh: dict[str, Count]
    stage_layers: list[Count]
    device_type: str = Field(description="cpu or cuda")
    backend: str = Field(description="torch.distributed backend: gloo or nccl")
    torch_version: str
    nproc: Count = Field(description="processes (ranks) in the run")
    steps: Count = Field(description="steps of one run of the plan, warm-up included")
    warmup: Count0 = Field(description="leading steps of every run left out of the median")
    rounds: Count = Field(1, description="runs of the plan in the launch, interleaved with the other plans' "
                                         "(round 1 runs every plan, then round 2 ...); each rank's step_times_s "
                                         "holds rounds x steps entries, every run with its own warm-up")
    dtype: str = Field(description="compute dtype the executor ran: bf16/fp16 autocast on CUDA, fp32 on CPU")
    memory_method: str = Field(description="how peak_memory_bytes was measured")
    memory_methods: dict[str, str] = Field(default_factory=dict, description="how each memory field of the ranks "
                                           "was measured, by field name (MEMORY_FIELDS), or why it was not; older "
                                           "files: empty (only memory_method)")
    ranks: list[RankRecord] = Field(min_length=1, description="every rank's record")
    losses: list[Real] = Field(min_length=1, description="mean training loss of every step of the first run (over "
                                                        "all tokens of the step; every run starts from the same seed)")
    notes: list[str] = Field(default_factory=list, description="where the run departs from the plan, and why")
    wall_s: Real = Field(ge=0, description="seconds from model build to the last step of the first round, on "
                                           "rank 0 (of a resumed run: of its last launch)")
    checkpoint: CheckpointRecord | None = Field(None, description="saves and resume, when the run checkpointed")
    created_at: str = ""

    @model_validator(mode="after")
    def _one_time_per_step(self):
        want = self.steps * self.rounds
        for r in self.ranks:
            if len(r.step_times_s) != want:
                raise ValueError(f"rank {r.rank}: step_times_s has {len(r.step_times_s)} entries; valid: steps x "
                                 f"rounds = {self.steps} x {self.rounds} = {want}")
        if not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup = {self.warmup}; valid: 0 <= warmup < steps = {self.steps}")
        return self

    def step_times(self) -> list[float]:
        """Per-step time of the job (`job_step_times`), every round one after another."""
        return job_step_times([r.step_times_s for r in self.ranks])

    def round_steps(self) -> list[list[float]]:
        """The job step times after warm-up, one list per round."""
        times = self.step_times()
        return [times[k * self.steps + self.warmup:(k + 1) * self.steps] for k in range(self.rounds)]

    def timed_steps(self) -> list[float]:
        """The job step times after each round's warm-up, all rounds pooled."""
        return [t for steps in self.round_steps() for t in steps]

    def kept_round(self) -> list[float]:
        """The timed steps of the round whose median is the step time (the fastest round)."""
        return min(self.round_steps(), key=statistics.median)

    @property
    def step_time_s(self) -> float:
        """The plan's step time, seconds: the median job step after warm-up of each round, and of those the
        lowest. The median resists single slow steps; the lowest round resists other load on a shared machine
        that lasts a whole round, and is what the plan costs when it has the machine to itself (the reading
        Python's `timeit` documentation recommends for repeated timings: higher values come from other
        processes interfering, not from the code timed)."""
        return statistics.median(self.kept_round())

    @property
    def peak_memory_bytes(self) -> float:
        """Peak allocated memory of the most loaded rank, bytes."""
        return max(r.peak_memory_bytes for r in self.ranks)

    def memory_view(self, view: str) -> float | None:
        """The most loaded rank's bytes in one view (allocated, reserved, device, between_steps), over the ranks
        that measured it; None where no rank did."""
        field = {v: f for f, v in MEMORY_FIELDS.items()}[view]
        values = [getattr(r, field) for r in self.ranks if getattr(r, field) is not None]
        return max(values) if values else None


def beside(plan_path: str | Path, kind: str) -> Path:
    """The file beside a plan file that holds what was measured of it: `NAME.KIND.json`."""
    p = Path(plan_path)
    return p.with_name(p.name.removesuffix(".json") + f".{kind}.json")


def measurement_path(plan_path: str | Path) -> Path:
    """Where `execute` writes the measurement of a plan file: beside it, `NAME.measured.json`."""
    return beside(plan_path, "measured")


def write_measurement(m: Measurement, path: str | Path) -> Path:
    """Write atomically: an interrupted run never leaves a half-written file (its spec's own kernel tables named
    relative to the file's folder, as in a plan file)."""
    return write_with_tables(m, path, "measurement")


def load_measurement(path: str | Path) -> Measurement:
    path = Path(path)
    data = read_json_object(path, "measurement file")
    if data.get("version") != VERSION:
        raise InputError(f"measurement file {str(path)!r}: version = {data.get('version')!r}; valid version: {VERSION}")
    data = with_portable_plan_ref(data, path)
    with spec_folder(path.parent):
        return Measurement.parse(data, where=f"measurement file {path}")


_SAID: set[str] = set()


def with_portable_plan_ref(data: dict, path: Path) -> dict:
    """A measurement's `plan_file` as this version writes it: an older file's absolute path is read as the file name
    beside the measurement (said once per file on stderr), since the folder it named may exist on no other machine."""
    ref = data.get("plan_file")
    if not isinstance(ref, str) or not (ref.startswith("/") or re.match(r"[A-Za-z]:[\\/]", ref)):
        return data
    name = re.split(r"[\\/]", ref)[-1]
    if str(path) not in _SAID:
        _SAID.add(str(path))
        print(f"note: {path} names its plan by an absolute path (an older perfmodel); read as {name!r} beside it",
              file=sys.stderr)
    return {**data, "plan_file": name}
