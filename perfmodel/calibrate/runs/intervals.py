"""Prediction intervals that hold on runs they were not built from: per stack and per regime, from the residuals of
the other source groups, at the quantile level whose held-out coverage reaches the target.

The residual of a run is measured / predicted - 1 (the stack profiles alone, nothing fitted: what a prediction
without `calibrate --from-runs` quotes). A source group (one cluster and software stack, one paper's table) is
the unit a new user is: its runs share their unknowns, so every quantile weights each group once (a group of 216
runs counts as much as one of 5), and coverage is judged per held-out group.

- `build` (the intervals of every stack): a stack's bounds are the weighted quantiles of its own runs where they
  come from at least MIN_GROUPS groups, else of all runs; a regime (`spec.stack.profile.REGIMES`: pp_or_cp, low_precision,
  large) gets its own band over all stacks' runs in it (again at least MIN_GROUPS groups), kept where it is wider,
  so a plan in that regime quotes the union (`Interval.around`).
- `held_out` (the claim docs/stacks.md makes): each group's runs against the intervals built without that group.
- `extrapolation_widths` (intervals that know when they extrapolate): the runs of one hardware generation,
  one precision, the largest jobs, or one stack release (a framework version), each held out in turn and predicted with the interval built from the others;
  for each way (`spec.stack.profile.EXTRAPOLATIONS`) the least widening of both bounds that brings those held-out runs to
  TARGET coverage (folds weighted equally, groups once in each). Every interval records what its runs span
  (`Domain`: generations, precision classes, most devices, stack releases) and these widths; a plan outside the domain quotes the
  interval widened by them (`Interval.bounds`), and says so. The widths are chosen on the dev sets' own folds, as
  the level is: a slightly hopeful figure, which the published-runs benchmark reports leave-one-generation-out.
- `choose_level`: the narrowest of LEVELS (lower-tail quantile q; bounds at q and 1 - q) whose held-out coverage,
  groups weighted once, reaches TARGET. That held-out share at the level chosen is written as `Interval.held_out`
  (one figure for all stacks; the level was chosen among four on the same groups, so it is slightly hopeful, as
  docs/stacks.md says); `coverage` stays the quantiles' nominal level.
This module imports no torch; pandas only where the published-runs benchmark calls it.
"""

from __future__ import annotations

import numpy as np

from ...spec.stack.profile import EXTRAPOLATIONS, LARGE_GPUS, REGIMES, STACKS, Band, Domain, Interval, precision_class

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


# `extrapolation_widths`' device folds: the jobs above each cut held out, the rest kept; the "large" regime's edge
# and 16 eight-GPU nodes, where data-parallel rings first leave a leaf switch of the dev set's clusters
DEVICE_CUTS = (128, LARGE_GPUS)
WIDTH_STEP = 0.005  # widths are found on this grid (relative step time)


def domain_of(dims) -> Domain | None:
    """What the runs with `dims` (per run: (generation, precision, devices[, stack])) span; None without dims."""
    if dims is None or len(dims) == 0:
        return None
    return Domain(generations=sorted({d[0] for d in dims}), precisions=sorted({precision_class(d[1]) for d in dims}),
                  max_devices=int(max(d[2] for d in dims)), stacks=sorted({d[3] for d in dims if len(d) > 3 and d[3]}))


def build(resid, groups, stacks, regimes, q: float, source: str, held: float | None = None, dims=None,
          widths: dict | None = None) -> dict[str, Interval]:
    """The interval of every stack (STACKS) at level q from runs with residuals `resid`, source `groups`, `stacks`
    and `regimes` (a tuple of REGIMES names per run), `held` its held-out coverage (`choose_level`), `dims` (per
    run: hardware generation, precision, devices: the interval's Domain) and the extrapolation `widths`
    (`extrapolation_widths`); module docstring."""
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
                                 f"without it (perfmodel.calibrate.runs.intervals)",
                          regimes=wider, domain=domain_of(None if dims is None else [dims[i] for i in
                                                                                 np.flatnonzero(sel)]),
                          extrapolation={k: round(v, 3) for k, v in (widths or {}).items()})
    return out


def held_out(resid, groups, stacks, regimes, q: float, dims=None, widths=None) -> dict[str, float]:
    """Per source group, the share of its runs inside the interval (with its regimes' bands, widened by `widths`
    where they lie outside the others' domain) that `build` makes of every other group at level q."""
    resid, groups, stacks = np.asarray(resid, float), np.asarray(groups), np.asarray(stacks)
    return {str(g): _inside(resid, groups, stacks, regimes, q, dims, widths, groups != g) for g in np.unique(groups)}


def held_out_by_value(resid, groups, stacks, regimes, dims, q: float, values) -> dict[str, dict]:
    """Per value of `values` (one per run, e.g. its hardware generation): its runs against the intervals the other
    runs make at level q, as {rows, unwidened: share inside without extrapolation widths, widened: share inside
    with the widths the other runs give (`extrapolation_widths`) and their domain, widths}."""
    resid, groups, stacks, values = np.asarray(resid, float), np.asarray(groups), np.asarray(stacks), np.asarray(values)
    out = {}
    for v in np.unique(values):
        rest = values != v
        sub = [i for i in np.flatnonzero(rest)]
        widths = extrapolation_widths(resid[rest], groups[rest], stacks[rest], [regimes[i] for i in sub],
                                      [dims[i] for i in sub], q)
        out[str(v)] = {"rows": int((~rest).sum()), "widths": widths,
                       "unwidened": _inside(resid, groups, stacks, regimes, q, None, None, rest),
                       "widened": _inside(resid, groups, stacks, regimes, q, dims, widths, rest)}
    return out


def _inside(resid, groups, stacks, regimes, q, dims, widths, train) -> float:
    """The share of the runs outside `train` inside the interval the runs of `train` make, groups weighted once."""
    need = _needs(resid, groups, stacks, regimes, q, dims, widths, train, ~train)
    w = group_weights(groups[~train])
    return float((w * (need <= 0)).sum() / w.sum())


def _needs(resid, groups, stacks, regimes, q, dims, widths, train, test) -> np.ndarray:
    """For each run of `test`, how much wider (each way) the interval built from the runs of `train` must be to
    hold it: 0 where it is inside."""
    sub = lambda x: [x[i] for i in np.flatnonzero(train)] if x is not None else None  # noqa: E731
    bands = build(resid[train], groups[train], stacks[train], sub(regimes), q, "", dims=sub(dims), widths=widths)
    need = []
    for i in np.flatnonzero(test):
        band = bands[stacks[i]]
        if dims is None:
            lo, hi, _ = band.around(regimes[i])
        else:
            lo, hi, _, _ = band.bounds(regimes[i], *dims[i])
        need.append(max(lo - resid[i], resid[i] - hi, 0.0))
    return np.array(need)


def extrapolation_folds(dims) -> dict[str, list[np.ndarray]]:
    """Per way of EXTRAPOLATIONS, the runs held out in each fold (boolean masks): each hardware generation, each
    precision class, the jobs above each of DEVICE_CUTS (kept: the runs at or below it), and each stack release
    (where dims carry one: a framework version the others never ran); folds whose held-out or kept runs are empty
    are left out."""
    gen = np.array([d[0] for d in dims])
    prec = np.array([precision_class(d[1]) for d in dims])
    dev = np.array([d[2] for d in dims])
    rel = np.array([d[3] if len(d) > 3 else "" for d in dims])
    folds = {"generation": [gen == v for v in np.unique(gen)], "precision": [prec == v for v in np.unique(prec)],
             "devices": [dev > c for c in DEVICE_CUTS], "release": [rel == v for v in np.unique(rel) if v]}
    return {k: [m for m in v if 0 < m.sum() < len(m)] for k, v in folds.items()}


def extrapolation_widths(resid, groups, stacks, regimes, dims, q: float) -> dict[str, float]:
    """Per way of EXTRAPOLATIONS, the least widening w (on a WIDTH_STEP grid) of both bounds for which the runs
    held out that way (`extrapolation_folds`), each predicted from the interval the other runs make at level q,
    reach TARGET coverage, folds weighted equally and groups once in each (0 where they reach it unwidened); a way
    with no fold (every run of one generation) takes the widest of the others. A devices fold keeps only the smaller
    jobs (a plan extrapolates up, not down)."""
    resid, groups, stacks = np.asarray(resid, float), np.asarray(groups), np.asarray(stacks)
    out, unknown = {}, []
    for way, masks in extrapolation_folds(dims).items():
        if not masks:
            unknown.append(way)  # runs of one generation cannot show what a step to another costs
            continue
        needs = [(_needs(resid, groups, stacks, regimes, q, None, None, ~m, m), group_weights(groups[m]))
                 for m in masks]

        def cover(w):
            return float(np.mean([(gw * (n <= w + 1e-12)).sum() / gw.sum() for n, gw in needs]))

        w = 0.0
        while cover(w) < TARGET and w < 2.0:
            w += WIDTH_STEP
        out[way] = round(w, 3)
    # a way the runs cannot measure (all of one generation, one precision, or one size) is taken to be at least as
    # far as the farthest step they can measure: unknown, so not narrower than what is known
    widest = max(out.values(), default=0.0)
    return {way: out.get(way, widest) for way in EXTRAPOLATIONS}


def choose_level(resid, groups, stacks, regimes, dims=None, widths=None) -> tuple[float, float]:
    """(q, its held-out coverage with groups weighted once): the first of LEVELS reaching TARGET, else the last."""
    for q in LEVELS:
        cover = float(np.mean(list(held_out(resid, groups, stacks, regimes, q, dims, widths).values())))
        if cover >= TARGET:
            break
    return q, cover
