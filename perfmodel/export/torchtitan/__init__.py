"""torchtitan exports: the config a named torchtitan release reads.

- `config`: the plan as that release's config, and the settings it cannot express.
- `toml`: torchtitan 0.2.2's TOML job config.
- `python`: torchtitan 0.3.0's Python config module.
- `model`: the model family and flavor nearest a plan's model, and what the family cannot follow.
- `nearest`: the nearest plan a torchtitan version runs.

It may import what export's writers may: `spec` and the ground (perfmodel.layers).
"""
