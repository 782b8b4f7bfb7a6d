"""Exports of a spread of plans, run through each framework version's own checks: how many each accepts.

    python -m benchmarks.evals.export_checks                     # this checkout's exporters
    python -m benchmarks.evals.export_checks --before 3679a4f    # the exporters of an earlier commit, same plans/checks
    python -m benchmarks.evals.export_checks --targets megatron --plans pp4-gpipe

Plans: perfmodel.export.checks.spread.SPREAD (every layout kind a user exports). Each export goes through
perfmodel.export.checks.releases.run_check (the framework's own parsing and validation, its release unpacked from PyPI,
no GPU). With --before, the plan files are written by this checkout and exported by the earlier commit's
`perfmodel.export.targets.export(pf, to)` (a git worktree), then checked against every version of this checkout. Prints one
row per plan x target x version and the accepted counts; --out writes them as JSON (benchmarks/results/
export_checks/ keeps the committed runs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from benchmarks import ROOT
from perfmodel.export.checks.releases import run_check
from perfmodel.export.checks.spread import SPREAD, spread_plan_file
from perfmodel.export.nearest import export_plan
from perfmodel.export.targets import TARGETS, nearest_updates, versions
from perfmodel.spec.plan.file import write_plan_file

_OLD_EXPORT = ("import sys; from perfmodel.spec.plan.file import load_plan_file; from perfmodel.export import export; "
               "sys.stdout.write(export(load_plan_file(sys.argv[1]), sys.argv[2]))")


def old_exports(rev: str, plans: list[str], targets: list[str]) -> dict[tuple[str, str], str]:
    """(plan, target) -> the text commit `rev`'s exporter writes for this checkout's plan file."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                       capture_output=True)
        try:
            for name in plans:
                path = write_plan_file(spread_plan_file(name), Path(tmp) / f"{name}.json")
                for to in targets:
                    run = subprocess.run([sys.executable, "-c", _OLD_EXPORT, str(path), to], capture_output=True,
                                         text=True, cwd=tree, env={"PYTHONPATH": str(tree), "PATH": ""})
                    out[name, to] = run.stdout if run.returncode == 0 else f"export failed: {run.stderr[-300:]}"
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    return out


def check_all(plans: list[str], targets: list[str], before: str | None) -> pd.DataFrame:
    old = old_exports(before, plans, targets) if before else {}
    rows = []
    for name in plans:
        pf = spread_plan_file(name)
        for to in targets:
            for version, dist in versions(to).items():
                text = old[name, to] if before else export_plan(pf, to, version)
                changed = not before and bool(nearest_updates(pf, to, version)[0])
                r = run_check(to, version, dist, text)
                rows.append(dict(plan=name, target=to, version=version, release=dist, accepted=r.accepted,
                                 plan_changed=bool(changed), error=r.error[:400]))
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", metavar="REV", help="export with this commit's exporters instead")
    # the spread is GPU plans; MaxText's TPU spread runs in tests/test_framework_checks_maxtext.py
    ap.add_argument("--targets", nargs="+", default=[t for t in TARGETS if t != "maxtext"], choices=TARGETS)
    ap.add_argument("--plans", nargs="+", default=list(SPREAD), choices=list(SPREAD))
    ap.add_argument("--out", type=Path, help="write the rows as JSON")
    a = ap.parse_args()
    df = check_all(a.plans, a.targets, a.before)
    with pd.option_context("display.width", 200, "display.max_colwidth", 90, "display.max_rows", 500):
        print(df.drop(columns=["release"]).to_string(index=False))
    print()
    counts = df.groupby(["target", "version"])["accepted"].agg(["sum", "count"])
    print(counts.rename(columns={"sum": "accepted", "count": "exports"}).to_string())
    print(f"\nall: {int(df.accepted.sum())} of {len(df)} plan x target x version exports accepted"
          + (f" (exporters of {a.before})" if a.before else ""))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"exporters": a.before or "this checkout", "rows": df.to_dict("records")},
                                    indent=1) + "\n")


if __name__ == "__main__":
    main()
