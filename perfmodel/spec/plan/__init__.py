"""One run's parallel layout and training settings (`Plan`), the rules it obeys, its recompute, offload, fine-tune and fp8 choices, and plan files.

- `file`: Plan files: what `perfmodel search --output` and `perfmodel predict --save-plan` write, and what the executor
- `finetune`: Frozen-weight fine-tuning: LoRA adapters on a frozen base model (`Plan.lora`).
- `fp8_recipes`: fp8 scaling recipes (Transformer Engine's): how a plan at precision = fp8 scales its GEMM operands, which decides
- `layout`: The parallel layout and training settings of one run, and its validation against a model and a system.
- `megatron_split`: Megatron-LM's pipeline split: the layers of each virtual chunk under its accounting of the embedding and the loss
- `moe_rules`: The rules a mixture-of-experts plan obeys, beside `spec.plan.layout.resolve`: what a stack's release recipe fills in
- `offload_rules`: Megatron-Core's activation offloading to host memory, as a plan states it (the cost is cost.memory.act_offload's):
- `recompute`: Activation recomputation policies as frameworks name them: the plan's `recompute` mode and its details

It imports only the lower stages (`perfmodel.errors`, `perfmodel.types`, `perfmodel.files`) and `perfmodel.spec`.
"""
