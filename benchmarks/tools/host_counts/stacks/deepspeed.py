"""Megatron-DeepSpeed's calls per operator (the deepspeed profile), read from its source with the pieces it shares
with megatron-core's counted run taken from that run."""

from benchmarks.tools.host_counts.stacks import op

MDS = "microsoft/Megatron-DeepSpeed@f4157bea69f3df8c6cb66f2ebcda66ba03d1288e"

COUNTS = {
    "embedding": op({"eager_op": 1, "view_op": 3}, {"autograd_node": 3}, "as megatron-core's (counted)"),
    "embedding_output": op({"eager_op": 2, "module_call": 2, "view_op": 1}, {"autograd_node": 6},
                           "position add, transpose/contiguous, nn.Dropout: as megatron-core's (counted)"),
    "norm1": op({"fused_module": 1}, {"autograd_node": 3}, "apex MixedFusedLayerNorm "
                "(FusedLayerNormAffineFunction: one node, AccumulateGrad for weight and bias)"),
    "qkv": op({"view_op": 1, "fused_module": 1}, {"autograd_node": 4, "eager_op": 3, "view_op": 3},
              "ColumnParallelLinear -> LinearWithGradAccumulationAndAsyncCommunication "
              "(megatron/core/tensor_parallel/"
              "layers.py, the same design as megatron-core's: counted there); backward Python: 2 matmul + bias "
              "sum"),
    "attention": op({"eager_op": 4, "view_op": 25, "module_call": 1}, {"autograd_node": 20},
                    "ParallelAttention.forward (megatron/model/transformer.py L697-878): 3 last-dim slices + 3 "
                    "reshape of mixed_x_layer; CoreAttention (L287-375): views, baddbmm into the global memory "
                    "buffer, FusedScaleMaskSoftmax's ScaledUpperTriangMaskedSoftmax kernel (one eager_op, one "
                    "node), "
                    "rng-tracker fork (4 generator calls), nn.Dropout, bmm, permute + contiguous, view. Derived "
                    "from "
                    "megatron-core's counted DotProductAttention (same code) without its torch softmax fallback "
                    "(4 ops, 4 nodes -> 1, 1) and without mcore's CPU RNG-state check (eq, all, item). "
                    "use_flash_attn: "
                    "instead 3 rearrange + contiguous (e3 v3), flash_attn_func (e1, 1 node), rearrange + "
                    "contiguous"),
    "out_proj": op({"view_op": 2, "fused_module": 1}, {"autograd_node": 3, "eager_op": 2, "view_op": 3},
                   "RowParallelLinear, skip_bias_add (bias goes to bias-dropout-add)"),
    "residual1": op({"view_op": 1, "eager_op": 3}, {"autograd_node": 5},
                    "attention_bias.expand_as(residual); bias_dropout_add_fused_train (@torch.jit.script, "
                    "L895-901): one Python call running add, dropout, add in the TorchScript interpreter (3 ops "
                    "dispatched from C++; dropout is not fused); backward: Add, Dropout, Add, Expand nodes + bias "
                    "AccumulateGrad"),
    "norm2": op({"fused_module": 1}, {"autograd_node": 3}),
    "mlp_in": op({"view_op": 3, "fused_module": 1}, {"autograd_node": 3, "eager_op": 2, "view_op": 3},
                 "ColumnParallelLinear, skip_bias_add (bias to bias_gelu)"),
    "activation": op({"eager_op": 1}, {"autograd_node": 2, "eager_op": 1},
                     "bias_gelu_impl = GeLUFunction.apply (megatron/model/fused_bias_gelu.py: @torch.jit.script "
                     "bias_gelu / bias_gelu_back, one kernel each); node + the bias's AccumulateGrad"),
    "mlp_out": op({"view_op": 2, "fused_module": 1}, {"autograd_node": 3, "eager_op": 2, "view_op": 3}),
    "residual2": op({"view_op": 1, "eager_op": 3}, {"autograd_node": 5},
                    "as residual1; then core.utils.make_viewless_tensor (a no-op on a non-view)"),
    "final_norm": op({"fused_module": 1}, {"autograd_node": 3}),
    "lm_head": op({"view_op": 2, "fused_module": 1}, {"autograd_node": 3, "eager_op": 2, "view_op": 3},
                  "parallel_lm_logits: copy_to_tensor_model_parallel_region + LinearWithGradAccumulation... "
                  "(megatron/model/language_model.py)"),
    "loss": op({"eager_op": 24, "view_op": 8, "nccl_call": 3}, {"autograd_node": 6, "eager_op": 7, "view_op": 3},
               "vocab_parallel_cross_entropy (megatron/core/tensor_parallel/cross_entropy.py: 3 all-reduces over "
               "the tensor group even at tp 1): as megatron-core's (counted)"),
    "_layer": op({"view_op": 1, "eager_op": 2}, {},
                 "the layer's call; torch.tensor(0.0, device=...) twice (moe_loss, mlp_bias: host-to-device "
                 "copies) in ParallelTransformerLayer.forward (L1320-1480)"),
    "_step": {"per_parameter_per_micro_batch": {"eager_op": 1, "view_op": 3, "note": (
        "ZeRO-1/2 gradient hook (deepspeed==0.19.8 deepspeed/runtime/zero/stage_1_and_2.py "
        "reduce_independent_p_g_buckets_and_remove_grads L1414: narrow, copy_ into the IPG bucket, view_as, plus "
        "Python bookkeeping); one reduce (nccl_call) per full bucket (reduce_bucket_size) in reduce_ipg_grads")}},
    "_source": f"read: {MDS} megatron/model/transformer.py ParallelTransformerLayer / ParallelAttention / "
               "CoreAttention / ParallelMLP (GPT-2 style: apex fused LayerNorm, bias_gelu_fusion, "
               "bias_dropout_fusion, masked_softmax_fusion, unfused core attention, dropout 0.1), with the pieces "
               "it shares with megatron-core's counted local-spec run taken from that run",
}
