"""Megatron-LM exports: the pretrain_gpt.py script, its MoE arguments and the versions it writes for.

- `moe`: Megatron-LM's mixture-of-experts, latent-attention and multi-token-prediction arguments for a plan file
- `script`: Megatron-LM: a `pretrain_gpt.py` command line launched with torchrun, then the plan settings it cannot express.
- `versions`: Which Megatron-LM versions perfmodel writes for, what each can express, and the nearest plan it can.

It imports only `perfmodel.spec` and the rest of `perfmodel.export`.
"""
