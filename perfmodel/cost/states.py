"""What a device holds of the parameters it trains: weights, gradients and optimizer state under ZeRO (Rajbhandari
et al. 2020, Sec. 3.1), and where the optimizer state lives when it is kept in host memory between steps. Bytes per
device; the activations and transients beside them are cost.memory's."""

from __future__ import annotations

import numpy as np

from ..spec.plan import Plan
from ..spec.stack import load_stack
from .compression import GRAD_BYTES, error_feedback_bytes
from .frozen import frozen_weight_bytes
from .layouts import Layouts

WEIGHT_BYTES = 2.0
OPTIMIZER_BYTES = 12.0  # fp32 master + Adam m + v
BF16_MOMENT_BYTES = 4.0  # Adam m + v in bf16, no master (Stack.bf16_state)


def adam_step_bytes(grad_bytes: float, bf16_state: bool = False) -> float:
    """HBM bytes an Adam step moves per parameter it updates: read the gradient, momentum, variance and fp32
    master (grad_bytes + 12), write momentum, variance, master and the bf16 weight (12 + 2), and read the gradient
    once more for the global norm (grad_bytes): 26 + 2 * grad_bytes (a fused multi-tensor Adam, as apex / torch
    `fused=True`). With `Stack.bf16_state` (bf16 weight and moments, no master): read 6 and write 6, 12 + 2 *
    grad_bytes."""
    return (12.0 if bf16_state else 26.0) + 2.0 * grad_bytes


def state_bytes(params, plan: Plan | Layouts, shard=None, trainable=None) -> dict[str, object]:
    """Weights, gradients and optimizer bytes of `params` per device under the plan's ZeRO stage (Megatron-LM and
    DeepSpeed: bf16 weights + fp32 master, m, v in the optimizer; FSDP stacks, `Stack.fsdp_master_weights`:
    the fp32 sharded parameter is the master, 4 + 8; XLA stacks, `Stack.fp32_parameters`: so at every stage), sharded over its zero_shard = dp * cp / dp_replicate ranks
    (the ranks that hold replicas of the same weights, over hybrid sharding's replicas; `shard`: another group,
    the edp ranks of a MoE model's routed experts); `Stack.bf16_state`: bf16 weights and moments, no master, 2 + 4.
    A LoRA fine-tune's: those of its `trainable` adapters, and the frozen `params` as weights alone
    (`cost.finetune.frozen_weight_bytes`)."""
    shard = plan.zero_shard if shard is None else shard
    if trainable is not None:
        states = state_bytes(trainable, plan, shard)
        return dict(states, weights=states["weights"] + frozen_weight_bytes(params, plan, shard))
    zero, g = np.asarray(plan.zero), GRAD_BYTES[plan.grad_dtype]
    # FSDP's sharded parameter, or an XLA stack's parameter at any stage, is the fp32 master itself (no bf16 copy
    # beside it): 4 B of weights, 8 of Adam
    stack = load_stack(plan.stack)
    master = ((zero >= 3) & stack.fsdp_master_weights) | stack.fp32_parameters
    weight_b, optim_b = np.where(master, 4.0, WEIGHT_BYTES), np.where(master, OPTIMIZER_BYTES - 4.0, OPTIMIZER_BYTES)
    if stack.bf16_state:  # no master: bf16 weights and bf16 moments
        weight_b, optim_b = WEIGHT_BYTES, BF16_MOMENT_BYTES
    return {
        "weights": params * weight_b / np.where(zero >= 3, shard, 1),
        "gradients": params * g / np.where(zero >= 2, shard, 1)
        + error_feedback_bytes(params, g, plan.grad_compression, shard),
        "optimizer": params * optim_b / np.where(zero >= 1, shard, 1),
    }


def device_state_bytes(states: dict, plan: Plan | Layouts) -> np.ndarray:
    """Bytes of `states` (`state_bytes`) the device holds through the forward and backward: the weights, the
    gradients and the optimizer state, but where it stays in host memory (Plan.optimizer_offload; the update's
    peak is `host_optimizer`'s)."""
    keep = 1.0 - np.asarray(plan.optimizer_offload, float)
    return states["weights"] + states["gradients"] + states["optimizer"] * keep


def host_optimizer(states: dict, activations, transient, narrow, host, on) -> tuple[dict, object, object]:
    """The states, transients and host bytes where the optimizer state stays in host memory between steps
    (Plan.optimizer_offload, `on` per plan; MaxText optimizer_memory_host_offload: the optimizer's shardings in
    pinned_host memory, device_put to the device before apply_gradients and back in the step's output,
    maxtext_utils.py get_abstract_state and train.py train_step). It is off the device through the forward and
    backward and on it for the update, once the activations are freed: the device's peak is the larger of the
    backward's (weights + gradients + activations + transients) and the update's (weights + gradients +
    optimizer + the cached fp8/fp4 weight copies `narrow`, which outlive the update), charged as transient =
    max(transient, optimizer + narrow - activations); the host holds the state itself. Bytes per device."""
    opt = states["optimizer"]
    out = dict(states, optimizer=np.where(on, 0.0, opt))
    update = opt + narrow - activations
    return out, np.where(on, np.maximum(transient, update), transient), host + np.where(on, opt, 0.0)
