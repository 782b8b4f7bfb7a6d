"""Search results: step time against GPU count, the time-memory Pareto front, a heat map over two layout
axes, and the time breakdown of the best plans."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .breakdown import time_bars
from .canvas import pyplot, save


def scaling(ax, result) -> None:
    """The fastest plan's step time per GPU count against perfect scaling from the smallest count."""
    from matplotlib import ticker

    best = result.table.sort_values("step_time_s").groupby("gpus", as_index=False).first()
    ax.plot(best["gpus"], best["step_time_s"], "k-o", label="fastest plan", gid="search:fastest")
    g0, t0 = best["gpus"].iloc[0], best["step_time_s"].iloc[0]
    ax.plot(best["gpus"], t0 * g0 / best["gpus"], "k:", label="perfect scaling")
    for _, r in best.iterrows():
        ax.annotate(f"tp{r.tp} pp{r.pp} cp{r.cp} dp{r.dp}\nMFU {100 * r.mfu:.0f}%", (r.gpus, r.step_time_s),
                    textcoords="offset points", xytext=(4, 6), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        axis.set_minor_formatter(ticker.FormatStrFormatter("%g") if axis is ax.yaxis else ticker.NullFormatter())
    ax.set_xlabel("GPUs")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title("fastest plan per GPU count", fontsize=10)
    ax.legend(fontsize=8)


def pareto(ax, result) -> None:
    """Every feasible plan's step time against its memory per device, one colour per GPU count, the Pareto
    front (step time, GPUs, memory) drawn per GPU count, and the device capacity."""
    plt = pyplot()
    df, front = result.table, result.pareto()
    counts = sorted(df["gpus"].unique())
    colours = plt.cm.viridis([i / max(1, len(counts) - 1) for i in range(len(counts))])
    for colour, gpus in zip(colours, counts):
        pts, fr = df[df["gpus"] == gpus], front[front["gpus"] == gpus].sort_values("memory_gib")
        ax.scatter(pts["memory_gib"], pts["step_time_s"], s=4, alpha=0.15, color=colour)
        ax.step(fr["memory_gib"], fr["step_time_s"], where="post", color=colour, lw=1.5, marker="o", ms=3,
                label=f"{gpus} GPUs: Pareto front", gid=f"search:pareto:{gpus}")
    ax.axvline(result.system.accelerator.hbm_capacity_gib, color="crimson", ls="--", lw=1, label="device memory")
    ax.set_yscale("log")
    ax.set_xlabel("memory per device (GiB)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title("step time vs. memory (faint: every feasible plan)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")  # not "best": it scans every point


def best_gpus(result) -> int:
    """GPU count of the search's fastest plan."""
    return int(result.table.sort_values("step_time_s")["gpus"].iloc[0])


def heatmap_table(result, x: str = "pp", y: str = "tp", gpus: int | None = None):
    """Fastest feasible step time (s) for each (y, x) pair at `gpus` (default: the best plan's GPU count),
    minimised over every other layout choice; NaN where no plan fits. A DataFrame, y down, x across."""
    df = result.table
    gpus = best_gpus(result) if gpus is None else gpus
    return df[df["gpus"] == gpus].pivot_table(index=y, columns=x, values="step_time_s", aggfunc="min").sort_index()


def heatmap(ax, result, x: str = "pp", y: str = "tp", gpus: int | None = None) -> None:
    """`heatmap_table` as coloured cells (brighter: faster), each cell's step time written in it."""
    plt = pyplot()
    gpus = best_gpus(result) if gpus is None else gpus
    grid = heatmap_table(result, x, y, gpus)
    values = grid.to_numpy(float)
    cmap = plt.get_cmap("viridis_r").with_extremes(bad="0.9")
    image = ax.imshow(values, cmap=cmap, aspect="auto", gid="search:heatmap")
    plt.colorbar(image, ax=ax, label="fastest step time (s)")
    best = np.nanmin(values)
    for (i, j), v in np.ndenumerate(values):
        text = "no plan" if np.isnan(v) else f"{v:.3g}" + (" *" if v == best else "")
        dark = not np.isnan(v) and v >= np.nanmedian(values)
        ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
    ax.set_yticks(range(len(grid.index)), [str(c) for c in grid.index])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(f"fastest step time per {y} x {x} at {gpus} GPUs (*: best; no plan: none fits or none exists)",
                 fontsize=9)


def best_estimates(result, k: int = 4) -> dict:
    """The top k plans of the search as Estimates, labelled by rank and layout."""
    from ..spec.plan.layout import layout_label

    out = {}
    for i in range(min(k, len(result.table))):
        e = result.estimate(i)
        out[f"#{i + 1} {layout_label(e.plan)} ({e.gpus} GPUs)"] = e
    return out


def search_axes(result, top: int = 4):
    """The figure (not written): scaling and Pareto front (top), heat map and the best plans' breakdown."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(15, 10), dpi=100)
    scaling(axes[0, 0], result)
    pareto(axes[0, 1], result)
    heatmap(axes[1, 0], result)
    time_bars(axes[1, 1], best_estimates(result, top))
    axes[1, 1].set_title(f"the {min(top, len(result.table))} best plans: where the step time goes", fontsize=10)
    fig.suptitle(f"{result.model.name} on {result.system.name}: global batch {result.job.global_batch} x "
                 f"{result.job.seq_len} tokens, {result.feasible} feasible plans")
    fig.tight_layout()
    return fig


def search_figure(result, path: str | Path) -> Path:
    """Draw `search_axes(result)` and write it atomically to `path` (PNG)."""
    return save(search_axes(result), path)
