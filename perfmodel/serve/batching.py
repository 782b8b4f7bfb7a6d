"""Continuous batching in steady state, and the serving estimate (`infer`).

A replica keeps B sequences in flight (the asked concurrency, or as many as its KV cache and the stack allow).
Every step each of them gains one token, and to keep B in flight B / O new requests join per step on average
(each lives O steps), so the steps also run B x I / O prompt tokens (in-flight batching with chunked prefill,
Yu et al. 2022 "Orca", Sec. 3; Agrawal et al. 2024 "Sarathi-Serve", Sec. 4); a sequence's first token comes
from its prefill step, the other O - 1 from decode steps. The mean step t (`steady_step`) blends the steps that
carry a prompt chunk with those that decode only, each priced as the engine runs it (`step_time.step_parts`: its
graphs and launches, `host_time`); where the engine runs prompts alone their steps add to the decodes'. Then

    TPOT = t;   output tokens/s = dp x B / t;   requests/s = dp x B / (O t);   total tokens/s = (I + O) / O x that
    TTFT = front end + wait for the step in flight + ceil(I / c) steps carrying c of the prompt's tokens
           (`first_token`), never less than the prompt's prefill alone
    end-to-end latency = TTFT + (O - 1) x TPOT

With speculative decoding (`ServePlan.speculative`) a decode step runs q = draft_tokens + 1 tokens per sequence
and its draft, and a sequence gains a = tokens_per_step tokens: a request lives n = 1 + (O - 1) / a steps (one of
them its prefill), and TPOT = t / a, output tokens/s = dp x B x O / (n t); without it a = 1, n = O.

The compute-bound kernels of every step run at the clock the power limit sustains over the steady cycle
(`power_mix.mix_clock` of the mean step's kinds of time, its prefill and decode steps weighted by their share): the
limit averages the board's power over a window far longer than a step, so a prompt's prefill among decodes is not
slowed as a GEMM loop is; where the cycle is over the limit, TTFT's prefill and the decode step both run at its
clock (the `clock` part of their breakdowns).

The prefill breakdown reported beside it is one request's prompt alone on an idle replica, at the cycle's clock.
"""

from __future__ import annotations

import math

from ..errors import InputError
from ..spec.hardware.system import System, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.model.catalogue import load_model
from ..spec.serving.files import ServePrediction
from ..spec.serving.schema import ServeEstimate, ServePlan, ServingStack, resolve_serve
from .host_time import arrival_wait_steps, frontend_s, host_note, host_of, plan_stack, release_of
from .wide_ep import ep_note
from .kv_cache import GIB, kv_bytes_per_token, memory, replica_batch, sequence_kv_bytes, tokens_held
from .power_mix import add_mix, mix_clock
from .step_time import step_parts


def infer(model: ModelConfig | str, hardware: System | str, plan: ServePlan | dict) -> ServeEstimate:
    """Predict serving `model` on `hardware` with `plan` (a ServePlan or its fields): memory, the steady batch,
    TTFT, TPOT, throughput. InputError for a layout or lengths no engine runs, or a model that does not fit."""
    model, system = load_model(model), load_hardware(hardware)
    plan = ServePlan.parse(plan, where="serving plan") if isinstance(plan, dict) else plan
    plan = resolve_serve(plan, model)
    stack = plan_stack(plan)  # the profile with the plan's own scheduler settings
    if ("bf16" if plan.precision == "w4a16" else plan.precision) not in system.efficiency.matmul_max:
        raise InputError(f"precision = {plan.precision}: {system.name} has no matmul rate for it; valid: "
                         f"{', '.join(system.efficiency.matmul_max)}")
    if plan.disaggregated:
        from .disaggregated import infer_disaggregated

        return infer_disaggregated(model, system, plan, stack)
    mem = memory(model, system, plan, stack)
    per_token = kv_bytes_per_token(model, plan)
    kv_tokens = plan.attention_dp * mem["kv_cache"] / per_token
    one_seq = sequence_kv_bytes(model, plan, plan.input_len + plan.output_len, stack)
    fits = mem["kv_cache"] >= one_seq
    if not fits:
        need = (mem["weights"] + mem["activations"] + mem["runtime"] + one_seq) / GIB
        adp = f" attention_dp={plan.attention_dp}" if plan.attention_dp > 1 else ""
        raise InputError(f"{model.name} does not fit on {system.name} with tp={plan.tp}{adp} pp={plan.pp}: "
                         f"{need:.1f} GiB per GPU for weights ({mem['weights'] / GIB:.1f}), activations, runtime and "
                         f"one sequence's KV cache, of {mem['capacity'] / GIB:.1f} GiB; valid: more tp or pp, "
                         "fp8/fp4 weights, or shorter sequences")
    batch, bound = replica_batch(model, plan, stack, mem["kv_cache"])
    I, O, n, a = plan.input_len, plan.output_len, plan.life_steps, plan.tokens_per_step
    mix = {}
    step = steady_step(model, system, plan, stack, batch, 1.0, mix)
    clock = mix_clock(system, mix)  # the steady cycle's, under the power limit (module docstring)
    if clock < 1.0:
        step = steady_step(model, system, plan, stack, batch, clock)
    t = sum(step.values())
    alone = step_parts(model, system, plan, stack, decode=0, context=0, prefill_seqs=1, prompt=I, logits=1,
                       clock=clock)
    request = first_token(model, system, plan, stack, batch, t, alone, clock)
    ttft = sum(request.values())
    out = plan.dp * batch * O / (n * t)
    notes = [f"batch per replica: {batch:g} sequences, bound by {bound}; each holds {tokens_held(plan, stack):g} "
             f"KV tokens ({'whole sequence reserved' if stack.reserves_whole_sequence else 'allocated as it grows'})",
             f"KV cache: {per_token / 1024:.1f} KiB per token per GPU ({plan.kv}), {kv_tokens:,.0f} tokens per replica "
             + ("(each GPU holds its shard of every token)" if plan.attention_dp == 1 else
                f"({plan.attention_dp} attention groups, each GPU holding its shard of its group's tokens)")]
    notes += request_notes(system, plan, stack)
    ep = ep_note(model, plan, stack, batch * plan.decode_queries)
    notes += [ep] if ep else []
    if plan.speculative is not None:
        s = plan.speculative
        notes.append(f"speculative decoding ({s.method}): {s.draft_tokens} draft token(s) a step, verified in one "
                     f"forward of {plan.decode_queries} tokens per sequence; {a:.2f} tokens a step ("
                     + (f"acceptance rate {s.acceptance_rate:g} assumed, none stated: {s.assumed}" if s.assumed else
                        f"stated acceptance rate {s.acceptance_rate:g}" if s.acceptance_rate is not None else
                        "stated acceptance length") + f"), so TPOT is the step's {1e3 * t:.2f} ms / {a:.2f}")
    return ServeEstimate(
        model=model.name, hardware=system.name, plan=plan, fits_in_memory=fits, batch=plan.dp * batch,
        kv_cache_tokens=kv_tokens, output_tokens_per_s=out, total_tokens_per_s=out * (I + O) / O,
        requests_per_s=out / O, ttft_s=ttft, tpot_s=t / a, e2e_s=ttft + (O - 1) * t / a, request_s=request,
        memory_gib={k: v / GIB for k, v in mem.items() if k != "short"} | {
            # per GPU: its attention group's share of the replica's sequences
            "kv_in_use": batch / plan.attention_dp * sequence_kv_bytes(model, plan, tokens_held(plan, stack), stack)
            / GIB,
            "total": (mem["weights"] + mem["activations"] + mem["runtime"] + mem["kv_cache"]) / GIB},
        decode_step_s=step, prefill_s=alone, notes=notes)


def prompt_chunk(plan: ServePlan, stack: ServingStack, batch: float) -> float:
    """Prompt tokens of one request a step carries: the token budget left by the decode tokens of its attention
    group where the engine mixes prompts with decodes (chunked prefill), the whole budget where prompts run alone
    (`EngineRelease.mixed_prefill`); at most the prompt. Where chunked prefill is off (`ServingStack.chunked_prefill`)
    the whole prompt."""
    if not stack.chunked_prefill:
        return float(plan.input_len)
    rel = release_of(stack, plan)
    decodes = batch * plan.decode_queries / plan.attention_dp if rel is None or rel.mixed_prefill else 0.0
    return min(float(plan.input_len), max(stack.max_num_tokens - decodes, 1.0))


def chunk_step(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, batch: float, chunk: float,
               mixed: bool, clock: float | None = None, mix: dict | None = None) -> dict[str, float]:
    """A step carrying one prompt chunk of `chunk` tokens, by part (`step_time.step_parts`, `clock` and `mix` as its):
    beside the `batch` decodes at the mean context where the engine mixes them (`mixed`: EngineRelease.mixed_prefill;
    they and the chunk each sample a token), else alone (its one token)."""
    if not mixed:
        return step_parts(model, system, plan, stack, decode=0, context=0, prefill_seqs=1, prompt=chunk, logits=1,
                          clock=clock, mix=mix)
    return step_parts(model, system, plan, stack, decode=batch, context=plan.input_len + plan.output_len / 2,
                      prefill_seqs=1, prompt=chunk, logits=batch + 1, clock=clock, mix=mix)


def steady_step(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, batch: float,
                clock: float | None = None, mix: dict | None = None) -> dict[str, float]:
    """The mean step of a replica keeping `batch` sequences in flight (module docstring), by part. Each request
    lives n = life_steps steps and its prompt takes k = ceil(I / chunk) steps (`prompt_chunk`), so B k / n of the
    steps carry a prompt chunk. Where every step carries one (B k / n >= 1) the prompts' tokens are spread over the
    steps, B / n prompts each beside B (n - 1) / n decodes; else a share f = B k / n of the steps carries one chunk
    beside the B decodes and the rest decode only, each priced as the engine runs it (graphs, launches:
    `step_time.step_parts`), the mean f x prompt step + (1 - f) x decode step. Where the engine runs prompts alone
    (`EngineRelease.mixed_prefill` false) a decode step of B sequences is followed by B k / n prompt-only chunk
    steps on average, and a client's decode sees both: their sum. `clock` as `step_time.step_parts`'s; where `mix` is
    a dict, the cycle's kinds of time per mean step are added into it, each step's weighted as the mean weights its
    seconds (`power_mix.served_mix`)."""
    I, O, n = plan.input_len, plan.output_len, plan.life_steps
    rel, ctx = release_of(stack, plan), I + O / 2
    chunk = prompt_chunk(plan, stack, batch)
    share = batch * math.ceil(I / chunk) / n
    dmix, cmix = ({}, {}) if mix is not None else (None, None)
    if rel is not None and not rel.mixed_prefill:
        decode = step_parts(model, system, plan, stack, decode=batch, context=ctx, prefill_seqs=0, prompt=0,
                            logits=batch, clock=clock, mix=dmix)
        alone = chunk_step(model, system, plan, stack, batch, chunk, False, clock, cmix)
        if mix is not None:
            add_mix(add_mix(mix, dmix), cmix, share)
        return {k: decode[k] + share * alone.get(k, 0.0) for k in decode | alone}
    if rel is None or share >= 1:  # a sequence's prefill step (which samples its first token), n - 1 decode steps
        return step_parts(model, system, plan, stack, decode=batch * (n - 1) / n, context=ctx,
                          prefill_seqs=batch / n, prompt=I, logits=batch, clock=clock, mix=mix)
    decode = step_parts(model, system, plan, stack, decode=batch, context=ctx, prefill_seqs=0, prompt=0,
                        logits=batch, clock=clock, mix=dmix)
    carry = chunk_step(model, system, plan, stack, batch, chunk, True, clock, cmix)
    if mix is not None:
        add_mix(add_mix(mix, cmix, share), dmix, 1 - share)
    return {k: share * carry.get(k, 0.0) + (1 - share) * decode.get(k, 0.0) for k in decode | carry}


def first_token(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, batch: float,
                step: float, alone: dict[str, float], clock: float | None = None) -> dict[str, float]:
    """One request's time to first token by part, joining a replica whose `batch` sequences run steps of `step`
    seconds: its front end (`host_time.frontend_s`); the wait for the step in flight where the replica is busy
    (more than one sequence: `host_time.arrival_wait_steps` x step); its prefill, ceil(I / chunk) steps carrying a
    chunk (`prompt_chunk`) beside the decodes, or alone where the engine runs prompts alone, never less than the
    prompt's prefill alone (`alone`'s parts); `clock` as `step_time.step_parts`'s."""
    I = plan.input_len
    rel, chunk = release_of(stack, plan), prompt_chunk(plan, stack, batch)
    carry = chunk_step(model, system, plan, stack, batch, chunk, rel is None or rel.mixed_prefill, clock)
    prefill = max(math.ceil(I / chunk) * sum(carry.values()), sum(alone.values()))
    wait = arrival_wait_steps(stack, plan) * step if batch > 1 else 0.0
    return {"frontend": frontend_s(system, plan, stack, I), "wait": wait, "prefill": prefill}


def request_notes(system: System, plan: ServePlan, stack: ServingStack) -> list[str]:
    """Where the request path's host and release come from."""
    rel = release_of(stack, plan)
    if rel is None:
        return []
    host = host_of(system)
    line = (f"request path: {stack.name} {rel.since}+ defaults (prefill graphs {rel.prefill_graphs} up to "
            f"{rel.graph_max_tokens} tokens, decode graphs {rel.decode_graphs}, "
            f"{'asynchronous' if rel.async_scheduling else 'synchronous'} scheduling, prompts "
            f"{'mixed with decodes' if rel.mixed_prefill else 'alone'}), host {host.name} (speed {host.speed:.2f})")
    note = host_note(system)
    return [line] + ([note] if note else [])


def static_batch(model: ModelConfig | str, hardware: System | str, plan: ServePlan) -> ServePrediction:
    """The executor's way of serving (`perfmodel.execute.inference`), priced by the same step: each replica takes
    B = concurrency / dp prompts at once, prefills them in one forward (logits of each prompt's last token), then
    runs O - 1 decode steps of B tokens at contexts I + 1 .. I + O - 1, whose mean step is the step at I + O / 2
    (decode attention is linear in the context, everything else constant). InputError without a concurrency that
    the replicas split evenly."""
    model, system = load_model(model), load_hardware(hardware)
    plan = resolve_serve(plan, model)
    if plan.concurrency is None or plan.concurrency % plan.dp:
        raise InputError(f"concurrency = {plan.concurrency} for a static batch over dp = {plan.dp} replicas; valid: "
                         f"a multiple of {plan.dp} (sequences per replica x dp)")
    if plan.speculative is not None:
        raise InputError(f"speculative = {plan.speculative.method} for a static batch: the executor decodes one "
                         "token a step; valid: no speculative decoding")
    if plan.output_len < 2 or plan.disaggregated:
        raise InputError(f"output_len = {plan.output_len}, prefill_dp = {plan.prefill_dp} for a static batch: it is "
                         "prefilled and decoded by the same replicas; valid: output_len >= 2 and no prefill pool")
    stack, batch, I, O = plan_stack(plan), plan.concurrency // plan.dp, plan.input_len, plan.output_len
    # the whole batch's prompts run in one forward: activations for B x I tokens, KV for B sequences of I + O
    mem = memory(model, system, plan, stack.model_copy(update={"max_num_tokens": batch * I}))
    need = batch * sequence_kv_bytes(model, plan, I + O, stack)
    if mem["kv_cache"] < need:
        raise InputError(f"{model.name} with a static batch of {batch} sequences of {I} + {O} tokens per replica does "
                         f"not fit on {system.name} (tp={plan.tp}): {need / GIB:.1f} GiB of KV cache per GPU, "
                         f"{max(mem['kv_cache'], 0) / GIB:.1f} GiB free after weights and activations; valid: a "
                         "smaller concurrency, shorter sequences, or more tp")
    prefill = step_parts(model, system, plan, stack, decode=0, context=0, prefill_seqs=batch, prompt=I, logits=batch)
    decode = step_parts(model, system, plan, stack, decode=batch, context=I + O / 2, prefill_seqs=0, prompt=0,
                        logits=batch)
    return ServePrediction(prefill_s=sum(prefill.values()), decode_s=sum(decode.values()), prefill_parts=prefill,
                           decode_parts=decode)
