"""`perfmodel forecast --plot`: goodput against the checkpoint interval (the job as planned) and against the
number of devices (the same checkpoint, store and interruption rate; Daly's optimum interval at each size)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..run.forecast import Forecast
from ..run.reliability import goodput_at
from ..spec.hardware.system import Storage
from .canvas import pyplot, save


def forecast_figure(f: Forecast, storage: Storage, path: str | Path) -> Path:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    run = dict(nbytes=f.checkpoint_bytes, storage=storage, rate=f.interruption_rate_per_device_hour,
               restart_overhead_s=f.restart_overhead_s, mode=f.checkpoint_mode)
    taus = f.checkpoint_interval_s * np.geomspace(0.05, 20, 80)
    a.plot(taus / 60, [100 * goodput_at(f.gpus, interval_s=t, **run)["goodput"] for t in taus])
    a.axvline(f.checkpoint_interval_s / 60, ls="--", c="k", lw=0.8)
    a.set(xscale="log", xlabel="compute between checkpoints (min)", ylabel="goodput (%)",
          title=f"{f.gpus} devices: goodput {f.goodput:.1%} at {f.checkpoint_interval_s / 60:.0f} min "
                f"({f.interval_rule})")
    a.title.set_fontsize(10)
    sizes = np.unique(np.geomspace(max(8, f.gpus / 64), f.gpus * 64, 40).round().astype(int))
    b.plot(sizes, [100 * goodput_at(int(n), **run)["goodput"] for n in sizes])
    b.axvline(f.gpus, ls="--", c="k", lw=0.8)
    b.set(xscale="log", xlabel="devices in the job", ylabel="goodput (%) at the optimum interval",
          title=f"{f.checkpoint_bytes / 1e12:.2f} TB checkpoint ({f.checkpoint_mode}), "
                f"{f.interruption_rate_per_device_hour:.2g} per device-hour")
    b.title.set_fontsize(10)
    for ax in (a, b):
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"{f.model} on {f.hardware}: {f.wall_clock_days:.1f} days for {f.tokens:.3g} tokens")
    fig.tight_layout()
    return save(fig, path)
