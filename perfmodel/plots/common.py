"""What every figure shares: a headless backend, the --plot path check, an atomic PNG write."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..files import check_writable, write_atomic


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed; CI and notebooks' inline both work)."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg",) and "inline" not in matplotlib.get_backend():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_plot_path(path: str | Path, flag: str = "--plot") -> None:
    """Refuse, before any work, a figure path that is not a writable .png."""
    if not str(path).lower().endswith(".png"):
        raise InputError(f"{flag} {str(path)!r}: the figure is a PNG; give a file name ending in .png")
    check_writable(path, flag)


def save(fig, path: str | Path, flag: str = "--plot") -> Path:
    """Write `fig` atomically to `path` as PNG and close it."""
    plt = pyplot()
    out = write_atomic(path, lambda tmp: fig.savefig(tmp, format="png"), flag)
    plt.close(fig)
    return out
