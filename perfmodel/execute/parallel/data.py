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

Hybrid sharding (Plan.dp_replicate = r > 1, zero 2 or 3): FSDP2 over the 2-D (replicate, shard) mesh `hsdp_mesh`,
each group of dp / r x cp ranks sharding, its r replicas all-reducing the reduce-scattered gradients.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

NO_ZERO1_WITH_TP = ("zero 1 ran as FSDP2 without resharding (gradients sharded as well, ZeRO-2): torch's "
                    "ZeroRedundancyOptimizer does not take DTensor (tensor-parallel) weights")


def apply_fsdp(stage: nn.Module, mesh: DeviceMesh, reshard: bool, experts=None, bf16_reduce: bool = False) -> nn.Module:
    """torchtitan's apply_fsdp: each block is one FSDP unit (its weights gathered just in time), then the rest;
    under expert parallelism a block's experts first, over their own mesh (`experts`: ExpertData). `bf16_reduce`:
    gradients reduce-scattered in bf16 (MixedPrecisionPolicy reduce_dtype; grad_compression=bf16)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(reduce_dtype=torch.bfloat16) if bf16_reduce else MixedPrecisionPolicy()
    for key, block in stage.layers.items():
        if experts is not None:
            experts.fully_shard(block, reshard)
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
    fully_shard(stage, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
    return stage


def hsdp_mesh(device_type: str, plan) -> DeviceMesh:
    """The (replicate, shard) mesh FSDP2 runs hybrid sharding over (torchtitan's dp_replicate x dp_shard_cp): the
    plan's dp split into dp_replicate replicas (outer) of dp / dp_replicate ranks (inner), the inner ones
    flattened with cp (context-parallel ranks hold the same weights), in the device order of the plan's mesh."""
    from torch.distributed.device_mesh import init_device_mesh

    r = plan.dp_replicate
    mesh = init_device_mesh(device_type, (plan.pp, r, plan.dp // r, plan.cp, plan.tp),
                            mesh_dim_names=("pp", "dp_replicate", "dp_shard", "cp", "tp"))
    mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
    return mesh["dp_replicate", "dp_shard_cp"]


def bf16_hook(process_group, bucket):
    """torch's bf16_compress_hook for any backend (torch 2.13's refuses without NCCL): the bucket divided by the
    group size and cast to bf16, all-reduced, and copied back into the fp32 gradients."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    wire = buffer.to(torch.bfloat16).div_(dist.get_world_size(process_group))
    fut = dist.all_reduce(wire, group=process_group, async_op=True).get_future()

    def back(f):
        buffer.copy_(f.value()[0])
        return buffer
    return fut.then(back)


# torch's PowerSGD hook needs DDP to have rebuilt its buckets (after the first step) before it compresses; error
# feedback and warm start make it refuse a start before step 2.
POWERSGD_START_STEP = 2


def compress_ddp(ddp, compression: str, rank: int) -> list[str]:
    """Register DDP's communication hook for `compression` (Plan.grad_compression): bf16_compress_hook, or
    powerSGD_hook of rank `rank` with error feedback and warm start (Vogels et al. 2019); notes on what ran."""
    if compression == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

        cuda = next(ddp.parameters()).device.type == "cuda"
        ddp.register_comm_hook(ddp.process_group, bf16_compress_hook if cuda else bf16_hook)
        return [] if cuda else ["bf16 gradients by perfmodel's own DDP hook (bf16_hook): torch's bf16_compress_hook "
                                "needs NCCL"]
    if compression == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        state = psgd.PowerSGDState(process_group=ddp.process_group, matrix_approximation_rank=rank,
                                   start_powerSGD_iter=POWERSGD_START_STEP)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        return [f"PowerSGD (rank {rank}) compressed from step {POWERSGD_START_STEP}: torch all-reduces the first "
                f"{POWERSGD_START_STEP} steps whole while DDP builds its buckets; the prediction is for every step "
                "compressed"]
    return []


def apply_data_parallel(stage: nn.Module, mesh: DeviceMesh | None, zero: int, tensor_parallel: bool,
                        device: torch.device, pipelined: bool = False, experts=None, compression: str = "none",
                        powersgd_rank: int = 1) -> tuple[nn.Module, str, list[str]]:
    """Wrap a stage for its ZeRO stage; returns (module, kind, notes), kind one of none, ddp, allreduce, fsdp.
    Under expert parallelism (`experts`: parallel.expert.ExpertData) the routed experts' weights are left to it:
    FSDP2 shards them over their own mesh, DDP ignores them (the all-reduce kind is given the dense weights).
    `compression` (Plan.grad_compression): DDP's hooks (`compress_ddp`), FSDP2's bf16 reduce dtype, or the
    all-reduce kind's bf16 cast (`allreduce_gradients`); PowerSGD needs DDP (spec.plan.layout._check_compression)."""
    if mesh is None:
        return stage, "none", []
    if zero >= 2 or (zero == 1 and tensor_parallel):
        notes = [NO_ZERO1_WITH_TP] if zero == 1 else []
        return apply_fsdp(stage, mesh, reshard=zero == 3, experts=experts, bf16_reduce=compression == "bf16"), \
            "fsdp", notes
    if tensor_parallel or pipelined:
        return stage, "allreduce", []
    from torch.nn.parallel import DistributedDataParallel

    if experts is not None:
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(stage, experts.names(stage))
    ids = [device.index] if device.type == "cuda" else None
    ddp = DistributedDataParallel(stage, process_group=mesh.get_group(), device_ids=ids)
    return ddp, "ddp", compress_ddp(ddp, compression, powersgd_rank)


def as_param_placement(p: nn.Parameter) -> torch.Tensor:
    """p.grad, redistributed to p's own placement if it is a DTensor placed otherwise (a tensor-parallel
    gradient may come out Partial or Replicate), so that its local part lines up with p's local shard."""
    from torch.distributed.tensor import DTensor

    g = p.grad
    if isinstance(g, DTensor) and tuple(g.placements) != tuple(p.placements):
        p.grad = g = g.redistribute(p.device_mesh, p.placements)
    return g


def flat_all_reduce(tensors: list[torch.Tensor], mesh: DeviceMesh, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """Sum `tensors` over `mesh` in one all-reduce of them flattened together (one bucket), sent as `dtype` if
    given (then cast back); returns the sums, shaped as the inputs (views of the one reduced buffer)."""
    import torch.distributed as dist

    flat = torch.cat([t.reshape(-1) for t in tensors])
    wire = flat if dtype is None else flat.to(dtype)
    dist.all_reduce(wire, op=dist.ReduceOp.SUM, group=mesh.get_group())
    flat = wire.to(flat.dtype)
    return [part.view_as(t) for part, t in zip(flat.split([t.numel() for t in tensors]), tensors)]


def allreduce_gradients(params: list[nn.Parameter], mesh: DeviceMesh, bf16: bool = False) -> None:
    """Average the gradients over the data-parallel group in one flat all-reduce (local shards of DTensors), in
    bf16 on the wire with `bf16` (grad_compression=bf16, as DDP's bf16_compress_hook does)."""
    from torch.distributed.tensor import DTensor

    grads = [as_param_placement(p) for p in params if p.grad is not None]
    grads = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    if not grads:
        return
    for g, total in zip(grads, flat_all_reduce(grads, mesh, torch.bfloat16 if bf16 else None)):
        g.copy_(total / mesh.size())


def adamw(params, lr: float) -> torch.optim.Optimizer:
    """AdamW (Loshchilov & Hutter 2019), fused: one kernel over all tensors, the multi-tensor Adam the cost model
    counts (`cost.memory.states.adam_step_bytes`); the default per-tensor loop costs 6x more on a CPU, and on DTensor
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
