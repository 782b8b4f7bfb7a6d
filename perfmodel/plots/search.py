"""Search results: step time against GPU count, and the time-memory Pareto front of each GPU count."""

from __future__ import annotations

from pathlib import Path

from ..files import write_atomic


def search_figure(result, path: str | Path) -> Path:
    """Two panels, written atomically to `path` (PNG):
    left, the fastest plan's step time per GPU count against perfect scaling from the smallest count;
    right, every feasible plan's step time against its memory per device, one colour per GPU count, with the
    Pareto front (step time, GPUs, memory) drawn as a line per GPU count and the device capacity marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df, front = result.table, result.pareto()
    best = df.sort_values("step_time_s").groupby("gpus", as_index=False).first()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=110)
    left.plot(best["gpus"], best["step_time_s"], "k-o", label="fastest plan")
    g0, t0 = best["gpus"].iloc[0], best["step_time_s"].iloc[0]
    left.plot(best["gpus"], t0 * g0 / best["gpus"], "k:", label="perfect scaling")
    for _, r in best.iterrows():
        left.annotate(f"tp{r.tp} pp{r.pp} cp{r.cp} dp{r.dp}\nMFU {100 * r.mfu:.0f}%", (r.gpus, r.step_time_s),
                      textcoords="offset points", xytext=(4, 6), fontsize=7)
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("GPUs")
    left.set_ylabel("predicted step time (s)")
    left.set_title("fastest plan per GPU count")
    left.legend(fontsize=8)
    colours = plt.cm.viridis([i / max(1, best.shape[0] - 1) for i in range(best.shape[0])])
    for colour, gpus in zip(colours, best["gpus"]):
        pts, fr = df[df["gpus"] == gpus], front[front["gpus"] == gpus].sort_values("memory_gib")
        right.scatter(pts["memory_gib"], pts["step_time_s"], s=4, alpha=0.15, color=colour)
        right.step(fr["memory_gib"], fr["step_time_s"], where="post", color=colour, lw=1.5, marker="o", ms=3,
                   label=f"{gpus} GPUs: Pareto front")
    right.axvline(result.system.accelerator.hbm_capacity_gib, color="crimson", ls="--", lw=1, label="device memory")
    right.set_yscale("log")
    right.set_xlabel("memory per device (GiB)")
    right.set_ylabel("predicted step time (s)")
    right.set_title("step time vs. memory (faint: every feasible plan)")
    right.legend(fontsize=8)
    fig.suptitle(f"{result.model.name} on {result.system.name}: global batch {result.job.global_batch} x "
                 f"{result.job.seq_len} tokens, {result.feasible} feasible plans")
    fig.tight_layout()
    out = write_atomic(path, lambda tmp: fig.savefig(tmp, format="png"), "--plot")
    plt.close(fig)
    return out
