"""The whole training run of one plan, from one step's estimate (`perfmodel forecast`, docs/forecast.md).

- `forecast`: steps, wall-clock days, device-hours and dollars, checkpoints, interruptions, goodput.
- `energy`: each device's power, the host's and the facility's share, MWh and emissions.
- `reliability`: time between interruptions, the checkpoint interval that minimises wall time, goodput.

It may import every stage below it (perfmodel.layers), never torch; `search` reads it to rank layouts by whole-run
objectives.
"""
