"""Memory per device: weights, gradients, optimizer state, activations, other.

Mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, Sec. 3.1): 2 B bf16 weights, 2 B (or 4 B fp32)
gradients, 12 B optimizer state (fp32 master weights, momentum, variance) per parameter; ZeRO stage 1 shards
the optimizer state over the data-parallel group (dp * cp: context-parallel ranks hold replicas too), 2 adds
gradients, 3 adds weights.
Activations follow Korthikanti et al. 2022 (Sec. 4, Eq. 1-2; per layer sbh(34 + 5as/h) for GPT with
dropout), term by term so that GQA, gated MLPs, RMSNorm, no dropout and FlashAttention change exactly the
tensors they change.
"""

from __future__ import annotations

import numpy as np

from ..models import ModelConfig
from ..plan import Plan

WEIGHT_BYTES = 2.0
OPTIMIZER_BYTES = 12.0  # fp32 master + Adam m + v
GRAD_BYTES = {"fp32": 4.0, "bf16": 2.0}


def layer_params_per_device(model: ModelConfig, tp: int) -> float:
    """Parameters of one layer held by one tp rank: projections (and their biases) / tp, norms replicated."""
    norms = 2 * model.norm_params()
    return (model.params_per_layer() - norms) / tp + norms


def stage_params_per_device(model: ModelConfig, tp, pp, layers, first, last):
    """Parameters on one device of a stage with `layers` layers; the first stage adds the (vocab-parallel)
    embedding, the last the final norm and LM head. With pp > 1 a tied LM head is a second copy on the last
    stage (Megatron-LM keeps the two in sync with an all-reduce). Arrays or scalars alike."""
    first, last = np.asarray(first, bool), np.asarray(last, bool)
    table = model.vocab * model.hidden / np.asarray(tp, float)
    n = layers * layer_params_per_device(model, tp)
    n = n + first * (table + model.position_params())
    head_copy = (not model.tie_embeddings) | ((np.asarray(pp) > 1) & ~first)
    return n + last * (model.norm_params() + np.where(head_copy, table, 0.0))


def sp_replicated_params(model: ModelConfig, layers, last):
    """Parameters that sequence parallelism keeps whole on every tp rank while each rank sees only its part of
    the sequence, so their gradients are partial sums: the norms' scales and shifts and the biases added after
    a row-parallel GEMM's reduce-scatter (Korthikanti et al. 2022, Sec. 4.2.2; Megatron-LM all-reduces them
    over the tp group once per step). `last`: the stage holds the final norm."""
    row_bias = 2 * model.hidden if model.linear_bias == "all" else 0  # out_proj and mlp_out biases
    per_layer = 2 * model.norm_params() + row_bias
    return layers * per_layer + np.asarray(last, bool) * model.norm_params()


def adam_step_bytes(grad_bytes: float) -> float:
    """HBM bytes an Adam step moves per parameter it updates: read the gradient, momentum, variance and fp32
    master (grad_bytes + 12), write momentum, variance, master and the bf16 weight (12 + 2), and read the gradient
    once more for the global norm (grad_bytes): 26 + 2 * grad_bytes (a fused multi-tensor Adam, as apex / torch
    `fused=True`)."""
    return 26.0 + 2.0 * grad_bytes


def state_bytes(params, plan: Plan) -> dict[str, object]:
    """Weights, gradients and optimizer bytes for `params` per device under the plan's ZeRO stage."""
    shard = plan.zero_shard
    g = GRAD_BYTES[plan.grad_dtype]
    zero = plan.zero
    return {
        "weights": params * WEIGHT_BYTES / np.where(zero >= 3, shard, 1),
        "gradients": params * g / np.where(zero >= 2, shard, 1),
        "optimizer": params * OPTIMIZER_BYTES / np.where(zero >= 1, shard, 1),
    }


def layer_activation_bytes(model: ModelConfig, plan: Plan, recompute: str | None = None):
    """Bytes one layer keeps for its backward, for one micro-batch on one device.

    Per token (bf16 = 2 B), after Korthikanti et al. 2022, Sec. 4.1:
      outside tensor-parallel regions (split by tp only with sequence parallelism):
        norm inputs 2h + 2h, QKV input 2h, MLP input 2h, dropout masks h + h (1 B each, if dropout)
      inside (split by tp): Q 2*q_dim, K and V 2*kv_dim each, attention output 2*q_dim,
        MLP: GeLU input and output 2f + 2f; SwiGLU gate and up 4f plus their product 2f
      attention core: unfused softmax output 2as, dropout mask as and output 2as (a = heads, s = keys);
        flash: only the fp32 log-sum-exp, 4a.
    For GPT (q_dim = kv_dim = h, f = 4h, dropout, unfused, tp = 1) this is sbh(34 + 5as/h). Selective
    recompute drops the attention-core term; full recompute keeps only the layer input, 2h (/tp with SP).
    """
    recompute = plan.recompute if recompute is None else recompute
    h, f, t = model.hidden, model.ffn_hidden, plan.tp
    tokens, sp = plan.tokens_per_microbatch, plan.sp_divisor
    drop = 1.0 if model.dropout > 0 else 0.0
    outside = 8 * h + 2 * drop * h
    mlp = 6 * f if model.gated else 4 * f
    inside = 4 * model.q_dim + 4 * model.kv_dim + mlp
    if plan.attention == "unfused":
        core = (2 + 3 * drop) * model.n_heads * plan.seq_len
    else:
        core = 4 * model.n_heads
    core = np.where(recompute == "selective", 0.0, core)
    return np.where(recompute == "full", tokens * 2 * h / sp, tokens * (outside / sp + (inside + core) / t))


def embedding_activation_bytes(model: ModelConfig, plan: Plan):
    """First stage: the embedding dropout mask (1 B per element, Korthikanti et al. 2022, Sec. 4.1)."""
    return plan.tokens_per_microbatch * model.hidden / plan.sp_divisor if model.dropout > 0 else 0.0


def head_activation_bytes(model: ModelConfig, plan: Plan):
    """Last stage, one micro-batch: final-norm input 2h and LM-head input 2h (both /tp with SP, which keeps the
    column-parallel input sharded and re-gathers it in the backward), fp32 logits 4V/tp."""
    return plan.tokens_per_microbatch * (4 * model.hidden / plan.sp_divisor + 4 * np.ceil(model.vocab / plan.tp))
