"""A disaggregated serving plan's prefill pool (`ServePlan.prefill_dp` replicas of prefill_tp x prefill_attention_dp
GPUs, experts over prefill_ep): what `spec.serving.resolve_serve` refuses of it, and its expert parallel size."""

from __future__ import annotations

import math

from ..errors import InputError, divisors, values_text
from .model import ModelConfig


def prefill_pool_ep(p, model: ModelConfig) -> int:
    """The expert parallel size of serving plan `p`'s prefill pool (`p` a `spec.serving.ServePlan`, which imports
    this module): given, else the largest dividing both ep and prefill_tp x prefill_attention_dp; after refusing
    what the engines do not run, as of the decode replicas: attention groups or prefill_ep > 1 for a dense model,
    prefill_ep not dividing the pool's ranks (tp x attention_dp = moe_tp x moe_ep) or the experts. One line each,
    naming the field, its value and what is valid."""
    tp, adp = p.prefill_tp or p.tp, p.prefill_attention_dp or 1
    if adp > 1 and model.moe is None:
        raise InputError(f"prefill_attention_dp={adp} for {model.name}, which has no experts: attention data "
                         "parallelism pays off where MoE layers span the groups; valid: prefill_attention_dp 1 "
                         "(prefill_dp for replicas)")
    if p.prefill_ep is None:
        return math.gcd(p.ep, tp * adp)
    ep, ranks = p.prefill_ep, tp * adp
    if ep > 1 and model.moe is None:
        raise InputError(f"prefill_ep={ep} for {model.name}, which has no experts; valid prefill_ep: 1")
    if ranks % ep:
        over = f"prefill_tp x prefill_attention_dp = {ranks}" if adp > 1 else f"prefill_tp = {tp}"
        raise InputError(f"prefill_ep={ep} does not divide {over} (a prefill replica's experts are split over its "
                         f"prefill_tp x prefill_attention_dp ranks); valid prefill_ep: {values_text(divisors(ranks))}")
    if model.moe is not None and model.moe.n_experts % ep:
        raise InputError(f"prefill_ep={ep} does not divide the {model.moe.n_experts} experts of {model.name}; valid "
                         f"prefill_ep: {values_text([d for d in divisors(ranks) if model.moe.n_experts % d == 0])}")
    return ep
