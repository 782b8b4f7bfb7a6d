"""Prediction against measurement: the metrics (signed error, MAPE, Spearman) and the result of
`perfmodel validate` (one row per plan, the metrics over the rows, the notes a reader needs, the printed text).

Errors are signed: (predicted - measured) / measured, percent; MAPE is the mean of their magnitudes. pandas
and scipy are imported where used: the CLI imports this module (through `perfmodel.validate.runner`) on every run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

from pydantic import Field

from ..errors import InputError
from ..types import Schema
from ..spec.measurement import MEMORY_FIELDS, Measurement
from ..spec.plan.layout import layout_label
from .scores import error_pct, mape, spearman  # noqa: F401 (the scores, imported from here too)
from .sweeps import Targets
from .checkpoint_checks import CheckpointRow, checkpoint_lines
from .trace_check import TraceCalibration, trace_lines

if TYPE_CHECKING:  # pandas is imported where it is used: the CLI loads this module on every command
    import pandas as pd

GiB = 2**30
# The memory views compared beside the allocated peak, where measured (spec.measurement.MEMORY_FIELDS), with the
# printed table's column label: reserved and device on CUDA, between steps on CUDA and CPU.
EXTRA_VIEWS = {"reserved": "res", "device": "dev", "between_steps": "between"}
NOISY_SPREAD = 2.0  # slowest / fastest measured step beyond which a run was disturbed (TORCH_NOTES: 1.2-1.5 quiet)

CPU_MEMORY_CAVEAT = (
    "memory on CPU is reported, not targeted: the cost model counts bf16 mixed-precision training (2-byte "
    "weights and activations, fp32 master weights and Adam moments), the CPU executor trains in fp32 (4-byte "
    "weights, gradients and activations; 8 bytes of Adam moments) and measures resident memory (method below)")


# ---------------------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------------------
# Result
# ---------------------------------------------------------------------------------------------------------
class ValidationRow(Schema):
    """One plan: prediction against measurement."""

    plan: str = Field(description="plan name (sweep entry, or plan file stem)")
    kind: str = Field(description="what the plan exercises")
    layout: str
    predicted_step_s: float
    measured_step_s: float = Field(description="job step time (slowest rank per step): the median after warm-up "
                                               "of each round, the lowest of those (Measurement.step_time_s)")
    step_spread: float = Field(description="slowest / fastest job step after warm-up in the round kept: how steady "
                                           "the run was "
                                           "(1.2-1.5 on a quiet CPU machine; more: other load on the machine)")
    step_error_pct: float
    predicted_memory_gib: float = Field(description="cost model's allocated view on the fullest device (weights, "
                                                    "gradients, optimizer, activations, transients; no allocator "
                                                    "slack, no runtime), GiB")
    measured_memory_gib: float = Field(description="allocated peak of the most loaded rank, GiB")
    memory_error_pct: float
    final_loss: float | None = None
    predicted_reserved_gib: float | None = Field(None, description="cost model's reserved view (allocated + the "
                                                                   "allocator's fragmentation), GiB")
    measured_reserved_gib: float | None = Field(None, description="reserved peak of the most loaded rank (CUDA "
                                                                  "max_memory_reserved), GiB; empty: not measured")
    reserved_error_pct: float | None = None
    predicted_device_gib: float | None = Field(None, description="cost model's device view (reserved + runtime: "
                                                                 "context, NCCL buffers, workspaces), GiB")
    measured_device_gib: float | None = Field(None, description="device memory in use on the most loaded rank's "
                                                                "device (NVML), GiB; empty: not measured")
    device_error_pct: float | None = None
    predicted_between_steps_gib: float | None = Field(None, description="cost model's allocated memory between "
                                                                        "steps (weights, gradients, optimizer "
                                                                        "state, cached narrow weights), GiB")
    measured_between_steps_gib: float | None = Field(None, description="allocated memory right after a step on "
                                                                       "the most loaded rank, GiB; empty: not "
                                                                       "measured")
    between_steps_error_pct: float | None = None


COLUMNS = list(ValidationRow.model_fields)


class ValidationResult(Schema):
    """What `validate` returns: rows, metrics, and where the outputs went. `table` is the rows as a DataFrame."""

    sweep: str | None
    device: str
    nproc: int
    hardware: str = Field(description="spec the predictions used (name), or 'each plan's own'")
    hardware_source: str = Field(description="where it came from: a path, the catalogue, or calibration")
    rows: list[ValidationRow]
    step_mape_pct: float
    memory_mape_pct: float
    spearman: float | None = Field(description="rank correlation of predicted vs measured step time")
    targets: Targets | None = None
    notes: list[str] = Field(default_factory=list)
    checkpoints: list[CheckpointRow] = Field(default_factory=list, description="plans that saved checkpoints "
                                             "(validate --checkpoint-every): bytes and times against the forecast")
    trace_calibration: TraceCalibration | None = Field(None, description="validate --calibrate-from-trace: the "
                                                        "plans predicted on the spec one plan's trace calibrates")
    csv_path: str | None = None
    plot_path: str | None = None

    @property
    def table(self) -> pd.DataFrame:
        import pandas as pd

        df = pd.DataFrame([r.model_dump() for r in self.rows], columns=COLUMNS)
        floats = [c for c in COLUMNS if c.endswith(("_gib", "_pct"))]
        return df.astype({c: float for c in floats})  # NaN where a view was not measured

    def view_mape_pct(self) -> dict[str, float]:
        """MAPE of each extra memory view (EXTRA_VIEWS) over the plans that measured it; views none measured are
        left out."""
        df, out = self.table, {}
        for view in EXTRA_VIEWS:
            rows = df[(df[f"measured_{view}_gib"] > 0) & df[f"predicted_{view}_gib"].notna()]
            if len(rows):
                out[view] = mape(rows[f"predicted_{view}_gib"], rows[f"measured_{view}_gib"])
        return out

    def targets_met(self) -> dict[str, bool]:
        """Each target of the sweep and whether it holds (empty without targets)."""
        t, out = self.targets, {}
        if t is None:
            return out
        out[f"step-time MAPE <= {t.step_mape_pct:g}%"] = self.step_mape_pct <= t.step_mape_pct
        if t.spearman is not None:
            out[f"Spearman >= {t.spearman:g}"] = self.spearman is not None and self.spearman >= t.spearman
        if t.memory_mape_pct is not None:
            out[f"memory MAPE <= {t.memory_mape_pct:g}%"] = self.memory_mape_pct <= t.memory_mape_pct
        return out

    def text(self) -> str:
        """The table, the metrics and the notes, as `perfmodel validate` prints them."""
        what = f"sweep {self.sweep}" if self.sweep else "plan files"
        lines = [f"validate {what}: {len(self.rows)} plans on {self.nproc} {self.device} process"
                 f"{'es' if self.nproc > 1 else ''}; predicted with {self.hardware} ({self.hardware_source})", ""]
        import pandas as pd

        df = self.table
        show = pd.DataFrame({
            "plan": df["plan"], "layout": df["layout"],
            "step pred (s)": df["predicted_step_s"].map("{:.4f}".format),
            "step meas (s)": df["measured_step_s"].map("{:.4f}".format),
            "step err": df["step_error_pct"].map("{:+.1f}%".format),
            "spread": df["step_spread"].map("{:.2f}".format),
            "mem pred (GiB)": df["predicted_memory_gib"].map("{:.3f}".format),
            "mem meas (GiB)": df["measured_memory_gib"].map("{:.3f}".format),
            "mem err": df["memory_error_pct"].map("{:+.1f}%".format),
        })
        views = self.view_mape_pct()
        for view in views:  # the views measured: CUDA's reserved and device, and between steps
            label = EXTRA_VIEWS[view]
            columns = {"pred": (f"predicted_{view}_gib", "{:.3f}"), "meas": (f"measured_{view}_gib", "{:.3f}"),
                       "err": (f"{view}_error_pct", "{:+.1f}%")}
            for head, (col, fmt) in columns.items():  # "-" where the view was not measured
                show[f"{label} {head}"] = df[col].map(lambda v, fmt=fmt: "-" if math.isnan(v) else fmt.format(v))
        lines.append(show.to_string(index=False))
        lines.append("")
        rho = "n/a" if self.spearman is None else f"{self.spearman:.3f}"
        lines.append(f"step time:   MAPE {self.step_mape_pct:.1f}%   Spearman {rho} (predicted vs measured, "
                     f"{len(self.rows)} plans)")
        lines.append(f"peak memory: MAPE {self.memory_mape_pct:.1f}% (allocated)"
                     + "".join(f"   {v.replace('_', ' ')} {m:.1f}%" for v, m in views.items())
                     + ("   (CPU: not a target, see note)" if self.device == "cpu" else ""))
        met = self.targets_met()
        if met:
            lines.append("targets: " + ", ".join(f"{k} {'holds' if ok else 'MISSED'}" for k, ok in met.items()))
        lines += [f"note: {n}" for n in self.notes]
        lines += checkpoint_lines(self.checkpoints)
        if self.trace_calibration is not None:
            lines += ["", *trace_lines(self.trace_calibration), ""]
        for label, path in (("csv", self.csv_path), ("plot", self.plot_path)):
            if path:
                lines.append(f"wrote {label}: {path}")
        return "\n".join(lines)


def compare(name: str, kind: str, predicted_step_s: float, predicted_memory_bytes: float,
            m: Measurement, predicted_views: dict[str, float] | None = None) -> ValidationRow:
    """One row: a prediction (seconds, allocated bytes) against a measurement (median step, allocated peak of
    the most loaded rank). `predicted_views`: bytes of the other views ({"reserved": ..., "device": ...,
    "between_steps": ...}, a MemoryBreakdown's), each compared with the measured view where it was measured."""
    ms, mm = m.step_time_s, m.peak_memory_bytes
    measured = m.kept_round()
    views = {}
    for view, pred in (predicted_views or {}).items():
        if view not in EXTRA_VIEWS:
            raise ValueError(f"predicted_views: {view!r}; valid: {', '.join(EXTRA_VIEWS)}")
        got = m.memory_view(view)
        views[f"predicted_{view}_gib"] = pred / GiB
        if got is not None:
            views[f"measured_{view}_gib"] = got / GiB
            views[f"{view}_error_pct"] = error_pct(pred, got) if got > 0 else None
    return ValidationRow(plan=name, kind=kind, layout=layout_label(m.plan), predicted_step_s=predicted_step_s,
                         measured_step_s=ms, step_spread=max(measured) / min(measured),
                         step_error_pct=error_pct(predicted_step_s, ms),
                         predicted_memory_gib=predicted_memory_bytes / GiB, measured_memory_gib=mm / GiB,
                         memory_error_pct=error_pct(predicted_memory_bytes, mm),
                         final_loss=m.losses[-1] if m.losses else None, **views)


def summarize(rows: list[ValidationRow], *, sweep: str | None, device: str, nproc: int, hardware: str,
              hardware_source: str, targets: Targets | None = None, notes: list[str] | None = None,
              measurements: list[Measurement] | None = None) -> ValidationResult:
    """Metrics over the rows, and the notes a reader needs (CPU memory caveat, how memory was measured, and
    where the runs departed from their plans)."""
    if not rows:
        raise InputError("validate: no plans to compare; give plan files or a sweep with plans")
    import pandas as pd

    df = pd.DataFrame([r.model_dump() for r in rows])
    notes = list(notes or [])
    noisy = [r.plan for r in rows if r.step_spread > NOISY_SPREAD]
    if noisy:
        notes.append(f"steps varied more than {NOISY_SPREAD:g}x after warm-up in {', '.join(noisy)}: other load on "
                     "the machine is likely; re-run on a quiet machine before trusting those medians")
    if device == "cpu":
        notes.append(CPU_MEMORY_CAVEAT)
    if measurements:
        methods = sorted({m.memory_method for m in measurements})
        notes.append("peak memory measured by: " + "; ".join(methods))
        for field, view in MEMORY_FIELDS.items():  # the other views, where the files say (older files do not)
            how = sorted({m.memory_methods[field] for m in measurements if field in m.memory_methods})
            if view != "allocated" and how:
                notes.append(f"{view.replace('_', ' ')} memory: " + "; ".join(how))
        departures: dict[str, list[str]] = {}
        for row, m in zip(rows, measurements):
            for n in m.notes:
                departures.setdefault(n, []).append(row.plan)
        for n, plans in departures.items():
            notes.append(f"executor ({', '.join(plans) if len(plans) < len(rows) else 'every plan'}): {n}")
    return ValidationResult(sweep=sweep, device=device, nproc=nproc, hardware=hardware,
                            hardware_source=hardware_source, rows=rows,
                            step_mape_pct=mape(df["predicted_step_s"], df["measured_step_s"]),
                            memory_mape_pct=mape(df["predicted_memory_gib"], df["measured_memory_gib"]),
                            spearman=spearman(df["predicted_step_s"].tolist(), df["measured_step_s"].tolist()),
                            targets=targets, notes=notes)
