"""Megatron-LM configs in: launch scripts, argument lists, the model its arguments train, offload and fp8 settings, and its key table.

- `keys`: Megatron-LM's arguments as `perfmodel import --from megatron` reads them: the defaults of those the model and the
- `launch`: A Megatron-LM launch script as `perfmodel import --from megatron` reads it (as data, never run): the command that
- `model`: The model a Megatron-LM argument list trains: its shape arguments (dense, mixture-of-experts, latent attention,
- `offload`: Megatron-Core's activation offloading and FP8 parameters as Megatron-LM's arguments and Megatron-Bridge's
- `reader`: Megatron-LM configs in (`perfmodel import --from megatron`): a launch script (`torchrun ... pretrain_gpt.py

It imports only `perfmodel.spec` and the rest of `perfmodel.ingest`.
"""
