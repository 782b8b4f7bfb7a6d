"""The host's share of a step: the thread that launches the kernels, and an optimizer state updated in host memory.

- `launch_queue`: what the launching host spends per step, and how much of it the device waits on.
- `host_update`: an optimizer state kept and updated in host memory (ZeRO-Offload, SuperOffload).
- `host_update_time`: that update's seconds per step: copies over the host link and CPU Adam, overlapped.

It may import what `cost` may: `spec` and the ground (perfmodel.layers), never torch.
"""
