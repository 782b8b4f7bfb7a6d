"""The operator table: every operator of a training step (`perfmodel.spec.model.operators`) with its sizes, the kernels it
runs on its local shard, its weights and the activations it keeps for the backward, per micro-batch.

A `Split` says how far each of an operator's iteration dims is divided, for many cases at once: the plans of a
search under Megatron-LM's placements (`megatron`, what `estimate` prices), or every configuration PaSE
considers on one plan's mesh (`search.pase`). Both read the same functions below, so a kernel, a weight or a
kept tensor is written once.

A transformer layer is, in order: norm, QKV projection (+ rotary embedding), attention core, output projection,
residual (+dropout), norm, MLP in (gate/up), activation, MLP out, residual (+dropout). The first pipeline stage
adds the embedding and its output (reduced, + learned positions, dropout), the last the final norm, LM head and
loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import get_args

import numpy as np

from ...errors import InputError
from ...spec.model.global_attention import kv_head_counts
from ...spec.model.config import ModelConfig
from ...spec.model.operators import (
    GRAPH_OPS, LAYER_OPS, SPECS, UNIT_OF, OpSpec, config_of, megatron_dim, megatron_split, tensor_codes,
)
from ...spec.plan.recompute import Recompute
from .kernels import (
    ACT_BYTES, ELEMENTWISE_BYTES, Device, Op, Values, attention_ops, elementwise_op, linear_op, residual_bytes,
)
from .autocast import bias_grad_bytes, cast_bytes, stream_bytes
from .embedding_grad import embedding_ops
from ..layouts import Layouts, among
from ..comm.mesh import BIT, gathered_axes
from .moe import moe_kernels, moe_share
from .remat_names import mla_up_share, names_gemm_share, names_held, names_kept, names_rebuilds


@dataclass(frozen=True)
class Weight:
    """A parameter tensor of an operator: its dims (torch layout), size and how much of it takes part in a GEMM."""

    dims: tuple[str, ...]
    params: float  # full (un-sharded) count, biases included
    gemm_params: float = 0.0  # the GEMM matrix alone (kept as a cached fp8/fp4 copy in narrow precision)


@dataclass(frozen=True)
class Operator:
    """One operator of a model: its spec, the full extent of its feature dims, the GEMM it runs and its weights."""

    spec: OpSpec
    sizes: dict[str, int]  # hidden, heads, ffn, vocab
    divisors: dict[str, int]  # a split of the dim must divide this (the vocabulary pads instead)
    gemm: tuple[str, float, str, float] | None  # (out dim, out features, in dim, in features)
    weights: tuple[Weight, ...]
    out_width: float  # elements per token of the output activation
    share: float = 1.0  # layers of the model's mean layer that run it (the dense MLP's in a MoE model: layer_share)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def unit(self) -> str:
        return UNIT_OF[self.name]


def operators(model: ModelConfig) -> dict[str, Operator]:
    """The operators of `model`'s graph (perfmodel.spec.model.operators.GRAPH_OPS), sized. mlp_in computes gate and up
    alike over ffn (Megatron interleaves them), so a split of ffn splits both; a split of qkv's heads, K and V's."""
    m = model
    if m.linear_attention is not None:
        raise InputError(f"model {m.name}: linear_attention = {m.linear_attention.layers} Gated DeltaNet layers: "
                         "training such a model is not priced yet (serving it is: perfmodel infer); valid: a model "
                         "without linear_attention")
    h, f, v, q, kv = m.hidden, m.ffn_hidden, m.vocab, m.q_dim, m.kv_dim
    # the projections to queries, keys and values as one GEMM of their weights (MLA: its down and up projections)
    qkv = m.qkv_matmul_params() / h
    g = 2 if m.gated else 1
    sizes = {"hidden": h, "heads": m.n_heads, "ffn": f, "vocab": v}
    div = {"hidden": h, "heads": m.n_heads, "ffn": f, "vocab": 1}
    qkv_div = dict(div, heads=math.gcd(m.n_heads, *kv_head_counts(m)))
    bias_qkv = (q + m.kv_proj_dim) * m.linear_has_bias("qkv")
    bias = m.linear_has_bias("out_proj")
    norm = (Weight(("hidden",), m.norm_params()),)
    linear = lambda n, k, b: (Weight((n[0], k[0]), n[1] * k[1] + b, n[1] * k[1]),)
    table = {
        "embedding": (None, (Weight(("vocab", "hidden"), v * h),)
                      + ((Weight(("hidden",), m.position_params()),) if m.position_params() else ()), h),
        "embedding_output": (None, (), h),
        "norm1": (None, norm, h), "norm2": (None, norm, h), "final_norm": (None, norm, h),
        "qkv": (("heads", qkv, "hidden", h), linear(("heads", qkv), ("hidden", h), bias_qkv), qkv),
        "attention": (None, (), q),
        "out_proj": (("hidden", h, "heads", q), linear(("hidden", h), ("heads", q), h * bias), h),
        "residual1": (None, (), h), "residual2": (None, (), h),
        "moe": (None, (), h),  # weights: cost.compute.moe (routed experts over ep x etp, router and shared over tp)
        "mlp_in": (("ffn", g * f, "hidden", h), linear(("ffn", g * f), ("hidden", h), g * f * bias), g * f),
        "activation": (None, (), f),
        "mlp_out": (("hidden", h, "ffn", f), linear(("hidden", h), ("ffn", f), h * bias), h),
        "lm_head": (("vocab", v, "hidden", h), linear(("vocab", v), ("hidden", h), 0), v),
        "loss": (None, (), 0.0),
    }
    return {name: Operator(SPECS[name], sizes, qkv_div if name in ("qkv", "attention") else div, *table[name],
                           share=layer_share(model, name)) for name in GRAPH_OPS}


DENSE_MLP_OPS = ("mlp_in", "activation", "mlp_out")


def layer_share(model: ModelConfig, name: str) -> float:
    """Share of the layers that run operator `name`: the dense MLP's only in the dense layers of a MoE model
    (dense_layers / n_layers), the MoE MLP (`cost.compute.moe`) in its MoE layers (`cost.compute.moe.moe_share`; 0 for a dense
    model), every other operator in all."""
    if name == "moe":
        return moe_share(model)
    return model.dense_layers() / model.n_layers if name in DENSE_MLP_OPS else 1.0


def edge_share(model: ModelConfig, src: str, dst: str) -> float:
    """Share of the layers that pass a tensor from `src` to `dst`: into, inside and out of the dense MLP, the
    dense layers' (its layer_share; a MoE layer's shared experts move their tokens in `sharded.moe_comms`); into
    and out of the MoE MLP, the MoE layers'; elsewhere 1."""
    if "moe" in (src, dst):
        return layer_share(model, "moe")
    if src in DENSE_MLP_OPS or dst in DENSE_MLP_OPS:
        return layer_share(model, "mlp_in")
    return 1.0


@dataclass
class Split:
    """How far each iteration dim of one operator is divided over the stage mesh, for many cases at once (the
    plans of a search, or PaSE's configurations of one plan): dim -> pieces and the bitmask of the axes dividing
    it (cost.comm.mesh.BIT). `batch` and `seq` are the full extents the stage mesh shares (micro_batch * dp
    sequences of seq_len tokens)."""

    op: Operator
    pieces: dict[str, Values]
    masks: dict[str, Values]
    batch: Values
    seq: Values

    def split(self, dim: str) -> Values:
        return self.pieces.get(dim, 1)

    def mask(self, dim: str) -> Values:
        return self.masks.get(dim, 0)

    def local(self, dim: str, size: float | None = None) -> Values:
        """Local extent of `dim` (or of `size` features along it); the vocabulary rounds up (Megatron pads it)."""
        full = {"batch": self.batch, "seq": self.seq}.get(dim, self.op.sizes.get(dim)) if size is None else size
        return np.ceil(full / self.split(dim)) if dim == "vocab" else full / self.split(dim)

    @property
    def tokens(self) -> Values:
        """Tokens of one micro-batch on one device."""
        return self.local("batch") * self.local("seq")


def megatron(op: Operator, lay: Layouts) -> Split:
    """Megatron-LM's split of `op` (perfmodel.spec.model.operators.megatron_split) for every plan of `lay`: an axis the split
    takes only with sequence parallelism (tp over the sequence of norms and residuals) counts where the plan has
    sequence parallelism."""
    sizes = {"dp": lay.dp, "cp": lay.cp, "tp": lay.tp}
    always = megatron_split(op.name, False)
    pieces, masks = {}, {}
    for dim, axes in megatron_split(op.name, True).items():
        on = [True if a in always.get(dim, ()) else lay.sequence_parallel for a in axes]
        pieces[dim] = math.prod(np.where(o, sizes[a], 1) for a, o in zip(axes, on))
        masks[dim] = sum(np.where(o, BIT[a], 0) for a, o in zip(axes, on))
    return Split(op, pieces, masks, lay.micro_batch * lay.dp, lay.seq_len)


def megatron_codes(src: str, dst: str, slot: int, sequence_parallel: bool) -> tuple[np.ndarray, np.ndarray]:
    """Placement codes on (dp, cp, tp) of `src`'s output and of what `dst` reads in `slot`, under Megatron-LM's
    split (perfmodel.spec.model.operators.megatron_split)."""
    a, b = SPECS[src], SPECS[dst]
    out = tensor_codes(a, config_of(a, megatron_split(src, sequence_parallel)), a.out, "out")
    inp = tensor_codes(b, config_of(b, megatron_split(dst, sequence_parallel)), b.ins[slot], "in")
    return out[0], inp[0]


def output_bytes(op: Operator, lay: Layouts) -> Values:
    """Bytes of `op`'s whole output activation over the stage mesh for one micro-batch (micro_batch * dp
    sequences, bf16): what a redistribution moves a share of (`cost.comm.mesh.redistribution_steps`)."""
    return lay.micro_batch * lay.dp * lay.seq_len * op.out_width * ACT_BYTES


def forward_passes(unit: str, recompute, rerun: bool = False) -> Values:
    """Forwards a unit's operators (or a tensor between two) run per micro-batch: twice in a layer under full
    recompute (its own and the recomputed one in the backward), and under names where `rerun`
    (`remat_names.names_edge_reruns`); else once."""
    again = among(recompute, ("full",)) | (among(recompute, ("names",)) & rerun)
    return np.where(again & (unit == "layer"), 2, 1)


def keeps_shard(out: np.ndarray, inp: np.ndarray, consumer: Operator) -> np.ndarray:
    """Where a GEMM keeps the producer's shard of its input for the weight gradient and gathers it again in the
    backward, instead of keeping what it gathered (Megatron-LM sequence parallelism, Korthikanti et al. 2022,
    Sec. 4.2.2): wherever the forward gathers its input (`cost.comm.mesh.gathered_axes`)."""
    return gathered_axes(out, inp).any(axis=-1) & (consumer.spec.family == "linear")


def kernels(op: Operator, s: Split, dev: Device) -> list[Op]:
    """The kernels `op` runs on its local shard per micro-batch (cost.compute.kernels), in the order they run.

    Norms, residuals and the activation are memory-bound (`kernels.ELEMENTWISE_BYTES`, `residual_bytes`); the
    embedding is cost.compute.embedding_grad's; the LM head stays bf16 under fp8/fp4 (Megatron-LM and Transformer Engine
    keep the output layer out of the narrow-precision region); the cross-entropy is a fused vocab-parallel kernel.
    """
    if op.share == 0.0:  # the dense MLP of a model whose every layer routes to experts
        return []
    if op.share != 1.0:
        return [k.scaled(op.share) for k in kernels(replace(op, share=1.0), s, dev)]
    m, fam, T = dev.model, op.spec.family, s.tokens
    modules = getattr(dev.plan, "recompute_modules", None) or ("core_attn",)
    saved = getattr(dev.plan, "recompute_saved", None) or ()
    rec = recomputed_in(op, modules, m, saved)
    if op.unit == "head" and getattr(dev.plan, "loss_chunks", 1) > 1:
        rec = get_args(Recompute)  # a tiled loss re-runs final norm, head and loss per chunk in the backward
    if fam == "embedding":
        return embedding_ops(dev, T * s.local("hidden"), s.split("vocab"), s.local("vocab") * s.local("hidden"))
    if fam == "embedding_output":
        return embedding_output_kernels(dev, T * s.local("hidden"))
    if fam == "norm":
        return stream_kernels(dev, "norm", op.name, T * s.local("hidden"), rec)
    if fam == "linear":
        out_dim, n, in_dim, k = op.gemm
        prec = "bf16" if op.name == "lm_head" else None
        rows = s.local(out_dim, n)
        if op.name == "lm_head" and dev.stack.vocab_multiple > 1:  # the stack's padded vocabulary (Stack.vocab_multiple)
            rows = np.ceil(rows / dev.stack.vocab_multiple) * dev.stack.vocab_multiple
        ops = linear_op(dev, op.name, T, rows, s.local(in_dim, k), rec, precision=prec)
        ops += autocast_kernels(dev, op.name, T, rows, s.local(in_dim, k), rec)
        parts = (("per-op", per_op_share(op.name, m)), ("names", names_gemm_share(op.name, saved, m)),
                 ("selective", mla_up_share(m) if op.name == "qkv" and m.mla is not None else 1.0))
        ops = [replace(k_, partial=tuple(p for p in parts if 0.0 < p[1] < 1.0)) for k_ in ops]  # MLA: down proj.
        if op.name == "qkv" and m.position == "rope":  # names: the rotary parts stay with saved queries and keys
            rope = tuple(r for r in rec if r != "names") + ("names",) * names_rebuilds("qkv", saved)  # mla_up_proj too
            ops.append(elementwise_op(dev, "rope", T * m.rope_width / s.split("heads"),
                                      *ELEMENTWISE_BYTES["rope"], rope + ("per-op",) * ("per-op" not in rope)))
        return ops
    if fam == "attention":
        core = attention_ops(dev, T, s.local("heads"), s.local("seq"), s.local("batch"))
        modes = ("full",) + ("selective",) * ("core_attn" in modules) + ("names",) * ("attention" not in saved)
        return [replace(k, recompute=modes) for k in core]
    if fam == "residual":
        return stream_kernels(dev, "residual", op.name, T * s.local("hidden"), rec, dropout=m.dropout > 0)
    if fam == "moe":  # its tokens split like the stage's (configurations keep them so), its experts by ep x etp
        lay = dev.plan if isinstance(dev.plan, Layouts) else Layouts.from_plan(dev.plan)
        return moe_kernels(m, dev, lay)
    if fam == "activation":
        act = "swiglu" if m.gated else "gelu"
        return [elementwise_op(dev, act, T * s.local("ffn"), *ELEMENTWISE_BYTES[act], rec)]
    return stream_kernels(dev, "cross_entropy", "cross_entropy", T * s.local("vocab"), rec)


def stream_kernels(dev: Device, kind: str, name: str, elements: Values, rec, dropout: bool = False) -> list[Op]:
    """A norm, residual add (+ its dropout's mask) or loss over `elements` values: memory-bound at the bf16 bytes of
    cost.compute.kernels (ELEMENTWISE_BYTES, residual_bytes), or at the fp32 stream's on an eager autocast plan
    (cost.compute.autocast.stream_bytes)."""
    bf16 = residual_bytes(dropout) if kind == "residual" else ELEMENTWISE_BYTES[kind]
    return [elementwise_op(dev, name, elements, *stream_bytes(dev, kind, bf16, mask=float(dropout)), rec)]


def autocast_kernels(dev: Device, name: str, tokens: Values, n: Values, k: Values, rec) -> list[Op]:
    """What eager PyTorch adds to linear `name` of local shape (n out, k in) over `tokens` rows, as memory-bound
    kernels: torch.autocast's casts (cost.compute.autocast.cast_bytes), and the bias gradient as its own reduction
    (cost.compute.autocast.bias_grad_bytes, backward only, never recomputed); none where the stack does neither."""
    cast, bias = cast_bytes(dev, name, tokens, n, k), bias_grad_bytes(dev, name, tokens, n)
    return ([elementwise_op(dev, f"{name}.autocast", *cast, rec)] if cast is not None else []) + (
        [elementwise_op(dev, f"{name}.bias_grad", *bias, ())] if bias is not None else [])


def recomputed_in(op: Operator, modules, model: ModelConfig, saved=()) -> tuple[str, ...]:
    """The recompute modes that re-run `op`'s forward in the backward (a layer op; none for the embedding and
    head): full, every one; per-op (torchtitan), the memory-bound ops and the matmuls it does not save
    (`per_op_share`: wo, and wk and w3 as their share of qkv and mlp_in); selective, the ops of Megatron-Core's
    `modules`: layernorm the norms, mlp the dense MLP, mla_up_proj MLA's qkv (`mla_up_share`; core_attn: `kernels`);
    names, what the `saved` tensors do not spare (`remat_names.names_rebuilds`; MLA's qkv always, its down proj.)."""
    if op.unit != "layer":
        return ()
    fam, modes = op.spec.family, ["full"]
    if fam in ("norm", "residual", "activation") or per_op_share(op.name, model) > 0:
        modes.append("per-op")
    if (fam == "norm" and "layernorm" in modules) or (op.name in DENSE_MLP_OPS and "mlp" in modules) or (
            op.name == "qkv" and "mla_up_proj" in modules and model.mla is not None):  # MLA: its `mla_up_share`
        modes.append("selective")
    return tuple(modes) + ("names",) * names_rebuilds(op.name, saved, model.mla is not None)


def embedding_output_kernels(dev: Device, elements: Values) -> list[Op]:
    """The learned position add and the embedding dropout, on the embedding's output as the first layer reads
    it (`elements` per device: after the vocab-parallel reduction, so / tp with sequence parallelism).
    Megatron-LM's LanguageModelEmbedding adds the positions and drops out after scattering the sequence."""
    m, ops = dev.model, []
    if m.position == "learned":
        ops.append(elementwise_op(dev, "position_embedding", elements, *ELEMENTWISE_BYTES["position_embedding"], ()))
    if m.dropout > 0:
        ops.append(elementwise_op(dev, "embedding_dropout", elements, *ELEMENTWISE_BYTES["embedding_dropout"], ()))
    return ops


def embedding_output_kept(model: ModelConfig, elements: Values) -> Values:
    """Bytes the embedding's output keeps: the dropout mask, 1 B per element (Korthikanti et al. 2022, Sec. 4.1)."""
    return elements * (1.0 if model.dropout > 0 else 0.0)


def kept_bytes(op: Operator, s: Split, model: ModelConfig, attention: str, recompute, input_shrink=1.0,
               modules=None, sp_divisor=1, input_bytes=2.0, saved=(), offloaded=()) -> Values:
    """Bytes `op` keeps for its backward, per micro-batch on one device (bf16 = 2 B per element; a layer GEMM's
    saved input `input_bytes` per element, `kernels.saved_input_bytes`: its quantized copy under fp8/fp4 on a
    Transformer Engine stack).

    After Korthikanti et al. 2022, Sec. 4.1, term by term: a norm keeps its input (2 h); a GEMM its input (2 k,
    divided by `input_shrink` where it keeps the producer's shard and gathers it again in the backward, as
    Megatron-LM's sequence parallelism does); attention Q, K, V (2 (q + 2 kv)) and its core: flash the fp32
    log-sum-exp (4 per head), unfused the softmax output, dropout mask and output (2 + 3 drop per head and key);
    a residual its dropout mask (1 B); the activation its input (SwiGLU: gate and up, 4 f; GeLU 2 f); the loss
    its fp32 logits (4 V); the embedding's output its dropout mask. For GPT (q = kv = h, f = 4h, dropout,
    unfused, tp = 1) a layer sums to sbh(34 + 5as/h).

    Recompute (layer ops): full keeps only the layer's input (norm1's); selective drops what its `modules`
    (Megatron-Core --recompute-modules, `selective_drops`) rebuild; per-op keeps what torchtitan's per-op
    policy saves (`per_op_kept`); names the layer input and the `saved` tensors but those `offloaded` to the host
    (`remat_names.names_kept`).
    """
    fam, T = op.spec.family, s.tokens
    drop = 1.0 if model.dropout > 0 else 0.0
    rc = np.asarray(recompute)
    if fam == "norm":
        kept = 2 * T * s.local("hidden")
    elif fam == "linear":
        kept = (input_bytes if op.spec.layer else 2.0) * T * s.local(op.gemm[2], op.gemm[3]) / input_shrink
    elif fam == "attention":
        heads = s.local("heads")
        core = 4.0 * heads if attention == "flash" else (2 + 3 * drop) * heads * s.seq
        qkv, kv = (T * 2.0 * w / s.split("heads") for w in (model.attention_input_width, model.kv_width))
        kept = qkv + T * core
    elif fam == "residual":
        kept = drop * T * s.local("hidden")
    elif fam == "activation":
        kept = 2 * T * s.local("ffn") * (2 if model.gated else 1)
    elif fam == "loss":
        kept = 4 * T * s.local("vocab")
    elif fam == "embedding_output":
        kept = embedding_output_kept(model, T * s.local("hidden"))
    else:
        kept = 0.0 * T
    if op.spec.layer:
        dropped = selective_drops(op, s, model, attention, modules or ("core_attn",), input_bytes)
        kept = np.where(rc == "selective", kept - dropped, kept)
        kept = np.where(rc == "per-op", per_op_kept(op, s, model, sp_divisor), kept)
        bf16 = kept * (2.0 / input_bytes if fam == "linear" else 1.0)  # JAX saves the bf16 tensor, not a narrow copy
        kept = np.where(rc == "names", names_kept(op.name, bf16, (qkv, kv) if fam == "attention" else (0.0, 0.0),
                                                      names_held(saved, offloaded)), kept)
        if op.name != "norm1":
            kept = np.where(rc == "full", 0.0, kept)
    return kept * op.share


def selective_drops(op: Operator, s: Split, model: ModelConfig, attention: str, modules, input_bytes=2.0) -> Values:
    """Bytes of `op`'s kept tensors that Megatron-Core's selective recompute of `modules` rebuilds in the backward
    instead (megatron/core/transformer/transformer_layer.py, core_r0.14): core_attn the attention core (the
    flash kernel's log-sum-exp or the unfused softmax, dropout and output); layernorm both norms' outputs (what
    qkv and mlp_in keep as their inputs); mlp the dense MLP past its input (the activation's input, mlp_out's
    input; a GEMM input at `input_bytes` per element); mla_up_proj MLA's up-projected queries, keys and values (the latents stay). The MoE modules
    (moe, moe_act, shared_experts) act on the MoE MLP (`cost.compute.moe.moe_kept_bytes`)."""
    fam, T, out = op.spec.family, s.tokens, 0.0 * s.tokens
    if fam == "attention":
        heads = s.local("heads")
        drop = 1.0 if model.dropout > 0 else 0.0
        if "core_attn" in modules:
            out = out + T * (4.0 * heads if attention == "flash" else (2 + 3 * drop) * heads * s.seq)
        if "mla_up_proj" in modules and model.mla is not None:
            a = model.mla
            latents = (a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim
            out = out + T * 2.0 * np.maximum(model.attention_input_width / s.split("heads") - latents, 0.0)
    elif op.name in ("qkv", "mlp_in") and "layernorm" in modules:
        out = out + input_bytes * T * s.local(op.gemm[2], op.gemm[3])
    if "mlp" in modules and op.name in ("activation", "mlp_out"):
        out = out + (2 * T * s.local("ffn") * (2 if model.gated else 1) if fam == "activation"
                     else input_bytes * T * s.local(op.gemm[2], op.gemm[3]))
    return out


def per_op_share(name: str, model: ModelConfig) -> float:
    """Share of a layer GEMM's forward that torchtitan's per-op selective activation checkpointing re-runs in the
    backward: it saves every second matmul's output, counting aten.mm calls per block (torchtitan/models/llama3/
    infra/parallelize.py `_custom_policy`, `meta[mm_count_key] % 2 == 0` recomputed) over torchtitan's separate
    projections wq, wk, wv, wo, w1, w3, w2, so the 2nd, 4th and 6th are rebuilt: wk (kv / (q + 2 kv) of the fused
    qkv GEMM's FLOPs), wo (all of out_proj) and w3 (half of the gated [w1; w3]); a GeLU MLP's fc1, fc2 are the
    5th and 6th, so fc2 (mlp_out) is rebuilt and fc1 kept (as `per_op_kept`). 0 for every other op (the LM head
    is outside the blocks)."""
    if name == "qkv":
        return model.kv_dim / (model.q_dim + model.kv_proj_dim) if model.mla is None else 0.0
    if name == "out_proj":
        return 1.0
    if name == "mlp_in":
        return 0.5 if model.gated else 0.0
    if name == "mlp_out":
        return 0.0 if model.gated else 1.0
    return 0.0


def per_op_kept(op: Operator, s: Split, model: ModelConfig, sp_divisor=1) -> Values:
    """Bytes `op` keeps under torchtitan's per-op selective activation checkpointing
    (torchtitan/models/llama3/infra/parallelize.py `_apply_ac_to_transformer_block`, mode "selective", option
    "op"): a checkpointed block saves its input, the outputs of the ops in `_save_list` (SDPA, the tp
    reduce-scatters) and of every second matmul (mm counted per block: wq, wk, wv, wo, w1, w3, w2 -> wq, wv,
    w1, w2 saved), and rebuilds everything else in the backward. Per op: norm1 the block input (2 h, /tp with
    SP); qkv wq's and wv's outputs (2 (q + kv)); attention SDPA's output and fp32 log-sum-exp (2 q + 4 per
    head); out_proj the reduce-scatter output under SP (2 h / tp); mlp_in w1's output (2 f; a GeLU MLP's fc1,
    the fifth matmul); mlp_out w2's output (2 h, each tp rank's partial sum of the whole sequence; a GeLU
    MLP's fc2 is the sixth, not saved) and its reduce-scatter's (2 h / tp). `sp_divisor`: tp under sequence
    parallelism, else 1."""
    T, name, sp = s.tokens, op.name, np.asarray(sp_divisor) > 1
    if name == "norm1":
        return 2 * T * s.local("hidden")
    if name == "qkv":
        return 2 * T * (model.q_dim + model.kv_dim) / s.split("heads")
    if name == "attention":
        return T * (2.0 * model.q_dim / s.split("heads") + 4.0 * s.local("heads"))
    if name == "out_proj":
        return np.where(sp, 2 * T * model.hidden / np.asarray(sp_divisor), 0.0)
    if name == "mlp_in":
        return 2 * T * s.local("ffn")  # w1 of [w1; w3] (the op's ffn dim is f, its GEMM's 2f), or fc1
    if name == "mlp_out":
        rs = np.where(sp, 2 * T * model.hidden / np.asarray(sp_divisor), 0.0)
        return (2 * T * model.hidden if model.gated else 0.0) + rs
    return 0.0 * T


def weight_shard(op: Operator, w: Weight, s: Split) -> Values:
    """How many pieces `w` is cut into: the product of the splits of the dims it has."""
    return math.prod(s.split(d) for d in w.dims) if w.dims else 1.0


def local_params(op: Operator, s: Split, stored: tuple[bool, ...] | None = None, gemm_only: bool = False) -> Values:
    """Parameters of `op` on one device (each weight over its shards; `gemm_only`: its GEMM matrices alone);
    `stored[i]` False for a weight another operator holds (a tied LM head on the embedding's stage)."""
    stored = stored or (True,) * len(op.weights)
    return sum((w.gemm_params if gemm_only else w.params) / weight_shard(op, w, s)
               for w, keep in zip(op.weights, stored) if keep) * op.share + 0.0


def layer_families() -> dict[str, int]:
    """How many of a layer's operators belong to each family (two norms, two residuals, one activation, ...)."""
    out: dict[str, int] = {}
    for name in LAYER_OPS:
        out[SPECS[name].family] = out.get(SPECS[name].family, 0) + 1
    return out


def gemm_shapes(model: ModelConfig, tokens: int, tp: int, lm_head: bool) -> list[tuple[str, int, int, int]]:
    """(op, m, n, k) of each weight GEMM's forward on one tp rank under Megatron-LM's split, for `tokens` tokens of
    one micro-batch: the layer's four (qkv, out_proj, mlp_in, mlp_out) and, with `lm_head`, the LM head. The
    backward of (m, n, k) runs (m, k, n) and (k, n, m) (cost.compute.kernels.linear_op)."""
    ops = operators(model)
    out = []
    for name in [o for o in LAYER_OPS if ops[o].gemm] + (["lm_head"] if lm_head else []):
        op, dim = ops[name], megatron_dim(name, False)
        s = Split(op, {dim: tp}, {}, tokens, 1)  # tokens of one micro-batch on one rank
        out_dim, n, in_dim, k = op.gemm
        out.append((name, tokens, int(s.local(out_dim, n)), int(s.local(in_dim, k))))
    return out
