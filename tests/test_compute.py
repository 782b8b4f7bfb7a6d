"""Kernel-rate formulas of perfmodel.cost.compute checked by hand."""

import pytest

from perfmodel.cost.compute import attention_efficiency, gemm_tiles, gemm_time


def test_tile_family_rates_follow_arithmetic_intensity():
    rates = dict(gemm_tiles(128, 256))
    # intensity tm*tn/(tm+tn): 128x256 -> 85.33 (reference), 128x128 -> 64, 64x128 -> 42.67, 64x64 -> 32
    assert rates[(128, 256)] == rates[(256, 128)] == 1.0
    assert rates[(128, 128)] == pytest.approx(64 / (32768 / 384))
    assert rates[(64, 128)] == pytest.approx((8192 / 192) / (32768 / 384))
    assert rates[(64, 64)] == pytest.approx(32 / (32768 / 384))


def test_large_gemm_uses_the_spec_tile():
    # 2048 x 4608 on 108 SMs: 256x128 tiles -> 8*36 = 288 tiles, 3 waves, useful 288/324 = 0.889;
    # 128x128 would give 576 tiles, 6 waves (0.889) at 0.75 rate: the spec tile wins.
    t = gemm_time(2048, 4608, 12288, 312e12, 0.869, 256, 128, 108, 1.8e12)
    assert t == pytest.approx(2 * 2048 * 4608 * 12288 / (312e12 * 0.869 * (288 / 324)))


def test_small_gemm_picks_a_smaller_tile():
    # 256 x 256 on 132 SMs: 128x256 gives 2 tiles (2/132 of a wave); 64x64 gives 16 tiles at rate 0.375,
    # useful = 0.375 * 65536 / (1 * 132 * 4096) = 0.04545 > 2 tiles' 65536 / (132 * 32768) = 0.01515.
    t = gemm_time(256, 256, 8192, 1e15, 1.0, 128, 256, 132, 1e20)
    assert t == pytest.approx(2 * 256 * 256 * 8192 / (1e15 * 0.375 * 65536 / (132 * 4096)))


def test_attention_efficiency_half_saturation():
    assert attention_efficiency(423.0, 0.6, 423.0) == pytest.approx(0.3)
    assert attention_efficiency(1e9, 0.6, 423.0) == pytest.approx(0.6, rel=1e-6)


def test_zero3_copies_bytes():
    import perfmodel as pm
    from perfmodel.cost.ops import Device, zero3_copy_op

    plan = pm.plan.resolve(pm.Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=1024, zero=3),
                           pm.load_model("gpt2-124m"), pm.load_hardware("dgx-h100"))
    dev = Device(pm.load_model("gpt2-124m"), pm.load_hardware("dgx-h100"), plan)
    op = zero3_copy_op(dev, 1e9, 4.0)
    # forward: copy-out of the gathered bf16 weights, 2 + 2 B; backward: copy-out again (4 B) and the fp32
    # gradient copy-in (2 + 4 B), at 3.35 TB/s x 0.88.
    bw = 3.35e12 * 0.88
    assert op.fwd_s == pytest.approx(4e9 / bw)
    assert op.bwd_s == pytest.approx(10e9 / bw)
