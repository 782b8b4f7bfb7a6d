"""Memory per device: parameters and optimizer states under ZeRO, activations kept for the backward, peaks, offload to host memory, and whether a plan fits.

- `act_offload`: Activations held in host memory between a layer's forward and its backward, per scheme (spec.plan.offload_rules):
- `chunks`: Micro-batches in flight where a pipeline rank's virtual chunks hold unequal layers: what interleaved 1F1B keeps on
- `fit`: Whether a plan's memory fits: the device's room for the reserved view (cost.memory.footprint), widened by the band the
- `footprint`: Memory per device under Megatron-LM's placements: parameters and their states, and the activations a layer,
- `frozen`: What a LoRA fine-tune (`Plan.lora`, spec.plan.finetune) changes in a step's memory and communication: the adapters
- `offload`: Host memory's copies: offloaded activations, and the optimizer state kept there between steps
- `peak`: What a stage holds at its peak: the step's phases whose transient live sets never coexist, and the whole weight
- `stack_kept`: What a stack's own model code keeps for the backward beyond the fused kernels' set (`cost.compute.operator_table.
- `states`: What a device holds of the parameters it trains: weights, gradients and optimizer state under ZeRO (Rajbhandari

It imports `perfmodel.spec` and the rest of `perfmodel.cost`, never torch.
"""
