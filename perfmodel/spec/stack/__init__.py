"""Software stacks: what a training framework does that the hardware does not say, per profile and per release, and which stack a runs table's framework cell names.

- `frameworks`: Which software stack a runs table's `framework` cell names (spec.stack.profile's profiles, or a release line).
- `profile`: Software stacks: what a training framework does that the hardware spec does not say.
- `release`: Release lines of a stack: the defaults one release of a framework runs a plan with.

It imports only the lower stages (`perfmodel.errors`, `perfmodel.types`, `perfmodel.files`) and `perfmodel.spec`.
"""
