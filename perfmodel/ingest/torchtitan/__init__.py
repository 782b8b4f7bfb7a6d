"""torchtitan configs in (`perfmodel import --from torchtitan`): TOML job configs and Python config registries.

- `reader`: the entry: a TOML job config or a config registry module, read as data, into a model and a plan.
- `keys`: what each key becomes: the model, parallelism, training, activation checkpointing, compile.
- `switches`: precision converters (float8, MX, NVFP4), stored dtypes and the other switches.
- `spellings`: older TOMLs' keys read under today's names.
- `flavors`: torchtitan's model families and flavors as perfmodel models.

It may import what `ingest` may: `spec` and the ground (perfmodel.layers).
"""
