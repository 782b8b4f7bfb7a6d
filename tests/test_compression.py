"""Gradient compression (Plan.grad_compression, cost.comm.compression): PowerSGD's traffic by hand for a small model,
what bf16 and PowerSGD change in the step (bytes on the wire, kernels, memory), and the layouts refused."""

from __future__ import annotations

import pytest

from perfmodel import Plan, estimate, load_hardware, load_model
from perfmodel.cost.comm.compression import compression_seconds, matrix_shapes, powersgd_share, wire_bytes
from perfmodel.cost.compute.kernels import Device
from perfmodel.cost.layouts import Layouts
from perfmodel.errors import InputError
from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.plan.layout import resolve

TINY = ModelConfig(name="tiny", n_layers=2, hidden=64, n_heads=4, ffn_hidden=256, vocab=1000, max_seq_len=128,
                   mlp="swiglu", norm="rmsnorm", position="rope")
MODEL, SYSTEM = "llama-3-8b", "dgx-h100"
PLAN = Plan(gpus=64, tp=1, pp=1, micro_batch=1, global_batch=128, seq_len=4096, zero=0, overlap_dp_comm=False)


def test_powersgd_share_by_hand():
    # matrices: embedding + head 1000x64 (2), q 64x64 (2), k, v 64x64 (4), o 64x64 (2), gate/up 256x64 (4),
    # down 64x256 (2). Rank 4: 64x64 gives 4096 >= 2*4*128 = 1024, compressed to 4*128 = 512.
    assert sorted(matrix_shapes(TINY)) == sorted([(1000, 64, 2), (64, 64, 2), (64, 64, 4), (64, 64, 2),
                                                  (256, 64, 4), (64, 256, 2)])
    total = TINY.n_params()
    matrices = 2 * 64000 + 8 * 4096 + 6 * 16384
    sent = (total - matrices) + 2 * 4 * 1064 + 8 * 4 * 128 + 6 * 4 * 320
    assert powersgd_share(TINY, 4) == pytest.approx(sent / total, rel=1e-12)
    # rank 20: 64x64 is not worth it (4096 < 2*20*128): sent whole, as torch's min_compression_rate = 2 decides;
    # the others are (16384 >= 2*20*320, 64000 >= 2*20*1064). Rank 32: nothing is.
    sent20 = (total - matrices) + 2 * 20 * 1064 + 8 * 4096 + 6 * 20 * 320
    assert powersgd_share(TINY, 20) == pytest.approx(sent20 / total, rel=1e-12)
    assert powersgd_share(TINY, 32) == 1.0
    # torch compresses only when 2 r (m + n) < m n: at r = 16 a 64 x 64 matrix (4096 = 2*16*128) is sent whole
    sent16 = (total - matrices) + 2 * 16 * 1064 + 8 * 4096 + 6 * 16 * 320
    assert powersgd_share(TINY, 16) == pytest.approx(sent16 / total, rel=1e-12)
    # a learned position table [max_seq_len, h] is a matrix DDP's hook compresses too
    gpt = TINY.model_copy(update={"position": "learned"})
    assert (128, 64, 1) in matrix_shapes(gpt) and powersgd_share(gpt, 4) < powersgd_share(TINY, 4) + 128 * 64 / total
    assert wire_bytes(TINY, 4.0, "powersgd", 4) == pytest.approx(4 * sent / total)
    assert wire_bytes(TINY, 4.0, "bf16", 1) == 2 and wire_bytes(TINY, 2.0, "bf16", 1) == 2
    assert wire_bytes(TINY, 4.0, "none", 1) == 4


def _dp(e):
    return next(c for c in e.comms if c.name == "dp gradient reduction")


def test_bf16_halves_the_fp32_reduction_and_adds_two_casts():
    none = estimate(MODEL, SYSTEM, PLAN)
    bf16 = estimate(MODEL, SYSTEM, PLAN.model_copy(update={"grad_compression": "bf16"}))
    assert _dp(bf16).bytes == pytest.approx(_dp(none).bytes / 2, rel=1e-12)
    dev = Device(load_model(MODEL), load_hardware(SYSTEM), Layouts.from_plan(bf16.plan))
    params = none.params  # tp = pp = 1: every parameter on the device
    casts = dev.memory(params * (4 + 2 + 2 + 2 + 2 + 4))  # DDP's hook: down (read 4, write 2), divide (2 + 2), back
    assert bf16.time_s.optimizer - none.time_s.optimizer == pytest.approx(casts, rel=1e-9)
    assert float(compression_seconds(dev, params, 4.0, "bf16", 64)) == pytest.approx(casts)
    assert float(compression_seconds(dev, params, 4.0, "bf16", 1)) == 0  # one replica: nothing to reduce
    assert bf16.memory_bytes.gradients == none.memory_bytes.gradients


def test_powersgd_sends_its_factors_keeps_a_residual_and_pays_eleven_passes():
    plan = PLAN.model_copy(update={"grad_compression": "powersgd", "powersgd_rank": 4})
    none, psgd = estimate(MODEL, SYSTEM, PLAN), estimate(MODEL, SYSTEM, plan)
    share = powersgd_share(load_model(MODEL), 4)
    assert share < 0.01
    assert _dp(psgd).bytes == pytest.approx(_dp(none).bytes * share, rel=1e-12)
    assert psgd.time_s.dp_comm < none.time_s.dp_comm / 50
    dev = Device(load_model(MODEL), load_hardware(SYSTEM), Layouts.from_plan(psgd.plan))
    assert psgd.time_s.optimizer - none.time_s.optimizer == pytest.approx(dev.memory(none.params * 11 * 4), rel=1e-9)
    assert psgd.memory_bytes.gradients == pytest.approx(2 * none.memory_bytes.gradients)  # + error feedback


@pytest.mark.parametrize("update, needle", [
    ({"tp": 2}, "with tp=2"), ({"pp": 2}, "with pp=2"), ({"zero": 1}, "with zero=1"), ({"cp": 2}, "with cp=2")])
def test_powersgd_outside_ddp_is_refused(update, needle):
    plan = PLAN.model_copy(update={"grad_compression": "powersgd", **update})
    with pytest.raises(InputError, match=f"grad_compression = powersgd {needle}.*valid with tp=1, pp=1, cp=1, ep=1, "
                                         "zero=0"):
        resolve(plan, load_model(MODEL), load_hardware(SYSTEM))


def test_search_with_powersgd_enumerates_whole_replicas_only():
    from perfmodel.search.ranking import search

    # whole replicas of an 8B model (zero 0) fill a B200: no headroom, so that some fit
    res = search(MODEL, "dgx-b200", 64, 512, 2048, grad_compression="powersgd", powersgd_rank=4, headroom=0.0)
    t = res.table
    assert len(t) and (t.tp == 1).all() and (t.pp == 1).all() and (t.zero == 0).all() and (t.cp == 1).all()
    assert res.plan(0).grad_compression == "powersgd"
    with pytest.raises(InputError, match="MoE model"):
        search("qwen3-30b-a3b", "dgx-b200", 64, 512, 4096, grad_compression="powersgd")


def test_one_replica_compresses_nothing():
    """dp x cp = 1: no data-parallel reduction, so neither kernels nor PowerSGD's residual are charged."""
    one = Plan(gpus=1, tp=1, pp=1, micro_batch=1, global_batch=8, seq_len=1024, zero=0)
    base = estimate("gpt2-124m", SYSTEM, one)
    for c in ("bf16", "powersgd"):
        e = estimate("gpt2-124m", SYSTEM, one.model_copy(update={"grad_compression": c}))
        assert e.step_time_s == base.step_time_s and e.memory_bytes == base.memory_bytes


def test_exports_say_what_the_framework_cannot_compress():
    from perfmodel.export.nearest import export_plan
    from test_export import plan_file

    # none of the three has PowerSGD: each export changes the plan to uncompressed gradients and says so
    psgd = plan_file("gpt3-1.3b", gpus=64, tp=1, pp=1, micro_batch=1, global_batch=128, seq_len=2048,
                     grad_compression="powersgd")  # PowerSGD: whole replicas, ZeRO-0; 1.3B of them fit
    for to in ("megatron", "torchtitan", "deepspeed"):
        out = export_plan(psgd, to)
        assert "grad_compression powersgd -> none" in out, to
    # DeepSpeed reduces in bf16 (communication_data_type); Megatron-LM has no compressed reduction
    bf16 = plan_file("gpt3-1.3b", gpus=64, tp=1, pp=1, micro_batch=1, global_batch=128, seq_len=2048, zero=1,
                     grad_compression="bf16")
    assert '"communication_data_type": "bf16"' in export_plan(bf16, "deepspeed")
    assert "grad_compression bf16 -> none" in export_plan(bf16, "megatron")


def test_search_only_limits_that_exclude_powersgd_layouts_are_refused():
    from perfmodel.search.ranking import search

    with pytest.raises(InputError, match="--only zero=1,2 with grad_compression = powersgd.*needs zero=0"):
        search(MODEL, "dgx-b200", 64, 512, 4096, grad_compression="powersgd", space={"zero": [1, 2]})
