"""One training run's plan: its parallel layout and settings (`Plan`), the rules it obeys, and plan files.

- `layout`: `Plan`, and its validation against a model and a system (`resolve`).
- `moe_rules`: the rules a mixture-of-experts plan obeys, and a release recipe's defaults.
- `megatron_split`: Megatron-LM's split of the layers into pipeline chunks.
- `recompute`: activation recomputation policies as frameworks name them.
- `offload_rules`: Megatron-Core's activation offloading as a plan states it.
- `fp8_recipes`: fp8 scaling recipes: tensorwise, blockwise, MXFP8.
- `finetune`: LoRA adapters on a frozen base model.
- `file`: plan files: what search and predict write, what the executor and export read.

It may import what `spec` may: `errors`, `types`, `files` (perfmodel.layers).
"""
