"""`perfmodel calibrate --from-runs`: a user's measured runs fitted into a spec, and the intervals around a prediction.

- `from_runs`: a runs table (CSV) or a folder of logs fitted into a spec.
- `table`: the runs table's rows (the published-runs columns) as cases: model, system, plan, measured step.
- `logs`: training logs read as rows of the runs table.
- `intervals`: prediction intervals that hold on runs they were not built from.
- `memory_band`: where measured memory peaks lie around the estimate, per stack and memory view.

It may import what `calibrate` may: every stage below it (perfmodel.layers).
"""
