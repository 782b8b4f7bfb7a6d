"""The model catalogue: a model by preset name, HuggingFace config.json or ModelConfig file, and the preset list.

Its own module so that the schema (`spec.model`) and the HF reader (`spec.hf_config`, which builds a
ModelConfig) import one way: model <- spec.hf_config <- model_catalogue.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError, suggest
from ..files import looks_like_path, read_mapping
from .hf_config import HF_MODEL_TYPES, from_hf_config
from .model import ModelConfig
from .model_presets import ALIASES, PRESETS


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
}


def preset_for_hf_id(name: str) -> str | None:
    """The preset a Hugging Face model id names (meta-llama/Llama-2-7b-hf -> llama-2-7b), or None: HF_IDS, else the
    id's last part lower-cased, without a "-hf" suffix or "meta-" prefix, where that is a preset's name."""
    if name in HF_IDS:
        return HF_IDS[name]
    base = name.rstrip("/").split("/")[-1].lower().removesuffix("-hf").removeprefix("meta-")
    return base if base in PRESETS else None
