"""MaxText configs in (`perfmodel import --from maxtext`): base.yml, a model's YAML and a recipe's overrides.

- `reader`: the entry: the layered config into a model, a mesh and a plan.
- `files`: config files as layers of keys: YAML, key=value words of a command or manifest, Python recipes.
- `model`: the decoder block's shape keys as a `ModelConfig`, checked against the preset.
- `axes`: the device mesh and batch as plan fields.
- `settings`: precision, remat policy and MoE keys as plan fields.
- `keys`: MaxText's vocabulary: base.yml defaults, model names, TPU slices, the keys not priced.

It may import what `ingest` may: `spec` and the ground (perfmodel.layers).
"""
