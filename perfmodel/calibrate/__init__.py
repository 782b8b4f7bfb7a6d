"""Calibration back into a hardware spec: microbenchmarks of this machine (`machine`: `suite` says what to
measure, `bench` measures it under torchrun, `fit` fits the spec's efficiencies with the cost model's own
formulas, `calibrated_spec` builds the System, `raw` is the measurement file, `host_costs` the executor's
per-launch costs), or a user's own measured runs (`from_runs`, with training `logs` read as runs). It imports
`perfmodel.execute` (to launch benchmarks and executor probes), `perfmodel.published`, `perfmodel.search`,
`perfmodel.cost` and `perfmodel.spec`.
"""
