"""A plan file as one release of a training framework's own configuration (`perfmodel export`, docs/plans.md).

- `targets`: the frameworks, their versions, and the writer of each.
- `megatron`: Megatron-LM: a pretrain_gpt.py command line, its MoE arguments, its versions.
- `torchtitan`: torchtitan: a TOML job config or a Python config module, its model families.
- `deepspeed`: DeepSpeed: a config JSON.
- `maxtext`: MaxText: a YAML of overrides and the device mesh.
- `plan_facts`: what every writer says of a plan file: summary, prediction, shape, launch, placements.
- `nearest`: a plan a release cannot run changed to the nearest one it can, and re-predicted.
- `checks`: each release's own configuration code run on an export (`--check`).

Its writers may import only `errors`, `types`, `files` and `spec`: a plan file is all they see. `nearest` and
`checks` may import every stage below it, to re-predict (perfmodel.layers).
"""
