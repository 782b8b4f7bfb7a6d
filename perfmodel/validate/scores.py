"""The scores a validation reports: signed error, MAPE and Spearman's rank correlation of predicted against
measured (shared by the training and serving tables and the trace calibration's)."""

from __future__ import annotations

import math
import warnings


def error_pct(predicted: float, measured: float) -> float:
    """Signed relative error of a prediction, percent: 100 (predicted - measured) / measured."""
    return 100.0 * (predicted - measured) / measured


def mape(predicted, measured) -> float:
    """Mean absolute percentage error, percent: 100/n sum |p - m| / m (m > 0)."""
    import pandas as pd

    p, m = pd.Series(predicted, dtype=float).to_numpy(), pd.Series(measured, dtype=float).to_numpy()
    if len(p) != len(m) or len(p) == 0:
        raise ValueError(f"mape needs two equal, non-empty lists; got {len(p)} and {len(m)} values")
    return float(100.0 * (abs(p - m) / m).mean())


def spearman(predicted, measured) -> float | None:
    """Spearman rank correlation of predicted vs measured (scipy.stats.spearmanr; ties get average ranks).
    None where undefined: fewer than 2 points, or a constant list."""
    from scipy.stats import spearmanr

    if len(predicted) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on constant input and returns nan
        rho = spearmanr(predicted, measured).statistic
    return None if rho is None or math.isnan(rho) else float(rho)
