"""The frameworks' own names for models (spec.model.catalogue.preset_for_name) and tokenizers
(spec.model.tokenizers.tokenizer_vocab): each spelling below is copied from the framework repo named beside it (the commits
the readers cite: Megatron-Bridge 067f987, MaxText e591f30, torchtitan b5bcd76, Megatron-LM d98e8a64), each expected
preset read off that framework's own file (the HF id its recipe loads, its flavor's shape)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.spec.model.catalogue import load_model, preset_for_hf_id, preset_for_name
from perfmodel.spec.model.tokenizers import tokenizer_vocab

HF = Path(__file__).parent / "fixtures" / "hf"

# (spelling, framework or None, expected preset): where the spelling is used and why that preset
NAMES = [
    # preset names and aliases
    ("llama-3.1-8b", None, "llama-3.1-8b"), ("LLAMA-3.1-8B", None, "llama-3.1-8b"),
    ("llama-3-405b", None, "llama-3.1-405b"), ("gpt3-175b-davinci", None, "gpt3-175b"),
    # MaxText configs/models/<model_name>.yml
    ("gemma3-27b", "maxtext", "gemma-3-27b"), ("gemma3-12b", "maxtext", "gemma-3-12b"),
    ("llama3.1-405b", "maxtext", "llama-3.1-405b"), ("llama3.1-70b", "maxtext", "llama-3.1-70b"),
    ("llama3-8b", "maxtext", "llama-3-8b"),  # llama3-8b.yml is Llama 3 8B (llama3.1-8b.yml is its own file)
    ("llama3-405b", "maxtext", "llama-3.1-405b"),  # the 405B was released as Llama 3.1 only
    ("llama2-70b", "maxtext", "llama-2-70b"), ("llama2-7b", "maxtext", "llama-2-7b"),
    ("mistral-7b", "maxtext", "mistral-7b"), ("mixtral-8x22b", "maxtext", "mixtral-8x22b"),
    ("mixtral-8x7b", "maxtext", "mixtral-8x7b"), ("qwen3-235b-a22b", "maxtext", "qwen3-235b-a22b"),
    ("qwen3-30b-a3b", "maxtext", "qwen3-30b-a3b"), ("qwen3-30b-a3b-base", "maxtext", "qwen3-30b-a3b"),
    ("deepseek3-671b", "maxtext", "deepseek-v3"), ("deepseek3-671b-2dfsdp", "maxtext", "deepseek-v3"),
    ("gpt-oss-120b", "maxtext", "gpt-oss-120b"), ("gpt-oss-20b", "maxtext", "gpt-oss-20b"),
    ("kimi-k2-1t", "maxtext", "kimi-k2"), ("gemma4-26b", "maxtext", "gemma-4-26b-a4b"),
    ("llama4-17b-16e", "maxtext", "llama-4-scout"),
    ("gpt3-175b", "maxtext", "gpt3-175b"),
    # Megatron-Bridge recipe functions (recipes/ and perf_recipes/ at 067f987; v0.2.0's *_pretrain_config)
    ("llama31_405b_pretrain_1024gpu_h100_bf16_config", "bridge", "llama-3.1-405b"),
    ("llama31_405b_pretrain_config", "bridge", "llama-3.1-405b"),
    ("llama3_70b_peft_8gpu_b200_bf16_config", "bridge", "llama-3-70b"),  # loads meta-llama/Meta-Llama-3-70B
    ("llama3_8b_pretrain_8gpu_h100_bf16_config", "bridge", "llama-3-8b"),
    ("llama31_70b_sft_32gpu_h100_bf16_config", "bridge", "llama-3.1-70b"),
    ("llama2_7b_pretrain_2gpu_h100_bf16_config", "bridge", "llama-2-7b"),
    ("qwen3_235b_a22b_pretrain_256gpu_b200_bf16_config", "bridge", "qwen3-235b-a22b"),
    ("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", "bridge", "qwen3-30b-a3b"),
    ("deepseek_v3_pretrain_64gpu_h100_bf16_config", "bridge", "deepseek-v3"),
    ("gpt_oss_120b_pretrain_64gpu_h100_bf16_config", "bridge", "gpt-oss-120b"),
    ("gpt_oss_20b_sft_8gpu_h100_bf16_config", "bridge", "gpt-oss-20b"),
    ("kimi_k2_pretrain_256gpu_b200_bf16_config", "bridge", "kimi-k2"),
    ("moonlight_16b_pretrain_8gpu_h100_bf16_config", "bridge", "moonlight-16b-a3b"),
    ("deepseek_v3", "bridge", "deepseek-v3"), ("kimi_k2", "bridge", "kimi-k2"),  # perf_recipes file names
    # torchtitan "<family> <flavor>" (models/*/__init__.py) and config functions (config_registry.py)
    ("llama3 8B", "torchtitan", "llama-3.1-8b"),  # ComplexRoPE max_context_length 131072, scaling "llama"
    ("llama3_8b", "torchtitan", "llama-3.1-8b"), ("llama3 70B", "torchtitan", "llama-3.1-70b"),
    ("llama3_405b", "torchtitan", "llama-3.1-405b"), ("qwen3 30B-A3B", "torchtitan", "qwen3-30b-a3b"),
    ("qwen3_235b_a22b", "torchtitan", "qwen3-235b-a22b"), ("deepseek_v3 671B", "torchtitan", "deepseek-v3"),
    ("deepseek_v3_671b", "torchtitan", "deepseek-v3"), ("gpt_oss 20b", "torchtitan", "gpt-oss-20b"),
    ("gpt_oss_120b", "torchtitan", "gpt-oss-120b"), ("llama4 17bx16e", "torchtitan", "llama-4-scout"),
    ("kimi_k2_7 moonlight-16B-A3B", "torchtitan", "moonlight-16b-a3b"),
    # the presets those recipes need (MaxText yml, Bridge recipe functions, torchtitan flavors)
    ("llama3.3-70b", "maxtext", "llama-3.3-70b"), ("llama4-17b-128e", "maxtext", "llama-4-maverick"),
    ("qwen3-0.6b", "maxtext", "qwen3-0.6b"), ("qwen3-14b-base", "maxtext", "qwen3-14b"),
    ("qwen3-8b", "maxtext", "qwen3-8b"), ("qwen2.5-14b", "maxtext", "qwen2.5-14b"),
    ("gemma2-9b", "maxtext", "gemma-2-9b"),
    ("qwen3-480b-a35b", "maxtext", "qwen3-coder-480b-a35b"),
    ("deepseek2-16b", "maxtext", "deepseek-v2-lite"), ("deepseek2-236b", "maxtext", "deepseek-v2"),
    ("qwen3_600m_sft_1gpu_h100_bf16_config", "bridge", "qwen3-0.6b"),  # Qwen/Qwen3-0.6B
    ("qwen3_1p7b_pretrain_1gpu_h100_bf16_config", "bridge", "qwen3-1.7b"),
    ("qwen3_4b_pretrain_2gpu_h100_bf16_config", "bridge", "qwen3-4b"),
    ("qwen3_32b_pretrain_16gpu_h100_bf16_config", "bridge", "qwen3-32b"),
    ("qwen25_1p5b_pretrain_1gpu_h100_bf16_config", "bridge", "qwen2.5-1.5b"),
    ("qwen25_72b_pretrain_32gpu_h100_bf16_config", "bridge", "qwen2.5-72b"),
    ("llama32_1b_pretrain_1gpu_h100_bf16_config", "bridge", "llama-3.2-1b"),  # meta-llama/Llama-3.2-1B
    ("llama32_3b_sft_1gpu_h100_bf16_config", "bridge", "llama-3.2-3b"),
    ("gemma2_27b_pretrain_16gpu_h100_bf16_config", "bridge", "gemma-2-27b"),
    ("deepseek_v2_lite_pretrain_8gpu_h100_bf16_config", "bridge", "deepseek-v2-lite"),
    ("deepseek_v2_pretrain_128gpu_h100_bf16_config", "bridge", "deepseek-v2"),
    ("llama3 1B", "torchtitan", "llama-3.2-1b"), ("llama3 3B", "torchtitan", "llama-3.2-3b"),
    ("qwen3 0.6B", "torchtitan", "qwen3-0.6b"), ("qwen3_0_6b", "torchtitan", "qwen3-0.6b"),
    ("qwen3_1_7b", "torchtitan", "qwen3-1.7b"), ("qwen3 14B", "torchtitan", "qwen3-14b"),
    # Hugging Face ids (Bridge's AutoBridge.from_hf_pretrained, DeepSpeed's --model_name_or_path)
    ("meta-llama/Meta-Llama-3-8B", None, "llama-3-8b"), ("meta-llama/Meta-Llama-3.1-405B", None, "llama-3.1-405b"),
    ("meta-llama/Llama-3.1-8B-Instruct", None, "llama-3.1-8b"), ("meta-llama/Llama-2-7b-hf", None, "llama-2-7b"),
    ("google/gemma-3-27b-it", None, "gemma-3-27b"), ("Qwen/Qwen3-30B-A3B-FP8", None, "qwen3-30b-a3b"),
    ("unsloth/gpt-oss-20b-BF16", None, "gpt-oss-20b"),  # Megatron-LM gpt_dynamic_inference_tp2_pp2_ep2_gptoss_20b_swa
    ("Qwen/Qwen3-8B", None, "qwen3-8b"), ("Qwen/Qwen2.5-7B", None, "qwen2.5-7b"),
    ("google/gemma-2-9b", None, "gemma-2-9b"),
    ("meta-llama/Llama-3.2-1B", None, "llama-3.2-1b"), ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", None,
                                                         "llama-4-maverick"),
    ("deepseek-ai/DeepSeek-V2-Lite", None, "deepseek-v2-lite"),
    ("deepseek-ai/DeepSeek-R1", None, "deepseek-v3"),  # Megatron-LM examples/post_training/modelopt/conf
    ("gpt2", None, "gpt2-124m"), ("gpt2-xl", None, "gpt2-1.5b"),  # DeepSpeedExamples --model_name_or_path
    ("facebook/opt-125m", None, "opt-125m"), ("facebook/opt-1.3b", None, "opt-1.3b"),  # DeepSpeed-Chat
    ("lmsys/vicuna-7b-v1.5", None, "llama-2-7b"),  # FastChat scripts/train_lora.sh (Llama 2 fine-tuned)
    ("zai-org/GLM-5.1", None, "glm-5"), ("glm51", "bridge", "glm-5"),  # Bridge perf_recipes/glm_moe_dsa
    # AI-Hypercomputer/tpu-recipes folder names
    ("llama3.0-70b", None, "llama-3-70b"), ("llama4-maverick-17b-128e", None, "llama-4-maverick"),
]
# Names no preset has: another size, another model, a framework's test model
UNKNOWN = [
    ("gpt3-6b", "maxtext"), ("gpt3-52k", "maxtext"), ("default", "maxtext"), ("qwen3-4b-thinking-2507", "maxtext"),
    ("llama3 debugmodel", "torchtitan"), ("qwen3 debugmodel_moe", "torchtitan"), ("flux flux-dev", "torchtitan"),
    ("wan_14b_pretrain_16gpu_gb200_bf16_config", "bridge"), ("vanilla_gpt_pretrain_1gpu_h100_bf16_config", "bridge"),
    ("qwen25_500m_pretrain_1gpu_h100_bf16_config", "bridge"), ("qwen2_7b_pretrain_2gpu_h100_bf16_config", "bridge"),
    ("nemotronh_8b_pretrain_2gpu_h100_bf16_config", "bridge"), ("qwen35_9b", "torchtitan"),
    ("deepseek_v3 16B", "torchtitan"),  # V2-Lite's layers at 16384 positions: the torchtitan reader builds it
    ("llama3-18b", None), ("llama-3.1-7b", None), ("gpt3-1.3", None), ("bigscience/bloom-560m", None),
    ("facebook/opt-350m", None),  # its 512-wide embedding projected into 1024-wide layers: no preset
    ("", None),
]


@pytest.mark.parametrize("name,framework,preset", NAMES)
def test_a_frameworks_spelling_names_its_preset(name, framework, preset):
    assert preset_for_name(name, framework=framework) == preset


@pytest.mark.parametrize("name,framework", UNKNOWN)
def test_an_unknown_name_is_none_not_a_near_size(name, framework):
    assert preset_for_name(name, framework=framework) is None


def test_llama3_8b_means_llama_3_outside_torchtitan():
    # MaxText's llama3-8b.yml and Bridge's llama3_8b_* (meta-llama/Meta-Llama-3-8B) are Llama 3; torchtitan's llama3
    # flavors are Llama 3.1 (131072-token rotary scaling)
    assert preset_for_name("llama3_8b") == preset_for_name("llama3-8b", framework="maxtext") == "llama-3-8b"
    assert preset_for_name("llama3_8b", framework="torchtitan") == "llama-3.1-8b"


def test_hf_id_lookup_still_reads_the_table_and_the_name():
    assert preset_for_hf_id("mistralai/Mixtral-8x7B-v0.1") == "mixtral-8x7b"  # the table: no rule gives it
    assert preset_for_hf_id("deepseek-ai/DeepSeek-V3-Base") == "deepseek-v3"
    assert preset_for_hf_id("bigscience/bloom-560m") is None


def test_an_unknown_framework_is_a_programming_error():
    with pytest.raises(ValueError, match="torchtitan"):
        preset_for_name("llama3_8b", framework="nemo")


# (name, vocabulary): Megatron-LM --tokenizer-type / --tokenizer-model values and tiktoken encodings, each size from
# the source tokenizer_vocab names (checked by hand against it)
TOKENIZERS = [
    ("GPT2BPETokenizer", 50257), ("Llama2Tokenizer", 32000),
    ("TikTokenizer", 131072),  # DEFAULT_TIKTOKEN_MAX_VOCAB = 2**17
    ("nemotron_2_256k", 256000), ("${DATA_PATH}/utils/nemotron_2_256k.model", 256000),  # gpt3_15b_8t_release
    ("o200k_harmony", 201088),  # reserved special tokens up to id 201087
    ("o200k_base", 200019), ("cl100k_base", 100277),
    ("meta-llama/Meta-Llama-3-8B", 128256), ("meta-llama/Llama-2-7b-hf", 32000),  # the presets' config.json
    ("openai/gpt-oss-120b", 201088), ("Qwen/Qwen3-235B-A22B", 151936), ("deepseek-ai/DeepSeek-V3", 129280),
]


@pytest.mark.parametrize("name,vocab", TOKENIZERS)
def test_a_tokenizer_name_gives_its_vocabulary_and_a_source(name, vocab):
    size, source = tokenizer_vocab(name)
    assert size == vocab and source


@pytest.mark.parametrize("name", ["HuggingFaceTokenizer", "NullTokenizer", "SentencePieceTokenizer",
                                  "/data/tokenizer.model", "multiMixV8.gpt4o_nc_sd.500000.128k.vocab.json",
                                  "bigscience/bloom-560m", ""])
def test_a_tokenizer_without_a_stated_size_is_none(name):
    # these name a file or a library, not a vocabulary: the config's --vocab-size / the model must say it
    assert tokenizer_vocab(name) is None


# -- the presets the frameworks' recipes name ------------------------------------------------------------------------
# (preset, count, published, check): "total" ModelConfig.n_params(), "active" active_params() (embedding and LM head
# included), "active-no-input-embedding" without the input embedding (a lookup), "non-embedding" less the embedding
# and an untied LM head (the Qwen model cards'); ("round", u): the figure quoted to the digit u; ("truncate", u): the
# count cut off there; ("rel", r): within a relative r (figures whose rounding is unclear).
PUBLISHED = [
    # meta-llama/Llama-3.2-{1B,3B} model card: 1.23B, 3.21B
    ("llama-3.2-1b", "total", 1.23e9, ("truncate", 0.01e9)), ("llama-3.2-3b", "total", 3.21e9, ("round", 0.01e9)),
    # Llama 3.3 70B has Llama 3 70B's shape: 70,553,706,496 (tests/test_models.py)
    ("llama-3.3-70b", "total", 70_553_706_496, ("round", 1)),
    # Qwen/Qwen3-* model cards: parameters and non-embedding parameters
    ("qwen3-0.6b", "total", 0.6e9, ("round", 0.1e9)), ("qwen3-0.6b", "non-embedding", 0.44e9, ("round", 0.01e9)),
    ("qwen3-1.7b", "total", 1.7e9, ("round", 0.1e9)), ("qwen3-1.7b", "non-embedding", 1.4e9, ("round", 0.1e9)),
    ("qwen3-4b", "total", 4.0e9, ("round", 0.1e9)), ("qwen3-4b", "non-embedding", 3.6e9, ("round", 0.1e9)),
    ("qwen3-8b", "total", 8.2e9, ("round", 0.1e9)), ("qwen3-8b", "non-embedding", 6.95e9, ("round", 0.01e9)),
    ("qwen3-14b", "total", 14.8e9, ("round", 0.1e9)), ("qwen3-14b", "non-embedding", 13.2e9, ("round", 0.1e9)),
    ("qwen3-32b", "total", 32.8e9, ("round", 0.1e9)), ("qwen3-32b", "non-embedding", 31.2e9, ("round", 0.1e9)),
    # Qwen/Qwen2.5-* model cards: 1.54B, 7.61B, 14.7B, 32.5B, 72.7B. The 32B card's figure is 0.8% under what its own
    # config.json's shapes give (32.76B), so it is checked to 1%
    ("qwen2.5-1.5b", "total", 1.54e9, ("round", 0.01e9)), ("qwen2.5-7b", "total", 7.61e9, ("truncate", 0.01e9)),
    ("qwen2.5-14b", "total", 14.7e9, ("truncate", 0.1e9)), ("qwen2.5-32b", "total", 32.5e9, ("rel", 0.01)),
    ("qwen2.5-72b", "total", 72.7e9, ("round", 0.1e9)),
    # DeepSeek-V2 report (arXiv 2405.04434): 236B total, 21B activated; V2-Lite 15.7B total, 2.4B activated
    ("deepseek-v2", "total", 236e9, ("round", 1e9)), ("deepseek-v2", "active", 21e9, ("round", 1e9)),
    ("deepseek-v2-lite", "total", 15.7e9, ("round", 0.1e9)),
    ("deepseek-v2-lite", "active-no-input-embedding", 2.4e9, ("truncate", 0.1e9)),
    # facebook/opt-* on Hugging Face: 125,239,296 / 1,315,758,080 / 6,658,473,984 parameters, the position table's
    # two offset rows (OPTLearnedPositionalEmbedding's offset 2) left out here
    ("opt-125m", "total", 125_239_296 - 2 * 768, ("round", 1)),
    ("opt-1.3b", "total", 1_315_758_080 - 2 * 2048, ("round", 1)),
    ("opt-6.7b", "total", 6_658_473_984 - 2 * 4096, ("round", 1)),
    # Qwen/Qwen3-Coder-480B-A35B-Instruct model card: 480B total, 35B activated
    ("qwen3-coder-480b-a35b", "total", 480e9, ("round", 1e9)),
    ("qwen3-coder-480b-a35b", "active", 35e9, ("truncate", 1e9)),
    # meta-llama/Llama-4-Maverick-17B-128E model card: 17B active, 400B total (the vision encoder included there)
    ("llama-4-maverick", "active", 17e9, ("round", 1e9)), ("llama-4-maverick", "total", 400e9, ("rel", 0.01)),
]


def _count(m, what):
    return {"total": m.n_params(), "active": m.active_params(),
            "active-no-input-embedding": m.active_params() - m.vocab * m.hidden,
            "non-embedding": m.n_params() - m.vocab * m.hidden * (1 + (not m.tie_embeddings))}[what]


@pytest.mark.parametrize("preset,what,published,check", PUBLISHED)
def test_preset_matches_its_published_size(preset, what, published, check):
    n, (how, u) = _count(load_model(preset), what), check
    ok = {"round": abs(n - published) <= u / 2, "truncate": published <= n < published + u,
          "rel": abs(n / published - 1) <= u}[how]
    assert ok, (preset, what, n, published)


@pytest.mark.parametrize("size,layers,hidden,non_embedding", [
    ("2b", 26, 2304, 2_024_517_888), ("9b", 42, 3584, 8_324_201_984), ("27b", 46, 4608, 26_047_480_320)])
def test_gemma2_non_embedding_count_is_the_reports_less_the_post_norms(size, layers, hidden, non_embedding):
    # Gemma 2 report (arXiv 2408.00118) Table 2 non-embedding parameters; the preset leaves out the post-attention and
    # post-MLP norms (one scale of `hidden` each per layer), as Gemma 3's
    m = load_model(f"gemma-2-{size}")
    assert m.n_params() - m.vocab * m.hidden + 2 * layers * hidden == non_embedding
    assert m.sliding_window_layers == layers // 2 and m.sliding_window == 4096


# fixture (a config.json copied verbatim, see below) -> its preset. From ai-dynamo/aiconfigurator (Apache-2.0):
# qwen3-0.6b (already here), qwen3-1.7b, qwen3-8b, qwen3-32b, llama-4-maverick-17b-128e, qwen3-coder-480b-a35b at
# 095f58a51 aic-core/src/aiconfigurator_core/model_configs/ (the files ../shared/data/hf_configs ships);
# llama-3.3-70b at f577ab84 and qwen2.5-{1.5b,7b,32b,72b} at 38028ec8, src/aiconfigurator/model_configs/.
FIXTURES = [("qwen3-0.6b", "qwen3-0.6b"), ("qwen3-1.7b", "qwen3-1.7b"), ("qwen3-8b", "qwen3-8b"),
            ("qwen3-32b", "qwen3-32b"), ("llama-4-maverick-17b-128e", "llama-4-maverick"),
            ("llama-3.3-70b", "llama-3.3-70b"), ("qwen2.5-1.5b", "qwen2.5-1.5b"), ("qwen2.5-7b", "qwen2.5-7b"),
            ("qwen2.5-32b", "qwen2.5-32b"), ("qwen2.5-72b", "qwen2.5-72b"),
            ("qwen3-coder-480b-a35b", "qwen3-coder-480b-a35b"), ("glm-5", "glm-5")]


@pytest.mark.parametrize("fixture,preset", FIXTURES)
def test_the_config_json_parses_to_the_preset(fixture, preset):
    parsed, expected = load_model(str(HF / fixture / "config.json")), load_model(preset)
    # the bf16 config.json says nothing of the FP8 checkpoint's 128 x 128 blocks, which qwen3-32b states
    skip = {"name", "source", "fp8_weight_blocks"}
    assert parsed.model_dump(exclude=skip) == expected.model_dump(exclude=skip)


def test_maverick_interleaves_dense_and_moe_layers():
    m = load_model("llama-4-maverick")
    # interleave_moe_layer_step 2: layers 1, 3, ..., 47 route to 128 experts (top-1 + the shared expert), the other
    # 24 run the dense MLP of intermediate_size_mlp 16384
    assert m.moe.layer_freq == 2 and m.moe_layers() == 24 and m.ffn_hidden == 16384
    dense, moe = 3 * 5120 * 16384, 128 * 3 * 5120 * 8192 + 3 * 5120 * 8192 + 5120 * 128
    attn = 5120 * (40 + 2 * 8) * 128 + 40 * 128 * 5120
    norms = 2 * 5120
    assert m.n_params() == 24 * (attn + dense + norms) + 24 * (attn + moe + norms) + 2 * 202048 * 5120 + 5120
