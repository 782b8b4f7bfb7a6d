"""Built-in model presets, each with the source of its shape.

Parameter counts (ModelConfig.n_params) reproduce the published sizes: GPT-3 175B 174.6B, Llama-3 8B 8.03B,
Llama-3 70B 70.6B, Llama-3.1 405B 405.9B (tests/test_models.py); the mixture-of-experts presets their published
total and active sizes, e.g. Mixtral 8x7B 46.7B / 12.9B, DeepSeek-V3 671B / 37B, GPT-OSS-120B 116.8B / 5.1B
(tests/test_models_moe.py, which also parses each one's HuggingFace config.json into the same model).
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


# OPT (Zhang et al. 2022, Table 1: layers, heads, d_model; MLP 4 x d_model): pre-LN decoder with learned positions,
# biases, tied embeddings; vocab_size 50272 and max_position_embeddings 2048 as the facebook/opt-* config.json
# (DeepSpeed-Chat's and DeepSpeedExamples' --model_name_or_path). ReLU priced as GELU (two matrices). opt-350m is
# left out: it projects a 512-wide embedding into its 1024-wide layers and normalises after them.
_OPT = dict(vocab=50272, max_seq_len=2048, mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True,
            linear_bias="all", dropout=0.1)
_OPT_SRC = "Zhang et al. 2022 (OPT) Table 1, facebook/opt-* config.json"

_LLAMA2 = dict(vocab=32000, max_seq_len=4096, mlp="swiglu", norm="rmsnorm", position="rope",
               tie_embeddings=False, linear_bias="none")
_LLAMA3 = dict(_LLAMA2, vocab=128256, max_seq_len=8192)
_LLAMA31 = dict(_LLAMA3, max_seq_len=131072)

_MISTRAL = dict(mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=False, linear_bias="none")
_QWEN3 = dict(vocab=151936, max_seq_len=40960, mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=False,
              linear_bias="none")
_QWEN3_SRC = "Yang et al. 2025 (Qwen3) Table 1, {}"
_QWEN25 = dict(_QWEN3, vocab=152064, max_seq_len=131072, linear_bias="qkv")
_QWEN25_SRC = "Qwen Team 2024 (Qwen2.5 technical report) Table 1, {}"
_GEMMA2 = dict(vocab=256000, max_seq_len=8192, mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=True,
               linear_bias="none", sliding_window=4096)
_GEMMA2_SRC = ("Gemma Team 2024 (Gemma 2) Table 1, MaxText configs/models/gemma2-{0}.yml, Megatron-Bridge "
               "models/gemma/gemma2_provider.py (vocab_size 256000)")
# DeepSeek-V3 report (DeepSeek-AI 2024, arXiv 2412.19437) Sec. 5.4.3: "the acceptance rate of the second token
# prediction ranges between 85% and 90% across various generation topics" (its MTP module as a draft, 1.8x TPS).
# The low end, as a planner should assume; a chained draft's later tokens are assumed to keep it (the report states
# the second token's alone).
DEEPSEEK_V3_MTP_ACCEPTANCE = dict(rate=0.85, source="DeepSeek-V3 technical report (arXiv 2412.19437) Sec. 5.4.3: "
                                  "85-90% of second-token drafts accepted; the low end")
# DeepSeek-V3's architecture (also Kimi K2 and Moonlight): MLA, sigmoid routing over fine-grained experts of 2048
# (top-8) plus one shared expert. head_dim is the per-head query/key width, 128 + 64.
DEEPSEEK_ARCH = dict(mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=False, linear_bias="none",
                     head_dim=192)
_DEEPSEEK_MOE = dict(top_k=8, expert_ffn_hidden=2048, n_shared_experts=1, router_scoring="sigmoid")
DEEPSEEK_MLA = dict(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
_GPT_OSS = dict(vocab=201088, max_seq_len=131072, mlp="swiglu", norm="rmsnorm", position="rope",
                tie_embeddings=False, linear_bias="all", hidden=2880, n_heads=64, n_kv_heads=8, head_dim=64,
                ffn_hidden=2880, sliding_window=128)
_GPT_OSS_MOE = dict(top_k=4, expert_ffn_hidden=2880, router_bias=True, expert_bias=True)
_GEMMA3 = dict(vocab=262208, max_seq_len=131072, mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=True,
               linear_bias="none", sliding_window=1024)
# Gemma 4 (text models; spec.model.hf_gemma4 for how each config key maps): config.json text_config of
# google/gemma-4-26B-A4B and nvidia/Gemma-4-31B-IT-NVFP4 (the NVFP4 checkpoint's shape is the bf16 model's; its
# quantization is a serving choice, not the model's): vocab_size 262144, max_position_embeddings 262144,
# tie_word_embeddings true, sliding_window 1024 on 5 of every 6 layers (layer_types), head_dim 256 there;
# global_head_dim 512, attention_k_eq_v true and num_global_key_value_heads on the full-attention layers.
_GEMMA4 = dict(vocab=262144, max_seq_len=262144, mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=True,
               linear_bias="none", sliding_window=1024, head_dim=256)
_GEMMA4_SRC = "{} config.json text_config (Gemma 4, transformers' Gemma4TextConfig; spec.model.hf_gemma4)"

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
    "opt-125m": _gpt(12, 768, 12, _OPT, _OPT_SRC),
    "opt-1.3b": _gpt(24, 2048, 32, _OPT, _OPT_SRC),
    "opt-2.7b": _gpt(32, 2560, 32, _OPT, _OPT_SRC),
    "opt-6.7b": _gpt(32, 4096, 32, _OPT, _OPT_SRC),
    "opt-13b": _gpt(40, 5120, 40, _OPT, _OPT_SRC),
    "opt-30b": _gpt(48, 7168, 56, _OPT, _OPT_SRC),
    "opt-66b": _gpt(64, 9216, 72, _OPT, _OPT_SRC),
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
    # Mistral NeMo 12B (mistralai/Mistral-Nemo-Instruct-2407 config.json: head_dim 128 below hidden / heads = 160,
    # max_position_embeddings 1024000, no sliding window) and Yi-34B (01-ai/Yi-34B config.json, a Llama layout)
    "mistral-nemo-12b": dict(_MISTRAL, vocab=131072, max_seq_len=1024000, n_layers=40, hidden=5120, n_heads=32,
                             n_kv_heads=8, head_dim=128, ffn_hidden=14336,
                             source="mistralai/Mistral-Nemo-Instruct-2407 config.json"),
    "yi-34b": dict(_LLAMA2, vocab=64000, n_layers=60, hidden=7168, n_heads=56, n_kv_heads=8, ffn_hidden=20480,
                   source="01-ai/Yi-34B config.json (LlamaForCausalLM: rope_theta 5e6, max_position_embeddings 4096)"),
    "mistral-7b": dict(vocab=32000, max_seq_len=32768, mlp="swiglu", norm="rmsnorm", position="rope",
                       tie_embeddings=False, linear_bias="none", sliding_window=4096, n_layers=32, hidden=4096,
                       n_heads=32, n_kv_heads=8, ffn_hidden=14336,
                       source="Jiang et al. 2023 (Mistral 7B) Table 1, mistralai/Mistral-7B-v0.1 config.json"),
    # Llama 3.2's small text models: torchtitan models/llama3/__init__.py flavors 1B / 3B at b5bcd76c (dim, layers,
    # heads, kv heads; ffn compute_ffn_hidden_dim(dim, multiple_of=1024, ffn_dim_multiplier=1.5 / 1.0) = 8192) and
    # meta-llama/Llama-3.2-1B config.json (as quoted with its _commit_hash in kevinstephano/thunder_model_blocks
    # hf_llama/llama_config.py): tie_word_embeddings true, head_dim 64, max_position_embeddings 131072
    "llama-3.2-1b": dict(_LLAMA31, n_layers=16, hidden=2048, n_heads=32, n_kv_heads=8, ffn_hidden=8192,
                         tie_embeddings=True,
                         source="meta-llama/Llama-3.2-1B config.json, torchtitan models/llama3 flavor 1B"),
    "llama-3.2-3b": dict(_LLAMA31, n_layers=28, hidden=3072, n_heads=24, n_kv_heads=8, ffn_hidden=8192,
                         tie_embeddings=True,
                         source="meta-llama/Llama-3.2-3B config.json, torchtitan models/llama3 flavor 3B"),
    # Llama 3.3 70B: Llama 3.1 70B's shape (ai-dynamo/aiconfigurator@f577ab84 model_configs/
    # meta-llama--Llama-3.3-70B-Instruct_config.json; MaxText configs/models/llama3.3-70b.yml)
    "llama-3.3-70b": dict(_LLAMA31, n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn_hidden=28672,
                          source="meta-llama/Llama-3.3-70B-Instruct config.json"),
    # Qwen3's dense models (Yang et al. 2025, Qwen3 technical report, Table 1: layers, heads Q / KV, tied embeddings
    # up to 4B): config.json of Qwen/Qwen3-{0.6B,1.7B,8B,32B} (../shared/data/hf_configs), MaxText
    # configs/models/qwen3-{4b,14b}.yml for the two without one here. head_dim 128 apart from hidden / heads.
    "qwen3-0.6b": dict(_QWEN3, n_layers=28, hidden=1024, n_heads=16, n_kv_heads=8, head_dim=128, ffn_hidden=3072,
                       tie_embeddings=True, source=_QWEN3_SRC.format("Qwen/Qwen3-0.6B config.json")),
    "qwen3-1.7b": dict(_QWEN3, n_layers=28, hidden=2048, n_heads=16, n_kv_heads=8, head_dim=128, ffn_hidden=6144,
                       tie_embeddings=True, source=_QWEN3_SRC.format("Qwen/Qwen3-1.7B config.json")),
    "qwen3-4b": dict(_QWEN3, n_layers=36, hidden=2560, n_heads=32, n_kv_heads=8, head_dim=128, ffn_hidden=9728,
                     tie_embeddings=True, source=_QWEN3_SRC.format("MaxText configs/models/qwen3-4b.yml")),
    "qwen3-8b": dict(_QWEN3, n_layers=36, hidden=4096, n_heads=32, n_kv_heads=8, head_dim=128, ffn_hidden=12288,
                     source=_QWEN3_SRC.format("Qwen/Qwen3-8B config.json")),
    "qwen3-14b": dict(_QWEN3, n_layers=40, hidden=5120, n_heads=40, n_kv_heads=8, head_dim=128, ffn_hidden=17408,
                      source=_QWEN3_SRC.format("MaxText configs/models/qwen3-14b.yml")),
    "qwen3-32b": dict(_QWEN3, n_layers=64, hidden=5120, n_heads=64, n_kv_heads=8, head_dim=128, ffn_hidden=25600,
                      fp8_weight_blocks=True,  # Qwen/Qwen3-32B-FP8 config.json: weight_block_size [128, 128]
                      source=_QWEN3_SRC.format("Qwen/Qwen3-32B config.json")),
    # Qwen2.5 (Qwen Team 2024, Qwen2.5 technical report, Table 1): q/k/v biases, GQA; config.json of
    # Qwen/Qwen2.5-{1.5B,7B,32B,72B} (ai-dynamo/aiconfigurator@38028ec8 model_configs/), MaxText
    # configs/models/qwen2.5-14b.yml for 14B. 1.5B ties its embeddings; vocab 151936 there, 152064 above.
    "qwen2.5-1.5b": dict(_QWEN25, vocab=151936, n_layers=28, hidden=1536, n_heads=12, n_kv_heads=2, ffn_hidden=8960,
                         tie_embeddings=True, source=_QWEN25_SRC.format("Qwen/Qwen2.5-1.5B config.json")),
    "qwen2.5-7b": dict(_QWEN25, n_layers=28, hidden=3584, n_heads=28, n_kv_heads=4, ffn_hidden=18944,
                       source=_QWEN25_SRC.format("Qwen/Qwen2.5-7B config.json")),
    "qwen2.5-14b": dict(_QWEN25, n_layers=48, hidden=5120, n_heads=40, n_kv_heads=8, ffn_hidden=13824,
                        source=_QWEN25_SRC.format("MaxText configs/models/qwen2.5-14b.yml")),
    "qwen2.5-32b": dict(_QWEN25, n_layers=64, hidden=5120, n_heads=40, n_kv_heads=8, ffn_hidden=27648,
                        source=_QWEN25_SRC.format("Qwen/Qwen2.5-32B config.json")),
    "qwen2.5-72b": dict(_QWEN25, n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn_hidden=29568,
                        source=_QWEN25_SRC.format("Qwen/Qwen2.5-72B config.json")),
    # Gemma 2 (Gemma Team 2024, Gemma 2 report, arXiv 2408.00118, Table 1): local (4096-token window) and global
    # attention alternate, half the layers each; GeGLU priced as SwiGLU; tied embeddings; head_dim 256 (2B, 9B) and
    # 128 (27B). Shapes as MaxText configs/models/gemma2-{2b,9b,27b}.yml (whose base_num_decoder_layers counts a
    # local + global pair as one layer: 13, 21, 23) and Megatron-Bridge models/gemma/gemma2_provider.py at 067f987
    # (vocab_size 256000; MaxText's yml and the report's embedding count pad it to 256128). The post-norms and
    # logit soft-capping have no cost counted (as Gemma 3's).
    "gemma-2-2b": dict(_GEMMA2, n_layers=26, sliding_window_layers=13, hidden=2304, n_heads=8, n_kv_heads=4,
                       head_dim=256, ffn_hidden=9216, source=_GEMMA2_SRC.format("2b")),
    "gemma-2-9b": dict(_GEMMA2, n_layers=42, sliding_window_layers=21, hidden=3584, n_heads=16, n_kv_heads=8,
                       head_dim=256, ffn_hidden=14336, source=_GEMMA2_SRC.format("9b")),
    "gemma-2-27b": dict(_GEMMA2, n_layers=46, sliding_window_layers=23, hidden=4608, n_heads=32, n_kv_heads=16,
                        head_dim=128, ffn_hidden=36864, source=_GEMMA2_SRC.format("27b")),
    # -- mixture of experts ------------------------------------------------------------------------------
    # Jiang et al. 2024 (Mixtral of Experts) Table 1: 8 experts, top-2, every layer; experts as wide as
    # intermediate_size.
    "mixtral-8x7b": dict(_MISTRAL, vocab=32000, max_seq_len=32768, n_layers=32, hidden=4096, n_heads=32,
                         n_kv_heads=8, ffn_hidden=14336, moe=dict(n_experts=8, top_k=2, expert_ffn_hidden=14336),
                         source="Jiang et al. 2024 (Mixtral of Experts) Table 1, mistralai/Mixtral-8x7B-v0.1 "
                                "config.json"),
    "mixtral-8x22b": dict(_MISTRAL, vocab=32768, max_seq_len=65536, n_layers=56, hidden=6144, n_heads=48,
                          n_kv_heads=8, ffn_hidden=16384, moe=dict(n_experts=8, top_k=2, expert_ffn_hidden=16384),
                          source="mistralai/Mixtral-8x22B-v0.1 config.json"),
    # Qwen3 technical report (Yang et al. 2025) Table 2: 128 experts, top-8, no shared expert, every layer
    # (decoder_sparse_step 1, mlp_only_layers []); head_dim 128 apart from hidden / heads.
    "qwen3-30b-a3b": dict(_QWEN3, n_layers=48, hidden=2048, n_heads=32, n_kv_heads=4, head_dim=128,
                          ffn_hidden=6144, moe=dict(n_experts=128, top_k=8, expert_ffn_hidden=768),
                          fp8_weight_blocks=True,  # Qwen/Qwen3-30B-A3B-FP8 config.json: weight_block_size [128, 128]
                          source="Yang et al. 2025 (Qwen3) Table 2, Qwen/Qwen3-30B-A3B config.json"),
    "qwen3-235b-a22b": dict(_QWEN3, n_layers=94, hidden=4096, n_heads=64, n_kv_heads=4, head_dim=128,
                            ffn_hidden=12288, moe=dict(n_experts=128, top_k=8, expert_ffn_hidden=1536),
                            fp8_weight_blocks=True,  # Qwen/Qwen3-235B-A22B-FP8 config.json: weight_block_size [128, 128]
                            source="Yang et al. 2025 (Qwen3) Table 2, Qwen/Qwen3-235B-A22B config.json"),
    # Qwen3-Coder-480B-A35B: Qwen3-MoE's layers at 6144 wide, 160 experts (top-8) of 2560, every layer; ffn_hidden is
    # intermediate_size, used by no layer (MaxText configs/models/qwen3-480b-a35b.yml states 2560 there)
    "qwen3-coder-480b-a35b": dict(_QWEN3, max_seq_len=262144, n_layers=62, hidden=6144, n_heads=96, n_kv_heads=8,
                                  head_dim=128, ffn_hidden=8192,
                                  moe=dict(n_experts=160, top_k=8, expert_ffn_hidden=2560),
                                  source="Qwen/Qwen3-Coder-480B-A35B-Instruct config.json, MaxText "
                                         "configs/models/qwen3-480b-a35b.yml"),
    # DeepSeek-V3 (DeepSeek-AI 2024, Sec. 4.2): 61 layers, the first 3 dense; 256 routed experts (top-8) and 1
    # shared of 2048; MLA with q/kv latents 1536/512, 128 heads of 128+64 (qk) and 128 (v); one MTP module.
    "deepseek-v3": dict(DEEPSEEK_ARCH, vocab=129280, max_seq_len=163840, n_layers=61, hidden=7168, n_heads=128,
                        ffn_hidden=18432, moe=dict(_DEEPSEEK_MOE, n_experts=256, first_dense_layers=3),
                        mla=dict(DEEPSEEK_MLA, q_lora_rank=1536), mtp_layers=1,
                        mtp_acceptance=DEEPSEEK_V3_MTP_ACCEPTANCE,
                        fp8_weight_blocks=True,  # its config.json: weight_block_size [128, 128]
                        source="DeepSeek-AI 2024 (DeepSeek-V3 technical report) Sec. 4.2, deepseek-ai/DeepSeek-V3 "
                               "config.json"),
    # Kimi K2 (Moonshot AI 2025, Sec. 2.3 / Table 2): DeepSeek-V3's architecture with 384 experts, 64 heads, one
    # dense layer, no MTP module in the release.
    "kimi-k2": dict(DEEPSEEK_ARCH, vocab=163840, max_seq_len=131072, n_layers=61, hidden=7168, n_heads=64,
                    ffn_hidden=18432, moe=dict(_DEEPSEEK_MOE, n_experts=384, first_dense_layers=1),
                    mla=dict(DEEPSEEK_MLA, q_lora_rank=1536),
                    fp8_weight_blocks=True,  # moonshotai/Kimi-K2-Instruct config.json: weight_block_size [128, 128]
                    source="Kimi Team 2025 (Kimi K2) Table 2, moonshotai/Kimi-K2-Base config.json"),
    # Moonlight (Liu et al. 2025, "Muon is scalable"): DeepSeek-V3's architecture at DeepSeek-V2-Lite's size:
    # no query latent, 64 experts (top-6) and 2 shared of 1408, one dense layer.
    "moonlight-16b-a3b": dict(DEEPSEEK_ARCH, vocab=163840, max_seq_len=8192, n_layers=27, hidden=2048, n_heads=16,
                              ffn_hidden=11264,
                              moe=dict(n_experts=64, top_k=6, expert_ffn_hidden=1408, n_shared_experts=2,
                                       first_dense_layers=1, router_scoring="sigmoid"),
                              mla=dict(DEEPSEEK_MLA, q_lora_rank=None),
                              source="Liu et al. 2025 (Muon is scalable for LLM training), "
                                     "moonshotai/Moonlight-16B-A3B config.json"),
    # DeepSeek-V2 (DeepSeek-AI 2024, arXiv 2405.04434, Sec. 3.1.1 and Appendix B for the Lite model): MLA, softmax
    # routing over 2 shared and top-6 of 160 (Lite: 64) fine-grained experts, the first layer dense; Lite has no
    # query latent. Shapes as MaxText configs/models/deepseek2-236b.yml and deepseek2-16b.yml (q_lora_rank 0: none).
    "deepseek-v2": dict(DEEPSEEK_ARCH, vocab=102400, max_seq_len=163840, n_layers=60, hidden=5120, n_heads=128,
                        ffn_hidden=12288,
                        moe=dict(n_experts=160, top_k=6, expert_ffn_hidden=1536, n_shared_experts=2,
                                 first_dense_layers=1),
                        mla=dict(DEEPSEEK_MLA, q_lora_rank=1536),
                        source="DeepSeek-AI 2024 (DeepSeek-V2, arXiv 2405.04434) Sec. 3.1.1, MaxText "
                               "configs/models/deepseek2-236b.yml"),
    "deepseek-v2-lite": dict(DEEPSEEK_ARCH, vocab=102400, max_seq_len=163840, n_layers=27, hidden=2048, n_heads=16,
                             ffn_hidden=10944,
                             moe=dict(n_experts=64, top_k=6, expert_ffn_hidden=1408, n_shared_experts=2,
                                      first_dense_layers=1),
                             mla=dict(DEEPSEEK_MLA, q_lora_rank=None),
                             source="DeepSeek-AI 2024 (DeepSeek-V2, arXiv 2405.04434) Appendix B, MaxText "
                                    "configs/models/deepseek2-16b.yml, torchtitan deepseek_v3 flavor 16B"),
    # gpt-oss model card (OpenAI 2025) Table 1: 64 query heads of 64 and 8 kv heads over a 2880-wide residual;
    # layers alternate a 128-token window and full attention (layer_types); biased attention, router and experts.
    # The attention sinks (one logit per head) are not counted.
    "gpt-oss-20b": dict(_GPT_OSS, n_layers=24, sliding_window_layers=12, moe=dict(_GPT_OSS_MOE, n_experts=32),
                        source="OpenAI 2025 (gpt-oss-120b & gpt-oss-20b model card) Table 1, openai/gpt-oss-20b "
                               "config.json"),
    "gpt-oss-120b": dict(_GPT_OSS, n_layers=36, sliding_window_layers=18, moe=dict(_GPT_OSS_MOE, n_experts=128),
                         source="OpenAI 2025 (gpt-oss-120b & gpt-oss-20b model card) Table 1, openai/gpt-oss-120b "
                                "config.json"),
    # Llama 4 Scout's text model (the published 109B includes the vision encoder): 16 experts, top-1, plus a shared
    # expert, every layer; ffn_hidden is the dense MLP width (intermediate_size_mlp), used by no layer here.
    # Chunked local attention (8192 tokens, 3 layers in 4) is priced as full causal attention.
    "llama-4-scout": dict(vocab=202048, max_seq_len=10485760, mlp="swiglu", norm="rmsnorm", position="rope",
                          tie_embeddings=False, linear_bias="none", n_layers=48, hidden=5120, n_heads=40,
                          n_kv_heads=8, head_dim=128, ffn_hidden=16384,
                          moe=dict(n_experts=16, top_k=1, expert_ffn_hidden=8192, n_shared_experts=1,
                                   router_scoring="sigmoid"),
                          source="meta-llama/Llama-4-Scout-17B-16E config.json (text_config)"),
    # Gemma 3's text models (Gemma Team 2025, Gemma 3 technical report, Sec. 2.1: 5 local layers of a 1024-token
    # window per global layer, GQA with query/key norm, 262k vocabulary, tied embeddings): shapes as the
    # google/gemma-3-{27b,12b}-pt config.json text_config (transformers Gemma3TextConfig's defaults for what it
    # leaves out: vocab_size 262208, max_position_embeddings 131072; spec.model.hf_config._gemma3) and MaxText's
    # configs/models/gemma3-{27b,12b}.yml at e591f30cbbf217ed67ef71263ec0538239f9c3b8. Global layers are every 6th
    # ((i + 1) % 6 == 0): 10 of 62, 8 of 48. GeGLU priced as SwiGLU (three matrices); the post-norms and q/k norms are
    # not counted (spec.model.hf_config._gemma3). The vision tower (SigLIP, 417M) is not priced.
    "gemma-3-27b": dict(_GEMMA3, n_layers=62, hidden=5376, n_heads=32, n_kv_heads=16, head_dim=128, ffn_hidden=21504,
                        sliding_window_layers=52,
                        source="Gemma Team 2025 (Gemma 3 technical report), google/gemma-3-27b-pt config.json "
                               "text_config, MaxText configs/models/gemma3-27b.yml"),
    "gemma-3-12b": dict(_GEMMA3, n_layers=48, hidden=3840, n_heads=16, n_kv_heads=8, head_dim=256, ffn_hidden=15360,
                        sliding_window_layers=40,
                        source="Gemma Team 2025 (Gemma 3 technical report), google/gemma-3-12b-pt config.json "
                               "text_config, MaxText configs/models/gemma3-12b.yml"),
    # Llama 4 Maverick's text model (the published 400B includes the vision encoder): Scout's layers with 128 experts
    # (top-1, plus the shared expert) on every other layer (interleave_moe_layer_step 2: layers 1, 3, ..., 47), the
    # others a dense MLP of 16384 (intermediate_size_mlp). Chunked local attention priced as full causal attention.
    "llama-4-maverick": dict(vocab=202048, max_seq_len=1048576, mlp="swiglu", norm="rmsnorm", position="rope",
                             tie_embeddings=False, linear_bias="none", n_layers=48, hidden=5120, n_heads=40,
                             n_kv_heads=8, head_dim=128, ffn_hidden=16384,
                             moe=dict(n_experts=128, top_k=1, expert_ffn_hidden=8192, n_shared_experts=1,
                                      layer_freq=2, router_scoring="sigmoid"),
                             source="meta-llama/Llama-4-Maverick-17B-128E-Instruct config.json (text_config)"),
    # 30 layers (25 windowed) of hidden 2816, 16 heads, 8 kv heads (2 on global layers); every layer runs the dense
    # GeGLU MLP (intermediate_size 2112) beside 128 experts of 704, top 8: the MLP as one shared expert
    "gemma-4-26b-a4b": dict(_GEMMA4, n_layers=30, sliding_window_layers=25, hidden=2816, n_heads=16, n_kv_heads=8,
                            global_attention=dict(head_dim=512, n_kv_heads=2, shared_kv=True), ffn_hidden=2112,
                            moe=dict(n_experts=128, top_k=8, expert_ffn_hidden=704, n_shared_experts=1,
                                     shared_ffn_hidden=2112),
                            source=_GEMMA4_SRC.format("google/gemma-4-26B-A4B")),
    # 60 layers (50 windowed) of hidden 5376, 32 heads, 16 kv heads (4 on global layers), dense MLP 21504
    "gemma-4-31b": dict(_GEMMA4, n_layers=60, sliding_window_layers=50, hidden=5376, n_heads=32, n_kv_heads=16,
                        global_attention=dict(head_dim=512, n_kv_heads=4, shared_kv=True), ffn_hidden=21504,
                        source=_GEMMA4_SRC.format("nvidia/Gemma-4-31B-IT-NVFP4")),
    # GLM-5 (zai-org/GLM-5 config.json, model_type glm_moe_dsa): MLA with
    # DeepSeek Sparse Attention (an indexer of 32 heads of 128 picks 2048 keys a query), 3 dense layers then 75 of 256
    # experts of 2048, top 8, one shared, sigmoid routing; one MTP layer. 744B (the model card); GLM-5.1 keeps the
    # shape (nvidia/GLM-5.1-NVFP4 config.json, ../shared/data/hf_configs: the same keys and values)
    "glm-5": dict(vocab=154880, max_seq_len=202752, mlp="swiglu", norm="rmsnorm", position="rope",
                  tie_embeddings=False, linear_bias="none", n_layers=78, hidden=6144, n_heads=64, n_kv_heads=64,
                  head_dim=256, ffn_hidden=12288,
                  moe=dict(n_experts=256, top_k=8, expert_ffn_hidden=2048, n_shared_experts=1, shared_ffn_hidden=2048,
                           first_dense_layers=3, router_scoring="sigmoid"),
                  mla=dict(q_lora_rank=2048, kv_lora_rank=512, qk_nope_head_dim=192, qk_rope_head_dim=64,
                           v_head_dim=256),
                  sparse_attention=dict(topk=2048, index_heads=32, index_head_dim=128), mtp_layers=1,
                  source="zai-org/GLM-5 config.json (glm_moe_dsa; spec.model.hf_config), 744B per its model card"),
}
for _name, _cfg in PRESETS.items():
    _cfg["name"] = _name
    if _cfg.get("head_dim") is None:
        _cfg.pop("head_dim", None)

# The 405B model was released as Llama 3.1 only.
ALIASES = {"llama-3-405b": "llama-3.1-405b", "gpt3-175b-davinci": "gpt3-175b",
           # GLM-5.1 is GLM-5's architecture (nvidia/GLM-5.1-NVFP4 config.json: every shape key as GLM-5's)
           "glm-5.1": "glm-5"}
