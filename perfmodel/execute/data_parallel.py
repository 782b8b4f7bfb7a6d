"""Data parallelism and ZeRO over the flattened (dp, cp) mesh (context-parallel ranks hold the same weights, so
their gradients are averaged with the data-parallel ones; ZeRO shards over dp * cp, as the cost model says).

  zero 0   DistributedDataParallel. With tensor parallelism (DTensor weights, which DDP refuses) or under a
           pipeline schedule, torch 2.13's DDP reducer did not train as one process does: composable
           `replicate` over DTensor weights and DDP inside a pipeline schedule (with or without static_graph;
           without it the first step fails a bucket-rebuild assertion) both gave losses 3e-4..5e-3 away from a
           single process after one step when micro-batches accumulate. There the gradients are averaged by
           `allreduce_gradients`: one all-reduce of all gradients flattened after the last micro-batch (DDP with
           one bucket and no overlap with the backward).
  zero 1   DDP (or, under a pipeline schedule, `allreduce_gradients`) + ZeroRedundancyOptimizer (optimizer state
           sharded; Rajbhandari et al. 2020, P_os); with tensor parallelism FSDP2 without resharding (below), as
           torch's ZeRO-1 optimizer takes no DTensor weights
  zero 2   FSDP2 `fully_shard(reshard_after_forward=False)`: gradients and optimizer state sharded, weights
           gathered once per step and kept (P_os+g)
  zero 3   FSDP2 `fully_shard` per block and at the root, weights re-gathered in the backward (P_os+g+p)
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

NO_ZERO1_WITH_TP = ("zero 1 ran as FSDP2 without resharding (gradients sharded as well, ZeRO-2): torch's "
                    "ZeroRedundancyOptimizer does not take DTensor (tensor-parallel) weights")


def apply_fsdp(stage: nn.Module, mesh: DeviceMesh, reshard: bool, experts=None) -> nn.Module:
    """torchtitan's apply_fsdp: each block is one FSDP unit (its weights gathered just in time), then the rest;
    under expert parallelism a block's experts first, over their own mesh (`experts`: ExpertData)."""
    from torch.distributed.fsdp import fully_shard

    for key, block in stage.layers.items():
        if experts is not None:
            experts.fully_shard(block, reshard)
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(stage, mesh=mesh, reshard_after_forward=reshard)
    return stage


def apply_data_parallel(stage: nn.Module, mesh: DeviceMesh | None, zero: int, tensor_parallel: bool,
                        device: torch.device, pipelined: bool = False,
                        experts=None) -> tuple[nn.Module, str, list[str]]:
    """Wrap a stage for its ZeRO stage; returns (module, kind, notes), kind one of none, ddp, allreduce, fsdp.
    Under expert parallelism (`experts`: expert_parallel.ExpertData) the routed experts' weights are left to it:
    FSDP2 shards them over their own mesh, DDP ignores them (the all-reduce kind is given the dense weights)."""
    if mesh is None:
        return stage, "none", []
    if zero >= 2 or (zero == 1 and tensor_parallel):
        notes = [NO_ZERO1_WITH_TP] if zero == 1 else []
        return apply_fsdp(stage, mesh, reshard=zero == 3, experts=experts), "fsdp", notes
    if tensor_parallel or pipelined:
        return stage, "allreduce", []
    from torch.nn.parallel import DistributedDataParallel

    if experts is not None:
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(stage, experts.names(stage))
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(stage, process_group=mesh.get_group(), device_ids=ids), "ddp", []


def as_param_placement(p: nn.Parameter) -> torch.Tensor:
    """p.grad, redistributed to p's own placement if it is a DTensor placed otherwise (a tensor-parallel
    gradient may come out Partial or Replicate), so that its local part lines up with p's local shard."""
    from torch.distributed.tensor import DTensor

    g = p.grad
    if isinstance(g, DTensor) and tuple(g.placements) != tuple(p.placements):
        p.grad = g = g.redistribute(p.device_mesh, p.placements)
    return g


def flat_all_reduce(tensors: list[torch.Tensor], mesh: DeviceMesh) -> list[torch.Tensor]:
    """Sum `tensors` over `mesh` in one all-reduce of them flattened together (one bucket); returns the sums,
    shaped as the inputs (views of the one reduced buffer)."""
    import torch.distributed as dist

    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=mesh.get_group())
    return [part.view_as(t) for part, t in zip(flat.split([t.numel() for t in tensors]), tensors)]


def allreduce_gradients(params: list[nn.Parameter], mesh: DeviceMesh) -> None:
    """Average the gradients over the data-parallel group in one flat all-reduce (local shards of DTensors)."""
    from torch.distributed.tensor import DTensor

    grads = [as_param_placement(p) for p in params if p.grad is not None]
    grads = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    if not grads:
        return
    for g, total in zip(grads, flat_all_reduce(grads, mesh)):
        g.copy_(total / mesh.size())


def adamw(params, lr: float) -> torch.optim.Optimizer:
    """AdamW (Loshchilov & Hutter 2019), fused: one kernel over all tensors, the multi-tensor Adam the cost model
    counts (`cost.memory.adam_step_bytes`); the default per-tensor loop costs 6x more on a CPU, and on DTensor
    weights it pays DTensor's dispatch for each of its ~10 ops per tensor."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=True)


def make_optimizer(params: list[nn.Parameter], zero: int, kind: str, mesh: DeviceMesh | None,
                   lr: float) -> torch.optim.Optimizer:
    """AdamW (Loshchilov & Hutter 2019); sharded over the data-parallel ranks for ZeRO-1 (the gradients are
    whole on every rank after DDP or `allreduce_gradients`; each rank steps its shard and broadcasts it)."""
    if zero == 1 and kind in ("ddp", "allreduce"):
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, process_group=mesh.get_group(),
                                       lr=lr, weight_decay=0.0, fused=True)
    return adamw(params, lr)
