"""Run plan files for real and measure them: `run_plans` checks and launches one torchrun (`launch`,
`processes`: process control, a failed rank in one line), each rank runs `worker` -> `train`, which builds the
`transformer` on the meta device and applies the plan in small composable steps over a named DeviceMesh
(`pipeline_parallel`, `tensor_parallel`, `context_parallel`, `expert_parallel`, `data_parallel`,
`checkpointing`), on synthetic or local `data`; `memory_probe` and `host` measure, `manifest` and `resume` save
and restore, `faults` injects the failures the tests need. It imports `perfmodel.spec` only (plan files in,
measurements out), never the cost model or the search; torch is imported inside the workers.
"""
