"""This host's costs as a spec carries them: a stack's seconds per call kind, and the executor's per launch.

- `calls`: this host's seconds per call, by the kind of call a training or serving stack makes.
- `costs`: the executor's host costs: seconds per operator launch and per collective call.
- `measured`: this machine's host as a spec's `HostCPU`, every probed kind cited to its command.

It may import what `calibrate` may: every stage below it (perfmodel.layers).
"""
