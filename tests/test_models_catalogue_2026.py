"""The frameworks' own names for models (spec.model_catalogue.preset_for_name) and tokenizers
(spec.tokenizers.tokenizer_vocab): each spelling below is copied from the framework repo named beside it (the commits
the readers cite: Megatron-Bridge 067f987, MaxText e591f30, torchtitan b5bcd76, Megatron-LM d98e8a64), each expected
preset read off that framework's own file (the HF id its recipe loads, its flavor's shape)."""

from __future__ import annotations

import pytest

from perfmodel.spec.model_catalogue import preset_for_hf_id, preset_for_name
from perfmodel.spec.tokenizers import tokenizer_vocab

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
    ("kimi-k2-1t", "maxtext", "kimi-k2"), ("llama4-17b-16e", "maxtext", "llama-4-scout"),
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
    # Hugging Face ids (Bridge's AutoBridge.from_hf_pretrained, DeepSpeed's --model_name_or_path)
    ("meta-llama/Meta-Llama-3-8B", None, "llama-3-8b"), ("meta-llama/Meta-Llama-3.1-405B", None, "llama-3.1-405b"),
    ("meta-llama/Llama-3.1-8B-Instruct", None, "llama-3.1-8b"), ("meta-llama/Llama-2-7b-hf", None, "llama-2-7b"),
    ("google/gemma-3-27b-it", None, "gemma-3-27b"), ("Qwen/Qwen3-30B-A3B-FP8", None, "qwen3-30b-a3b"),
    ("unsloth/gpt-oss-20b-BF16", None, "gpt-oss-20b"),  # Megatron-LM gpt_dynamic_inference_tp2_pp2_ep2_gptoss_20b_swa
]
# Names no preset has: another size, another model, a framework's test model
UNKNOWN = [
    ("gpt3-6b", "maxtext"), ("gpt3-52k", "maxtext"), ("default", "maxtext"), ("qwen3-4b-thinking-2507", "maxtext"),
    ("llama3 debugmodel", "torchtitan"), ("qwen3 debugmodel_moe", "torchtitan"), ("flux flux-dev", "torchtitan"),
    ("wan_14b_pretrain_16gpu_gb200_bf16_config", "bridge"), ("vanilla_gpt_pretrain_1gpu_h100_bf16_config", "bridge"),
    ("llama3-18b", None), ("llama-3.1-7b", None), ("gpt3-1.3", None), ("facebook/opt-125m", None), ("", None),
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
    assert preset_for_hf_id("facebook/opt-125m") is None


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
                                  "facebook/opt-125m", ""])
def test_a_tokenizer_without_a_stated_size_is_none(name):
    # these name a file or a library, not a vocabulary: the config's --vocab-size / the model must say it
    assert tokenizer_vocab(name) is None


def test_megatron_reader_keeps_the_same_numbers():
    from perfmodel.ingest.megatron_keys import TOKENIZER_VOCAB

    for name, size in TOKENIZER_VOCAB.items():
        assert tokenizer_vocab(name)[0] == size
