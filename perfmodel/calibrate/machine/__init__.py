"""`perfmodel calibrate` of this machine: the suite of microbenchmarks, the timings, the fit through the cost model's formulas and the calibrated spec with its measured tables.

- `bench`: Microbenchmarks of the machine at hand: GEMMs, causal attention, elementwise kernels, collectives.
- `calibrated_spec`: Build the calibrated System: a template holding the reference peaks, then the fitted efficiencies on it.
- `calibration`: `perfmodel calibrate`: microbenchmark this machine and write a hardware spec fitted to it.
- `fit`: Fit a hardware spec's efficiency parameters to microbenchmark timings, through the cost model's own formulas.
- `measured_tables`: The measured tables a calibration writes beside its spec, in the catalogue's formats (hardware_specs/kernels/),
- `raw`: Schemas of what a calibration measures and fits: the raw file `SPEC.raw.json` written beside the spec.
- `serving_costs`: Host costs and sustained fraction of the executor's serving loop (execute.inference), measured as
- `suite`: What calibration measures: the points of one run (`Suite`, `suite`) and the layer shapes they come from.

It imports the stages below `perfmodel.calibrate` (docs/architecture.md).
"""
