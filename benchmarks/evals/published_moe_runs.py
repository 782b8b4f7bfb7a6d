"""Accuracy benchmark: predict every expressible training run of the MoE development set.

    python -m benchmarks.evals.published_moe_runs [--csv PATH] [--rows] [--draws 20] [--seed 0]

Prints, per model family, per source group (a Megatron-Bridge container's table is one group) and per GPU, and
over the trust-A rows, MAPE and the mean and median signed error of the step time for
  (a) profiles: the hardware specs and the stack profiles, nothing fitted (benchmarks.evals.published.moe_runs maps rows);
  (b) leave-one-container-out (per source group): `calibrate --from-runs`'s fit to every other group's rows
      (published_runs.logo), predicting the held-out group's;
  (c) three-shot: `calibrate --from-runs`'s fit (perfmodel.calibrate.runs.from_runs.fit) to 3 rows of the family (`--draws`
      random draws, fixed `--seed`), predicting the family's other rows: the median over draws of that MAPE.
Then the rows that could not be expressed, with the reason. Nothing here is tuned per row or per source.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.evals.devset import MOE_CSV as DEFAULT_CSV
from benchmarks.evals.published.moe_runs import load_moe_cases
from benchmarks.evals.published.transfer import print_transfer
from benchmarks.evals.published_runs import accuracy_args, generation_coverage, logo, print_intervals, stack_intervals
from benchmarks.evals.published_runs import priced as dense_priced
from benchmarks.evals.published_runs import summary as dense_summary
from benchmarks.evals.published_runs import three_shot as dense_three_shot
from benchmarks.tools.stack_blocks import write_intervals


def family(model: str) -> str:
    return model.replace(" [tokendrop]", "").split(" (")[0]


def priced(csv: Path):
    """published_runs.priced over the MoE rows (published.moe_runs.load_moe_cases), with each row's model family, GPU
    and the share of its predicted step spent in exposed expert-parallel communication."""
    raw = pd.read_csv(csv).set_index("row_id")
    df, parts, idx = dense_priced(csv, load_moe_cases(csv))
    df["family"] = [family(str(raw.loc[r, "model"])) for r in df["row_id"]]
    df["gpu"] = [str(raw.loc[r, "gpu_type"]) for r in df["row_id"]]
    df.loc[idx, "ep_share"] = [e.time_s.ep_comm / e.step_time_s for e in parts.estimates]
    return df, parts, idx


def three_shot(df: pd.DataFrame, parts, idx, key: str, draws: int, seed: int) -> pd.Series:
    """published_runs.three_shot's MAPE (median over draws of 3-row fits') over the groups of column `key`."""
    return dense_three_shot(df.assign(group=df[key]), parts, idx, draws, seed)["MAPE %"]


def summary(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """published_runs.summary over the groups of column `key`."""
    return dense_summary(df.assign(group=df[key]))


def by_container(df: pd.DataFrame) -> pd.DataFrame:
    """Per model family (rows) and source group (columns), (a)'s signed median error in % and the rows priced: what
    the accuracy report judges each container's DeepSeek-V3 rows by."""
    ok = df.dropna(subset=["predicted_s"])
    cells = ok.groupby(["family", "group"])["error"].agg(["median", "size"])
    text = cells.apply(lambda r: f"{100 * r['median']:+.1f} ({int(r['size'])})", axis=1)
    out = text.unstack("group").fillna("")
    return out.rename(columns=lambda g: g.replace("MegatronBridge_perf_summary_", "MB ").replace("MegatronBridge_", "MB "))


def main(argv=None) -> int:
    a = accuracy_args(__doc__, DEFAULT_CSV, argv)
    df, parts, idx = priced(a.csv)
    if a.rows:
        print(df.dropna(subset=["predicted_s"])[["row_id", "family", "gpu", "trust", "layout", "measured_s",
                                                 "predicted_s", "error", "ep_share", "fits"]].to_string(index=False))
    held = logo(df, parts, idx)  # (b): each source group from the fit to the others
    for key in ("family", "group", "gpu"):
        s = summary(df, key)
        if key == "group":
            s["LOCO MAPE %"] = dense_summary(held)["MAPE %"]
        if key == "family":  # each family's rows, each container predicted by the fit to the other containers
            s["LOCO MAPE %"] = dense_summary(held.assign(group=held["row_id"].map(df.set_index("row_id")["family"])))[
                "MAPE %"]
        s["3-shot MAPE %"] = three_shot(df, parts, idx, key, a.draws, a.seed)
        a_only = df[df["trust"] == "A"]
        ia = np.array([i for i in idx if df.loc[i, "trust"] == "A"])
        s.loc["ALL trust A", "3-shot MAPE %"] = float(np.nanmedian(three_shot(a_only, parts.take(np.searchsorted(
            idx, ia)), ia, key, a.draws, a.seed))) if len(ia) else np.nan
        print(f"\n(a) profiles, nothing fitted; {'(b) leave-one-container-out; ' if key in ('group', 'family') else ''}"
              f"(c) three-shot "
              f"calibrated per {key}  [{a.csv.name}]")
        print(s.round(1).to_string())
    print(f"\n(a) per family and container: signed median error % (rows)  [{a.csv.name}]")
    print(by_container(df).to_string())
    print_transfer(df, "(a) and (b) leave-one-container-out", held)
    # what the profiles' moe_interval quotes (hardware_specs/stacks/*.yaml): the trust-A rows, groups weighted once
    bands = stack_intervals(df, "python -m benchmarks.evals.published_moe_runs, trust-A rows", trust="A")
    print_intervals(*bands)
    print("\nleave-one-hardware-generation-out (trust-A rows): each generation's rows inside the intervals built from "
          "the others' (groups weighted once), unwidened and widened where a plan lies outside the runs")
    print(generation_coverage(df, bands[2], trust="A").round(1).to_string())
    print("\nleave-one-stack-release-out (trust-A rows): each release's rows (one container: source x release) inside "
          "the intervals built from the others', unwidened and widened where a plan lies outside the runs")
    print(generation_coverage(df, bands[2], trust="A", by=3).round(1).to_string())
    if a.write_intervals:
        print(f"rewrote the moe_interval blocks of: {', '.join(write_intervals(bands[0], 'moe_interval')) or 'none'}")
    left = df[df["predicted_s"].isna()]
    print(f"\nrows not expressed ({len(left)} of {len(df)} training runs):")
    print(left.groupby("reason").size().rename("rows").to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
