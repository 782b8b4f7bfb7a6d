"""Megatron-LM configs in (`perfmodel import --from megatron`): launch scripts, argument lists, functional-test YAMLs.

- `reader`: the entry: the arguments into a model and a plan.
- `launch`: the launch script: the command that runs pretrain_*.py, the launcher's device count.
- `model`: the model the arguments train, with Megatron-LM's defaults.
- `offload`: activation offloading and fp8 parameters (shared with Megatron-Bridge's reader).
- `keys`: the arguments' defaults, and why each one the cost model does not use is not priced.

It may import what `ingest` may: `spec` and the ground (perfmodel.layers).
"""
