"""Micro-batches in flight where a pipeline rank's virtual chunks hold unequal layers: what interleaved 1F1B keeps on
each stage is the held chunks' layers, not the stage's mean chunk times their count (`cost.memory.footprint.kept_scale`)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...spec.model.config import ModelConfig
from ...spec.plan.layout import chunk_layers, megatron_rules
from ...spec.stack.profile import load_stack
from ..layouts import Layouts, among
from ..pipeline.schedules import in_flight, interleaved_peak
from ..pipeline.stages import Stages


def kept_scale(schedule, pp, vpp, m, rank) -> dict[str, np.ndarray]:
    """Bytes a stage of pipeline rank `rank` holds per byte a unit keeps for one micro-batch: a layer (and the
    embedding) once per micro-batch chunk in flight (`pipeline.in_flight`, in units of 1/vpp of its layers), the
    head once (all m micro-batches under GPipe, which runs every forward first)."""
    chunks = in_flight(schedule, pp, vpp, m, rank)
    return {"layer": chunks / vpp, "embedding": chunks / vpp,
            "head": np.where(among(schedule, ("gpipe",)), m, 1) + 0.0 * chunks}


# What sets the micro-batch count and the chunks' layers of a plan (`Layouts.num_microbatches`, `chunk_layers`)
SPLIT = ("pp", "vpp", "dp", "micro_batch", "schedule", "account_for_embedding", "account_for_loss")


def uneven_kept_scale(model: ModelConfig, lay: Layouts, st: Stages, scale: dict) -> dict:
    """`scale` (kept_scale per stage kind: layer and embedding bytes held per byte one micro-batch keeps) with each
    interleaved plan whose ranks' chunks hold unequal layers priced chunk by chunk (`pipeline.interleaved_peak`):
    a stage holds its held chunks' layers at the peak, so the layer scale is that peak over the stage's layers and
    the embedding's the first chunk's micro-batches held then. Megatron-LM's embedding / loss accounting
    (spec.plan.megatron_split.megatron_chunks) leaves the first and the last chunk a layer short: with one layer per
    chunk (Llama 3.1 405B at pp 16 x vpp 8, Megatron-Bridge's perf recipes) rank 0 holds 112 layers' activations at
    its peak, not 7 x 143 / 8 = 125, and the last rank 113, not 7 x 113 / 8 = 99. A stage kind that stands for the
    middle ranks takes their largest peak. Plans whose chunks are equal keep `scale` (the same number); so do those
    without Megatron-LM's split rules (an uneven stage's chunks are the model's own even split, which Megatron-LM does
    not run: it refuses layers that do not divide without a pipeline layout) and a stack on torch.distributed.
    pipelining (Stack.torch_pipelining: its own schedule and split)."""
    inter = np.asarray(lay.schedule) == "interleaved"
    if not inter.any() or load_stack(lay.stack).torch_pipelining:  # torch.distributed.pipelining: its own order
        return scale
    shape = np.broadcast_shapes(np.shape(st.layers), np.shape(scale["layer"]))
    layer, emb = (np.array(np.broadcast_to(scale[u], shape), float) for u in ("layer", "embedding"))
    first, inverse = lay.distinct(SPLIT)
    split_of = {}  # (pp, vpp, accounting) -> [rank, chunk] layers, or None where the split is even or not Megatron-LM's
    for j, i in enumerate(first):
        if not inter[i]:
            continue
        key = (int(lay.pp[i]), int(lay.vpp[i]), bool(lay.account_for_embedding[i]), bool(lay.account_for_loss[i]))
        if key not in split_of:  # the chunks do not depend on dp or micro_batch: one plan per split
            split_of[key] = _uneven_chunks(model, lay.plan(int(i)))
        chunks = split_of[key]
        if chunks is None:
            continue
        cols = np.flatnonzero(inverse == j) if shape[1] > 1 else np.array([0])
        pp, vpp, m = key[0], key[1], int(lay.num_microbatches[i])
        at = lambda x, kind: np.broadcast_to(np.asarray(x)[kind], shape[1:])[cols[0]]  # one plan of the group
        for kind in range(shape[0]):
            layers = float(at(st.layers, kind))
            if not at(st.valid, kind) or layers <= 0:
                continue
            rank = int(at(st.rank, kind))
            ranks = range(1, pp - 1) if not st.explicit and kind == 1 else [rank]
            peak, held = max((rank_peak(pp, vpp, m, r, chunks[r]) for r in ranks), key=lambda x: x[0])
            layer[kind, cols] = peak / layers
            if rank == 0 and held is not None:
                emb[kind, cols] = held[0]
    return dict(scale, layer=layer, embedding=emb)


def _uneven_chunks(model: ModelConfig, plan) -> tuple[tuple[float, ...], ...] | None:
    """Layers of each pipeline rank's virtual chunks ([rank][chunk], the MTP blocks on the last) where Megatron-LM's
    split rules leave them unequal; None where they are equal or the plan has no such rules (`chunk_layers`' even
    split of a stage is not one Megatron-LM runs: the mean prices it)."""
    if not megatron_rules(plan):
        return None
    chunks = np.array(chunk_layers(plan, model.n_layers), float).reshape(plan.vpp, plan.pp).T  # [rank, chunk]
    chunks[-1, -1] += model.mtp_layers  # Megatron-Core builds the MTP blocks on the last stage
    if (chunks == chunks[:, :1]).all():
        return None
    return tuple(tuple(r) for r in chunks.tolist())


@lru_cache(maxsize=65536)
def rank_peak(pp: int, vpp: int, m: int, rank: int, weights: tuple[float, ...]) -> tuple[float, np.ndarray | None]:
    """`pipeline.interleaved_peak` of a rank's chunk weights; for equal ones (W + 1) w (`in_flight`) without the
    walk (a search holds many such ranks), and no per-chunk counts. Memoised: the walk depends on the split and the
    micro-batch count alone, which every system of a sweep and every GPU count of a search share (read only)."""
    w = np.asarray(weights, float)
    if (w == w[0]).all():
        return float(in_flight("interleaved", pp, vpp, m, rank)) * w[0], None
    peak, held = interleaved_peak(pp, vpp, m, rank, w)
    held.setflags(write=False)
    return peak, held
