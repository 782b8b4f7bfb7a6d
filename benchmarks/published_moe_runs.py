"""Accuracy benchmark: predict every expressible training run of the MoE development set.

    python benchmarks/published_moe_runs.py [--csv PATH] [--rows] [--draws 20] [--seed 0]

Prints, per model family and per source group, and over the trust-A rows, MAPE and mean signed error of the
step time for
  (a) profiles: the hardware specs and the stack profiles, nothing fitted (perfmodel.published_moe maps rows);
  (c) three-shot: `calibrate --from-runs`'s fit (perfmodel.calibrate.runs.fit) to 3 rows of the family (`--draws`
      random draws, fixed `--seed`), predicting the family's other rows: the median over draws of that MAPE.
Then the rows that could not be expressed, with the reason. Nothing here is tuned per row or per source.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.calibrate.runs import price
from published_runs import three_shot as dense_three_shot
from perfmodel.errors import InputError
from perfmodel.published_moe import load_moe_cases

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "data" / "published_moe_runs_dev.csv"
DEFAULT_CSV = SHARED if SHARED.exists() else HERE / "data" / "published_moe_runs_dev.csv"
NEUTRAL = (1.0, 1.0, 0.0)


def family(model: str) -> str:
    return model.replace(" [tokendrop]", "").split(" (")[0]


def priced(csv: Path):
    raw = pd.read_csv(csv).set_index("row_id")
    cases = load_moe_cases(csv)
    for c in cases:
        if not c.reason:
            try:
                price([c])
            except InputError as err:
                c.reason = f"estimate: {err}"
    ok = [c for c in cases if not c.reason]
    parts = price(ok)
    df = pd.DataFrame([dict(row_id=c.row_id, group=c.group, trust=c.trust, measured_s=c.measured_s, reason=c.reason,
                            family=family(str(raw.loc[c.row_id, "model"])), gpu=str(raw.loc[c.row_id, "gpu_type"]))
                       for c in cases])
    idx = np.array([i for i, c in enumerate(cases) if not c.reason])
    df["predicted_s"] = np.nan
    df.loc[idx, "predicted_s"] = parts.predict(NEUTRAL)
    df.loc[idx, "layout"] = [f"tp{c.plan.tp} pp{c.plan.pp} ep{c.plan.ep} dp{c.plan.dp} v{c.plan.vpp} "
                             f"mb{c.plan.micro_batch} gb{c.plan.global_batch} {c.plan.precision} "
                             f"{c.plan.moe_dispatcher} z{c.plan.zero}" for c in ok]
    df.loc[idx, "ep_share"] = [e.time_s.ep_comm / e.step_time_s for e in parts.estimates]
    df.loc[idx, "fits"] = [e.fits_in_memory for e in parts.estimates]
    df["error"] = df["predicted_s"] / df["measured_s"] - 1
    return df, parts, idx


def three_shot(df: pd.DataFrame, parts, idx, key: str, draws: int, seed: int) -> pd.Series:
    """published_runs.three_shot (median over draws of 3-row fits' MAPE) over the groups of column `key`."""
    return dense_three_shot(df.assign(group=df[key]), parts, idx, draws, seed)


def summary(df: pd.DataFrame, key: str) -> pd.DataFrame:
    def agg(g: pd.DataFrame) -> pd.Series:
        ok = g.dropna(subset=["predicted_s"])
        e = ok["error"]
        return pd.Series({"rows": len(g), "expressible": len(ok),
                          "MAPE %": 100 * e.abs().mean() if len(ok) else np.nan,
                          "max |err| %": 100 * e.abs().max() if len(ok) else np.nan,
                          "mean err %": 100 * e.mean() if len(ok) else np.nan})
    rows = {k: agg(g) for k, g in df.groupby(key)}
    rows["ALL"] = agg(df)
    rows["ALL trust A"] = agg(df[df["trust"] == "A"])
    return pd.DataFrame(rows).T


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    df, parts, idx = priced(a.csv)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    pd.set_option("display.max_colwidth", 90)
    if a.rows:
        print(df.dropna(subset=["predicted_s"])[["row_id", "family", "gpu", "trust", "layout", "measured_s",
                                                 "predicted_s", "error", "ep_share", "fits"]].to_string(index=False))
    for key in ("family", "group"):
        s = summary(df, key)
        ts = df.loc[idx].copy()
        s["3-shot MAPE %"] = three_shot(df, parts, idx, key, a.draws, a.seed)
        a_only = df[df["trust"] == "A"]
        ia = np.array([i for i in idx if df.loc[i, "trust"] == "A"])
        s.loc["ALL trust A", "3-shot MAPE %"] = float(np.nanmedian(three_shot(a_only, parts.take(np.searchsorted(
            idx, ia)), ia, key, a.draws, a.seed))) if len(ia) else np.nan
        print(f"\n(a) profiles, nothing fitted; (c) three-shot calibrated per {key}  [{a.csv.name}]")
        print(s.round(1).to_string())
        del ts
    left = df[df["predicted_s"].isna()]
    print(f"\nrows not expressed ({len(left)} of {len(df)} training runs):")
    print(left.groupby("reason").size().rename("rows").to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
