"""Compute: model FLOPs, one kernel's time on a device, and every operator's kernels under a plan's placements.

- `flops`: model FLOPs: the one convention behind MFU and HFU.
- `kernel_time`: one kernel's time: GEMMs, fused attention, memory-bound kernels.
- `kernel_lookup`: kernel times read from measured tables, all shapes of a search at once.
- `kernels`: one operator's kernels on one device: FLOPs, bytes, seconds.
- `attention_kinds`: attention beside plain causal: sparse attention's indexer, MLA's latent, Gated DeltaNet.
- `grouped_gemm`: a device's local experts in one grouped GEMM.
- `moe`: a mixture-of-experts MLP: router, dispatch and combine, routed and shared experts.
- `moe_dense`: MaxText's dense MoE dispatch.
- `autocast`: torch.autocast around fp32 parameters: the casts, the fp32 residual stream.
- `embedding_grad`: the embedding's weight gradient as PyTorch's dense backward builds it.
- `remat_names`: JAX's save-only-these-names recompute policies, as MaxText names them.
- `operator_table`: every operator of a step: sizes, kernels on its shard, weights, kept activations.
- `units`: one layer, the embedding and the head, for every plan of a search.

It may import what `cost` may: `spec` and the ground (perfmodel.layers), never torch.
"""
