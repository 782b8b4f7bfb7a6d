"""A plan file as the configuration of one framework version (what `perfmodel export` prints), changed first to
the nearest plan that version can express and re-predicted, and refused when that plan would not fit.

The writers (`export.targets` and the per-framework modules) read plan files only; this module re-runs the
estimate for a changed plan (cost, search: upstream of export) so that the export states the step time and memory
of what will actually run.
"""

from __future__ import annotations

from ..cost.estimate import evaluate_plan
from ..errors import InputError
from ..search.plan_writer import estimated_plan_file
from ..spec.plan.layout import resolve
from ..spec.plan.file import PlanFile
from .targets import TARGETS, export, nearest_updates, versions


def nearest(pf: PlanFile, to: str, version: str | None = None) -> tuple[PlanFile, list[str]]:
    """The plan file `to` at `version` (default its newest) runs: `pf` when it expresses pf.plan, else pf with the
    nearest plan it does express, re-predicted; and one line per change with the new step time and memory."""
    version = version or next(iter(versions(to)))
    updates, why = nearest_updates(pf, to, version)
    if not updates:
        return pf, []
    updates = {"dp": None} | updates  # gpus stays; dp is derived again
    if "vpp" in updates and "schedule" not in updates:  # interleaved or not follows vpp
        updates["schedule"] = None
    plan = resolve(pf.plan.model_copy(update=updates), pf.model, pf.hardware)
    _, est = evaluate_plan(pf.model, pf.hardware, plan, pf.prediction.memory_headroom)
    # the placements stay (per operator, over the same axes); PaSE's cost was for the plan as planned
    new = estimated_plan_file(pf.model, pf.hardware, plan, est, pf.placements, None, pf.created_by)
    old, now = pf.prediction, new.prediction
    gib = 2**30
    summary = (f"re-predicted for the plan exported: step {now.step_time_s:.3g} s (planned {old.step_time_s:.3g} s, "
               f"{now.step_time_s / old.step_time_s - 1:+.1%}), reserved memory {now.memory_bytes / gib:.1f} GiB "
               f"(planned {old.memory_bytes / gib:.1f} GiB) of {now.memory_capacity_bytes / gib:.1f} GiB")
    if not now.fits_in_memory:
        raise InputError(f"--to {to} --version {version}: the nearest plan this version expresses does not fit "
                         f"({'; '.join(why)}; {summary}); search with this version's settings (e.g. --only) "
                         "or export to another version")
    return new, [*why, summary]


def export_plan(pf: PlanFile, to: str, version: str | None = None) -> str:
    """The configuration text of `to` at `version` for `pf`, after `nearest`."""
    if to not in TARGETS:
        raise InputError(f"--to = {to!r} is not a known target; valid: {', '.join(TARGETS)}")
    known = versions(to)
    if version is not None and version not in known:
        raise InputError(f"--version = {version!r} is not a {to} version perfmodel exports to; valid: "
                         f"{', '.join(known)}")
    runs, changes = nearest(pf, to, version)
    return export(runs, to, version, changes)
