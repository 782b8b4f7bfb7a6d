"""The clocks the power model gives: the GEMM loop per part, and the dense and MoE dev sets' steps by GPU family.

    python -m benchmarks.evals.power_clock

1. Each part with a power model (spec.hardware.power_model.PowerModel): the clock a bf16 GEMM looping alone sustains
   (cost.power.loop_clock) against the one measurement, the lent H200's 654 / 806 TFLOP/s = 0.811
   (benchmarks/results/device/sustained_h200_8192.json).
2. The dense dev set (../shared/data/published_runs_dev.csv) and the MoE dev set by GPU family and source group:
   rows, the median clock of the step's compute, MAPE and signed median of the step time (predicted / measured - 1).
3. The SimuMax v1.2 B200 validation rows of the MoE dev set (layer-truncated DeepSeek proxies,
   published.memory_peaks builds them): clock and error per row. Nothing here is fitted; the one fitted constant,
   sustained_fraction, has its own benchmark (benchmarks/tools/power_fit.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.evals import published_runs
from benchmarks.evals.devset import DEFAULT_CSV, MOE_CSV
from benchmarks.evals.published.memory_peaks import SIMUMAX_GROUP, moe_case
from benchmarks.evals.published.moe_runs import load_moe_cases
from perfmodel import estimate, load_hardware
from perfmodel.cost.power import loop_clock

MEASURED_LOOP = 654 / 806  # the lent H200's bf16 8192^3 loop over its table rate
SYSTEMS = ("dgx-h100", "dgx-h200", "dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72", "dgx-a100-80gb")


def loops() -> pd.DataFrame:
    rows = []
    for name in SYSTEMS:
        pm = load_hardware(name).accelerator.power
        rows.append({"system": name, "limit W": pm.limit_w if pm else np.nan, "idle W": pm.idle_w if pm else np.nan,
                     "memory W": pm.memory_w if pm else np.nan, "compute W": pm.compute_w if pm else np.nan,
                     "loop clock": loop_clock(pm) if pm else np.nan,
                     "measured": MEASURED_LOOP if name == "dgx-h200" else np.nan,
                     "sustained_fraction": load_hardware(name).efficiency.sustained_fraction})
    return pd.DataFrame(rows)


def priced(csv, cases=None) -> pd.DataFrame:
    """published_runs.priced's expressible rows (the benchmarks' own pricing) with each one's clock and GPU family."""
    df, parts, idx = published_runs.priced(csv, cases)
    df.loc[idx, "clock"] = [e.clock.clock if e.clock else np.nan for e in parts.estimates]
    out = df.loc[idx].rename(columns={"hardware": "system", "generation": "family"})
    return out[["row_id", "group", "system", "family", "clock", "error"]]


def table(df: pd.DataFrame, keys) -> pd.DataFrame:
    return df.groupby(keys).agg(rows=("error", "size"), clock=("clock", "median"),
                                mape=("error", lambda e: 100 * e.abs().mean()),
                                median_err=("error", lambda e: 100 * e.median()))


def simumax() -> pd.DataFrame:
    raw = pd.read_csv(MOE_CSV)
    rows = []
    for _, r in raw[raw["source_group"] == SIMUMAX_GROUP].iterrows():
        c = moe_case(r)
        if c.reason:
            continue
        e = estimate(c.model, c.system, c.plan)
        rows.append({"row_id": r["row_id"], "model": c.model.name, "layout": f"pp{c.plan.pp} ep{c.plan.ep} "
                     f"gb{c.plan.global_batch}", "measured s": float(r["iter_time_s"]), "predicted s": e.step_time_s,
                     "clock": e.clock.clock if e.clock else np.nan,
                     "error %": 100 * (e.step_time_s / float(r["iter_time_s"]) - 1)})
    return pd.DataFrame(rows)


def main() -> int:
    pd.set_option("display.width", 200)
    fmt = lambda x: f"{x:.3f}"  # noqa: E731
    print("1. a bf16 GEMM looping alone: the clock under each part's limit")
    print(loops().to_string(index=False, float_format=fmt))
    dense, moe = priced(DEFAULT_CSV), priced(MOE_CSV, load_moe_cases(MOE_CSV))
    for name, df in (("dense", dense), ("MoE", moe)):
        print(f"\n2. {name} dev set by GPU family (step time: MAPE %, median signed error %, median clock)")
        print(table(df, "family").to_string(float_format=fmt))
        print(table(df, ["system", "group"]).to_string(float_format=fmt))
        print(f"ALL: {len(df)} rows, MAPE {100 * df['error'].abs().mean():.2f}%, median {100 * df['error'].median():+.2f}%")
    s = simumax()
    print(f"\n3. SimuMax v1.2 B200 validation rows ({len(s)} in ../shared/data): MAPE {s['error %'].abs().mean():.1f}%, "
          f"median {s['error %'].median():+.1f}%")
    print(s.to_string(index=False, float_format=fmt))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
