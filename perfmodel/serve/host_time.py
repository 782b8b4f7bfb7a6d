"""Host time of a serving step: the stack's per-step overhead, and where the spec measured them (`perfmodel
calibrate`) the host's launches of the step's operators and collectives, eager dispatch the device does not hide
(the executor's case; the engines' CUDA graphs and schedulers are their `step_overhead_s`)."""

from __future__ import annotations

from ..cost.launch_queue import host_seconds
from ..spec.hardware import System
from ..spec.model import ModelConfig
from ..spec.operators import LAYER_OPS
from ..spec.serving import ServePlan, ServingStack


def measured_serving(system: System, stack: ServingStack):
    """The spec's measured serving host costs for this stack (`HostCosts.serving`, perfmodel calibrate), or None."""
    costs = system.host_costs
    return costs.serving if costs is not None and costs.stack == stack.name else None


# Operators the host launches per layer and outside the layers in one forward (the plan file's operators,
# spec.plan_file.LAYER_OPS: norms, qkv, attention, projections, activation, residuals; then embedding, final norm,
# LM head and the sampling), and collective calls (two all-reduces per layer, the embedding's and the logits')
MODEL_OPS = ("embedding", "final_norm", "lm_head", "sample")


def host_s(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, decode: float,
           decode_keys: float = 0.0) -> float:
    """Host seconds of one step whose `decode` decoding sequences attend `decode_keys` keys in all
    where the spec measured per-launch costs for this stack (`HostCosts.serving`, else `HostCosts`: perfmodel
    calibrate; eager dispatch the device does not hide, the executor's case): launches x kernel_s + collective
    calls x collective_s (`cost.launch_queue.host_seconds`) + the decode attention's (sequence, local head) pairs x
    attention_s + their keys x attention_key_s (`launches`); 0 otherwise (the engines' CUDA graphs and
    schedulers: their `step_overhead_s`)."""
    costs = system.host_costs
    if costs is None or costs.stack != stack.name:
        return 0.0
    kernels, calls, pairs, keys = launches(model, plan, stack, decode, decode_keys)
    s = measured_serving(system, stack)
    if s is None:  # training's costs: no attention terms
        return float(host_seconds(costs, kernels, calls))
    return float(host_seconds(s, kernels, calls)) + s.attention_s * pairs + s.attention_key_s * keys


def launches(model: ModelConfig, plan: ServePlan, stack: ServingStack, decode: float = 0.0,
             decode_keys: float = 0.0) -> tuple[int, int, float, float]:
    """(operator launches, collective calls, decode attention's (sequence, local head) pairs, the keys those pairs
    read) of one forward step through all layers on a tp rank (the executor serves no pipeline) with `decode` decoding sequences attending `decode_keys` keys together
    (MODEL_OPS). A CPU attention kernel works through a call one (sequence, head) block at a time, each with its
    own set-up, and one query's pass over its keys is a vector loop, not the blocked GEMMs its FLOPs are priced at
    (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp); a prefill's attention is priced by its FLOPs from the
    measured attention table."""
    calls = 0 if plan.tp == 1 else 2 * model.n_layers + 1 + stack.vocab_parallel_embedding
    heads = model.n_layers * model.n_heads / plan.tp
    return model.n_layers * len(LAYER_OPS) + len(MODEL_OPS), calls, heads * decode, heads * decode_keys


def overhead_part(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, decode: float,
                  context: float) -> float:
    """The stack's per-step host seconds and the measured host costs of `decode` sequences per micro-batch."""
    return stack.step_overhead_s + host_s(model, system, plan, stack, decode, decode * context)
