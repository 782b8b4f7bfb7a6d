"""The pipeline schedule of one plan as a timeline: a row per stage, a block per forward, recomputed forward
and backward of each micro-batch (and chunk), from `cost.pipeline.schedules.schedule_blocks` on the estimate's stage
times. Blocks carry gid "pipeline:KIND"."""

from __future__ import annotations

from ..cost.pipeline.schedules import schedule_blocks
from ..spec.result import Estimate

KINDS = {"forward": "#4c9be8", "recompute": "#f2b134", "backward": "#2f6b3a"}
MAX_LABELLED = 40  # micro-batch numbers are written in blocks only while they stay legible


def timeline(e: Estimate):
    """`schedule_blocks` for the estimate's plan and stage times (a DataFrame, seconds from the step start)."""
    p, st = e.plan, e.stages
    return schedule_blocks(p.schedule, p.pp, p.vpp, e.num_microbatches, [s.fwd_s for s in st],
                           [s.bwd_s for s in st], [s.recompute_s for s in st])


def gantt(ax, e: Estimate) -> None:
    """Draw the schedule; label the bottleneck stage's idle time (the bubble) and the estimate's bubble."""
    blocks = timeline(e)
    pp, m = e.plan.pp, e.num_microbatches
    few = m * e.plan.vpp <= MAX_LABELLED
    for kind, colour in KINDS.items():
        sel = blocks[blocks["kind"] == kind]
        for stage, rows in sel.groupby("stage"):
            ax.broken_barh(list(zip(rows["start_s"], rows["end_s"] - rows["start_s"])), (stage - 0.4, 0.8),
                           facecolors=colour, edgecolors="white", linewidth=0.4 if few else 0, gid=f"pipeline:{kind}")
        ax.bar(0, 0, color=colour, label=kind)  # legend entry
    if few:
        for r in blocks[blocks["kind"] != "recompute"].itertuples():
            ax.text((r.start_s + r.end_s) / 2, r.stage, str(r.micro_batch), ha="center", va="center", fontsize=6,
                    color="white")
    span = float(blocks["end_s"].max())
    busy = blocks.assign(d=blocks["end_s"] - blocks["start_s"]).groupby("stage")["d"].sum()
    worst = int(busy.idxmax())
    idle = span - float(busy[worst])
    ax.set_yticks(range(pp), [f"stage {r}\n({s.layers} layers)" for r, s in enumerate(e.stages)], fontsize=7)
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_xlim(0, span * 1.01)
    ax.set_xlabel("time from the start of the step's pipeline (s)")
    sched = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": f"interleaved 1F1B, {e.plan.vpp} chunks/stage"}
    if pp == 1:  # no pipeline: the row is gradient accumulation, micro-batch after micro-batch
        ax.set_title(f"no pipeline (pp 1): {m} micro-batch(es) in sequence on every device, no bubble", fontsize=9)
    else:
        ax.set_title(f"pipeline schedule: {sched[e.plan.schedule]}, {m} micro-batches; bubble on the busiest stage "
                     f"(stage {worst}) {idle:.3g} s = {100 * idle / span:.1f}% (estimate: {e.time_s.bubble:.3g} s)",
                     fontsize=9)
    # beside the axes, as in the breakdown panels: inside, it covered the end of the last stage
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)
