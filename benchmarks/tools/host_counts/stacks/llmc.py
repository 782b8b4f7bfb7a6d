"""llm.c's calls per operator, read from its CUDA source (it cannot run here): kernel launches, cuBLASLt GEMMs, cuDNN
executes and memsets / copies alike (kernel_launch), each with its file."""

from benchmarks.tools.host_counts.stacks import op

LLMC = "karpathy/llm.c@f1e2ace651495b74ae22d45d1723443fd00ecd3a"
K = "kernel_launch"

COUNTS = {
    "embedding": op({K: 1}, {K: 4}, "encoder_forward (wte + wpe in one kernel); backward: wpe_backward_kernel, "
                                    "2 cudaMemcpyAsync H2D of the bucket tables (built on the CPU from the tokens "
                                    "every step: O(B*T) host work), wte_backward_kernel (llmc/encoder.cuh)"),
    "embedding_output": op(note="in encoder_forward"),
    "norm1": op({}, {K: 2}, "forward fused into the previous layer's fused_residual_forward5 (layer 0's: _model); "
                            "backward: cudaMemsetAsync + layernorm_backward_kernel10 (llmc/layernorm.cuh)"),
    "qkv": op({K: 1}, {K: 4}, "matmul_forward_cublaslt (bias fused in the cuBLASLt epilogue); backward: "
                              "matmul_backward_bias_kernel9 + reduce_add_sum_kernel (bias), dinp GEMM, dweight "
                              "GEMM (llmc/matmul.cuh). Each GEMM also builds cuBLASLt descriptors and queries "
                              "cublasLtMatmulAlgoGetHeuristic on the host"),
    "attention": op({K: 1}, {K: 1}, "cuDNN build (USE_CUDNN=1): one cuDNN-frontend graph execute each way "
                                    "(llmc/cudnn_att.cpp; the backward graph runs a few kernels). Without cuDNN: "
                                    "forward 5 (permute, 2 batched cuBLASLt GEMMs, softmax, unpermute), "
                                    "backward 7 "
                                    "(unpermute, 4 GEMMs, softmax backward, permute) (llmc/attention.cuh)"),
    "out_proj": op({K: 1}, {K: 4}),
    "residual1": op({K: 1}, {}, "fused_residual_forward5: residual add + ln2 in one kernel; the residual's "
                                "gradient is accumulated by layernorm_backward (+=)"),
    "norm2": op({}, {K: 2}, "forward in residual1's kernel"),
    "mlp_in": op({K: 1}, {K: 4}, "gelu_fusion defaults to 0 (train_gpt2.cu main: gelu_fusion = 0)"),
    "activation": op({K: 1}, {K: 1}, "gelu_forward; gelu_backward_inplace (not fused: gelu_fusion 0)"),
    "mlp_out": op({K: 1}, {K: 4}),
    "residual2": op({K: 1}, {},
                    "fused_residual_forward5: residual + the next layer's ln1 (the last layer's: lnf)"),
    "final_norm": op({}, {K: 2}, "forward in the last layer's residual2 kernel"),
    "lm_head": op({K: 1}, {K: 2}, "no bias: dinp and dweight GEMMs"),
    "loss": op({K: 1}, {}, "fused_classifier_kernel5: softmax, loss and dlogits in one kernel "
                           "(llmc/fused_classifier.cuh), launched at the start of gpt2_backward_and_reduce"),
    "_layer": op(note="12 ncclAllReduce (ZeRO-1: ncclReduceScatter) in one ncclGroupStart/End per layer on the "
                      "last "
                      "micro-step when multi-GPU (llmc/zero.cuh multi_gpu_async_reduce_gradient): 1 NCCL kernel, "
                      "cudaEventRecord + cudaStreamWaitEvent; nothing on one GPU"),
    "_model": op({K: 3}, {K: 6}, "forward: cudaMemcpy of the inputs (H2D, synchronous), layer 0's "
                                 "layernorm_forward, cudaDeviceSynchronize at the end of gpt2_forward; backward: "
                                 "2 cudaMemsetAsync (losses, grads; first micro-step), cudaMemcpy targets, "
                                 "cudaMemset "
                                 "dresidual, global_sum_deterministic of the loss, cudaMemcpyAsync D2H of the "
                                 "loss"),
    "_optimizer": {"per_step": {K: 20, "note": (
        "gpt2_calculate_grad_norm: cudaMemsetAsync + global_norm_squared_kernel + global_sum_deterministic + "
        "cudaMemcpy D2H (a sync); gpt2_update: one adamw_kernel3 launch per parameter tensor kind "
        "(NUM_PARAMETER_TENSORS = 16: each launch covers all layers' slices)")}, "per_tensor": {}},
    "_source": f"read: {LLMC} train_gpt2.cu gpt2_forward / gpt2_backward_and_reduce / gpt2_update, llmc/*.cuh; "
               "bf16, cuDNN attention, recompute 0, gelu_fusion 0 (defaults); kernel_launch counts "
               "cudaLaunchKernel, "
               "cuBLASLt GEMM, cuDNN execute and cudaMemset/Memcpy calls alike",
}
