"""The model catalogue: a model by preset name, HuggingFace config.json or ModelConfig file, and the preset list.

Its own module so that the schema (`spec.model.config`) and the HF reader (`spec.model.hf_config`, which builds a
ModelConfig) import one way: model <- spec.model.hf_config <- model.catalogue.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import InputError, suggest
from ...files import looks_like_path, read_mapping
from .hf_config import HF_MODEL_TYPES, from_hf_config
from .config import ModelConfig
from .presets import ALIASES, PRESETS


def load_model(spec: str | Path | ModelConfig) -> ModelConfig:
    """A model by preset name (`perfmodel models list`), or by path to a HF config.json or a ModelConfig JSON/YAML."""
    if isinstance(spec, ModelConfig):
        return spec
    spec = str(spec)
    if looks_like_path(spec):
        path = Path(spec)
        data = read_mapping(path, f"model file {spec}")
        if "model_type" in data:
            return from_hf_config(data, name=path.parent.name if path.name == "config.json" else path.stem, where=spec)
        if 2 * sum(k in ModelConfig.model_fields for k in data) < len(data):  # mostly other keys: a config.json
            raise InputError(f"{spec}: field 'model_type' is required in a HuggingFace config.json (valid: "
                             f"{', '.join(HF_MODEL_TYPES)}); a ModelConfig file has the fields "
                             f"{', '.join(ModelConfig.model_fields)}")
        return ModelConfig.parse(data, where=spec)
    key = spec.lower()
    key = ALIASES.get(key, key)
    if key not in PRESETS:
        raise suggest(spec, list(PRESETS) + list(ALIASES), "model")
    return ModelConfig.parse(PRESETS[key], where=f"preset {key}")


def list_models() -> list[str]:
    """The preset names, in the catalogue's order."""
    return list(PRESETS)


# Hugging Face model id -> preset: the ids framework configs name (Megatron-Bridge's AutoBridge.from_hf_pretrained
# in its recipes at 067f987 and v0.2.0, DeepSpeed / HF Trainer scripts' --model_name_or_path); each preset's config.json
HF_IDS = {
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b", "meta-llama/Meta-Llama-3-70B": "llama-3-70b",
    "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b", "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-70B": "llama-3.1-70b", "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Meta-Llama-3.1-405B": "llama-3.1-405b", "meta-llama/Llama-3.1-405B": "llama-3.1-405b",
    "meta-llama/Llama-2-7b-hf": "llama-2-7b", "meta-llama/Llama-2-13b-hf": "llama-2-13b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b", "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3", "deepseek-ai/DeepSeek-V3-Base": "deepseek-v3",
    "moonshotai/Moonlight-16B-A3B": "moonlight-16b-a3b", "moonshotai/Kimi-K2-Instruct": "kimi-k2",
    "openai/gpt-oss-20b": "gpt-oss-20b", "openai/gpt-oss-120b": "gpt-oss-120b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b", "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "google/gemma-3-27b-it": "gemma-3-27b", "google/gemma-3-12b-it": "gemma-3-12b",
    # the ids Megatron-Bridge's recipes at 067f987 load (recipes/llama, qwen, gemma, deepseek) and Llama 4's
    "meta-llama/Llama-3.2-1B": "llama-3.2-1b", "meta-llama/Llama-3.2-3B": "llama-3.2-3b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b",
    "meta-llama/Llama-4-Scout-17B-16E": "llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama-4-scout",
    "meta-llama/Llama-4-Maverick-17B-128E": "llama-4-maverick",
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": "llama-4-maverick",
    **{f"Qwen/Qwen3-{s}": f"qwen3-{s.lower()}" for s in ("0.6B", "1.7B", "4B", "8B", "14B", "32B")},
    **{f"Qwen/Qwen2.5-{s}": f"qwen2.5-{s.lower()}" for s in ("1.5B", "7B", "14B", "32B", "72B")},
    **{f"google/gemma-2-{s}": f"gemma-2-{s}" for s in ("2b", "9b", "27b")},
    "deepseek-ai/DeepSeek-V2": "deepseek-v2", "deepseek-ai/DeepSeek-V2-Lite": "deepseek-v2-lite",
    # DeepSeek-R1 is DeepSeek-V3's architecture (its config.json, ../shared/data/hf_configs, parses to the preset);
    # Megatron-LM examples/post_training/modelopt/conf/deepseek-ai/DeepSeek-R1.sh
    "deepseek-ai/DeepSeek-R1": "deepseek-v3", "Qwen/Qwen3-Coder-480B-A35B-Instruct": "qwen3-coder-480b-a35b",
    # GPT-2's ids (DeepSpeedExamples' --model_name_or_path gpt2 / gpt2-medium / gpt2-large / gpt2-xl)
    **{f"{org}{hf}": preset for org in ("", "openai-community/") for hf, preset in (
        ("gpt2", "gpt2-124m"), ("gpt2-medium", "gpt2-350m"), ("gpt2-large", "gpt2-774m"), ("gpt2-xl", "gpt2-1.5b"))},
    **{f"facebook/opt-{s}": f"opt-{s}" for s in ("125m", "1.3b", "2.7b", "6.7b", "13b", "30b", "66b")},
    # Vicuna v1.5 (FastChat's --model_name_or_path in scripts/train_lora.sh): Llama 2 fine-tuned, its shape unchanged
    # ("We released Vicuna v1.5 based on Llama 2 with 4K and 16K context lengths", lm-sys/FastChat README,
    # 2023/08); the 4K ones are Llama 2's own context (the 16K ones stretch RoPE to 16384: not these ids)
    "lmsys/vicuna-7b-v1.5": "llama-2-7b", "lmsys/vicuna-13b-v1.5": "llama-2-13b",
    # Megatron-Bridge perf_recipes/glm_moe_dsa (glm5.py at 067f987) and its GLM-5 recipes' AutoBridge ids
    "zai-org/GLM-5": "glm-5", "zai-org/GLM-5.1": "glm-5",
}


def preset_for_hf_id(name: str) -> str | None:
    """The preset a Hugging Face model id names (meta-llama/Llama-2-7b-hf -> llama-2-7b), or None: HF_IDS, else the
    id's last part as preset_for_name reads it (case and separators aside, without a "Meta-" prefix or a "-hf",
    "-Instruct", "-Base" checkpoint suffix)."""
    if name in HF_IDS:
        return HF_IDS[name]
    return preset_for_name(name.rstrip("/").split("/")[-1])


# -- a framework's own spelling of a model -> preset ----------------------------------------------------------------
# Words of a name: numbers keep their decimal point and unit ("1.7b", "8x7b", "600m"); separators (-, _, ., space)
# and case do not count, so llama3.1-8b, Llama-3.1-8B and llama_3.1_8b are one name.
_WORD = re.compile(r"(?<![a-z0-9])(?:bf16|fp16|fp8|nvfp4)(?![a-z0-9])|\d+(?:\.\d+)?(?:x\d+)?[a-z]*|[a-z]+")
_SIZE = re.compile(r"\d+(?:\.\d+)?[bm]")
# Words after the model in a Megatron-Bridge recipe function (llama3_8b_pretrain_8gpu_h100_bf16_config, v0.2.0's
# llama3_8b_pretrain_config, finetune_config) or a checkpoint's name that do not change its shape (-Base, -Instruct,
# Gemma's -it / -pt, Llama 2's -hf, MaxText's qwen3-8b-base.yml, a checkpoint's dtype: -BF16, -FP8)
_RECIPE_WORDS = {"pretrain", "sft", "peft", "finetune", "lora", "config"}
_CHECKPOINT_WORDS = {"base", "instruct", "it", "pt", "hf", "chat", "bf16", "fp16", "fp8", "nvfp4"}

# Spellings no rule reads, each where that framework uses it (all at the commits the readers cite)
_NAME_ALIASES = {
    # MaxText configs/models/deepseek3-671b.yml (and -2dfsdp, -batchsplit: the same model); torchtitan
    # deepseek_v3 flavor 671B (models/deepseek_v3/__init__.py): DeepSeek-V3 is one size
    "deepseek3-671b": "deepseek-v3", "deepseek3-671b-2dfsdp": "deepseek-v3", "deepseek3-671b-batchsplit": "deepseek-v3",
    "deepseek-v3-671b": "deepseek-v3",
    # MaxText configs/models/kimi-k2-1t.yml: Kimi K2, 1.04T parameters
    "kimi-k2-1t": "kimi-k2",
    # MaxText configs/models/llama4-17b-16e.yml / llama4-17b-128e.yml: Llama 4 Scout (17B active, 16 experts) and
    # Maverick (128 experts); Hugging Face's ids meta-llama/Llama-4-Scout-17B-16E / Llama-4-Maverick-17B-128E
    "llama4-17b-16e": "llama-4-scout", "llama4-17b-128e": "llama-4-maverick",
    "llama-4-scout-17b-16e": "llama-4-scout", "llama-4-maverick-17b-128e": "llama-4-maverick",
    # AI-Hypercomputer/tpu-recipes folder names: llama4-scout-17b-16e-maxtext, llama4-maverick-17b-128e-maxtext
    "llama4-scout-17b-16e": "llama-4-scout", "llama4-maverick-17b-128e": "llama-4-maverick",
    # MaxText configs/models/deepseek2-16b.yml (DeepSeek-V2-Lite: 27 layers of 2048, 64 experts) and
    # deepseek2-236b.yml (DeepSeek-V2); Megatron-Bridge recipes/deepseek/deepseek_v2.py deepseek_v2_lite_*
    "deepseek2-16b": "deepseek-v2-lite", "deepseek2-236b": "deepseek-v2", "deepseek-v2-lite-16b": "deepseek-v2-lite",
    # MaxText configs/models/qwen3-480b-a35b.yml: Qwen3-Coder-480B-A35B (the only Qwen3 of that size)
    "qwen3-480b-a35b": "qwen3-coder-480b-a35b",
    # Megatron-Bridge recipes/moonlight/moonlight_16b.py moonlight_16b_*: Moonlight-16B-A3B is one size
    "moonlight-16b": "moonlight-16b-a3b",
    # MaxText configs/models/gemma4-26b.yml (e591f30): Gemma 4's one 26B model, the mixture of 128 experts, 4B
    # active (google/gemma-4-26B-A4B)
    "gemma4-26b": "gemma-4-26b-a4b",
}
# Spellings one framework reads otherwise than the rule: torchtitan's llama3 flavors are Llama 3.1 (8B, 70B, 405B:
# ComplexRoPE max_context_length 131072, scaling "llama") and Llama 3.2 (1B, 3B), models/llama3/__init__.py at
# b5bcd76c; its config functions (config_registry.py llama3_8b, qwen3_0_6b) read as the family and flavor do.
_FRAMEWORK_ALIASES = {
    "torchtitan": {"llama3 8B": "llama-3.1-8b", "llama3 70B": "llama-3.1-70b", "llama3 405B": "llama-3.1-405b",
                   "llama3 1B": "llama-3.2-1b", "llama3 3B": "llama-3.2-3b",
                   "llama4 17bx16e": "llama-4-scout", "llama4 17bx128e": "llama-4-maverick",
                   "kimi_k2_7 moonlight-16B-A3B": "moonlight-16b-a3b"},
}
FRAMEWORKS = ("megatron", "bridge", "deepspeed", "maxtext", "torchtitan")


def _words(name: str) -> list[str]:
    """The words of a name that say which model it is: Bridge's 1p7b read as 1.7b, torchtitan's qwen3_1_7b as qwen3
    1.7b; a recipe's words from pretrain / sft / peft on, a checkpoint's -Base / -Instruct and a leading Meta- left
    out."""
    words = _WORD.findall(re.sub(r"(?<=\d)p(?=\d)", ".", name.lower()))
    for i, w in enumerate(words):
        if w in _RECIPE_WORDS:
            words = words[:i]
            break
    out: list[str] = []
    for i, w in enumerate(words):  # a bare number after the version, before a size: "1", "7b" -> "1.7b"
        if (out and out[-1].isdigit() and i >= 2 and not words[i - 2].isalpha() and w[0].isdigit()
                and _SIZE.fullmatch(w) and "." not in w):
            out[-1] = f"{out[-1]}.{w}"
        else:
            out.append(w)
    while out and out[-1] in _CHECKPOINT_WORDS:
        out.pop()
    return out[1:] if out[:1] == ["meta"] else out


def _spellings(words: list[str]):
    """The words as written, then with a two-digit version read as major.minor (Bridge's llama31, qwen25: Llama 3.1,
    Qwen2.5) or an N.0 version as N, and a size in millions as billions (Bridge's qwen3_600m: Qwen3-0.6B)."""
    at = next((i for i in range(1, len(words)) if words[i].isdigit() and words[i - 1].isalpha()), None)
    versions = [words]
    if at is None:  # tpu-recipes' llama3.0-70b: version 3.0 is Llama 3
        at = next((i for i in range(1, len(words)) if re.fullmatch(r"\d\.0", words[i]) and words[i - 1].isalpha()),
                  None)
        if at is not None:
            versions.append(words[:at] + [words[at][0]] + words[at + 1:])
    elif len(words[at]) == 2:
        versions.append(words[:at] + [f"{words[at][0]}.{words[at][1]}"] + words[at + 1:])
    for ws in versions:
        yield ws
        millions = [f"{int(w[:-1]) / 1000:g}b" if re.fullmatch(r"\d{3}m", w) else w for w in ws]
        if millions != ws:
            yield millions


def _key(words: list[str]) -> str:
    return " ".join(words)


def _index() -> dict[str, str]:
    """Every preset's and alias's words -> its preset; two presets with one key would be a catalogue error."""
    index: dict[str, str] = {}
    for name, preset in [(p, p) for p in PRESETS] + list(ALIASES.items()) + list(_NAME_ALIASES.items()):
        key = _key(_words(name))
        assert preset in PRESETS and index.get(key, preset) == preset, (name, key, preset)
        index[key] = preset
    return index


_INDEX = _index()
_FRAMEWORK_INDEX = {fw: {_key(_words(k)): v for k, v in table.items()} for fw, table in _FRAMEWORK_ALIASES.items()}
assert all(v in PRESETS for table in _FRAMEWORK_ALIASES.values() for v in table.values())


def preset_for_name(name: str, framework: str | None = None) -> str | None:
    """The preset a framework's own spelling of a model names, or None (never a near name of another size).

    Reads: preset names and ALIASES; Hugging Face ids (HF_IDS, else the id's last part); MaxText model_name
    (configs/models/<name>.yml: gemma3-27b, llama3.1-405b, deepseek3-671b); Megatron-Bridge recipe functions and
    model folders (llama31_405b_pretrain_config, qwen3_600m_sft_..., qwen25_1p5b_..., deepseek_v3, gpt_oss_120b,
    kimi_k2); torchtitan "<family> <flavor>" or config functions (llama3 8B, llama3_8b, qwen3 0.6B, gpt_oss 20b)
    with framework="torchtitan", whose llama3 flavors are Llama 3.1 / 3.2. Without a framework "llama3-8b" is Llama 3
    8B (MaxText's llama3-8b.yml, Bridge's llama3_8b_* with meta-llama/Meta-Llama-3-8B)."""
    if framework is not None and framework not in FRAMEWORKS:
        raise ValueError(f"framework {framework!r}: valid: {', '.join(FRAMEWORKS)}")
    name = name.strip()
    if "/" in name or name in HF_IDS:
        return preset_for_hf_id(name)
    words = _words(name)
    table = _FRAMEWORK_INDEX.get(framework or "", {})
    for spelling in _spellings(words):
        key = _key(spelling)
        found = table.get(key) or _INDEX.get(key)
        if found:
            return found
    return None
