"""Recompute = names: JAX's `jax.checkpoint_policies.save_only_these_names`, the policy MaxText's remat_policy
options are built from (MaxText 0.2.5 src/maxtext/layers/nnx_decoders.py, get_remat_policy;
`spec.recompute.MAXTEXT_REMAT`).

A scanned decoder layer keeps its input (the scan carry) and the tensors the plan names (`Plan.recompute_saved`);
in the backward XLA re-runs the forward from those, and only what some backward needs. Per layer op:

  op           kept for the backward (its `kept_bytes`)      re-run in the backward
  norm1        its input, the layer's input: always          always (qkv's weight gradient needs its output)
  qkv          nothing                                       unless qkv is saved
  rope         -                                             unless qkv is saved (MaxText names query_proj and
                                                             key_proj after the rotary embedding, attentions.py)
  attention    q, k, v if qkv is saved; the flash log-sum-   unless attention is saved (out_proj's weight gradient
               exp if attention is saved                     and the flash backward need its output)
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
(`names_held`); cost.offload prices the copies and the host memory.

A collective between two ops runs again where both re-run (`names_edge_reruns`): tensor parallelism's gather into
qkv or mlp_in unless saved, the reduction of out_proj's partial sums unless saved; mlp_out's never.
"""

from __future__ import annotations

# For each op that keeps something under the policy: the kept tensor that holds it
KEPT_IF = {"norm1": "layer_input", "out_proj": "attention", "norm2": "out_proj", "activation": "mlp_in"}
REBUILT_UNLESS = {"qkv": "qkv", "attention": "attention", "out_proj": "out_proj", "mlp_in": "mlp_in"}
ALWAYS_REBUILT = ("norm1", "norm2", "residual1", "activation")  # never: mlp_out, residual2 (rope goes with qkv)


def names_rebuilds(op_name: str, saved) -> bool:
    """Whether the names policy re-runs layer op `op_name`'s forward in the backward (table above)."""
    if op_name in REBUILT_UNLESS:
        return REBUILT_UNLESS[op_name] not in saved
    return op_name in ALWAYS_REBUILT


def names_held(saved, offloaded=()) -> tuple[str, ...]:
    """The kept tensors the device holds: the layer input and the `saved` ones, less those `offloaded` to the host."""
    return tuple(t for t in ("layer_input", *saved) if t not in offloaded)


def names_kept(op_name: str, kept, qkv_bytes, held):
    """Bytes layer op `op_name` keeps under the names policy in a memory holding the kept tensors `held` (the
    device's: `names_held`), from what it keeps without recompute (`kept`, bytes per micro-batch on one device).
    The attention op keeps q, k, v (`qkv_bytes` of its `kept`) if qkv is held and the rest of its `kept` (the
    flash log-sum-exp) if attention is held."""
    if op_name == "attention":
        return ("qkv" in held) * qkv_bytes + ("attention" in held) * (kept - qkv_bytes)
    return kept if names_keeps(op_name, held) else 0.0 * kept


def names_keeps(op_name: str, held) -> bool:
    """Whether layer op `op_name` keeps its input for the backward in a memory holding the kept tensors `held`
    (table above; `names_held`)."""
    return op_name in KEPT_IF and KEPT_IF[op_name] in held


def names_edge_reruns(src: str, dst: str, saved) -> bool:
    """Whether the tensor passed from layer op `src` to `dst` (and a collective that redistributes it) goes again
    in the backward: where the names policy re-runs both."""
    return names_rebuilds(src, saved) and names_rebuilds(dst, saved)


def names_rebuilt_gemms(saved) -> tuple[str, ...]:
    """The layer GEMMs the names policy re-runs (for the recompute FLOPs): qkv, out_proj and mlp_in unless saved."""
    return tuple(n for n in REBUILT_UNLESS if n != "attention" and names_rebuilds(n, saved))
