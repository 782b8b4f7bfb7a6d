"""Serving validation results: predicted against measured prefill and decode-step time, one point per plan
(the training validation's panels, `plots.validation_scatter._panel`)."""

from __future__ import annotations

from pathlib import Path

from .canvas import pyplot, save
from .validation_scatter import _panel


def serving_validation_figure(result, path: str | Path) -> Path:
    """Left the prefill (ms), right the decode step (ms), of a `validate.serving_sweep.ServeValidation`; written to
    `path` (PNG)."""
    plt = pyplot()
    df = result.table
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6), dpi=110)
    for ax, (q, label) in zip(axes, (("prefill", "prefill time"), ("decode", "decode step"))):
        rho = result.spearman[q]
        _panel(ax, (df[f"predicted_{q}_s"] * 1e3).tolist(), (df[f"measured_{q}_s"] * 1e3).tolist(),
               df["plan"].tolist(), "ms", label, result.mape_pct[q],
               f", Spearman {'n/a' if rho is None else f'{rho:.2f}'}")
    fig.suptitle(f"perfmodel validate, sweep {result.sweep}: {len(df)} serving plans on {result.nproc} "
                 f"{result.device} processes, predicted with {result.hardware}")
    fig.tight_layout()
    return save(fig, path)
