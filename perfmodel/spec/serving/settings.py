"""The engine settings a serving plan overrides for one run, and its redundant experts.

A `ServePlan` may set the scheduler's limits its stack profile gives by default (`max_batch`: vLLM max_num_seqs,
SGLang max_running_requests, TensorRT-LLM max_batch_size, ATOM max_num_seqs; `max_num_tokens`: vLLM
max_num_batched_tokens, SGLang chunked_prefill_size, TensorRT-LLM max_num_tokens, ATOM max_num_batched_tokens;
`chunked_prefill`), and EPLB's redundant expert slots (`redundant_experts`: SGLang --ep-num-redundant-experts, vLLM
--num-redundant-experts with --enable-eplb). `with_settings` is the one place the overrides are applied: every
caller that prices a plan takes its stack from `serve.host_time.plan_stack`, the profile with them. This module
imports nothing of spec.serving.schema (which imports it): the types below are its ServePlan and ServingStack.
"""

from __future__ import annotations

from ...errors import InputError, values_text
from ..model.config import ModelConfig

# the settings a plan overrides, each a field of both ServePlan (None: the stack's) and ServingStack
STACK_SETTINGS = ("max_batch", "max_num_tokens", "chunked_prefill")
SETTINGS_DOC = {  # the fields' descriptions (spec.serving.schema's ServePlan and ServingStack)
    "max_batch": "sequences a step runs at most (vLLM max_num_seqs, SGLang max_running_requests, TensorRT-LLM "
                 "max_batch_size, ATOM max_num_seqs); None: the stack's (serve_settings.with_settings)",
    "max_num_tokens": "tokens a step runs at most (vLLM max_num_batched_tokens, SGLang chunked_prefill_size, "
                      "TensorRT-LLM max_num_tokens, ATOM max_num_batched_tokens); None: the stack's",
    "chunked_prefill": "split a prompt longer than the step's token budget over steps (false: prefill it whole in one "
                       "step); None: the stack's",
    "stack_chunked_prefill": "a prompt past the step's token budget is split over steps (false: prefilled whole in one "
                             "step, at most max_num_tokens)",
    "redundant_experts": "EPLB's redundant expert slots beside a MoE model's experts (SGLang ep_num_redundant_experts, "
                         "vLLM num_redundant_experts): (experts + N) / ep slots a rank"}


LISTED_UP_TO = 64  # how many redundant-expert counts a refusal lists the valid ones of (at least ep)


def with_settings(stack: ServingStack, plan: ServePlan) -> ServingStack:
    """`stack` (the plan's profile) with the plan's own max_batch, max_num_tokens and chunked_prefill where it sets
    them."""
    update = {k: getattr(plan, k) for k in STACK_SETTINGS if getattr(plan, k) is not None}
    return stack.model_copy(update=update) if update else stack


def expert_slots(model: ModelConfig, plan: ServePlan) -> int:
    """Expert slots of each MoE layer over the replica's ep ranks: the model's experts and the plan's redundant ones
    (SGLang's num_physical_experts = num_logical_experts + ep_num_redundant_experts, python/sglang/srt/eplb/
    expert_location.py); 0 for a dense model."""
    return 0 if model.moe is None else model.moe.n_experts + plan.redundant_experts


def check_settings(plan: ServePlan, model: ModelConfig, stack: ServingStack) -> None:
    """Refuse, in one line naming the field, a stack_version the profile lacks (`ServingStack.release`), redundant
    experts no engine places (a dense model, ep 1, experts +
    redundant not a multiple of ep: SGLang asserts num_physical_experts % ep_size == 0) and a prompt that cannot be
    prefilled whole where chunked prefill is off (longer than max_num_tokens: ATOM's scheduler rejects it, vLLM's
    and TensorRT-LLM's never schedule it)."""
    stack.release(plan.stack_version)  # InputError for a release the profile lacks
    n = plan.redundant_experts
    if n and model.moe is None:
        raise InputError(f"redundant_experts = {n} for {model.name}, which has no experts; valid: redundant_experts 0")
    if n and plan.ep == 1:
        raise InputError(f"redundant_experts = {n} at ep = 1: redundant experts are copies of busy experts on other "
                         "expert-parallel ranks (EPLB); valid: redundant_experts 0, or ep > 1")
    pools = [("ep", plan.ep)] + ([("prefill_ep", plan.prefill_ep)] if plan.prefill_ep else [])
    for name, ep in pools:  # the decode replicas' and a prefill pool's experts both hold the slots
        if n and expert_slots(model, plan) % ep:
            e, most = model.moe.n_experts, max(LISTED_UP_TO, ep)
            ok = [k for k in range(most + 1) if (e + k) % ep == 0]
            raise InputError(f"redundant_experts = {n}: experts + redundant = {e} + {n} = {e + n} is not a multiple "
                             f"of {name} = {ep} (each rank holds (experts + redundant) / {name}); valid "
                             f"redundant_experts up to {most}: {values_text(ok)}")
    if not stack.chunked_prefill and plan.input_len > stack.max_num_tokens:
        raise InputError(f"input_len = {plan.input_len} exceeds max_num_tokens = {stack.max_num_tokens} with "
                         "chunked_prefill off (a prompt is prefilled whole in one step); valid: max_num_tokens >= "
                         f"{plan.input_len}, or chunked_prefill on")
