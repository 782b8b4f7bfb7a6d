"""Plan-quality benchmark: does the search agree with the layouts experts chose?

    python benchmarks/plan_quality.py [--csv PATH] [--rows] [--out results.csv]

For every expressible training row of the published-runs development set, search the same model, hardware,
GPU count, global batch and sequence length (with the row's precision, attention kernel and gradient dtype,
which are properties of the job, not of the layout) and report
  (a) speedup: predicted step time of the published layout / that of the best plan found, and
  (b) percentile: the share of feasible plans predicted faster than the published layout (0% = the published
      layout is the model's best; <= 10% = in the top tenth).
The published layout is ranked against the search whether or not the search's space contains it (e.g.
tp > 1 without sequence parallelism). Rows whose published layout the model says does not fit are marked.
Jobs shared by several rows are searched once.

A second ranking ("same features") searches only the published run's recompute mode, ZeRO stage, sequence
parallelism and context parallelism (cp = 1 stays 1), leaving the mesh, interleaving and micro-batch free:
a 2021 Megatron-LM run could not choose selective recompute or a distributed optimizer, so the unrestricted
search partly measures framework progress rather than the expert's choice of mesh.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel import estimate
from devset import DEFAULT_CSV
from perfmodel.errors import InputError
from perfmodel.published import load_cases
from perfmodel.search.layouts import search



def layout(p) -> str:
    return (f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp} v{p.vpp} mb{p.micro_batch} z{p.zero} {p.recompute}"
            f"{' sp' if p.sequence_parallel else ''}")


def rank_all(csv: Path) -> pd.DataFrame:
    cache: dict = {}

    def searched(c, p, space):
        key = (c.model.model_dump_json(), c.system.name, p.gpus, p.global_batch, p.seq_len, p.precision,
               p.attention, p.grad_dtype, p.overlap_dp_comm, str(space))
        if key not in cache:
            try:
                cache[key] = search(c.model, c.system, p.gpus, p.global_batch, p.seq_len, precision=p.precision,
                                    space=space, attention=p.attention, grad_dtype=p.grad_dtype,
                                    overlap_dp_comm=p.overlap_dp_comm)
            except InputError as err:
                cache[key] = err
        return cache[key]

    out = []
    for c in load_cases(csv):
        if c.reason:
            continue
        pub = estimate(c.model, c.system, c.plan)
        p = pub.plan
        rec = dict(row_id=c.row_id, group=c.group, model=c.model.name[:24], gpus=p.gpus, published=layout(p),
                   published_s=pub.step_time_s, published_fits=pub.fits_in_memory)
        same = {"recompute": [p.recompute], "zero": [p.zero], "sequence_parallel": [p.sequence_parallel]}
        if p.cp == 1:
            same["cp"] = [1]
        for suffix, space in (("", None), ("_same", same)):
            res = searched(c, p, space)
            if isinstance(res, InputError):
                rec.update({f"best{suffix}": "(none)", f"note{suffix}": str(res)[:80]})
                continue
            times = res.table["step_time_s"].to_numpy()
            rec.update({f"best{suffix}": layout(res.plan(0)), f"speedup{suffix}": pub.step_time_s / float(times[0]),
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
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--rows", action="store_true", help="print every row, not only those outside the top 10%")
    ap.add_argument("--out", type=Path, help="write the per-row table as CSV")
    a = ap.parse_args(argv)
    df = rank_all(a.csv)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 500)
    print(f"published runs: {a.csv}")
    print(summary(df).to_string(float_format=lambda x: f"{x:.2f}"))
    cols = ["row_id", "model", "gpus", "published", "published_fits", "best", "speedup", "percentile",
            "best_same", "speedup_same", "percentile_same"]
    if a.rows:
        print(f"\nall rows ({len(df)}):")
        print(df[cols].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    for col, what in (("percentile", "the top 10% of every feasible plan"),
                      ("percentile_same", "the top 10% of plans with the same features")):
        shown = df[(df[col] > 10) | df[col].isna()]
        print(f"\nrows outside {what} ({len(shown)}):")
        print(shown[cols].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    if a.out:
        df.to_csv(a.out, index=False)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
