"""Gemma 4's text models (spec.model.hf_gemma4, ModelConfig.global_attention): parameter counts by hand from the config,
the presets equal to their config.json (fixtures tests/fixtures/hf/gemma-4-*, verbatim from
ai-dynamo/aiconfigurator@095f58a51, Apache-2.0), one sliding and one global layer's attention FLOPs and KV bytes
by hand, the tensor-parallel limit of the global layers' key/value heads, the refusals, and both CLIs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel.cost.compute.attention_kinds import attention_head_width
from perfmodel.cost.compute.flops import attention_flops_per_token, matmul_params
from perfmodel.cost.compute.kernels import Device, attention_ops
from perfmodel.errors import InputError
from perfmodel.serve.kv_cache import kv_bytes_per_token, layer_kv_bytes, sequence_kv_bytes
from perfmodel.spec.model.global_attention import attention_parts
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.hf_config import from_hf_config
from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, resolve
from perfmodel.spec.serving.schema import ServePlan, load_serving_stack

HF = Path(__file__).parent / "fixtures" / "hf"
V = 262144  # vocab_size (tied)


def _attention(h, heads, head_dim, kv_heads, shared):
    """One layer's q, k, (v) and o projections (no biases): Gemma4TextAttention's q_proj, k_proj, v_proj (None
    with attention_k_eq_v on a full layer) and o_proj."""
    return h * heads * head_dim + (1 if shared else 2) * h * kv_heads * head_dim + heads * head_dim * h


def _by_hand(h, layers, full, heads, kv, gkv, ffn, experts=0, top_k=0, moe_ffn=0, active=False):
    """Parameters from the config: per layer attention, the dense GeGLU MLP (3 h f), the experts' 3 h f_e each
    (all, or top_k when `active`) with the router h x E, and two RMSNorm scales (the ones ModelConfig counts);
    the tied embedding and the final norm once."""
    mlp = 3 * h * ffn + (h * experts + (top_k if active else experts) * 3 * h * moe_ffn if experts else 0)
    local = _attention(h, heads, 256, kv, False) + mlp + 2 * h
    glob = _attention(h, heads, 512, gkv, True) + mlp + 2 * h
    return (layers - full) * local + full * glob + V * h + h


def test_26b_a4b_params_by_hand():
    m = load_model("gemma-4-26b-a4b")
    shape = dict(h=2816, layers=30, full=5, heads=16, kv=8, gkv=2, ffn=2112, experts=128, top_k=8, moe_ffn=704)
    assert m.n_params() == _by_hand(**shape) == 25_232_613_120
    assert m.active_params() == _by_hand(**shape, active=True) == 3_822_001_920  # "A4B": 3.8B active


def test_31b_params_by_hand():
    m = load_model("gemma-4-31b")
    assert m.n_params() == _by_hand(h=5376, layers=60, full=10, heads=32, kv=16, gkv=4, ffn=21504) == 30_696_664_320
    assert m.active_params() == m.n_params()


@pytest.mark.parametrize("name, size", [("gemma-4-26b-a4b", 26e9), ("gemma-4-31b", 31e9)])
def test_the_names_count_the_vision_tower_perfmodel_does_not_price(name, size):
    """The text model plus the vision tower's 27 encoder layers (vision_config: hidden 1152, 16 heads of 72, GeGLU
    4304; 4 h^2 + 3 h f each) is the name's size within 1%: the tower is not run by text-only training, so it is
    not priced."""
    tower = 27 * (4 * 1152 * 1152 + 3 * 1152 * 4304)
    assert load_model(name).n_params() + tower == pytest.approx(size, rel=0.01)


@pytest.mark.parametrize("name", ["gemma-4-26b-a4b", "gemma-4-31b"])
def test_config_json_loads_as_the_preset(name):
    m, preset = load_model(str(HF / name / "config.json")), load_model(name)
    skip = {"name", "source"}
    assert {k: v for k, v in m.model_dump().items() if k not in skip} == {
        k: v for k, v in preset.model_dump().items() if k not in skip}
    assert (m.windowed_layers, m.sliding_window, m.global_attention.head_dim) == (m.n_layers * 5 // 6, 1024, 512)


def test_one_sliding_and_one_global_layers_attention_flops_by_hand():
    m, seq = load_model("gemma-4-26b-a4b"), 8192
    sliding = 4 * 1024 * 16 * 256  # a query meets 1024 keys (the window) over 16 heads of 256, QK^T and PV
    glob = 4 * seq * 16 * 512  # every key over 16 heads of 512
    assert attention_flops_per_token(m, seq) == 25 * sliding + 5 * glob
    # executed (causal) FLOPs of the mean layer's fused kernel: keys w (1 - w / 2s) windowed, s / 2 global
    plan = Plan(gpus=8, tp=1, dp=8, global_batch=8, micro_batch=1, seq_len=seq)
    dev = Device(m, load_hardware("dgx-h100"), plan)
    (op,) = attention_ops(dev, seq, 16, seq, 1)
    local_keys = 1024 * (1 - 1024 / (2 * seq))
    assert op.fwd_flops == pytest.approx((25 * 4 * seq * local_keys * 16 * 256 + 5 * 4 * seq * seq / 2 * 16 * 512) / 30)
    # each part priced at its own head_dim: the mean layer's op is the parts' weighted sum
    parts = [(w, attention_ops(dev, seq, 16, seq, 1, part)[0]) for w, part in attention_parts(m)]
    assert [attention_head_width(p) for _, p in attention_parts(m)] == [256, 512]
    assert op.fwd_s == pytest.approx(sum(w * o.fwd_s for w, o in parts))


def test_projection_widths_average_the_two_shapes():
    m = load_model("gemma-4-31b")
    # q 32 x 256 = 8192 windowed, 32 x 512 = 16384 global; k (and v) 16 x 256 = 4096, 4 x 512 = 2048 (k only)
    assert m.q_dim == (50 * 8192 + 10 * 16384) / 60
    assert m.kv_dim == (50 * 4096 + 10 * 2048) / 60
    assert m.kv_proj_dim == (50 * 2 * 4096 + 10 * 2048) / 60
    assert matmul_params(m) == m.n_layers * m.matmul_params_per_layer() + V * 5376
    assert m.n_layers * m.matmul_params_per_layer() == 50 * (24576 + 3 * 21504) * 5376 + 10 * (34816 + 3 * 21504) * 5376


def test_kv_bytes_one_sliding_and_one_global_layer_by_hand():
    m = load_model("gemma-4-26b-a4b")
    plan = ServePlan(tp=1, input_len=4096, output_len=512)
    sliding, glob = 2 * 8 * 256 * 2, 2 * 2 * 512 * 2  # key and value, kv heads x head_dim, bf16
    assert layer_kv_bytes(m, plan) == pytest.approx((25 * sliding + 5 * glob) / 30)
    assert kv_bytes_per_token(m, plan) == pytest.approx(25 * sliding + 5 * glob)
    # an engine running the windows keeps 1024 tokens in a sliding layer, all 4096 in a global one
    assert sequence_kv_bytes(m, plan, 4096, load_serving_stack("vllm")) == pytest.approx(
        25 * 1024 * sliding + 5 * 4096 * glob)
    assert sequence_kv_bytes(m, plan, 4096, load_serving_stack("trtllm")) == pytest.approx(4096 * (25 * sliding + 5 * glob))
    # tp 4 splits the 8 sliding kv heads; the 2 global ones are replicated (one per rank)
    tp4 = ServePlan(tp=4, input_len=4096, output_len=512)
    assert kv_bytes_per_token(m, tp4) == pytest.approx(25 * 2 * 2 * 256 * 2 + 5 * 2 * 1 * 512 * 2)


def test_training_tp_must_divide_the_global_kv_heads():
    m = load_model("gemma-4-26b-a4b")
    with pytest.raises(InputError, match=r"global_attention.n_kv_heads\) = 2; valid tp: 1, 2"):
        resolve(Plan(gpus=8, tp=4, dp=2, global_batch=8, micro_batch=1, seq_len=4096), m, load_hardware("dgx-h100"))


def test_other_models_have_one_part():
    m = load_model("gemma-3-27b")
    assert attention_parts(m) == [(1.0, m)] and m.kv_proj_dim == 2 * m.kv_dim


@pytest.mark.parametrize("update, match", [
    (dict(sliding_window=None, sliding_window_layers=None), "global_attention shapes the layers without"),
    (dict(sliding_window_layers=60), "0 of 60|60 of 60 layers are windowed"),
    (dict(global_attention=dict(head_dim=512, n_kv_heads=3)), "global_attention.n_kv_heads = 3 must divide"),
])
def test_bad_global_attention_is_refused(update, match):
    base = load_model("gemma-4-31b").model_dump()
    with pytest.raises(InputError, match=match):
        ModelConfig.parse({**base, **update})


def _text(**update):
    import json
    cfg = json.loads((HF / "gemma-4-31b" / "config.json").read_text())
    cfg["text_config"].update(update)
    return cfg


@pytest.mark.parametrize("key, value, match", [
    ("hidden_size_per_layer_input", 256, "hidden_size_per_layer_input = 256 is not valid; valid: 0"),
    ("num_kv_shared_layers", 20, "num_kv_shared_layers = 20 is not valid; valid: 0"),
    ("use_bidirectional_attention", "all", "use_bidirectional_attention = 'all' is not valid; valid: vision"),
    ("attention_bias", True, "attention_bias = True is not valid"),
])
def test_unpriced_gemma4_variants_are_named(key, value, match):
    with pytest.raises(InputError, match=match):
        from_hf_config(_text(**{key: value}), "g4")


def test_without_k_eq_v_global_layers_keep_the_kv_heads_and_both_projections():
    m = from_hf_config(_text(attention_k_eq_v=False), "g4")
    assert (m.global_attention.n_kv_heads, m.global_attention.shared_kv, m.global_attention.head_dim) == (16, False, 512)


def _cli(*args):
    out = subprocess.run([sys.executable, "-m", "perfmodel", *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_predict_gemma4_31b_on_tpu_v7():
    out = _cli("predict", "--model", "gemma-4-31b", "--hardware", "tpu-v7", "--gpus", "64", "--tp", "1", "--pp", "1",
               "--zero", "3", "--micro-batch", "1", "--global-batch", "64", "--seq-len", "8192", "--stack", "maxtext")
    assert "step time" in out and "30.70B params" in out and "each head shape on its share of the layers" in out


def test_infer_gemma4_26b_a4b():
    out = _cli("infer", "--model", "gemma-4-26b-a4b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "2",
               "--input-len", "4096", "--output-len", "512")
    assert "TPOT" in out and "KV cache" in out and "tokens per replica" in out
