"""Serving's inputs and outputs: engines, plans, workloads and estimates (hardware_specs/serving/, docs/inference.md).

- `schema`: a serving engine's profile and its releases (`ServingStack`), a serving layout (`ServePlan`), the estimate.
- `settings`: the engine settings a plan overrides for one run, and its redundant experts.
- `prefill_pool`: the replicas' layouts: decode, and a disaggregated plan's prefill pool.
- `speculative`: speculative decoding: the draft model and its acceptance.
- `workload`: how requests arrive, and the latencies a simulation reports.
- `traces`: request traces (Mooncake, Azure, BurstGPT) read into arrival times and lengths.
- `files`: serving plan files, and what the executor measures of them.

It may import what `spec` may: `errors`, `types`, `files` (perfmodel.layers).
"""
