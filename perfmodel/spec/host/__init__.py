"""The host that launches the kernels, as a spec describes it (hardware_specs/hosts/).

- `cpu`: the host's CPU, and the seconds one call of each kind costs its launching thread (`HostCPU`).
- `profile`: a stack's host profile: the calls its host thread makes per operator, layer, collective and step.
- `overheads`: the executor's host costs, as a spec carries them.

It may import what `spec` may: `errors`, `types`, `files` (perfmodel.layers).
"""
