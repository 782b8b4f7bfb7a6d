"""Expert parallelism: the routed experts of every MoE layer split over the `ep` ranks, tokens sent to their
experts and back by all-to-all (torchtitan's ExpertParallel, Megatron-Core's alltoall token dispatcher).

Megatron-Core's MoE parallel folding (Liu et al. 2025): attention and the dense parts run on a stage's
dp x cp x tp ranks, the experts on ep x edp (x etp) grids of the same ranks, ep innermost. Here tp = 1 and
etp = 1 (execute.run_plans.check_runnable refuses more), so a stage's ranks, in order, are the flattened (dp, cp) ranks and
the expert mesh is (pp, edp, ep) over the same global ranks: ep consecutive data ranks share their experts.

  apply_ep            on the meta model: keep this rank's n_experts / ep experts of every MoE layer (dim 0 of
                      GroupedExperts' batched weights) and point MoE.dispatcher at the ep group; returns the first
                      global expert of each sharded weight, from which its initial value is drawn
                      (model.initial_value: the same values as the whole tensor's rows)
  AllToAllDispatcher  counts exchanged first (all_to_all_single of the tokens per expert), then the tokens, with
                      torch.distributed.nn's autograd-aware all_to_all_single (the backward is the reverse all-to-all);
                      received tokens regrouped from (source rank, expert) to (expert, source rank) order
  ExpertData          the experts' data parallelism over edp: DDP ignores the expert weights (they differ between
                      the ep ranks), their gradients are summed over edp in one flat all-reduce after the last
                      micro-batch; with ZeRO-2/3 FSDP2 shards each layer's experts over edp (torchtitan's
                      dp_mod_ep mesh). Either way an expert's gradient is the sum over all data ranks' losses
                      divided by dp * cp, as a dense weight's: each rank's loss is the mean over its own tokens.

The all-to-all runs on every device (gloo on CPU, NCCL on CUDA); on CPU it was checked against a single process
(tests/test_execute_moe.py).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from .checkpointing import plain_name
from ..transformer import GroupedExperts, MoE, is_expert_weight


def expert_mesh(device_type: str, pp: int, stage_ranks: int, ep: int) -> DeviceMesh:
    """The (pp, edp, ep) mesh over the world: each pipeline stage's dp * cp ranks as edp x ep, ep innermost."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, (pp, stage_ranks // ep, ep), mesh_dim_names=("pp", "edp", "ep"))


class AllToAllDispatcher:
    """MoE.dispatcher for one ep group: this rank holds experts rank * n_local .. (rank + 1) * n_local - 1."""

    def __init__(self, group: dist.ProcessGroup, n_experts: int):
        self.group, self.ep = group, dist.get_world_size(group)
        self.n_local = n_experts // self.ep
        self.received: torch.Tensor | None = None  # [ep, n_local] tokens of the last dispatch, by source rank

    def dispatch(self, x: torch.Tensor, counts: torch.Tensor):
        """x: this rank's routed tokens sorted by global expert, counts[e] of them for expert e. Returns the tokens
        of this rank's experts (expert 0's from every source rank, then expert 1's ...), their counts, a handle."""
        got = torch.empty_like(counts)
        dist.all_to_all_single(got, counts, group=self.group)  # got[s * n_local + e]: from rank s, for expert e
        self.received = got.view(self.ep, self.n_local).detach()
        send = counts.view(self.ep, self.n_local).sum(1).tolist()
        recv = self.received.sum(1).tolist()
        y = _all_to_all(x, recv, send, self.group)
        perm = _regroup(self.received)  # (source, expert) blocks -> (expert, source)
        return y[perm], self.received.sum(0).tolist(), (send, recv, perm)

    def combine(self, y: torch.Tensor, handle) -> torch.Tensor:
        """The experts' outputs y (dispatch's order) back to the ranks their tokens came from, in their order."""
        send, recv, perm = handle
        back = torch.empty_like(perm)
        back[perm] = torch.arange(len(perm), device=perm.device)
        return _all_to_all(y[back], send, recv, self.group)


def _all_to_all(x: torch.Tensor, recv: list[int], send: list[int], group) -> torch.Tensor:
    """Rows of x sent to the group's ranks (send[r] rows to rank r), rows received (recv[r] from rank r), with
    the reverse all-to-all as its backward: torch.distributed.nn.functional.all_to_all_single. (The functional
    collectives' all_to_all_single_autograd also works on gloo but left a thread that aborted a rank at
    destroy_process_group now and then: "terminate called without an active exception".)"""
    out = x.new_empty((sum(recv), *x.shape[1:]))
    return dist_nn.all_to_all_single(out, x.contiguous(), recv, send, group=group)


def _regroup(blocks: torch.Tensor) -> torch.Tensor:
    """Row order that takes rows laid out in blocks of blocks[s, e] rows (source s major) to expert-major order
    (all of expert 0's rows, source 0 first, then expert 1's ...)."""
    sizes = blocks.reshape(-1)
    starts = torch.cumsum(sizes, 0) - sizes
    order = torch.arange(sizes.numel(), device=sizes.device).view(blocks.shape).t().reshape(-1)
    sizes, starts = sizes[order], starts[order]
    offset = torch.arange(int(sizes.sum()), device=sizes.device) - torch.repeat_interleave(
        torch.cumsum(sizes, 0) - sizes, sizes)
    return torch.repeat_interleave(starts, sizes) + offset


def apply_ep(stage: nn.Module, mesh: DeviceMesh) -> dict[str, int]:
    """Shard the routed experts of every MoE layer of `stage` (on the meta device) over the 1-D ep `mesh` and
    set their dispatchers; returns {parameter name: first global expert it holds}."""
    ep, rank = mesh.size(), mesh.get_local_rank()
    group = mesh.get_group()
    first: dict[str, int] = {}
    for name, mod in stage.named_modules():
        if not isinstance(mod, MoE):
            continue
        n = mod.n_experts // ep
        for pname, p in list(mod.experts.named_parameters(recurse=False)):
            local = torch.empty((n, *p.shape[1:]), dtype=p.dtype, device=p.device)
            mod.experts.register_parameter(pname, nn.Parameter(local))
            first[plain_name(f"{name}.experts.{pname}".lstrip("."))] = rank * n
        mod.dispatcher = AllToAllDispatcher(group, mod.n_experts)
    return first


class ExpertData:
    """The experts' data parallelism over the edp mesh (see the module docstring)."""

    def __init__(self, mesh: DeviceMesh, ep: int):
        self.mesh, self.ep = mesh, ep  # mesh: the 1-D edp mesh

    @staticmethod
    def names(stage: nn.Module) -> list[str]:
        """Names (as the stage has them, wrappers included) of its routed experts' weights."""
        return [n for n, _ in stage.named_parameters() if is_expert_weight(n)]

    @staticmethod
    def params(stage: nn.Module) -> list[nn.Parameter]:
        return [p for mod in stage.modules() if isinstance(mod, GroupedExperts) for p in mod.parameters()]

    def fully_shard(self, block: nn.Module, reshard: bool) -> None:
        """FSDP2 on each GroupedExperts of a block, over edp, before the block's own fully_shard over dp * cp
        (which then leaves the experts' weights to it)."""
        from torch.distributed.fsdp import fully_shard

        for mod in block.modules():
            if isinstance(mod, GroupedExperts):
                fully_shard(mod, mesh=self.mesh, reshard_after_forward=reshard)

    def reduce_gradients(self, params: list[nn.Parameter], fsdp: bool) -> None:
        """Expert gradients as the average over all dp * cp = edp * ep data ranks. Each rank's gradient holds the
        sum over its ep group's losses (the all-to-all's backward); summed over edp and divided by edp * ep.
        FSDP2 already averaged over edp (its reduce-scatter), which leaves a division by ep."""
        from torch.distributed.tensor import DTensor

        from .data import flat_all_reduce

        grads = [p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad for p in params if p.grad is not None]
        if not grads:
            return
        if fsdp:
            torch._foreach_div_(grads, self.ep)
            return
        edp = self.mesh.size()
        sums = flat_all_reduce(grads, self.mesh) if edp > 1 else grads
        for g, total in zip(grads, sums):
            g.copy_(total / (edp * self.ep))


class Optimizers:
    """Several optimizers stepped as one (the dense weights' and the experts', each over its own group)."""

    def __init__(self, *optimizers: torch.optim.Optimizer):
        self.optimizers = optimizers

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)
