"""Fit verdicts against runs that ran: every row of every development set, and every layout the frameworks publish
as running (the fit labels), is a plan that fits, so each "does not fit" is a false verdict.

    python benchmarks/fit_verdicts.py [--rows]

Sets: dense (published_runs_dev.csv, training runs), small-scale (small_scale_runs_dev.csv), MoE
(published_moe_runs_dev.csv, training runs), TPU/AMD (tpu_amd_runs_dev.csv), measured memory (measured_memory_dev.csv
and the MoE rows with a measured peak), and the fit labels (tests/fixtures/fit_labels: published recipes read
through `perfmodel import`; their sources are listed at the end). Each expressible row is priced from its memory
alone (`cost.memory.fit.plan_fit`, what `perfmodel.estimate` reports without timing the step; --check prices the full
estimate too and stops where they differ) and given its verdict (cost.memory.fit.memory_verdict: fits, tight when the device's room lies
inside the band of the reserved estimate, does not fit when even the band's lower end is past it).

Prints per set: rows, expressible, fits / tight / does not fit, the share said not to fit and the tight share; then
every row said not to fit (its reserved estimate, the band's lower end, the room, what it is short by and the part
of memory that decides it); with --rows the tight ones too; then the measured-peak accuracy by view (MAPE, and
leave-one-group-out for the band's coverage), and the label sources. Nothing here is fitted.
"""

from __future__ import annotations

import argparse
import signal
import sys

import numpy as np
import pandas as pd

from devset import DEFAULT_CSV, MOE_CSV, SMALL_CSV, TPU_AMD_CSV
from measured_memory import DENSE_CSV, table
from perfmodel import estimate
from perfmodel.calibrate.runs.memory_band import band_of, held_out_share, residual_rows
from perfmodel.cost.memory.fit import plan_fit
from perfmodel.errors import InputError
from perfmodel.validate.fit_labels import load_fit_labels
from perfmodel.published.memory_peaks import memory_cases
from perfmodel.published.moe_runs import load_moe_cases
from perfmodel.published.runs import load_cases
from perfmodel.published.small_runs import load_small_cases
from perfmodel.published.tpu_amd_runs import load_tpu_amd_cases

GiB = 2**30
PARTS = ("weights", "gradients", "optimizer", "activations", "transient")


def verdicts(name: str, cases, check: bool = False) -> pd.DataFrame:
    """One line per case: set, row_id, group, system, model, stack, verdict ('' where not expressible) and the
    reserved estimate, its band's ends, the room (GiB), the largest part, or the reason it is not expressible. The
    verdict from memory alone (cost.memory.fit.plan_fit, as a search prunes); with `check`, also from the full
    estimate, which must agree."""
    out = []
    for c in cases:
        r = dict(set=name, row_id=c.row_id, group=c.group, reason=c.reason, verdict="")
        if not c.reason:
            try:
                f = plan_fit(c.model, c.system, c.plan)
                if check and estimate(c.model, c.system, c.plan).memory_verdict != f["verdict"]:
                    raise AssertionError(f"{c.row_id}: plan_fit and estimate disagree")
            except InputError as err:
                r["reason"] = f"estimate: {err}"
            else:
                parts = {k: f[k] for k in PARTS}
                r.update(verdict=f["verdict"], system=c.system.name, model=c.model.name[:30], stack=f["stack"],
                         gpus=f["gpus"], reserved=f["reserved"] / GiB, low=f["low"] / GiB, high=f["high"] / GiB,
                         room=f["room"] / GiB, host=f["host"] / GiB, largest=max(parts, key=parts.get))
        out.append(r)
    return pd.DataFrame(out)


def counts(df: pd.DataFrame) -> pd.DataFrame:
    """Per set: rows, expressible, fits, tight, does not fit, % said not to fit and % tight of the expressible."""
    rows = {}
    for name, d in df.groupby("set", sort=False):
        ok = d[d["verdict"] != ""]
        n = max(len(ok), 1)
        rows[name] = {"rows": len(d), "expressible": len(ok), "fits": int((ok["verdict"] == "fits").sum()),
                      "tight": int((ok["verdict"] == "tight").sum()),
                      "does not fit": int((ok["verdict"] == "does not fit").sum())}
        rows[name]["not fit %"] = 100 * rows[name]["does not fit"] / n
        rows[name]["tight %"] = 100 * rows[name]["tight"] / n
    return pd.DataFrame(rows).T


def memory_accuracy() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The measured peaks (benchmarks/measured_memory.py's table): MAPE per view, in the view each row measured
    and in the other view where its source states that too; and the reserved / allocated bands with their
    leave-one-group-out coverage (perfmodel.calibrate.runs.memory_band)."""
    rows = residual_rows(table(DENSE_CSV, MOE_CSV))
    err = rows["predicted_gib"] / rows["measured_gib"] - 1
    acc = pd.DataFrame({v: {"peaks": int((rows["view"] == v).sum()),
                            "groups": rows.loc[rows["view"] == v, "group"].nunique(),
                            "MAPE %": 100 * err[rows["view"] == v].abs().mean()} for v in ("allocated", "reserved")}).T
    bands = {}
    for v, d in rows.groupby("view"):
        lo, hi = band_of(d["residual"], d["group"])
        bands[v] = {"low %": 100 * lo, "high %": 100 * hi, "held-out coverage %":
                    100 * (held_out_share(d["residual"], d["group"]) or np.nan)}
    return acc, pd.DataFrame(bands).T


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="list the tight rows too")
    ap.add_argument("--check", action="store_true", help="also price every row with the full estimate and stop where "
                                                         "its verdict differs from the memory-only one")
    a = ap.parse_args(argv)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 1000)
    memory = [c for c in memory_cases(DENSE_CSV, MOE_CSV)]
    labels = load_fit_labels()
    sets = {"dense": load_cases(DEFAULT_CSV), "small-scale": load_small_cases(SMALL_CSV), "MoE": load_moe_cases(MOE_CSV),
            "TPU/AMD": load_tpu_amd_cases(TPU_AMD_CSV), "measured memory": memory, "fit labels": labels}
    df = pd.concat([verdicts(k, v, a.check) for k, v in sets.items()], ignore_index=True)
    print("fit verdicts on runs that ran (every row below ran: 'does not fit' is false)\n")
    print(counts(df).to_string(float_format=lambda x: f"{x:.1f}"))
    fmt = lambda x: f"{x:.1f}"
    cols = ["set", "row_id", "system", "gpus", "model", "stack", "reserved", "low", "room", "largest"]
    bad = df[df["verdict"] == "does not fit"].assign(short=lambda d: d["low"] - d["room"])
    print(f"\nsaid not to fit ({len(bad)}; GiB: reserved estimate, the band's lower end, the room capacity - runtime, "
          "short by, the largest part)")
    print(bad[cols[:-1] + ["short", "largest"]].to_string(index=False, float_format=fmt) if len(bad) else "  none")
    tight = df[df["verdict"] == "tight"]
    if a.rows and len(tight):
        print(f"\ntight ({len(tight)}; the room inside the band [low, high])")
        print(tight[cols[:7] + ["high", "room", "largest"]].to_string(index=False, float_format=fmt))
    acc, bands = memory_accuracy()
    print("\nmeasured peaks (benchmarks/measured_memory.py): predicted / measured - 1 by view")
    print(acc.to_string(float_format=fmt))
    print("\nbands of measured / predicted - 1 (0.1/0.9 quantiles, groups weighted once) and their leave-one-group-"
          "out coverage (each group against the band of the others)")
    print(bands.to_string(float_format=fmt))
    print(f"\nfit labels ({len(labels)}): published layouts, read through perfmodel import")
    for c in labels:
        print(f"  {c.row_id}  {c.source}" + (f"  [not expressible: {c.reason}]" if c.reason else ""))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
