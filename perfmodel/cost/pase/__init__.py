"""PaSE's inputs: the operator graph of a training step, and every configuration of every operator priced.

- `graph`: one vertex per operator, one edge per tensor passed between two.
- `tables`: every configuration on one plan's stage mesh, priced by the functions `estimate` uses.

The search over them is `search.pase`. It may import what `cost` may: `spec` and the ground (perfmodel.layers),
never torch.
"""
