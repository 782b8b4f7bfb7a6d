"""Serving's inputs and outputs: the serving stack, plan and estimate, engine settings, workload, speculative decoding, prefill pools and serving plan files.

- `files`: Serving plan files and their measurements: what `perfmodel validate --sweep cpu-infer` (and `perfmodel infer
- `prefill_pool`: A serving plan's replica layouts, the decode replicas' and a disaggregated plan's prefill pool's
- `schema`: Serving (inference) inputs and outputs: the serving stack's profile, the serving layout and the estimate.
- `settings`: The engine settings a serving plan overrides for one run, and its redundant experts.
- `speculative`: Speculative decoding's schema (`SpeculativeConfig`, a ServePlan field), the draft it runs as a one-layer model
- `workload`: How requests reach a serving deployment, as serving benchmarks send them (the input of

It imports only the lower stages (`perfmodel.errors`, `perfmodel.types`, `perfmodel.files`) and `perfmodel.spec`.
"""
