"""The `perfmodel` command: parse the flags, call the Python API, format the answer. No modelling here (docs/cli.md).

- `main`: the entry point: the subcommands (`COMMANDS`) and what a failure prints.
- `commands`: one module per subcommand, each with `add_parser` and `run`.
- `plan_flags`: the flags that give one plan, shared by predict, forecast and the planner page.
- `plan_input`: those flags, a plan file, a framework config or the built-in example turned into the model, system
  and resolved plan a command prices, in one place; `save_plan` writes it back as a plan file.
- `argtypes`: argparse value types; a bad flag or value ends as one line naming it.
- `serving_commands`: `infer --server-cmd / --bench-cmd / --bench-file`: the commands' values fill the flags not given.
- `report`: the text tables results and catalogue entries print as.
- `docgen`: the schema tables of docs/hardware.md, plans.md and sweep.md, rendered from the schemas.

It may import every stage below it (perfmodel.layers); only the planner page (`app`) sits above it. `perfmodel
--help` and `perfmodel search` load neither torch, matplotlib nor pandas: heavy imports stay inside a command's
`run`.
"""
