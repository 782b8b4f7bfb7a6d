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


def stage_params_per_device(model: ModelConfig, tp: int, pp: int, layers: int, first: bool, last: bool) -> float:
    """Parameters on one device of a stage with `layers` layers; the first stage adds the (vocab-parallel)
    embedding, the last the final norm and LM head. With pp > 1 a tied LM head is a second copy on the last
    stage (Megatron-LM keeps the two in sync with an all-reduce)."""
    n = layers * layer_params_per_device(model, tp)
    if first:
        n += model.vocab * model.hidden / tp + model.position_params()
    if last:
        n += model.norm_params()
        if not model.tie_embeddings or (pp > 1 and not first):
            n += model.vocab * model.hidden / tp
    return n


def state_bytes(params, plan: Plan) -> dict[str, object]:
    """Weights, gradients and optimizer bytes for `params` per device under the plan's ZeRO stage."""
    shard = plan.zero_shard
    g = GRAD_BYTES[plan.grad_dtype]
    return {
        "weights": params * WEIGHT_BYTES / (shard if plan.zero >= 3 else 1),
        "gradients": params * g / (shard if plan.zero >= 2 else 1),
        "optimizer": params * OPTIMIZER_BYTES / (shard if plan.zero >= 1 else 1),
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
    recompute = recompute or plan.recompute
    h, f, t = model.hidden, model.ffn_hidden, plan.tp
    tokens, sp = plan.tokens_per_microbatch, plan.sp_divisor
    if recompute == "full":
        return tokens * 2 * h / sp
    drop = 1.0 if model.dropout > 0 else 0.0
    outside = 8 * h + 2 * drop * h
    mlp = 6 * f if model.gated else 4 * f
    inside = 4 * model.q_dim + 4 * model.kv_dim + mlp
    if plan.attention == "unfused":
        core = (2 + 3 * drop) * model.n_heads * plan.seq_len
    else:
        core = 4 * model.n_heads
    if recompute == "selective":
        core = 0
    return tokens * (outside / sp + (inside + core) / t)


def embedding_activation_bytes(model: ModelConfig, plan: Plan):
    """First stage: the embedding dropout mask (1 B per element, Korthikanti et al. 2022, Sec. 4.1)."""
    return plan.tokens_per_microbatch * model.hidden / plan.sp_divisor if model.dropout > 0 else 0.0


def head_activation_bytes(model: ModelConfig, plan: Plan):
    """Last stage, one micro-batch: final-norm input 2h and LM-head input 2h (both /tp with SP, which keeps the
    column-parallel input sharded and re-gathers it in the backward), fp32 logits 4V/tp."""
    return plan.tokens_per_microbatch * (4 * model.hidden / plan.sp_divisor + 4 * np.ceil(model.vocab / plan.tp))
