"""This host's seconds per call kind and per launch, measured, as a spec carries them.

- `calls`: This host's seconds per call, by the kind of call a training or serving stack makes (`spec.hardware.system.HostCalls`).
- `costs`: Host costs of the executor's stack: seconds per operator launch and per collective call.
- `measured`: This machine's host as a spec carries it (spec.host.cpu.HostCPU), from what calibrate.host.calls measured: every

It imports the stages below `perfmodel.calibrate` (docs/architecture.md).
"""
