"""Gemma 3's text models as presets and from their config.json (spec.model.hf_config._gemma3): parameter counts against
the published text-only sizes, the 5 local : 1 global window pattern, the wrapper (Gemma3ForConditionalGeneration)
read for its text model, and the refusals. Gemma 4 (global layers of their own head shape): tests/test_models_gemma4.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from perfmodel.errors import InputError
from perfmodel.spec.model.hf_config import from_hf_config
from perfmodel.spec.model.catalogue import load_model

# keras-team/keras-hub keras_hub/src/models/gemma3/gemma3_presets.py (commit 00d9f10a8e74d4f552ed50170b7dcadb65d3bd52)
# "params" of the text-only checkpoints, whose vocabulary is 262144 (MaxText's gemma3-*.yml vocab_size too)
KERAS_TEXT = {"gemma-3-27b": (27009002240, 62, 5376, 128), "gemma-3-12b": (11765788416, 48, 3840, 256)}
HF_VOCAB, KERAS_VOCAB = 262208, 262144  # transformers Gemma3TextConfig's vocab_size default; Keras' table

# google/gemma-3-27b-pt config.json's text_config keys (the file leaves vocab_size, max_position_embeddings,
# sliding_window_pattern and tie_word_embeddings to Gemma3TextConfig's defaults); the vision config is not read
TEXT_27B = {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
            "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
            "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024}
WRAPPED_27B = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": TEXT_27B,
               "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model", "num_hidden_layers": 27}}


@pytest.mark.parametrize("name", sorted(KERAS_TEXT))
def test_params_match_the_published_text_model(name):
    """The published count, with HF's 64 extra vocabulary rows, less the scales ModelConfig does not count: per
    layer the post-attention and post-MLP RMSNorms (2 hidden) and the query/key RMSNorms (2 head_dim)."""
    published, layers, h, head = KERAS_TEXT[name]
    expected = published + (HF_VOCAB - KERAS_VOCAB) * h - layers * (2 * h + 2 * head)
    assert load_model(name).n_params() == expected


def test_gemma3_27b_is_27_4b_with_its_vision_tower():
    """The published 27.4B (keras gemma3_27b: 27,432,062,576) is the text model plus the SigLIP tower and projector
    (423M), which perfmodel does not price: the text model is 27.0B."""
    assert 27432062576 - KERAS_TEXT["gemma-3-27b"][0] == 423060336
    assert load_model("gemma-3-27b").n_params() == pytest.approx(27.01e9, rel=1e-3)


def test_five_local_layers_per_global_one():
    m = load_model("gemma-3-27b")
    # layers 5, 11, ..., 59 global (10); the other 52 attend within 1024 tokens; tied 262k embeddings
    assert (m.sliding_window, m.windowed_layers, m.tie_embeddings, m.vocab) == (1024, 52, True, 262208)
    assert load_model("gemma-3-12b").windowed_layers == 48 - 8


def test_config_json_loads_as_the_preset(tmp_path):
    for cfg in (TEXT_27B, WRAPPED_27B):
        path = tmp_path / cfg["model_type"] / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(cfg))
        m = load_model(str(path))
        preset = load_model("gemma-3-27b")
        skip = {"name", "source"}
        assert {k: v for k, v in m.model_dump().items() if k not in skip} == {
            k: v for k, v in preset.model_dump().items() if k not in skip}


def test_layer_types_replace_the_pattern():
    kinds = ["sliding_attention"] * 3 + ["full_attention"]
    m = from_hf_config(dict(TEXT_27B, num_hidden_layers=4, layer_types=kinds), "g")
    assert (m.windowed_layers, m.sliding_window) == (3, 1024)
    every = from_hf_config(dict(TEXT_27B, num_hidden_layers=4, layer_types=["full_attention"] * 4), "g")
    assert every.sliding_window is None


@pytest.mark.parametrize("key, value, match", [
    ("hidden_activation", "relu", "hidden_activation = 'relu' is not valid; valid: gelu_pytorch_tanh, gelu"),
    ("attention_bias", True, "attention_bias = True is not valid; valid: false"),
    ("layer_types", ["full_attention"], "layer_types = .* a list of 62 entries"),
])
def test_bad_gemma3_fields_are_named(key, value, match):
    with pytest.raises(InputError, match=match):
        from_hf_config(dict(TEXT_27B, **{key: value}), "g", where="gemma/config.json")


def test_predict_prices_it_on_tpu():
    out = subprocess.run([sys.executable, "-m", "perfmodel", "predict", "--model", "gemma-3-27b", "--hardware",
                          "tpu-v5p", "--gpus", "64", "--tp", "1", "--pp", "1", "--zero", "3", "--micro-batch", "1",
                          "--global-batch", "64", "--seq-len", "8192", "--stack", "maxtext"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "step time" in out.stdout
