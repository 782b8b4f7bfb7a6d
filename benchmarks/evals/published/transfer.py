"""Whether the step-time model transfers: signed error by stack release, by GPU (or chip) family, and by family and
precision, each cell checked against a band (what the accuracy goals ask: every (stack, release) group and every
family's signed median within +-5%; the power model's clock per family and precision within +-3%).

Every table takes `published_runs.priced`'s per-row frame (error = predicted / measured - 1; its `release` column is
the plan's stack as the runs table names it through spec.stack.frameworks, a release line's `name@version` included;
`gpu_family` the accelerator's first word) and, where given, the same rows predicted leave-one-group-out (a group is a
source table, one per container for Megatron-Bridge's: source x release).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def family(accelerator: str) -> str:
    """'H100-SXM5-80GB' -> 'H100', 'A100-SXM4-80GB' -> 'A100', 'TPU-v5p' -> 'TPU-v5p', 'MI300X' -> 'MI300X'."""
    name = str(accelerator).removeprefix("AMD ").strip()
    return name if name.startswith("TPU") else name.split("-")[0].split(" ")[0]


def signed_table(df: pd.DataFrame, key: str | list[str], band: float, held: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per value of `key` (a column or columns of df): rows, MAPE %, signed median % (predicted / measured - 1) and
    whether that median lies within +-band %; with `held` (the rows predicted leave-one-group-out, same row_id) its
    MAPE % and signed median % too. The 'ALL' row: every priced row."""
    ok = df.dropna(subset=["predicted_s"])
    h = None if held is None else held.dropna(subset=["predicted_s"]).set_index("row_id")["error"]

    def agg(g: pd.DataFrame) -> pd.Series:
        e = 100 * g["error"]
        out = {"rows": len(g), "MAPE %": e.abs().mean(), "signed median %": e.median(),
               f"within +-{band:g}%": "yes" if abs(e.median()) <= band else "NO"}
        if h is not None:
            he = 100 * h.reindex(g["row_id"]).dropna()
            out |= {"LOGO MAPE %": he.abs().mean() if len(he) else np.nan,
                    "LOGO signed median %": he.median() if len(he) else np.nan}
        return pd.Series(out)

    rows = {k if not isinstance(k, tuple) else " ".join(map(str, k)): agg(g) for k, g in ok.groupby(key, sort=True)}
    rows["ALL"] = agg(ok)
    out = pd.DataFrame(rows).T
    out["rows"] = out["rows"].astype(int)
    return out


def print_transfer(df: pd.DataFrame, what: str, held: pd.DataFrame | None = None) -> None:
    """The three tables: by stack release (+-5%), by family (+-5%), by family and precision (+-3%, the power
    model's check), with `what` naming the set."""
    fmt = lambda x: f"{x:.1f}"  # noqa: E731
    for key, band, title in (("release", 5.0, "stack and release (the mapping of spec.stack.frameworks)"),
                             ("gpu_family", 5.0, "GPU / chip family"),
                             (["gpu_family", "precision"], 3.0, "family and precision (the power model's clock check)")):
        print(f"\n{what}, by {title}: predicted / measured - 1, signed median within +-{band:g}%")
        print(signed_table(df, key, band, held).to_string(float_format=fmt))
