"""DeepSpeed configs in (`perfmodel import --from deepspeed`): a config JSON and the launch script that names the model.

- `reader`: the entry: the JSON and the script into a model and a plan (the inverse of `export.deepspeed`).
- `keys`: what each JSON key becomes, or why it is not priced.
- `batch`: micro-batch and global batch as DeepSpeed derives them.
- `launch`: the launch script: the training command, the config it passes, the device count.
- `chat`: DeepSpeed-Chat's training flags, which build its config.

It may import what `ingest` may: `spec` and the ground (perfmodel.layers).
"""
