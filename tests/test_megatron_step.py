"""Megatron-LM's optimizer-step passes and dense embedding gradient (cost.memory.states, cost.comm.sharded,
cost.compute.embedding_grad), checked against bytes counted by hand from Megatron-LM @23e00ed0's source."""

import pytest

import perfmodel as pm
from perfmodel.cost.compute.embedding_grad import dense_embedding_grad_bytes, embedding_ops
from perfmodel.cost.compute.kernels import Device
from perfmodel.cost.comm.sharded import optimizer_seconds
from perfmodel.cost.memory.states import grad_buffer_bytes, master_copy_bytes
from perfmodel.spec.plan.layout import resolve
from perfmodel.spec.stack.profile import load_stack

H100_BW = 3.35e12 * 0.88  # dgx-h100's HBM at its memory efficiency (tests/test_compute.py)
ALL = ["zero_grad_buffer", "check_grads", "prescale_grads", "master_copy"]


def device(stack, dp=8, zero=1):
    model, system = pm.load_model("gpt2-124m"), pm.load_hardware("dgx-h100")
    plan = resolve(pm.Plan(gpus=dp, micro_batch=1, global_batch=dp, seq_len=1024, zero=zero, stack=stack),
                   model, system)
    return Device(model, system, plan)


def test_step_pass_bytes_by_hand():
    # fp32 grad buffer: zero_ writes 4, the NaN check's norm reads 4, grad_data *= 1/dp reads and writes 8
    assert grad_buffer_bytes(4.0, ALL, True) == 16.0
    assert grad_buffer_bytes(4.0, ALL, False) == 8.0  # dp x cp == 1: the scaling factor is 1, no pass
    assert grad_buffer_bytes(4.0, ["zero_grad_buffer", "prescale_grads"], True) == 12.0
    assert grad_buffer_bytes(4.0, [], True) == 0.0
    assert master_copy_bytes("fp32") == 4.0 and master_copy_bytes("bf16") == 0.0
    # zeros(vocab, hidden) in bf16 (2), the add reads it (2) and reads + writes the fp32 main grad (8)
    assert dense_embedding_grad_bytes(4.0) == 12.0


def test_stacks_that_run_megatrons_step():
    assert load_stack("megatron-core").step_passes == ALL
    assert load_stack("nemo").step_passes == ["zero_grad_buffer", "prescale_grads", "master_copy"]
    assert load_stack("megatron-core").dense_embedding_grad and load_stack("nemo").dense_embedding_grad
    for other in ("torchtitan", "deepspeed", "maxtext"):
        assert load_stack(other).step_passes == [] and not load_stack(other).dense_embedding_grad


def test_megatron_optimizer_seconds_for_one_plan():
    # 1e9 local parameters, ZeRO-1 over dp 8: the fused Adam over the 1.25e8 shard at 34 B (26 + 2 x 4), the
    # master's re-read for the copy (4 B) over the shard, and 16 B over all 1e9 of the fp32 gradient buffer
    dev = device("megatron-core")
    adam = 1.25e8 * 34 / dev.opt_bw
    extra = (1.25e8 * 4 + 1e9 * 16) / H100_BW
    assert float(optimizer_seconds(dev, 1e9, 1, 8, 4.0)) == pytest.approx(adam + extra)
    # the same plan on DeepSpeed's stack: the fused Adam alone
    assert float(optimizer_seconds(device("deepspeed"), 1e9, 1, 8, 4.0)) == pytest.approx(adam)
    # dp 1: no prescale (8 B fewer per parameter), no sharding
    one = device("megatron-core", dp=1, zero=0)
    assert float(optimizer_seconds(one, 1e9, 0, 1, 4.0)) == pytest.approx(1e9 * 34 / one.opt_bw + 1e9 * 12 / H100_BW)


def test_dense_embedding_grad_op():
    table = 50304 * 768.0
    ops = embedding_ops(device("megatron-core"), 1024 * 768.0, 1, table)
    assert [o.name for o in ops] == ["embedding", "embedding_dense_grad"]
    assert float(ops[1].bwd_s) == pytest.approx(table * 12 / H100_BW) and float(ops[1].fwd_s) == 0.0
    assert [o.name for o in embedding_ops(device("deepspeed"), 1024 * 768.0, 1, table)] == ["embedding"]
