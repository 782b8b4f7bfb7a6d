"""Accuracy benchmark: predict every expressible training run of the published-runs development set.

    python benchmarks/published_runs.py [--csv PATH] [--rows] [--out results.csv]

Prints, per source group and overall (and over the trust-A rows): rows, expressible rows, MAPE of step time,
max |error|, and the rows that could not be expressed with the reason. Efficiency parameters come from the
hardware specs only; nothing here is tuned per row or per source.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import pandas as pd

from perfmodel import estimate
from devset import DEFAULT_CSV
from perfmodel.errors import InputError
from perfmodel.published import load_cases



def predict_all(csv: Path) -> pd.DataFrame:
    out = []
    for c in load_cases(csv):
        rec = dict(row_id=c.row_id, group=c.group, trust=c.trust, measured_s=c.measured_s, predicted_s=None,
                   reason=c.reason)
        if not c.reason:
            try:
                e = estimate(c.model, c.system, c.plan)
                rec.update(predicted_s=e.step_time_s, mfu=e.mfu, fits=e.fits_in_memory,
                           layout=f"tp{c.plan.tp} pp{c.plan.pp} dp{c.plan.dp} cp{c.plan.cp} v{c.plan.vpp} "
                                  f"mb{c.plan.micro_batch} gb{c.plan.global_batch} s{c.plan.seq_len} "
                                  f"z{c.plan.zero} {c.plan.recompute} {c.plan.precision}{' sp' if c.plan.sequence_parallel else ''}",
                           model=c.model.name[:28], hardware=c.system.name)
            except InputError as err:
                rec["reason"] = f"estimate: {err}"
        out.append(rec)
    df = pd.DataFrame(out)
    df["error"] = df["predicted_s"].astype(float) / df["measured_s"] - 1
    return df


def summary(df: pd.DataFrame) -> pd.DataFrame:
    def agg(g: pd.DataFrame) -> pd.Series:
        ok = g.dropna(subset=["predicted_s"])
        return pd.Series({"rows": len(g), "expressible": len(ok),
                          "MAPE %": 100 * ok["error"].abs().mean() if len(ok) else float("nan"),
                          "median APE %": 100 * ok["error"].abs().median() if len(ok) else float("nan"),
                          "max |err| %": 100 * ok["error"].abs().max() if len(ok) else float("nan"),
                          "mean err %": 100 * ok["error"].mean() if len(ok) else float("nan")})
    rows = {grp: agg(g) for grp, g in df.groupby("group")}
    rows["ALL"] = agg(df)
    rows["ALL trust A"] = agg(df[df["trust"] == "A"])
    return pd.DataFrame(rows).T


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--rows", action="store_true", help="also print every row")
    ap.add_argument("--out", type=Path, help="write the per-row table as CSV")
    a = ap.parse_args(argv)
    df = predict_all(a.csv)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    pd.set_option("display.max_colwidth", 90)
    print(f"published runs: {a.csv}")
    print(summary(df).to_string(float_format=lambda x: f"{x:.1f}"))
    bad = df[df["predicted_s"].isna()]
    if len(bad):
        print(f"\nnot expressible ({len(bad)} rows):")
        for reason, g in bad.groupby("reason"):
            print(f"  {len(g):3d}  {reason}  [{', '.join(g['row_id'][:6])}{' ...' if len(g) > 6 else ''}]")
    if a.rows:
        ok = df.dropna(subset=["predicted_s"])
        cols = ["row_id", "group", "trust", "model", "hardware", "layout", "measured_s", "predicted_s", "error", "fits"]
        print("\n" + ok[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if a.out:
        df.to_csv(a.out, index=False)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into `head`
    sys.exit(main())
