"""Megatron-Bridge configs in (`perfmodel import --from bridge`): recipe modules read as data, never run.

- `reader`: the entry: a recipe, a perf recipe or a workload table, with its override layers.
- `recipe`: a recipe function followed over its syntax tree to the config it returns.
- `objects`: the objects such a recipe is made of.
- `calls`: the Bridge functions a recipe calls that are read without being followed.
- `bases`: the base recipes a config starts from when the user does not pass them (`bases.json`, cited).
- `formats`: Bridge's older perf-config formats.
- `workload`: Bridge's WorkloadBaseConfig tables.
- `layers`: override layers: a YAML config file and `section.key=value` words.
- `names`: what a config's name states: GPU count, GPU kind, compute dtype.
- `keys`: Bridge's vocabulary: the models its recipes name, its precision recipes.
- `fates`: every key's fate in the ledger.
- `peft`: a recipe's LoRA fine-tuning as `Plan.lora`.

It may import what `ingest` may: `spec` and the ground (perfmodel.layers).
"""
