"""Model presets and HuggingFace config.json loading, checked against published sizes and hand counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import perfmodel
from perfmodel.errors import InputError
from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.model.hf_config import from_hf_config
from perfmodel.spec.model.catalogue import load_model

HF = Path(__file__).parent / "fixtures" / "hf"


# ---------------------------------------------------------------------------------------------------------
# Presets vs published sizes
# ---------------------------------------------------------------------------------------------------------
# (preset, published size, unit): the published figure is quoted to its last digit, so the count must round
# to it (within half a unit of the last quoted digit).
PUBLISHED = [
    ("gpt3-175b", 174.6e9, 0.1e9),  # Brown et al. 2020 / Narayanan et al. 2021: 174.6B
    ("llama-3-8b", 8.03e9, 0.01e9),  # meta-llama/Meta-Llama-3-8B model card: 8.03B
    ("llama-3-70b", 70.6e9, 0.1e9),  # 70.6B (70,553,706,496)
    ("llama-3.1-405b", 405.9e9, 0.1e9),  # 405.9B (405,853,388,800)
    ("gpt2-124m", 124.4e6, 0.1e6),  # openai-community/gpt2: 124,439,808
    ("llama-2-7b", 6.74e9, 0.01e9),  # meta-llama/Llama-2-7b-hf: 6,738,415,616
    ("mistral-7b", 7.24e9, 0.01e9),  # mistralai/Mistral-7B-v0.1: 7,241,732,096
]


@pytest.mark.parametrize("name,published,unit", PUBLISHED)
def test_preset_matches_published_size(name, published, unit):
    n = load_model(name).n_params()
    assert abs(n - published) <= unit / 2, f"{name}: {n:,} does not round to {published:,.0f}"


def test_gpt2_124m_exact_hand_count():
    # token emb V*h + learned positions 1024*h + per layer (attn 4h^2 + mlp 8h^2, biases 3h+h+4h+h = 9h,
    # two LayerNorms 4h => 12h^2 + 13h) + final LayerNorm 2h; LM head tied (no extra).
    h = 768
    expected = 50257 * h + 1024 * h + 12 * (12 * h**2 + 13 * h) + 2 * h
    assert expected == 124_439_808
    assert load_model("gpt2-124m").n_params() == expected


def test_llama3_8b_exact_hand_count():
    # embedding and untied head 128256*4096 each; per layer q,o 4096^2 each, k,v 4096*1024 each,
    # SwiGLU 3*4096*14336, two RMSNorm 2*4096; final RMSNorm 4096.
    h, kv, f, V, L = 4096, 1024, 14336, 128256, 32
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    expected = 2 * V * h + L * per_layer + h
    assert expected == 8_030_261_248
    assert load_model("llama-3-8b").n_params() == expected


def test_gpt3_175b_exact_hand_count():
    # Tied embedding, learned positions 2048, biases everywhere: 12lh^2 + 13lh + Vh + 2048h + 2h.
    l, h, V = 96, 12288, 50257
    expected = l * (12 * h**2 + 13 * h) + V * h + 2048 * h + 2 * h
    assert load_model("gpt3-175b").n_params() == expected


def test_alias_resolves_to_the_same_model():
    assert load_model("llama-3-405b").n_params() == load_model("llama-3.1-405b").n_params()
    assert load_model("LLAMA-3-8B").n_params() == 8_030_261_248  # case-insensitive


def test_public_api_exports():
    assert perfmodel.load_model is load_model
    assert perfmodel.ModelConfig is ModelConfig


def test_gqa_and_head_dim_defaults():
    m = load_model("llama-3-70b")
    assert (m.n_heads, m.n_kv_heads, m.head_dim) == (64, 8, 128)
    assert (m.q_dim, m.kv_dim) == (8192, 1024)
    g = load_model("gpt3-175b")
    assert g.n_kv_heads == g.n_heads == 96 and g.head_dim == 128


def test_gpt3_13b_explicit_head_dim():
    # d_model 5140 with 40 heads of 128: attention width 5120 != hidden.
    m = load_model("gpt3-13b")
    assert (m.hidden, m.q_dim, m.kv_dim) == (5140, 5120, 5120)
    h, q = 5140, 5120
    per_layer = 4 * h * q + 8 * h * h + (3 * q + h + 4 * h + h) + 4 * h
    assert m.params_per_layer() == per_layer


# ---------------------------------------------------------------------------------------------------------
# HuggingFace config.json
# ---------------------------------------------------------------------------------------------------------
def _hf(name: str) -> ModelConfig:
    return load_model(str(HF / name / "config.json"))


def test_hf_gpt2():
    m = _hf("gpt2")
    assert m.name == "gpt2"  # the directory name of a config.json
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.ffn_hidden) == (12, 768, 12, 12, 3072)
    assert m.mlp == "gelu" and not m.gated
    assert m.norm == "layernorm" and m.position == "learned"
    assert m.tie_embeddings is True  # GPT2Config default
    assert m.linear_bias == "all"
    assert m.vocab == 50257 and m.max_seq_len == 1024
    assert m.dropout == pytest.approx(0.1)
    assert m.sliding_window is None
    assert m.n_params() == 124_439_808
    assert m.n_params() == load_model("gpt2-124m").n_params()


def test_hf_llama3_8b():
    m = _hf("llama-3-8b")
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim, m.ffn_hidden) == (32, 4096, 32, 8, 128, 14336)
    assert m.mlp == "swiglu" and m.gated
    assert m.norm == "rmsnorm" and m.position == "rope"
    assert m.tie_embeddings is False
    assert m.linear_bias == "none"
    assert m.vocab == 128256 and m.max_seq_len == 8192
    assert m.dropout == 0.0
    assert m.sliding_window is None
    assert m.n_params() == 8_030_261_248


def test_hf_mistral_7b():
    m = _hf("mistral-7b-v0.1")
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.ffn_hidden) == (32, 4096, 32, 8, 14336)
    assert m.gated and m.norm == "rmsnorm" and m.position == "rope"
    assert m.tie_embeddings is False and m.linear_bias == "none"
    assert m.vocab == 32000 and m.max_seq_len == 32768
    assert m.sliding_window == 4096
    h, kv, f, V = 4096, 1024, 14336, 32000
    expected = 2 * V * h + 32 * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h) + h
    assert expected == 7_241_732_096
    assert m.n_params() == expected == load_model("mistral-7b").n_params()


def test_hf_qwen2_7b():
    m = _hf("qwen2-7b")
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim, m.ffn_hidden) == (28, 3584, 28, 4, 128, 18944)
    assert m.gated and m.norm == "rmsnorm" and m.position == "rope"
    assert m.tie_embeddings is False
    assert m.linear_bias == "qkv"  # Qwen2: q/k/v projections have biases, nothing else
    assert m.vocab == 152064 and m.max_seq_len == 131072
    assert m.sliding_window is None  # use_sliding_window: false overrides sliding_window: 131072
    h, kv, f, V = 3584, 512, 18944, 152064
    per_layer = 2 * h * h + 2 * h * kv + (h + 2 * kv) + 3 * h * f + 2 * h
    expected = 2 * V * h + 28 * per_layer + h
    assert expected == 7_615_616_512  # Qwen/Qwen2-7B safetensors total
    assert m.n_params() == expected


def test_hf_pythia_1_4b():
    m = _hf("pythia-1.4b")
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.ffn_hidden) == (24, 2048, 16, 16, 8192)
    assert m.mlp == "gelu" and m.norm == "layernorm" and m.position == "rope"
    assert m.tie_embeddings is False and m.linear_bias == "all"
    assert m.vocab == 50304 and m.max_seq_len == 2048
    # Biderman et al. 2023 (Pythia), Table 1 / model card: 1,414,647,808 total, 1,208,602,624 non-embedding.
    assert m.n_params() == 1_414_647_808
    assert m.n_params() - 2 * 50304 * 2048 == 1_208_602_624


def test_hf_missing_num_key_value_heads_defaults_to_mha():
    cfg = json.loads((HF / "llama-3-8b" / "config.json").read_text())
    del cfg["num_key_value_heads"]
    m = from_hf_config(cfg, name="x")
    assert m.n_kv_heads == 32


def test_hf_gpt2_untied_when_config_says_so():
    cfg = json.loads((HF / "gpt2" / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    m = from_hf_config(cfg, name="x")
    assert m.n_params() == 124_439_808 + 50257 * 768


# ---------------------------------------------------------------------------------------------------------
# Bad input: one-line InputError naming the field/value
# ---------------------------------------------------------------------------------------------------------
def _one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


def test_unknown_preset_suggests_close_names():
    with pytest.raises(InputError) as err:
        load_model("llama-3-8")
    msg = _one_line(err)
    assert "did you mean" in msg and "llama-3-8b" in msg and "'llama-3-8'" in msg


def test_unsupported_model_type(tmp_path):
    cfg = json.loads((HF / "gpt2" / "config.json").read_text())
    cfg["model_type"] = "bert"
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as err:
        load_model(str(p))
    msg = _one_line(err)
    assert "'bert'" in msg and "not supported" in msg
    for t in ("gpt2", "llama", "mistral", "qwen2", "gpt_neox"):
        assert t in msg


def test_malformed_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama",\n "hidden_size": 4096,,}')
    with pytest.raises(InputError) as err:
        load_model(str(p))
    msg = _one_line(err)
    assert "malformed JSON" in msg and "line 2" in msg


@pytest.mark.parametrize("fixture,key", [
    ("llama-3-8b", "hidden_size"),
    ("llama-3-8b", "num_hidden_layers"),
    ("gpt2", "n_embd"),
    ("gpt2", "vocab_size"),
    ("qwen2-7b", "intermediate_size"),
    ("pythia-1.4b", "max_position_embeddings"),
])
def test_missing_required_key(tmp_path, fixture, key):
    cfg = json.loads((HF / fixture / "config.json").read_text())
    del cfg[key]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as err:
        load_model(str(p))
    msg = _one_line(err)
    assert f"'{key}'" in msg and "required" in msg


def test_missing_model_file():
    with pytest.raises(InputError) as err:
        load_model("/nonexistent/config.json")
    assert "does not exist" in _one_line(err)


def test_invalid_model_fields_are_one_line():
    with pytest.raises(InputError) as err:
        ModelConfig(name="x", n_layers=2, hidden=100, n_heads=3, ffn_hidden=400, vocab=10, max_seq_len=8, mlp="gelu")
    assert "n_heads" in _one_line(err)
    with pytest.raises(InputError) as err:
        ModelConfig(name="x", n_layers=2, hidden=128, n_heads=8, n_kv_heads=3, ffn_hidden=4, vocab=10,
                    max_seq_len=8, mlp="gelu")
    assert "n_kv_heads" in _one_line(err)
    with pytest.raises(InputError) as err:
        ModelConfig(name="x", n_layers=0, hidden=128, n_heads=8, ffn_hidden=4, vocab=10, max_seq_len=8, mlp="gelu")
    assert "n_layers" in _one_line(err)


def test_a_hugging_face_id_names_its_preset():
    from perfmodel.spec.model.catalogue import preset_for_hf_id

    assert preset_for_hf_id("meta-llama/Llama-2-7b-hf") == "llama-2-7b"  # the id's name, without -hf
    assert preset_for_hf_id("meta-llama/Meta-Llama-3.1-8B") == "llama-3.1-8b"  # ... without meta-
    assert preset_for_hf_id("mistralai/Mixtral-8x7B-v0.1") == "mixtral-8x7b"  # from the table: no name rule gives it
    assert preset_for_hf_id("deepseek-ai/DeepSeek-V3-Base") == "deepseek-v3"
    assert preset_for_hf_id("bigscience/bloom-560m") is None
