"""FLOP counts per optimizer step as published sources count them, to turn a source's TFLOP/s or MFU back into
seconds per step (published.small_runs.measured_of)."""

from __future__ import annotations

from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.plan.layout import Plan


def step_flops(convention: str, model: ModelConfig, plan: Plan) -> float:
    """FLOPs of one optimizer step as the source counts them (B sequences of s tokens, l layers, width h, vocab V):
    narayanan: Narayanan et al. 2021 eq. 3, with the recomputed forward: 96 B s l h^2 (1 + s/6h + V/16lh);
    megatron: Megatron-LM training.py num_floating_point_operations (model FLOPs, 3 passes):
      12 B s l h^2 ((1 + kv/heads + s/h) q/h + f/h * (3/2 if gated) + V/2lh), q = heads x head_dim;
    torchtitan: B s (6 N + 12 l q s), N every parameter (its 2024 tables: Llama 3 8B at seq 8192, 2904 tokens/s
      per A100, is its 56.8% MFU)."""
    B, s, l, h, V = plan.global_batch, plan.seq_len, model.n_layers, model.hidden, model.vocab
    q = model.n_heads * model.head_dim
    if convention == "narayanan":
        return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    if convention == "megatron":
        gated = 1.5 if model.mlp == "swiglu" else 1.0
        return 12 * B * s * l * h * h * ((1 + model.n_kv_heads / model.n_heads + s / h) * q / h
                                         + model.ffn_hidden / h * gated + V / (2 * l * h))
    return B * s * (6 * model.n_params() + 12 * l * q * s)
