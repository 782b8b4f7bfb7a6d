"""`perfmodel calibrate --from-trace`: profiler traces read, the job and device they ran on, GEMMs, collectives, overlap and host time measured in them.

- `comms`: Collectives in a profiler trace (calibrate.trace.reader's RankTrace): NCCL/RCCL kernels with their
- `device`: The base system a GPU trace calibrates (issue 73): the catalogue's system of the GPU the trace ran on (by its
- `from_trace`: `perfmodel calibrate --from-trace PATH...`: a hardware spec calibrated from a profiler trace of one step of the user's
- `gemm`: The traced job's GEMM efficiency from kernel names and its plan (issue 73): a trace recorded without shapes
- `host`: The host's seconds per call kind, measured in a CPU trace of the stack's own step (issue 64).
- `job`: The job a GPU trace ran, and what its GEMMs calibrate (issue 73): `--plan PLAN.json`, or a framework's config
- `overlap`: comm_overlap from a CPU trace's own collectives (issue 64): how much of a collective that ran beside the backward
- `reader`: Reading profiler traces: Kineto chrome-trace JSON (plain or gzipped), one file per rank, as torch.profiler,
- `summary`: What a profiler trace measured (`perfmodel calibrate --from-trace PATH --format json`): the step, how busy the device

It imports the stages below `perfmodel.calibrate` (docs/architecture.md).
"""
