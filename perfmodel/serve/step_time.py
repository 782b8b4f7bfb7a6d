"""Seconds of one serving step on a replica: the forward pass of the tokens the step runs, priced by the training
side's kernels and collectives (`perfmodel.cost`: measured GEMM and attention tables where the part has them,
the datasheet elsewhere; NCCL tiers for the tensor-parallel all-reduces).

A step runs `decode` sequences one token each, at a mean context of `context` keys, and `prefill` prompt tokens
of `prefill_seqs` sequences (chunked prefill and in-flight batching mix them in one step: TensorRT-LLM, vLLM,
SGLang). Its GEMMs see all the step's tokens as their rows, so one GEMM prices both regimes: memory-bound at a
few rows (the weights read once), compute-bound at many (Kundu et al. 2024, Sec. 5; Pope et al. 2022, Sec. 3).
Decode attention reads each sequence's KV cache once per token: memory-bound, at the larger of its bytes over
the HBM rate and its FLOPs over the attention rate. Prefill attention is the causal flash kernel, as in
training. With pp stages the step's sequences run as pp micro-batches through the stages (TensorRT-LLM's
pipeline parallelism): n_layers layers at tokens / pp, and pp stage boundaries each way.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from ..cost.comm.collectives import group_collective, p2p_tier, p2p_time
from ..cost.compute.kernel_time import flash_attention_time, shared_core_speedup
from ..cost.compute.kernel_lookup import allreduce_table_time, decode_table_time
from ..cost.compute.attention_kinds import attention_head_width, delta_rule_flops, indexer_flops, indexer_rate
from ..cost.compute.kernels import (
    ACT_BYTES, ELEMENTWISE_BYTES, Device, attention_table_op, mean_keys, model_mean_keys, residual_bytes,
)
from ..spec.model.global_attention import attention_parts
from ..spec.hardware.system import System
from ..spec.hardware.kernel_tables import allreduce_curves, decode_curves
from ..spec.model.config import ModelConfig
from ..spec.serving.schema import (
    KV_BYTES, W4_BYTES, ServePlan, ServingStack, draft_model, four_bit_weights, fusion_inputs,
)
from ..spec.serving.settings import expert_slots
from ..spec.stack.profile import EXECUTOR_STACK, load_stack
from .gemm_quant import served_gemm_s
from .moe_kernels import moe_table_s
from .wide_ep import active_experts, busiest_share, moe_exchange_s, two_batch_parts
from .host_time import exposed_launch_s, launch_host_s, measured_serving, overhead_part, schedule_s
from .kv_cache import indexer_key_bytes, layer_kv_bytes, state_bytes_per_sequence
from .kv_offload import kv_offload_s
from .power_mix import add_mix, served_clock, served_mix

# Bytes per element the memory-bound kernels of one layer move in inference: the forward figures of training's
# (cost.compute.kernels.ELEMENTWISE_BYTES, residual_bytes without dropout)
NORM_B, ROPE_B, GLU_B = (ELEMENTWISE_BYTES[k][0] for k in ("norm", "rope", "swiglu"))
RESIDUAL_B = residual_bytes(False)[0]


def device(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack) -> Device:
    """The training side's `Device` for this serving layout: its GEMM precision and the serving stack's
    attention kernel (a training stack profile carries the kernel fields the Device reads: attention_native and
    attention_speed 1, the part's own kernel where native, else FlashAttention-2). It prices the kernels at the
    tables' clock (the accelerator's power model left out): the clock the power limit leaves is applied after, from
    the run's sustained mix (`mix_clock`) or the step's own (`served_clock`), never a compute-bound loop's."""
    kernels = load_stack("plain-torch").model_copy(
        update={"name": stack.name, "attention_native": stack.attention_native, "attention_speed": 1.0})
    serving = measured_serving(system, stack)
    eff = system.efficiency
    if serving is not None and serving.sustained_fraction is not None:  # what a served prefill keeps (calibrate),
        eff = eff.model_copy(update={"sustained_fraction": serving.sustained_fraction})  # at this machine's clocks
    system = system.model_copy(update={"efficiency": eff,
                                       "accelerator": system.accelerator.model_copy(update={"power": None})})
    # W4A16 computes in bf16: its 4-bit GEMMs are priced apart (`w4a16_gemm_s`), the rest as bf16
    precision = "bf16" if plan.precision == "w4a16" else plan.precision
    return Device(model, system, SimpleNamespace(stack=kernels, precision=precision, attention="flash",
                                                 moe_table=stack.moe_kernel == "measured_table"))


def _gemm(dev: Device, m, n, k, batch=1, precision=None) -> float:
    """`batch` GEMMs (m, n, k) as the engine runs them: the part's price (`Device.gemm_priced`), an fp8 one's
    dynamic activation cast replaced by the checkpoint's static one (`gemm_quant.served_gemm_s`)."""
    if m <= 0:
        return 0.0
    prec = precision or dev.plan.precision
    return served_gemm_s(dev, float(dev.gemm_priced(np.maximum(m, 1.0), n, k, batch, prec)[0]), m, n, k, batch, prec)


def w4a16_gemm_s(dev: Device, m, n, k, batch=1) -> float:
    """`batch` GEMMs (m, n, k) with 4-bit weights (W4_BYTES each, scales included) and bf16 activations, as the
    mixed-precision kernels run them (Marlin, Frantar et al. 2024, arXiv 2408.11743, Sec. 4-5: the weights are
    dequantised in registers, so a small batch streams a quarter of the bf16 weight bytes, near the ideal 3.9x, and
    a large one computes at the bf16 GEMM rate): the slower of the bf16 FLOPs at the part's sustained bf16 peak x
    matmul_max, the tokens rounded up to Marlin's 16-row tensor-core tiles (m16n8k16 MMA), and the operands' bytes
    (bf16 activations and output, 4-bit weights) at the HBM rate. No measured W4A16 table prices these shapes."""
    if m <= 0:
        return 0.0
    m = max(float(m), 1.0)
    rows = 16.0 * math.ceil(m / 16.0)
    compute = batch * 2.0 * rows * n * k / matmul_rate(dev, "bf16")
    traffic = batch * (m * k * ACT_BYTES + k * n * W4_BYTES + m * n * ACT_BYTES)
    return float(max(compute, dev.memory(traffic)))


def layer_gemm_s(dev: Device, plan: ServePlan, tokens: float, own: float | None = None) -> float:
    """A mean layer's weight GEMMs on one GPU for `tokens` rows: qkv and output projections, then the dense MLP or
    (averaged over dense and MoE layers) the routed experts (the part's measured fused-MoE table, `moe_table_s`;
    else the router and one grouped GEMM over the local experts the tokens reach, `active_experts`, each on its
    share of the tokens x top_k / ep routed copies, split tp / ep ways) and the shared experts. The LM head stays
    bf16 (`step_parts`), as its weights do (`kv_cache.weight_bytes`). `tokens` are the replica's: with attention
    data parallelism a GPU runs the projections, dense MLPs and shared experts on its group's `own` tokens (default
    tokens / attention_dp), and the routed experts on all of them (gathered over the tp x attention_dp ranks,
    `ServePlan`)."""
    m, tp = dev.model, plan.tp
    g, own = 2 if m.gated else 1, tokens / plan.attention_dp if own is None else own
    four = four_bit_weights(m, plan.precision)  # W4A16: the routed experts' GEMMs (a dense model's: all)
    layer = (lambda *a: w4a16_gemm_s(dev, *a)) if four == "layers" else (lambda *a: _gemm(dev, *a))
    expert = (lambda *a: w4a16_gemm_s(dev, *a)) if four else (lambda *a: _gemm(dev, *a))
    t = layer(own, m.qkv_matmul_params() / m.hidden / tp, m.hidden) + layer(own, m.hidden, m.q_dim / tp)
    dense = layer(own, g * m.ffn_hidden / tp, m.hidden) + layer(own, m.hidden, m.ffn_hidden / tp)
    if m.moe is None:
        return t + dense
    e, slots = m.moe, expert_slots(m, plan)  # with EPLB's redundant experts: (experts + N) slots over ep ranks
    local = slots / plan.ep
    fe = e.expert_ffn_hidden / plan.etp
    share = busiest_share(tokens, e.top_k, plan.ep)  # the busiest rank's routed copies over the mean
    moe = moe_table_s(dev, plan, tokens * share) if dev.plan.moe_table else None  # the engine's own kernel, timed
    if moe is None:  # no measured curve of the engine's own fused-MoE kernel: the router, then one grouped kernel
        # over the experts the tokens reach, each on its share of the busiest rank's routed copies
        busy = max(active_experts(local, e.top_k, slots, tokens * share), 1.0)
        rows = tokens * share * e.top_k / plan.ep / busy
        moe = (_gemm(dev, tokens, e.n_experts, m.hidden) + grouped_expert_s(expert, rows, g * fe, m.hidden, busy)
               + grouped_expert_s(expert, rows, m.hidden, fe, busy))
    if e.shared_ffn_hidden:
        fs = e.shared_ffn_hidden / tp
        moe += _gemm(dev, own, g * fs, m.hidden) + _gemm(dev, own, m.hidden, fs)
    return t + (m.dense_layers() * dense + m.moe_layers() * moe) / m.n_layers


def grouped_expert_s(gemm, rows: float, n: float, k: float, experts: float) -> float:
    """Seconds of one grouped GEMM over `experts` experts, each (rows, n, k), as the engines' fused-MoE kernels run
    it: one launch whose tiles cover every expert's weights (vLLM/SGLang's Triton `fused_moe`, CUTLASS grouped GEMM,
    DeepGEMM's grouped contiguous layout). Its bytes (each expert's weights once, the routed rows) and FLOPs are
    those of one GEMM (rows, experts x n, k), which the measured GEMM table prices at those rows, so it is priced as
    that GEMM: not as `experts` separate small GEMMs each paying a launch and a small shape's efficiency."""
    return gemm(rows, experts * n, k)


def decode_attention_s(dev: Device, plan: ServePlan, seqs: float, context: float, windowed: bool = True,
                       queries: int = 1) -> float:
    """One layer's attention for `seqs` sequences of `queries` new tokens each (1; draft_tokens + 1 verifying a
    speculative draft) over `context` cached keys on one GPU: the KV bytes read once per sequence
    (`layer_kv_bytes` per key) over the HBM rate, or its FLOPs (4 x queries x keys x attention_core_dim x local
    heads / heads; MLA absorbed) over the spec's attention rate, whichever is longer; the measured table's time of
    one query in place of the bytes where the part has one. `windowed`: the stack runs the model's sliding windows
    (`ServingStack.sliding_window`). Sparse attention reads min(context, topk) keys' cache and, before it, every
    key's index key for its indexer (`decode_indexer_s`)."""
    m = dev.model
    # a mean layer: the full-attention layers' share of this, and the Gated DeltaNet layers' share of theirs
    full = m.full_attention_layers / m.n_layers
    delta = (1.0 - full) * decode_delta_s(dev, plan, seqs, queries)
    keys = context if m.sparse_attention is None else min(context, m.sparse_attention.topk)
    if m.windowed_layers and windowed:  # a sliding-window layer reads at most its window (mean over the layers)
        keys = (context * (m.n_layers - m.windowed_layers) + min(context, m.sliding_window) * m.windowed_layers) \
            / m.n_layers
    # MLA decodes absorbed: each head's query meets the cached latent and rotary key (kv_lora + rope wide) and
    # its output is the latent's width (kv_lora): DeepSeek-V2, Sec. 2.1.2 (W^UK absorbed into W^Q, W^UV into W^O)
    width = (m.n_heads * (2 * m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) / 2 if m.mla is not None
             else m.attention_core_dim)
    compute = 4.0 * queries * seqs * keys * width / plan.tp / (dev.bf16_peak * dev.system.efficiency.attention_max)
    measured = decode_table_s(dev, plan, seqs, context, windowed)
    if measured is not None:
        return full * (measured if queries == 1 else max(measured, compute)) + delta
    nbytes = seqs * keys * (layer_kv_bytes(m, plan) - indexer_key_bytes(m))
    return full * (max(dev.memory(nbytes), compute) + decode_indexer_s(dev, seqs, context, queries)) + delta


def decode_delta_s(dev: Device, plan: ServePlan, seqs: float, queries: int = 1) -> float:
    """One Gated DeltaNet layer's decode step for `seqs` sequences of `queries` tokens on one GPU: each sequence's
    state read and written back once (2 x `state_bytes_per_sequence` per layer) at the HBM rate, or the delta
    rule's FLOPs (`cost.compute.attention_kinds.delta_rule_flops`, no chunk, per token) over tp at attention_max of the bf16
    rate, whichever is longer; 0 without linear attention."""
    la = dev.model.linear_attention
    if la is None or seqs <= 0:
        return 0.0
    state = state_bytes_per_sequence(dev.model, plan) / np.ceil(la.layers / plan.pp)
    flops = delta_rule_flops(dev.model, seqs * queries, chunked=False) / plan.tp
    return max(dev.memory(2.0 * seqs * state), flops / (dev.bf16_peak * dev.system.efficiency.attention_max))


def decode_indexer_s(dev: Device, seqs: float, context: float, queries: int = 1) -> float:
    """One layer's sparse-attention indexer for `seqs` sequences of `queries` new tokens over `context` keys on one
    GPU: every key's index key read once per sequence (`indexer_key_bytes`) at the HBM rate, or its FLOPs
    (`indexer_flops`, the whole indexer on every rank) at attention_max of the FP8 rate, whichever is longer; 0
    without sparse attention."""
    m = dev.model
    if m.sparse_attention is None or seqs <= 0:
        return 0.0
    return max(dev.memory(seqs * context * indexer_key_bytes(m)),
               indexer_flops(m, seqs * queries, context) / indexer_rate(dev))


def decode_table_s(dev: Device, plan: ServePlan, seqs: float, context: float, windowed: bool) -> float | None:
    """One layer's decode attention from the part's measured decode-attention table (TensorRT-LLM's XQA/MMHA
    kernels with their fused RoPE and KV-cache write; AIConfigurator's generation_attention,
    `cost.compute.kernel_lookup.decode_table_time`) at the model's head dim, its query and kv heads on a GPU (kv heads
    replicated past tp) and the KV dtype; a windowed layer at its window (mean over the layers). Memory-bound (it
    reads the cache once), so not divided by sustained_fraction, as the GEMMs' traffic floor is not
    (`cost.compute.kernels.Device.gemm_priced`). None where the part has no table, for MLA, or heads it did not time
    (the roofline then, `decode_attention_s`)."""
    m = dev.model
    table = dev.system.accelerator.kernel_tables.get("decode_attention")
    if table is None or m.mla is not None or seqs <= 0:
        return None
    key = (int(KV_BYTES[plan.kv]), int(m.head_dim), m.n_heads // plan.tp, max(1, m.n_kv_heads // plan.tp))
    curves = decode_curves(table)
    full = decode_table_time(curves, key, seqs, context)
    if full is None:
        return None
    win = m.windowed_layers if windowed else 0
    if win:
        full = (full * (m.n_layers - win) + decode_table_time(curves, key, seqs, min(context, m.sliding_window))
                * win) / m.n_layers
    return full


def prefill_attention_s(dev: Device, plan: ServePlan, seqs: float, prompt: float, windowed: bool = True) -> float:
    """One layer's causal attention over `seqs` prompts of `prompt` tokens on one GPU: the flash kernel's FLOPs (4 x
    tokens x mean keys x head_dim x local heads) priced as training prices its forward (`cost.compute.kernels`: the measured
    attention table where the part has one for the stack's kernel, else the spec's attention_max)."""
    if seqs <= 0 or prompt <= 0:
        return 0.0
    m = dev.model
    full = m.full_attention_layers / m.n_layers  # a Gated DeltaNet layer runs the chunked delta rule instead
    delta = (1.0 - full) * delta_rule_flops(m, seqs * prompt) / plan.tp / (dev.bf16_peak * dev.system.efficiency
                                                                            .attention_max)
    head_dim, heads = attention_head_width(m), m.n_heads / plan.tp
    keys = float(model_mean_keys(m, prompt)) if windowed or m.sparse_attention else float(mean_keys(prompt, None))
    flops = 4.0 * seqs * prompt * keys * head_dim * heads
    eff = dev.system.efficiency
    # sparse attention's indexer over every earlier key (`indexer_flops`), whole on every rank, at the FP8 rate
    index = indexer_flops(m, seqs * prompt, float(mean_keys(prompt, None))) / indexer_rate(dev)
    grid = dev.attention_table()
    if grid is not None:
        return full * (float(attention_table_op(dev, grid, flops, head_dim, prompt, seqs * heads).fwd_s) + index) + delta
    return full * (float(flash_attention_time(flops, prompt, dev.bf16_peak, eff.attention_max, eff.attention_half_seq))
                   + index) + delta


def elementwise_s(dev: Device, plan: ServePlan, tokens: float) -> float:
    """One layer's memory-bound kernels on `tokens` rows: norms and residual adds over h, rotary over q + kv / tp,
    the gated activation over its width per token on the rank (bf16 elements x bytes per element)."""
    m = dev.model
    per = 2 * (NORM_B + RESIDUAL_B) * m.hidden + ROPE_B * (m.q_dim + m.kv_dim) / plan.tp
    if m.gated:  # the dense layers' f / tp; a MoE layer's top_k / ep routed copies of fe / etp (and shared experts)
        width = m.ffn_hidden / plan.tp
        if m.moe is not None:
            e = m.moe
            moe = e.top_k / plan.ep * e.expert_ffn_hidden / plan.etp + (e.shared_ffn_hidden or 0) / plan.tp
            width = (m.dense_layers() * width + m.moe_layers() * moe) / m.n_layers
        per += GLU_B * width
    return dev.memory(tokens * per)


def tp_allreduce_s(model: ModelConfig, system: System, plan: ServePlan, tokens: float,
                   own: float | None = None, stack: ServingStack | None = None) -> float:
    """A mean layer's tensor-parallel collectives for the replica's `tokens` rows: two all-reduces over the tp
    ranks (after attention and after the MLP; a MoE layer's experts over ep x tp / ep ranks combine in the same
    one, `allreduce_s`). With attention data parallelism each group all-reduces its `own` tokens (default
    tokens / attention_dp) after attention and after a dense MLP, and a MoE layer instead all-gathers every
    group's tokens over the tp x attention_dp ranks and reduce-scatters the experts' output back, or dispatches
    and combines the routed copies, as the plan's `moe_a2a` says (`wide_ep.moe_exchange_s`)."""
    if plan.attention_dp == 1:
        return 2 * allreduce_s(model, system, plan, tokens)
    own = allreduce_s(model, system, plan, tokens / plan.attention_dp if own is None else own)
    moe = moe_exchange_s(model, system, plan, stack, tokens, wire_bytes(system, plan))
    return own + (model.dense_layers() * own + model.moe_layers() * moe) / model.n_layers


def wire_bytes(system: System, plan: ServePlan) -> float:
    """Bytes per activation element that a tp collective or a pp send moves: bf16 (`cost.compute.kernels.ACT_BYTES`), but
    4 where the executor serves on a CPU, which computes and communicates in fp32 (execute.inference casts the
    model to bf16 on CUDA only)."""
    cpu_executor = plan.stack == EXECUTOR_STACK and system.accelerator.torch_device == "cpu"
    return 4.0 if cpu_executor else ACT_BYTES


def allreduce_s(model: ModelConfig, system: System, plan: ServePlan, tokens: float) -> float:
    """One all-reduce of tokens x hidden values (`wire_bytes` each) over the replica's tp ranks: the part's measured table of the
    serving engines' own one-/two-shot NVLink all-reduce where it timed that many GPUs within a node
    (`cost.compute.kernel_lookup.allreduce_table_time`; TensorRT-LLM, vLLM and SGLang run such custom all-reduces at decode
    sizes), else NCCL (`cost.comm.collectives.group_collective`: the system's tiers, as in training)."""
    if plan.tp == 1 or tokens <= 0:
        return 0.0
    size = tokens * model.hidden * wire_bytes(system, plan)
    table = system.accelerator.kernel_tables.get("allreduce")
    domain = system.tiers[0].domain_size
    if table is not None and (domain is None or plan.tp <= domain):  # the engines' own NVLink all-reduce, measured
        t = allreduce_table_time(allreduce_curves(table), plan.tp, size)
        if t is not None:
            return t
    return float(group_collective(system, "all_reduce", size, plan.tp, 1, plan.gpus))


def pp_send_s(model: ModelConfig, system: System, plan: ServePlan, tokens: float) -> float:
    """The pp stage boundaries one micro-batch of `tokens` rows crosses, each a send of tokens x hidden bf16
    (`cost.comm.collectives.p2p_time` on the tier the pipeline spans, `cost.comm.collectives.p2p_tier`)."""
    if plan.pp == 1:
        return 0.0
    tier = p2p_tier(system, plan.moe_ranks, plan.pp)  # a stage spans tp x attention_dp GPUs
    return plan.pp * float(p2p_time(tokens * model.hidden * wire_bytes(system, plan), tier.bandwidth,
                                    tier.latency))


def vocab_comm_s(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, tokens: float,
                 logits: float) -> float:
    """One micro-batch's collectives outside the layers, over the replica's tp ranks: the all-reduce of a
    vocabulary-split embedding's output (tokens x hidden, where `ServingStack.vocab_parallel_embedding`) and the
    all-gather of the column-split LM head's logits (logits x vocab) that sampling reads (`cost.comm.collectives.
    group_collective`); a step runs pp micro-batches (`step_parts`)."""
    if plan.tp == 1:
        return 0.0
    t = float(group_collective(system, "all_gather", logits * model.vocab * wire_bytes(system, plan), plan.tp, 1,
                               plan.gpus))
    if stack.vocab_parallel_embedding:
        t += allreduce_s(model, system, plan, tokens)
    return t


def token_parts(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack,
                tokens: float, own: float | None = None) -> dict[str, float]:
    """Seconds of a step's parts that depend on its tokens per pipeline micro-batch alone, through all layers:
    the GEMMs, the element-wise ops (at `cost.compute.kernel_time.shared_core_speedup` on a shared host), the layers' tp
    all-reduces and the pipeline sends. `tokens` are the replica's; with attention data parallelism the busiest
    group's element-wise work, projections and pipeline sends carry its `own` (default tokens / attention_dp)."""
    dev, L = device(model, system, plan, stack), model.n_layers
    speedup, own = _shared_speedup(system, plan), tokens / plan.attention_dp if own is None else own
    return {"gemm": L * layer_gemm_s(dev, plan, tokens, own) / speedup,
            "memory": L * elementwise_s(dev, plan, own) / speedup,
            "tp_comm": L * tp_allreduce_s(model, system, plan, tokens, own, stack),
            "pp_comm": pp_send_s(model, system, plan, own)}


def attention_part(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, seqs: float,
                   keys: float, decode: bool, queries: int = 1) -> float:
    """Seconds of all layers' attention for `seqs` sequences per pipeline micro-batch: decoding `queries` tokens
    each at `keys` keys (decode), or prefilling prompts of `keys` tokens; layers of two head shapes (Gemma 4's
    global ones, `spec.model.global_attention.attention_parts`) each shape on its share of the layers."""
    one, win = 0.0, stack.sliding_window
    for w, part in attention_parts(model):
        dev = device(part, system, plan, stack)
        one += w * (decode_attention_s(dev, plan, seqs, keys, win, queries) if decode
                    else prefill_attention_s(dev, plan, seqs, keys, win))
    return model.n_layers * one / _shared_speedup(system, plan)


def draft_job(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack) -> tuple | None:
    """(model, system, plan, stack) of the speculative draft's one layer (`spec.serving.schema.draft_model` in
    `ServePlan.draft_plan`'s layout), or None without speculative decoding."""
    s = plan.speculative
    return None if s is None else (draft_model(model, s), system, plan.draft_plan(), stack)


def draft_part(job: tuple, draft: tuple, decode: float, context: float, prefill_seqs: float, prompt: float,
               part=None, clock: float | None = None) -> float:
    """Seconds of a step's speculative draft (`ServePlan.speculative`) on the replica's last stage: draft_tokens
    passes, one after another, of its one layer (`draft`, `draft_job`, priced by `step_parts`: GEMMs, attention
    over the context, tp all-reduces, its head and the logits' gather) for the `decode` sequences, each pass after
    the fusion GEMM of its inputs (`fusion_part`: MTP every pass, EAGLE-3 on the first); and one pass over the
    step's prompt tokens, which build the draft's own KV cache. The stack's per-step overhead is the step's, not
    counted again. `part` and `clock` as `step_parts`'s."""
    s, part = job[2].speculative, part or _direct

    def run(**sizes) -> float:  # the draft's device time: its host is the step's
        parts = step_parts(*draft, **sizes, part=part, clock=clock)
        return sum(v for k, v in parts.items() if k not in HOST_PARTS)

    t = 0.0
    if decode > 0:
        fuse = part(fusion_part, *draft, decode, s.method)  # the method, not a width: the pricer grids numbers
        t += s.draft_tokens * (run(decode=decode, context=context, prefill_seqs=0, prompt=0, logits=decode)
                               + (fuse if s.method == "mtp" else 0.0)) + (fuse if s.method == "eagle" else 0.0)
    if prefill_seqs > 0:
        t += run(decode=0, context=0, prefill_seqs=prefill_seqs, prompt=prompt, logits=prefill_seqs)
    return t


def fusion_part(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, decode: float,
                method: str) -> float:
    """The draft's fusion GEMM for the `decode` sequences (a group's share with attention data parallelism): its
    `spec.serving.schema.fusion_inputs` -> hidden / tp, in the draft's precision."""
    return _gemm(device(model, system, plan, stack), decode / plan.attention_dp, model.hidden / plan.tp,
                 fusion_inputs(method, model.hidden))


def lm_head_part(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, logits: float) -> float:
    """Seconds of the LM head for `logits` sampling sequences (bf16, over the pp micro-batches)."""
    dev, pp = device(model, system, plan, stack), plan.pp
    return pp * _gemm(dev, logits / pp, model.vocab / plan.tp, model.hidden, precision="bf16") / _shared_speedup(system, plan)


def vocab_part(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, tokens: float,
               logits: float) -> float:
    """Seconds of the vocabulary's collectives (`vocab_comm_s`) over the pp micro-batches."""
    return plan.pp * vocab_comm_s(model, system, plan, stack, tokens, logits / plan.pp)


def step_gemm_flops(model: ModelConfig, plan: ServePlan, tokens: float, logits: float) -> float:
    """FLOPs one GPU's GEMMs run in a step of `tokens` tokens and `logits` sampled rows: 2 x the weights a token
    multiplies by in every layer (`ModelConfig.matmul_params_per_layer`) over the replica's tp x attention_dp GPUs
    of a stage, and the LM head's 2 x vocab x hidden / tp per sampled row."""
    per_gpu = plan.tp * plan.attention_dp * plan.pp
    return (2.0 * tokens * model.n_layers * model.matmul_params_per_layer() / per_gpu
            + 2.0 * logits * model.vocab * model.hidden / plan.tp)


def matmul_rate(dev: Device, precision: str) -> float:
    """FLOP/s a GEMM of `precision` reaches on its best shape: the device's sustained peak x matmul_max (the spec's
    measured best share of the datasheet)."""
    return dev.sustained_peak(precision) * dev.system.efficiency.matmul_max[precision]


def gemm_compute_s(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, tokens: float,
                   logits: float) -> float:
    """Seconds a step's GEMMs (`step_gemm_flops`) would take at their best rate (`matmul_rate`): the least of their
    time that is compute-bound."""
    dev = device(model, system, plan, stack)
    return step_gemm_flops(model, plan, tokens, logits) / matmul_rate(dev, dev.plan.precision)


def _shared_speedup(system: System, plan: ServePlan) -> float:
    host = system.shared_host
    return 1.0 if host is None else float(shared_core_speedup(1.0, plan.gpus, host.ranks, host.cores))


def _direct(fn, *args):
    return fn(*args)


HOST_PARTS = ("overhead", "launch", "schedule")  # a step's host parts (`step_parts`); the rest is the device's


def step_parts(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, decode: float,
               context: float, prefill_seqs: float, prompt: float, logits: float, part=_direct,
               draft: tuple | None = None, clock: float | None = None, mix: dict | None = None) -> dict[str, float]:
    """Seconds of one step by part: gemm, attention, memory (element-wise), tp_comm, pp_comm, lm_head, overhead,
    with speculative decoding draft (`draft_part`), with KV offload to host memory kv_offload (`kv_offload.
    kv_offload_s`); the kernels at the tables' clock, and `clock` the seconds the step's compute-bound kernels add
    where the power limit holds them below it: at `clock` (the run's sustained clock, `mix_clock`), or where it is
    None at the step's own (`served_clock`). Where `mix` is a dict, the step's kinds of time at the tables' clock
    (`served_mix`) are added into it. `decode` sequences at `context` keys, each running one
    token (draft_tokens + 1 verifying a draft: `ServePlan.decode_queries`, each sampled), `prefill_seqs` prompts
    of `prompt` tokens, `logits` sequences sampling; all over pp micro-batches (module docstring). On a host whose
    ranks share cores (`System.shared_host`, a CPU testbed) the compute parts run at
    `cost.compute.kernel_time.shared_core_speedup` with every rank of the job busy. `part(fn, model, system, plan, stack,
    *sizes)` evaluates each component (default: calls it; `serve.simulate.StepPricer` memoises them by size);
    `draft` is `draft_job`'s (default: made here)."""
    if plan.two_batch_overlap and decode + prefill_seqs > 1:  # two half micro-batches, comm behind compute
        return two_batch_parts(step_parts, model, system, plan, stack, decode, context, prefill_seqs, prompt,
                               logits, part, draft, HOST_PARTS, clock, mix)
    pp, job, a, q = plan.pp, (model, system, plan, stack), plan.attention_dp, plan.decode_queries
    tokens, logits = (decode * q + prefill_seqs * prompt) / pp, logits + decode * (q - 1)
    # An attention data-parallel group attends, samples and schedules its own 1 / attention_dp of the sequences,
    # and the groups meet at every MoE layer, so the step is the busiest group's: a prompt lands whole in one group
    # (at least one of the step's prompts where it carries any, else its even share).
    prompts = max(prefill_seqs / a, min(prefill_seqs, 1.0)) if a > 1 else prefill_seqs
    rank_tokens = (decode * q / a + prompts * prompt) / pp  # the busiest attention group's, per stage
    tok = part(token_parts, *job, tokens, rank_tokens)
    decode_attn = part(attention_part, *job, decode / pp / a, context, True, q)
    prefill_attn = part(attention_part, *job, prompts / pp, prompt, False)
    parts = {"gemm": tok["gemm"], "attention": decode_attn + prefill_attn, "memory": tok["memory"],
             "lm_head": part(lm_head_part, *job, logits / a),
             "tp_comm": tok["tp_comm"] + part(vocab_part, *job, tokens / a, logits / a), "pp_comm": tok["pp_comm"],
             "overhead": part(overhead_part, *job, decode / pp / a, context)}
    if plan.speculative is not None:
        parts["draft"] = draft_part(job, draft or draft_job(*job), decode, context, prefill_seqs, prompt, part, clock)
    # the clock under the power limit (the run's, else the step's own): its compute-bound kernels slowed by 1 / s,
    # the seconds it adds apart in the breakdown ("clock")
    compute = min(parts["gemm"] + parts["lm_head"], part(gemm_compute_s, *job, tokens * pp, logits))
    if mix is not None:
        add_mix(mix, served_mix(parts, compute, prefill_attn))
    s = served_clock(system, parts, compute, prefill_attn) if clock is None else clock
    if s < 1.0:
        parts["clock"] = (compute + prefill_attn) * (1.0 / s - 1.0)
    # the busiest rank's host: its launches outside graphs, which the device hides up to its own time, then the
    # step's scheduling and the admission of its prompts (`host_time`)
    busy = sum(parts.values())
    parts["launch"] = exposed_launch_s(part(launch_host_s, *job, rank_tokens, prefill_seqs == 0), busy)
    parts["schedule"] = schedule_s(system, plan, stack, decode / a + prompts, busy + parts["launch"],
                                   prefill_seqs > 0)
    if plan.kv_offload_gb:  # its copy engine shares HBM with the step, its host work hides only under it (`kv_offload`)
        parts["kv_offload"] = kv_offload_s(*job, decode / a, prompts, prompt, busy + parts["launch"],
                                           device(*job).mem_bw)
    return parts
