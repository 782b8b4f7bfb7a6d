"""Software stacks: what a training framework does that the hardware does not say (hardware_specs/stacks/,
docs/stacks.md).

- `profile`: a stack's profile (`Stack`) and the catalogue of them (`STACKS`).
- `release`: release lines: the defaults and MoE recipes one release of a framework runs a plan with.
- `frameworks`: which stack a runs table's framework cell names.

It may import what `spec` may: `errors`, `types`, `files` (perfmodel.layers).
"""
