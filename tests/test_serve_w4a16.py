"""W4A16 serving (ServePlan.precision = "w4a16"): 4-bit weights with bf16 activations on a MoE model's routed
experts (every layer GEMM of a dense model), by hand: the weights' bytes, the mixed-precision GEMM's roofline (a
quarter of the bf16 weight bytes at a small batch, the bf16 rate at a large one) and the layer it prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel import load_hardware, load_model
from perfmodel.cli.main import main
from perfmodel.serve import infer
from perfmodel.serve.kv_cache import weight_bytes
from perfmodel.serve.step_time import _gemm, active_experts, device, layer_gemm_s, w4a16_gemm_s
from perfmodel.spec.serving.schema import W4_BYTES, ServePlan, load_serving_stack

KIMI = str(Path(__file__).parent / "fixtures" / "hf" / "kimi-k2.5" / "config.json")


def test_four_bit_bytes_and_default_kv():
    assert W4_BYTES == 0.5 + 2 / 32  # 4-bit values, one bf16 scale per group of 32 (Kimi-K2.5's group_size 32)
    plan = ServePlan(tp=8, precision="w4a16", input_len=1024, output_len=1024)
    assert plan.kv == "bf16"  # bf16 activations: the KV cache stays bf16 unless asked
    k = load_model(KIMI)
    routed = k.moe_layers() * k.moe.n_experts * k.expert_params()
    rest = k.n_layers * k.params_per_layer() - routed
    ends = (k.embedding_params() + k.head_params()) * 2
    assert weight_bytes(k, plan) == pytest.approx((routed * W4_BYTES + rest * 2 + ends) / 8, rel=1e-12)
    # about 0.56 TB in all: the 1.03T parameters are 96% routed experts
    assert 0.5e12 < 8 * weight_bytes(k, plan) < 0.65e12
    dense = load_model("llama-3.1-8b")
    one = ServePlan(precision="w4a16", input_len=128, output_len=128)
    assert weight_bytes(dense, one) == pytest.approx(
        dense.n_layers * dense.params_per_layer() * W4_BYTES + (dense.embedding_params() + dense.head_params()) * 2,
        rel=1e-12)


def test_w4a16_gemm_is_the_mixed_precision_roofline():
    k, system = load_model(KIMI), load_hardware("dgx-h200")
    plan = ServePlan(tp=8, precision="w4a16", input_len=1024, output_len=1024, stack="vllm")
    dev = device(k, system, plan, load_serving_stack("vllm"))
    n = kk = 7168
    # one token: memory-bound, the 4-bit weights' bytes (and the bf16 vectors) at the HBM rate
    assert w4a16_gemm_s(dev, 1, n, kk) == pytest.approx(dev.memory(kk * 2 + kk * n * W4_BYTES + n * 2), rel=1e-12)
    # thousands of tokens (multiples of the 16-row tile): compute-bound at the bf16 rate
    rate = dev.sustained_peak("bf16") * system.efficiency.matmul_max["bf16"]
    assert w4a16_gemm_s(dev, 8192, n, kk) == pytest.approx(2 * 8192 * n * kk / rate, rel=1e-12)
    assert w4a16_gemm_s(dev, 4000, n, kk, 2) == pytest.approx(2 * 2 * 4000 * n * kk / rate, rel=1e-12)
    # 100 tokens run as 112 (7 tiles of 16 rows), here slower than their 29 MB of weights
    assert w4a16_gemm_s(dev, 100, n, kk) == pytest.approx(
        max(2 * 112 * n * kk / rate, dev.memory(100 * kk * 2 + kk * n * W4_BYTES + 100 * n * 2)), rel=1e-12)
    assert w4a16_gemm_s(dev, 100, n, kk) == pytest.approx(2 * 112 * n * kk / rate, rel=1e-12)
    # near 4x fewer bytes than the bf16 GEMM at one token (Marlin's ~3.9x)
    assert 3.0 < dev.memory(kk * n * 2) / w4a16_gemm_s(dev, 1, n, kk) < 3.6


def test_moe_layer_prices_only_the_routed_experts_in_four_bits():
    k, system = load_model(KIMI), load_hardware("dgx-h200")
    plan = ServePlan(tp=8, precision="w4a16", input_len=1024, output_len=1024, stack="vllm")
    dev = device(k, system, plan, load_serving_stack("vllm"))
    T, e, g = 64.0, k.moe, 2
    attn = _gemm(dev, T, k.qkv_matmul_params() / k.hidden / 8, k.hidden) + _gemm(dev, T, k.hidden, k.q_dim / 8)
    dense = _gemm(dev, T, g * k.ffn_hidden / 8, k.hidden) + _gemm(dev, T, k.hidden, k.ffn_hidden / 8)
    busy = max(active_experts(e.n_experts, e.top_k, e.n_experts, T), 1.0)  # ep 1: every expert local, etp 8
    rows, fe = T * e.top_k / busy, e.expert_ffn_hidden / 8
    fs = e.shared_ffn_hidden / 8
    # the routed experts as one grouped kernel: a GEMM of every reached expert's weights at its rows
    moe = (_gemm(dev, T, e.n_experts, k.hidden) + w4a16_gemm_s(dev, rows, busy * g * fe, k.hidden)
           + w4a16_gemm_s(dev, rows, busy * k.hidden, fe) + _gemm(dev, T, g * fs, k.hidden) + _gemm(dev, T, k.hidden, fs))
    want = attn + (k.dense_layers() * dense + k.moe_layers() * moe) / k.n_layers
    assert layer_gemm_s(dev, plan, T) == pytest.approx(want, rel=1e-12)
    assert dev.plan.precision == "bf16"  # the other GEMMs in bf16


def test_kimi_int4_on_h200_fits_where_bf16_does_not():
    kw = dict(tp=8, input_len=1024, output_len=1024, concurrency=16, stack="vllm")
    e = infer(KIMI, "dgx-h200", ServePlan(precision="w4a16", **kw))
    assert e.fits_in_memory and e.memory_gib["weights"] < 75
    with pytest.raises(Exception, match="does not fit"):
        infer(KIMI, "dgx-h200", ServePlan(precision="bf16", **kw))


def test_cli_takes_w4a16(capsys):
    assert main(["infer", "--model", KIMI, "--hardware", "dgx-h200", "--tp", "8", "--precision", "w4a16",
                 "--input-len", "1024", "--output-len", "256", "--concurrency", "8", "--stack", "vllm"]) == 0
    assert "precision=w4a16 kv=bf16" in capsys.readouterr().out
