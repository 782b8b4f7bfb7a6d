"""One module per `perfmodel` subcommand, each with `add_parser(subparsers, name, help)` and `run(args) -> str`.

- `predict`: one training step of a plan (flags, a plan file, a framework's config, or the built-in example).
- `search`: every layout of a job ranked; the best written as a plan file.
- `whatif`: one job across systems, and the single upgrade that buys most.
- `forecast`: the whole run of a plan: days, dollars, energy, failures.
- `infer`: serving: TTFT, TPOT, throughput, memory; layouts ranked; requests simulated.
- `sweep`: a design-space sweep run or reported, or its file's schema printed.
- `import_config`: `perfmodel import`: a framework's config read, every key accounted for.
- `export`: a plan file as a framework release's config, optionally checked by that release.
- `execute`: plan files run under torchrun and measured.
- `validate`: plans run for real, predicted and compared.
- `calibrate`: `perfmodel calibrate`'s flags, and the table it prints.
- `catalogue`: `perfmodel hardware`, `models` and `stacks`: the catalogues listed and shown.

It may import what `cli` may: every stage below it (perfmodel.layers); heavy imports stay inside `run`.
"""
