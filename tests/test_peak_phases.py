"""The head phase and the layer phase of a training step are never live together (cost.memory.peak): on a stack whose step
is one XLA program (MaxText) the peak holds the larger, with the ZeRO-3 copies each phase gathers; on an eager torch
stack the two are still summed. Bytes worked out by hand for Llama 2 7B (h 4096, f 11008, V 32000, 32 layers,
untied) on 8 TPU v5p devices, one sequence of 4096 per device, ZeRO-3 over 8, full recompute."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodel import Plan
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.memory.footprint import (
    head_activation_bytes,
    largest_module_params,
    layer_activation_bytes,
    loss_temporary_bytes,
    stage_memory,
    unit_params,
)
from perfmodel.cost.memory.peak import phase_live, zero_copy_bytes
from perfmodel.spec.plan.layout import resolve

H, F, V, T = 4096, 11008, 32000, 4096


def test_the_phase_with_more_bytes_is_the_one_held():
    act, tmp = phase_live((np.array([10.0, 3.0]), np.array([2.0, 0.0])), (np.array([7.0, 7.0]), np.array([1.0, 1.0])),
                          (0.0, np.array([0.5, 9.0])))
    # 12 > 8 > 0.5; 3 < 8 < 9: the head phase, then the third (all transient)
    assert act.tolist() == [10.0, 0.0] and tmp.tolist() == [2.0, 9.0]


def lay(model, system, stack, **kw):
    return Layouts.from_plan(resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=T, zero=3, recompute="full",
                                          stack=stack, **kw), model, system))


def test_a_per_tensor_gather_is_followed_by_a_layer_tensor_not_by_itself(llama2_7b, tpu_v5p):
    one = lay(llama2_7b, tpu_v5p, "maxtext")
    head, mod = V * H, H * F  # the LM head; MaxText's largest layer tensor (wi_0, h x f)
    stage = 7e9
    got = zero_copy_bytes(one, np.array([stage]), np.array([head]), module=head, following=mod)
    # the head gathered (bf16) with the next layer tensor in flight; its unsharded gradient takes the head's buffer
    assert float(got[0]) == (head + mod) * 2
    # a layer's: two of its largest tensor (its tensors used together, the next in flight) and that one's fp32 gradient
    assert float(zero_copy_bytes(one, np.array([stage]), np.array([head]), module=mod)[0]) == 2 * mod * 2 + mod * 4


@pytest.mark.parametrize("stack", ["maxtext", "megatron-core"])
def test_xla_holds_one_phase_and_eager_torch_the_sum(llama2_7b, tpu_v5p, stack):
    one = lay(llama2_7b, tpu_v5p, stack)
    mem, _ = stage_memory(llama2_7b, tpu_v5p, one)
    head = float(head_activation_bytes(llama2_7b, one)[0])
    assert head == T * (2 * H + 2 * H + 4 * V)  # final-norm and head inputs, the fp32 logits
    loss = float(loss_temporary_bytes(llama2_7b, one)[0])
    kept, full = float(layer_activation_bytes(llama2_7b, one)[0]), float(layer_activation_bytes(llama2_7b, one, "none")[0])
    assert kept == 2 * T * H  # full recompute keeps each layer's input
    working = full - kept  # the layer whose backward runs, rebuilt (n = 1)
    layers_kept = 32 * kept  # 1F1B without pipeline: one micro-batch in flight
    if stack == "maxtext":
        assert loss == 0.0  # MaxText's loss holds no more than the kept fp32 logits (stack.loss_bytes_per_logit 4)
        p = unit_params(llama2_7b, one)
        mod = float(largest_module_params(llama2_7b, one)[0])
        assert mod == H * F
        g = (float(p["head"][0]) + mod) * 2  # the head gathered bf16 + the next tensor (its gradient in its place)
        head_phase, layer_phase = head + g, working + 2 * mod * 2 + mod * 4
        assert head_phase > layer_phase  # 0.55 + 0.33 GiB against 0.47 + 0.34 GiB
        assert float(mem["activations"][0]) == pytest.approx(layers_kept + head)
        assert float(mem["transient"][0]) == pytest.approx(g)
    else:  # both phases summed; the transient holds the loss's temporaries and ZeRO-3's copies besides
        assert float(mem["activations"][0]) == pytest.approx(layers_kept + working + head)
        assert float(mem["transient"][0]) >= loss
