"""Pipeline parallelism with `torch.distributed.pipelining` (torchtitan's pipeline_llm, manual stages).

Stage v of pp * vpp virtual stages lives on pipeline rank v % pp (Megatron-LM's interleaved assignment,
Narayanan et al. 2021, Sec. 2.2): rank r holds chunks r, r + pp, ... (their layers: spec.plan.layout.chunk_layers).
Each stage is the whole model with what it does not hold removed (the embedding off all but the first, the
final norm and LM head off all but the last), so that parameter names stay those of the full model.
Schedules: gpipe -> ScheduleGPipe, 1f1b -> Schedule1F1B, interleaved -> ScheduleInterleaved1F1B; the
schedules split each data-parallel rank's batch into the plan's micro-batches and average their gradients.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ..transformer import Transformer


def virtual_stage_layers(chunks: list[int]) -> list[tuple[int, int]]:
    """(first layer, layer count) of every virtual stage, in pipeline order, from each chunk's layer count
    (`spec.plan.layout.chunk_layers`: Megatron-LM's first chunk may hold the embedding alone, its last the loss alone)."""
    starts = [sum(chunks[:v]) for v in range(len(chunks))]
    return list(zip(starts, chunks))


def stage_indices(pp_rank: int, pp: int, vpp: int) -> list[int]:
    return [pp_rank + k * pp for k in range(vpp)]


def prune(model: Transformer, first: int, count: int, is_first: bool, is_last: bool) -> Transformer:
    """Keep layers first .. first+count-1 (and the embedding / head where the stage has them)."""
    for key in list(model.layers):
        if not first <= int(key) < first + count:
            del model.layers[key]
    if not is_first:
        model.embedding = None
    if not is_last:
        model.final_norm = model.lm_head = None
    return model


def make_schedule(schedule: str, modules: list[nn.Module], indices: list[int], num_stages: int,
                  n_microbatches: int, loss_fn, device: torch.device, group: dist.ProcessGroup):
    from torch.distributed.pipelining import (
        PipelineStage,
        Schedule1F1B,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
    )

    stages = [PipelineStage(m, i, num_stages, device, group=group) for m, i in zip(modules, indices)]
    if schedule == "interleaved":
        return ScheduleInterleaved1F1B(stages, n_microbatches=n_microbatches, loss_fn=loss_fn)
    cls = ScheduleGPipe if schedule == "gpipe" else Schedule1F1B
    return cls(stages[0], n_microbatches=n_microbatches, loss_fn=loss_fn)
