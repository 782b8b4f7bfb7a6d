"""Memory per device under Megatron-LM's placements: parameters and their states, and the activations a layer,
the embedding and the head keep, summed from the operator table (`cost.compute.operator_table`).

Mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, Sec. 3.1): 2 B bf16 weights, 2 B (or 4 B fp32)
gradients, 12 B optimizer state (fp32 master weights, momentum, variance) per parameter; ZeRO stage 1 shards
the optimizer state over the data-parallel group (dp * cp: context-parallel ranks hold replicas too), 2 adds
gradients, 3 adds weights.
Activations follow Korthikanti et al. 2022 (Sec. 4, Eq. 1-2; per layer sbh(34 + 5as/h) for GPT with
dropout), operator by operator (`cost.compute.operator_table.kept_bytes`), so that GQA, gated MLPs, RMSNorm, no dropout and
FlashAttention change exactly the tensors they change.
"""

from __future__ import annotations

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ...spec.model.operators import EMBEDDING_OPS, HEAD_EDGES, HEAD_OPS, LAYER_EDGES, LAYER_OPS, megatron_dim
from ...spec.plan.layout import Plan
from ...spec.stack.profile import load_stack
from .act_offload import host_activations, module_ops, moe_offloaded_bytes
from .frozen import adapter_params, unkept_linears
from .stack_kept import eager_kept_bytes, pipeline_buffer_bytes
from ..compute.kernels import GEMM_INPUT_BYTES, narrow_bytes, saved_input_bytes
from ..layouts import Layouts, among
from ..comm.mesh import gathered_axes
from ..compute.moe import (
    dispatch_buffer_bytes, expert_layer_params, moe_gemm_params, moe_kept_bytes, moe_replicated_params,
    moe_router_params, moe_share,
)
from ..compute.operator_table import (
    Operator, keeps_shard, kept_bytes, local_params, megatron, megatron_codes, operators,
)
from .chunks import kept_scale, uneven_kept_scale
from .peak import phase_live, zero_copy_bytes
from ..pipeline.stages import Stages, pick
from .states import WEIGHT_BYTES, host_optimizer, state_bytes

# The parts of `spec.result.MemoryBreakdown`, each view the one before plus its own parts; host (offloaded) is off
# the device
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "transient", "allocated", "fragmentation",
                "reserved", "runtime", "device", "between_steps", "host")


def _layouts(plan: Plan | Layouts) -> Layouts:
    """A plan as Layouts of one; per-device sizes do not need it resolved (dp only cancels out of the batch)."""
    if isinstance(plan, Layouts):
        return plan
    mp = plan.tp * plan.pp * plan.cp
    dp = plan.dp or (plan.gpus // mp if plan.gpus and plan.gpus % mp == 0 else 1)
    return Layouts.from_plan(plan.model_copy(update={"dp": dp, "schedule": plan.schedule or "1f1b"}))


def head_copy(model: ModelConfig, pp) -> np.ndarray:
    """Whether the last stage holds an LM head of its own: untied, or tied with pp > 1 (Megatron-LM keeps a copy
    on the last stage and all-reduces the two gradients)."""
    return (not model.tie_embeddings) | (np.asarray(pp) > 1)


def unit_params(model: ModelConfig, plan: Plan | Layouts) -> dict[str, np.ndarray]:
    """Parameters per device of one layer, the embedding (+ positions) and the head (final norm + its own LM head,
    `head_copy`) under Megatron-LM's split: every weight over the tp shards of its dims."""
    lay, ops = _layouts(plan), operators(model)
    first, inverse = lay.distinct(("tp",))
    sub = lay.take(first)
    of = lambda names: (sum(local_params(ops[n], megatron(ops[n], sub)) for n in names) + np.zeros(len(sub)))[inverse]
    head = of(["final_norm"]) + np.where(head_copy(model, lay.pp), of(["lm_head"]), 0.0)
    # a MoE model's router and shared experts are data-parallel like the dense weights; its routed experts are
    # not here (cost.compute.moe.expert_layer_params: sharded over ep x etp, their states over edp)
    return {"layer": of(LAYER_OPS) + moe_replicated_params(model, lay), "embedding": of(EMBEDDING_OPS), "head": head}


def largest_module_params(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Parameters per device of a layer's largest module (one GEMM's weights and bias: fused qkv, output
    projection, [w1; w3] or w2) under Megatron-LM's split: what ZeRO-3 gathered module by module holds at once. On
    a stack that gathers tensor by tensor (Stack.zero3_per_tensor: XLA) the largest weight tensor, MaxText's
    layout: query, key, value and the MLP's wi_0, wi_1 separate (base.yml fused_qkv, fused_mlp: false)."""
    ops, (first, inverse) = operators(model), lay.distinct(("tp",))
    sub = lay.take(first)
    part = dict(qkv=model.q_dim / (model.q_dim + model.kv_proj_dim), mlp_in=1 / (1 + model.gated)) \
        if load_stack(lay.stack).zero3_per_tensor else {}
    each = [local_params(ops[n], megatron(ops[n], sub)) * part.get(n, 1.0) + np.zeros(len(sub)) for n in LAYER_OPS
            if ops[n].spec.family == "linear" and ops[n].share > 0]
    return np.maximum.reduce(each)[inverse]


def layer_gemm_params(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """The GEMM matrices of one layer per device under Megatron-LM's split (what fp8/fp4 keep narrow copies of)."""
    ops = operators(model)
    first, inverse = lay.distinct(("tp",))
    sub = lay.take(first)
    gemm = sum(local_params(ops[n], megatron(ops[n], sub), gemm_only=True) for n in LAYER_OPS)
    return (gemm + np.zeros(len(sub)))[inverse] + moe_gemm_params(model, lay)


def stage_params(model: ModelConfig, plan: Plan | Layouts, layers, first, last) -> np.ndarray:
    """Parameters on one device of a stage with `layers` layers; the first stage adds the embedding, the last the
    head (`unit_params`). Arrays (stages, plans) or scalars alike."""
    p = unit_params(model, plan)
    return layers * p["layer"] + np.asarray(first, bool) * p["embedding"] + np.asarray(last, bool) * p["head"]


def sp_replicated_params(model: ModelConfig, layers, last):
    """Parameters that sequence parallelism keeps whole on every tp rank while each rank sees only its part of
    the sequence, so their gradients are partial sums: the norms' scales and shifts and the biases added after
    a row-parallel GEMM's reduce-scatter (Korthikanti et al. 2022, Sec. 4.2.2; Megatron-LM all-reduces them
    over the tp group once per step). `last`: the stage holds the final norm."""
    ops = operators(model)
    per_layer = 0.0
    for name in LAYER_OPS:
        for w in ops[name].weights:
            if megatron_dim(name, True) == "seq":
                per_layer += w.params * ops[name].share  # a norm
            elif w.dims and megatron_dim(name, True) == w.dims[-1]:
                per_layer += (w.params - w.gemm_params) * ops[name].share  # a row-parallel GEMM's bias
    # a MoE layer's router, whole on every tp rank, routes the rank's sequence shard (Megatron marks it
    # sequence-parallel and all-reduces its gradient over tp)
    per_layer += moe_router_params(model)
    return layers * per_layer + np.asarray(last, bool) * ops["final_norm"].weights[0].params


def input_shrink(op: Operator, lay: Layouts) -> np.ndarray | float:
    """How far an operator's kept input is sharded against what it reads under Megatron-LM's placements: the
    sizes of the axes over which it keeps its producer's shard (`operators.keeps_shard`: tp for a
    column-parallel GEMM under sequence parallelism), else 1; always 1 on a stack whose tensor parallelism saves
    the gathered input for the weight gradient (`Stack.tp_saves_input_shard` false: DTensor's ColwiseParallel,
    nanotron)."""
    src = next((a for a, b, slot in LAYER_EDGES + HEAD_EDGES if b == op.name and slot == 0), None)
    if src is None or not load_stack(lay.stack).tp_saves_input_shard:
        return 1.0
    sizes = np.stack(np.broadcast_arrays(lay.dp, lay.cp, lay.tp), axis=-1)
    shrink = {}
    for sp in (False, True):
        out, inp = megatron_codes(src, op.name, 0, sp)
        kept = gathered_axes(out, inp) & keeps_shard(out, inp, op)
        shrink[sp] = np.prod(np.where(kept, sizes, 1), axis=-1)
    return np.where(lay.sequence_parallel, shrink[True], shrink[False])


def _kept(model: ModelConfig, lay: Layouts, names, recompute, offloaded=None) -> np.ndarray:
    """Bytes the operators `names` keep on the device per micro-batch (recompute mode `recompute`: one, or one per
    plan; the tensors `offloaded` to the host, default the plan's), computed once per distinct combination of the
    fields they read (`Layouts.distinct`)."""
    off = lay.recompute_offloaded or () if offloaded is None else offloaded
    ops = operators(model)
    first, inverse = lay.distinct(("tp", "cp", "micro_batch", "sequence_parallel", "recompute"))
    sub, rc = lay.take(first), np.broadcast_to(np.asarray(recompute), (len(lay),))[first]
    kept = sum(kept_bytes(ops[n], megatron(ops[n], sub), model, lay.attention, rc, input_shrink(ops[n], sub),
                          lay.recompute_modules, sub.sp_divisor, saved_input_bytes(lay), lay.recompute_saved or (),
                          off) for n in names) + np.zeros(len(sub))
    return kept[inverse]


def layer_activation_bytes(model: ModelConfig, plan: Plan | Layouts, recompute=None):
    """Bytes one layer keeps for its backward, for one micro-batch on one device: `cost.compute.operator_table.kept_bytes`
    of its operators under Megatron-LM's split. For GPT (q_dim = kv_dim = h, f = 4h, dropout, unfused, tp = 1)
    this is sbh(34 + 5as/h) (Korthikanti et al. 2022, Eq. 1); selective recompute drops the attention core, full
    recompute keeps only the layer input, 2h (/tp with SP). Plus what eager element-wise ops save
    (`eager_kept_bytes`) where the layer is not recomputed, less what torch.compile does not save
    (`compiled_unsaved_bytes`)."""
    lay = _layouts(plan)
    rc = lay.recompute if recompute is None else recompute
    kept = _kept(model, lay, LAYER_OPS, rc) + moe_kept_bytes(model, lay, rc) - _kept(model, lay, unkept_linears(lay), rc)
    kept = kept - np.where(among(rc, ("per-op",)), compiled_unsaved_bytes(model, lay), 0.0)
    return kept + np.where(among(rc, ("none", "selective")), eager_kept_bytes(model, lay), 0.0)


def layer_offloaded_bytes(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Bytes one layer keeps in host memory for one micro-batch of one device: the tensors the names policy
    offloads (Plan.recompute_offloaded; JAX save_and_offload_only_these_names: what the layer would keep with none
    offloaded less what it keeps on the device), or what Megatron-Core's offload_modules save (cost.memory.act_offload)."""
    return (_kept(model, lay, LAYER_OPS, lay.recompute, offloaded=()) - _kept(model, lay, LAYER_OPS, lay.recompute)
            + _kept(model, lay, module_ops(lay.offload_modules), lay.recompute) + moe_offloaded_bytes(model, lay))


def compiled_unsaved_bytes(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Bytes per layer that torchtitan's per-op policy keeps in eager but not under torch.compile, one micro-batch
    on one device: the block's last matmul's output (w2, and its reduce-scatter under SP) feeds only the residual
    sum that leaves the block, which no backward reads. Eager checkpointing stores every output its policy
    marks MUST_SAVE (torch/utils/checkpoint.py _CachingTorchDispatchMode); the compiled graph's partitioner saves
    only what the backward needs (torch/_functorch/partitioners.py). torchtitan's Dec-2024 tables measure the
    difference: Llama 3.1 8B, 16k tokens per device, -5.4 and -5.0 GiB reserved with compile (dev rows M001-M002,
    M008-M009), and 31 waiting layers x 2 x 16384 x 4096 B = 3.9 GiB of it is this."""
    if lay.compile == "none":
        return 0.0 * lay.tp
    return _kept(model, lay, ("mlp_out",), "per-op")


def embedding_activation_bytes(model: ModelConfig, plan: Plan | Layouts):
    """First stage, one micro-batch: what the embedding's output keeps (its dropout mask, 1 B per element) as
    the first layer reads it (/tp with SP)."""
    lay = _layouts(plan)
    return _kept(model, lay, ("embedding_output",), "none")


def head_activation_bytes(model: ModelConfig, plan: Plan | Layouts):
    """Last stage, one micro-batch: final-norm input 2h and LM-head input 2h (both /tp with SP, which keeps the
    column-parallel input sharded and re-gathers it in the backward), fp32 logits 4V/tp. A tiled loss keeps the
    final-norm input alone: its backward re-runs norm, head and loss chunk by chunk (MaxText 0.2.5
    utils/vocabulary_tiling.py, the output head applied per chunk; `loss_temporary_bytes`)."""
    lay = _layouts(plan)
    return _kept(model, lay, HEAD_OPS, "none") - (lay.loss_chunks > 1) * _kept(model, lay, ("lm_head", "loss"), "none")



def narrow_cache_bytes(gemm_params, lay: Layouts):
    """Cached fp8/fp4 copies of GEMM weights with their scales (`kernels.narrow_bytes`) between micro-batches:
    `gemm_params` per device, sharded like the bf16 weights under ZeRO-3, `Stack.narrow_weight_copies` of them
    (Transformer Engine 2.x quantizes a weight with rowwise and columnwise usage while gradients are on, the
    columnwise copy feeding the data-gradient GEMM, and caches both as its "weight" workspace)."""
    if GEMM_INPUT_BYTES[lay.precision] >= 2:
        return 0.0 * gemm_params
    # A frozen base stored in fp8 (LoRA, TE fp8_params) is its own GEMM operand: no cached copy. That no transposed
    # one is kept either is an assumption: MLPerf's Llama 2 70B LoRA fits a 192 GB MI300X only without one.
    copies = load_stack(lay.stack).narrow_weight_copies * (lay.lora is None or lay.lora.base_weights != "fp8")
    return gemm_params * copies * narrow_bytes(lay.precision, lay.fp8_recipe, weights=True) / np.where(
        lay.zero == 3, lay.zero_shard, 1)


def stored_narrow(states: dict, narrow, gemm_params, lay: Layouts) -> tuple[dict, object]:
    """(states, cached copies) where the GEMM weights are stored quantized (Plan.fp8_params): the quantized copies
    `narrow` (`narrow_cache_bytes` of `gemm_params`) are the weights themselves, and no bf16 copy of those GEMM
    weights is held (Megatron-Core builds the layers under Transformer Engine's fp8_model_init where config.fp8_param,
    megatron/core/fp8_utils.py get_fp8_context(is_init=True) and transformer/transformer_block.py:346 at
    core_v0.15.0; its distributed optimizer keeps the fp32 master and writes the quantized weight after the update;
    an MXFP8 weight's bf16 all-gather staging shares the gradient buffer, distributed/param_and_grad_buffer.py
    L695-710). The rest of the weights (norms, router, biases, embedding, LM head) stay bf16. Unchanged otherwise."""
    if not lay.fp8_params:
        return states, narrow
    bf16 = gemm_params * WEIGHT_BYTES / np.where(lay.zero == 3, lay.zero_shard, 1)
    return dict(states, weights=states["weights"] - bf16 + narrow), 0.0 * narrow


def loss_temporary_bytes(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """What the cross entropy holds at its peak beyond the fp32 logits its backward keeps (`kept_bytes`: 4 B per
    logit): (stack.loss_bytes_per_logit - 4; compiled_loss_bytes_per_logit - 4 under compile model+loss) per token
    and local vocabulary entry, one micro-batch on the last stage (the bf16 logits and fp32 temporaries of the
    loss's forward and backward; `spec.stack.profile.Stack`; with tp > 1, stack.tp_loss_bytes_per_logit where it has one). A loss tiled into n = loss_chunks chunks keeps no logits
    and holds one chunk's at a time: stack.loss_bytes_per_logit per token / n (MaxText num_vocab_tiling). MaxText's
    logits are fp32 whether tiled or not (base.yml at e591f30: logits_dot_in_fp32 false, cast_logits_to_fp32 true:
    a bf16 head, its output cast), its stack's loss_bytes_per_logit 4: tokens x vocab x 4 B, / n when tiled."""
    ops = operators(model)
    s = megatron(ops["loss"], lay)
    stack = load_stack(lay.stack)
    eager = np.where((np.asarray(lay.tp) > 1) & (stack.tp_loss_bytes_per_logit is not None),
                     stack.tp_loss_bytes_per_logit or 0.0, stack.loss_bytes_per_logit)
    per_logit = stack.compiled_loss_bytes_per_logit if lay.compile == "model+loss" else eager
    per_logit = per_logit / lay.loss_chunks if lay.loss_chunks > 1 else per_logit - 4.0
    return per_logit * s.tokens * s.local("vocab") + 0.0 * lay.tp


def stage_moe_layers(model: ModelConfig, st: Stages, lay: Layouts) -> np.ndarray:
    """MoE layers' worth of routed experts on each stage kind, in units of the mean layer that
    `cost.compute.moe.expert_layer_params` prices (layers x moe_share where the stage's layers are not known): the
    first stage holds layers 0.., the last ..n-1 (and its multi-token prediction blocks, MoE layers), an explicit
    split each stage its own range, so DeepSeek's leading dense layers (first_dense_layers) sit on the first
    stage only; a middle stage of a kind holds the mean."""
    share = moe_share(model)
    if share == 0.0:
        return 0.0 * st.layers
    n = model.n_layers
    moe = np.array([0] + [int(model.is_moe_layer(i)) for i in range(n)]).cumsum()
    count = lambda a, b: (moe[np.clip(b, 0, n).astype(int)] - moe[np.clip(a, 0, n).astype(int)]
                          + np.maximum(b - n, 0))  # MTP blocks past the last layer count as MoE layers
    layers = np.asarray(st.layers, float)
    if st.explicit:
        start = np.cumsum(layers, axis=0) - layers
    else:
        start = np.where(st.rank == 0, 0.0, n - np.minimum(layers, n))
    exact = count(start, start + layers)
    known = st.explicit | (np.asarray(st.rank) == 0) | (np.asarray(st.head) > 0)
    return np.where(known, exact, layers * share) / share


def zero3_unsharded(lay: Layouts) -> np.ndarray:
    """Whether ZeRO-3 holds the stage's weights gathered (bf16, 2 B/param) and its gradients unsharded (fp32,
    4 B/param) through the step: a stack with `zero3_pp_unsharded` under pipeline parallelism (torchtitan's
    apply_fsdp: reshard_after_forward = not pp_enabled; torch.distributed.pipelining skips the gradient
    reduce-scatter and the reshard after backward on all but the last micro-batch, and FSDP2 accumulates the
    unsharded gradient in its fp32 reduce dtype, FSDPParam.to_accumulated_grad_if_needed)."""
    return (lay.zero == 3) & (lay.pp > 1) & load_stack(lay.stack).zero3_pp_unsharded


def layer_activations(model: ModelConfig, lay: Layouts, layers, chunks) -> np.ndarray:
    """Bytes a stage's layers hold at the peak: what they keep for `chunks` micro-batch chunks in flight
    (`kept_scale`), plus the working set of the layers whose backward runs (what recompute rebuilds).

    Per chunk of c = layers / vpp layers and one micro-batch, with K the bytes one layer keeps under the plan's
    policy and K0 without recompute (`layer_activation_bytes`): none / selective / per-op keep c K and rebuild
    one layer's K0 - K; full with Megatron-LM's recompute_method uniform checkpoints groups of n =
    recompute_num_layers layers (c / n group inputs kept, a whole group of n K0 rebuilt); block recomputes the
    first n layers of the chunk (n K + (c - n) K0 kept, one layer's K0 - K rebuilt) (megatron/core/transformer/
    transformer_block.py _checkpointed_forward)."""
    kept, none = layer_activation_bytes(model, lay), layer_activation_bytes(model, lay, "none")
    c = np.asarray(layers, float) / lay.vpp
    n = np.minimum(float(lay.recompute_num_layers or 1), np.maximum(c, 1.0))
    full = among(lay.recompute, ("full",))
    if lay.recompute_method == "block" and lay.recompute_num_layers:
        per_chunk = np.where(full, n * kept + (c - n) * none, c * kept)
        working = none - kept
    else:
        per_chunk = np.where(full, c / n * kept, c * kept)  # c / n group inputs (the mean chunk's c may be fractional)
        working = np.where(full, n * none - kept, none - kept)
    return np.where(c > 0, per_chunk * chunks + working, 0.0)


def recomputed_share(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Share of a stage's layers whose forward full recompute re-runs in the backward: Megatron-LM's block method
    the first n = recompute_num_layers of each chunk of c = n_layers / (pp vpp) layers (the mean chunk),
    min(n, c) / c; the uniform method and every other policy, each layer (1) (megatron/core/transformer/
    transformer_block.py _checkpointed_forward)."""
    if lay.recompute_method != "block" or not lay.recompute_num_layers:
        return np.ones(len(lay))
    c = model.n_layers / (lay.pp * lay.vpp)
    return np.where(among(lay.recompute, ("full",)), np.minimum(lay.recompute_num_layers, c) / c, 1.0)


def reserved_of(alloc, slack, usable):
    """The reserved view of `alloc` allocated bytes: alloc x (1 + slack), capped at `usable` (what the device gives
    the allocator) while the tensors fit (`memory_views`)."""
    return np.where(alloc <= usable, np.minimum(alloc * (1 + slack), np.maximum(usable, alloc)), alloc * (1 + slack))


def memory_views(lay: Layouts, system: System, parts: dict) -> dict:
    """The three views from the parts (bytes): allocated = states + activations + transient (what torch's
    allocator hands to tensors); reserved = allocated + the stack's allocator slack on CUDA (`Stack.
    allocator_slack`; a CPU has no caching allocator), but never past what the device can give while the
    tensors still fit: the caching allocator frees its cached blocks and retries before it reports out of memory
    (c10/cuda/CUDACachingAllocator.cpp, release_cached_blocks); device = reserved + runtime, the system's
    memory_overhead_gib (context, NCCL buffers, workspaces outside the allocator). between_steps: the states and
    what outlives the step (`narrow`: cached fp8/fp4 weights, a torch pipeline's buffers), what a step leaves
    allocated."""
    alloc = parts["weights"] + parts["gradients"] + parts["optimizer"] + parts["activations"] + parts["transient"]
    slack = load_stack(lay.stack).allocator_slack if system.accelerator.torch_device == "cuda" else 0.0
    runtime = system.memory_overhead_bytes + 0.0 * alloc
    usable = system.accelerator.hbm_bytes - runtime
    reserved = reserved_of(alloc, slack, usable)
    steady = parts["weights"] + parts["gradients"] + parts["optimizer"] + parts.pop("narrow")
    return dict(parts, allocated=alloc, fragmentation=reserved - alloc, reserved=reserved, runtime=runtime,
                device=reserved + runtime, between_steps=steady)


def state_floor(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """A lower bound of every plan's reserved memory (`stage_memory`), bytes: the dense weights, gradients and
    optimizer state (`state_bytes`) of its stage that holds most of them. The reserved view adds activations,
    transients, a MoE model's routed experts and the allocator's slack to a stage's states, none negative, so a
    plan whose floor exceeds the budget does not fit; a search skips pricing the rest of its memory."""
    st = Stages.of(model, lay)
    states = state_bytes(stage_params(model, lay, st.layers, st.embedding > 0, st.head > 0), lay)
    if lay.fp8_params:  # the quantized weights in place of bf16 ones: a floor still (stored_narrow)
        gemm = st.layers * layer_gemm_params(model, lay)
        states, _ = stored_narrow(states, narrow_cache_bytes(gemm, lay), gemm, lay)
    total = states["weights"] + states["gradients"] + states["optimizer"]
    return np.max(np.where(st.valid, total, 0.0), axis=0)


def stage_memory(model: ModelConfig, system: System, lay: Layouts, st: Stages | None = None, per_kind=False):
    """Bytes per device on the fullest stage (most reserved) of every plan: ({MemoryBreakdown field: array},
    stage kind); with per_kind, {field: array (stage kinds, plans)} for every stage kind of `st` instead.

    Needs no kernel times, so a search can drop the plans that do not fit before timing the rest.
    """
    st = Stages.of(model, lay) if st is None else st
    p = unit_params(model, lay)
    params_of = stage_params(model, lay, st.layers, st.embedding > 0, st.head > 0)
    scale = uneven_kept_scale(model, lay, st, kept_scale(lay.schedule, lay.pp, lay.vpp, lay.num_microbatches, st.rank))
    # the head phase and the layer phase never coexist (cost.memory.peak): the rebuilt layer's working set and the head's
    # saved tensors (one micro-batch's; GPipe's waiting ones are kept) are held apart, the larger one added last
    working, head = layer_activations(model, lay, st.layers, 0.0 * scale["layer"]), st.head * head_activation_bytes(
        model, lay)
    act = layer_activations(model, lay, st.layers, scale["layer"] * lay.vpp) - working + head * (scale["head"] - 1)
    act = act + st.embedding * embedding_activation_bytes(model, lay) * scale["embedding"]
    pipe = pipeline_buffer_bytes(model, lay, st.rank == 0, st.head > 0, scale["layer"] * lay.vpp)
    act = act + pipe
    states = state_bytes(params_of, lay, trainable=None if lay.lora is None else st.layers * adapter_params(model, lay))
    if model.moe is not None:  # a MoE model's routed experts: states and copies over edp (frozen under LoRA)
        p_exp, moe_layers = expert_layer_params(model, lay), stage_moe_layers(model, st, lay)
        experts = state_bytes(moe_layers * p_exp, lay, lay.edp, None if lay.lora is None else 0.0)
        states = {k: states[k] + experts[k] for k in states}
    largest = np.maximum.reduce([p["layer"] * (st.layers > 0), p["embedding"] * (st.embedding > 0),
                                 p["head"] * (st.head > 0)])
    gemm = st.layers * layer_gemm_params(model, lay)
    states, narrow = stored_narrow(states, narrow_cache_bytes(gemm, lay), gemm, lay)
    module = np.maximum.reduce([largest_module_params(model, lay) * (st.layers > 0),  # the stage's largest module
                                p["embedding"] * (st.embedding > 0), p["head"] * (st.head > 0)])
    per_tensor, layer_tmp = load_stack(lay.stack).zero3_per_tensor, 0.0
    if model.moe is not None:  # the routed experts' copies, the running MoE layer's dispatch
        # one MoE layer's largest expert module as largest_module_params counts the dense MLP's: Megatron-Core's
        # fused fc1 [w1; w3], or per tensor MaxText's wi_0 (wi_0, wi_1, wo separate: layers/moe.py RoutedMoE)
        fc1 = model.moe.n_experts * model.expert_params() / (lay.ep * lay.etp) * (
            1 if per_tensor else 1 + model.gated) / (2 + model.gated)
        layer_tmp = zero_copy_bytes(lay, moe_layers * p_exp, p_exp * (st.layers > 0), lay.edp, fc1)
        layer_tmp = layer_tmp + (st.layers > 0) * dispatch_buffer_bytes(model, lay)
    unsharded = zero3_unsharded(lay)  # the stage's weights held gathered through the step instead (torchtitan pp)
    zc = lambda m, nxt=None: np.where(unsharded, 0.0, zero_copy_bytes(lay, params_of, largest, module=m, following=nxt))
    if per_tensor:  # one XLA program (its SPMD partitioner gathers per tensor): phases apart, each with the tensors
        # it gathers: a layer's, the head's (tied: the embedding's), the embedding's at the step's ends (cost.memory.peak)
        layer_mod = largest_module_params(model, lay) * (st.layers > 0)
        head_mod = np.where(head_copy(model, lay.pp), p["head"], p["embedding"] + p["head"]) * (st.head > 0)
        phases = ((head, (st.head > 0) * loss_temporary_bytes(model, lay) + zc(head_mod, layer_mod)),
                  (working, layer_tmp + zc(layer_mod)), (0.0, zc(p["embedding"] * (st.embedding > 0), layer_mod)))
        transient = np.where(unsharded, params_of * (WEIGHT_BYTES + 4.0), 0.0)
        live_act, live_tmp = phase_live(*phases)
    else:  # eager torch: whole units gathered ahead (FSDP prefetch, DeepSpeed), held through every phase; the phases
        # summed, as its measured peaks read (cost.memory.peak: the layer phase's own backward temporaries are not counted)
        live_act, live_tmp = head + working, (st.head > 0) * loss_temporary_bytes(model, lay) + layer_tmp
        transient = np.where(unsharded, params_of * (WEIGHT_BYTES + 4.0), zc(module))
    act = act + live_act
    kept = layer_activation_bytes(model, lay) if lay.activation_offload_layers else 0.0  # in host memory: cost.memory.act_offload
    moved, held, host = host_activations(lay, st.layers, scale["layer"] * lay.vpp, kept, layer_offloaded_bytes(model, lay))
    act, transient = act - moved, transient + live_tmp + narrow + held
    states, transient, host = host_optimizer(states, act, transient, narrow, host, lay)
    by_kind = memory_views(lay, system, dict(states, activations=act, transient=transient, narrow=narrow + pipe,
                                             host=host))
    shape = by_kind["reserved"].shape
    by_kind = {k: np.broadcast_to(by_kind[k], shape) for k in MEMORY_PARTS}
    if per_kind:
        return by_kind
    mem_kind = np.argmax(np.where(st.valid, by_kind["reserved"], -np.inf), axis=0)
    out = {k: pick(by_kind[k], mem_kind) for k in MEMORY_PARTS}
    out["host"] = np.max(np.where(st.valid, by_kind["host"], 0.0), axis=0)  # the first stage's, most in flight
    return out, mem_kind
