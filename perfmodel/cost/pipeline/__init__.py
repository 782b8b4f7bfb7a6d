"""Pipeline parallelism: stages, schedules, bubbles and micro-batches in flight.

- `schedules`: Pipeline parallelism: layers per stage, micro-batches in flight, step time and bubble per schedule.
- `stages`: Pipeline stages as the step model compares them: which units each holds, how busy the pipeline keeps its

It imports `perfmodel.spec` and the rest of `perfmodel.cost`, never torch.
"""
