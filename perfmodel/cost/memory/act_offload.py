"""Activations held in host memory between a layer's forward and its backward, per scheme (spec.plan.offload_rules):
what leaves the device's activations, what the device still holds of them, and what the host holds (bytes per
device, one pipeline stage). The copies' time is cost.memory.offload's.

- JAX's names policy (Plan.recompute_offloaded): the device keeps only the tensors not offloaded
  (`cost.compute.operator_table.kept_bytes` already leaves them out) and the next layer's as they come back.
- Megatron-Core layer-level offloading (Plan.activation_offload_layers = N; Transformer Engine cpu_offload.py
  DefaultOffloadSynchronizer at NVIDIA/TransformerEngine e7c550c, the commit Megatron-Bridge 067f987 pins): every
  tensor the first N layers save for their backward (Parameters and tensors under 256k elements excepted,
  OffloadableLayerState._check_if_offload, l.454-475) is copied to pinned host memory; layer i's device copy is
  released before layer L - N + i's forward and reloaded before layer L - 1 - N + i's backward
  (_init_offload_synchronization_dicts, l.602-626), so the layers' saved activations peak at (L - N) layers' on the
  device ("peak memory usage of saving activations is (num_layers - num_offloaded_layers) * T", l.612-614), the
  layer in flight included, and the host holds N layers'. Megatron-Core runs it at pp = 1, one micro-batch at a time.
- Megatron-Core fine-grained offloading (Plan.offload_modules; megatron/core/pipeline_parallel/
  fine_grained_activation_offload.py at NVIDIA/Megatron-LM 2a75ac1): each named submodule's saved tensors (of 1M
  elements or more, l.986-1000) go to host memory in every layer of every micro-batch in flight; the device keeps
  one layer's of them as margin (the last group of each name is not offloaded, post_warmup_callback l.577-596) and
  one layer's being reloaded ahead of its backward (on_group_start_backward -> bulk_reload, l.1192-1202).
"""

from __future__ import annotations

import numpy as np

from ...spec.model.config import ModelConfig
from ..compute.kernels import saved_input_bytes
from ..layouts import Layouts
from ..compute.moe import moe_share, routed_copies

# offload_modules -> the layer operators whose kept tensors (`kept_bytes`) the module's offload group holds. In
# Megatron-Core's Transformer Engine layer spec linear_qkv is the norm fused with the GEMM (megatron/core/models/gpt/
# gpt_layer_specs.py:145 at 2a75ac1, backend.column_parallel_layer_norm_linear): its group saves the input norm's
# input and output as well
MODULE_OPS = {"attn_norm": ("norm1",), "qkv_linear": ("norm1", "qkv"), "core_attn": ("attention",),
              "attn_proj": ("out_proj",), "mlp_norm": ("norm2",)}


def module_ops(modules) -> tuple[str, ...]:
    """The dense layer operators whose kept tensors `modules` (Plan.offload_modules) offload."""
    return tuple(sorted({op for m in modules or () for op in MODULE_OPS.get(m, ())}))


def moe_offloaded_bytes(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Bytes a mean layer's routed experts offload per micro-batch under offload_modules (as `moe_kept_bytes` counts
    them): expert_fc1 the grouped fc1's saved input (saved_input_bytes x h per routed copy), moe_act the
    activation's input (2 g fe/etp per copy: fc1's output, gate and up where gated), fused_group_mlp both and fc2's
    input (saved_input_bytes x fe/etp); times `moe_share`. 0 for a dense model or none of them."""
    mods = set(lay.offload_modules or ())
    if model.moe is None or not mods & {"expert_fc1", "moe_act", "fused_group_mlp"}:
        return 0.0 * lay.tp
    m, b, g = model.moe, saved_input_bytes(lay), (2 if model.gated else 1)
    fe = m.expert_ffn_hidden / lay.etp
    fused = "fused_group_mlp" in mods
    per_copy = (fused or "expert_fc1" in mods) * b * model.hidden + (fused or "moe_act" in mods) * 2 * g * fe \
        + fused * b * fe
    return routed_copies(model, lay) * per_copy * moe_share(model)


def host_activations(lay: Layouts, layers, chunks, kept, offloaded) -> tuple:
    """(bytes off the device's activations, bytes the device still holds for them beside its activations, bytes in
    host memory) of stages of `layers` layers with `chunks` micro-batch chunks in flight (`kept_scale` x vpp);
    `kept`: what a layer keeps per micro-batch (`layer_activation_bytes`, read for layer-level offloading),
    `offloaded`: what a layer offloads per micro-batch under the names policy or offload_modules
    (`layer_offloaded_bytes`). The schemes as the module docstring."""
    layers = np.asarray(layers, float)
    waiting = layers * chunks / lay.vpp  # layer micro-batches whose backward is yet to run
    on = layers > 0
    if lay.activation_offload_layers:
        n = np.minimum(lay.activation_offload_layers, np.maximum(layers / lay.vpp - 1, 0))
        moved = n * kept * chunks
        return moved, 0.0 * moved, moved
    if lay.offload_modules:
        moved = waiting * offloaded
        return moved, np.minimum(2 * offloaded, moved) * on, moved
    return 0.0 * waiting, on * offloaded, waiting * offloaded
