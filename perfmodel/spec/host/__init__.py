"""The host that launches the kernels: its CPU and seconds per call kind, the executor's host costs a spec carries, and a stack's calls per step.

- `cpu`: The host that launches a system's kernels: its CPU, and what one call of each kind costs its launching thread.
- `overheads`: Host costs of the executor's stack, as a hardware spec carries them (`System.host_costs`): seconds per operator
- `profile`: A software stack's host profile (`Stack.host`): the calls its host thread makes on the device's behalf, counted by

It imports only the lower stages (`perfmodel.errors`, `perfmodel.types`, `perfmodel.files`) and `perfmodel.spec`.
"""
