"""Gemma 4's text model (model_type gemma4_text, or the text_config of a gemma4 wrapper) onto ModelConfig fields, as
transformers reads it: Gemma4TextConfig (src/transformers/models/gemma4/configuration_gemma4.py at
351f643ab9f582c01026b6d75aab3e2c5a8338cd) for the keys and their defaults, Gemma4TextAttention, Gemma4TextMLP,
Gemma4TextRouter, Gemma4TextExperts and Gemma4TextDecoderLayer (modeling_gemma4.py at
c308a309e651a7e033f683353f3f75aa66d29502) for what they build."""

from __future__ import annotations

KINDS = ("sliding_attention", "full_attention")


def gemma4_fields(c) -> dict:
    """ModelConfig fields of a Gemma 4 text config (`c`: spec.model.hf_config._HFConfig over text_config).

    Like Gemma 3 (spec.model.hf_config._gemma3): GeGLU MLP (gelu_pytorch_tanh: three matrices, priced as SwiGLU), tied
    262k embeddings, 5 sliding-window layers per full-attention one (layer_types; by default layer i is full where
    (i + 1) % 6 == 0, and the last layer always is). Unlike it, the full-attention layers have global_head_dim
    wide heads and, with attention_k_eq_v, num_global_key_value_heads key heads whose projection is also the
    values' (no v_proj): ModelConfig.global_attention. With enable_moe_block each layer runs the dense MLP
    (intermediate_size) and, beside it on the same residual, a router and num_experts experts of
    moe_intermediate_size of which top_k_experts serve each token; their outputs are added. Every token goes
    through the dense MLP, as through a shared expert: priced as MoEConfig's one shared expert of width
    intermediate_size (same weights, same FLOPs per token). Not counted (ModelConfig has two norms a layer): the
    post-attention / pre- and post-MLP RMSNorms (and the MoE block's three), the q/k RMSNorms, the router's scale
    (hidden) and per-expert scale (num_experts); the values' RMSNorm has no scale. final_logit_softcapping (a
    tanh over the logits) and the rotary embedding's partial_rotary_factor on full layers (it rotates every
    element, some at frequency 0) add no parameters. Refused: per-layer input embeddings
    (hidden_size_per_layer_input > 0) and layers that reuse another's keys and values (num_kv_shared_layers > 0,
    the small Gemma 4 models), bidirectional text attention (use_bidirectional_attention 'all')."""
    n = c.count("num_hidden_layers", 30)
    c.choice("hidden_activation", ("gelu_pytorch_tanh", "gelu"), "gelu_pytorch_tanh")
    if c.flag("attention_bias", False):
        raise c._bad("attention_bias", "false (Gemma 4's projections have no biases)")
    if c.count0("hidden_size_per_layer_input", 256):
        raise c._bad("hidden_size_per_layer_input", "0 (per-layer input embeddings are not priced; the key defaults "
                                                    "to 256 when absent)")
    if c.count0("num_kv_shared_layers", 0):
        raise c._bad("num_kv_shared_layers", "0 (layers that reuse an earlier layer's keys and values are not priced)")
    c.choice("use_bidirectional_attention", ("vision",), "vision")
    types = list(c.layer_kinds("layer_types", KINDS, n) or [KINDS[(i + 1) % 6 == 0] for i in range(n)])
    types[-1] = "full_attention"  # Gemma4TextConfig.__post_init__ forces the last layer to full attention
    windowed = types.count("sliding_attention")
    if not 0 < windowed < n:
        raise c._bad("layer_types", "both sliding_attention and full_attention layers")
    heads, kv = c.count("num_attention_heads", 8), c.count("num_key_value_heads", 4)
    shared = c.flag("attention_k_eq_v", False)  # num_global_key_value_heads only applies with it
    wide = dict(head_dim=c.count("global_head_dim", 512), shared_kv=shared,
                n_kv_heads=c.count("num_global_key_value_heads", kv) if shared else kv)
    ffn = c.count("intermediate_size", 9216)
    moe = None
    if c.flag("enable_moe_block", False):
        experts = c.count("num_experts")
        moe = dict(n_experts=experts, top_k=c.top_k("top_k_experts", experts, "num_experts"),
                   expert_ffn_hidden=c.count("moe_intermediate_size"), n_shared_experts=1, shared_ffn_hidden=ffn)
    return dict(n_layers=n, hidden=c.count("hidden_size", 2304), n_heads=heads, n_kv_heads=kv,
                head_dim=c.count("head_dim", 256), ffn_hidden=ffn, vocab=c.count("vocab_size", 262144),
                max_seq_len=c.count("max_position_embeddings", 131072), mlp="swiglu", norm="rmsnorm",
                position="rope", tie_embeddings=c.flag("tie_word_embeddings", True), linear_bias="none",
                dropout=c.prob("attention_dropout", 0.0), sliding_window=c.count("sliding_window", 512),
                sliding_window_layers=windowed, global_attention=wide, moe=moe)
