"""What every figure shares: a headless backend, the --plot path check, an atomic PNG write."""

from __future__ import annotations

from pathlib import Path

from ..files import check_output, write_atomic


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed; CI and notebooks' inline both work)."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg",) and "inline" not in matplotlib.get_backend():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_plot_path(path: str | Path, flag: str = "--plot") -> None:
    """Refuse, before any work, a figure path that is not a writable .png."""
    check_output(path, flag, ".png")


def unique_labels(labels: list[str]) -> list[str]:
    """`labels`, with "#i " (1-based position) before each that occurs more than once: a figure keyed by label
    never merges two of its inputs."""
    return [f"#{i + 1} {x}" if labels.count(x) > 1 else x for i, x in enumerate(labels)]


def save(fig, path: str | Path, flag: str = "--plot") -> Path:
    """Write `fig` atomically to `path` as PNG and close it."""
    plt = pyplot()
    out = write_atomic(path, lambda tmp: fig.savefig(tmp, format="png"), flag)
    plt.close(fig)
    return out
