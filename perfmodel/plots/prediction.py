"""`perfmodel predict --plot`: a plan's time breakdown, memory against capacity, and its pipeline schedule."""

from __future__ import annotations

from pathlib import Path

from .breakdown import as_mapping, memory_bars, time_bars
from .canvas import pyplot, save
from .gantt import gantt


def estimate_axes(estimates):
    """Figure: time and memory breakdowns of one or several estimates (a list, or a dict label -> Estimate)
    side by side, and the first one's pipeline schedule underneath."""
    plt = pyplot()
    est = as_mapping(estimates)
    first = next(iter(est.values()))
    width = max(11.0, 3 + 1.6 * len(est) * 2)
    fig = plt.figure(figsize=(width, 8.2), dpi=110)
    grid = fig.add_gridspec(2, 2, height_ratios=(1.25, 1))
    time_bars(fig.add_subplot(grid[0, 0]), est)
    memory_bars(fig.add_subplot(grid[0, 1]), est)
    gantt(fig.add_subplot(grid[1, :]), first)
    models = sorted({e.model for e in est.values()})
    fig.suptitle(f"{', '.join(models)} on {first.gpus} x {first.hardware}: global batch {first.plan.global_batch} "
                 f"x {first.plan.seq_len} tokens, {first.plan.precision}")
    fig.tight_layout()
    return fig


def estimate_figure(estimates, path: str | Path) -> Path:
    """Draw `estimate_axes(estimates)` and write it atomically to `path` (PNG)."""
    return save(estimate_axes(estimates), path)
