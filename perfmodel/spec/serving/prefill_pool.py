"""A serving plan's replica layouts, the decode replicas' and a disaggregated plan's prefill pool's
(`ServePlan.prefill_dp` replicas of prefill_tp x prefill_attention_dp GPUs, experts over prefill_ep): what
`spec.serving.schema.resolve_serve` refuses of each (`check_pool`, one rule for both), and the pool's expert parallel
size."""

from __future__ import annotations

from ...errors import InputError, divisors, values_text
from ..model.config import ModelConfig


def check_pool(model: ModelConfig, tp: int, adp: int, ep: int, redundant: int = 0, prefix: str = "") -> None:
    """Refuse a replica layout no engine runs, one line each naming the field (`prefix` + tp, attention_dp, ep: the
    decode replicas' own, or "prefill_" for the prefill pool's), its value and what is valid: tp not dividing the
    attention heads, attention groups or ep > 1 for a dense model, ep not dividing the replica's tp x attention_dp
    ranks (tp x attention_dp = moe_tp x moe_ep) or the experts (with EPLB's redundant slots the experts + slots
    instead: `spec.serving.settings.check_settings`)."""
    f = {k: prefix + k for k in ("tp", "attention_dp", "ep", "dp")}
    if model.n_heads % tp:
        raise InputError(f"{f['tp']}={tp} does not divide num_attention_heads = {model.n_heads}; valid {f['tp']}: "
                         f"{values_text(divisors(model.n_heads))}")
    if adp > 1 and model.moe is None:
        raise InputError(f"{f['attention_dp']}={adp} for {model.name}, which has no experts: attention data "
                         f"parallelism pays off where MoE layers span the groups; valid: {f['attention_dp']} 1 "
                         f"({f['dp']} for replicas)")
    if ep > 1 and model.moe is None:
        raise InputError(f"{f['ep']}={ep} for {model.name}, which has no experts; valid {f['ep']}: 1")
    ranks = tp * adp
    if ranks % ep:
        over = f"{f['tp']} x {f['attention_dp']} = {ranks}" if adp > 1 else f"{f['tp']} = {tp}"
        raise InputError(f"{f['ep']}={ep} does not divide {over} (a replica's experts are split over its "
                         f"{f['tp']} x {f['attention_dp']} ranks); valid {f['ep']}: {values_text(divisors(ranks))}")
    if model.moe is not None and not redundant and model.moe.n_experts % ep:
        raise InputError(f"{f['ep']}={ep} does not divide the {model.moe.n_experts} experts of {model.name}; valid "
                         f"{f['ep']}: {values_text([d for d in divisors(ranks) if model.moe.n_experts % d == 0])}")


def prefill_pool_ep(p, model: ModelConfig) -> int:
    """The expert parallel size of serving plan `p`'s prefill pool (`p` a `spec.serving.schema.ServePlan`, which imports
    this module; `ServePlan.prefill_pool`), after refusing its layout as the decode replicas' (`check_pool`)."""
    tp, adp, ep = p.prefill_pool
    check_pool(model, tp, adp, ep, p.redundant_experts, "prefill_")
    return ep
