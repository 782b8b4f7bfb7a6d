"""`perfmodel calibrate` of this machine: microbenchmarks timed, fitted through the cost model's formulas, and
written as a hardware spec with its measured tables.

- `calibration`: the command's work: run the suite, fit it, write the spec.
- `suite`: what to measure: the points of one run and the layer shapes they come from.
- `bench`: the microbenchmarks: GEMMs, causal attention, elementwise kernels, collectives.
- `fit`: the spec's efficiencies fitted to the timings through the cost model's formulas.
- `calibrated_spec`: the calibrated `System`: a template's peaks with the fitted efficiencies on it.
- `measured_tables`: the GEMM and collective tables written beside the spec, in the catalogue's formats.
- `raw`: the raw file (`SPEC.raw.json`) of what was measured and fitted.
- `serving_costs`: the executor's serving loop's host costs and sustained fraction.

It may import what `calibrate` may: every stage below it (perfmodel.layers).
"""
