"""One module per parallelism, each applied to the executor's model over a named DeviceMesh, as torchtitan's `apply_*`
functions are.

- `tensor`: tensor and sequence parallelism from the plan file's per-operator placements.
- `pipeline`: pipeline parallelism with torch.distributed.pipelining.
- `context`: context parallelism: the sequence split, keys and values all-gathered.
- `expert`: expert parallelism: routed experts split over ranks, tokens sent by all-to-all.
- `data`: data parallelism and ZeRO (FSDP2) over the flattened (dp, cp) mesh.
- `checkpointing`: activation checkpointing of the plan's recompute policy.

It may import what `execute` may: `spec` and the ground (perfmodel.layers).
"""
