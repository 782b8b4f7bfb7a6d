"""`perfmodel export`: a plan file as the configuration of one framework version, changed first to the nearest
plan that version can express and re-predicted, and refused when that plan would not fit.

The exporters (perfmodel.export) read plan files only; this module, one step up the chain, re-runs the estimate
for a changed plan so that the export states the step time and memory of what will actually run.
"""

from __future__ import annotations

import sys

from .cost.estimate import check_prediction, evaluate_plan
from .errors import InputError
from .export import TARGETS, export, nearest_updates, versions
from .plan import resolve
from .planfile import PlanFile, load_plan_file
from .search.planfiles import estimated_plan_file


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


def export_command(path: str, to: str, version: str | None, check: bool) -> str:
    """`perfmodel export PATH --to TO [--version V] [--check]`: the export text; with --check, the framework's own
    checks' verdict on stderr, and exit 1 (after printing the export) when they refuse it."""
    pf = load_plan_file(path)
    check_prediction(pf.model, pf.hardware, pf.plan, pf.prediction, f"plan file {path!r}")
    text = export_plan(pf, to, version).rstrip("\n")
    if not check:
        return text
    from .framework_checks import run_check

    version = version or next(iter(versions(to)))
    r = run_check(to, version, versions(to)[version], text + "\n")
    verdict = "accepted" if r.accepted else f"REFUSED: {r.error}"
    if not r.accepted:  # the export is still printed, to be read against the refusal
        print(text)
    print(f"perfmodel export --check: {r.distribution} {verdict} (ran {'; '.join(r.checks)})", file=sys.stderr)
    if not r.accepted:
        raise SystemExit(1)
    return text
