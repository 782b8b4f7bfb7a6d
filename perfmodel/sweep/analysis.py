"""What a finished sweep says (`perfmodel sweep report DIR`): each point's objectives over its workloads, the
Pareto front, the best point per objective, and how much each axis moves each objective.

- A point's objective is the weighted geometric mean of its workloads' values (the workloads that have it; a point
  without one of them has none, and the report counts it as missing the objective): the
  ratio of two points' aggregates is then the weighted geometric mean of their per-workload ratios, whatever units
  or scale each workload has (SPEC's aggregate; Fleming & Wallace 1986, "How not to lie with statistics").
- A point is feasible when every workload row passes the sweep's constraints: a training job with a plan that fits
  (`fits`), a serving job with a layout within its SLO (`slo`), and every workload's row is there (a sweep stopped
  part-way leaves points unjudged). Only feasible points rank.
- Pareto front: the feasible points no other feasible point matches or beats on every objective and beats on one.
- Sensitivity, per axis and objective, both on log(objective) over the feasible points:
  `elasticity`, the axis's coefficient in the least-squares fit of log(objective) on the log of every numeric axis
  (a 1% larger resource moves the objective by that many %, the others held; numeric axes only), and `sobol_first`, the first-order Sobol' index
  Var(E[log Y | axis]) / Var(log Y) (Sobol' 2001; Saltelli et al. 2008, Sec. 1.2.6): the share of the objective's
  variance the axis explains alone. On a grid E[. | axis] is the mean over the points at each of its values, exact;
  on quasi-random samples the points are binned into the axis's quantiles first.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pydantic import Field

from ..errors import InputError
from ..types import Schema
from .schema import OBJECTIVES
from .store import load_results


class Sensitivity(Schema):
    axis: str
    objective: str
    elasticity: float | None = Field(description="d log(objective) / d log(axis); null: a categorical axis")
    sobol_first: float | None = Field(description="first-order Sobol' index on log(objective); null: no variance")


class SweepReport(Schema):
    """A finished sweep's Pareto front, best points and sensitivities (module docstring)."""

    name: str
    points: int
    feasible_points: int
    rows: int = Field(description="finished (point, workload) rows")
    expected_rows: int
    objectives: list[str]
    directions: dict[str, str]
    axes: list[str]
    pareto: list[dict] = Field(description="point rows on the front: point, system, axis values, objectives")
    best: dict[str, dict] = Field(description="objective -> the feasible point best at it")
    sensitivity: list[Sensitivity]
    infeasible: dict[str, int] = Field(description="workload: reason -> points")
    missing: dict[str, int] = Field(default_factory=dict, description="objective -> feasible points without it (a "
                                    "system with no list price has no tokens_per_usd): left off the front")


def point_table(df: pd.DataFrame, axes: list[str], constraints: dict) -> pd.DataFrame:
    """One row per point: point, system, axis values, feasible, and each objective's weighted geometric mean over the
    workloads that have it: those with a finite, positive value of it at some point of the sweep. A point missing one
    of them (a workload its system cannot run) has no value: an aggregate over fewer workloads would not compare."""
    ok = np.where(df["kind"] == "train", df["feasible"] | (not constraints.get("fits", True)),
                  df["feasible"] | (not constraints.get("slo", True)))
    df = df.assign(_ok=ok)
    keys = ["point", "system", *axes]
    out = df.groupby("point", sort=True).agg(**{k: (k, "first") for k in keys[1:]}, feasible=("_ok", "all"),
                                             _rows=("workload", "nunique"))
    # a point whose chunks have not all run (a sweep stopped or still running) is not judged on part of its rows
    out["feasible"] &= out.pop("_rows") == df["workload"].nunique()
    for o in OBJECTIVES:
        v = df[o].to_numpy(float)
        good = np.isfinite(v) & (v > 0)
        has = df["workload"].isin(df.loc[good, "workload"].unique()).to_numpy()  # the workloads that have it
        w = np.where(good, df["weight"].to_numpy(float), 0.0)
        part = pd.DataFrame({"point": df["point"], "lw": w * np.log(np.where(good, v, 1.0)), "w": w,
                             "missing": has & ~good})
        s = part.groupby("point").sum()
        out[o] = np.where((s["w"] > 0) & (s["missing"] == 0), np.exp(s["lw"] / s["w"].where(s["w"] > 0, 1.0)), np.nan)
    return out.reset_index()


def pareto_mask(values: np.ndarray, maximise: list[bool]) -> np.ndarray:
    """Rows of `values` (points x objectives) on the Pareto front: none other at least as good on every objective and
    better on one. Objectives to maximise are negated, then a sort on the first and a check against the front so
    far (the front is small beside the points)."""
    x = np.where(np.asarray(maximise)[None, :], -values, values)
    order = np.lexsort(x.T[::-1])
    front: list[int] = []
    for i in order:
        row = x[i]
        if not any(np.all(x[j] <= row) and np.any(x[j] < row) or np.array_equal(x[j], row) for j in front):
            front.append(i)
    mask = np.zeros(len(x), bool)
    mask[front] = True
    return mask


def elasticities(sub: pd.DataFrame, axes: list[str], y: np.ndarray) -> dict[str, float | None]:
    """Each numeric axis's partial elasticity: its coefficient in the least-squares fit of log y on every numeric
    axis's log and one indicator per level of each categorical axis (the others held: on a full grid the same as
    each axis's own slope; on an uneven set of points, infeasible ones dropped, not confounded by the others).
    None for a categorical axis, or one whose log does not vary or is not defined (a value <= 0)."""
    cols, where = [np.ones(len(sub))], {}  # numeric axis -> its column
    for a in axes:
        col = sub[a]
        if pd.api.types.is_numeric_dtype(col) and (col.to_numpy(float) > 0).all():
            lx = np.log(col.to_numpy(float))
            if np.ptp(lx) > 0:
                where[a] = len(cols)
                cols.append(lx)
        elif col.nunique() > 1:
            cols += [(col.astype(str) == v).to_numpy(float) for v in sorted(col.astype(str).unique())[1:]]
    x = np.column_stack(cols)
    if len(y) <= x.shape[1] - 1 or np.linalg.matrix_rank(x) < x.shape[1]:
        return {a: None for a in axes}  # too few points to tell the axes apart
    coef = np.linalg.lstsq(x, np.log(y), rcond=None)[0]
    return {a: (float(coef[where[a]]) if a in where else None) for a in axes}


def sobol_first(groups: np.ndarray, y: np.ndarray) -> float | None:
    """Var(E[log y | group]) / Var(log y), the points' shares as weights (None where log y does not vary)."""
    ly = np.log(y)
    total = ly.var()
    if not total > 0:
        return None
    means = pd.Series(ly).groupby(groups).transform("mean").to_numpy()
    return float(means.var() / total)


def _groups(col: pd.Series, grid: bool) -> np.ndarray:
    """The axis's levels: its values on a grid, or its quantile bins (about sqrt(n), at most 10) when sampled."""
    if grid or not pd.api.types.is_numeric_dtype(col) or col.nunique() <= 10:
        return col.astype(str).to_numpy()
    bins = max(2, min(10, int(math.sqrt(len(col)))))
    return pd.qcut(col.rank(method="first"), bins, labels=False).to_numpy()


def sensitivities(pts: pd.DataFrame, axes: list[str], objectives: list[str], grid: bool) -> list[Sensitivity]:
    """Each axis's elasticity and first-order Sobol' index on each objective over the feasible points (module
    docstring); the base system counts as an axis where the sweep has several."""
    out = []
    feas = pts[pts["feasible"]]
    for o in objectives:
        sub = feas[np.isfinite(feas[o].to_numpy(float)) & (feas[o].to_numpy(float) > 0)]
        y = sub[o].to_numpy(float)
        el = elasticities(sub, axes, y) if len(sub) else {}
        for a in axes:
            out.append(Sensitivity(axis=a, objective=o, elasticity=el.get(a),
                                   sobol_first=sobol_first(_groups(sub[a], grid), y) if len(sub) else None))
    return out


def report(out, objectives: list[str] | None = None) -> SweepReport:
    """The report of sweep results folder `out` (module docstring); `objectives` overrides the sweep's."""
    return analyse(out, objectives)[0]


def analyse(out, objectives: list[str] | None = None) -> tuple[SweepReport, pd.DataFrame, dict]:
    """(the report, every point's row of `point_table`, the manifest) of results folder `out`, read once: what the
    CLI's --plot and --format csv and the page draw beside the report."""
    man, df = load_results(out)
    sweep = man["sweep"]
    objectives = list(dict.fromkeys(objectives or sweep["objectives"]))  # an objective asked twice is one
    for o in objectives:
        if o not in OBJECTIVES:
            raise InputError(f"--objective {o!r} is not known; valid: {', '.join(OBJECTIVES)}")
    axes = list(sweep["axes"])
    pts = point_table(df, axes, sweep["constraints"])
    levels = axes + (["system"] if len(sweep["systems"]) > 1 else [])
    feas = pts[pts["feasible"]]
    have = feas[np.isfinite(feas[objectives].to_numpy(float)).all(axis=1)]
    show = ["point", "system", *axes, *objectives]
    pareto = have[pareto_mask(have[objectives].to_numpy(float), [OBJECTIVES[o][0] == "max" for o in objectives])] \
        if len(have) else have
    best = {}
    for o in objectives:
        col = feas[o].astype(float)
        if col.notna().any():
            i = col.idxmax() if OBJECTIVES[o][0] == "max" else col.idxmin()
            best[o] = _record(feas.loc[i, ["point", "system", *axes, *objectives]])
    bad = df[~df["feasible"]]
    from .run import reason_kind

    infeasible = bad.assign(r=bad["workload"] + ": " + bad["reason"].map(reason_kind)).groupby("r").size()
    rep = SweepReport(name=sweep["name"], points=man["points"], feasible_points=int(pts["feasible"].sum()),
                       rows=len(df), expected_rows=man["points"] * len(sweep["workloads"]), objectives=objectives,
                       directions={o: OBJECTIVES[o][0] for o in objectives}, axes=levels,
                       pareto=[_record(r) for _, r in pareto[show].sort_values(objectives[0]).iterrows()],
                       best=best, sensitivity=sensitivities(pts, levels, objectives, sweep["sampling"]["method"] == "grid"),
                       infeasible={k: int(v) for k, v in infeasible.sort_values(ascending=False).items()},
                       missing={o: int(n) for o in objectives if (n := feas[o].isna().sum())})
    return rep, pts, man


def plain(v):
    """A value JSON writes: numpy numbers as Python's, NaN and infinities as None."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _record(row: pd.Series) -> dict:
    return {k: plain(v) for k, v in row.items()}
