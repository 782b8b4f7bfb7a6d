"""Plan-quality benchmark: does the search agree with the layouts experts chose?

    python -m benchmarks.evals.plan_quality [--moe] [--csv PATH] [--rows] [--out results.csv] [--every K]

For every expressible training row of the published-runs development set, search the same model, hardware,
GPU count, global batch and sequence length (with the row's precision, attention kernel and gradient dtype,
which are properties of the job, not of the layout) and report
  (a) speedup: predicted step time of the published layout / that of the best plan found, and
  (b) percentile: the share of feasible plans predicted faster than the published layout (0% = the published
      layout is the model's best; <= 10% = in the top tenth).
The published layout is ranked against the search whether or not the search's space contains it (e.g.
tp > 1 without sequence parallelism). Rows whose published layout the model says does not fit are marked.
Jobs shared by several rows are searched once.

--moe does the same for the mixture-of-experts development set (benchmarks.evals.published.moe_runs.load_moe_cases): the job
also holds the row's software stack, token dispatcher and expert imbalance, the search folds the experts over
every (ep, etp) itself, layouts name ep and etp, and `in_space` says whether the search enumerates the published
layout (False: ranked from outside the space; see perfmodel.search.space for its rules).

A second ranking ("same features") searches only the published run's recompute mode, ZeRO stage, sequence
parallelism and context parallelism (cp = 1 stays 1), leaving the mesh, interleaving and micro-batch free:
a 2021 Megatron-LM run could not choose selective recompute or a distributed optimizer, so the unrestricted
search partly measures framework progress rather than the expert's choice of mesh.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.evals.devset import DEFAULT_CSV, MOE_CSV
from benchmarks.evals.published.moe_runs import load_moe_cases
from perfmodel import estimate
from perfmodel.calibrate.runs.table import load_cases
from perfmodel.errors import InputError
from perfmodel.spec.plan.layout import Plan
from perfmodel.search.ranking import PLAN_COLUMNS, search
from perfmodel.search.space import Job, Space, enumerate_layouts

# The plan fields a search holds fixed besides gpus, global batch and sequence (search.space.Job): the row's
# software stack among them, so that the published layout and the plans found are priced alike.
JOB_FIELDS = {False: ("precision", "attention", "grad_dtype", "overlap_dp_comm", "stack")}
JOB_FIELDS[True] = JOB_FIELDS[False] + ("moe_dispatcher", "expert_imbalance")
SLOW_S = 120.0  # searches slower than this are listed


@dataclass
class Ranked:
    """What the rows read of one search: its feasible plans' step times (best first), the best plan, and their
    layout columns (`in_space`). The search's own result keeps every column of every feasible plan; kept whole for
    every job of the MoE set, those held ~20 GB of this 24 GB machine."""

    times: np.ndarray
    best: Plan | None
    columns: dict[str, np.ndarray]


def ranked(res, with_columns: bool) -> Ranked:
    """`res` slimmed to what the rows read; the layout columns only where `in_space` reads them (the unrestricted
    search's)."""
    return Ranked(res.columns["step_time_s"].copy(), res.plan(0) if len(res) else None,
                  {k: res.columns[k].copy() for k in PLAN_COLUMNS} if with_columns else {})


def layout(p, moe: bool = False) -> str:
    return (f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp}{f' ep{p.ep} etp{p.etp}' if moe else ''} v{p.vpp} mb{p.micro_batch}"
            f" z{p.zero} {p.recompute}{' sp' if p.sequence_parallel else ''}")


def in_space(c, pub, job: dict, res) -> bool:
    """Whether the unrestricted search enumerates the published plan: among its feasible plans when the plan
    fits, else among every layout it enumerates for the job."""
    p = pub.plan
    if pub.fits_in_memory and not isinstance(res, InputError):
        cols = res.columns
    else:
        try:
            lay = enumerate_layouts(c.model, c.system, Job(gpus=p.gpus, global_batch=p.global_batch,
                                                           seq_len=p.seq_len, **job), Space())
        except InputError:
            return False
        cols = {k: np.broadcast_to(getattr(lay, k), (len(lay),)) for k in PLAN_COLUMNS}
    hit = np.ones(len(cols["tp"]), dtype=bool)
    for k in PLAN_COLUMNS:
        hit &= cols[k] == getattr(p, k)
    return bool(hit.any())


def rank_all(csv: Path, moe: bool = False, every: int = 1) -> pd.DataFrame:
    """Every expressible row ranked (module docstring); with `every` K > 1 the rows of every K-th distinct job only
    (in the order the set first names them), for a run that must be short (CI's)."""
    cache: dict = {}
    seconds: dict = {}
    jobs: dict = {}  # a job's key (the search's, unrestricted) -> its index in order of first appearance

    def searched(c, p, job, space):
        key = (c.model.model_dump_json(), c.system.name, p.gpus, p.global_batch, p.seq_len, *job.values(), str(space))
        if key not in cache:
            t0 = time.perf_counter()
            try:
                cache[key] = ranked(search(c.model, c.system, p.gpus, p.global_batch, p.seq_len, space=space,
                                           **job), with_columns=moe and space is None)
            except InputError as err:
                cache[key] = err
            seconds[key] = time.perf_counter() - t0
        return cache[key], seconds[key]

    out = []
    for c in (load_moe_cases if moe else load_cases)(csv):
        if c.reason:
            continue
        q = c.plan  # the row's job as written, before the estimate resolves it: which job a row is
        key = (c.model.model_dump_json(), c.system.name, q.gpus, q.global_batch, q.seq_len,
               *(getattr(q, k) for k in JOB_FIELDS[moe]))
        if jobs.setdefault(key, len(jobs)) % every:
            continue
        pub = estimate(c.model, c.system, c.plan)
        p = pub.plan
        job = {k: getattr(p, k) for k in JOB_FIELDS[moe]}
        rec = dict(row_id=c.row_id, group=c.group, model=c.model.name[:24], gpus=p.gpus, published=layout(p, moe),
                   published_s=pub.step_time_s, published_fits=pub.fits_in_memory)
        same = {"recompute": [p.recompute], "zero": [p.zero], "sequence_parallel": [p.sequence_parallel]}
        if p.cp == 1:
            same["cp"] = [1]
        for suffix, space in (("", None), ("_same", same)):
            res, secs = searched(c, p, job, space)
            rec[f"search_s{suffix}"] = secs
            if suffix == "" and moe:
                rec["in_space"] = in_space(c, pub, job, res)
            if isinstance(res, InputError):
                rec.update({f"best{suffix}": "(none)", f"note{suffix}": str(res)[:80]})
                continue
            times = res.times
            rec.update({f"best{suffix}": layout(res.best, moe), f"speedup{suffix}": pub.step_time_s / float(times[0]),
                        f"percentile{suffix}": 100.0 * float(np.sum(times < pub.step_time_s * (1 - 1e-9))) / len(times),
                        f"feasible{suffix}": len(times)})
        out.append(rec)
    return pd.DataFrame(out)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    def agg(g):
        return pd.Series({"rows": len(g), "median speedup": g["speedup"].median(), "max speedup": g["speedup"].max(),
                          "median pct": g["percentile"].median(), "in top 10%": int((g["percentile"] <= 10).sum()),
                          "same-features median speedup": g["speedup_same"].median(),
                          "same-features median pct": g["percentile_same"].median(),
                          "same-features in top 10%": int((g["percentile_same"] <= 10).sum()),
                          "published does not fit": int((~g["published_fits"]).sum())})
    rows = {grp: agg(g) for grp, g in df.groupby("group")}
    rows["ALL"] = agg(df)
    return pd.DataFrame(rows).T


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moe", action="store_true", help=f"the mixture-of-experts set ({MOE_CSV.name})")
    ap.add_argument("--csv", type=Path, help=f"default {DEFAULT_CSV.name}, with --moe {MOE_CSV.name}")
    ap.add_argument("--rows", action="store_true", help="print every row, not only those outside the top 10%%")
    ap.add_argument("--out", type=Path, help="write the per-row table as CSV")
    ap.add_argument("--every", type=int, default=1, metavar="K",
                    help="rank the rows of every K-th distinct job only (default 1: all)")
    a = ap.parse_args(argv)
    a.csv = a.csv or (MOE_CSV if a.moe else DEFAULT_CSV)
    t0 = time.perf_counter()
    if a.every < 1:
        ap.error(f"--every {a.every}: valid: a whole number >= 1")
    df = rank_all(a.csv, a.moe, a.every)
    wall = time.perf_counter() - t0
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 500)
    print(f"published runs: {a.csv}" + (f" (the rows of every {a.every}-th distinct job)" if a.every > 1 else ""))
    print(summary(df).to_string(float_format=lambda x: f"{x:.2f}"))
    cols = ["row_id", "model", "gpus", "published", "published_fits", "best", "speedup", "percentile",
            "best_same", "speedup_same", "percentile_same"] + (["in_space"] if a.moe else [])
    if a.rows:
        print(f"\nall rows ({len(df)}):")
        print(df[cols].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    for col, what in (("percentile", "the top 10% of every feasible plan"),
                      ("percentile_same", "the top 10% of plans with the same features")):
        shown = df[(df[col] > 10) | df[col].isna()]
        print(f"\nrows outside {what} ({len(shown)}):")
        print(shown[cols].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    if a.moe:
        slow = df[df["search_s"] > SLOW_S]
        print(f"\nsearches over {SLOW_S:.0f} s ({len(slow)}; rows of one job share its search):")
        if len(slow):
            print(slow[["row_id", "model", "gpus", "search_s", "feasible"]].to_string(index=False,
                                                                                     float_format=lambda x: f"{x:.1f}"))
        print(f"\nwall time {wall:.0f} s")
    if a.out:
        df.to_csv(a.out, index=False)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
