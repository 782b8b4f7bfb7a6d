"""`perfmodel calibrate --from-trace`: a hardware spec calibrated from a profiler trace of the user's own step.

- `reader`: Kineto chrome-trace JSON, one file per rank, as torch.profiler and the frameworks write it.
- `summary`: what a trace measured: the step, the device busy or waiting, kernel classes, collectives, GEMM rates.
- `device`: the base system a GPU trace calibrates.
- `job`: the job a trace ran (a plan file or a framework's config), and what its GEMMs calibrate.
- `gemm`: the GEMM efficiency from kernel names and the plan's FLOPs, without recorded shapes.
- `comms`: the collectives in a trace, with their bytes and group sizes.
- `overlap`: how much of a collective beside the backward hid behind it.
- `host`: the host's seconds per call kind, from a CPU trace.
- `from_trace`: the command's work: read, measure, fit as the microbenchmarks are fitted, write the spec.

It may import what `calibrate` may: every stage below it (perfmodel.layers).
"""
