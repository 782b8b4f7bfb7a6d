"""Compute: model FLOPs, one kernel's time on a device (measured tables or the roofline), every operator's kernels and the units (layer, embedding, head) they make.

- `attention_kinds`: The keys and FLOPs of attention's variants beside plain causal attention (`mean_keys` and its windows):
- `autocast`: torch.autocast around fp32 parameters (`Stack.autocast_linears`): the casts around every linear, the fp32
- `embedding_grad`: The embedding's weight gradient as PyTorch's dense embedding backward builds it, and where Megatron-LM adds it to
- `flops`: Model FLOPs: the one convention behind model_tflops_per_gpu, MFU and HFU.
- `grouped_gemm`: Grouped GEMMs: a device's local experts in one kernel, against one dense GEMM of the same rows (issue 61).
- `kernel_lookup`: Kernel times looked up in measured tables (`spec.hardware.kernel_tables`), all shapes of a search at once.
- `kernel_time`: Time of one kernel on one device: GEMMs, fused attention, and memory-bound (elementwise) kernels.
- `kernels`: The kernels of one operator on one device, per micro-batch: FLOPs, bytes and seconds.
- `moe`: A mixture-of-experts layer's MLP on one device, per micro-batch: router, token dispatch and combine, the
- `moe_dense`: MaxText's dense MoE dispatch (`Plan.moe_dense_dispatch`, MaxText's sparse_matmul: false): RoutedMoE.dense_matmul
- `operator_table`: The operator table: every operator of a training step (`perfmodel.spec.model.operators`) with its sizes, the kernels it
- `remat_names`: Recompute = names: JAX's `jax.checkpoint_policies.save_only_these_names`, the policy MaxText's remat_policy
- `units`: One layer, the embedding and the head under Megatron-LM's placements, per micro-batch, for every plan of a

It imports `perfmodel.spec` and the rest of `perfmodel.cost`, never torch.
"""
