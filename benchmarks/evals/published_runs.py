"""Accuracy benchmark: predict every expressible training run of the published-runs development set.

    python -m benchmarks.evals.published_runs [--csv PATH] [--rows] [--out results.csv] [--draws 20] [--seed 0]

Prints, per source group and overall (and over the trust-A rows), MAPE, median and max |error| and the mean
signed error of the step time, for
  (a) profiles: the hardware specs and each run's software-stack profile (its `framework`), nothing fitted;
  (b) leave-one-group-out: `perfmodel calibrate --from-runs`'s fit (perfmodel.calibrate.runs.from_runs) to every other
      group (each group weighted once; compute, network and host speed: no per-step overhead, which is a cluster's
      own), predicting this one,
      with its 80% interval from the nested leave-one-group-out residuals of the other groups (each group weighted
      once) and the share of this group's rows inside it;
  (c) three-shot: the fit to 3 rows of the group (`--draws` random draws, fixed `--seed`), predicting the rest:
      the median over draws of that MAPE, beside the uncalibrated spec's on the same rows, and how many groups
      calibration leaves worse than none (by more than 1 point);
Then the rows that could not be expressed, with the reason, and the 80% intervals of (a)'s errors per stack and
regime (what the stack profiles' `interval` quotes: perfmodel.calibrate.runs.intervals), with each group's share of rows
inside the intervals built without it. Then (d) the small- and mid-scale runs (benchmarks/data/
small_scale_runs_dev.csv, benchmarks.evals.published.small_runs) per source, and (e) both sets by scale regime
(`scale_regime`: small, mid, frontier): MAPE, the signed median error, leave-one-group-out MAPE, and how many runs
that ran are said not to fit (the three-way verdict's "does not fit"; "tight" ones are counted apart). Nothing
here is tuned per row or per source.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.evals.devset import DEFAULT_CSV, SMALL_CSV
from benchmarks.evals.published.transfer import family as gpu_family
from benchmarks.evals.published.transfer import print_transfer
from benchmarks.tools.stack_blocks import write_intervals
from perfmodel.calibrate.runs import intervals
from perfmodel.calibrate.runs.from_runs import NEUTRAL, Parts, fit_held, host_unpinned, interval_from, price
from perfmodel.calibrate.runs.table import load_cases
from perfmodel.errors import InputError
from perfmodel.spec.stack.profile import regimes_of
from perfmodel.spec.stack.release import pinned, profile_of



FRONTIER_GPUS = 1024  # 1k devices and more: the frontier regime
SMALL_PARAMS, SMALL_TOKENS = 2e9, 4096  # under 2B parameters, or at most 4k tokens per micro-batch per device
# Rows of the small-scale set that are the dense set's own measurements (the Megatron-LM README's 2020 and 2021
# tables, torchtitan's Dec-2024 A100 table): counted once, in the dense set, where the two are scored together.
IN_DENSE_SET = tuple(f"S{i:03d}" for i in (*range(108, 115), *range(128, 138), *range(142, 150)))


def scale_regime(model, plan) -> str:
    """The regime of a run as the accuracy report scores them: frontier (at least FRONTIER_GPUS devices), else small (under
    SMALL_PARAMS parameters or at most SMALL_TOKENS tokens per micro-batch per device: micro_batch x seq_len / cp,
    where the host and short kernels weigh most), else mid."""
    if plan.gpus >= FRONTIER_GPUS:
        return "frontier"
    if model.n_params() < SMALL_PARAMS or plan.micro_batch * plan.seq_len / plan.cp <= SMALL_TOKENS:
        return "small"
    return "mid"


def predict_all(csv: Path) -> pd.DataFrame:
    """One row per training run: measured_s, predicted_s (the profiles alone), error, reason, ..."""
    return priced(csv)[0]


def priced(csv: Path, cases=None):
    """(per-row table, priced parts of the expressible rows, their indices in the table); `cases`: the CSV's
    rows as calibrate.runs.table.Case (default load_cases; the MoE benchmark passes its own)."""
    cases = load_cases(csv) if cases is None else cases
    each = []
    for c in cases:  # each row priced once; a row the estimate refuses keeps the reason
        if not c.reason:
            try:
                each.append(price([c]))
            except InputError as err:
                c.reason = f"estimate: {err}"
    ok = [c for c in cases if not c.reason]
    parts = Parts.joined(each)
    out = [dict(row_id=c.row_id, group=c.group, trust=c.trust, measured_s=c.measured_s, reason=c.reason)
           for c in cases]
    df = pd.DataFrame(out)
    idx = np.array([i for i, c in enumerate(cases) if not c.reason])
    df["stack"] = None
    df.loc[idx, "stack"] = [profile_of(c.plan.stack) for c in ok]  # a release's rows are its profile's residuals
    df.loc[idx, "layout"] = [layout(c.plan) for c in ok]
    df["regimes"] = None
    df.loc[idx, "regimes"] = pd.Series([regimes_of(c.plan) for c in ok], index=idx)
    df["regime"] = None
    df.loc[idx, "model"] = [c.model.name[:28] for c in ok]
    df.loc[idx, "hardware"] = [c.system.name for c in ok]
    # what an interval's domain is made of (spec.stack.profile.Domain): hardware generation, precision, devices
    df.loc[idx, "generation"] = [c.system.accelerator.generation_name for c in ok]
    df.loc[idx, "precision"] = [c.plan.precision for c in ok]
    df.loc[idx, "release"] = [pinned(c.plan.stack) for c in ok]  # a release line's name@version, the newest if bare
    df.loc[idx, "gpu_family"] = [gpu_family(c.system.accelerator.name) for c in ok]
    df.loc[idx, "gpus"] = [c.plan.tp * c.plan.pp * c.plan.dp * c.plan.cp for c in ok]
    df["predicted_s"] = np.nan
    df.loc[idx, "predicted_s"] = parts.predict(NEUTRAL)
    df.loc[idx, "mfu"] = [e.mfu for e in parts.estimates]
    df.loc[idx, "fits"] = [e.fits_in_memory for e in parts.estimates]
    df.loc[idx, "verdict"] = [e.memory_verdict for e in parts.estimates]
    df.loc[idx, "regime"] = [scale_regime(c.model, e.plan) for c, e in zip(ok, parts.estimates)]
    df.loc[idx, "host_share"] = [e.time_s.host / e.step_time_s for e in parts.estimates]
    df["error"] = df["predicted_s"] / df["measured_s"] - 1
    return df, parts, idx


def layout(p) -> str:
    experts = f" ep{p.ep} etp{p.etp} {p.moe_dispatcher}" if p.ep * p.etp > 1 else ""
    rep = f"x{p.dp_replicate}rep" if p.dp_replicate > 1 else ""  # hybrid sharding's replicas of the ZeRO group
    return (f"tp{p.tp} pp{p.pp} dp{p.dp}{rep} cp{p.cp} v{p.vpp}{experts} mb{p.micro_batch} gb{p.global_batch} "
            f"s{p.seq_len} z{p.zero} {p.recompute} {p.precision}{' sp' if p.sequence_parallel else ''} {p.stack}")


def logo(df: pd.DataFrame, parts, idx) -> pd.DataFrame:
    """(b): each group predicted by the fit to the others; its interval from the others' nested residuals."""
    groups = df.loc[idx, "group"].to_numpy()
    pred = np.full(len(idx), np.nan)
    low, high = np.full(len(idx), np.nan), np.full(len(idx), np.nan)
    def fitted(mask):  # the fit to the rows in mask, each group weighted once (MPT's 216 rows count as one group)
        size = pd.Series(groups[mask]).map(pd.Series(groups[mask]).value_counts()).to_numpy()
        return fit_held(parts.take(mask), mask.sum() / size / len(set(groups[mask])))[0]

    for g in np.unique(groups):
        this, rest = groups == g, groups != g
        pred[this] = parts.take(this).predict(fitted(rest), set(parts.scopes[rest]))
        errs, weights = [], []
        for h in np.unique(groups[rest]):
            inner = rest & (groups != h)
            held = groups == h
            e = parts.measured[held] / parts.take(held).predict(fitted(inner), set(parts.scopes[inner])) - 1
            errs.append(e)
            weights.append(np.full(len(e), 1.0 / len(e)))
        band = interval_from(np.concatenate(errs), "nested leave-one-group-out", np.concatenate(weights))
        low[this], high[this] = band.low, band.high
    out = df.loc[idx, ["row_id", "group", "trust", "measured_s"]].copy()
    out["predicted_s"] = pred
    out["error"] = pred / out["measured_s"] - 1
    m_over_p = out["measured_s"] / pred - 1
    out["inside"] = (m_over_p >= low) & (m_over_p <= high)
    return out


def three_shot(df: pd.DataFrame, parts, idx, draws: int, seed: int) -> pd.DataFrame:
    """(c): per group, over `draws` random draws of 3 rows, the median MAPE on the group's other rows of the fit to
    the three (`calibrate --from-runs`: fit_held, speeds only) and of the uncalibrated spec on the same rows; the
    share of draws in which the runs could not pin a speed down (held at its prior); the group's model sizes."""
    rng = np.random.default_rng(seed)
    groups = df.loc[idx, "group"].to_numpy()
    models = df.loc[idx, "model"].to_numpy()
    out = {}
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        sizes = len(set(models[rows]))
        if len(rows) < 4:
            out[g] = (np.nan, np.nan, np.nan, sizes)
            continue
        cal, none, held = [], [], 0
        for _ in range(draws):
            pick = rng.choice(rows, 3, replace=False)
            rest = np.setdiff1d(rows, pick)
            params, h = fit_held(parts.take(pick))
            held += bool([x for x in h if x != "host_speed" or not host_unpinned(parts.take(pick))])
            cal.append(np.mean(np.abs(parts.take(rest).predict(params, set(parts.scopes[pick]))
                                      / parts.measured[rest] - 1)))
            none.append(np.mean(np.abs(parts.take(rest).predict(NEUTRAL) / parts.measured[rest] - 1)))
        out[g] = (100 * float(np.median(cal)), 100 * float(np.median(none)), 100 * held / draws, sizes)
    return pd.DataFrame.from_dict(out, orient="index",
                                  columns=["MAPE %", "uncalibrated %", "draws with a speed held %", "model sizes"])  # held: pushed to a bound


def summary(df: pd.DataFrame) -> pd.DataFrame:
    def agg(g: pd.DataFrame) -> pd.Series:
        ok = g.dropna(subset=["predicted_s"])
        e = ok["error"]
        return pd.Series({"rows": len(g), "expressible": len(ok),
                          "MAPE %": 100 * e.abs().mean() if len(ok) else np.nan,
                          "median APE %": 100 * e.abs().median() if len(ok) else np.nan,
                          "max |err| %": 100 * e.abs().max() if len(ok) else np.nan,
                          "mean err %": 100 * e.mean() if len(ok) else np.nan,
                          "median err %": 100 * e.median() if len(ok) else np.nan})
    rows = {grp: agg(g) for grp, g in df.groupby("group")}
    rows["ALL"] = agg(df)
    rows["ALL trust A"] = agg(df[df["trust"] == "A"])
    return pd.DataFrame(rows).T


def interval_inputs(df: pd.DataFrame, trust: str | None = None) -> tuple:
    """(residuals measured/predicted - 1, groups, stacks, regimes, dims: per row (hardware generation, precision,
    devices, stack release)) of (a)'s expressible rows (of one trust level), as perfmodel.calibrate.runs.intervals takes them."""
    ok = df.dropna(subset=["predicted_s"])
    if trust is not None:
        ok = ok[ok["trust"] == trust]
    dims = list(zip(ok["generation"], ok["precision"], ok["gpus"].astype(int), ok["release"]))
    return ((ok["measured_s"] / ok["predicted_s"] - 1).to_numpy(), ok["group"].to_numpy(), ok["stack"].to_numpy(),
            list(ok["regimes"]), dims)


def stack_intervals(df: pd.DataFrame, source: str = "python -m benchmarks.evals.published_runs",
                    trust: str | None = None) -> tuple[dict, dict, float]:
    """The stack profiles' intervals (perfmodel.calibrate.runs.intervals.build over (a)'s residuals, at the level whose
    held-out coverage reaches 80%, with the widths by which they widen outside their runs' domain), each group's
    held-out coverage at that level, and the level."""
    resid, groups, stacks, regimes, dims = interval_inputs(df, trust)
    q, _ = intervals.choose_level(resid, groups, stacks, regimes)
    widths = intervals.extrapolation_widths(resid, groups, stacks, regimes, dims, q)
    held = intervals.held_out(resid, groups, stacks, regimes, q, dims, widths)
    cover = float(np.mean(list(held.values())))
    return intervals.build(resid, groups, stacks, regimes, q, source, cover, dims, widths), held, q


def generation_coverage(df: pd.DataFrame, q: float, trust: str | None = None, by: int = 0) -> pd.DataFrame:
    """Leave-one-value-out (perfmodel.calibrate.runs.intervals.held_out_by_value) of a run's dims[by] (0: hardware
    generation, 3: stack release): each value's rows inside the intervals built from the other values' rows at level
    q, unwidened and widened where they lie outside those runs' domain, with the widths the others' runs give."""
    resid, groups, stacks, regimes, dims = interval_inputs(df, trust)
    out = intervals.held_out_by_value(resid, groups, stacks, regimes, dims, q, [d[by] for d in dims])
    ways = ", ".join(intervals.EXTRAPOLATIONS)
    t = pd.DataFrame({g: {"rows": r["rows"], "unwidened %": 100 * r["unwidened"], "widened %": 100 * r["widened"],
                          f"widths ({ways})": ", ".join(
                              f"{r['widths'][k]:.3f}" for k in intervals.EXTRAPOLATIONS)} for g, r in out.items()}).T
    t.loc[f"mean ({'generations' if by == 0 else 'values'} weighted once)"] = [
        t["rows"].sum(), t["unwidened %"].mean(), t["widened %"].mean(), ""]
    return t


def print_intervals(bands: dict, held: dict, q: float) -> None:
    print(f"\n80% intervals of (a)'s measured/predicted - 1 (the profiles' `interval`; perfmodel.calibrate.runs.intervals): "
          f"quantiles {q:.3g}/{1 - q:.3g}, each group weighted once; a stack's own rows where they span "
          f">= {intervals.MIN_GROUPS} groups, else all; a regime's band where it is wider")
    print(pd.DataFrame([dict(stack=s, rows=b.rows, low=b.low, high=b.high,
                             residuals="own" if "over its own rows" in b.source else "all",
                             wider=", ".join(f"{r} [{v.low:+.3f}, {v.high:+.3f}]" for r, v in b.regimes.items()),
                             extrapolated=", ".join(f"{k} +-{v:.3f}" for k, v in b.extrapolation.items() if v))
                        for s, b in bands.items()]).to_string(index=False))
    print("held out: each group's rows inside the intervals built from the other groups")
    print(pd.Series(held).map(lambda x: f"{100 * x:.0f}%").to_string())
    print(f"held-out coverage, groups weighted once: {100 * np.mean(list(held.values())):.1f}% "
          f"(the level chosen on these groups: a slightly hopeful figure)")


def by_regime(df: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per scale regime (and all): rows, MAPE, signed median error (predicted / measured - 1), leave-one-group-out
    MAPE (`b`, logo's table), runs said not to fit and tight ones (every row ran)."""
    ok = df.dropna(subset=["predicted_s"]).merge(b[["row_id", "error"]].rename(columns={"error": "logo"}),
                                                 on="row_id", how="left")

    def agg(g):
        return pd.Series({"rows": len(g), "MAPE %": 100 * g["error"].abs().mean(),
                          "signed median %": 100 * g["error"].median(),
                          "LOGO MAPE %": 100 * g["logo"].abs().mean(),
                          "said not to fit": int((g["verdict"] == "does not fit").sum()),
                          "tight": int((g["verdict"] == "tight").sum()),
                          "host-bound share %": 100 * (g["host_share"] > 0.05).mean()})
    rows = {r: agg(g) for r, g in ok.groupby("regime")}
    rows["ALL"] = agg(ok)
    return pd.DataFrame(rows).T


def accuracy_args(doc: str, csv: Path, argv=None, out: bool = False) -> argparse.Namespace:
    """The accuracy benchmarks' flags (--csv, --rows, --draws, --seed, and --out where it writes a table), parsed;
    pandas set to print wide tables whole."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=csv)
    ap.add_argument("--small-csv", type=Path, default=SMALL_CSV, help="the small- and mid-scale runs (d, e)")
    ap.add_argument("--rows", action="store_true", help="also print every row")
    if out:
        ap.add_argument("--out", type=Path, help="write the per-row table as CSV")
    ap.add_argument("--write-intervals", action="store_true",
                    help="rewrite the stack profiles' interval blocks with these residuals' (after a cost-model change)")
    ap.add_argument("--draws", type=int, default=20, help="three-shot draws per group (default 20)")
    ap.add_argument("--seed", type=int, default=0)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    pd.set_option("display.max_colwidth", 90)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = accuracy_args(__doc__, DEFAULT_CSV, argv, out=True)
    df, parts, idx = priced(a.csv)
    fmt = lambda x: f"{x:.1f}"  # noqa: E731
    print(f"published runs: {a.csv}")
    print("\n(a) stack profiles, nothing fitted")
    print(summary(df).to_string(float_format=fmt))
    b = logo(df, parts, idx)
    sb = summary(b)
    cover = b.groupby("group")["inside"].mean()
    sb["in 80% interval %"] = 100 * pd.concat([cover, pd.Series({"ALL": b["inside"].mean(),
                                                                  "ALL trust A": b.loc[b.trust == "A", "inside"].mean()})])
    print("\n(b) leave-one-group-out: calibrated on every other group (calibrate --from-runs), 80% interval from "
          "the others' nested residuals")
    print(sb.to_string(float_format=fmt))
    # The intervals weight each group once (a new cluster or stack is one group); MPT's 216 rows are one group.
    print(f"rows inside their 80% interval: {100 * b['inside'].mean():.1f}% of rows; {100 * cover.mean():.1f}% with "
          "each group weighted once, as the intervals are built")
    c = three_shot(df, parts, idx, a.draws, a.seed)
    print(f"\n(c) three-shot: calibrated on 3 rows of the group, MAPE on its other rows (median of {a.draws} draws, "
          f"seed {a.seed})")
    print(c.to_string(float_format=fmt))
    worse = c[c["MAPE %"] > c["uncalibrated %"] + 1]
    multi = c[(c["model sizes"] > 1) & c["MAPE %"].notna()]
    print(f"median group MAPE: {c['MAPE %'].median():.1f}% (uncalibrated, same rows: {c['uncalibrated %'].median():.1f}%);"
          f" groups with runs of more than one model size: {len(multi)}, median {multi['MAPE %'].median():.1f}%; "
          f"calibration worse than none by more than 1 point: {len(worse)} group(s)"
          + (f" ({', '.join(worse.index)})" if len(worse) else "") + "; refused: none (a speed the three runs cannot "
          "pin down is held at its prior)")
    bad = df[df["predicted_s"].isna()]
    if len(bad):
        print(f"\nnot expressible ({len(bad)} rows):")
        for reason, g in bad.groupby("reason"):
            print(f"  {len(g):3d}  {reason}  [{', '.join(g['row_id'][:6])}{' ...' if len(g) > 6 else ''}]")
    print_transfer(df, "(a) and (b)", b)
    bands = stack_intervals(df)
    print_intervals(*bands)
    print("\nleave-one-hardware-generation-out: each generation's rows inside the intervals built from the others' "
          "(groups weighted once), unwidened and widened where a plan lies outside the runs (Interval.bounds)")
    print(generation_coverage(df, bands[2]).to_string(float_format=fmt))
    print("\nleave-one-stack-release-out: each stack's (a release line's: each release's) rows inside the intervals "
          "built from the other stacks' rows, unwidened and widened where a plan lies outside the runs")
    print(generation_coverage(df, bands[2], by=3).to_string(float_format=fmt))
    if a.write_intervals:
        print(f"rewrote the interval blocks of: {', '.join(write_intervals(bands[0])) or 'none'}")

    # (d) and (e): the small-scale runs, then both sets by regime
    from benchmarks.evals.published.small_runs import load_small_cases

    small = load_small_cases(a.small_csv)
    sdf, sparts, sidx = priced(a.small_csv, small)
    print(f"\n(d) small- and mid-scale runs ({a.small_csv.name}), stack profiles, nothing fitted")
    print(summary(sdf).to_string(float_format=fmt))
    reasons = sdf[sdf["predicted_s"].isna()].groupby("reason").size().sort_values(ascending=False)
    print(f"not expressible: {len(sdf) - len(sidx)} of {len(sdf)} rows (memory, capacity and wall-clock figures, parts "
          f"outside the catalogue: --rows lists them); the commonest: {reasons.index[0]} ({reasons.iloc[0]})")
    both = pd.concat([df.assign(set="dense"), sdf[~sdf["row_id"].isin(IN_DENSE_SET)].assign(set="small-scale")],
                     ignore_index=True)
    keep = np.concatenate([np.ones(len(idx), bool), ~np.isin(sdf.loc[sidx, "row_id"], IN_DENSE_SET)])
    bparts = Parts.joined([parts, sparts]).take(keep)
    bidx = np.flatnonzero(both["predicted_s"].notna().to_numpy())
    bb = logo(both, bparts, bidx)
    print("\n(e) by scale regime (frontier: >= 1024 devices; small: < 2B parameters or <= 4096 tokens per "
          "micro-batch per device; else mid), predicted / measured - 1; LOGO: leave-one-group-out as (b)")
    for name, frame, lo in (("dense set", df, b), ("small-scale set", sdf, logo(sdf, sparts, sidx)),
                            ("both (small-scale rows of the dense set counted once)", both, bb)):
        print(f"  {name}")
        print("    " + by_regime(frame, lo).to_string(float_format=fmt).replace("\n", "\n    "))
    if a.rows:
        ok = df.dropna(subset=["predicted_s"])
        cols = ["row_id", "group", "trust", "model", "hardware", "layout", "measured_s", "predicted_s", "error"]
        print("\n" + ok[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if a.out:
        df.merge(b[["row_id", "predicted_s"]].rename(columns={"predicted_s": "logo_predicted_s"}), how="left",
                 on="row_id").to_csv(a.out, index=False)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into `head`
    sys.exit(main())
