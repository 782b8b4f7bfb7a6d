"""Predicted against measured: plans run for real by the executor, predicted with a (calibrated) spec, and compared
(`perfmodel validate`).

- `runner`: training plans or a built-in sweep run, predicted and compared.
- `sweeps`: the built-in sweeps: models, process counts, named plans.
- `serving_sweep`: the same for serving plans (`--sweep cpu-infer`).
- `trace_check`: one plan traced, a spec calibrated from its trace, the sweep scored on it.
- `checkpoint_checks`: checkpoint saves against the forecast's checkpoint model.
- `common`: what both validations share: output checks, the spec the predictions use.
- `metrics`: a validation's rows and printed table; `scores`: signed error, MAPE, Spearman.

It may import every stage below it (perfmodel.layers).
"""
