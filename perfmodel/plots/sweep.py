"""A sweep's report drawn: every feasible point on the first two objectives with the Pareto front marked, and each
axis's first-order Sobol' index per objective (`perfmodel.sweep.analysis`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .canvas import pyplot, save


def front_axes(ax, rep, pts) -> None:
    """Feasible points (grey) and the Pareto front (a line through its points, best first) on the first two
    objectives (the first alone: its values by point)."""
    feas = pts[pts["feasible"]]
    objs = rep.objectives
    front = rep.pareto
    if len(objs) == 1:
        ax.scatter(feas["point"], feas[objs[0]], s=8, color="0.6", gid="sweep:points")
        ax.scatter([p["point"] for p in front], [p[objs[0]] for p in front], s=30, color="tab:red", gid="sweep:front")
        ax.set_xlabel("point")
        ax.set_ylabel(objs[0])
        return
    x, y = objs[0], objs[1]
    ax.scatter(feas[x], feas[y], s=8, color="0.6", label=f"feasible points ({len(feas)})", gid="sweep:points")
    fx, fy = [p[x] for p in front], [p[y] for p in front]
    order = np.argsort(fx)
    ax.plot(np.asarray(fx)[order], np.asarray(fy)[order], "o-", color="tab:red", ms=5,
            label=f"Pareto front ({len(front)})", gid="sweep:front")
    ax.set_xlabel(f"{x} ({rep.directions[x]})")
    ax.set_ylabel(f"{y} ({rep.directions[y]})")
    ax.legend(fontsize=8)


def sensitivity_axes(ax, rep) -> None:
    """Grouped bars: each axis's first-order Sobol' index (share of log-objective variance) per objective."""
    axes, objs = rep.axes, rep.objectives
    width = 0.8 / max(len(objs), 1)
    for k, o in enumerate(objs):
        vals = [next((s.sobol_first or 0.0 for s in rep.sensitivity if s.axis == a and s.objective == o), 0.0)
                for a in axes]
        ax.bar(np.arange(len(axes)) + k * width - 0.4 + width / 2, vals, width, label=o, gid=f"sweep:sobol:{o}")
    ax.set_xticks(np.arange(len(axes)), axes, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("first-order Sobol' index")
    ax.legend(fontsize=8)


def sweep_axes(rep, pts):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 5), dpi=100, width_ratios=(3, 2))
    front_axes(a, rep, pts)
    a.set_title("feasible points and the Pareto front", fontsize=10)
    if rep.axes:
        sensitivity_axes(b, rep)
        b.set_title("which axis moves each objective", fontsize=10)
    else:
        b.set_axis_off()
    fig.suptitle(f"sweep {rep.name}: {rep.feasible_points} of {rep.points} points feasible")
    fig.tight_layout()
    return fig


def sweep_figure(rep, pts, path: str | Path) -> Path:
    """Draw `sweep_axes` and write it atomically to `path` (PNG)."""
    return save(sweep_axes(rep, pts), path)
