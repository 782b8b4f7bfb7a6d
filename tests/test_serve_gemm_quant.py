"""A served fp8 GEMM's activation cast (serve.gemm_quant): the table's dynamic cast replaced by one static cast
kernel, by hand from the part's own table floors; other precisions and parts without the dtype unchanged."""

from __future__ import annotations

import pytest

from perfmodel import load_hardware, load_model
from perfmodel.cost.compute.kernel_time import gemm_traffic_bytes
from perfmodel.serve.gemm_quant import served_gemm_s, table_floor_s
from perfmodel.serve.step_time import _gemm, device
from perfmodel.spec.serving.schema import ServePlan, load_serving_stack


def _dev(hw="dgx-h200", precision="fp8"):
    plan = ServePlan(precision=precision, input_len=8, output_len=8, tp=4)
    return device(load_model("llama-3.1-70b"), load_hardware(hw), plan, load_serving_stack("trtllm"))


def test_floors_from_the_table():
    dev = _dev()
    fp8, bf16 = table_floor_s(dev, "fp8"), table_floor_s(dev, "bf16")
    assert fp8 == pytest.approx(float(dev.gemm_priced(1.0, 128, 128, 1, "fp8")[0]))
    # the H200 table: ~12 us for an fp8 call of one launch's work against ~2.6 us for bf16 (before the sustained
    # fraction); the dynamic cast is most of an fp8 call's fixed cost
    assert 3.5 * bf16 < fp8 < 6 * bf16
    assert table_floor_s(_dev("dgx-h200"), "fp4") is None  # Hopper's table has no fp4


def test_served_fp8_gemm_by_hand():
    dev = _dev()
    fp8, bf16 = table_floor_s(dev, "fp8"), table_floor_s(dev, "bf16")
    m, n, k = 8, 14336 // 4 * 2, 8192  # Llama-3.1-70B's gate-up projection at tp 4, 8 decode rows
    table = float(dev.gemm_priced(m, n, k, 1, "fp8")[0])
    assert _gemm(dev, m, n, k) == pytest.approx(table - fp8 + 2 * bf16, rel=1e-12)
    # a grouped call of 4 small GEMMs (priced as one of their rows): one cast each way, above the weights' bytes
    m4, n4, k4 = 64, 1024, 1024
    table4 = float(dev.gemm_priced(m4, n4, k4, 4, "fp8")[0])
    assert _gemm(dev, m4, n4, k4, 4) == pytest.approx(max(table4 - fp8 + 2 * bf16, dev.memory(
        gemm_traffic_bytes(m4, n4, k4, 1.0, 2.0, 4))), rel=1e-12)
    # never below the operands' bytes at the HBM rate
    tiny = served_gemm_s(dev, 1e-9, m, n, k, 1, "fp8")
    assert tiny == pytest.approx(dev.memory(gemm_traffic_bytes(m, n, k, 1.0, 2.0, 1)), rel=1e-12)


def test_other_precisions_unchanged():
    dev = _dev(precision="bf16")
    assert _gemm(dev, 8, 4096, 8192) == pytest.approx(float(dev.gemm_priced(8, 4096, 8192, 1, "bf16")[0]))
    dev4 = _dev("dgx-b200", "fp4")
    assert _gemm(dev4, 8, 4096, 8192) == pytest.approx(float(dev4.gemm_priced(8, 4096, 8192, 1, "fp4")[0]))
    assert served_gemm_s(dev4, 1.0, 8, 4096, 8192, 1, "fp4") == 1.0
