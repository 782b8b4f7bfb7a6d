"""Megatron-Bridge configs in: recipe modules read as data, base recipes, override layers, perf configs and every key's fate.

- `bases`: Megatron-Bridge's base recipes, for a config that starts from one the user does not pass (`cfg =
- `calls`: The Megatron-Bridge functions a recipe calls that perfmodel reads without following them (`perfmodel import --from
- `fates`: Every key of a Megatron-Bridge config's final `section.key -> (value, where)` given its fate in the ledger
- `formats`: Megatron-Bridge's year-old perf-config formats, each read as data into the `section.key -> (value, where)` a recipe
- `keys`: Megatron-Bridge's vocabulary as `perfmodel import --from bridge` reads it: the models its recipes name (HF ids and
- `layers`: The override layers of a Megatron-Bridge run (`perfmodel import --from bridge`), each read as data: a YAML file
- `names`: What a Megatron-Bridge config's name states: the GPU count, the GPU kind and the compute dtype, as Bridge's own
- `objects`: The objects a Megatron-Bridge recipe read as data is made of (perfmodel.ingest.bridge.recipe follows the recipe;
- `peft`: A Megatron-Bridge recipe's parameter-efficient fine-tuning (`cfg.peft`) read as Plan.lora (spec.plan.finetune).
- `reader`: Megatron-Bridge configs in (`perfmodel import --from bridge`): a recipe module (src/megatron/bridge/recipes/**, a
- `recipe`: A Megatron-Bridge recipe function read as data: its statements followed over the syntax tree (never run) to the
- `workload`: Megatron-Bridge's WorkloadBaseConfig tables (scripts/performance/configs/<model>/<model>_workload_base_configs.py,

It imports only `perfmodel.spec` and the rest of `perfmodel.ingest`.
"""
