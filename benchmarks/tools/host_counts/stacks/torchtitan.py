"""torchtitan 0.3.0's Llama3 (from PyPI, unpacked by perfmodel.export.checks): fused wqkv, ComplexRoPE, flex
attention as a torch.compile'd region, no autocast."""

from __future__ import annotations

import contextlib
import sys

import torch

from benchmarks.tools.host_counts.counter import (BATCH, SEQ, Counter, FusedSDPA, compiled_stub, count_model,
                                                  framework_path, make_rules, tokens)

TORCHTITAN = "torchtitan==0.3.0"
TITAN_RULES = make_rules(r"layers\.(\d+)", {
    "attention_norm": ("norm1", None), "attention": ("qkv", "residual1"),
    "attention.qkv_linear": ("qkv", "attention"), "attention.qkv_linear.wqkv": ("qkv", "attention"),
    "attention.rope": ("attention", None), "attention.inner_attention": ("attention", None),
    "attention.wo": ("out_proj", "residual1"), "ffn_norm": ("norm2", None), "feed_forward": ("mlp_in", "residual2"),
    "feed_forward.w1": ("mlp_in", "activation"), "feed_forward.w3": ("mlp_in", "activation"),
    "feed_forward.w2": ("mlp_out", "residual2"),
}, {
    "": ("_model", "loss", "embedding"), "tok_embeddings": ("embedding", "_model"), "norm": ("final_norm", None),
    "lm_head": ("lm_head", "loss"),
})
# torch.compile'd flex_attention on a GPU (torch/_inductor/kernel/flex/flex_attention.py, torch 2.13): the forward
# lowers to one Triton template kernel; the backward to delta = sum(out * grad_out) (one reduction kernel) and one
# template kernel (dq, dk, dv; GQA inside it)
FLEX_KERNELS = {"forward": 1, "backward": 2}
CREATE_BLOCK_MASK_KERNELS = 8


def source(version: str) -> str:
    return (
        f"counted: {version} (PyPI wheel unpacked by perfmodel.export.checks) "
        "torchtitan/models/llama3/__init__.py _build_llama3_layers + Llama3Model, "
        "models/common/{attention,rope,decoder,feed_forward}.py; flex attention (the default backend) as a "
        "torch.compile'd region (1 forward / 2 backward kernels, FLEX_KERNELS), its block mask created per "
        "step in _model (get_attention_masks: the document-mask closures' eager ops, and create_block_mask "
        "compiled: one compiled_entry and 8 kernels, Inductor's count on this CPU); loss: "
        "components/loss.py cross_entropy_loss (sum) / tokens; no autocast (bf16 params under FSDP2: see "
        "_fsdp2); optimizer: AdamW implementation 'fused' (components/optimizer/optimizer.py)")


class _FlexEmulation(FusedSDPA):
    """torchtitan's FlexAttention.compiled_flex_attn (a torch.compile'd flex_attention: one compiled region, one
    CompiledFunctionBackward node) with causal SDPA maths."""

    @staticmethod
    def forward(ctx, q, k, v, mask, kw):
        ctx.compiled_backward_kernels = FLEX_KERNELS["backward"]  # its node's backward region (Counter.backward)
        return FusedSDPA.forward(ctx, q, k, v, mask, kw)


def _flex_attn(q, k, v, *, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_aux=None,
               kernel_options=None):
    from types import SimpleNamespace

    kw = {"is_causal": True, "scale": scale, "enable_gqa": enable_gqa}
    c = Counter.current
    if c is None:
        return _FlexEmulation.apply(q, k, v, None, kw), SimpleNamespace(lse=None)
    c.muted += 1
    try:
        out = _FlexEmulation.apply(q, k, v, None, kw)
    finally:
        c.muted -= 1
    c.tally.add(c.key, c.pas, "compiled_entry")
    c.tally.add(c.key, c.pas, "compiled_kernel", FLEX_KERNELS["forward"])
    c.tally.samples[c.key][c.pas]["compiled flex_attention:compiled_entry"] += 1
    return out, SimpleNamespace(lse=None)


def torchtitan(n_layers: int = 2) -> dict:
    """torchtitan 0.3.0's Llama3 (its _build_llama3_layers: fused wqkv, ComplexRoPE at per-document positions, the
    default flex attention backend, RMSNorm, SwiGLU), loss as its trainer computes it (cross_entropy_loss, sum,
    divided by the valid tokens), no autocast (torchtitan's bf16 is FSDP2's param dtype: see _fsdp2)."""
    root = str(framework_path(TORCHTITAN))
    if root not in sys.path:
        sys.path.insert(0, root)
    import torchtitan.models.common.attention as A
    from torch.nn.attention.flex_attention import create_block_mask
    from torchtitan.components.loss import cross_entropy_loss
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers

    # torch.compile'd create_block_mask: one region; its kernels as Inductor compiles it for this block mask on this
    # CPU (4 fused kernels and 4 sorts; measured once: CREATE_BLOCK_MASK_KERNELS)
    A._compiled_create_block_mask = compiled_stub(create_block_mask, "create_block_mask", CREATE_BLOCK_MASK_KERNELS,
                                                  None)
    A.FlexAttention.compiled_flex_attn = staticmethod(_flex_attn)
    torch.manual_seed(0)
    dim, vocab = 64, 128
    cfg = Llama3Model.Config(
        dim=dim, vocab_size=vocab, tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim),
        norm=RMSNorm.Config(normalized_shape=dim), lm_head=Linear.Config(in_features=dim, out_features=vocab),
        layers=_build_llama3_layers(n_layers=n_layers, dim=dim, n_heads=4, n_kv_heads=2, hidden_dim=128,
                                    rope=ComplexRoPE.Config(dim=dim // 4, max_seq_len=64, theta=500000,
                                                            scaling="llama"), attn_backend="flex"))
    model = cfg.build()
    model.init_states(buffer_device=torch.device("cpu"))
    x, y = tokens(vocab)
    positions = torch.arange(SEQ).repeat(BATCH, 1)

    def forward():
        c = Counter.current
        with (c.region("_model", after="_model") if c else contextlib.nullcontext()):
            masks = model.get_attention_masks(positions=positions)
        pred = model(x, positions=positions, attention_masks=masks)
        return cross_entropy_loss(pred, y) / y.numel()

    res = count_model(model, forward, *TITAN_RULES, n_layers, autocast=False)
    res["_version"] = TORCHTITAN
    return res

