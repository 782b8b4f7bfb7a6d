"""The one cost model of a training step: what each kernel, collective and byte of memory costs a plan on a system.

Every formula is one function with its source and units in its docstring (docs/model.md, docs/memory.md). The same
code prices one plan (`estimate`) and the ~10^5 plans of a search at once as numpy columns (`layouts`), so both
give the same number.

- `compute`: FLOPs, one kernel's time, every operator's kernels, the units (layer, embedding, head) they make.
- `comm`: collectives over the network tiers, the stage mesh, a sharded operator's collectives, compression.
- `memory`: per device: weights and optimizer states under ZeRO, activations, peaks, offload, whether it fits.
- `pipeline`: stages, schedules, bubbles and micro-batches in flight.
- `host`: the host thread that launches the kernels, and an optimizer updated in host memory.
- `pase`: PaSE's operator graph and cost tables (the search over them is `search.pase`).
- `power`: the clock a step sustains under the board power limit, and each phase's power (docs/power.md).
- `layouts`: many plans of one job as columns: what the cost functions read.
- `step`: one training step of many plans at once, one module per stage: units and the slowest stage,
  data-parallel collectives and the optimizer, the host, the breakdown, the power clock, a run fit.
- `estimate`: one plan's step as an `Estimate`, with the rows that trace each number.

It may import only `errors`, `types`, `files` and `spec` (perfmodel.layers), never torch.
"""
