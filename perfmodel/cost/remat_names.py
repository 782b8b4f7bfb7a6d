"""Recompute = names: JAX's `jax.checkpoint_policies.save_only_these_names`, the policy MaxText's remat_policy
options are built from (src/MaxText/layers/decoders.py, get_remat_policy; `spec.recompute.MAXTEXT_REMAT`).

A scanned decoder layer keeps its input (the scan carry) and the tensors the plan names (`Plan.recompute_saved`);
in the backward XLA re-runs the forward from those, and only what some backward needs. Per layer op:

  op           kept for the backward (its `kept_bytes`)      re-run in the backward
  norm1        its input, the layer's input: always          always (qkv's weight gradient needs its output)
  qkv          nothing                                       unless qkv is saved
  rope         -                                             always (cheap; MaxText names the projections before it)
  attention    q, k, v if qkv is saved; the flash log-sum-   unless attention is saved (out_proj's weight gradient
               exp if attention is saved                     and the flash backward need its output)
  out_proj     its input if attention is saved               unless out_proj is saved (norm2 reads x + its output)
  residual1/2  their dropout masks (as without recompute)    residual1 always (cheap), residual2 never
  norm2        its input if out_proj is saved                always
  mlp_in       nothing                                       unless mlp_in is saved
  activation   its input if mlp_in is saved                  always
  mlp_out      nothing                                       never: its output feeds only the residual add, whose
                                                             backward needs nothing
"""

from __future__ import annotations

# For each op that keeps something under the policy: the saved tensor that holds it (None: always kept)
KEPT_IF = {"norm1": None, "out_proj": "attention", "norm2": "out_proj", "activation": "mlp_in",
           "residual1": None, "residual2": None}
REBUILT_UNLESS = {"qkv": "qkv", "attention": "attention", "out_proj": "out_proj", "mlp_in": "mlp_in"}
ALWAYS_REBUILT = ("norm1", "norm2", "residual1", "activation")  # and rope, a kernel of the qkv op


def names_rebuilds(op_name: str, saved) -> bool:
    """Whether the names policy re-runs layer op `op_name`'s forward in the backward (table above)."""
    if op_name in REBUILT_UNLESS:
        return REBUILT_UNLESS[op_name] not in saved
    return op_name in ALWAYS_REBUILT


def names_kept(op_name: str, kept, qkv_bytes, saved):
    """Bytes layer op `op_name` keeps under the names policy, from what it keeps without recompute (`kept`, bytes
    per micro-batch on one device). The attention op keeps q, k, v (`qkv_bytes` of its `kept`) if qkv is saved and
    the rest of its `kept` (the flash log-sum-exp) if attention is saved."""
    if op_name == "attention":
        return ("qkv" in saved) * qkv_bytes + ("attention" in saved) * (kept - qkv_bytes)
    if op_name not in KEPT_IF:
        return 0.0 * kept
    need = KEPT_IF[op_name]
    return kept if need is None or need in saved else 0.0 * kept


def names_rebuilt_gemms(saved) -> tuple[str, ...]:
    """The layer GEMMs the names policy re-runs (for the recompute FLOPs): qkv, out_proj and mlp_in unless saved."""
    return tuple(n for n in ("qkv", "out_proj", "mlp_in") if n not in saved)
