"""Recompute = names: JAX's `jax.checkpoint_policies.save_only_these_names`, the policy MaxText's remat_policy
options are built from (MaxText 0.2.5 src/maxtext/layers/nnx_decoders.py, get_remat_policy;
`spec.plan.recompute.MAXTEXT_REMAT`).

A scanned decoder layer keeps its input (the scan carry) and the tensors the plan names (`Plan.recompute_saved`);
in the backward XLA re-runs the forward from those, and only what some backward needs. Per layer op:

  op           kept for the backward (its `kept_bytes`)      re-run in the backward
  norm1        its input, the layer's input: always          always (qkv's weight gradient needs its output)
  qkv          nothing                                       unless qkv is saved (kv saved: the query projection)
  rope         -                                             unless qkv is saved (MaxText names query_proj and
                                                             key_proj after the rotary embedding, attentions.py)
  attention    q, k, v if qkv is saved (k, v if kv is); the  unless attention is saved (out_proj's weight gradient
               flash log-sum-exp if attention is saved       and the flash backward need its output)
  out_proj     its input (bf16) if attention is saved        unless out_proj is saved (norm2 reads x + its output)
  residual1/2  nothing (dropout masks come again from the    residual1 always (cheap), residual2 never
               RNG key)
  norm2        its input if out_proj is saved                always
  mlp_in       nothing                                       unless mlp_in is saved
  activation   its input if mlp_in is saved                  always
  mlp_out      nothing                                       never: its output feeds only the residual add, whose
                                                             backward needs nothing

Offloaded tensors (`Plan.recompute_offloaded`: the layer input or saved ones; JAX's
save_and_offload_only_these_names) count as kept for what re-runs, but the device holds only the rest
(`names_held`); cost.memory.offload prices the copies and the host memory.

A collective between two ops runs again where both re-run (`names_edge_reruns`): tensor parallelism's gather into
qkv or mlp_in unless saved, the reduction of out_proj's partial sums unless saved; mlp_out's never.

Latent attention (MLA; MaxText src/maxtext/layers/attention_mla.py at e591f30cbbf217ed67ef71263ec0538239f9c3b8,
`MLA.__call__`) names the tensors the attention core reads as the other attentions do: query_proj the queries
[T, H, d_nope + d_rope] (after the up projection wq_b and the rotary part), key_proj the keys [T, H, d_nope +
d_rope] (wkv_b's key part with the shared rotary key broadcast to every head), value_proj the values [T, H, d_v]
(`ModelConfig.attention_input_width`, what the attention op keeps), context the core's output [T, H, d_v]. Its
latents carry names no named policy saves (query_wa_proj, mla_q, kv_wa_proj, mla_kv): with qkv saved the up
projections and rotary embedding stay, but their weight gradients read the normalised latents, so the backward
re-runs the down projections wq_a, wkv_a and the latent norms from the layer input (`names_gemm_share`); the gather
into them goes again.
"""

from __future__ import annotations

# For each op that keeps something under the policy: the kept tensor that holds it
KEPT_IF = {"norm1": "layer_input", "out_proj": "attention", "norm2": "out_proj", "activation": "mlp_in"}
REBUILT_UNLESS = {"qkv": "qkv", "attention": "attention", "out_proj": "out_proj", "mlp_in": "mlp_in"}
ALWAYS_REBUILT = ("norm1", "norm2", "residual1", "activation")  # never: mlp_out, residual2 (rope goes with qkv)


def names_rebuilds(op_name: str, saved, mla: bool = False) -> bool:
    """Whether the names policy re-runs layer op `op_name`'s forward (some of it, with latent attention `mla`: its
    down projections, `names_gemm_share`) in the backward (table above)."""
    if op_name == "qkv" and mla:
        return True
    if op_name in REBUILT_UNLESS:
        return REBUILT_UNLESS[op_name] not in saved
    return op_name in ALWAYS_REBUILT


def mla_down_share(model) -> float:
    """Share of an MLA model's qkv GEMM weights (`ModelConfig.qkv_matmul_params`) that sit in its down projections
    (wq_a: hidden x q_lora_rank, none without a query latent; wkv_a: hidden x (kv_lora_rank + qk_rope_head_dim);
    DeepSeek-V2, Liu et al. 2024, Sec. 2.1) and in a sparse-attention indexer's matrices (its outputs carry no
    checkpoint name): what the names policy re-runs with query_proj, key_proj and value_proj saved (module
    docstring). Dimensionless."""
    a, h = model.mla, model.hidden
    sa = model.sparse_attention
    indexer = model.indexer_params() - 2 * sa.index_head_dim if sa else 0  # its LayerNorm is no GEMM weight
    return (h * ((a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim) + indexer) / model.qkv_matmul_params()


def mla_up_share(model) -> float:
    """Share of latent attention's qkv GEMM FLOPs that Megatron-Core's `--recompute-modules mla_up_proj` re-runs in
    the backward: the up projections (linear_q_up_proj, linear_kv_up_proj) and the rotary embedding applied to their
    outputs, which MLASelfAttention checkpoints as one function and discards (megatron/core/transformer/
    multi_latent_attention.py, `qkv_up_proj_and_rope_apply` under CheckpointWithoutOutput); the down projections
    and the latents they write stay. 1 - `mla_down_share`; dimensionless."""
    return 1.0 - mla_down_share(model)


def names_gemm_share(op_name: str, saved, model) -> float:
    """Share of layer GEMM `op_name`'s forward FLOPs the names policy re-runs in the backward: 1 where it is
    rebuilt (`names_rebuilds`), 0 where saved; qkv saved on a latent-attention model, its down projections'
    (`mla_down_share`)."""
    if op_name == "qkv" and model.mla is not None and "qkv" in saved:
        return mla_down_share(model)
    if op_name == "qkv" and model.mla is None and "kv" in saved and "qkv" not in saved:  # the queries alone again
        return model.q_dim / (model.q_dim + 2 * model.kv_dim)
    return 1.0 if names_rebuilds(op_name, saved) else 0.0


def names_held(saved, offloaded=()) -> tuple[str, ...]:
    """The kept tensors the device holds: the layer input and the `saved` ones, less those `offloaded` to the host."""
    return tuple(t for t in ("layer_input", *saved) if t not in offloaded)


def names_kept(op_name: str, kept, projections, held):
    """Bytes layer op `op_name` keeps under the names policy in a memory holding the kept tensors `held` (the
    device's: `names_held`), from what it keeps without recompute (`kept`, bytes per micro-batch on one device).
    The attention op keeps q, k, v (`projections` = (qkv_bytes, kv_bytes) of its `kept`) if qkv is held, k and v
    alone (kv_bytes) if kv is held without qkv, and the rest of its `kept` (the flash log-sum-exp) if attention is
    held."""
    qkv_bytes, kv_bytes = projections
    if op_name == "attention":
        kv = ("kv" in held) * ("qkv" not in held) * kv_bytes
        return ("qkv" in held) * qkv_bytes + kv + ("attention" in held) * (kept - qkv_bytes)
    return kept if names_keeps(op_name, held) else 0.0 * kept


def names_keeps(op_name: str, held) -> bool:
    """Whether layer op `op_name` keeps its input for the backward in a memory holding the kept tensors `held`
    (table above; `names_held`)."""
    return op_name in KEPT_IF and KEPT_IF[op_name] in held


def names_edge_reruns(src: str, dst: str, saved, mla: bool = False) -> bool:
    """Whether the tensor passed from layer op `src` to `dst` (and a collective that redistributes it) goes again
    in the backward: where the names policy re-runs both; with latent attention (`mla`) the down projections read
    qkv's input again even with qkv saved, but qkv's saved outputs are not sent again."""
    return names_rebuilds(src, saved) and names_rebuilds(dst, saved, mla)


def names_rebuilt_gemms(saved, model) -> dict[str, float]:
    """The layer GEMMs the names policy re-runs (for the recompute FLOPs), each with its share
    (`names_gemm_share`): qkv, out_proj and mlp_in unless saved; an MLA model's down projections always."""
    shares = {n: names_gemm_share(n, saved, model) for n in REBUILT_UNLESS if n != "attention"}
    return {n: w for n, w in shares.items() if w > 0}
