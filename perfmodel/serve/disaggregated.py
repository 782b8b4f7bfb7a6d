"""Disaggregated serving: prefill and decode in separate pools, the KV cache sent between them (Zhong et al. 2024,
"DistServe", Sec. 3; Patel et al. 2024, "Splitwise", Sec. 4; NVIDIA Dynamo and SGLang's PD disaggregation run it).

prefill_dp replicas of prefill_tp x prefill_attention_dp GPUs (`prefill_plan`: attention groups and experts over
prefill_ep as a decode replica's are, docs/inference.md) run prompts only; the decode replicas (tp x attention_dp x
pp, dp of them) run decode steps only, so no prompt shares a step with decode tokens. Priced by the same step
(`step_time.step_parts`), in steady state here and request by request in `simulate_disaggregated`:

    prefill pool:  n = a_p x max(1, min(floor(max_num_tokens / I), max_batch, prompts a group's KV cache holds))
                   prompts a step (a_p = prefill_attention_dp groups, each its own token budget and scheduler),
                   t_p = step(n prompts of I tokens; its busiest group runs n / a_p of them)
                   R_p = prefill_dp x n / t_p                                   requests/s
    KV transfer:   each prefill GPU sends its shard s_p = I x its KV bytes per token, each decode GPU receives
                   its own s_d (heads replicated past the kv heads included), on the tier the deployment spans
                   (`cost.comm.collectives.p2p_tier`): t_kv = p2p_time(max(s_p, s_d));
                   R_kv = min(prefill_dp x a_p x bandwidth / s_p, dp x attention_dp x bandwidth / s_d)
                   (every attention group sends or receives its own requests' caches)
    decode pool:   t_d(B) = step(B tokens at I + O/2 keys);   R_d(B) = dp x B / ((O - 1) t_d(B))
                   (a request's first token comes from its prefill, the other O - 1 from decode steps)
    requests/s     R = min(R_d(B), R_p, R_kv), B the batch memory and the stack allow (decode tokens only in a
                   step: B <= max_num_tokens); where the prefill pool or the links bound R, the decode replicas
                   hold fewer sequences: B' with R_d(B') = R (bisection; t_d grows with B)
    with speculative decoding a decode step gains a = tokens_per_step tokens: R_d(B) = dp x B x a / ((O - 1) t_d(B))
    TPOT = t_d(B') / a;   TTFT = front end + t_p + t_kv (`host_time.frontend_s`; no queueing);   output tokens/s
    = R x O
"""

from __future__ import annotations

import math

from ..cost.comm.collectives import p2p_tier, p2p_time
from ..errors import InputError
from ..spec.hardware.system import System
from ..spec.model.config import ModelConfig
from ..spec.serving.schema import ServeEstimate, ServePlan, ServingStack
from .host_time import frontend_s
from .kv_cache import GIB, kv_bytes_per_token, memory, replica_batch, sequence_kv_bytes, tokens_held
from .step_time import step_parts


def prefill_plan(plan: ServePlan) -> ServePlan:
    """The prefill pool's replicas as a layout: prefill_attention_dp groups of prefill_tp GPUs each (default 1), pp
    1, experts over prefill_ep (default the largest ep dividing both the decode ep and prefill_tp x
    prefill_attention_dp); the plan's MoE exchange and two-batch overlap where the pool has attention groups for
    them to act between (prefill_attention_dp > 1), else none (as `resolve_serve` requires of any plan)."""
    tp, adp, ep = plan.prefill_pool
    groups = {} if adp > 1 else {"moe_a2a": None, "two_batch_overlap": False}
    return plan.model_copy(update=groups | {
        "tp": tp, "attention_dp": adp, "pp": 1, "dp": plan.prefill_dp, "ep": ep, "prefill_dp": None, "prefill_tp": None,
        "prefill_attention_dp": None, "prefill_ep": None, "gpus": plan.prefill_gpus, "concurrency": None})


def kv_transfer(model: ModelConfig, system: System, plan: ServePlan) -> tuple[float, float, float]:
    """(seconds to move one prompt's KV cache, requests/s the links carry at most, the prompt's KV bytes in all):
    each prefill GPU sends its shard and each decode GPU receives its own (`kv_bytes_per_token` of each layout:
    heads replicated past the kv heads included), all at once, on the tier the deployment spans; the slower end
    sets the time (module docstring)."""
    I = plan.input_len
    send, recv = (kv_bytes_per_token(model, layout) * I for layout in (prefill_plan(plan), plan))
    tier = p2p_tier(system, 1, plan.gpus)  # the span of the whole deployment
    seconds = float(p2p_time(max(send, recv), tier.bandwidth, tier.latency))
    # every prefill attention group sends its own prompts' caches, every decode attention group receives its own
    rate = min(plan.prefill_dp * plan.prefill_pool[1] * tier.bandwidth / send,
               plan.dp * plan.attention_dp * tier.bandwidth / recv)
    whole = kv_bytes_per_token(model, plan.model_copy(update={"tp": 1, "pp": 1})) * I
    return seconds, rate, whole


def infer_disaggregated(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack) -> ServeEstimate:
    """The estimate of a disaggregated deployment (module docstring); InputError where a pool does not fit."""
    I, O = plan.input_len, plan.output_len
    if O < 2:
        raise InputError(f"output_len = {O} with a prefill pool (prefill_dp = {plan.prefill_dp}): the prefill makes "
                         "every token and the decode pool none; valid: output_len >= 2, or no prefill_dp")
    pplan = prefill_plan(plan)
    mem, pmem = memory(model, system, plan, stack), memory(model, system, pplan, stack)
    for name, layout, m, tokens in (("decode", plan, mem, I + O), ("prefill", pplan, pmem, I)):
        if m["kv_cache"] < sequence_kv_bytes(model, layout, tokens, stack):
            bigger = ("prefill_tp" + (", or prefill_ep over more prefill_attention_dp" if model.moe else "")
                      if name == "prefill" else "tp or pp" + (", or ep over more attention_dp" if model.moe else ""))
            lower = {"bf16": "fp8 or fp4", "fp16": "fp8 or fp4", "fp8": "fp4"}.get(layout.precision)
            raise InputError(f"{model.name}: the {name} pool's replicas (tp={layout.tp} "
                             + (f"attention_dp={layout.attention_dp} ep={layout.ep} " if layout.attention_dp > 1
                                else "") + f"pp={layout.pp}) do not hold the weights and one sequence's KV cache on "
                             f"{system.name} ({m['weights'] / GIB:.1f} GiB of weights per GPU of "
                             f"{m['capacity'] / GIB:.1f}); valid: a larger {bigger}" + (f", or {lower}" if lower else ""))
    batch, bound = replica_batch(model, plan, stack, mem["kv_cache"], prefill_in_step=False)

    def decode_step(b: float) -> dict[str, float]:
        return step_parts(model, system, plan, stack, decode=b, context=I + O / 2, prefill_seqs=0, prompt=0,
                          logits=b)

    def decode_rate(b: float) -> float:  # a request's decode steps: (O - 1) / tokens_per_step (ServePlan.life_steps)
        return plan.dp * b / ((plan.life_steps - 1) * sum(decode_step(b).values()))

    # prompts a prefill step runs: the token budget, the stack's max_batch, and the KV cache they fill until sent,
    # each of the replica's attention groups (memory per GPU: one group's share)
    n = pplan.attention_dp * max(1, min(math.floor(stack.max_num_tokens / I), stack.max_batch,
                                        math.floor(pmem["kv_cache"] / sequence_kv_bytes(model, pplan, I, stack))))
    prefill = step_parts(model, system, pplan, stack, decode=0, context=0, prefill_seqs=n, prompt=I, logits=n)
    t_p = sum(prefill.values())
    t_kv, kv_rate, kv_bytes = kv_transfer(model, system, plan)
    rates = {f"the decode pool ({bound})": decode_rate(batch), "the prefill pool": plan.prefill_dp * n / t_p,
             "the KV transfer links": kv_rate}
    why, rate = min(rates.items(), key=lambda x: x[1])
    if not why.startswith("the decode pool"):  # the decode replicas hold only what the rate R feeds them
        lo, hi = 0.0, batch
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if decode_rate(mid) < rate else (lo, mid)
        batch = max(hi, 1e-9)
    step = decode_step(batch)
    tpot = sum(step.values()) / plan.tokens_per_step
    front = frontend_s(system, plan, stack, I)
    out = rate * O
    padp = f" attention_dp={pplan.attention_dp} ep={pplan.ep}" if pplan.attention_dp > 1 else ""
    notes = [f"disaggregated: {plan.prefill_dp} prefill replica(s) of tp={pplan.tp}{padp} ({plan.prefill_gpus} GPUs, "
             f"{n} prompt(s) a step) and {plan.dp} decode replica(s) of tp={plan.tp}"
             + (f" attention_dp={plan.attention_dp}" if plan.attention_dp > 1 else "") + f" pp={plan.pp}; requests/s bound "
             f"by {why}: " + ", ".join(f"{k} {v:,.2f}" for k, v in rates.items()),
             f"KV transfer: {kv_bytes / 2**20:,.1f} MiB a prompt, {t_kv * 1e3:.2f} ms on "
             f"{p2p_tier(system, 1, plan.gpus).name}",
             f"decode batch per replica: {batch:,.1f} sequences, each holding {tokens_held(plan, stack):g} KV tokens"]
    per_token = kv_bytes_per_token(model, plan)
    return ServeEstimate(
        model=model.name, hardware=system.name, plan=plan, fits_in_memory=True, batch=plan.dp * batch,
        kv_cache_tokens=plan.attention_dp * mem["kv_cache"] / per_token, output_tokens_per_s=out, total_tokens_per_s=out * (I + O) / O,
        requests_per_s=rate, ttft_s=front + t_p + t_kv, tpot_s=tpot, e2e_s=front + t_p + t_kv + (O - 1) * tpot,
        request_s={"frontend": front, "wait": 0.0, "prefill": t_p, "kv_transfer": t_kv},
        memory_gib={k: v / GIB for k, v in mem.items() if k != "short"} | {
            "kv_in_use": batch / plan.attention_dp * sequence_kv_bytes(model, plan, tokens_held(plan, stack), stack)
            / GIB,
            "total": (mem["weights"] + mem["activations"] + mem["runtime"] + mem["kv_cache"]) / GIB,
            "prefill_pool_weights": pmem["weights"] / GIB},
        decode_step_s=step, prefill_s=prefill, kv_transfer_s=t_kv, notes=notes)
