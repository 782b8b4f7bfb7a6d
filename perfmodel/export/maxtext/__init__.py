"""MaxText exports: a plan as a YAML of overrides on MaxText's base.yml, and its device mesh.

- `config`: the YAML MaxText's trainer reads, and the plan settings it cannot express.
- `mesh`: MaxText's device mesh and batch for a plan, and the nearest plan MaxText runs.

It may import what export's writers may: `spec` and the ground (perfmodel.layers).
"""
