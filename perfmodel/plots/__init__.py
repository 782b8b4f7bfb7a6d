"""Figures of every answer (`--plot`), drawn with matplotlib on a headless backend from the pydantic results.

- `canvas`: what every figure shares: the backend, the path check, an atomic PNG write.
- `prediction`: `perfmodel predict --plot`: time breakdown, memory against capacity, pipeline schedule.
- `breakdown`: where a step's time and a device's memory go, plans side by side.
- `gantt`: a plan's pipeline schedule as a timeline.
- `search_results`: a search's step times, Pareto front, heat map and best plans.
- `upgrades`: `perfmodel whatif --plot`: systems side by side, and what each upgrade buys.
- `goodput`: `perfmodel forecast --plot`: goodput against the checkpoint interval and the device count.
- `serving_figure`: `perfmodel infer --plot`: memory, and a step's and a prefill's time by part.
- `sweep`: a sweep's front, and each axis's sensitivity.
- `measured_steps`: `perfmodel execute --plot`: every measured step against the prediction.
- `calibration_fit`: `perfmodel calibrate --plot`: every microbenchmark against the fitted formula.
- `validation_scatter`: predicted against measured step time and memory.
- `serving_validation`: predicted against measured prefill and decode time.

It may import every stage below it (perfmodel.layers); `validate` and the CLI draw with it.
"""
