"""nanotron's Llama calls per operator, read from its source (flash-attn and Triton kernels: it cannot run here)."""

from benchmarks.tools.host_counts.stacks import op

NANOTRON = "huggingface/nanotron@2411b022a75fb7f7561a1bb4166706da5e1b76de"

COUNTS = {
    "embedding": op({"view_op": 2, "module_call": 1}, {"autograd_node": 3},
                    "Embedding.forward (src/nanotron/models/llama.py L797): input_ids.transpose, "
                    "TensorParallelEmbedding (an nn.Embedding: no masking at tp 1); PipelineBlock wrapper call"),
    "norm1": op({"view_op": 1, "fused_module": 1}, {"autograd_node": 2},
                "TritonRMSNorm (src/nanotron/nn/layer_norm.py): flash-attn's Triton layer_norm_fn "
                "(LayerNormFn: one Triton kernel each way)"),
    "qkv": op({"view_op": 1, "module_call": 1}, {"autograd_node": 6},
              "CausalSelfAttention call; TensorParallelColumnLinear (an nn.Linear: differentiable_identity + "
              "F.linear at tp 1, tp_mode ALL_REDUCE) (src/nanotron/parallel/tensor_parallel/functional.py "
              "column_linear); nodes: identity Function, View, Mm, T, UnsafeView, AccumulateGrad"),
    "attention": op({"eager_op": 14, "view_op": 20}, {"autograd_node": 24},
                    "GQA split (1 view), 3 x transpose + contiguous + view; _forward_training: 2 unsqueeze, cat, "
                    "permute + contiguous, flash_attn's RotaryEmbedding module (2 Triton rotary Functions: q, "
                    "kv), "
                    "split, 3 views; CoreAttention (L267): 2 zeros, 2 sum, 2 cumsum into slices of cu_seqlens, "
                    "flash_attn_varlen_func (one Function, one node); contiguous (no-op), view, transpose"),
    "out_proj": op({"module_call": 1}, {"autograd_node": 6},
                   "TensorParallelRowLinear: F.linear + differentiable_all_reduce_sum (a Function, identity at tp "
                   "1)"),
    "residual1": op({"eager_op": 1}, {"autograd_node": 1}),
    "norm2": op({"view_op": 1, "fused_module": 1}, {"autograd_node": 2}),
    "mlp_in": op({"view_op": 1, "module_call": 1}, {"autograd_node": 6}, "MLP call; gate_up_proj (one fused "
                 "column linear for gate and up)"),
    "activation": op({"view_op": 2, "module_call": 1, "eager_op": 1}, {"autograd_node": 3},
                     "GLUActivation: split, ACT2FN silu (an nn.Module), mul"),
    "mlp_out": op({"module_call": 1}, {"autograd_node": 6}, "down_proj (row linear)"),
    "residual2": op({"eager_op": 1}, {"autograd_node": 1}),
    "final_norm": op({"view_op": 2, "fused_module": 1}, {"autograd_node": 2}, "PipelineBlock + TritonRMSNorm"),
    "lm_head": op({"view_op": 1, "module_call": 1}, {"autograd_node": 5}),
    "loss": op({"eager_op": 14, "view_op": 4}, {"autograd_node": 4},
               "cast_to_fp32 (.float()), label transpose + contiguous, sharded_cross_entropy "
               "(_ShardedCrossEntropy: ~9 eager ops, its all-reduces skipped at tp 1), transpose, masked_mean "
               "(@torch.jit.script: mul, sum, sum, div)"),
    "_layer": op({"view_op": 2}, {}, "LlamaDecoderLayer call and its PipelineBlock wrapper"),
    "_source": f"read: {NANOTRON} src/nanotron/models/llama.py (LlamaDecoderLayer, CausalSelfAttention."
               "_forward_training, CoreAttention, MLP, Loss), "
               "nanotron/parallel/tensor_parallel/{nn,functional}.py, "
               "nanotron/nn/layer_norm.py; tp 1, bf16 params (no autocast), flash-attn varlen, Triton RMSNorm",
}
