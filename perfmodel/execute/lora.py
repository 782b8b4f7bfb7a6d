"""LoRA fine-tuning on the executor's model (Plan.lora; Hu et al. 2021, "LoRA", Sec. 4.1): every weight of the
base model frozen, and a low-rank update B A trained beside each targeted linear, as `spec.plan.finetune` prices it:
one adapter on the fused q, k, v projection and one on the output projection (modules "attention"), and on the
dense MLP's fused [w1; w3] and w2 as well ("all"), of r (n + k) parameters each (`spec.plan.finetune.adapter_params`).
Routed experts are never adapted; the executor runs adapters without tensor parallelism (execute.run_plans)."""

from __future__ import annotations

from torch import nn

from ..spec.plan.finetune import LoRA
from ..spec.model.config import ModelConfig
from .transformer import MLP, Adapter


def apply_lora(stage: nn.Module, cfg: ModelConfig, lora: LoRA) -> None:
    """Add `lora`'s adapters to the blocks of `stage` (built on the meta device, before its weights exist) and
    freeze every other parameter."""
    for block in stage.layers.values():
        att = block.attention
        att.qkv_lora = Adapter(cfg.hidden, cfg.q_dim + 2 * cfg.kv_dim, lora.rank)
        att.wo_lora = Adapter(cfg.q_dim, cfg.hidden, lora.rank)
        if lora.modules == "all" and isinstance(block.mlp, MLP):
            ffn = block.mlp.w1.out_features
            block.mlp.w13_lora = Adapter(cfg.hidden, ffn * (2 if cfg.gated else 1), lora.rank)
            block.mlp.w2_lora = Adapter(ffn, cfg.hidden, lora.rank)
    for name, p in stage.named_parameters():
        p.requires_grad_("_lora." in name)
