"""Megatron-LM exports: a `pretrain_gpt.py` command line launched with torchrun.

- `script`: the command line, and the plan settings it cannot express.
- `moe`: the mixture-of-experts, latent-attention and multi-token-prediction arguments.
- `versions`: the Megatron-LM versions written for, what each can express, the nearest plan each runs.

It may import what export's writers may: `spec` and the ground (perfmodel.layers).
"""
