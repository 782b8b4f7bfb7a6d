"""Where measured memory peaks lie around the estimate: per stack profile and memory view, the 0.1/0.9 quantiles of
measured / predicted - 1 over the measured-peak development rows (benchmarks/measured_memory.py), each source group
weighted once, as the step-time intervals are (`calibrate.runs.intervals`). The fit verdict reads the reserved view's
band (cost.memory.fit.memory_limits): a plan is tight when the device's room lies inside it.

- `residual_rows`: the benchmark's per-row table in long form, one residual per (row, view): the view a row
  measured, and the other view where its source states that one too (nanotron's and SimuMax's reserved peaks).
- `build_bands`: a stack's own rows where they come from at least MIN_GROUPS source groups, else every stack's
  rows in that view.
- `held_out_share`: each source group's peaks against the band built without that group (leave-one-group-out
  coverage: the claim a band makes for a new user's stack).
This module imports no torch; pandas only on the benchmark's table. Writing the bands into the stack profiles is the
benchmarks' job (their stack-blocks tool), outside the package.
"""

from __future__ import annotations

import numpy as np

from ...spec.stack.profile import STACKS, MemoryBand
from .intervals import group_weights, weighted_bounds

Q = 0.10  # lower-tail quantile: bounds at 0.1 and 0.9 (80% nominal coverage, as the step-time intervals)
MIN_GROUPS = 2  # a stack's own band needs residuals from this many source groups
VIEWS = ("allocated", "reserved")


def residual_rows(table) -> "pd.DataFrame":  # noqa: F821 (pandas only here)
    """(row_id, group, stack, view, measured_gib, predicted_gib, residual = measured / predicted - 1): each row
    of benchmarks/measured_memory.py's table (columns row_id, group, stack (a profile or a release line: its
    profile is kept), view, measured_gib, predicted_gib, measured_other_gib, predicted_other_gib) in its own view,
    plus its other view where measured."""
    import pandas as pd

    from ...spec.stack.release import profile_of

    ok = table[table["predicted_gib"].notna()].assign(stack=lambda d: [profile_of(s) for s in d["stack"]])
    own = ok[["row_id", "group", "stack", "view", "measured_gib", "predicted_gib"]]
    both = ok[ok["measured_other_gib"].notna() & ok["predicted_other_gib"].notna()]
    other = pd.DataFrame({"row_id": both["row_id"], "group": both["group"], "stack": both["stack"],
                          "view": np.where(both["view"] == "allocated", "reserved", "allocated"),
                          "measured_gib": both["measured_other_gib"], "predicted_gib": both["predicted_other_gib"]})
    out = pd.concat([own, other], ignore_index=True)
    out["residual"] = out["measured_gib"] / out["predicted_gib"] - 1
    return out


def band_of(resid, groups, q: float = Q) -> tuple[float, float]:
    """(low, high): the q and 1 - q quantiles of `resid`, each group weighted once (`intervals.weighted_bounds`:
    low <= 0 <= high)."""
    lo, hi = weighted_bounds(np.asarray(resid, float), group_weights(np.asarray(groups)), q)
    return round(lo, 3), round(hi, 3)


def held_out_share(resid, groups, q: float = Q) -> float | None:
    """Leave-one-group-out coverage: the share of each group's residuals inside the band of the other groups'
    residuals, groups weighted once (None with fewer than two groups)."""
    resid, groups = np.asarray(resid, float), np.asarray(groups)
    names = sorted(set(groups))
    if len(names) < 2:
        return None
    shares = []
    for g in names:
        lo, hi = band_of(resid[groups != g], groups[groups != g], q)
        mine = resid[groups == g]
        shares.append(np.mean((mine >= lo) & (mine <= hi)))
    return round(float(np.mean(shares)), 3)


def build_bands(rows, source: str, q: float = Q) -> dict[str, dict[str, MemoryBand]]:
    """stack -> view -> MemoryBand from `residual_rows`' table: the stack's own residuals in that view where they
    come from at least MIN_GROUPS groups, else all stacks' residuals in that view (module docstring)."""
    out: dict[str, dict[str, MemoryBand]] = {s: {} for s in STACKS}
    for view in VIEWS:
        v = rows[rows["view"] == view]
        if v.empty:
            continue
        held = held_out_share(v["residual"], v["group"], q)
        for s in STACKS:
            mine = v[v["stack"] == s]
            own = mine["group"].nunique() >= MIN_GROUPS
            sel = mine if own else v
            lo, hi = band_of(sel["residual"], sel["group"], q)
            out[s][view] = MemoryBand(
                low=lo, high=hi, coverage=round(1 - 2 * q, 3), held_out=held, rows=len(sel),
                groups=sel["group"].nunique(),
                source=f"{source}: the {q:.3g}/{1 - q:.3g} quantiles of measured/predicted - 1 of the {view} peaks "
                       f"of {'its own rows' if own else 'every stack'} ({', '.join(sorted(set(sel['group'])))}), "
                       f"each source group weighted once; held_out: the share of a group's peaks inside the band "
                       f"built without it, all stacks (perfmodel.calibrate.runs.memory_band)")
    return out
