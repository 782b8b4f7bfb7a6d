"""What a stack's own model code keeps for the backward beyond the fused kernels' set (`cost.compute.operator_table.
kept_bytes`): element-wise ops run as separate torch ops, and the buffers its tensor layout makes autograd keep
(`Stack.eager_unfused`). torch.compile's partitioner saves only what the backward reads, so a compiled plan keeps
none of it. (What a stack keeps less, quantized GEMM inputs, is `cost.compute.kernels.saved_input_bytes`.)"""

from __future__ import annotations

import numpy as np

from ...spec.model.config import ModelConfig
from ...spec.stack.profile import load_stack
from ..layouts import Layouts
from ..compute.moe import moe_share, routed_copies
from ..compute.operator_table import megatron, operators


def eager_kept_bytes(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Bytes one layer keeps beyond the fused kernels' set (`kept_bytes`), one micro-batch on one device, for what
    the stack runs eagerly (`Stack.eager_unfused`) in a plan that does not compile it:
    - norm: an RMSNorm written as x.float() * rsqrt(mean(x^2) + eps), then .type_as(x) * weight, saves the fp32
      upcast, 4 h per token, beside the normalised bf16 output the next GEMM keeps anyway (HF transformers'
      LlamaRMSNorm, torchtitan's 2024 RMSNorm); two per layer, /tp with SP. torch's own F.rms_norm runs one
      fused op (aten::_fused_rms_norm, saving input, weight and rstd) and keeps nothing more;
    - glu: F.silu(gate) * up saves silu's output, 2 f /tp per token, beside gate, up and the product (torchtitan
      FeedForward and GroupedExperts, nanotron GLUActivation); a MoE model's routed experts 2 fe /etp per routed
      copy and its shared experts 2 fs /tp per token, on its MoE layers (`cost.compute.moe`); the routed experts none on a
      stack that weights their activation by the router's probabilities (`Stack.moe_probs_in_experts`), one
      fused kernel saving its input alone (NeMo AutoModel's torch.compile'd quick_geglu_deepep or Megatron-Core's
      weighted_bias_swiglu_impl: nemo_automodel/components/moe/layers.py @8d9bfb90e L309-330);
    - qkv_buffer: with as many kv heads as query heads, nanotron's CausalSelfAttention (models/llama.py, the
      non-GQA branch) permutes qkv into one contiguous [3, b, s, H, d] buffer and unpacks q, k, v as views of it,
      then runs the rotary kernel on a torch.cat copy of k and v; flash-attn saves q, the view, so the buffer's k
      and v slots stay allocated beside that copy: 2 x 2 kv_dim /tp B per token more (GQA's branch makes q, k
      and v contiguous apart, and keeps nothing more);
    - out_proj_copy: a [seq, batch] layout (nanotron) transposes the attention output, [b, s, q_dim], to
      [s, b, q_dim] before the output projection; F.linear's matmul folds a non-contiguous 3-d input into a 2-d
      copy and autograd saves that copy beside the attention output flash-attn keeps: 2 q_dim /tp B per token,
      where micro_batch > 1 (one sequence's transpose is still a view).
    Rotary embeddings save nothing more: their multiplier (freqs_cis, cos and sin) needs no gradient, so autograd
    keeps it alone. The layers a plan recomputes (full, per-op) keep none of it; the working set of the one being
    rebuilt does (`cost.memory.footprint.layer_activations`, through the unrecomputed set)."""
    eager = set(load_stack(lay.stack).eager_unfused) if lay.compile == "none" else set()
    ops = operators(model)
    out = 0.0 * lay.tp
    if "norm" in eager and model.norm == "rmsnorm":
        s = megatron(ops["norm1"], lay)
        out = out + 2 * 4.0 * s.tokens * s.local("hidden")
    if "glu" in eager and model.gated:
        s = megatron(ops["mlp_in"], lay)
        out = out + 2.0 * s.tokens * s.local("ffn") * ops["mlp_in"].share  # dense layers (a MoE model's dense share)
        if model.moe is not None:
            m = model.moe
            shared = lay.tokens_per_microbatch * (m.shared_ffn_hidden or 0) / lay.tp
            fused = load_stack(lay.stack).moe_probs_in_experts  # the weighted activation: one fused kernel
            routed = 0.0 if fused else routed_copies(model, lay) * m.expert_ffn_hidden / lay.etp
            out = out + 2.0 * (routed + shared) * moe_share(model)
    if "qkv_buffer" in eager and model.n_kv_heads == model.n_heads and not model.mla:
        s = megatron(ops["attention"], lay)
        out = out + 2 * 2.0 * s.tokens * s.local("heads", model.kv_dim) * ops["attention"].share
    if "out_proj_copy" in eager:
        s = megatron(ops["out_proj"], lay)
        copy = 2.0 * s.tokens * s.local("heads", model.q_dim) * ops["out_proj"].share
        out = out + np.where(np.asarray(lay.micro_batch) > 1, copy, 0.0)
    return out


def pipeline_buffer_bytes(model: ModelConfig, lay: Layouts, first, last, chunks) -> np.ndarray:
    """Bytes a pipeline stage holds in torch.distributed.pipelining's own buffers (`Stack.torch_pipelining`), one
    device, with pp > 1 (torch 2.5-2.6 torch/distributed/pipelining/stage.py):
    - PipelineStage._prepare_forward_infra allocates a receive buffer for every one of the n micro-batches' input
      of every virtual stage but the pipeline's first (`_make_tensor_from_meta` per chunk_id), and
      _prepare_backward_infra one for every micro-batch's output gradient of every virtual stage but the
      pipeline's last; both stay allocated across steps. Each is a stage boundary tensor, micro_batch x seq/cp x
      h in bf16 (/tp with SP, torchtitan's blocks returning the local sequence shard). The in-flight chunks'
      inputs are the layers' kept inputs already (`layer_activations`), so those `chunks` are not counted twice;
    - the last stage appends every micro-batch's output to output_chunks (forward_one_chunk) for the schedule's
      step() to merge, so all n micro-batches' bf16 logits (2 B per token and local vocabulary entry) stay until
      the step ends, where a stack without it frees them after the loss (torchtitan train.py `del pred`).
    `first` / `last`: the stage kind holds the pipeline's first / last stage; `chunks`: micro-batch chunks in
    flight (`cost.memory.footprint.kept_scale` x vpp)."""
    out = 0.0 * lay.tp
    if not load_stack(lay.stack).torch_pipelining:
        return out
    n, v = np.asarray(lay.num_microbatches, float), np.asarray(lay.vpp, float)
    first, last = np.asarray(first, float), np.asarray(last, float)
    boundary = 2.0 * lay.tokens_per_microbatch * model.hidden / lay.sp_divisor
    recv = np.maximum(n * (v - first) - np.asarray(chunks, float) * (v - first) / v, 0.0)
    s = megatron(operators(model)["loss"], lay)
    logits = last * n * 2.0 * s.tokens * s.local("vocab")
    return np.where(np.asarray(lay.pp) > 1, boundary * (recv + n * (v - last)) + logits, out)
