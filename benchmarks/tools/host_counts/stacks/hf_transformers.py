"""hf-transformers: transformers' GPT2LMHeadModel and LlamaForCausalLM, SDPA attention, called as a training loop
calls them."""

from __future__ import annotations

import torch

from benchmarks.tools.host_counts.counter import count_model, make_rules, tokens

HF_GPT2_RULES = make_rules(r"transformer\.h\.(\d+)", {
    "ln_1": ("norm1", None), "attn": ("qkv", "residual1"), "attn.c_attn": ("qkv", "attention"),
    "attn.attn_dropout": ("attention", None), "attn.c_proj": ("out_proj", "residual1"),
    "attn.resid_dropout": ("residual1", None), "ln_2": ("norm2", None), "mlp": ("mlp_in", "residual2"),
    "mlp.c_fc": ("mlp_in", "activation"), "mlp.act": ("activation", None), "mlp.c_proj": ("mlp_out", "residual2"),
    "mlp.dropout": ("residual2", None),
}, {
    "": ("_model", "loss", "_model"), "transformer": ("_model", "lm_head", "embedding"),
    "transformer.wte": ("embedding", "embedding_output"), "transformer.wpe": ("embedding_output", None),
    "transformer.drop": ("embedding_output", None), "transformer.ln_f": ("final_norm", "final_norm"),
    "lm_head": ("lm_head", "loss"),
})
HF_LLAMA_RULES = make_rules(r"model\.layers\.(\d+)", {
    "input_layernorm": ("norm1", None), "self_attn": ("qkv", "residual1"),
    "self_attn.q_proj": ("qkv", "attention"), "self_attn.k_proj": ("qkv", "attention"),
    "self_attn.v_proj": ("qkv", "attention"), "self_attn.o_proj": ("out_proj", "residual1"),
    "post_attention_layernorm": ("norm2", None), "mlp": ("mlp_in", "residual2"), "mlp.gate_proj": ("mlp_in", None),
    "mlp.act_fn": ("activation", None), "mlp.up_proj": ("mlp_in", "activation"),
    "mlp.down_proj": ("mlp_out", "residual2"),
}, {
    "": ("_model", "loss", "_model"), "model": ("_model", "lm_head", "embedding"),
    "model.embed_tokens": ("embedding", "_model"), "model.rotary_emb": ("attention", "_model"),
    "model.norm": ("final_norm", None), "lm_head": ("lm_head", "loss"),
})


def source(version: str) -> str:
    return (
        f"counted: {version} GPT2LMHeadModel (defaults: gelu_new as NewGELUActivation's 8 eager ops, "
        "dropout 0.1 (embd, attn inside SDPA, resid), Conv1D = addmm + views, DynamicCache built and updated "
        "because config.use_cache defaults True in a plain model(input_ids, labels=...) call: 2 cat per "
        "layer), "
        "SDPA attention, bf16 autocast, loss inside (ForCausalLMLoss: float(), pad, shift, cross_entropy); "
        "_variants.llama: LlamaForCausalLM (LlamaRMSNorm = 6 eager ops, rotary table at model level (_model), "
        "rotate_half, SDPA with GQA); optimizer: torch's default AdamW (foreach on CUDA)")


def hf(arch: str = "gpt2", n_layers: int = 2, autocast: bool = True) -> dict:
    """transformers' GPT2LMHeadModel (its defaults: gelu_new, dropout 0.1) or LlamaForCausalLM, SDPA attention,
    called as a training loop calls it: model(input_ids, labels=input_ids).loss (the model shifts the labels)."""
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    if arch == "llama":
        cfg = LlamaConfig(num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                          intermediate_size=128, vocab_size=128, max_position_embeddings=64)
        cfg._attn_implementation = "sdpa"
        model, rules = LlamaForCausalLM(cfg), HF_LLAMA_RULES
    else:
        cfg = GPT2Config(n_layer=n_layers, n_head=2, n_embd=64, vocab_size=128, n_positions=64, bos_token_id=0,
                         eos_token_id=0)
        cfg._attn_implementation = "sdpa"
        model, rules = GPT2LMHeadModel(cfg), HF_GPT2_RULES
    model.train()
    x, _ = tokens(128)
    res = count_model(model, lambda: model(input_ids=x, labels=x).loss, *rules, n_layers, autocast)
    res["_version"] = f"transformers {transformers.__version__}"
    return res
