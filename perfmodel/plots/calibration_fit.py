"""`perfmodel calibrate --plot`: every microbenchmark against what the fitted formula predicts for it, one
colour per quantity (GEMM, attention, memory, collectives, whole layers), with y = x and +-10% / +-20% bands."""

from __future__ import annotations

from pathlib import Path

from .canvas import pyplot, save
from .validation_scatter import BANDS

COLOURS = {"gemm": "tab:blue", "attention": "tab:orange", "memory": "tab:green", "comm": "tab:red",
           "layer": "tab:purple"}


def calibration_axes(raw):
    """The figure (not written) for a calibration's raw file (`calibrate.machine.raw.RawFile`)."""
    plt = pyplot()
    points = raw.fit.points
    fig, ax = plt.subplots(figsize=(7.5, 6.8), dpi=100)
    lo = min(min(p.measured_s, p.predicted_s) for p in points) / 1.5
    hi = max(max(p.measured_s, p.predicted_s) for p in points) * 1.5
    for band, alpha in zip(BANDS, (0.22, 0.10)):
        ax.fill_between([lo, hi], [lo * (1 - band), hi * (1 - band)], [lo * (1 + band), hi * (1 + band)],
                        color="tab:green", alpha=alpha, lw=0, label=f"within ±{100 * band:.0f}%")
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="predicted = measured")
    for quantity, colour in COLOURS.items():
        pts = [p for p in points if p.quantity == quantity]
        if not pts:
            continue
        errs = sorted(abs(p.rel_error) for p in pts)
        ax.scatter([p.measured_s for p in pts], [p.predicted_s for p in pts], s=14, color=colour,
                   gid=f"calibration:{quantity}",
                   label=f"{quantity} ({len(pts)}; median |err| {100 * errs[len(errs) // 2]:.1f}%)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel("measured (s)")
    ax.set_ylabel("predicted by the fitted spec (s)")
    env = raw.measurements.env
    ax.set_title(f"calibration fit: {env.device_name} x {env.nproc} ({env.device_type})", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def calibration_figure(raw, path: str | Path) -> Path:
    """Draw `calibration_axes(raw)` and write it atomically to `path` (PNG)."""
    return save(calibration_axes(raw), path)
