"""int8 training (AQT, MaxText quantization: int8) on TPU: the layer GEMMs at the part's int8 rate, 1-byte operands;
the precision read from published tables; exports that cannot train int8 change to bf16, MaxText writes it."""

from __future__ import annotations

import pytest

from perfmodel import Plan, estimate, load_hardware, load_model
from perfmodel.export.checks.spread import maxtext_plan_file
from perfmodel.export.maxtext.config import settings
from perfmodel.export.targets import nearest_updates
from perfmodel.published.runs import precision_of
from perfmodel.spec.plan.layout import resolve


def test_precision_text():
    assert precision_of("int8 (AQT) matmuls") == "int8"
    assert precision_of("bf16 activations (int8_training=false)") == "bf16"
    assert precision_of("AQT int8 weights and activations") == "int8"


def test_int8_gemms_run_at_the_int8_peak():
    """TPU v5p: 918 TOP/s int8 against 459 bf16 at the same matmul fraction (0.85), so a large datasheet-priced
    layer GEMM takes half the time; attention stays bf16, and MFU is quoted against the int8 peak."""
    model, system = load_model("llama-2-7b"), load_hardware("tpu-v5p")
    assert system.accelerator.peak_flops("int8") == 918e12
    kw = dict(gpus=64, micro_batch=4, global_batch=256, seq_len=4096, zero=3, stack="maxtext")
    ops = {p: {o.name: o for o in estimate(model, system, resolve(Plan(**kw, precision=p), model, system)).ops}
           for p in ("bf16", "int8")}
    assert ops["int8"]["mlp_in"].fwd_s == pytest.approx(ops["bf16"]["mlp_in"].fwd_s / 2, rel=0.02)
    assert ops["int8"]["attention"].fwd_s == ops["bf16"]["attention"].fwd_s
    e = estimate(model, system, resolve(Plan(**kw, precision="int8"), model, system))
    assert e.mfu_peak_dtype == "int8"


def test_a_part_without_int8_is_refused():
    from perfmodel.errors import InputError

    model, system = load_model("llama-2-7b"), load_hardware("dgx-h100")
    with pytest.raises(InputError, match="precision=int8 is not supported by H100"):
        resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=4096, precision="int8"), model, system)


@pytest.mark.parametrize("to", ["megatron", "torchtitan", "deepspeed"])
def test_gpu_exports_train_bf16_instead(to):
    pf = maxtext_plan_file("v5p-fsdp-tp4")
    pf = pf.model_copy(update={"plan": pf.plan.model_copy(update={"precision": "int8"})})
    up, why = nearest_updates(pf, to, None)
    assert up.get("precision") == "bf16" and any("int8" in w for w in why)


def test_maxtext_writes_aqt_int8():
    """MaxText's AQT int8 takes gradient accumulation (its refusal names fp8 only): 512 sequences over 256 chips at
    one per chip is 2 steps accumulated (tests/test_framework_checks_maxtext.py runs MaxText's own check on it)."""
    keys, _, _ = settings(maxtext_plan_file("v6e-int8-accum"))
    assert (keys["quantization"], keys["gradient_accumulation_steps"]) == ("int8", 2)
