"""Prediction intervals that hold on runs they were not built from: per stack and per regime, from the residuals of
the other source groups, at the quantile level whose held-out coverage reaches the target.

The residual of a run is measured / predicted - 1 (the stack profiles alone, nothing fitted: what a prediction
without `calibrate --from-runs` quotes). A source group (one cluster and software stack, one paper's table) is
the unit a new user is: its runs share their unknowns, so every quantile weights each group once (a group of 216
runs counts as much as one of 5), and coverage is judged per held-out group.

- `build` (the intervals of every stack): a stack's bounds are the weighted quantiles of its own runs where they
  come from at least MIN_GROUPS groups, else of all runs; a regime (`spec.stack.REGIMES`: pp_or_cp, low_precision,
  large) gets its own band over all stacks' runs in it (again at least MIN_GROUPS groups), kept where it is wider,
  so a plan in that regime quotes the union (`Interval.around`).
- `held_out` (the claim docs/stacks.md makes): each group's runs against the intervals built without that group.
- `choose_level`: the narrowest of LEVELS (lower-tail quantile q; bounds at q and 1 - q) whose held-out coverage,
  groups weighted once, reaches TARGET. That held-out share at the level chosen is written as `Interval.held_out`
  (one figure for all stacks; the level was chosen among four on the same groups, so it is slightly hopeful, as
  docs/stacks.md says); `coverage` stays the quantiles' nominal level.
This module imports no torch; pandas only where `benchmarks/published_runs.py` calls it.
"""

from __future__ import annotations

import numpy as np

from ..spec.stack import REGIMES, STACKS, Band, Interval

LEVELS = (0.10, 0.075, 0.05, 0.025)  # candidate lower-tail quantiles: 80%, 85%, 90%, 95% nominal
TARGET = 0.80  # the coverage the intervals are stated at
MIN_GROUPS = 3  # a stack's or a regime's own bounds need residuals from this many groups


def weighted_bounds(e: np.ndarray, w: np.ndarray, q: float) -> tuple[float, float]:
    """(low, high): the q and 1 - q weighted quantiles of the residuals e (dimensionless ratios, measured /
    predicted - 1), by the midpoint rule (each residual placed at the middle of its cumulative weight, linear
    between: Hyndman & Fan 1996's type 5 extended to weights), clipped to <= 0 and >= 0 as an interval around
    the prediction must be."""
    order = np.argsort(e)
    cum = (np.cumsum(w[order]) - 0.5 * w[order]) / w.sum()
    lo, hi = (float(np.interp(x, cum, e[order])) for x in (q, 1 - q))
    return min(lo, 0.0), max(hi, 0.0)


def group_weights(groups: np.ndarray) -> np.ndarray:
    """1 / (runs of the run's group): each group weighs one."""
    _, inv, counts = np.unique(groups, return_inverse=True, return_counts=True)
    return 1.0 / counts[inv]


def build(resid, groups, stacks, regimes, q: float, source: str, held: float | None = None) -> dict[str, Interval]:
    """The interval of every stack (STACKS) at level q from runs with residuals `resid`, source `groups`, `stacks`
    and `regimes` (a tuple of REGIMES names per run), `held` its held-out coverage (`choose_level`); module
    docstring."""
    resid, groups, stacks = np.asarray(resid, float), np.asarray(groups), np.asarray(stacks)
    w = group_weights(groups)
    bands = {}
    for r in REGIMES:
        inside = np.array([r in x for x in regimes], bool)
        if len(set(groups[inside])) >= MIN_GROUPS:
            lo, hi = weighted_bounds(resid[inside], group_weights(groups[inside]), q)
            bands[r] = Band(low=round(lo, 3), high=round(hi, 3), rows=int(inside.sum()),
                            groups=len(set(groups[inside])))
    out = {}
    for s in STACKS:
        mine = stacks == s
        own = len(set(groups[mine])) >= MIN_GROUPS
        sel = mine if own else np.ones(len(resid), bool)
        lo, hi = weighted_bounds(resid[sel], group_weights(groups[sel]), q)
        lo, hi = round(lo, 3), round(hi, 3)  # as written: a band wider only by rounding is not wider
        wider = {r: b for r, b in bands.items() if b.low < lo or b.high > hi}
        out[s] = Interval(low=lo, high=hi, coverage=round(1 - 2 * q, 3),
                          held_out=None if held is None else round(held, 3), rows=int(sel.sum()),
                          source=f"{source}: the {q:.3g}/{1 - q:.3g} quantiles of measured/predicted - 1 over "
                                 f"{'its own rows' if own else 'all stacks rows'}, each source group weighted once "
                                 f"(profile alone); held_out: the share of a group's rows inside the interval built "
                                 f"without it (perfmodel.calibrate.intervals)",
                          regimes=wider)
    return out


def held_out(resid, groups, stacks, regimes, q: float) -> dict[str, float]:
    """Per source group, the share of its runs inside the interval (with its regimes' bands) that `build` makes
    of every other group at level q."""
    resid, groups, stacks = np.asarray(resid, float), np.asarray(groups), np.asarray(stacks)
    out = {}
    for g in np.unique(groups):
        rest = groups != g
        bands = build(resid[rest], groups[rest], stacks[rest], [r for r, k in zip(regimes, rest) if k], q, "")
        inside = []
        for i in np.flatnonzero(~rest):
            lo, hi, _ = bands[stacks[i]].around(regimes[i])
            inside.append(lo <= resid[i] <= hi)
        out[str(g)] = float(np.mean(inside))
    return out


def choose_level(resid, groups, stacks, regimes) -> tuple[float, float]:
    """(q, its held-out coverage with groups weighted once): the first of LEVELS reaching TARGET, else the last."""
    for q in LEVELS:
        cover = float(np.mean(list(held_out(resid, groups, stacks, regimes, q).values())))
        if cover >= TARGET:
            break
    return q, cover
