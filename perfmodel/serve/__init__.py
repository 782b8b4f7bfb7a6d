"""Serving (inference) on the training side's hardware model: memory and the KV cache (`kv_cache`), the seconds of
one step (`step_time`; its host time, `host_time`), continuous batching in steady state and the estimate
(`batching.infer`), and the layouts of a serving job ranked under latency limits (`layout_search`). It imports
`perfmodel.spec` (the serving plan and stack profiles, `spec.serving.schema`) and `perfmodel.cost` (the kernels, tables
and collectives training is priced with: one cost model, shared), nothing downstream."""

from .batching import infer

__all__ = ["infer"]
