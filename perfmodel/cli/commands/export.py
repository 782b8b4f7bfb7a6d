"""`perfmodel export PLAN --to TARGET [--version V] [--check]`: a plan file as one framework version's
configuration (`export.nearest.export_plan`), optionally run through that release's own checks
(`export.checks`)."""

from __future__ import annotations

import argparse
import sys

from ..argtypes import path


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    ex = sub.add_parser(name, help=help)
    ex.add_argument("plan", type=path("plan file"), help="plan file (JSON)")
    ex.add_argument("--to", required=True, help="megatron | torchtitan | deepspeed | maxtext")
    ex.add_argument("--version", help="framework version to write for (default its newest; docs/plans.md lists "
                                      "them: megatron core_r0.16 | core_r0.12, torchtitan 0.3.0 | 0.2.2, deepspeed, "
                                      "maxtext 0.2.5)")
    ex.add_argument("--check", action="store_true", help="also run the framework's own config checks on the export "
                                                         "(downloads that release from PyPI once; no GPU)")
    return ex


def run(a: argparse.Namespace) -> str:
    return export_command(a.plan, a.to, a.version, a.check)


def export_command(path: str, to: str, version: str | None, check: bool) -> str:
    """`perfmodel export PATH --to TO [--version V] [--check]`: the export text; with --check, the framework's own
    checks' verdict on stderr, and exit 1 (after printing the export) when they refuse it."""
    from ...cost.estimate import check_prediction
    from ...export.nearest import export_plan
    from ...export.targets import versions
    from ...spec.plan.file import load_plan_file

    pf = load_plan_file(path)
    check_prediction(pf.model, pf.hardware, pf.plan, pf.prediction, f"plan file {path!r}")
    text = export_plan(pf, to, version).rstrip("\n")
    if not check:
        return text
    from ...export.checks.releases import run_check

    version = version or next(iter(versions(to)))
    r = run_check(to, version, versions(to)[version], text + "\n")
    verdict = "accepted" if r.accepted else f"REFUSED: {r.error}"
    if not r.accepted:  # the export is still printed, to be read against the refusal
        print(text)
    print(f"perfmodel export --check: {r.distribution} {verdict} (ran {'; '.join(r.checks)})", file=sys.stderr)
    if not r.accepted:
        raise SystemExit(1)
    return text
