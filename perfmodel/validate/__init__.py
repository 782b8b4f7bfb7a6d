"""Predicted against measured: `runner` runs plans or a built-in sweep (`sweeps`) through the executor, predicts
them with a (calibrated) spec and compares step time and memory (`metrics`: rows, MAPE, Spearman, the printed
table) and checkpoint saves (`checkpoint_checks`). It is the end of the flow: it imports `perfmodel.calibrate`,
`perfmodel.execute`, `perfmodel.search`, `perfmodel.cost`, `perfmodel.plots` and `perfmodel.spec`.
"""
