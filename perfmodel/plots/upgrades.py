"""Hardware what-if: the job's best plan on each system as stacked time bars, and the speed-up each single
upgrade of one system buys (`perfmodel.search.whatif`)."""

from __future__ import annotations

from pathlib import Path

from .breakdown import time_bars
from .canvas import pyplot, save


def upgrade_bars(ax, ups) -> None:
    """Horizontal bars: speed-up of each upgraded variant over the baseline (1 = no gain), best layout written."""
    rows = [r for r in ups.rows[1:] if r.speedup is not None]
    names = [r.system for r in rows]
    ax.barh(names, [r.speedup for r in rows], color="tab:blue", gid="whatif:speedup")
    ax.axvline(1.0, color="k", lw=1)
    for y, r in enumerate(rows):
        ax.annotate(f"{r.speedup:.2f}x  {r.layout}", (r.speedup, y), textcoords="offset points", xytext=(3, 0),
                    va="center", fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.45 * max([r.speedup for r in rows] + [1.0]))
    ax.set_xlabel("speed-up of the step over the baseline (x)")
    ax.set_title(f"which upgrade of {ups.rows[0].system} buys most\n(each re-searched for its best plan)", fontsize=10)


def whatif_axes(across, ups=None):
    """The figure (not written): step time per system (its best plan, stacked by part), and optionally the
    upgrade speed-ups of one system."""
    plt = pyplot()
    n = len(across.estimates)
    fig = plt.figure(figsize=(max(11.0, 3 + 1.0 * n + (5 if ups else 0)), 6.8), dpi=100)
    grid = fig.add_gridspec(1, 2 if ups else 1, width_ratios=(max(n, 3), 4) if ups else None)
    ax = fig.add_subplot(grid[0, 0])
    if across.estimates:
        time_bars(ax, across.estimates)
        ax.set_title("step time of the best plan on each system", fontsize=10)
    missing = [f"{r.system}: {r.note}" for r in across.rows if r.layout is None]
    if missing:  # below the panels, outside tight_layout's reckoning
        import textwrap

        fig.text(0.01, 0.01, textwrap.fill("left out: " + "; ".join(missing), 200), fontsize=7, va="bottom")
    if ups:
        upgrade_bars(fig.add_subplot(grid[0, 1]), ups)
    fig.suptitle(f"{across.model}: {across.gpus} devices, global batch {across.global_batch} x {across.seq_len} "
                 f"tokens, {across.precision}")
    fig.tight_layout(rect=(0, 0.06 if missing else 0, 1, 1))
    return fig


def whatif_figure(across, path: str | Path, ups=None) -> Path:
    """Draw `whatif_axes` and write it atomically to `path` (PNG)."""
    return save(whatif_axes(across, ups), path)
