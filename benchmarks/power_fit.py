"""The one constant the power model leaves to the development data: the share of the tables' rates a step keeps at
full clock (`Efficiency.sustained_fraction` of a part with a power model), fitted on the dense dev set's Hopper rows.

    python benchmarks/power_fit.py [--csv ../shared/data/published_runs_dev.csv] [--grid 0.90:1.00:0.01]

A part with a power model (spec.power_model.PowerModel) prices a step's compute at sustained_fraction of its kernel
tables at the tables' clock, then at the clock the step's own mix sustains under its limit (cost.power). The clock is
the power model's (measured and cited draws); what a step keeps besides, kernels interleaved with cold caches and
short waits between them, is not measured apart on any lent GPU: it is this constant. It is fitted on every
expressible dense dev row of a part with a power model (DGX H100: MLPerf v3.0/v3.1, MosaicML, NeMo launcher),
minimising their MAPE over a grid, and checked leave-one-group-out: each source group predicted with the constant
fitted to the others. The same constant is carried to the Blackwell parts (the same kind of loss, not measured
there). Prints the grid's MAPE and signed median, the fit, and the held-out table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from devset import DEFAULT_CSV  # noqa: E402

from perfmodel.calibrate.from_runs import NEUTRAL, price  # noqa: E402
from perfmodel.errors import InputError  # noqa: E402
from perfmodel.published.runs import load_cases  # noqa: E402


def powered_cases(csv: Path) -> list:
    """The expressible rows on a part with a power model."""
    return [c for c in load_cases(csv) if not c.reason and c.system.accelerator.power is not None]


def errors_at(cases: list, fraction: float) -> pd.DataFrame:
    """Each case's predicted / measured - 1 with its system's sustained_fraction set to `fraction`."""
    rows = []
    for c in cases:
        eff = c.system.efficiency.model_copy(update={"sustained_fraction": fraction})
        c2 = c.__class__(**{**c.__dict__, "system": c.system.model_copy(update={"efficiency": eff})})
        try:
            pred = float(price([c2]).predict(NEUTRAL)[0])
        except InputError:
            continue
        rows.append({"row_id": c.row_id, "group": c.group, "error": pred / c.measured_s - 1})
    return pd.DataFrame(rows)


def best(table: dict[float, pd.DataFrame], mask=None) -> float:
    """The grid's fraction of least MAPE over the rows in `mask` (all where None)."""
    mape = {f: (e if mask is None else e[mask(e)])["error"].abs().mean() for f, e in table.items()}
    return min(mape, key=mape.get)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--grid", default="0.90:1.00:0.01", help="low:high:step of the fractions tried")
    a = ap.parse_args(argv)
    low, high, step = (float(x) for x in a.grid.split(":"))
    cases = powered_cases(a.csv)
    table = {round(f, 4): errors_at(cases, f) for f in np.arange(low, high + step / 2, step)}
    print(f"{len(cases)} rows on parts with a power model ({a.csv.name})")
    print(pd.DataFrame({f: {"MAPE %": 100 * e["error"].abs().mean(), "median err %": 100 * e["error"].median()}
                        for f, e in table.items()}).T.to_string(float_format=lambda x: f"{x:.2f}"))
    fit = best(table)
    print(f"\nfitted sustained_fraction: {fit:g} (least MAPE over the grid)")
    held = []
    for g in sorted(next(iter(table.values()))["group"].unique()):
        f = best(table, lambda e, g=g: e["group"] != g)
        e = table[f][table[f]["group"] == g]["error"]
        held.append({"group": g, "rows": len(e), "fitted to the others": f, "MAPE %": 100 * e.abs().mean(),
                     "median err %": 100 * e.median()})
    held = pd.DataFrame(held)
    print("\nleave-one-group-out (each group priced with the fraction fitted to the others):")
    print(held.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    pooled = pd.concat([table[r["fitted to the others"]][table[r["fitted to the others"]]["group"] == r["group"]]
                        for _, r in held.iterrows()])
    print(f"held-out MAPE over all rows: {100 * pooled['error'].abs().mean():.2f}%; in-sample at {fit:g}: "
          f"{100 * table[fit]['error'].abs().mean():.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
