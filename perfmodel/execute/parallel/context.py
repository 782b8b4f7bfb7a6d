"""Context parallelism: the sequence split over the `cp` mesh axis, keys and values all-gathered for attention.

Each cp rank holds 2 of the 2*cp equal sequence chunks, chunk r and chunk 2*cp-1-r ("zig-zag"), so that every
rank does the same causal-attention work (Megatron-LM context parallelism; Liu et al. 2023, Ring Attention,
uses the same balancing). Attention all-gathers keys and values over the cp group (an all-gather forward,
reduce-scatter backward: _GatherSeq) and masks by true positions. Written here, not torch's: the functional
collectives' all_gather_single_autograd aborted a gloo rank mid-step now and then (as their all_to_all did in
execute.parallel.expert; CI, 2026-11-27: "rank 1 was killed by SIGABRT during step 3"), and
torch.distributed.nn's all_gather is deprecated and, on gloo, emulates the reduce-scatter with scatters.

torch's own `torch.distributed.tensor.experimental.context_parallel` (ring attention over DTensor) has no
sharding rule for the CPU attention kernels (see /work/shared/TORCH_NOTES.md), so this all-gather form, which
the cost model's CP accounting also assumes (keys and values gathered once per layer), runs on every device:
the CPU tests exercise the code a GPU runs. Every op other than attention is per token and needs nothing.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate


def zigzag_positions(seq: int, cp: int, rank: int, device=None) -> torch.Tensor:
    """Positions of the tokens cp rank `rank` holds: chunks rank and 2*cp-1-rank of 2*cp (seq % (2*cp) == 0),
    or the rank-th of cp contiguous chunks when the sequence does not split into 2*cp chunks."""
    if cp == 1:
        return torch.arange(seq, device=device)
    if seq % (2 * cp) == 0:
        c = seq // (2 * cp)
        return torch.cat([torch.arange(rank * c, (rank + 1) * c), torch.arange((2 * cp - 1 - rank) * c, (2 * cp - rank) * c)]).to(device)
    c = seq // cp
    return torch.arange(rank * c, (rank + 1) * c, device=device)


class GatherContext:
    """What AttentionCore needs under CP: where its queries sit (`positions`), and the other shards' keys and
    values (`gather`)."""

    def __init__(self, group: dist.ProcessGroup, seq: int, device):
        self.group, cp = group, dist.get_world_size(group)
        self.positions = zigzag_positions(seq, cp, dist.get_rank(group), device)
        self.all_positions = torch.cat([zigzag_positions(seq, cp, r, device) for r in range(cp)])

    def gather(self, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor):
        """Keys and values [b, heads, s, d] of all cp ranks, concatenated on the sequence, and their positions."""
        return _GatherSeq.apply(k, self.group), _GatherSeq.apply(v, self.group), self.all_positions


class _GatherSeq(torch.autograd.Function):
    """x [b, heads, s, d] of every rank of `group`, in rank order on dim 2: an all-gather forward, a reduce-scatter
    of the gradient backward (each rank gets the sum of every rank's gradient for its shard). Synchronous c10d
    collectives (all_gather_into_tensor, reduce_scatter_tensor, on NCCL and gloo alike) over a contiguous
    sequence-major buffer."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        flat = x.movedim(2, 0).contiguous()
        out = flat.new_empty((dist.get_world_size(group) * flat.shape[0], *flat.shape[1:]))
        dist.all_gather_into_tensor(out, flat, group=group)
        return out.movedim(0, 2)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        flat = grad.movedim(2, 0).contiguous()
        out = flat.new_empty((flat.shape[0] // dist.get_world_size(ctx.group), *flat.shape[1:]))
        dist.reduce_scatter_tensor(out, flat, group=ctx.group)
        return out.movedim(0, 2), None


def apply_cp(stage: torch.nn.Module, group: dist.ProcessGroup | None, seq: int, device) -> torch.Tensor:
    """Point every attention core of a stage at the cp group and the embedding at this rank's positions;
    returns the positions (which tokens of each sequence this rank feeds in)."""
    from ..transformer import AttentionCore, TokenEmbedding

    ctx = GatherContext(group, seq, device) if group is not None else None
    positions = ctx.positions if ctx else torch.arange(seq, device=device)
    for m in stage.modules():
        if isinstance(m, AttentionCore):
            m.context = ctx
        if isinstance(m, TokenEmbedding):
            point_embedding(m, positions)
    return positions


def point_embedding(embedding, positions: torch.Tensor) -> None:
    """Point a TokenEmbedding at the positions of the tokens it embeds next (a DTensor where its position table is
    tensor-parallel)."""
    embedding.positions = positions
    if embedding.pos is not None and isinstance(embedding.pos.weight, DTensor):
        embedding.positions = DTensor.from_local(positions, embedding.pos.weight.device_mesh, [Replicate()],
                                                 run_check=False)
