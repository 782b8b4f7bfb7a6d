"""Memory of a serving replica's GPU: weights, the KV cache and what it holds, activations, runtime.

Bytes per GPU of the fullest pipeline stage (the one with the LM head, or with embedding and head at pp 1). The
KV cache of one token, per layer, keeps its key and value (Pope et al. 2022, "Efficiently Scaling Transformer
Inference", Sec. 2.1: 2 x layers x kv heads x head dim values per token); with MLA the compressed latent and the
shared rotary key (DeepSeek-V2, Sec. 2.1.2). Tensor parallelism splits the kv heads; past as many ranks as kv
heads each rank keeps one (TensorRT-LLM and vLLM replicate kv heads when tp > num_kv_heads); MLA's latent is
not split.
"""

from __future__ import annotations

import math

from ..cost.compute.kernels import ACT_BYTES
from ..spec.model.global_attention import attention_parts
from ..spec.hardware.system import System
from ..spec.serving.settings import expert_slots
from ..spec.model.config import ModelConfig
from ..spec.serving.schema import (
    KV_BYTES, W4_BYTES, WEIGHT_BYTES, ServePlan, ServingStack, draft_model, four_bit_weights, fusion_inputs,
)

GIB = 2.0**30


def kv_bytes_per_token(model: ModelConfig, plan: ServePlan) -> float:
    """KV-cache bytes one token takes on one GPU of the fullest stage: `layer_kv_bytes` in each of its layers that
    keep tokens (`kv_layers`; Gated DeltaNet layers keep a state per sequence instead, `state_bytes_per_sequence`),
    and in a speculative draft's layers (`draft_kv_layers`: the draft attends the whole context too)."""
    own = kv_layers(model, plan) * layer_kv_bytes(model, plan)
    if plan.speculative is None:
        return own
    draft = draft_model(model, plan.speculative)
    return own + draft_kv_layers(model, plan) * layer_kv_bytes(draft, plan.draft_plan())


def layer_kv_bytes(model: ModelConfig, plan: ServePlan) -> float:
    """KV-cache bytes of one token in one layer on one GPU: 2 x kv heads on the rank x head_dim x kv_dtype bytes;
    MLA (kv_lora_rank + qk_rope_head_dim) x bytes, on every tp rank; sparse attention adds its indexer's key
    (`indexer_key_bytes`). Global layers with a head shape of their own (Gemma 4, `spec.model.global_attention`): the
    mean over the layers of each shape's (`attention_parts`)."""
    if model.global_attention is not None:
        return sum(w * layer_kv_bytes(part, plan) for w, part in attention_parts(model))
    per = KV_BYTES[plan.kv]
    if model.mla is not None:
        width = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
    else:
        width = 2 * max(model.n_kv_heads / plan.tp, 1.0) * model.head_dim
    return width * per + indexer_key_bytes(model)


def draft_kv_layers(model: ModelConfig, plan: ServePlan) -> int:
    """Draft layers keeping a KV cache: the model's MTP modules (mtp_layers), or EAGLE-3's one layer; 0 without
    speculative decoding."""
    s = plan.speculative
    return 0 if s is None else (model.mtp_layers if s.method == "mtp" else 1)


def draft_weight_bytes(model: ModelConfig, plan: ServePlan) -> float:
    """A speculative draft's weights on one GPU of the last stage: its layers (`draft_kv_layers` blocks of
    `spec.serving.schema.draft_model`, split as the model's layers are, `weight_bytes`), each MTP module's 2h x h
    projection of the embedding and hidden state (DeepSeek-V3 Sec. 2.2, eh_proj) or EAGLE-3's 3h x h fusion of
    three target layers' states and its head over draft_vocab, all / tp in bf16 (the embedding, and an MTP
    module's head, are the model's own); 0 without speculative decoding."""
    s = plan.speculative
    if s is None:
        return 0.0
    d, p = draft_model(model, s), plan.draft_plan()
    layer = weight_bytes(d, p) - (d.embedding_params() + d.head_params()) / p.tp * ACT_BYTES
    fuse = fusion_inputs(s.method, model.hidden) * model.hidden
    head = d.vocab * d.hidden if s.method == "eagle" else 0
    n = draft_kv_layers(model, plan)
    return n * layer + (n * fuse if s.method == "mtp" else fuse + head) / plan.tp * ACT_BYTES


def kv_layers(model: ModelConfig, plan: ServePlan) -> int:
    """Layers of the fullest pipeline stage that keep a KV cache: ceil(full-attention layers / pp)."""
    return math.ceil(model.full_attention_layers / plan.pp)


def state_bytes_per_sequence(model: ModelConfig, plan: ServePlan) -> float:
    """Bytes of one sequence's Gated DeltaNet state on one GPU of the fullest stage, whatever its length: per
    linear-attention layer the value_heads / tp states of key_head_dim x value_head_dim (state_bytes each: fp32)
    and the convolution's last conv_kernel - 1 inputs of q, k, v / tp in bf16 (vLLM's and SGLang's mamba cache of
    Qwen3-Next: a conv state and a temporal state per request); 0 without linear attention."""
    la = model.linear_attention
    if la is None:
        return 0.0
    heads = max(la.value_heads / plan.tp, 1.0)
    conv = (la.conv_kernel - 1) * (2 * la.key_dim + la.value_dim) / plan.tp * ACT_BYTES
    return math.ceil(la.layers / plan.pp) * (heads * la.key_head_dim * la.value_head_dim * la.state_bytes + conv)


def indexer_key_bytes(model: ModelConfig) -> float:
    """Bytes of one token's sparse-attention index key in one layer's cache: index_head_dim in FP8 plus one fp32
    scale per 128 values (vLLM's DeepseekV32IndexerCache: head_dim + head_dim // 128 * 4; SGLang's NSA index
    buffer the same); 0 without sparse attention."""
    s = model.sparse_attention
    return 0.0 if s is None else s.index_head_dim + 4.0 * math.ceil(s.index_head_dim / 128)


def weight_bytes(model: ModelConfig, plan: ServePlan) -> float:
    """Weights on one GPU of the fullest stage: its layers' parameters (all experts) at the GEMM precision, the
    routed experts split ep x etp = tp x attention_dp ways and the rest (attention, dense MLPs, shared experts,
    router) tp ways, every attention group holding its own copy; the vocabulary-parallel embedding and LM head / tp
    in bf16 (both on a stage at pp 1, the head alone at pp > 1, a tied head once). W4A16 keeps the routed experts
    (a dense model: every layer weight, its few norm scales included) at W4_BYTES. Redundant experts (EPLB) add
    their slots: (experts + redundant) / ep experts a rank (`expert_slots`)."""
    one = model.moe_layers() * model.expert_params() / model.n_layers if model.moe else 0.0  # an expert, mean layer
    rest = model.params_per_layer() - (model.moe.n_experts * one if model.moe else 0.0)
    routed = expert_slots(model, plan) * one
    four = four_bit_weights(model, plan.precision)
    w_rest = W4_BYTES if four == "layers" else WEIGHT_BYTES[plan.precision]
    w_routed = W4_BYTES if four else WEIGHT_BYTES[plan.precision]
    per_layer = rest / plan.tp * w_rest + routed / plan.moe_ranks * w_routed
    layers = math.ceil(model.n_layers / plan.pp) * per_layer
    emb, head = model.embedding_params() / plan.tp, model.head_params() / plan.tp
    ends = emb + head if plan.pp == 1 else max(emb, head + (emb if model.tie_embeddings else 0))
    return layers + ends * ACT_BYTES


def activation_bytes(model: ModelConfig, plan: ServePlan, stack: ServingStack) -> float:
    """Activation workspace the engine sets aside for its largest step (this project's choice, after TensorRT-LLM's
    activation-memory planning for max_num_tokens): max_num_tokens x (hidden + the widest per-rank GEMM output:
    q + 2 kv or the gated MLP's 2 f) in bf16, twice (a layer's input and output live together), and fp32 logits
    over the vocabulary shard for max_batch sequences. With attention data parallelism a MoE layer gathers every
    group's tokens: attention_dp x max_num_tokens rows of hidden and of the routed experts' output (SGLang's
    global DP buffer)."""
    widest = max((model.q_dim + model.kv_proj_dim) / plan.tp, (2 if model.gated else 1) * model.ffn_hidden / plan.tp)
    gathered = 0.0
    if model.moe is not None:
        routed = (2 if model.gated else 1) * model.moe.expert_ffn_hidden * model.moe.top_k / plan.etp / plan.ep
        widest = max(widest, (2 if model.gated else 1) * model.moe.expert_ffn_hidden * model.moe.top_k / plan.tp)
        gathered = (plan.attention_dp - 1) * stack.max_num_tokens * (model.hidden + routed)
    tokens = stack.max_num_tokens
    return (2 * (tokens * (model.hidden + widest) + gathered) * ACT_BYTES
            + stack.max_batch * model.vocab / plan.tp * 4.0)


def memory(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack) -> dict[str, float]:
    """Bytes per GPU: weights (a speculative draft's with them, `draft_weight_bytes`), activations, runtime (the
    system's memory_overhead_gib: CUDA context, NCCL buffers), and the KV cache's budget by what the stack's
    kv_memory_fraction f (or the plan's mem_fraction, the engine's launch flag) is a share of:
    free (TensorRT-LLM): f x (capacity - runtime - weights - activations);
    total (vLLM: the process's whole use, its profile run counting activations and non-torch memory):
      f x capacity - weights - activations - runtime;
    weights_and_kv (SGLang's mem_fraction_static: activations live outside it): f x capacity - weights - runtime."""
    cap = system.accelerator.hbm_bytes
    w = weight_bytes(model, plan) + draft_weight_bytes(model, plan)
    act, rt = activation_bytes(model, plan, stack), system.memory_overhead_bytes
    f = stack.kv_memory_fraction if plan.mem_fraction is None else plan.mem_fraction
    kv = {"free": (cap - rt - w - act) * f, "total": cap * f - w - act - rt,
          "weights_and_kv": cap * f - w - rt}[stack.memory_fraction_of]
    kv = min(kv, cap - rt - w - act)  # never past what the device holds
    return {"weights": w, "activations": act, "runtime": rt, "kv_cache": max(kv, 0.0), "capacity": cap,
            "short": max(-kv, 0.0)}


def sequence_kv_bytes(model: ModelConfig, plan: ServePlan, tokens: float, stack: ServingStack) -> float:
    """KV-cache bytes one sequence of `tokens` takes on one GPU: every layer keeps all its tokens; where the stack
    runs sliding windows (`ServingStack.sliding_window`) a windowed layer keeps at most its window:
    kv_bytes_per_token x (full layers x tokens + windowed layers x min(tokens, w)) / layers; plus a Gated
    DeltaNet model's state (`state_bytes_per_sequence`). Layers of two head shapes (`spec.model.global_attention`): each
    shape's on its share of the layers."""
    if model.global_attention is not None:
        return sum(w * sequence_kv_bytes(part, plan, tokens, stack) for w, part in attention_parts(model))
    per, state = kv_bytes_per_token(model, plan), state_bytes_per_sequence(model, plan)
    win = model.windowed_layers if stack.sliding_window else 0
    if not win:
        return per * tokens + state
    w = min(tokens, model.sliding_window)
    return per * ((model.n_layers - win) * tokens + win * w) / model.n_layers + state


def tokens_held(plan: ServePlan, stack: ServingStack) -> float:
    """KV tokens one sequence holds in the steady state: input + output where the scheduler reserves the whole
    sequence at admission, else input + output / 2 (blocks allocated as tokens come, the mean over its life)."""
    return plan.input_len + (plan.output_len if stack.reserves_whole_sequence else plan.output_len / 2)


def replica_batch(model: ModelConfig, plan: ServePlan, stack: ServingStack, kv_cache_bytes: float,
                  prefill_in_step: bool = True) -> tuple[float, str]:
    """Sequences in flight on one replica, and what bounds them: the asked concurrency / dp, or as many as the KV
    cache holds (whole sequences of tokens_held tokens, `sequence_kv_bytes`); never more than the stack's
    max_batch, nor than its token budget lets run at once (a step runs B decode tokens and B x I / O prompt
    tokens: B <= max_num_tokens / (1 + I / O); B <= max_num_tokens where prompts run elsewhere,
    `prefill_in_step` false: a disaggregated decode pool; with speculative decoding each sequence runs q =
    draft_tokens + 1 tokens a step and a request lives n = `ServePlan.life_steps` steps: B <= max_num_tokens /
    (q + I / n); where chunked prefill is off, an engine that mixes prompts with decodes fits a whole prompt
    beside them: B q <= max_num_tokens - I). With attention data parallelism each of the
    attention_dp groups holds its own sequences' cache and runs its own scheduler (the engines' DP ranks), so
    every limit but the concurrency is attention_dp times one group's."""
    fit = math.floor(kv_cache_bytes / sequence_kv_bytes(model, plan, tokens_held(plan, stack), stack))
    q = plan.decode_queries
    share = q + plan.input_len / plan.life_steps if prefill_in_step else q
    budget = math.floor(stack.max_num_tokens / share)
    rel = stack.release(plan.stack_version)
    if prefill_in_step and not stack.chunked_prefill and (rel is None or rel.mixed_prefill):
        budget = min(budget, math.floor((stack.max_num_tokens - plan.input_len) / q))
    a = plan.attention_dp
    limits = [(float(a * fit), "KV cache"), (float(a * stack.max_batch), f"the stack's max_batch {stack.max_batch}"
                                             + (f" per attention group x {a}" if a > 1 else "")),
              (float(a * max(budget, 1)), f"the stack's token budget ({stack.max_num_tokens} tokens per step"
                                          + (f" per attention group x {a})" if a > 1 else ")"))]
    if plan.concurrency is not None:
        limits.append((plan.concurrency / plan.dp, "concurrency"))
    b, why = min(limits, key=lambda x: x[0])
    if plan.concurrency is not None and why != "concurrency":
        why += f" (asked {plan.concurrency / plan.dp:g} per replica)"
    return b, why
