"""What a device holds of the parameters it trains: weights, gradients and optimizer state under ZeRO (Rajbhandari
et al. 2020, Sec. 3.1), and where the optimizer state lives when it is kept in host memory between steps. Bytes per
device; the activations and transients beside them are cost.memory.footprint's."""

from __future__ import annotations

import numpy as np

from ...spec.plan.layout import Plan, state_dtypes
from ...spec.stack.profile import load_stack
from ..comm.compression import GRAD_BYTES, error_feedback_bytes
from .frozen import frozen_weight_bytes
from ..host.host_update import host_update_states, host_updates
from ..layouts import Layouts

WEIGHT_BYTES = 2.0  # the bf16 working weights (Megatron-LM's Float16Module, FSDP's param_dtype bf16 gather)
OPTIMIZER_BYTES = 12.0  # fp32 master + Adam m + v (Rajbhandari et al. 2020, Sec. 3.1: K = 12)
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0}  # Plan.weight_dtype / moment_dtype -> bytes per element


def adam_step_bytes(grad_bytes: float, weight_dtype: str = "fp32", moment_dtype: str = "fp32") -> float:
    """HBM bytes an Adam step moves per parameter it updates (a fused multi-tensor Adam, as apex / torch
    `fused=True`): read the gradient (grad_bytes), the two moments (2 x `moment_dtype`) and the stored parameter
    (`weight_dtype`: the fp32 master, or the bf16 weight where there is none), write the moments and the parameter
    back, write the bf16 working copy where the parameter is an fp32 master (2), and read the gradient once more
    for the global norm (grad_bytes). fp32 / fp32: 26 + 2 * grad_bytes; bf16 / bf16 (`Stack.bf16_state`): 12 + 2 *
    grad_bytes."""
    w, m = DTYPE_BYTES[weight_dtype], 2.0 * DTYPE_BYTES[moment_dtype]
    return 2.0 * grad_bytes + 2.0 * (w + m) + (WEIGHT_BYTES if weight_dtype == "fp32" else 0.0)


MEGATRON = "NVIDIA/Megatron-LM@23e00ed0"  # the commit the step passes below are read at (core_r0.14.0)


def master_copy_bytes(weight_dtype: str) -> float:
    """HBM bytes per parameter of the updated shard that copying the fp32 master into the bf16 weights moves beyond
    `adam_step_bytes` (which holds its 2-byte write): the read of the master, 4 (a pass of its own after the Adam
    kernel: Megatron-LM's DistributedOptimizer._copy_main_params_to_model_params, `shard_model_param.data.copy_(
    shard_main_param)`, megatron/core/optimizer/distrib_optimizer.py:2147 at MEGATRON, called from
    optimizer.py:542 after `self.optimizer.step()`). 0 without an fp32 master."""
    return DTYPE_BYTES["fp32"] if weight_dtype == "fp32" else 0.0


def grad_buffer_bytes(grad_bytes: float, passes, prescaled) -> object:
    """HBM bytes per local parameter (the whole gradient buffer a device holds, not its ZeRO shard) of the passes
    Megatron-LM's DDP makes over its contiguous gradient buffer once a step (`Stack.step_passes`), at MEGATRON:
      zero_grad_buffer: `grad_data.zero_()` (param_and_grad_buffer.py:857, from distributed_data_parallel.py:627,
        which training.py:1201 calls before every step's forward): one write, grad_bytes;
      check_grads: `grad_data.norm(p=2)` of every bucket before its reduction (param_and_grad_buffer.py:183, from
        start_grad_sync :337 where check_for_nan_in_grad; training.py:927 sets it from
        --no-check-for-nan-in-loss-and-grad, on by default, arguments.py:1790): one read, grad_bytes;
      prescale_grads: `bucket.grad_data *= bucket.gradient_scaling_factor` (param_and_grad_buffer.py:346), the
        factor 1 / (dp x cp) for dense and expert buffers alike unless average_in_collective (off by default:
        distributed_data_parallel.py:370-371), so it runs where `prescaled` (dp x cp > 1): a read and a write,
        2 x grad_bytes.
    The clip (clip_grads.py:173, a scale of the shard's gradients only where the norm exceeds clip_grad) depends on
    the run's gradients and is not priced."""
    p = set(passes)
    fixed = grad_bytes * (("zero_grad_buffer" in p) + ("check_grads" in p))
    return fixed + np.where(prescaled, 2.0 * grad_bytes, 0.0) * ("prescale_grads" in p)


def dtypes_of(plan: Plan | Layouts) -> tuple[str, str]:
    """(weight_dtype, moment_dtype) of a plan: its own, or its stack's where it leaves them None
    (spec.plan.layout.state_dtypes)."""
    return state_dtypes(plan.stack, plan.weight_dtype, plan.moment_dtype)


def state_bytes(params, plan: Plan | Layouts, shard=None, trainable=None) -> dict[str, object]:
    """Weights, gradients and optimizer bytes of `params` per device under the plan's ZeRO stage, sharded over its
    zero_shard = dp * cp / dp_replicate ranks (the ranks that hold replicas of the same weights, over hybrid
    sharding's replicas; `shard`: another group, the edp ranks of a MoE model's routed experts). Per parameter
    (Rajbhandari et al. 2020, Sec. 3.1, with the dtypes as the plan stores them, `Plan.weight_dtype` /
    `moment_dtype`):
      weight_dtype fp32: an fp32 master exists. Where it is the parameter itself (FSDP's sharded parameter at ZeRO-3,
        `Stack.fsdp_master_weights`; an XLA stack's at every stage, `Stack.fp32_parameters`): 4 B of weights and no
        master in the optimizer; elsewhere (Megatron-LM, DeepSpeed) 2 B of bf16 weights and a 4 B master in the
        optimizer.
      weight_dtype bf16: 2 B of weights, no master (MaxText weight_dtype bfloat16, `Stack.bf16_state`).
      moments: Adam's m and v, 4 + 4 (fp32) or 2 + 2 (bf16), in the optimizer.
    The defaults give 2 + 12 (Megatron-LM, DeepSpeed), 4 + 8 (FSDP at ZeRO-3, XLA stacks), 2 + 4 (bf16_state).
    A LoRA fine-tune's: those of its `trainable` adapters, and the frozen `params` as weights alone
    (`cost.finetune.frozen_weight_bytes`)."""
    shard = plan.zero_shard if shard is None else shard
    if trainable is not None:
        states = state_bytes(trainable, plan, shard)
        return dict(states, weights=states["weights"] + frozen_weight_bytes(params, plan, shard))
    zero, g = np.asarray(plan.zero), GRAD_BYTES[plan.grad_dtype]
    weight_b, optim_b = per_param_bytes(plan)
    return {
        "weights": params * weight_b / np.where(zero >= 3, shard, 1),
        "gradients": params * g / np.where(zero >= 2, shard, 1)
        + error_feedback_bytes(params, g, plan.grad_compression, shard),
        "optimizer": params * optim_b / np.where(zero >= 1, shard, 1),
    }


def per_param_bytes(plan: Plan | Layouts) -> tuple[object, object]:
    """(weight bytes, optimizer bytes) per parameter, as `state_bytes` prices them (its docstring)."""
    weight_dtype, moment_dtype = dtypes_of(plan)
    stack = load_stack(plan.stack)
    if weight_dtype == "fp32":  # the master as the parameter (no bf16 copy beside it), or a master beside bf16 weights
        master = ((np.asarray(plan.zero) >= 3) & stack.fsdp_master_weights) | stack.fp32_parameters
        weight_b, master_b = np.where(master, DTYPE_BYTES["fp32"], WEIGHT_BYTES), np.where(master, 0.0, 4.0)
    else:
        weight_b, master_b = WEIGHT_BYTES, 0.0
    return weight_b, master_b + 2.0 * DTYPE_BYTES[moment_dtype]


def device_state_bytes(states: dict, plan: Plan | Layouts) -> np.ndarray:
    """Bytes of `states` (`state_bytes`) the device holds through the forward and backward: the weights, the
    gradients and the optimizer state, but where it stays in host memory (Plan.optimizer_offload; the update's
    peak is `host_optimizer`'s), and under a host update what cost.host.host_update leaves on the device (the reduce
    bucket is the step's, not a unit's: left out here)."""
    if host_updates(plan):
        device, _ = host_update_states(states, plan, per_param_bytes(plan)[1])
        return device["weights"] + device["optimizer"]
    keep = 1.0 - np.asarray(plan.optimizer_offload, float)
    return states["weights"] + states["gradients"] + states["optimizer"] * keep


def host_optimizer(states: dict, activations, transient, narrow, host, lay) -> tuple[dict, object, object]:
    """The states, transients and host bytes where the optimizer state stays in host memory between steps
    (Plan.optimizer_offload). Updated on the host (Plan.optimizer_update host / host_overlapped: DeepSpeed's CPU
    Adam), the device never holds the offloaded share and the host holds it with its gradients
    (cost.host.host_update.host_update_states). Updated on the device (MaxText optimizer_memory_host_offload: the optimizer's shardings in
    pinned_host memory, device_put to the device before apply_gradients and back in the step's output,
    maxtext_utils.py get_abstract_state and train.py train_step). It is off the device through the forward and
    backward and on it for the update, once the activations are freed: the device's peak is the larger of the
    backward's (weights + gradients + activations + transients) and the update's (weights + gradients +
    optimizer + the cached fp8/fp4 weight copies `narrow`, which outlive the update), charged as transient =
    max(transient, optimizer + narrow - activations); the host holds the state itself. Bytes per device."""
    if host_updates(lay):
        device, held = host_update_states(states, lay, per_param_bytes(lay)[1])
        return device, transient, host + held
    opt, on = states["optimizer"], lay.optimizer_offload
    out = dict(states, optimizer=np.where(on, 0.0, opt))
    update = opt + narrow - activations
    return out, np.where(on, np.maximum(transient, update), transient), host + np.where(on, opt, 0.0)
