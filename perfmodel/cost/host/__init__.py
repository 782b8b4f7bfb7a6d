"""The host's share of a step: the launch queue the device waits on, and an optimizer state updated in host memory.

- `host_update`: An optimizer state kept in host memory and updated there (Plan.optimizer_update host / host_overlapped):
- `host_update_time`: The host update's seconds per step (Plan.optimizer_update host / host_overlapped): its copies over the host link
- `launch_queue`: The host that launches the kernels: what it spends per step, and how much of that the device sees.

It imports `perfmodel.spec` and the rest of `perfmodel.cost`, never torch.
"""
