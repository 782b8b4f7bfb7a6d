"""Model FLOPs: the one convention behind model_tflops_per_gpu, MFU and HFU.

Per token, forward: 2 FLOPs per weight of every matmul (QKV, output projection, MLP, LM head; not the
embedding lookup) plus the attention core counted without causal masking, 2 matmuls x 2 FLOPs x seq x
(n_heads * head_dim) per layer. Training = 3x forward (backward = 2x forward). This is the convention of PaLM
(Chowdhery et al. 2022, App. B: 6N + 12 l h s), Megatron-LM (Narayanan et al. 2021, Eq. 3) and MosaicML, so
published MFU figures compare directly. Executed FLOPs used for timing (causal attention skips masked blocks)
live with the kernels (`cost.compute.kernels`); hardware FLOPs (HFU) add the recomputed forward work.
"""

from __future__ import annotations

from ...spec.model.global_attention import attention_parts
from ...spec.model.config import ModelConfig
from .attention_kinds import attention_head_width, delta_rule_flops


def matmul_params(model: ModelConfig) -> int:
    """Weights that take part in a matmul per token: all layer projections (MoE layers: the router, the top_k
    routed and the shared experts a token uses) plus the LM head (tied or not)."""
    return model.n_layers * model.matmul_params_per_layer() + model.vocab * model.hidden


def attention_flops_per_token(model: ModelConfig, seq_len: int) -> float:
    """Forward attention-core FLOPs per token, all layers, without causal masking: 4 * l * keys * n_heads * head_dim
    (MLA: the mean of the QK^T and PV widths, `ModelConfig.attention_core_dim`).

    keys = seq_len on the full-attention layers (a Gated DeltaNet layer has none: `cost.compute.attention_kinds.delta_rule_flops`
    instead), or the sliding window on the layers that attend to fewer (Mistral, GPT-OSS's alternate layers), or
    sparse attention's topk (DeepSeek-V3.2, GLM-5; on MLA's latent, `cost.compute.attention_kinds.attention_head_width`) plus its
    indexer's 2 x index_heads x index_head_dim per key over all seq_len keys (DeepSeek-V3.2-Exp report, eq. 1):
    work that never runs is not model FLOPs. Global layers with a head shape of their own (Gemma 4,
    `spec.model.global_attention`): each shape on its share of the layers (`attention_parts`).
    """
    if model.global_attention is not None:
        return sum(w * attention_flops_per_token(part, seq_len) for w, part in attention_parts(model))
    windowed = model.windowed_layers
    keys = windowed * min(seq_len, model.sliding_window or seq_len) + (model.full_attention_layers - windowed) * seq_len
    s = model.sparse_attention
    if s is None:  # Gated DeltaNet layers (linear attention): their chunked delta rule per token
        la = model.linear_attention
        return 4.0 * keys * model.attention_core_dim + (la.layers * delta_rule_flops(model, 1.0) if la else 0.0)
    return model.n_layers * (4.0 * min(seq_len, s.topk) * model.n_heads * attention_head_width(model)
                             + 2.0 * seq_len * s.index_heads * s.index_head_dim)


def model_flops_per_token(model: ModelConfig, seq_len: int, frozen: bool = False) -> float:
    """Training FLOPs per token (forward + backward, no recompute): 3 * (2 * matmul_params + attention). A frozen
    base (LoRA, spec.plan.finetune) has no weight-gradient matmuls: 2 * 2 * matmul_params + 3 * attention (MLPerf's Llama 2
    70B LoRA: ~2/3 of full fine-tuning); its adapters' 6 r (n + k) per adapted linear, under 0.1% at r = 16, are
    not counted."""
    return (2.0 if frozen else 3.0) * 2.0 * matmul_params(model) + 3.0 * attention_flops_per_token(model, seq_len)


def mtp_flops_per_token(model: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token of the multi-token prediction modules (same convention; hardware FLOPs only:
    published MFU counts the main model): each a mean layer's matmuls and attention, its 2h x h projection and
    the LM head (DeepSeek-V3, Sec. 2.2)."""
    per_layer = model.matmul_params_per_layer() + 2 * model.hidden * model.hidden + model.vocab * model.hidden
    attention = attention_flops_per_token(model, seq_len) / model.n_layers
    return model.mtp_layers * 3.0 * (2.0 * per_layer + attention)


def tiled_loss_flops_per_token(model: ModelConfig, loss_chunks: int) -> float:
    """Extra forward FLOPs per token of a tiled loss (same convention): the backward rebuilds each chunk's logits,
    the LM head's forward again, 2 FLOPs per head weight (MaxText 0.2.5 utils/vocabulary_tiling.py: a custom VJP
    that recomputes the logits chunk by chunk); 0 for one chunk."""
    return 2.0 * model.vocab * model.hidden if loss_chunks > 1 else 0.0


def recompute_flops_per_token(model: ModelConfig, seq_len: int, recompute: str, saved=()) -> float:
    """Extra forward FLOPs per token that recomputation re-executes (same convention).

    full: every layer's forward again (not the LM head); selective: the attention core (Korthikanti et al.
    2022, Sec. 5); per-op (torchtitan): the matmuls its policy does not save, their share of each layer GEMM's weights
    (`cost.compute.operator_table.per_op_share`: wk, wo, w3 or a GeLU MLP's fc2; the MLP's in dense layers only), 2 FLOPs
    per weight; names (JAX save_only_these_names): the layer GEMMs and the attention core not among `saved`
    (`cost.compute.remat_names`; latent attention's down projections even with qkv saved), and a MoE MLP's (router, top_k routed and shared experts: the rest of the layer's
    matmul weights) whole; none: 0.
    """
    if recompute == "per-op":
        from .operator_table import operators, per_op_share  # the matmuls the policy rebuilds, and their weights

        ops = operators(model)
        rebuilt = sum(per_op_share(n, model) * ops[n].share * sum(w.gemm_params for w in ops[n].weights)
                      for n in ("qkv", "out_proj", "mlp_in", "mlp_out"))
        return 2.0 * model.n_layers * rebuilt
    if recompute == "names":
        from .operator_table import operators  # the GEMMs the policy rebuilds, and their weights
        from .remat_names import names_rebuilt_gemms

        ops = operators(model)
        gemm = lambda n: ops[n].share * sum(w.gemm_params for w in ops[n].weights)  # noqa: E731
        moe = model.matmul_params_per_layer() - sum(gemm(n) for n in ("qkv", "out_proj", "mlp_in", "mlp_out"))
        rebuilt = sum(w * gemm(n) for n, w in names_rebuilt_gemms(saved, model).items()) + moe
        return 2.0 * model.n_layers * rebuilt + attention_flops_per_token(model, seq_len) * ("attention" not in saved)
    if recompute == "full":
        return 2.0 * (matmul_params(model) - model.vocab * model.hidden) + attention_flops_per_token(model, seq_len)
    if recompute == "selective":
        return attention_flops_per_token(model, seq_len)
    return 0.0
