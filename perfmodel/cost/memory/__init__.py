"""Memory per device: what a plan keeps, what it holds at its peak, and whether it fits (docs/memory.md).

- `states`: weights, gradients and optimizer state under ZeRO, on the device or in host memory.
- `footprint`: parameters, states and the activations each unit keeps, under Megatron-LM's placements.
- `chunks`: micro-batches in flight where virtual pipeline chunks hold unequal layers.
- `stack_kept`: what a stack's own model code keeps beyond the fused kernels' set.
- `peak`: what a stage holds at its peak, phase by phase.
- `frozen`: what a LoRA fine-tune changes in memory and communication.
- `act_offload`: activations held in host memory between a layer's forward and backward.
- `offload`: the copies to and from host memory.
- `fit`: whether a plan fits: the device's room, widened by the measured band, and the host's memory.

It may import what `cost` may: `spec` and the ground (perfmodel.layers), never torch.
"""
