"""What a LoRA fine-tune (`Plan.lora`, spec.plan.finetune) changes in a step's memory and communication: the adapters
that train, the frozen base's storage, and the linears that keep no input for their backward."""

from __future__ import annotations

import numpy as np

from ...spec.plan.finetune import BASE_WEIGHT_BYTES, trainable_layer_params
from ...spec.model.config import ModelConfig
from ..layouts import Layouts
from ..compute.operator_table import operators

LAYER_LINEARS = ("qkv", "out_proj", "mlp_in", "mlp_out")


def adapter_params(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Adapter parameters of one layer per device (`spec.plan.finetune.trainable_layer_params` over the layer's linears,
    at each one's share of the layers); the embedding and head train none."""
    table = operators(model)
    gemms = {n: (table[n].gemm[1], table[n].gemm[3], table[n].share) for n in LAYER_LINEARS}
    return trainable_layer_params(lay.lora, gemms, lay.tp) + 0.0


def frozen_weight_bytes(params, lay, shard) -> np.ndarray:
    """Bytes per device of `params` frozen weights, stored as `LoRA.base_weights` (bf16 2 B, fp8 1 B), sharded
    over `shard` under ZeRO-3; no gradient or optimizer state."""
    return params * BASE_WEIGHT_BYTES[lay.lora.base_weights] / np.where(np.asarray(lay.zero) >= 3, shard, 1)


def unkept_linears(lay: Layouts) -> tuple[str, ...]:
    """The layer linears that keep no input for the backward: frozen and not adapted, their backward computes the
    input gradient only, from the weight (Transformer Engine's Linear saves its input only where the weight
    requires a gradient: backward_needs_input; an adapted linear's adapter keeps the same input)."""
    if lay.lora is None:
        return ()
    return tuple(n for n in LAYER_LINEARS if n not in lay.lora.targets)
