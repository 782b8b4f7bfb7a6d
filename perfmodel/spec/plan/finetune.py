"""Frozen-weight fine-tuning: LoRA adapters on a frozen base model (`Plan.lora`).

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", Sec. 4.1) freezes every pretrained
weight W (n out x k in) and trains a low-rank update B A beside it: A (r x k) and B (n x r), h = W x + B A x.
What that changes in a training step, as `perfmodel.cost` prices it:

- the backward of a frozen GEMM computes the input gradient only (dX = dY W^T), not dW = dY^T X: one of its two
  backward GEMMs (cost.compute.kernels.gemm_op, `weight_grad`);
- each adapted linear runs two thin GEMMs more (x A^T, then (x A^T) B^T), with their full backward;
- gradients, their data-parallel reduction and the optimizer's state and update cover the adapters only
  (`trainable_layer_params`); the frozen base is held as weights alone, in `base_weights` (MLPerf's Llama 2 70B
  LoRA keeps it in fp8: Transformer Engine fp8_params), and ZeRO-3 still gathers it for the forward and for the
  backward's input gradients.

The activations kept for the backward are priced as for full training: every adapted linear's input is kept for
A's gradient, and the frozen ones' inputs are mostly kept by the norm, activation and attention backwards anyway.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...errors import InputError
from ...types import Count, Schema

# The linear operators (spec.model.operators) each `LoRA.modules` choice adapts. "attention" is the MLPerf Llama 2 70B
# LoRA reference's choice (NeMo target_modules ['attention']: linear_qkv and linear_proj); "all" adds the dense
# MLP's two GEMMs (Hu et al. adapt W_q, W_v; QLoRA, Dettmers et al. 2023, Sec. 4, every linear layer).
TARGETS = {"attention": ("qkv", "out_proj"), "all": ("qkv", "out_proj", "mlp_in", "mlp_out")}
BASE_WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0}


class LoRA(Schema):
    """Low-rank adapters trained on a frozen base model (Hu et al. 2021)."""

    rank: Count = Field(description="adapter rank r: A is r x in, B is out x r (MLPerf Llama 2 70B LoRA: 16)")
    modules: Literal["attention", "all"] = Field(
        "attention", description="linears adapted: attention = the qkv and output projections; all = those and "
                                 "the dense MLP's two GEMMs (routed experts are never adapted)")
    base_weights: Literal["bf16", "fp8"] = Field(
        "bf16", description="storage of the frozen base weights: bf16, or fp8 (Transformer Engine fp8_params, "
                            "MLPerf's Llama 2 70B LoRA)")

    @property
    def targets(self) -> tuple[str, ...]:
        return TARGETS[self.modules]


def adapter_params(rank, n, k):
    """Parameters of one linear's adapters: A (r x k) and B (n x r), r (n + k) (Hu et al. 2021, Sec. 4.1)."""
    return rank * (n + k)


def trainable_layer_params(lora: LoRA, gemms: dict[str, tuple[float, float, float]], tp=1):
    """Adapter parameters of one layer per device: `adapter_params` over the linears `lora` targets, from `gemms`
    {operator: (out features, in features, share of the layers that run it)} / tp. Megatron-Core's LoRA splits the
    adapter factor beside the split dimension and replicates the r-wide other one; counting both split keeps this
    within r * min(n, k) of it, under 1% of a layer's weights at r = 16."""
    return sum(adapter_params(lora.rank, n, k) * share for name, (n, k, share) in gemms.items()
               if name in lora.targets) / tp


def check_lora(p: dict, model) -> None:
    """Refuse adapters wider than the layers they adapt (r > hidden makes B A no low-rank update) and PowerSGD with
    them (its hook compresses whole-weight gradients)."""
    lora = p.get("lora")
    if lora is None:
        return
    rank = lora["rank"] if isinstance(lora, dict) else lora.rank
    if rank > model.hidden:
        raise InputError(f"lora.rank = {rank} exceeds {model.name}'s hidden size {model.hidden}: an adapter's rank is "
                         f"below its layer's width; valid lora.rank: 1..{model.hidden} (LoRA's usual 4..256)")
    if p.get("grad_compression") == "powersgd":
        raise InputError("grad_compression = powersgd with lora: PowerSGD compresses whole-weight gradients; valid "
                         "with lora: grad_compression = none or bf16")
