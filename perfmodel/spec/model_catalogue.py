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
