"""MaxText exports: the YAML config and the device mesh.

- `config`: MaxText: the plan as a MaxText config, a YAML of overrides on MaxText's base.yml (`base_config: base.yml`), read
- `mesh`: MaxText's device mesh for a plan, and the plan settings MaxText 0.2.5 cannot run (`nearest_plan`).

It imports only `perfmodel.spec` and the rest of `perfmodel.export`.
"""
