"""The keys and FLOPs of attention's variants beside plain causal attention (`mean_keys` and its windows):
DeepSeek Sparse Attention's indexer, MLA's latent as sparse attention reads it, Gated DeltaNet's delta rule, and
layers of two head shapes (`per_shape`). Each formula in one function, with its source and units; training
(`cost.compute.kernels`, `cost.compute.flops`) and serving (`serve.step_time`) price them the same way."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ...spec.model.config import ModelConfig


def mean_keys(seq, window):
    """Average keys a query attends to under a causal mask (and sliding window w): s/2, or w(1 - w/2s) if w < s."""
    seq = np.asarray(seq, float)
    if window is None:
        return seq / 2
    w = np.minimum(float(window), seq)
    return w * (1 - w / (2 * seq))


def model_mean_keys(model: ModelConfig, seq):
    """Causal keys per query averaged over the model's layers: `mean_keys` with the sliding window on
    sliding_window_layers of them (all when unset; GPT-OSS alternates windowed and full layers). Sparse attention
    (`ModelConfig.sparse_attention`) reads min(position, topk) keys, the window's count: `mean_keys(seq, topk)`."""
    if model.sparse_attention is not None:
        return mean_keys(seq, model.sparse_attention.topk)
    if model.sliding_window is None:
        return mean_keys(seq, None)
    n_win = model.windowed_layers
    return (n_win * mean_keys(seq, model.sliding_window) + (model.n_layers - n_win) * mean_keys(seq, None)) / model.n_layers


def per_shape(ops_of, parts) -> list:
    """A mean layer's attention ops where its layers have more than one head shape (Gemma 4's global layers,
    `spec.model.global_attention.attention_parts`: (share of the layers, a model of that shape)): `ops_of(model)` for
    each part, op by op the shares' sum of their seconds and FLOPs (the same ops, names and recompute modes as one
    shape's); `ops_of` of the one model where there is one shape."""
    if len(parts) == 1:
        return ops_of(parts[0][1])
    each = [ops_of(m) for _, m in parts]
    out = []
    for ops in zip(*each):
        add = lambda f: sum(w * getattr(o, f) for (w, _), o in zip(parts, ops))  # noqa: E731
        out.append(dataclasses.replace(ops[0], fwd_s=add("fwd_s"), bwd_s=add("bwd_s"), fwd_flops=add("fwd_flops"),
                                       bwd_flops=add("bwd_flops"),
                                       outside=functools.reduce(np.logical_or, [o.outside for o in ops]),
                                       formula=ops[0].formula + "; each head shape on its share of the layers"))
    return out


def indexer_flops(model: ModelConfig, queries, keys):
    """FLOPs of sparse attention's lightning indexer (DeepSeek-V3.2-Exp report, Sec. 2.1, eq. 1) for `queries`
    queries over `keys` keys each (causal: `mean_keys(seq, None)`): 2 x index_heads x index_head_dim per score. It
    scores every earlier key, so it is the part that still grows with the square of the context; 0 without sparse
    attention. The serving engines run it on every tensor-parallel rank whole (vLLM and SGLang replicate the
    indexer), and in FP8 (DeepGEMM's fp8 MQA logits): priced at the part's FP8 rate."""
    s = model.sparse_attention
    if s is None:
        return 0.0
    return 2.0 * queries * keys * s.index_heads * s.index_head_dim


def attention_head_width(model: ModelConfig) -> float:
    """Per-head width of the attention core's two matmuls (QK^T and PV averaged): attention_core_dim / n_heads;
    sparse attention on MLA runs MLA's MQA mode on the latent (DeepSeek-V3.2-Exp report, Sec. 2.1: DSA is
    instantiated on MQA-mode MLA, each latent entry shared by all heads), QK^T over kv_lora + rope and PV over
    kv_lora: (2 kv_lora_rank + qk_rope_head_dim) / 2."""
    if model.sparse_attention is not None and model.mla is not None:
        return (2 * model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) / 2
    return model.attention_core_dim / model.n_heads


def delta_rule_flops(model: ModelConfig, tokens, chunked: bool = True):
    """FLOPs of one Gated DeltaNet layer (`ModelConfig.linear_attention`) for `tokens` tokens, per value head
    6 dk dv (the output q S, the delta's S k and the state's rank-one update) plus, in the chunked form a prefill
    runs, 2 C (dk + dv) for the scores within a chunk of C tokens and their values (Yang et al. 2024, "Parallelizing
    Linear Transformers with the Delta Rule over Sequence Length", NeurIPS, Sec. 3.3: O(L C d + L d^2) per head);
    0 without linear attention."""
    la = model.linear_attention
    if la is None:
        return 0.0
    dk, dv = la.key_head_dim, la.value_head_dim
    return tokens * la.value_heads * (6.0 * dk * dv + (2.0 * la.chunk * (dk + dv) if chunked else 0.0))


def indexer_rate(dev: "Device") -> float:
    """FLOP/s of the indexer's scores: attention_max of the sustained FP8 rate (bf16 on a part without FP8)."""
    dtype = "fp8" if "fp8" in dev.system.accelerator.peak_tflops else "bf16"
    return dev.sustained_peak(dtype) * dev.system.efficiency.attention_max
