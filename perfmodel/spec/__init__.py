"""What a user describes, as pydantic schemas and the catalogues behind them; every other stage reads it.

- `model`: the model (`ModelConfig`): presets, HuggingFace config.json, the operators of a step.
- `hardware`: systems, accelerators, network tiers, measured kernel tables (the catalogue in hardware_specs/).
- `host`: the host CPU that launches the kernels, and a stack's calls per step.
- `stack`: software-stack profiles and their release lines.
- `plan`: a training run's parallel layout and settings (`Plan`), its rules, plan files.
- `serving`: serving engines, plans, workloads and estimates.
- `result`: what the cost model returns (`Estimate`).
- `measurement`: what the executor measures and validation reads.
- `example`: the built-in example `perfmodel predict` runs with no flags.

It may import only `errors`, `types` and `files` (perfmodel.layers), never torch.
"""
