"""One module per `perfmodel` subcommand, each with `add_parser` and its `run`.

- `calibrate`: The `perfmodel calibrate` subcommand: flags, and the table printed after a calibration.
- `catalogue`: `perfmodel hardware list|show NAME|schema|hosts [HOST]`, `perfmodel models list|show NAME` and `perfmodel stacks
- `execute`: `perfmodel execute`: run plan files with torch.distributed under torchrun and measure them
- `export`: `perfmodel export PLAN --to TARGET [--version V] [--check]`: a plan file as one framework version's
- `forecast`: `perfmodel forecast`: the whole run of a plan (perfmodel.run.forecast) from predict's flags or a plan file.
- `import_config`: `perfmodel import FILE... --from FRAMEWORK [--hardware H] [--gpus N] [--name CONFIG] [-o PLAN.json] [--explain]`:
- `infer`: `perfmodel infer`: serve a model on a layout (TTFT, TPOT, throughput, memory and the KV cache), or with --search
- `predict`: `perfmodel predict`: one training step of a plan from the plan flags, a plan file, or (no flags) the built-in
- `search`: `perfmodel search`: rank every layout of a job (`search.ranking.search`); write the best as a plan file.
- `sweep`: `perfmodel sweep SWEEP.yaml`: a design-space sweep (every point runs the real search of every workload) on this
- `validate`: `perfmodel validate`: run plans (or a built-in sweep) for real, predict them, compare (`validate.runner`).
- `whatif`: `perfmodel whatif`: one job's best plan and step time on several systems, and which single upgrade of one

It imports any stage below `perfmodel.cli`.
"""
