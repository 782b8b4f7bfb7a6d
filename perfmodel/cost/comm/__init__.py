"""Communication: what moving tensors between devices costs a step.

- `collectives`: collective and point-to-point time on the network tiers a process group spans.
- `mesh`: the stage mesh (dp, cp, tp): collectives over its axes, a tensor moved from one placement to another.
- `sharded`: what an operator under one placement costs beyond its kernels: collectives, redistributions, weights.
- `compression`: data-parallel gradient compression: what the collectives carry, its kernels and memory.

It may import what `cost` may: `spec` and the ground (perfmodel.layers), never torch.
"""
