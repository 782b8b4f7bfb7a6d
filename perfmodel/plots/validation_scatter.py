"""Validation results: predicted against measured step time and peak memory, one labelled point per plan."""

from __future__ import annotations

from pathlib import Path

from .canvas import pyplot, save

BANDS = (0.10, 0.20)  # relative error bands drawn around the identity line


def _panel(ax, predicted, measured, labels, unit: str, what: str, mape: float, extra: str = "") -> None:
    """Scatter predicted (y) against measured (x) on log axes, with y = x and the +-10% / +-20% bands."""
    from matplotlib import ticker

    lo = min(min(predicted), min(measured)) / 1.35
    hi = max(max(predicted), max(measured)) * 1.35
    xs = [lo, hi]
    for band, alpha in zip(BANDS, (0.22, 0.10)):
        ax.fill_between(xs, [x * (1 - band) for x in xs], [x * (1 + band) for x in xs], color="tab:green",
                        alpha=alpha, lw=0, label=f"within ±{100 * band:.0f}%")
    ax.plot(xs, xs, "k--", lw=1, label="predicted = measured")
    ax.scatter(measured, predicted, s=28, color="tab:blue", zorder=3, gid="points", label="plan")
    for x, y, name in zip(measured, predicted, labels):
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal", adjustable="box")
    # plain numbers (0.6, not 6x10^-1); minor ticks labelled at 2, 3 and 5 x 10^k only, so labels never collide
    minor = ticker.FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "235" else "")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        axis.set_minor_formatter(minor)
    ax.set_xlabel(f"measured {what} ({unit})")
    ax.set_ylabel(f"predicted {what} ({unit})")
    ax.set_title(f"{what}: MAPE {mape:.1f}%{extra}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")


def validation_axes(result):
    """The figure (not written): left step time (s), right allocated peak memory (GiB); points are the table's
    values."""
    plt = pyplot()
    df = result.table
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.6), dpi=110)
    rho = "n/a" if result.spearman is None else f"{result.spearman:.2f}"
    _panel(left, df["predicted_step_s"].tolist(), df["measured_step_s"].tolist(), df["plan"].tolist(), "s",
           "step time", result.step_mape_pct, f", Spearman {rho}")
    _panel(right, df["predicted_memory_gib"].tolist(), df["measured_memory_gib"].tolist(), df["plan"].tolist(),
           "GiB", "allocated peak memory", result.memory_mape_pct,
           " (CPU: fp32 run vs bf16 model)" if result.device == "cpu" else "")
    what = f"sweep {result.sweep}" if result.sweep else "plan files"
    fig.suptitle(f"perfmodel validate, {what}: {len(df)} plans on {result.nproc} {result.device} "
                 f"process{'es' if result.nproc > 1 else ''}, predicted with {result.hardware}")
    fig.tight_layout()
    return fig


def validation_figure(result, path: str | Path) -> Path:
    """Draw `validation_axes(result)` and write it atomically to `path` (PNG)."""
    return save(validation_axes(result), path)
