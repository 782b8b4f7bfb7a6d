"""PaSE's inputs: the operator graph of a step and every configuration of every operator priced.

- `graph`: The operator graph of a training step: one vertex per operator (every layer's own), one edge per tensor passed
- `tables`: PaSE's cost tables: every configuration of every operator on one plan's stage mesh, priced by the functions

It imports `perfmodel.spec` and the rest of `perfmodel.cost`, never torch.
"""
