"""Kernel-rate formulas of perfmodel.cost.compute.kernel_time checked by hand."""

import pytest

from perfmodel.cost.compute.kernel_time import attention_efficiency, gemm_tiles, gemm_time


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
    from perfmodel.cost.compute.kernels import Device, zero3_copy_op
    from perfmodel.spec.plan.layout import resolve

    plan = resolve(pm.Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=1024, zero=3),
                           pm.load_model("gpt2-124m"), pm.load_hardware("dgx-h100"))
    dev = Device(pm.load_model("gpt2-124m"), pm.load_hardware("dgx-h100"), plan)
    op = zero3_copy_op(dev, 1e9, 4.0)
    # forward: copy-out of the gathered bf16 weights, 2 + 2 B; backward: copy-out again (4 B) and the fp32
    # gradient copy-in (2 + 4 B), at 3.35 TB/s x 0.88.
    bw = 3.35e12 * 0.88
    assert op.fwd_s == pytest.approx(4e9 / bw)
    assert op.bwd_s == pytest.approx(10e9 / bw)


def test_shared_core_speedup_by_hand():
    """Processor sharing: 4 single-thread ranks measured together on 2 cores run at half a core each."""
    from perfmodel.cost.compute.kernel_time import shared_core_speedup

    assert shared_core_speedup(1.0, 4, 4, 2) == pytest.approx(1.0)  # all computing: the measured rate
    assert shared_core_speedup(0.4, 4, 4, 2) == pytest.approx(2.0)  # 1.6 ranks busy: a core each
    assert shared_core_speedup(0.75, 4, 4, 2) == pytest.approx((2 / 3) / 0.5)  # 3 busy on 2 cores
    assert shared_core_speedup(1.0, 2, 4, 2) == pytest.approx(2.0)  # a 2-rank job on the 4-rank host
    assert shared_core_speedup(0.3, 8, 8, 8) == pytest.approx(1.0)  # a core per rank: nothing to gain


def test_estimate_shares_cores_between_pipeline_stages():
    """pp4 of a 4-layer model on a host where 4 ranks share 2 cores: the last stage (a layer and the head)
    computes while the first three wait on it; its compute runs shared_core_speedup(busy) faster, busy being
    the mean stage's compute per micro-batch over the last stage's (by hand from the op table)."""
    from pathlib import Path

    from perfmodel.cost.compute.kernel_time import shared_core_speedup
    from perfmodel.cost.estimate import estimate
    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.spec.plan.layout import Plan
    from perfmodel.validate.sweeps import TINY_GPT2 as model

    cpu = load_hardware(Path(__file__).parent / "fixtures" / "cpu-test.yaml")
    shared = type(cpu).parse({**cpu.model_dump(), "shared_host": {"ranks": 4, "cores": 2}})
    pp4 = Plan(gpus=4, pp=4, micro_batch=1, global_batch=8, seq_len=128)
    dp4 = Plan(gpus=4, dp=4, micro_batch=1, global_batch=8, seq_len=128)
    alone, dp = estimate(model, cpu, pp4), estimate(model, cpu, dp4)
    total = lambda ops, where: sum((o.fwd_s + o.bwd_s) for o in ops if o.where == where)
    layer, head, emb = total(alone.ops, "layer"), total(alone.ops, "head"), total(dp.ops, "embedding")
    busy = (4 * layer + emb + head) / 4 / (layer + head)
    s = shared_core_speedup(busy, 4, 4, 2)
    assert 1.0 < s <= 2.0
    est = estimate(model, shared, pp4)
    for part in ("gemm", "attention", "memory_bound"):
        assert getattr(est.time_s, part) == pytest.approx(getattr(alone.time_s, part) / s, rel=1e-9)
    assert est.time_s.pp_comm == pytest.approx(alone.time_s.pp_comm)  # sends are not compute
    assert est.time_s.optimizer == pytest.approx(alone.time_s.optimizer)  # every rank steps at once
    assert any("sharing 2 cores" in n for n in est.notes)
    # every rank computing all the time: the measured rate, no note
    assert estimate(model, shared, dp4).time_s.gemm == pytest.approx(dp.time_s.gemm)
    # a 2-rank job on the host measured with 4: a core per rank, optimizer step included (2x)
    dp2 = Plan(gpus=2, dp=2, micro_batch=2, global_batch=8, seq_len=128)
    one, two = estimate(model, cpu, dp2), estimate(model, shared, dp2)
    assert two.time_s.gemm == pytest.approx(one.time_s.gemm / 2)
    assert two.time_s.optimizer == pytest.approx(one.time_s.optimizer / 2)
