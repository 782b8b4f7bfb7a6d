"""Where a step's time and a device's memory go: stacked bars of `Estimate.time_s` and `Estimate.memory_bytes`,
several plans side by side. Bar segments carry gid "time:PART" / "memory:PART" so tests can read them back."""

from __future__ import annotations

from collections.abc import Mapping

from ..spec.plan.layout import layout_label
from ..spec.result import Estimate
from .canvas import unique_labels

# TimeBreakdown fields in stacking order (compute first, then communication, then what is idle or apart).
TIME_PARTS = {
    "gemm": ("GEMM", "#1f77b4"),
    "attention": ("attention core", "#6baed6"),
    "memory_bound": ("memory-bound ops", "#9ecae1"),
    "recompute": ("recompute", "#c6dbef"),
    "tp_comm": ("TP comm (exposed)", "#d62728"),
    "cp_comm": ("CP comm (exposed)", "#ff9896"),
    "ep_comm": ("EP dispatch/combine (exposed)", "#c49c94"),
    "pp_comm": ("PP sends", "#9467bd"),
    "zero3_comm": ("ZeRO-3 comm (exposed)", "#e377c2"),
    "dp_comm": ("DP / ZeRO-1/2 comm (exposed)", "#ff7f0e"),
    "offload_comm": ("host offload copies (exposed)", "#dbdb8d"),
    "bubble": ("pipeline bubble", "#bdbdbd"),
    "optimizer": ("optimizer step", "#2ca02c"),
    "host": ("waiting on the host's launches", "#e7ba52"),
    "overhead": ("host overhead", "#8c564b"),
}
MEMORY_PARTS = {
    "weights": ("weights", "#1f77b4"),
    "gradients": ("gradients", "#ff7f0e"),
    "optimizer": ("optimizer states", "#2ca02c"),
    "activations": ("activations", "#d62728"),
    "transient": ("transient (ZeRO gathers, dispatch, loss)", "#9467bd"),
    "fragmentation": ("allocator cache (reserved - allocated)", "#bdbdbd"),
    "runtime": ("runtime (context, NCCL, workspaces)", "#636363"),
}
GIB = 2**30


def as_mapping(estimates) -> dict[str, Estimate]:
    """label -> Estimate from one estimate, a list (labelled by layout; repeated labels get "#i") or a dict."""
    if isinstance(estimates, Estimate):
        estimates = [estimates]
    if isinstance(estimates, Mapping):
        return dict(estimates)
    estimates = list(estimates)
    return dict(zip(unique_labels([layout_label(e.plan) for e in estimates]), estimates))


def _wrap(label: str) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(label, 16))


def _stack(ax, labels, values: dict[str, list[float]], parts: dict, kind: str) -> None:
    """Stacked bars: one per label, one segment per part (parts that are zero everywhere left out)."""
    bottom = [0.0] * len(labels)
    for part, (name, colour) in parts.items():
        vals = values[part]
        if not any(vals):
            continue
        ax.bar([_wrap(label) for label in labels], vals, bottom=bottom, color=colour, label=name, gid=f"{kind}:{part}", width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals)]


def time_bars(ax, estimates) -> None:
    """Stacked bar of each plan's step time (s) by TimeBreakdown part, the total written on top."""
    est = as_mapping(estimates)
    labels = list(est)
    _stack(ax, labels, {p: [getattr(e.time_s, p) for e in est.values()] for p in TIME_PARTS}, TIME_PARTS, "time")
    for x, e in enumerate(est.values()):
        ax.annotate(f"{e.step_time_s:.3g} s\nMFU {100 * e.mfu:.0f}%", (x, e.step_time_s), ha="center",
                    va="bottom", fontsize=7, textcoords="offset points", xytext=(0, 2))
    ax.set_ylabel("step time (s)")
    ax.set_title("where the step time goes (slowest stage)", fontsize=10)
    ax.set_ylim(0, 1.15 * max(e.step_time_s for e in est.values()))
    ax.tick_params(axis="x", labelsize=7, rotation=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def memory_bars(ax, estimates) -> None:
    """Stacked bar of each plan's memory per device (GiB) on its fullest stage, against the device capacity."""
    est = as_mapping(estimates)
    labels = list(est)
    values = {p: [getattr(e.memory_bytes, p) / GIB for e in est.values()] for p in MEMORY_PARTS}
    _stack(ax, labels, values, MEMORY_PARTS, "memory")
    caps = {e.memory_capacity_bytes / GIB for e in est.values()}
    for cap in sorted(caps):
        ax.axhline(cap, color="crimson", ls="--", lw=1.2, gid="memory:capacity", label=f"device memory {cap:g} GiB")
    for x, e in enumerate(est.values()):
        fits = "fits" if e.fits_in_memory else "does NOT fit"
        ax.annotate(f"{e.memory_bytes.device / GIB:.1f} GiB\n{fits}", (x, e.memory_bytes.device / GIB), ha="center",
                    va="bottom", fontsize=7, textcoords="offset points", xytext=(0, 2))
    top = max(max(e.memory_bytes.device for e in est.values()), max(caps) * GIB) / GIB
    ax.set_ylim(0, 1.15 * top)
    ax.set_ylabel("memory per device (GiB)")
    ax.set_title("memory on the fullest device", fontsize=10)
    ax.tick_params(axis="x", labelsize=7, rotation=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
