"""`perfmodel execute --plot`: every measured step of each plan (the slowest rank's time per step, all rounds
one after another), warm-up shaded, the measured step time (fastest round's median) and the prediction."""

from __future__ import annotations

from pathlib import Path

from .canvas import pyplot, save


def steps_axes(runs: dict):
    """`runs`: label -> (Measurement, predicted step seconds or None). One panel per plan, in one row."""
    plt = pyplot()
    n = len(runs)
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), dpi=100, squeeze=False)
    for ax, (label, (m, predicted)) in zip(axes.flat, runs.items()):
        times = m.step_times()
        ax.plot(range(len(times)), times, "o-", ms=3, lw=1, color="tab:blue", label="measured step",
                gid="measurement:steps")
        for k in range(m.rounds):
            ax.axvspan(k * m.steps - 0.5, k * m.steps + m.warmup - 0.5, color="0.88", lw=0,
                       label="warm-up (left out)" if k == 0 else None)
        ax.axhline(m.step_time_s, color="tab:blue", lw=1.5, label=f"measured {m.step_time_s:.3g} s",
                   gid="measurement:step_time")
        if predicted:
            err = (predicted - m.step_time_s) / m.step_time_s
            ax.axhline(predicted, color="tab:red", ls="--", lw=1.5, label=f"predicted {predicted:.3g} s ({err:+.0%})",
                       gid="measurement:predicted")
        ax.set_ylim(0, 1.15 * max(times + [predicted or 0]))
        ax.set_xlabel(f"step ({m.rounds} round{'s' if m.rounds > 1 else ''} of {m.steps})")
        ax.set_ylabel("step time, slowest rank (s)")
        ax.set_title(f"{label}\npeak memory {m.peak_memory_bytes / 2**20:.0f} MiB", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    first = next(iter(runs.values()))[0]
    fig.suptitle(f"perfmodel execute: {first.nproc} {first.device_type} rank(s), {first.backend}, torch "
                 f"{first.torch_version}")
    fig.tight_layout()
    return fig


def steps_figure(runs: dict, path: str | Path) -> Path:
    """Draw `steps_axes(runs)` and write it atomically to `path` (PNG)."""
    return save(steps_axes(runs), path)
