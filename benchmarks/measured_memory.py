"""Memory benchmark: predicted against measured peak memory per GPU on the development rows, in the view each
row measured.

    python benchmarks/measured_memory.py [--dense PATH] [--moe PATH] [--csv OUT.csv]

Rows: measured_memory_dev.csv (torchtitan's Dec-2024 Llama 3.1 H100 tables: peak reserved, max over ranks; the
nanotron llama-1B sweep: peak allocated and the allocated memory between steps) and the rows of
published_moe_runs_dev.csv with `mem_peak_gib` (Megatron-Bridge Qwen3 / Moonlight, SimuMax's DeepSeek proxies:
peak allocated). perfmodel.published.memory_peaks maps each row to (model, system, plan), the view it measured
(allocated: torch.cuda.max_memory_allocated; reserved: max_memory_reserved) and the device (max over ranks, rank
0, last stage). Prints one line per row (measured, predicted in that view on that device, signed error, the
between-steps figures where given, the predicted parts), then per source group the count, the mean signed error
and the MAPE, the MAPE per view, the between-steps MAPE, where a row states both views the other one too, and
the rows that cannot be expressed with the reason; then per stack, and leave-one-group-out.

One constant is fitted here, and only one: the allocator slack of the stacks in FITTED_SLACK (torchtitan: no
published allocated / reserved pair), on their own reserved-view rows (`fit_slack`; the profile states the value).
Leave-one-group-out re-fits it without the held-out group (no row of the stack left: the median reserved /
allocated - 1 of the other groups' rows that state both views, `pair_slack`); rows no fitted constant reaches
(allocated views, other stacks' measured slacks) are out of sample as they are. `residuals()` returns the per-row
table (row_id, group, stack, view, measured_gib, predicted_gib) for the verdict's error band. Nothing is tuned per
row or per source group.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from devset import HERE
from perfmodel import estimate
from perfmodel.calibrate.runs.memory_band import band_of, build_bands, held_out_share, residual_rows, write_bands
from perfmodel.errors import InputError
from perfmodel.cost.memory.footprint import reserved_of
from perfmodel.published.memory_peaks import GiB, memory_cases, nan_if_none, predicted
from perfmodel.spec.stack.profile import load_stack


def _devset(name: str) -> Path:
    shared = HERE.parent.parent / "shared" / "data" / name
    return shared if shared.exists() else HERE / "data" / name


DENSE_CSV = _devset("measured_memory_dev.csv")
MOE_CSV = _devset("published_moe_runs_dev.csv")
PARTS = ("weights", "gradients", "optimizer", "activations", "transient")


def layout(p) -> str:
    experts = f" ep{p.ep}" if p.ep > 1 else ""
    rc = p.recompute + (f"[{','.join(p.recompute_modules)}]" if p.recompute_modules else "")
    split = f" split{'/'.join(map(str, p.stage_layers))}" if p.stage_layers else ""
    return (f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp}{f' v{p.vpp}' if p.vpp > 1 else ''}{experts} mb{p.micro_batch} "
            f"s{p.seq_len} z{p.zero} {rc} {p.precision} g{p.grad_dtype}{' sp' if p.sequence_parallel else ''} "
            f"{p.stack}{split}")


def table(dense: Path, moe: Path) -> pd.DataFrame:
    """One line per row with a measured peak: measured and predicted GiB in its view on its device, signed error
    (predicted / measured - 1), between-steps figures, the predicted parts (GiB), the reason where not expressible."""
    out = []
    for c in memory_cases(dense, moe):
        r = dict(row_id=c.row_id, group=c.group, view=c.view, rank=c.rank, measured_gib=c.measured_gib,
                 measured_between_gib=nan_if_none(c.measured_between_gib),
                 measured_other_gib=nan_if_none(c.measured_other_gib), reason=c.reason,
                 decisions="; ".join(c.decisions))
        if not c.reason:
            try:
                est = estimate(c.model, c.system, c.plan)
            except InputError as err:
                r["reason"] = f"estimate: {err}"
            else:
                p = predicted(c, est)
                r.update(stage=p["stage"], predicted_gib=p["predicted_gib"], predicted_between_gib=p["between_gib"],
                         predicted_other_gib=p["reserved" if c.view == "allocated" else "allocated"],
                         predicted_allocated_gib=p["allocated"], stack=c.plan.stack,
                         usable_gib=(c.system.accelerator.hbm_bytes - c.system.memory_overhead_bytes) / GiB,
                         layout=layout(c.plan), model=c.model.name, hardware=c.system.name,
                         **{k: p[k] for k in PARTS})
        out.append(r)
    df = pd.DataFrame(out)
    for col in ("stage", "predicted_gib", "predicted_between_gib", "predicted_other_gib", "predicted_allocated_gib",
                "usable_gib", "stack", *PARTS):
        if col not in df:
            df[col] = np.nan
    df["error"] = df["predicted_gib"] / df["measured_gib"] - 1
    df["between_error"] = df["predicted_between_gib"] / df["measured_between_gib"] - 1
    df["other_error"] = df["predicted_other_gib"] / df["measured_other_gib"] - 1
    return df


def residuals(dense: Path = DENSE_CSV, moe: Path = MOE_CSV) -> pd.DataFrame:
    """The expressible rows' residuals, one per row: row_id, group, stack, view, measured_gib, predicted_gib
    (predicted in the row's view on its device; error = predicted / measured - 1)."""
    df = table(dense, moe)
    return df[df["predicted_gib"].notna()][["row_id", "group", "stack", "view", "measured_gib",
                                            "predicted_gib"]].reset_index(drop=True)


# The stacks whose allocator slack (Stack.allocator_slack: reserved / allocated - 1 at the peak) has no measured
# pair and is fitted on their own reserved-view rows (the profile's source names the rows and the value).
FITTED_SLACK = ("torchtitan",)


def fit_slack(rows: pd.DataFrame) -> float:
    """The allocator slack that minimises the MAPE of `rows`' reserved view, predicted as their predicted allocated
    bytes x (1 + slack) under the device's cap (`cost.memory.footprint.reserved_of`); a 0.001 grid over [0, 0.3]."""
    grid = np.round(np.arange(0.0, 0.3005, 0.001), 3)
    a, u, m = (rows[k].to_numpy(float) for k in ("predicted_allocated_gib", "usable_gib", "measured_gib"))
    mape = [np.abs(reserved_of(a, s, u) / m - 1).mean() for s in grid]
    return float(grid[int(np.argmin(mape))])


def pair_slack(rows: pd.DataFrame) -> float:
    """The median measured reserved / allocated - 1 over `rows` that state both views (the slack measured where it
    is, whatever the stack): what a fitted stack's slack falls back on when none of its rows are left."""
    both = rows[rows["measured_other_gib"].notna()]
    res = np.where(both["view"] == "allocated", both["measured_other_gib"], both["measured_gib"])
    alloc = np.where(both["view"] == "allocated", both["measured_gib"], both["measured_other_gib"])
    return float(np.median(res / alloc - 1)) if len(both) else 0.0


def logo(ok: pd.DataFrame) -> tuple[pd.Series, dict]:
    """Leave-one-group-out predictions: for each source group, the fitted stacks' slack re-fitted without it
    (`fit_slack` on the stack's other reserved rows; none left: `pair_slack` of the other groups) and its
    reserved-view rows of those stacks predicted with it. Every other row's prediction is in-sample = out of
    sample: no constant is fitted on it (allocated views take no slack; the other stacks' slacks are measured
    reserved / allocated pairs). Returns (predicted GiB per row, {group: {stack: slack}})."""
    pred, used = ok["predicted_gib"].copy(), {}
    for g in ok["group"].unique():
        rest, mine = ok[ok["group"] != g], ok["group"] == g
        used[g] = {}
        for st in FITTED_SLACK:
            own = rest[(rest["stack"] == st) & (rest["view"] == "reserved")]
            s = fit_slack(own) if len(own) else pair_slack(rest)
            used[g][st] = s
            sel = mine & (ok["stack"] == st) & (ok["view"] == "reserved")
            pred[sel] = reserved_of(ok.loc[sel, "predicted_allocated_gib"].to_numpy(float), s,
                                    ok.loc[sel, "usable_gib"].to_numpy(float))
    return pred, used


def _agg(e: pd.Series) -> pd.Series:
    e = e.dropna()
    return pd.Series({"n": len(e), "mean err %": 100 * e.mean() if len(e) else np.nan,
                      "MAPE %": 100 * e.abs().mean() if len(e) else np.nan,
                      "max |err| %": 100 * e.abs().max() if len(e) else np.nan})


def summary(df: pd.DataFrame, col: str = "error") -> pd.DataFrame:
    """Per source group (with its view), per stack, per view and overall: n, mean signed error, MAPE, max |error|
    of `col`; the between-steps figures."""
    rows = {f"{g} [{v}]": _agg(d[col]) for (g, v), d in df.groupby(["group", "view"])}
    for st, d in df.groupby("stack"):
        rows[f"stack {st}"] = _agg(d[col])
    for v, d in df.groupby("view"):
        rows[f"ALL {v}"] = _agg(d[col])
    rows["ALL"] = _agg(df[col])
    rows["between steps (allocated)"] = _agg(df["between_error"])
    return pd.DataFrame(rows).T


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dense", type=Path, default=DENSE_CSV, help="measured_memory_dev.csv")
    ap.add_argument("--moe", type=Path, default=MOE_CSV, help="published_moe_runs_dev.csv (rows with mem_peak_gib)")
    ap.add_argument("--csv", type=Path, help="write the per-row table as CSV")
    ap.add_argument("--write-bands", action="store_true",
                    help="rewrite the stack profiles' memory_band blocks with these residuals' (after a memory change)")
    a = ap.parse_args(argv)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 500)
    pd.set_option("display.max_colwidth", 120)
    df = table(a.dense, a.moe)
    ok = df[df["predicted_gib"].notna()].copy()
    print(f"measured peak memory: {a.dense} + {a.moe} (rows with mem_peak_gib)")
    print(f"{len(df)} rows, {len(ok)} expressible; GiB; err = predicted / measured - 1; parts of the predicted "
          "device (allocated view)\n")
    show = ok[["row_id", "view", "rank", "stage", "measured_gib", "predicted_gib", "error", "measured_between_gib",
               "predicted_between_gib", "between_error", *PARTS]].copy()
    show["error"] = 100 * show["error"]
    show["between_error"] = 100 * show["between_error"]
    show = show.rename(columns={"measured_gib": "meas", "predicted_gib": "pred", "error": "err %",
                                "measured_between_gib": "betw meas", "predicted_between_gib": "betw pred",
                                "between_error": "betw err %", "gradients": "grads", "optimizer": "optim",
                                "activations": "activ", "transient": "transnt"})
    show["stage"] = show["stage"].astype(int)
    print(show.to_string(index=False, float_format=lambda x: f"{x:.2f}", na_rep="-"))
    print("\nlayouts and mapping decisions")
    for _, r in ok.iterrows():
        print(f"  {r['row_id']}  {r['group']}: {r['model']} on {r['hardware']}: {r['layout']}"
              f"{'; ' + r['decisions'] if r['decisions'] else ''}")
    print("\nper source group and view (err = predicted / measured - 1)")
    print(summary(ok).to_string(float_format=lambda x: f"{x:.1f}"))
    fitted = {st: fit_slack(ok[(ok["stack"] == st) & (ok["view"] == "reserved")]) for st in FITTED_SLACK}
    print("\nfitted allocator slack (reserved / allocated - 1), MAPE-minimising on the stack's reserved-view rows: "
          + ", ".join(f"{st} {v:.3f} (profile {load_stack(st).allocator_slack:.3f})" for st, v in fitted.items()))
    ok["logo_gib"], used = logo(ok)
    ok["logo_error"] = ok["logo_gib"] / ok["measured_gib"] - 1
    print("\nleave-one-group-out (each group's rows with the fitted slack re-fitted without the group; rows no "
          "fitted constant reaches: LOGO = in-sample)")
    for g, s in used.items():
        print(f"  without {g}: " + ", ".join(f"{st} slack {v:.3f}" for st, v in s.items()))
    print(summary(ok, "logo_error").drop(index="between steps (allocated)").to_string(float_format=lambda x: f"{x:.1f}"))
    both = ok[ok["measured_other_gib"].notna()]
    if len(both):
        other = both.assign(other_view=np.where(both["view"] == "allocated", "reserved", "allocated"))
        print("\nrows stating the other view too (text of mem_kind / notes): that view, same device")
        for (g, v), d in other.groupby(["group", "other_view"]):
            e = d["other_error"]
            res = np.where(d["view"] == "allocated", d["measured_other_gib"], d["measured_gib"])
            alloc = np.where(d["view"] == "allocated", d["measured_gib"], d["measured_other_gib"])
            print(f"  {g} [{v}]: n {len(d)}, mean err {100 * e.mean():.1f}%, MAPE {100 * e.abs().mean():.1f}% "
                  f"(measured reserved / allocated - 1: median {100 * np.median(res / alloc - 1):.1f}%)")
    bad = df[df["predicted_gib"].isna()]
    if len(bad):
        print(f"\nnot expressible ({len(bad)} rows):")
        for reason, g in bad.groupby("reason"):
            print(f"  {len(g):3d}  {reason}  [{', '.join(g['row_id'])}]")
    rows = residual_rows(df)
    print("\nbands of measured / predicted - 1 per view (perfmodel.calibrate.runs.memory_band: 0.1/0.9 quantiles, groups "
          "weighted once; held out: each group's peaks inside the band of the others)")
    for v, d in rows.groupby("view"):
        lo, hi = band_of(d["residual"], d["group"])
        held = held_out_share(d["residual"], d["group"])
        print(f"  {v}: {len(d)} peaks, {d['group'].nunique()} groups: [{100 * lo:+.1f}%, {100 * hi:+.1f}%], held out "
              f"{'-' if held is None else f'{100 * held:.0f}%'}")
    if a.write_bands:
        changed = write_bands(build_bands(rows, "python benchmarks/measured_memory.py --write-bands"))
        print(f"rewrote the memory_band blocks of: {', '.join(changed) or 'none'}")
    if a.csv:
        df.to_csv(a.csv, index=False)
        print(f"\nwrote {a.csv}")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into `head`
    sys.exit(main())
