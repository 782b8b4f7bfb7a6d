"""What an operator under one placement costs beyond its kernels: the collectives inside it, the redistribution of
the tensors it reads, and its weights (states, ZeRO traffic, the optimizer step).

`estimate` calls these for Megatron-LM's placements of every plan of a search, PaSE (`cost.pase.tables`) for every
configuration of one plan; seconds are per micro-batch unless a docstring says per step, bytes per device.

"Overlapped" hides at most f of a collective (`overlap_fraction`: Efficiency.comm_overlap, 1 on GPUs and TPUs,
whose collectives have their own engines, measured near 0 for gloo, which runs on the cores that compute; less
the SMs an NCCL collective takes from compute, Stack.comm_ctas): `with_overlap`.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, replace

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ...spec.model.operators import PARTIAL, REPLICATE
from ...spec.stack.profile import Stack, load_stack
from . import collectives as C
from ..compute.kernels import Device, Values
from ..layouts import Layouts, among
from ..memory.states import WEIGHT_BYTES, adam_step_bytes, dtypes_of, grad_buffer_bytes, master_copy_bytes
from .mesh import BIT, Mesh, redistribution_steps
from ..compute.moe import dispatch_bytes, flex_dispatch_time, group_tiers, moe_share, routed_bytes
from ..compute.operator_table import Operator, Split, forward_passes, megatron_codes, operators, output_bytes
from ..compute.remat_names import names_rebuilds

ZERO_GROUP = BIT["dp"] | BIT["cp"]  # the ranks holding replicas of the same weights: dp * cp, tp apart (under
# hybrid sharding the mesh's dp axis is a ZeRO group's dp / dp_replicate: cost.comm.mesh.Mesh)


@dataclass
class Comm:
    """One kind of communication of one unit (a layer, the embedding, the head), of a pipeline stage, or of the
    step: seconds and bytes per call, calls and exposed seconds per micro-batch (per step for unit "step")."""

    name: str
    collective: str | np.ndarray  # the kind, or an array of kinds (one per plan)
    group: str  # tp | cp | dp | pp | embedding: the group's label in the report
    _: KW_ONLY
    nbytes: Values  # per call
    seconds: Values  # per call
    calls: Values
    fwd: Values = 0.0  # exposed seconds in the forward pass
    bwd: Values = 0.0  # exposed seconds in the backward pass (the recomputed forward included)
    unit: str = "layer"  # layer | embedding | head | stage | step
    part: str = "tp_comm"  # the TimeBreakdown field the exposed time is charged to
    mask: Values = 0  # the group's axes (cost.comm.mesh.BIT), for the report's tiers ...
    tier: str | np.ndarray | None = None  # ... or the tier name (sends, the tied-embedding sync)
    active: Values = True  # plans that run it

    @property
    def exposed(self) -> Values:
        return self.fwd + self.bwd


def tp_overlap(c: Comm, gemm_f: list, gemm_b: list, share: float, on) -> Comm:
    """A layer's tensor-parallel communication (`c`, per micro-batch) where the stack overlaps it with the GEMMs
    (`on`, per plan: Stack.tp_comm_overlap or the plan's, with sequence parallelism at tp > 1): Transformer Engine's
    userbuffers (Wang et al. 2023, "Overlap communication with dependent computation via decomposition", ASPLOS;
    TE's comm_gemm_overlap) split each all-gather / reduce-scatter into chunks that run beside the GEMM they feed
    or follow, so each collective hides behind its own GEMM and no more: a layer's exposed seconds are, over its
    GEMMs g (their forward seconds `gemm_f`, their backward `gemm_b`, arrays per plan), with the collectives split
    evenly among them (c_f, c_b per GEMM),

        exposed = sum_g [ max(0, c - g) + share * min(c, g) ]

    where `share` is the SMs the communication kernels hold over the part's SMs (the GEMM beside them runs at
    1 - share of its rate for as long as they overlap). Seconds; where `on` is false, `c` as it was."""
    n = max(len(gemm_f), 1)

    def hidden(total, gemms):
        per = total / n
        return sum(np.maximum(0.0, per - g) + share * np.minimum(per, g) for g in gemms) if gemms else total

    on = np.asarray(on, bool)
    return replace(c, fwd=np.where(on, hidden(c.fwd, gemm_f), c.fwd), bwd=np.where(on, hidden(c.bwd, gemm_b), c.bwd))


def overlap_fraction(system: System, stack: Stack) -> float:
    """f, the share of a collective that can hide behind compute (dimensionless): Efficiency.comm_overlap (how
    much runs concurrently with compute at all) times 1 - Stack.overlap_share (the compute rate the collective's
    own thread blocks leave). With a fully overlapped collective of C seconds the step then pays (1 - f) C:
    compute beside it ran at 1 - overlap_share of its rate for those C seconds. A comm_overlap measured beside
    compute (Efficiency.comm_overlap_measured) holds that share already."""
    eff = system.efficiency
    return eff.comm_overlap * (1.0 if eff.comm_overlap_measured else 1.0 - stack.overlap_share(system.accelerator))


def with_overlap(comm, exposed, fraction):
    """Exposed seconds when only `fraction` of the communication can run beside compute (Efficiency.comm_overlap):
    the rest adds to the step, the overlappable part is exposed as the schedule leaves it (`exposed`, what the
    whole of `comm` would leave). fraction 1: `exposed`; 0: all of `comm`."""
    return (1.0 - fraction) * comm + fraction * exposed


def behind(comm, window, fraction):
    """Exposed seconds of a collective that runs beside `window` seconds of compute: what outlasts the window,
    `with_overlap`."""
    return with_overlap(comm, np.maximum(0.0, comm - window), fraction)


def behind_linear(comm, window, fraction, hidden) -> Values:
    """`behind` on the side of the kink given by `hidden` (True: comm <= window): (1 - f) comm there, else
    comm - f window. Equal to `behind` where `hidden` is what `comm <= window` says; a tangent (a lower bound)
    elsewhere. Linear in comm and window, so PaSE can add it operator by operator."""
    return np.where(hidden, (1.0 - fraction) * comm, comm - fraction * window)


def bucketed(comm, window, pieces):
    """Exposed seconds of `comm` split into `pieces` equal buckets that overlap a `window` of compute:
    the last bucket always waits for the compute to end; the rest hides behind it until the window is full."""
    return np.where(comm > 0, np.maximum(comm / pieces, comm - window * (1 - 1 / pieces)), 0.0)


def ddp_pieces(total_bytes, buckets):
    """Equal buckets `bucketed` would need for its last to be DDP's (total / the last bucket's bytes): torch's
    DistributedDataParallel reducer fills a first bucket of `buckets[0]` bytes, then buckets of `buckets[1]`
    (torch/nn/parallel/distributed.py, _compute_bucket_assignment_by_size: parameters in reverse order, a bucket
    closed at its cap), so the last bucket is what is left of the rest after whole caps (a whole cap where none
    is left), and its all-reduce waits for the backward's end. Parameters are not split at a cap: whole tensors
    move the boundaries by at most one tensor, which this leaves out."""
    total = np.asarray(total_bytes, float)
    first, cap = buckets
    rest = total - first
    last = np.where(rest > 0, rest - cap * np.ceil(np.maximum(rest, 1.0) / cap - 1.0), total)
    return np.divide(total, last, out=np.ones_like(total), where=last > 0)


def chunked(comm, window, pieces, vpp, spare):
    """Exposed seconds of a stage's per-step data-parallel collective when the stage holds `vpp` model chunks and
    each chunk's share (comm / vpp) starts as soon as that chunk is done: Megatron-LM's --overlap-grad-reduce /
    --overlap-param-gather with an interleaved schedule (megatron/core/distributed/distributed_data_parallel.py:
    a model chunk's bucket syncs start at its last micro-batch's backward; finalize_model_grads waits for them
    all). The chunk done last overlaps only its own part of the micro-batch (`bucketed` over window / vpp, in
    pieces / vpp buckets); the other (vpp - 1) / vpp of comm overlap `spare`, the compute the schedule runs after
    the first chunk is done (the cooldown's backwards; the warmup's forwards for a weight gather). vpp = 1:
    `bucketed`."""
    vpp = np.asarray(vpp, float)
    last = bucketed(comm / vpp, window / vpp, np.maximum(pieces / vpp, 1.0))
    return last + np.maximum(0.0, comm * (vpp - 1) / vpp - spare)


def op_comms(op: Operator, s: Split, mesh: Mesh, model: ModelConfig, recompute, attention_s: tuple[Values, Values],
             f: float, saved=()) -> list[Comm]:
    """The collectives inside `op` under split `s` (a split norm's statistics, a split loss's, a split
    attention's keys and values): `norm_stats`, `loss_stats`, `kv_exchange`."""
    fam = op.spec.family
    split = {"norm": "hidden", "loss": "vocab", "attention": "seq"}.get(fam)
    if split is None or not np.any(s.mask(split)):  # nothing split there: nothing to exchange
        return []
    if fam == "norm":
        return norm_stats(op, s, mesh, model.norm == "layernorm", recompute)
    if fam == "loss":
        return loss_stats(op, s, mesh)
    if fam == "attention":
        return kv_exchange(op, s, mesh, model.kv_width / 2, recompute, attention_s, f, saved)
    return []


def norm_stats(op: Operator, s: Split, mesh: Mesh, layernorm: bool, recompute) -> list[Comm]:
    """All-reduce of a hidden-split norm's per-token statistics: fp32 mean (and variance for LayerNorm), in the
    forward and again in each recomputed forward and in the backward."""
    nbytes = s.tokens * 4.0 * (2 if layernorm else 1)
    per = mesh.collective("all_reduce", nbytes, s.mask("hidden"))
    again = forward_passes(op.unit, recompute, rerun=names_rebuilds(op.name, ()))  # names re-runs every norm
    return [Comm("norm statistics", "all_reduce", "tp", nbytes=nbytes, seconds=per, calls=again + 1, fwd=per,
                 bwd=again * per, unit=op.unit, mask=s.mask("hidden"), active=s.split("hidden") > 1)]


def loss_stats(op: Operator, s: Split, mesh: Mesh) -> list[Comm]:
    """Vocab-parallel cross-entropy: all-reduce the max, sum-exp and target logit, fp32 per token, forward."""
    nbytes = s.tokens * 4.0
    per = mesh.collective("all_reduce", nbytes, s.mask("vocab"))
    return [Comm("tp cross-entropy stats", "all_reduce", "tp", nbytes=nbytes, seconds=per, calls=3, fwd=3 * per,
                 unit=op.unit, mask=s.mask("vocab"), active=s.split("vocab") > 1)]


def kv_exchange(op: Operator, s: Split, mesh: Mesh, kv_dim: int, recompute, attention_s: tuple[Values, Values],
                f: float, saved=()) -> list[Comm]:
    """Context parallelism: all-gather the keys and values of the whole sequence (bf16, the local heads) in the
    forward (again when the attention core is recomputed) and in the backward, reduce-scatter their gradients;
    each beside the attention kernel (`attention_s`: its forward and backward seconds on this device), `behind`.
    Megatron-LM's all-gather context parallelism (Llama 3: Dubey et al. 2024, Sec. 3.3.2)."""
    nbytes = s.local("batch") * s.seq * 2 * kv_dim / s.split("heads") * 2.0
    mask = s.mask("seq")
    ag, rs = mesh.collective("all_gather", nbytes, mask), mesh.collective("reduce_scatter", nbytes, mask)
    names = among(recompute, ("names",)) & names_rebuilds("attention", saved)  # names: unless the core is saved
    again = among(recompute, ("full", "selective")) | names
    exp_f = behind(ag, attention_s[0], f)
    exp_b = behind(ag + rs, attention_s[1], f)
    calls = 3 + again
    return [Comm("cp key/value exchange", "all_gather / reduce_scatter", "cp", nbytes=nbytes,
                 seconds=((calls - 1) * ag + rs) / calls, calls=calls, fwd=exp_f, bwd=exp_b + exp_f * again,
                 unit=op.unit, part="cp_comm", mask=mask, active=s.split("seq") > 1)]


@dataclass
class EdgeCost:
    """A tensor passed between two operators: exposed seconds per micro-batch and the collectives behind them."""

    fwd: Values
    bwd: Values
    steps: list[tuple[str, Values, Values, Values, Values]]  # (kind, bytes, mask, seconds per call, calls)


def edge_cost(mesh: Mesh, out: np.ndarray, inp: np.ndarray, full_bytes, passes, keep_shard=False,
              f: float = 1.0) -> EdgeCost:
    """Redistribute a producer's output (placement codes `out`, (N, axes)) to what a consumer reads (`inp`), in
    the forward (`passes` times: twice into a fully recomputed layer), and its gradient back in the backward
    (`cost.comm.mesh.redistribution_steps`; an input code PARTIAL reads Replicate and sends a Partial gradient, and
    the gradient of a Partial output is Replicate).

    `keep_shard`: the consumer keeps the producer's shard for its weight gradient and gathers it again in the
    backward (Megatron-LM sequence parallelism, Korthikanti et al. 2022, Sec. 4.2.2), where the forward only
    gathers (`gathered_axes`: over tp, as dp and cp split every operator alike). Megatron-LM issues that gather
    beside the input-gradient GEMM (LinearWithGradAccumulationAndAsyncCommunication), assumed to take at least
    as long: (1 - f) of the gather is exposed.
    """
    fwd_dst = np.where(inp == PARTIAL, REPLICATE, inp)
    bwd_dst = np.where(out == PARTIAL, REPLICATE, out)
    rows, t, n_fwd = [], {}, 0
    for d, src, dst in (("fwd", out, fwd_dst), ("bwd", inp, bwd_dst)):
        t[d] = 0.0
        for kind, nbytes, mask in redistribution_steps(mesh, src, dst, full_bytes):
            sec = mesh.collective(kind, nbytes, mask)
            calls = (passes if d == "fwd" else 1.0) * (mesh.group_size(mask) > 1)
            rows.append((kind, nbytes, mask, sec, calls))
            t[d] = t[d] + sec
        n_fwd = len(rows) if d == "fwd" else n_fwd
    fwd, bwd = t["fwd"], t["bwd"] + (np.asarray(passes) - 1) * t["fwd"]
    keep = np.asarray(keep_shard, bool)
    if keep.any():  # the gathers of the forward, again in the backward
        bwd = bwd + (1.0 - f) * np.where(keep, t["fwd"], 0.0)
        rows += [(kind, nbytes, mask, sec, keep * calls / np.maximum(passes, 1))
                 for kind, nbytes, mask, sec, calls in rows[:n_fwd]]
    return EdgeCost(fwd + 0.0, bwd + 0.0, rows)


def zero3_gather(mesh: Mesh, params, grad_bytes, mask, latency_share=1.0, weight_bytes=WEIGHT_BYTES,
                 trainable=None) -> tuple[Values, Values]:
    """ZeRO-3 per micro-batch: (seconds of one weight all-gather of `params` at `weight_bytes` each (bf16; a frozen
    LoRA base's storage), of one gradient reduce-scatter of the `trainable` ones (default all)) over the group
    `mask` (gathered before the forward and again before the backward; reduced once)."""
    trainable = params if trainable is None else trainable
    ag = mesh.collective("all_gather", params * weight_bytes, mask, latency_share)
    rs = mesh.collective("reduce_scatter", trainable * grad_bytes, mask, latency_share)
    return ag, rs


def optimizer_seconds(dev: Device, params, zero, shard, grad_bytes) -> Values:
    """The Adam step over the parameters this device updates (`states.adam_step_bytes` each, at the plan's
    weight and moment dtypes; ZeRO >= 1 updates its 1/shard), at the optimizer's bandwidth, and the stack's other
    passes of the step (`Stack.step_passes`, below ZeRO-3): the master's copy into the weights over the updated
    shard (`states.master_copy_bytes`) and the gradient buffer's over all `params` (`states.grad_buffer_bytes`),
    element-wise kernels at the memory bandwidth."""
    weight_dtype, moment_dtype = dtypes_of(dev.plan)
    updated = params / np.where(np.asarray(zero) >= 1, shard, 1)
    passes = dev.stack.step_passes
    extra = (updated * master_copy_bytes(weight_dtype) * ("master_copy" in passes)
             + params * grad_buffer_bytes(grad_bytes, passes, dev.plan.dp * dev.plan.cp > 1))
    return (dev.optimizer(updated * adam_step_bytes(grad_bytes, weight_dtype, moment_dtype))
            + dev.memory(extra * (np.asarray(zero) < 3)))


def gradient_sync(mesh: Mesh, params, grad_bytes, zero, mask=ZERO_GROUP, latency_share=1.0) -> Values:
    """Seconds of one data-parallel reduction of `params` gradients over the group `mask`: an all-reduce
    (ZeRO 0), or a reduce-scatter (ZeRO >= 1: each rank keeps the shard of the optimizer state it updates;
    Rajbhandari et al. 2020, Sec. 5). `latency_share`: the tensor's part of its bucket's call."""
    g = params * grad_bytes
    return np.where(np.asarray(zero) == 0, mesh.collective("all_reduce", g, mask, latency_share),
                    mesh.collective("reduce_scatter", g, mask, latency_share))


def weight_gather(mesh: Mesh, params, mask=ZERO_GROUP, latency_share=1.0) -> Values:
    """Seconds of ZeRO-1/2's all-gather of the updated bf16 weights over the group `mask`, once per step."""
    return mesh.collective("all_gather", params * WEIGHT_BYTES, mask, latency_share)


def replicate_sync(system: System, lay: Layouts, params, grad_bytes) -> Values:
    """Seconds of hybrid sharding's gradient all-reduce (Plan.dp_replicate = r > 1): each rank's shard of `params`
    gradients, params x grad_bytes / zero_shard, over the r replicas of its ZeRO group, tp cp dp / r devices apart
    (replicas outermost in dp, as FSDP2's HSDP mesh (replicate, shard)), per call, after the reduce-scatter inside
    the group (Zhao et al. 2023, PyTorch FSDP, Sec. 3.2.2 "hybrid sharding"; torch fully_shard's foreach_reduce
    all-reduces the reduce-scattered shard over the replicate dim after every backward by default,
    FSDPParamGroup.all_reduce_grads; cost.step counts the calls); 0 where r = 1."""
    r = lay.dp_replicate
    if np.all(r == 1):
        return 0.0 * np.asarray(params, float)
    nbytes = np.asarray(params, float) * grad_bytes / lay.zero_shard
    return (r > 1) * C.group_collective(system, "all_reduce", nbytes, *replica_group(lay), lay.gpus)


def replica_group(lay: Layouts):
    """(members, stride) of a rank's hybrid-sharding replicas: dp_replicate devices, a ZeRO group's tp cp dp / r
    devices apart (replicas outermost in dp)."""
    return lay.dp_replicate, lay.tp * lay.cp * lay.dp // lay.dp_replicate


def partial_sum(mesh: Mesh, params, grad_bytes, mask, latency_share=1.0) -> Values:
    """Seconds of the all-reduce of whole local gradients over the group `mask` outside the data-parallel one:
    weights kept whole on every rank of a group that splits the tokens (the sequence-parallel norms over tp;
    Megatron-LM's finalize_model_grads runs it after the data-parallel reduction, on the full main_grad)."""
    return mesh.collective("all_reduce", params * grad_bytes, mask, latency_share)


def gradient_reduction(mesh: Mesh, params, reduce_mask, zero: int, microbatches, grad_bytes,
                       latency_share=1.0, wire_bytes=None) -> Values:
    """Seconds per step of one weight's gradient reduction over the axes `reduce_mask` (those that split the
    tokens while the weight is whole: its gradient is a partial sum there), and of ZeRO-1/2's weight gathers:
    `gradient_sync` over the reduce axes inside the ZeRO group (every micro-batch for ZeRO-2; ZeRO-3's runs per
    micro-batch in `zero3_gather`), `partial_sum` over the others, `weight_gather` (ZeRO-1/2). `wire_bytes`: what the
    data-parallel reduction carries per element (cost.comm.compression), default grad_bytes."""
    t = partial_sum(mesh, params, grad_bytes, reduce_mask & ~ZERO_GROUP, latency_share)
    if zero < 3:
        reps = microbatches if zero == 2 else 1
        wire = grad_bytes if wire_bytes is None else wire_bytes
        t = t + reps * gradient_sync(mesh, params, wire, zero, reduce_mask & ZERO_GROUP, latency_share)
    if zero in (1, 2):
        t = t + weight_gather(mesh, params, ZERO_GROUP, latency_share)
    return t


def moe_comms(model: ModelConfig, system: System, lay: Layouts, window=None) -> list[Comm]:
    """The collectives of a mean layer's MoE MLP per micro-batch (exposed: Megatron-Core runs them on the
    compute stream unless --overlap-moe-expert-parallel-comm), scaled by `moe_share`.

    alltoall: dispatch and combine are all-to-alls over the ep group, S = `dispatch_bytes` each
    (`comm.all_to_all_time`); flex, `cost.compute.moe.flex_dispatch_time` (dispatch and combine each at its own kernels'
    bandwidth); allgather: an all-gather of every member's tokens and a reduce-scatter of the outputs over it
    (S = ep x `dispatch_bytes`, `comm.collective_time`). With etp > 1 the routed tokens are all-gathered over
    the etp group after the dispatch and reduce-scattered before the combine. Each runs once in the forward,
    once in the backward, and again in a recomputed forward.

    With `lay.moe_overlap` (Megatron-Core --overlap-moe-expert-parallel-comm: its combined 1F1B runs one
    micro-batch's forward beside another's backward, each one's dispatch and combine under the other's compute;
    DeepSeek-V3 report, Sec. 3.2.1, the same pairing in DualPipe) the layer's expert-parallel seconds C run
    beside `window`, the seconds of compute per micro-batch of a layer (fwd + bwd): `behind(C, window, f)` in
    the m - 1 paired micro-batches, all of C in the first forward's and the last backward's unpaired half,
    so exposed = C - (m - 1)/m (C - behind(C, window, f)), shared over the collectives by their seconds."""
    if model.moe is None:
        return []
    w = moe_share(model)
    passes = forward_passes("layer", lay.recompute, rerun=True)  # names re-runs the MoE MLP whole (cost.compute.moe)
    out = []
    s = dispatch_bytes(model, lay)
    if lay.moe_dispatcher == "alltoall":
        one = C.group_collective(system, "all_to_all", s, lay.ep, lay.etp, lay.gpus)
        pairs = (("ep dispatch all-to-all", "all_to_all", s, one), ("ep combine all-to-all", "all_to_all", s, one))
    elif lay.moe_dispatcher == "flex":
        s = s / model.moe.top_k  # each token once (the busiest device's, as the seconds)
        pairs = (("ep dispatch (flex)", "ep_dispatch", s, flex_dispatch_time(model, system, lay, "ep_dispatch")),
                 ("ep combine (flex)", "ep_combine", s, flex_dispatch_time(model, system, lay, "ep_combine")))
    else:
        ag = C.group_collective(system, "all_gather", s * lay.ep, lay.ep, lay.etp, lay.gpus)
        rs = C.group_collective(system, "reduce_scatter", s * lay.ep, lay.ep, lay.etp, lay.gpus)
        pairs = (("ep dispatch all-gather", "all_gather", s * lay.ep, ag),
                 ("ep combine reduce-scatter", "reduce_scatter", s * lay.ep, rs))
    on = lay.ep > 1
    for name, kind, nbytes, t in pairs:
        out.append(Comm(name, kind, "ep", nbytes=nbytes, seconds=t, calls=w * (passes + 1) * on, fwd=w * t * on,
                        bwd=w * t * passes * on, unit="layer", part="ep_comm", tier=group_tiers(system, lay.ep, lay.etp,
                                                                                            lay.gpus), active=on))
    # etp: the routed token copies this device's experts see, gathered over etp (and reduce-scattered back)
    routed = routed_bytes(model, lay)
    on = lay.etp > 1
    for name, kind in (("etp token all-gather", "all_gather"), ("etp output reduce-scatter", "reduce_scatter")):
        t = C.group_collective(system, kind, routed, lay.etp, 1, lay.gpus)
        out.append(Comm(name, kind, "etp", nbytes=routed, seconds=t, calls=w * (passes + 1) * on, fwd=w * t * on,
                        bwd=w * t * passes * on, unit="layer", part="ep_comm", tier=group_tiers(system, lay.etp, 1,
                                                                                             lay.gpus), active=on))
    on = np.asarray(lay.moe_overlap) & (lay.num_microbatches > 1)
    if window is not None and np.any(on):
        total = sum(c.exposed for c in out)
        paired = (lay.num_microbatches - 1) / lay.num_microbatches
        hidden = paired * (total - behind(total, window, overlap_fraction(system, load_stack(lay.stack))))
        keep = np.where(on, 1.0 - np.divide(hidden, total, out=np.zeros_like(total), where=total > 0), 1.0)
        out = [replace(c, fwd=c.fwd * keep, bwd=c.bwd * keep) for c in out]
    return out + shared_expert_comms(model, system, lay)


def shared_expert_comms(model: ModelConfig, system: System, lay: Layouts) -> list[Comm]:
    """The tensor-parallel traffic of a MoE layer's shared experts per micro-batch, scaled by `moe_share`: a
    tp-split MLP (Megatron-Core SharedExpertMLP) reading the layer's tokens gathered from their sequence shards
    and reduce-scattering its output back, priced as the dense MLP's edges under Megatron-LM's sequence
    parallelism (`edge_cost` over `operators.megatron_codes` of norm2 -> mlp_in and mlp_out -> residual2, the
    input kept as its shard and gathered again in the backward). Nothing without shared experts or tp."""
    if model.moe is None or not model.moe.shared_ffn_hidden:
        return []
    mesh, ops, w = Mesh.of(system, lay), operators(model), moe_share(model)
    f, passes = overlap_fraction(system, load_stack(lay.stack)), forward_passes("layer", lay.recompute, rerun=True)
    out = []
    for src, dst, name in (("norm2", "mlp_in", "shared experts input (sp)"),
                           ("mlp_out", "residual2", "shared experts output (sp)")):
        o, i = megatron_codes(src, dst, 0, True)
        ec = edge_cost(mesh, np.broadcast_to(o, (len(lay), len(o))), np.broadcast_to(i, (len(lay), len(i))),
                       output_bytes(ops[src], lay), passes, dst == "mlp_in", f)
        on = lay.tp > 1
        calls = sum(r[4] for r in ec.steps) + np.zeros(len(lay))
        total = sum(r[3] * r[4] for r in ec.steps) + np.zeros(len(lay))
        per = np.divide(total, calls, out=np.zeros_like(total), where=calls > 0)
        out.append(Comm(name, "all_gather" if dst == "mlp_in" else "reduce_scatter", "tp",
                        nbytes=output_bytes(ops[src], lay), seconds=per, calls=w * calls * on, fwd=w * ec.fwd * on,
                        bwd=w * ec.bwd * on, unit="layer", part="tp_comm", mask=BIT["tp"], active=on))
    return out
