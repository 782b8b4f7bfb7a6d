"""The two constants the power model leaves to the development data, fitted on the dense dev set's Hopper rows: the
share of the tables' rates a step keeps besides its clock (`Efficiency.sustained_fraction` of a part with a power
model) and what collectives draw (`PowerModel.comm_w`, as a share of the way from idle_w to memory_w).

    python -m benchmarks.tools.power_fit [--csv ../shared/data/published_runs_dev.csv] [--grid 0.95:1.00:0.01]
                                   [--comm 0,0.5,1]                                    (about 3 minutes)

A part with a power model (spec.hardware.power_model.PowerModel) prices a step's compute at sustained_fraction of its kernel
tables at the tables' clock, then at the clock the step's own mix sustains under its limit (cost.power). The clock is
the power model's (measured and cited draws); what a step keeps besides, kernels interleaved with cold caches and
short waits between them, is not measured apart on any lent GPU: it is the first constant. What a device draws
while it only communicates is not measured either (AIConfigurator times no collective's power): the second. Both
are fitted on every expressible dense dev row of a part with a power model (DGX H100: MLPerf v3.0/v3.1, MosaicML,
NeMo launcher), minimising their MAPE over a grid, and checked leave-one-group-out: each source group predicted
with the constants fitted to the others. The same constants are carried to the Blackwell parts (not measured
there). Prints the grid's MAPE, the fit, and the held-out table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.evals.devset import DEFAULT_CSV
from perfmodel.calibrate.runs.from_runs import NEUTRAL, price
from perfmodel.calibrate.runs.table import load_cases
from perfmodel.errors import InputError


def powered_cases(csv: Path) -> list:
    """The expressible rows on a part with a power model."""
    return [c for c in load_cases(csv) if not c.reason and c.system.accelerator.power is not None]


def with_constants(system, fraction: float, comm_share: float | None = None):
    """`system` with sustained_fraction `fraction` and, where given, its power model's comm_w at `comm_share` of the way
    from idle_w to memory_w."""
    eff = system.efficiency.model_copy(update={"sustained_fraction": fraction})
    acc = system.accelerator
    if comm_share is not None and acc.power is not None:
        pm = acc.power
        acc = acc.model_copy(update={"power": pm.model_copy(update={
            "comm_w": pm.idle_w + comm_share * (pm.memory_w - pm.idle_w)})})
    return system.model_copy(update={"efficiency": eff, "accelerator": acc})


def errors_at(cases: list, fraction: float, comm_share: float | None = None) -> pd.DataFrame:
    """Each case's predicted / measured - 1 with its system's constants set (`with_constants`)."""
    rows = []
    for c in cases:
        c2 = c.__class__(**{**c.__dict__, "system": with_constants(c.system, fraction, comm_share)})
        try:
            pred = float(price([c2]).predict(NEUTRAL)[0])
        except InputError:
            continue
        rows.append({"row_id": c.row_id, "group": c.group, "error": pred / c.measured_s - 1})
    return pd.DataFrame(rows)


def best(table: dict, mask=None):
    """The grid's (fraction, comm share) of least MAPE over the rows in `mask` (all where None)."""
    mape = {k: (e if mask is None else e[mask(e)])["error"].abs().mean() for k, e in table.items()}
    return min(mape, key=mape.get)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--grid", default="0.95:1.00:0.01", help="low:high:step of the fractions tried")
    ap.add_argument("--comm", default="0,0.5,1", help="comm shares tried (comm_w from idle_w, 0, to memory_w, 1)")
    a = ap.parse_args(argv)
    low, high, step = (float(x) for x in a.grid.split(":"))
    shares = [float(x) for x in a.comm.split(",")]
    cases = powered_cases(a.csv)
    table = {(round(f, 4), c): errors_at(cases, f, c) for f in np.arange(low, high + step / 2, step) for c in shares}
    print(f"{len(cases)} rows on parts with a power model ({a.csv.name}); MAPE % by sustained_fraction (rows) and "
          f"comm share (columns)")
    grid = pd.Series({k: 100 * e["error"].abs().mean() for k, e in table.items()}).unstack()
    print(grid.to_string(float_format=lambda x: f"{x:.2f}"))
    fit = best(table)
    e = table[fit]["error"]
    print(f"\nfitted: sustained_fraction {fit[0]:g}, comm share {fit[1]:g} (least MAPE over the grid): MAPE "
          f"{100 * e.abs().mean():.2f}%, median {100 * e.median():+.2f}%")
    held = []
    for g in sorted(next(iter(table.values()))["group"].unique()):
        k = best(table, lambda e, g=g: e["group"] != g)
        e = table[k][table[k]["group"] == g]["error"]
        held.append({"group": g, "rows": len(e), "fraction fitted to the others": k[0], "comm share": k[1],
                     "MAPE %": 100 * e.abs().mean(), "median err %": 100 * e.median()})
    held = pd.DataFrame(held)
    print("\nleave-one-group-out (each group priced with the constants fitted to the others):")
    print(held.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    pooled = pd.concat([table[(r["fraction fitted to the others"], r["comm share"])]
                        [lambda d, g=r["group"]: d["group"] == g] for _, r in held.iterrows()])
    print(f"held-out MAPE over all rows: {100 * pooled['error'].abs().mean():.2f}%; in-sample: "
          f"{100 * table[fit]['error'].abs().mean():.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
