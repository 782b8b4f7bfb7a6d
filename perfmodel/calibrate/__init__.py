"""Measurements back into a hardware spec: microbenchmarks of this machine, a user's measured runs and logs, or a
profiler trace of their own step (`perfmodel calibrate`, docs/hardware.md, docs/stacks.md).

Each way ends in a spec of the catalogue's schema whose efficiencies are fitted through the cost model's own
formulas, so that the work measured, predicted again on that spec, takes what was measured.

- `machine`: this machine: the microbenchmark suite under torchrun, the fit, the calibrated spec.
- `host`: this host's seconds per call kind and per launch, as a spec carries them.
- `runs`: `--from-runs`: runs tables and training logs fitted, prediction intervals, memory bands.
- `trace`: `--from-trace`: a profiler trace read, its GEMMs, collectives, overlap and host time fitted.

It may import every stage below it (perfmodel.layers): `execute` to launch benchmarks, `cost` and `search` for the
formulas it fits, `ingest` for a traced job's config.
"""
