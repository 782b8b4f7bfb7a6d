"""`perfmodel sweep SWEEP.yaml`: a design-space sweep (every point runs the real search of every workload) on this
machine's cores or a Ray cluster, rows streamed to Parquet; `perfmodel sweep report DIR`: its Pareto front, best
points and sensitivities; `perfmodel sweep schema`: the sweep file's JSON schema (docs/sweep.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ...errors import InputError
from ...files import RUNS_DIR
from ..argtypes import integer, path, word


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    sw = sub.add_parser(name, help=help, description=(
        "perfmodel sweep SWEEP.yaml runs a design-space sweep: every point (a base system with the axes' values) "
        "runs the best-plan search of every workload; rows stream to Parquet files under --out, chunk by chunk, and "
        "--resume runs only the chunks not yet finished. perfmodel sweep report DIR prints the Pareto front, the best "
        "point per objective and each axis's sensitivity; perfmodel sweep schema prints the sweep file's JSON schema "
        "(docs/sweep.md)."))
    sw.add_argument("target", metavar="SWEEP.yaml|report|schema", type=path("SWEEP.yaml", "a sweep file"),
                    help="a sweep file to run, or report (with DIR), or schema")
    sw.add_argument("dir", nargs="?", metavar="DIR", type=path("DIR", "a sweep's results folder"),
                    help="report: the results folder (a sweep's --out)")
    engine = sw.add_mutually_exclusive_group()
    engine.add_argument("--workers", type=integer("--workers"), help="local worker processes (default: every core)")
    engine.add_argument("--ray", nargs="?", const=True, metavar="ADDRESS", type=word("--ray", "ray://head:10001"),
                        help="run on a Ray cluster (pip install 'perfmodel[ray]'): ADDRESS, else RAY_ADDRESS, else a "
                             "local Ray instance")
    sw.add_argument("--out", type=path("--out", "a folder"), metavar="DIR",
                    help=f"results folder (default {RUNS_DIR}/sweeps/<name>)")
    sw.add_argument("--resume", action="store_true", help="run only the chunks --out does not hold yet")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.add_argument("--objective", action="append", metavar="NAME",
                    help="report: rank by these objectives instead of the sweep file's (repeat the flag)")
    sw.add_argument("--format", choices=["table", "json", "csv"], default="table",
                    help="report: csv prints every point with its objectives")
    sw.add_argument("--plot", type=path("--plot", "a file ending in .png"), metavar="FILE.png",
                    help="report: draw the Pareto front and the sensitivities")
    return sw


def run(a: argparse.Namespace) -> str:
    if a.target == "schema":
        _only(a, "schema")
        from ...sweep.schema import sweep_json_schema

        return json.dumps(sweep_json_schema(), indent=2)
    if a.target == "report":
        if a.dir is None:
            raise InputError("perfmodel sweep report: give DIR, a sweep's results folder (its --out)")
        _only(a, "report", allowed=("objective", "format", "plot"))
        return report_text(a.dir, a.objective, a.format, a.plot)
    if a.dir is not None:
        raise InputError(f"perfmodel sweep {a.target}: unexpected {a.dir!r}; valid: perfmodel sweep SWEEP.yaml "
                         "[--out DIR], or perfmodel sweep report DIR")
    _only(a, "run", allowed=("workers", "ray", "out", "resume", "quiet", "format"))
    if a.format == "csv":
        raise InputError("perfmodel sweep SWEEP.yaml: --format csv lists a finished sweep's points; valid here: table or "
                         "json (then perfmodel sweep report DIR --format csv)")
    from ...sweep.run import run_sweep
    from ...sweep.schema import load_sweep

    sweep = load_sweep(a.target)
    out = Path(a.out) if a.out else RUNS_DIR / "sweeps" / sweep.name
    try:
        ran = run_sweep(sweep, out, workers=a.workers, ray=a.ray is not None,
                        address=a.ray if isinstance(a.ray, str) else None,
                        resume=a.resume, progress=not a.quiet)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: what finished is in `out`; say how to go on, then stop as main does
        from ...sweep.store import finished

        if (out / "sweep.json").is_file():
            print(f"stopped: {len(finished(out))} chunks finished are kept in {out}; run the same command with "
                  "--resume for the rest", file=sys.stderr)
        raise
    if a.format == "json":
        return ran.model_dump_json(indent=2)
    lines = [f"sweep {ran.name}: {ran.points} points x {ran.workloads} workloads in {ran.chunks} chunks"
             + (f" ({ran.skipped_chunks} finished before)" if ran.skipped_chunks else ""),
             f"ran {ran.rows_run} searches in {ran.seconds:.1f} s on {ran.engine} ({ran.workers} worker"
             f"{'s' if ran.workers > 1 else ''}): {ran.rows_per_s:.1f} searches/s", f"rows: {ran.out}/chunks/*.parquet"]
    if ran.infeasible:
        lines.append("infeasible rows by reason:")
        lines += [f"  {n:6d}  {r}" for r, n in ran.infeasible.items()]
    return "\n".join(lines + ["", report_text(out, None, "table", None)])


def _only(a, mode: str, allowed: tuple[str, ...] = ()) -> None:
    """Refuse flags that do nothing in this mode."""
    defaults = {"workers": None, "ray": None, "out": None, "resume": False, "quiet": False, "objective": None,
                "format": "table", "plot": None}
    extra = [k for k, v in defaults.items() if k not in allowed and getattr(a, k) != v]
    if extra:
        flag = "--" + extra[0]
        raise InputError(f"perfmodel sweep {mode}: {flag} does nothing here; valid with {mode}: "
                         + (", ".join("--" + k for k in allowed) or "no flags"))


def report_text(out, objectives, fmt: str, plot) -> str:
    from ...sweep.analysis import analyse

    if plot is not None:
        from ...plots.canvas import check_plot_path

        check_plot_path(plot)
    r, pts, _ = analyse(out, objectives)
    if plot is not None:
        from ...plots.sweep import sweep_figure

        sweep_figure(r, pts, plot)
        print(f"wrote {plot}", file=sys.stderr)
    if fmt == "json":
        return r.model_dump_json(indent=2)
    if fmt == "csv":
        return pts.to_csv(index=False).rstrip()
    return _table(r)


def _table(r) -> str:
    import pandas as pd

    from ...sweep.schema import OBJECTIVES

    head = (f"sweep {r.name}: {r.feasible_points} of {r.points} points feasible ({r.rows} of {r.expected_rows} rows "
            f"finished); objectives: " + ", ".join(f"{o} ({r.directions[o]}, {OBJECTIVES[o][1]})" for o in r.objectives))
    fmt = {"float_format": lambda v: f"{v:.4g}"}
    parts = [head, "", f"Pareto front ({len(r.pareto)} points):" + ("" if not r.missing else " (left off: " + ", ".join(
        f"{n} without {o}" for o, n in r.missing.items()) + ")"),
             pd.DataFrame(r.pareto).to_string(index=False, **fmt) if r.pareto else "  (no feasible point)", "",
             "best point per objective:"]
    if r.best:
        parts.append(pd.DataFrame([{"objective": o, **b} for o, b in r.best.items()]).to_string(index=False, **fmt))
    if r.sensitivity:
        sens = pd.DataFrame([s.model_dump() for s in r.sensitivity]).astype({"elasticity": float, "sobol_first": float})
        parts += ["", "sensitivity (on log objective; elasticity: % per % of the axis; sobol_first: share of the "
                  "variance the axis explains alone):",
                  sens.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.3f}")]
    if r.infeasible:
        parts += ["", "infeasible rows by workload and reason:"] + [f"  {n:6d}  {k}" for k, n in r.infeasible.items()]
    return "\n".join(parts)
