"""Communication: collectives over the network tiers a group spans, the stage mesh, the collectives inside a sharded operator, gradient compression.

- `collectives`: Collective and point-to-point communication time on the network tiers a process group spans.
- `compression`: Data-parallel gradient compression (`Plan.grad_compression`): what the gradient collectives carry and what the
- `mesh`: The stage mesh (dp, cp, tp) and what moving tensors over it costs: collectives over groups of its axes, and the
- `sharded`: What an operator under one placement costs beyond its kernels: the collectives inside it, the redistribution of

It imports `perfmodel.spec` and the rest of `perfmodel.cost`, never torch.
"""
