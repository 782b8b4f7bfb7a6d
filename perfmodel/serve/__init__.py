"""Serving (inference) priced on the training side's hardware model: one cost model, shared (`perfmodel infer`,
docs/inference.md).

- `kv_cache`: a replica's GPU memory: weights, the KV cache, activations, runtime.
- `step_time`: one serving step's seconds: GEMMs, attention, all-reduces, a speculative draft.
- `power_mix`: the clock a served step runs at under the power limit, from the mix of work it sustains.
- `gemm_quant`: a served fp8 GEMM's activation cast.
- `moe_kernels`: routed experts from the part's measured fused-MoE table.
- `wide_ep`: MoE layers across expert-parallel ranks: dispatch, combine, imbalance.
- `host_time`: the request path's time on the system's host.
- `prefix_cache`: an engine's prefix cache over a workload's shared system prompts or a trace's block hashes: hits
  and evictions.
- `kv_offload`: vLLM's KV offload to host memory: the stores a step issues, and their host work.
- `batching`: continuous batching in steady state, and the estimate (`infer`).
- `disaggregated`: prefill and decode in separate pools, the KV cache sent between them.
- `layout_search`: serving layouts ranked under latency limits; the fewest GPUs for a request rate.
- `replica_engine`: one serving engine run request by request: queue, admission, steps.
- `simulate`: requests sent as a benchmark client sends them, through the replicas' engines.
- `simulate_disaggregated`: the same for a disaggregated deployment.

Its inputs are `spec.serving`. It may import every stage below it (perfmodel.layers), never torch.
"""

from .batching import infer

__all__ = ["infer"]
