"""The attention shape of a model's global (full-attention) layers where it differs from its windowed layers'
(Gemma 4), and the model split by attention shape for what prices one layer's attention core or KV cache."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import Field

from ...types import Count, Flag, Schema


class GlobalAttentionConfig(Schema):
    """The layers that attend to the whole sequence (the n_layers - windowed_layers without sliding_window) have a
    head shape of their own; the windowed layers keep the model's head_dim and n_kv_heads. Gemma 4 (transformers'
    Gemma4TextAttention, src/transformers/models/gemma4/modeling_gemma4.py at
    c308a309e651a7e033f683353f3f75aa66d29502): a full-attention layer's heads are global_head_dim wide (512 beside
    the sliding layers' 256), and with attention_k_eq_v it has num_global_key_value_heads key heads and no value
    projection (v_proj None): the values are the key projection's output, RMS-normed without a scale (v_norm) where
    the keys get k_norm and the rotary embedding. Keys and values stay two tensors, so the attention core and the
    KV cache (past_key_values.update(key_states, value_states)) see 2 x n_kv_heads x head_dim per token as any
    layer's; only the projection weights (and their FLOPs) are one kv width instead of two."""

    head_dim: Count = Field(description="per-head width of the global layers' queries, keys and values "
                                        "(Gemma 4: global_head_dim)")
    n_kv_heads: Count = Field(description="the global layers' key/value heads (Gemma 4 with attention_k_eq_v: "
                                          "num_global_key_value_heads; else num_key_value_heads)")
    shared_kv: Flag = Field(False, description="one projection gives keys and values (attention_k_eq_v): its "
                                               "weights are n_kv_heads x head_dim wide, not twice that")


class Shape(NamedTuple):
    """One layer's attention head shape: a windowed layer's (the model's head_dim, n_kv_heads) or a global layer's
    (GlobalAttentionConfig has the same three names)."""

    head_dim: int
    n_kv_heads: int
    shared_kv: bool = False


def check(model) -> None:
    """ValueError where `model.global_attention` cannot apply: it shapes the layers without sliding_window, so the
    model needs both kinds, and it is grouped-query attention (no MLA, linear or sparse attention)."""
    g = model.global_attention
    if g is None:
        return
    if not 0 < model.windowed_layers < model.n_layers:
        raise ValueError(f"global_attention shapes the layers without sliding_window, but {model.windowed_layers} of "
                         f"{model.n_layers} layers are windowed; valid: sliding_window with sliding_window_layers "
                         f"1..{model.n_layers - 1}")
    if model.mla is not None or model.linear_attention is not None or model.sparse_attention is not None:
        raise ValueError("global_attention with mla, linear_attention or sparse_attention is not modelled; valid: "
                         "grouped-query attention (those three null)")
    if model.n_heads % g.n_kv_heads:
        raise ValueError(f"global_attention.n_kv_heads = {g.n_kv_heads} must divide n_heads = {model.n_heads}")


def shaped(model, width) -> float:
    """`width(shape)` of one layer's head shape (`Shape`), averaged over the windowed layers' (the model's head_dim,
    n_kv_heads) and the global ones' (`GlobalAttentionConfig`) by their counts; the one shape's without it."""
    local, g = Shape(model.head_dim, model.n_kv_heads), model.global_attention
    if g is None:
        return width(local)
    win = model.windowed_layers
    return (win * width(local) + (model.n_layers - win) * width(g)) / model.n_layers


def layer_shapes(model) -> list[tuple[Shape, int]]:
    """(head shape, layers with it): the windowed layers' and the global ones' (`GlobalAttentionConfig`), or the one
    shape on all layers without it."""
    g, n = model.global_attention, model.n_layers
    local = Shape(model.head_dim, model.n_kv_heads)
    return [(local, n)] if g is None else [(local, model.windowed_layers), (g, n - model.windowed_layers)]


def kv_head_counts(model) -> tuple[int, ...]:
    """The key/value head counts tensor parallelism splits: n_kv_heads, and the global layers' where they have
    their own (`GlobalAttentionConfig`)."""
    g = model.global_attention
    return (model.n_kv_heads,) if g is None else (model.n_kv_heads, g.n_kv_heads)


def attention_parts(model) -> list[tuple[float, object]]:
    """The model's layers by attention shape, as (share of the layers, a model whose every layer has that shape):
    the model itself where its layers share one head shape (no global_attention); else its windowed layers (every
    layer windowed) and its global ones (GlobalAttentionConfig's head_dim and n_kv_heads, no window). What prices
    one layer's attention core or KV cache prices a mean layer as the sum over the parts of share x that price;
    the projections, priced from ModelConfig's mean widths (q_dim, kv_dim, kv_proj_dim), need no split."""
    g = model.global_attention
    if g is None:
        return [(1.0, model)]
    n, win = model.n_layers, model.windowed_layers
    local = model.model_copy(update=dict(global_attention=None, sliding_window_layers=None))
    wide = model.model_copy(update=dict(global_attention=None, sliding_window=None, sliding_window_layers=None,
                                        head_dim=g.head_dim, n_kv_heads=g.n_kv_heads))
    return [(win / n, local), ((n - win) / n, wide)]
