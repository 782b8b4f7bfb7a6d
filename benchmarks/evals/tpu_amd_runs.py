"""Accuracy benchmark: predict every run of the TPU and AMD development set (tpu_amd_runs_dev.csv).

    python -m benchmarks.evals.tpu_amd_runs [--data PATH] [--csv OUT]

Rows are mapped to (model, system, plan, measured step time) by benchmarks.evals.published.tpu_amd_runs and priced as
benchmarks/evals/published_runs.py prices its rows (published_runs.priced: perfmodel.calibrate.runs.from_runs.price, each
system's uncalibrated hardware spec and the row's stack profile, nothing fitted). Prints one line per row (id,
accelerator, model, layout, measured and predicted seconds per step, error = predicted / measured - 1, memory
verdict), then per accelerator and per source group: rows, rows expressed, expressed rows said not to fit (verdict
"does not fit"), MAPE and signed median error over the expressed rows, and MAPE with every row not expressed counted
as 100%; then the rows not expressed, by reason. `--data` is the development set (default: the shared copy, else
benchmarks/data/, as benchmarks/evals/devset.py finds the others); `--csv OUT` writes the per-row table.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.evals.devset import TPU_AMD_CSV as DEFAULT_DATA
from benchmarks.evals.published.tpu_amd_runs import load_tpu_amd_cases
from benchmarks.evals.published.transfer import print_transfer
from benchmarks.evals.published_runs import layout, priced


def per_row(data: Path) -> pd.DataFrame:
    """One row per CSV row: row_id, accelerator, group, model, layout, measured_s, predicted_s, error, verdict,
    reason, note."""
    cases = load_tpu_amd_cases(data)
    raw = pd.read_csv(data).set_index("row_id")
    df, parts, idx = priced(data, cases)
    df["accelerator"] = [c.accelerator for c in cases]
    df["model"] = [str(raw.loc[r, "model"]).split(" (")[0][:28] for r in df["row_id"]]
    df["layout"] = ""
    df.loc[idx, "layout"] = [layout(cases[i].plan) for i in idx]
    df["verdict"] = df.get("verdict", pd.Series(index=df.index, dtype=object))
    df["note"] = [c.note for c in cases]
    return df[["row_id", "accelerator", "group", "trust", "model", "layout", "measured_s", "predicted_s", "error",
               "verdict", "reason", "note", "release", "gpu_family", "precision"]]


def summary(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """Per value of `key` and overall: rows, expressed, said not to fit, MAPE % and signed median % over the
    expressed rows, MAPE % with each row not expressed counted as 100%."""
    def agg(g: pd.DataFrame) -> pd.Series:
        e = g["error"].dropna()
        return pd.Series({"rows": len(g), "expressed": len(e),
                          "not fit": int((g["verdict"] == "does not fit").sum()),
                          "MAPE %": 100 * e.abs().mean() if len(e) else np.nan,
                          "signed median %": 100 * e.median() if len(e) else np.nan,
                          "MAPE % (unexpressed = 100)": 100 * (e.abs().sum() + len(g) - len(e)) / len(g)})
    rows = {k: agg(g) for k, g in df.groupby(key, sort=True)}
    rows["ALL"] = agg(df)
    out = pd.DataFrame(rows).T
    for c in ("rows", "expressed", "not fit"):
        out[c] = out[c].astype(int)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA,
                    help=f"the development set (default: {DEFAULT_DATA.name}, the shared copy or benchmarks/data/)")
    ap.add_argument("--csv", type=Path, metavar="OUT", help="write the per-row table as CSV")
    a = ap.parse_args(argv)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 500)
    pd.set_option("display.max_colwidth", 90)
    df = per_row(a.data)
    print(f"TPU and AMD runs: {a.data.name} (stack profiles and uncalibrated specs, nothing fitted)")
    table = df[["row_id", "accelerator", "model", "layout", "measured_s", "predicted_s", "error", "verdict"]].copy()
    table["error"] = 100 * table["error"]
    table = table.rename(columns={"measured_s": "measured s", "predicted_s": "predicted s", "error": "error %",
                                  "verdict": "fits"})
    print(table.to_string(index=False, na_rep="-", float_format=lambda x: f"{x:.2f}"))
    fmt = lambda x: f"{x:.1f}"  # noqa: E731
    for key, title in (("accelerator", "accelerator"), ("group", "source group")):
        print(f"\nby {title} (error = predicted / measured - 1)")
        print(summary(df, key).to_string(float_format=fmt, na_rep="-"))
    print_transfer(df, "TPU and AMD runs")
    ok = df.dropna(subset=["predicted_s"])
    print(f"\nexpressed rows said not to fit: {int((ok['verdict'] == 'does not fit').sum())} of {len(ok)}")
    left = df[df["predicted_s"].isna()]
    print(f"rows not expressed: {len(left)} of {len(df)}")
    for reason, g in left.groupby("reason", sort=False):
        ids = list(g["row_id"])
        print(f"  {len(g):3d}  {reason}  [{', '.join(ids[:6])}{' ...' if len(ids) > 6 else ''}]")
    if a.csv:
        df.to_csv(a.csv, index=False)
        print(f"wrote {a.csv}")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into `head`
    sys.exit(main())
