"""Are the power model's constants right for the rows of their own parts? Every dense and MoE dev row on a part with a
power model (DGX H100, DGX B200), by GPU family, stack release and precision: the signed median error with the
shipped constants, with the power model taken out (the step priced at the kernel tables' clock, as a part without
one), and with the measured GEMM loop's draw (compute_w) 10% lower and higher. A constant that moves a cell's
signed median outside +-3% where the model without it is inside is wrong, whatever the loop said.

    python -m benchmarks.tools.power_check          (about 2 minutes; output: benchmarks/results/power_check.txt)

Nothing is fitted here: the columns are what-ifs of one constant each, on the rows the constants price.
"""

from __future__ import annotations

import signal
import sys

import numpy as np
import pandas as pd

from benchmarks.evals.devset import DEFAULT_CSV, MOE_CSV
from benchmarks.evals.published.moe_runs import load_moe_cases
from benchmarks.evals.published.transfer import family
from perfmodel.calibrate.runs.from_runs import NEUTRAL, price
from perfmodel.calibrate.runs.table import load_cases
from perfmodel.errors import InputError
from perfmodel.spec.stack.release import pinned

BAND = 3.0  # % : the check's band on a cell's signed median


def variant(system, what: str):
    """`system` with its power model as shipped ('shipped'), taken out ('no power model'), or its compute_w scaled
    ('compute_w -10%' / '+10%')."""
    acc = system.accelerator
    if what == "shipped":
        return system
    if what == "no power model":
        return system.model_copy(update={"accelerator": acc.model_copy(update={"power": None})})
    scale = 0.9 if "-" in what else 1.1
    pm = acc.power
    return system.model_copy(update={"accelerator": acc.model_copy(update={"power": pm.model_copy(
        update={"compute_w": pm.compute_w * scale})})})


VARIANTS = ("shipped", "no power model", "compute_w -10%", "compute_w +10%")


def errors(cases: list) -> pd.DataFrame:
    """Per expressible case on a part with a power model: family, release, precision and predicted / measured - 1
    under each of VARIANTS."""
    rows = []
    for c in cases:
        if c.reason or c.system.accelerator.power is None:
            continue
        row = {"row_id": c.row_id, "family": family(c.system.accelerator.name), "release": pinned(c.plan.stack),
               "precision": c.plan.precision}
        for v in VARIANTS:
            c2 = c.__class__(**{**c.__dict__, "system": variant(c.system, v)})
            try:
                row[v] = float(price([c2]).predict(NEUTRAL)[0]) / c.measured_s - 1
            except InputError:
                row[v] = np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def table(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per value of `keys`: rows, each variant's signed median % and whether the shipped one lies within +-BAND."""
    def agg(g):
        out = {"rows": len(g)} | {f"{v} %": 100 * g[v].median() for v in VARIANTS}
        return pd.Series(out | {f"shipped within +-{BAND:g}%": "yes" if abs(out["shipped %"]) <= BAND else "NO"})
    t = df.groupby(keys).apply(agg, include_groups=False)
    t.loc[("ALL",) * len(keys) if len(keys) > 1 else "ALL", :] = agg(df)
    t["rows"] = t["rows"].astype(int)
    return t


def main() -> int:
    pd.set_option("display.width", 250)
    dense, moe = errors(load_cases(DEFAULT_CSV)), errors(load_moe_cases(MOE_CSV))
    fmt = lambda x: f"{x:+.1f}"  # noqa: E731
    for name, df in (("dense dev set", dense), ("MoE dev set", moe)):
        print(f"\n{name}: rows on parts with a power model, signed median of predicted / measured - 1 (%)")
        print(table(df, ["family", "precision"]).to_string(float_format=fmt))
        print(table(df, ["family", "release", "precision"]).to_string(float_format=fmt))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
