"""A user's measured runs into a spec: runs tables and training logs, prediction intervals and memory bands.

- `from_runs`: Calibrate a spec from measured training runs: `perfmodel calibrate --from-runs RUNS.csv|LOGDIR`.
- `intervals`: Prediction intervals that hold on runs they were not built from: per stack and per regime, from the residuals of
- `logs`: Training logs -> rows of the published-runs CSV, so `calibrate --from-runs` fits logs and CSVs alike.
- `memory_band`: Where measured memory peaks lie around the estimate: per stack profile and memory view, the 0.1/0.9 quantiles of

It imports the stages below `perfmodel.calibrate` (docs/architecture.md).
"""
