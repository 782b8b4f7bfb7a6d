"""Pipeline parallelism: layers per stage, micro-batches in flight, step time and bubble per schedule.

- `schedules`: 1F1B, interleaved and GPipe: in-flight micro-batches, step time, bubble, the blocks of a timeline.
- `stages`: the stages as the step compares them: the units each holds, how busy the pipeline keeps its ranks.

It may import what `cost` may: `spec` and the ground (perfmodel.layers), never torch.
"""
