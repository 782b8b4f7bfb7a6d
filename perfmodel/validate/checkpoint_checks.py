"""Checkpoint saves measured by the executor against the forecast's checkpoint model (`perfmodel validate
--checkpoint-every K`): bytes against `perfmodel.run.reliability.checkpoint_bytes`, write and read seconds against
`perfmodel.run.reliability.checkpoint_seconds` on the storage tier of the spec the plan is predicted with (its
`storage`, else `perfmodel.run.reliability.DEFAULT_STORAGE`).

The times are predicted for the bytes the run wrote, so that the storage model is compared on its own; the
bytes are compared beside them, and differ for a reason that is not an error of either: the forecast counts
mixed-precision training's 14 bytes per parameter (bf16 weights, fp32 master weights, two fp32 Adam moments), the
executor keeps fp32 weights and no separate master copy (12 bytes per parameter: weights and two moments), plus
DCP's per-tensor framing, .metadata and a step counter per tensor, which on the test models (214 thousand
parameters) add about a third: 3.55 MB written for 2.56 MB of fp32 tensors. forecast.py is imported where used
(it loads the cost model).
"""

from __future__ import annotations

import statistics

from pydantic import Field

from ..types import Schema
from ..spec.measurement import Measurement


class CheckpointRow(Schema):
    """One plan's checkpoints: prediction against measurement."""

    plan: str
    storage: str = Field(description="the storage tier the prediction used")
    mode: str = Field(description="sync or async saves")
    saves: int
    predicted_bytes: float = Field(description="run.reliability.checkpoint_bytes of the model")
    measured_bytes: float = Field(description="bytes of the last save, all ranks' files")
    predicted_write_s: float = Field(description="run.reliability.checkpoint_seconds for the measured bytes: write")
    measured_write_s: float = Field(description="median over the saves of the slowest rank's write")
    predicted_read_s: float = Field(description="run.reliability.checkpoint_seconds for the measured bytes: read")
    measured_read_s: float | None = Field(None, description="slowest rank's load on resume; null: not resumed")


def checkpoint_rows(names: list[str], systems: list, measurements: list[Measurement]) -> list[CheckpointRow]:
    """A row for every measurement that saved checkpoints; `systems[i]` is the spec plan i is predicted with."""
    from ..run.reliability import DEFAULT_STORAGE, checkpoint_bytes, checkpoint_seconds

    rows = []
    for name, system, m in zip(names, systems, measurements):
        ck = m.checkpoint
        if ck is None or not ck.saves:
            continue
        storage = system.storage or DEFAULT_STORAGE
        label = (f"{system.name}'s storage tier" if system.storage else
                 f"run.reliability.DEFAULT_STORAGE (none in {system.name}): {DEFAULT_STORAGE.sources['write_gbps']}")
        nbytes = ck.saves[-1].bytes
        write, read, _ = checkpoint_seconds(nbytes, m.plan.gpus, storage)
        rows.append(CheckpointRow(
            plan=name, storage=label, mode=ck.mode, saves=len(ck.saves), predicted_bytes=checkpoint_bytes(m.model),
            measured_bytes=nbytes, predicted_write_s=write,
            measured_write_s=statistics.median(s.write_s for s in ck.saves), predicted_read_s=read,
            measured_read_s=ck.read_s))
    return rows


def checkpoint_lines(rows: list[CheckpointRow]) -> list[str]:
    """The table validate prints under its own, and what a reader needs to read it."""
    if not rows:
        return []
    lines = ["", "checkpoints (times predicted for the bytes written; run.reliability.checkpoint_seconds):",
             f"{'plan':<24}{'saves':>6}{'MiB pred':>10}{'MiB meas':>10}{'write pred':>12}{'write meas':>12}"
             f"{'read pred':>11}{'read meas':>11}"]
    for r in rows:
        read = f"{r.measured_read_s:.4f}s" if r.measured_read_s is not None else "-"
        mib = f"{r.predicted_bytes / 2**20:>10.2f}{r.measured_bytes / 2**20:>10.2f}"
        lines.append(f"{r.plan[-24:]:<24}{r.saves:>6}{mib}{r.predicted_write_s:>11.4f}s{r.measured_write_s:>11.4f}s"
                     f"{r.predicted_read_s:>10.4f}s{read:>11}")
    for storage in sorted({r.storage for r in rows}):
        plans = [r.plan for r in rows if r.storage == storage]
        lines.append(f"note: checkpoint storage for {', '.join(plans) if len(plans) < len(rows) else 'every plan'}: "
                     f"{storage}")
    lines.append("note: checkpoint bytes differ by design: the forecast counts 14 B/param (bf16 weights, fp32 master "
                 "weights, fp32 Adam moments), the executor saves fp32 weights and moments (12 B/param, no master "
                 "copy) plus DCP's per-tensor framing and .metadata")
    if any(r.measured_read_s is None for r in rows):
        lines.append("note: checkpoint read time is measured when a run resumes (perfmodel execute --resume); "
                     "'-': this run started from step 0")
    if any(r.mode == "async" for r in rows):
        lines.append("note: an async save's write time runs beside training steps, which share the CPU with it")
    return lines
