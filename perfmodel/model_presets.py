"""Built-in model presets, each with the source of its shape.

Parameter counts (ModelConfig.n_params) reproduce the published sizes: GPT-3 175B 174.6B, Llama-3 8B 8.03B,
Llama-3 70B 70.6B, Llama-3.1 405B 405.9B (tests/test_models.py).
"""

_GPT2 = dict(vocab=50257, max_seq_len=1024, mlp="gelu", norm="layernorm", position="learned",
             tie_embeddings=True, linear_bias="all", dropout=0.1)
_GPT2_SRC = "Radford et al. 2019 (GPT-2) and the openai-community/gpt2* HuggingFace configs"

# Brown et al. 2020, Table 2.1; vocab 50257 and context 2048. Dropout 0.1 as Megatron-LM's GPT defaults.
_GPT3 = dict(vocab=50257, max_seq_len=2048, mlp="gelu", norm="layernorm", position="learned",
             tie_embeddings=True, linear_bias="all", dropout=0.1)
_GPT3_SRC = "Brown et al. 2020, Table 2.1"


def _gpt(n_layers, hidden, n_heads, base, source, head_dim=None, name=None):
    return dict(name=name, n_layers=n_layers, hidden=hidden, n_heads=n_heads, head_dim=head_dim,
                ffn_hidden=4 * hidden, source=source, **base)


_LLAMA2 = dict(vocab=32000, max_seq_len=4096, mlp="swiglu", norm="rmsnorm", position="rope",
               tie_embeddings=False, linear_bias="none")
_LLAMA3 = dict(_LLAMA2, vocab=128256, max_seq_len=8192)
_LLAMA31 = dict(_LLAMA3, max_seq_len=131072)

PRESETS: dict[str, dict] = {
    "gpt2-124m": _gpt(12, 768, 12, _GPT2, _GPT2_SRC),
    "gpt2-350m": _gpt(24, 1024, 16, _GPT2, _GPT2_SRC),
    "gpt2-774m": _gpt(36, 1280, 20, _GPT2, _GPT2_SRC),
    "gpt2-1.5b": _gpt(48, 1600, 25, _GPT2, _GPT2_SRC),
    "gpt3-125m": _gpt(12, 768, 12, _GPT3, _GPT3_SRC),
    "gpt3-350m": _gpt(24, 1024, 16, _GPT3, _GPT3_SRC),
    "gpt3-760m": _gpt(24, 1536, 16, _GPT3, _GPT3_SRC),
    # Table 2.1 lists 24 heads of 128 for XL, which is inconsistent with d_model 2048 and 1.3B parameters;
    # 16 heads of 128 (as Megatron-LM and most reimplementations use) gives 1.3B.
    "gpt3-1.3b": _gpt(24, 2048, 16, _GPT3, _GPT3_SRC + " (16 heads of 128; see comment)"),
    "gpt3-2.7b": _gpt(32, 2560, 32, _GPT3, _GPT3_SRC),
    "gpt3-6.7b": _gpt(32, 4096, 32, _GPT3, _GPT3_SRC),
    # d_model 5140 with 40 heads of 128 (attention width 5120), as in Table 2.1.
    "gpt3-13b": _gpt(40, 5140, 40, _GPT3, _GPT3_SRC, head_dim=128),
    "gpt3-175b": _gpt(96, 12288, 96, _GPT3, _GPT3_SRC),
    # The largest model of Narayanan et al. 2021 (Table 1): 128 layers, hidden 25600, 160 heads, vocab 51200,
    # sequence 2048; 12 l h^2 = 1.007T parameters in its layers.
    "megatron-1t": _gpt(128, 25600, 160, dict(_GPT3, vocab=51200), "Narayanan et al. 2021, Table 1 (1T row)"),
    "llama-2-7b": dict(_LLAMA2, n_layers=32, hidden=4096, n_heads=32, ffn_hidden=11008,
                       source="Touvron et al. 2023 (Llama 2), meta-llama/Llama-2-7b-hf config.json"),
    "llama-2-13b": dict(_LLAMA2, n_layers=40, hidden=5120, n_heads=40, ffn_hidden=13824,
                        source="Touvron et al. 2023 (Llama 2), meta-llama/Llama-2-13b-hf config.json"),
    "llama-2-70b": dict(_LLAMA2, n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn_hidden=28672,
                        source="Touvron et al. 2023 (Llama 2), meta-llama/Llama-2-70b-hf config.json"),
    "llama-3-8b": dict(_LLAMA3, n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336,
                       source="Dubey et al. 2024 (Llama 3) Table 3, meta-llama/Meta-Llama-3-8B config.json"),
    "llama-3-70b": dict(_LLAMA3, n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn_hidden=28672,
                        source="Dubey et al. 2024 (Llama 3) Table 3, meta-llama/Meta-Llama-3-70B config.json"),
    "llama-3.1-8b": dict(_LLAMA31, n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336,
                         source="Dubey et al. 2024 (Llama 3) Table 3, meta-llama/Llama-3.1-8B config.json"),
    "llama-3.1-70b": dict(_LLAMA31, n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn_hidden=28672,
                          source="Dubey et al. 2024 (Llama 3) Table 3, meta-llama/Llama-3.1-70B config.json"),
    "llama-3.1-405b": dict(_LLAMA31, n_layers=126, hidden=16384, n_heads=128, n_kv_heads=8, ffn_hidden=53248,
                           source="Dubey et al. 2024 (Llama 3) Table 3, meta-llama/Llama-3.1-405B config.json"),
    "mistral-7b": dict(vocab=32000, max_seq_len=32768, mlp="swiglu", norm="rmsnorm", position="rope",
                       tie_embeddings=False, linear_bias="none", sliding_window=4096, n_layers=32, hidden=4096,
                       n_heads=32, n_kv_heads=8, ffn_hidden=14336,
                       source="Jiang et al. 2023 (Mistral 7B) Table 1, mistralai/Mistral-7B-v0.1 config.json"),
}
for _name, _cfg in PRESETS.items():
    _cfg["name"] = _name
    if _cfg.get("head_dim") is None:
        _cfg.pop("head_dim", None)

# The 405B model was released as Llama 3.1 only.
ALIASES = {"llama-3-405b": "llama-3.1-405b", "gpt3-175b-davinci": "gpt3-175b"}
