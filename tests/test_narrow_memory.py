"""Memory at low precision: what a Transformer Engine stack saves of a GEMM's input under fp8/fp4 (its
columnwise quantized copy with scales, `kernels.saved_input_bytes`) and the quantized weight copies it caches
(rowwise and columnwise, `memory.narrow_cache_bytes`), each against bytes counted by hand; torchao's stack keeps
the bf16 input."""

from __future__ import annotations

import pytest

from perfmodel import load_hardware, load_model
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.memory.footprint import layer_activation_bytes, layer_gemm_params, narrow_cache_bytes
from perfmodel.cost.compute.moe import moe_kept_bytes, moe_share, routed_copies
from perfmodel.spec.plan.layout import Plan, resolve

H, Q, F = 4096, 4096, 14336  # Llama 3 8B: hidden, query width, ffn
T = 4096  # one sequence of 4096 tokens per micro-batch


def _lay(model="llama-3-8b", system="dgx-h100", **kw) -> tuple:
    m, s = load_model(model), load_hardware(system)
    base = dict(gpus=8, tp=1, pp=1, micro_batch=1, global_batch=64, seq_len=T, zero=1, recompute="none",
                stack="megatron-core")
    return m, Layouts.from_plan(resolve(Plan(**(base | kw)), m, s))


@pytest.mark.parametrize("precision, system, saved", [("fp8", "dgx-h100", 1.0), ("fp4", "dgx-b200", 0.5 + 1 / 16)])
def test_te_saves_quantized_gemm_inputs(precision, system, saved):
    """megatron-core (Transformer Engine): the four layer GEMMs' saved inputs, qkv (h), out_proj (q), mlp_in (h)
    and mlp_out (f) per token, at `saved` B per element instead of 2 (NVFP4: 0.5 + one E4M3 scale per 16)."""
    model, bf16 = _lay(system=system)
    _, narrow = _lay(system=system, precision=precision)
    less = layer_activation_bytes(model, bf16)[0] - layer_activation_bytes(model, narrow)[0]
    assert less == pytest.approx((2.0 - saved) * T * (H + Q + H + F))


def test_torchao_keeps_bf16_inputs():
    """torchtitan (torchao Float8Linear saves input_hp and casts again in the backward): fp8 keeps what bf16 does."""
    model, bf16 = _lay(stack="torchtitan")
    _, fp8 = _lay(stack="torchtitan", precision="fp8")
    assert layer_activation_bytes(model, fp8)[0] == pytest.approx(layer_activation_bytes(model, bf16)[0])


def test_selective_layernorm_drops_the_quantized_copy():
    """Selective recompute of layernorm drops what qkv and mlp_in keep, the quantized copies under fp8: the
    difference against no recompute is 1 B x (h + h) per token in fp8, 2 B x (h + h) in bf16."""
    for precision, b in (("bf16", 2.0), ("fp8", 1.0)):
        model, none = _lay(precision=precision)
        _, sel = _lay(precision=precision, recompute="selective", recompute_modules=["layernorm"])
        dropped = layer_activation_bytes(model, none)[0] - layer_activation_bytes(model, sel)[0]
        assert dropped == pytest.approx(b * T * 2 * H)


def test_cached_weight_copies():
    """Cached quantized weights: Transformer Engine keeps rowwise and columnwise copies (2 x 1 B per GEMM
    parameter in fp8, 2 x (0.5 + 1/16) in NVFP4); torchtitan one copy; none in bf16."""
    model, te = _lay(precision="fp8")
    gemm = layer_gemm_params(model, te)[0]
    assert gemm == pytest.approx(H * (Q + 2 * 1024) + Q * H + 2 * F * H + F * H)  # Llama 3 8B: 8 kv heads x 128
    assert narrow_cache_bytes(gemm, te) == pytest.approx(2 * gemm)
    _, fp4 = _lay(system="dgx-b200", precision="fp4")
    assert narrow_cache_bytes(gemm, fp4) == pytest.approx(2 * (0.5 + 1 / 16) * gemm)
    _, titan = _lay(stack="torchtitan", precision="fp8")
    assert narrow_cache_bytes(gemm, titan) == pytest.approx(gemm)
    _, bf16 = _lay()
    assert narrow_cache_bytes(gemm, bf16) == 0.0


def test_te_moe_expert_inputs_quantized():
    """Mixtral 8x7B (no shared experts) on megatron-core: each routed copy's fc1 input (h) and fc2 input (fe)
    saved at 1 B in fp8 instead of 2."""
    model, bf16 = _lay(model="mixtral-8x7b", ep=8)
    _, fp8 = _lay(model="mixtral-8x7b", ep=8, precision="fp8")
    less = moe_kept_bytes(model, bf16)[0] - moe_kept_bytes(model, fp8)[0]
    fe = model.moe.expert_ffn_hidden
    assert less == pytest.approx(routed_copies(model, fp8)[0] * (H + fe) * moe_share(model))
