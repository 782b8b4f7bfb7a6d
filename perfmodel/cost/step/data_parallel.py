"""The stage whose data-parallel collectives and update the step waits on (`reduced_stage`): its gradient
reductions, ZeRO weight gathers and step syncs, its optimizer step and its state's host copies."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ..comm import collectives as C
from ..comm.compression import GRAD_BYTES, compression_seconds, layout_wire_bytes
from ..comm.mesh import BIT, Mesh
from ..comm.sharded import (
    ZERO_GROUP,
    Comm,
    chunked,
    ddp_pieces,
    gradient_sync,
    optimizer_seconds,
    overlap_fraction,
    partial_sum,
    replica_group,
    replicate_sync,
    weight_gather,
    with_overlap,
)
from ..compute.kernels import Device
from ..compute.moe import ExpertDataGroup, expert_layer_params, group_tiers
from ..compute.operator_table import operators
from ..host.host_update import host_share, host_updates
from ..host.host_update_time import host_update_comm
from ..host.launch_queue import queued
from ..layouts import Layouts
from ..memory.footprint import sp_replicated_params, stage_params
from ..memory.frozen import adapter_params
from ..memory.offload import optimizer_copies
from ..memory.states import WEIGHT_BYTES, state_bytes
from ..pipeline.stages import UNITS, Stages, pick, shared_host_speedup
from .stage import Sends, UnitSeconds


@dataclass
class ReducedStage:
    """The stage with most parameters: the data-parallel collectives and the update the step waits on are its."""

    big: np.ndarray  # its stage kind
    params: np.ndarray  # the dense parameters it reduces and updates (a LoRA fine-tune: its adapters)
    expert_params: np.ndarray  # a MoE model's routed experts', reduced over edp
    layers: np.ndarray  # its layers (at least 1): the backward's buckets
    fwd_mb: np.ndarray  # seconds of its forward per micro-batch, the device's or its host's
    bwd_mb: np.ndarray  # ... of its backward


def reduced_stage(model: ModelConfig, lay: Layouts, st: Stages, us: UnitSeconds) -> ReducedStage:
    """The stage with most parameters (cost.memory.footprint.stage_params, and its routed experts') and what its
    collectives hide behind: its forward and backward as long as the stage runs them, the device's or its host's
    (cost.host.launch_queue.queued; a CPU device: both, one after the other)."""
    params_of = stage_params(model, lay, st.layers, st.embedding > 0, st.head > 0)
    experts_of = st.layers * expert_layer_params(model, lay)
    big = np.argmax(np.where(st.valid, params_of + experts_of, -np.inf), axis=0)
    p_stage, pe_stage, nl = pick(params_of, big), pick(experts_of, big), np.maximum(pick(st.layers, big), 1)
    if lay.lora is not None:  # a LoRA fine-tune reduces, gathers and updates its adapters alone (spec.plan.finetune)
        p_stage, pe_stage = pick(st.layers, big) * adapter_params(model, lay), 0.0 * pe_stage
    on_big = lambda per_unit: sum(per_unit[u] * pick(st.count(u), big) for u in UNITS)  # noqa: E731
    serial = us.rates.serial
    fwd_mb = queued(on_big(us.fwd), 0.0, on_big(us.host_f), 0.0, False, serial)
    bwd_mb = queued(on_big(us.bwd), 0.0, on_big(us.host_b), 0.0, False, serial)
    return ReducedStage(big, p_stage, pe_stage, nl, fwd_mb, bwd_mb)


def overlapped_steps(lay: Layouts, stack) -> np.ndarray:
    """Where ZeRO 0-2's reduction (and ZeRO-1/2's gather) overlap: the stack runs them per bucket, and with a
    pipeline only where it syncs each chunk on its last micro-batch (not after the flush)."""
    return lay.overlap_dp_comm & stack.overlap_grad_reduce & ((lay.pp == 1) | stack.overlap_grad_reduce_with_pp)


def chunks_after(lay: Layouts) -> np.ndarray:
    """With interleaving, the chunk passes the schedule runs after the first of the chunks done before the last,
    which they overlap: in Megatron-LM's backward order the other vpp - 1 chunks' last pp micro-batches, (vpp - 1)
    pp chunk-backwards (and as many chunk-forwards before the last chunk's weights are needed in the next forward)."""
    return np.minimum((lay.vpp - 1) * lay.pp, lay.num_microbatches * lay.vpp - 1)


def gradient_reductions(model: ModelConfig, system: System, lay: Layouts, dev: Device, mesh: Mesh,
                        experts: ExpertDataGroup, r: ReducedStage) -> list[Comm]:
    """The stage's gradient reduction per step (ZeRO 0-2; ZeRO-3's reduce-scatters hide per unit, zero3_comm): the
    dense gradients over dp (cost.comm.sharded.gradient_sync; every micro-batch under ZeRO-2, which does not keep
    them whole), a MoE model's routed experts over edp in the same backward (MoE parallel folding), and under hybrid
    sharding the replicas' all-reduce of the shards (replicate_sync: FSDP2 after every micro-batch's reduce-scatter
    but under a pipeline schedule, the last backward's alone). Each overlaps the backward except its last bucket
    (torch DDP's last bucket where the stack names its buckets: Stack.ddp_buckets; cost.comm.sharded.chunked,
    with_overlap); the dense and expert buckets, and the replicas' all-reduce where it runs in the same backward,
    share that window, their exposed seconds split by traffic."""
    pp, v, m, zero, shard, edp = lay.pp, lay.vpp, lay.num_microbatches, lay.zero, lay.zero_shard, lay.edp
    f, overlap_steps = overlap_fraction(system, dev.stack), overlapped_steps(lay, dev.stack)
    wbytes = layout_wire_bytes(model, lay)  # what the gradient collectives carry per element (cost.comm.compression)
    on = (shard > 1) & (zero < 3)
    kind = np.where(zero == 0, "all_reduce", "reduce_scatter")
    g = on * gradient_sync(mesh, r.params, wbytes, zero)
    on_e = (edp > 1) & (zero < 3) & (r.expert_params > 0)
    g_e = on_e * gradient_sync(experts, r.expert_params, wbytes, zero)
    reps = np.where(zero == 2, m, 1)
    after = chunks_after(lay)
    g_r = replicate_sync(system, lay, r.params, wbytes)
    on_r = (lay.dp_replicate > 1) & (g_r > 0)
    reps_r = np.where((zero >= 2) & (pp == 1), m, 1) * on_r
    # torch DDP's buckets where the stack names them and wraps the stage in DDP (the plain-torch executor: ZeRO 0/1
    # without tp or pp; with tp, ZeRO-1 runs as FSDP2 and ZeRO-0 as one all-reduce: execute.parallel.data); DDP sizes
    # its buckets by the gradient tensors' own bytes (their dtype), whatever a communication hook then sends
    ddp = (zero < 2) & (lay.tp == 1) & (pp == 1)
    buckets = dev.stack.ddp_buckets
    pieces = r.layers if buckets is None else np.where(
        ddp, ddp_pieces(r.params * GRAD_BYTES[lay.grad_dtype], buckets), r.layers)

    def exposed(traffic, chunks):  # one backward's exposed seconds of `traffic` sharing its window
        return np.where(overlap_steps, with_overlap(traffic, chunked(traffic, r.bwd_mb, pieces, chunks,
                                                                     after * r.bwd_mb / v), f), traffic)

    both, chunks = g + g_e, np.where(zero == 2, 1, v)
    joint = np.minimum(reps * (both > 0), reps_r)  # backwards that run both
    dp_exp = (reps * (both > 0) - joint) * exposed(both, chunks)
    rep_exp = (reps_r - joint) * exposed(g_r, v)
    all_three = both + g_r
    shared = joint * exposed(all_three, np.where(reps_r < reps, v, chunks))
    dp_exp = dp_exp + shared * np.divide(both, all_three, out=np.zeros_like(all_three), where=all_three > 0)
    rep_exp = rep_exp + shared * np.divide(g_r, all_three, out=np.zeros_like(all_three), where=all_three > 0)
    part = np.divide(g, both, out=np.ones_like(both), where=both > 0)
    return [Comm("dp gradient reduction", kind, "dp", nbytes=r.params * wbytes, seconds=g, calls=reps,
                 bwd=dp_exp * part, unit="step", part="dp_comm", mask=ZERO_GROUP, active=on),
            Comm("edp expert gradient reduction", kind, "edp", nbytes=r.expert_params * wbytes, seconds=g_e,
                 calls=reps * on_e, bwd=dp_exp * (1 - part), unit="step", part="dp_comm", tier=experts.tiers(),
                 active=on_e),
            Comm("dp replicate gradient all-reduce", "all_reduce", "replicate", nbytes=r.params * wbytes / shard,
                 seconds=g_r, calls=reps_r, bwd=rep_exp, unit="step", part="dp_comm",
                 tier=group_tiers(system, *replica_group(lay), lay.gpus), active=on_r)]


def weight_gathers(system: System, lay: Layouts, dev: Device, mesh: Mesh, experts: ExpertDataGroup,
                   r: ReducedStage) -> list[Comm]:
    """ZeRO-1/2's weight all-gathers per step, the dense weights over dp and the routed experts' over edp
    (cost.comm.sharded.weight_gather): overlapped with the first forward of the next step but its first bucket
    (ZeRO-1's only where the stack's overlap_param_gather says so), their exposed seconds split by traffic."""
    zero, shard, edp, stack = lay.zero, lay.zero_shard, lay.edp, dev.stack
    on = (shard > 1) & np.isin(zero, (1, 2))
    w = on * weight_gather(mesh, r.params)
    on_e = (edp > 1) & np.isin(zero, (1, 2)) & (r.expert_params > 0)
    w_e = on_e * weight_gather(experts, r.expert_params)
    gather_overlaps = overlapped_steps(lay, stack) & ((zero == 2) | stack.overlap_param_gather)
    both = w + w_e
    hidden = chunked(both, r.fwd_mb, r.layers, lay.vpp, chunks_after(lay) * r.fwd_mb / lay.vpp)
    exp = np.where(gather_overlaps, with_overlap(both, hidden, overlap_fraction(system, stack)), both)
    part = np.divide(w, both, out=np.ones_like(both), where=both > 0)
    return [Comm("zero weight all-gather", "all_gather", "dp", nbytes=r.params * WEIGHT_BYTES, seconds=w, calls=1,
                 fwd=exp * part, unit="step", part="dp_comm", mask=ZERO_GROUP, active=on),
            Comm("zero expert weight all-gather (edp)", "all_gather", "edp", nbytes=r.expert_params * WEIGHT_BYTES,
                 seconds=w_e, calls=1 * on_e, fwd=exp * (1 - part), unit="step", part="dp_comm",
                 tier=experts.tiers(), active=on_e)]


def step_syncs(model: ModelConfig, lay: Layouts, mesh: Mesh, st: Stages, r: ReducedStage, sends: Sends) -> list[Comm]:
    """The gradient syncs after the backward, exposed: with sequence parallelism the tp group all-reduces the
    gradients of the weights it keeps whole (norms, row-parallel biases; cost.memory.footprint.sp_replicated_params)
    in one flat call (cost.comm.sharded.partial_sum); with pp > 1 the first and last stages, which both hold the
    embedding (tied to the LM head, or read by the MTP modules), all-reduce its local gradient over the link between
    stages (cost.comm.collectives.ring_allreduce_time). Neither under LoRA, whose base weights are frozen."""
    t, pp, zero, shard = lay.tp, lay.pp, lay.zero, lay.zero_shard
    gbytes = GRAD_BYTES[lay.grad_dtype]
    on = lay.sequence_parallel & (t > 1) & (lay.lora is None)
    kept_whole = sp_replicated_params(model, pick(st.layers, r.big), pick(st.head, r.big) > 0)
    size = kept_whole * gbytes
    s = on * partial_sum(mesh, kept_whole, gbytes, BIT["tp"])
    sp = Comm("tp replicated-weight gradients (sp)", "all_reduce", "tp", nbytes=size, seconds=s, calls=1,
              bwd=s, unit="step", part="dp_comm", mask=BIT["tp"], active=on)
    link_bw, link_lat, link = sends.link
    on = (pp > 1) & (model.tie_embeddings or model.mtp_layers > 0) & (lay.lora is None)
    size = operators(model)["embedding"].weights[0].params / t * gbytes / np.where(zero >= 2, shard, 1)
    one = on * C.ring_allreduce_time(size, 2, link_bw, link_lat)
    return [sp, Comm("embedding copies gradient sync", "all_reduce", "embedding", nbytes=size, seconds=one, calls=1,
                     bwd=one, unit="step", part="dp_comm", tier=link, active=on)]


def optimizer_time(dev: Device, system: System, lay: Layouts, r: ReducedStage) -> np.ndarray:
    """The device's optimizer step on the stage's parameter shards (cost.comm.sharded.optimizer_seconds: the dense
    ones over the ZeRO group, the experts' over edp), less the share the host updates (cost.host.host_update), plus
    the gradient compression's compute (cost.comm.compression.compression_seconds), over the shared host's speed-up
    (cost.pipeline.stages.shared_host_speedup)."""
    zero, shard, edp, gbytes = lay.zero, lay.zero_shard, lay.edp, GRAD_BYTES[lay.grad_dtype]
    p, pe = r.params, r.expert_params
    return ((optimizer_seconds(dev, p, zero, shard, gbytes) + optimizer_seconds(dev, pe, zero, edp, gbytes))
            * (1 - host_share(lay)) + compression_seconds(dev, p, gbytes, lay.grad_compression, shard)
            + compression_seconds(dev, pe, gbytes, lay.grad_compression, edp)
            ) / shared_host_speedup(system, lay)


def state_offload(system: System, lay: Layouts, r: ReducedStage) -> list[Comm]:
    """The optimizer state kept in host memory: copied in for the update and out after it
    (cost.memory.offload.optimizer_copies), or updated on the host's CPUs (cost.host.host_update_time:
    DeepSpeed's ZeRO-Offload / SuperOffload), behind the last backward."""
    zero, shard, edp = lay.zero, lay.zero_shard, lay.edp
    opt_state = state_bytes(r.params, lay)["optimizer"] + state_bytes(r.expert_params, lay, edp)["optimizer"]
    copies = optimizer_copies(system, opt_state, lay.optimizer_offload and not host_updates(lay))
    updated = r.params / np.where(zero >= 1, shard, 1) + r.expert_params / np.where(zero >= 1, edp, 1)
    return [copies, host_update_comm(system, lay, updated, updated, r.bwd_mb)]
