"""One module per parallelism, each applied to the executor's model over a named DeviceMesh (torchtitan's apply_* style): tensor, pipeline, context, expert, data, activation checkpointing.

- `checkpointing`: Activation checkpointing (torchtitan's apply_ac) of the plan's recompute policy, with torch's own APIs
- `context`: Context parallelism: the sequence split over the `cp` mesh axis, keys and values all-gathered for attention.
- `data`: Data parallelism and ZeRO over the flattened (dp, cp) mesh (context-parallel ranks hold the same weights, so
- `expert`: Expert parallelism: the routed experts of every MoE layer split over the `ep` ranks, tokens sent to their
- `pipeline`: Pipeline parallelism with `torch.distributed.pipelining` (torchtitan's pipeline_llm, manual stages).
- `tensor`: Tensor (and sequence) parallelism from a plan file's per-operator placements, on the `tp` mesh axis.

It imports only `perfmodel.spec` and the rest of `perfmodel.execute`.
"""
