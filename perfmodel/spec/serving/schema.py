"""Serving (inference) inputs and outputs: the serving stack's profile, the serving layout and the estimate.

A `ServingStack` is data (`hardware_specs/serving/NAME.yaml`): what TensorRT-LLM, vLLM or SGLang do that the
hardware spec does not say (how much free memory the KV cache takes, the largest batch and token budget of one
step, whether its attention is the part's own kernel; its request path by release, `EngineRelease`, and the host
calls of a layer outside CUDA graphs, `LayerCalls`, which the system's host prices), each field cited in `sources`. A
`ServePlan` is one layout of a serving job: tp x attention_dp x pp GPUs per model replica, dp replicas, experts
over ep of a replica's tp x attention_dp ranks, weight / activation precision, KV-cache dtype, request lengths and
load. The cost is `perfmodel.serve` (priced by the training side's kernels and collectives, `perfmodel.cost`).
"""

from __future__ import annotations

import math
import re
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from ...errors import InputError, suggest
from ...types import Count, Count0, Real, Schema
from ...files import looks_like_path, read_mapping
from ..host.cpu import CALL_KINDS
from ..model.config import ModelConfig
from .speculative import SpeculativeConfig, draft_model, fusion_inputs, published_acceptance  # noqa: F401
from .prefill_pool import check_pool, prefill_pool_ep
from .settings import SETTINGS_DOC, check_settings, with_settings

SERVING_STACKS = ("trtllm", "vllm", "sglang", "atom", "plain-torch")  # plain-torch: the executor's own serving loop
DEFAULT_SERVING_STACK = "trtllm"
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# Bytes per weight of a GEMM matrix: fp4 is NVFP4, 4-bit values with one fp8 scale per 16 (NVIDIA, "NVFP4", the
# Blackwell microscaling format: 16-element blocks, E4M3 scales), 0.5 + 1/16
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16, "w4a16": 2.0}
# W4A16: 4-bit weights in groups of 32 with one bf16 scale each (compressed-tensors' pack-quantized INT4 of Kimi-K2.5,
# group_size 32; gpt-oss's MXFP4 keeps one E8M0 scale per 32, 1/32 B less), 0.5 + 2/32 B per weight, on the routed
# experts of a MoE model and on every layer GEMM of a dense one; bf16 elsewhere (WEIGHT_BYTES)
W4_BYTES = 0.5 + 2.0 / 32
PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "w4a16")


def four_bit_weights(model: ModelConfig, precision: str) -> str:
    """Which weights a plan keeps in 4 bits: 'experts' (W4A16 on a MoE model: its routed experts), 'layers' (W4A16
    on a dense model: every layer GEMM, as AWQ and GPTQ quantise all but the LM head), or '' (none)."""
    if precision != "w4a16":
        return ""
    return "experts" if model.moe is not None else "layers"


GRAPH_MODES = ("none", "piecewise", "full")
# What turns an engine's prefill CUDA graphs off for a layout or model (ServePlan / ModelConfig): experts over several
# GPUs, attention data parallelism, Gated DeltaNet (linear) attention, latent (MLA) attention
GRAPHS_OFF = ("expert_parallel", "attention_dp", "linear_attention", "latent_attention")


def version_key(version: str, field: str = "version") -> tuple[int, ...]:
    """A release's dotted version as numbers for ordering: its leading digits and dots (1.0.0rc3 -> (1, 0, 0),
    0.5.1.post1 -> (0, 5, 1)); InputError naming `field` for one that starts with no number."""
    m = re.match(r"v?(\d+(?:\.\d+)*)", str(version).strip())
    if m is None:
        raise InputError(f"{field} = {version!r}: not a version; valid: dotted numbers such as 0.14 or 1.0.0rc3")
    return tuple(int(x) for x in m.group(1).split("."))


class FrontEnd(Schema):
    """What a request costs the engine's front end on the host, outside the model's steps: HTTP, the chat template,
    tokenising the prompt and handing it to the engine on the way in; detokenising and streaming the first token on
    the way out. Measured as seconds on a host of speed `host_speed` (`spec.host.cpu.HostCPU.speed`), and priced on
    the target's host at measured x host_speed / its speed (`serve.host_time.frontend_s`)."""

    request_s: Real = Field(ge=0, description="seconds per request, whatever its length")
    token_s: Real = Field(ge=0, description="seconds per prompt token (tokenising)")
    host_speed: Real = Field(gt=0, description="eager-op speed of the host it was measured on, relative to the DGX "
                                               "H100's (HostCPU.speed)")


class EngineRelease(Schema):
    """What one release of a serving engine does by default on the request path, from version `since` up to the
    next release its profile lists: which steps its CUDA graphs replay, whether it schedules the next step while the
    device runs this one, whether prompts share steps with decode tokens, and its front end."""

    since: str = Field(description="first version these defaults hold for (dotted numbers: 0.14, 1.0.0)")
    prefill_graphs: Literal["none", "piecewise", "full"] = Field(
        description="CUDA graphs of a step that carries prompt tokens: none (launched op by op), piecewise (the "
                    "layers' GEMMs and element-wise ops replayed, attention launched between the pieces), full")
    graph_max_tokens: Count0 = Field(description="the largest step (tokens) its graphs were captured for; a step "
                                                 "of more tokens runs without them")
    graphs_off_for: list[Literal["expert_parallel", "attention_dp", "linear_attention", "latent_attention"]] = Field(
        default_factory=list, description="layouts and models for which the engine turns its prefill graphs off")
    compiled: bool = Field(description="where no graph replays a step, the engine runs torch.compile'd code "
                                       "(Inductor's kernels) rather than the model's eager ops")
    decode_graphs: Literal["none", "piecewise", "full"] = Field(description="CUDA graphs of a decode-only step")
    decode_graph_max_batch: Count0 = Field(description="the largest decode batch (tokens) its decode graphs hold")
    async_scheduling: bool = Field(description="the host schedules and prepares the next step while the device "
                                               "runs this one (its host time hidden under the step; a request that "
                                               "arrives joins the step after the one already scheduled)")
    mixed_prefill: bool = Field(description="prompt chunks share a step with the decode tokens (chunked prefill); "
                                            "false: a step that prefills runs prompts alone, before the decodes")
    frontend: FrontEnd = Field(description="the front end's cost per request (FrontEnd)")
    step_host_s: Real = Field(ge=0, description="host seconds a step spends scheduling, preparing inputs, sampling "
                                                "and processing outputs, fixed part (on the front end's host; "
                                                "exposed where the engine schedules synchronously)")
    step_host_seq_s: Real = Field(ge=0, description="the same per running sequence")
    prefill_step_s: Real = Field(ge=0, description="host seconds a step that admits prompt tokens spends before its "
                                                   "launch (the new requests' state, inputs and attention metadata), "
                                                   "on the front end's host; asynchronous scheduling does not hide it")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")


class LayerCalls(Schema):
    """Host calls of one decoder layer's forward by kind (`spec.host.cpu.CALL_KINDS`), each priced at the system's
    host (`HostCalls.cost`): what the engine's model code calls where no CUDA graph replays the layer."""

    eager: dict[str, Real] = Field(description="a dense layer (attention and MLP) run op by op")
    moe: dict[str, Real] = Field(description="added by a MoE layer's router and experts over a dense MLP's calls")
    compiled: dict[str, Real] = Field(description="a layer of the torch.compile'd forward run without graphs")
    outside_graphs: dict[str, Real] = Field(description="a layer under piecewise graphs: its pieces' replays and the "
                                                        "attention launched between them")
    collectives: Count0 = Field(description="tensor-parallel collective calls per layer where tp > 1, each a "
                                            "nccl_call outside graphs")
    from_profile: str | None = Field(None, description="a training stack profile whose host.ops count this engine's "
                                                       "model code (perfmodel's executor: plain-torch): a mean layer's "
                                                       "eager forward calls come from it (cost.host.launch_queue."
                                                       "layer_calls, dense and MoE layers at their shares), not from "
                                                       "eager and moe")

    @model_validator(mode="after")
    def _kinds(self):
        for field in ("eager", "moe", "compiled", "outside_graphs"):
            bad = [k for k in getattr(self, field) if k not in CALL_KINDS]
            if bad:
                raise ValueError(f"{field}: call kind {bad[0]!r}; valid: {', '.join(CALL_KINDS)}")
        return self


class ServingStack(Schema):
    """One serving framework as the serving cost prices it."""

    name: str = Field(description="stack name; what `--stack NAME` of perfmodel infer takes")
    description: str = Field(description="the framework and the settings this profile describes")
    versions: str = Field(description="framework versions whose code or documents the citations read")
    attention_native: bool = Field(description="its attention kernels are the part's own (TensorRT-LLM's FMHA / "
                                               "XQA, FlashAttention-3, FlashInfer on Hopper): a native attention "
                                               "table prices them, as for training stacks")
    kv_memory_fraction: float = Field(gt=0, le=1, description="share of memory the engine may use: of what is "
                                                              "free after weights and activations (memory_fraction_of "
                                                              "free), or of the whole device for weights, "
                                                              "activations and KV cache together (total)")
    memory_fraction_of: Literal["free", "total", "weights_and_kv"] = Field(
        description="what kv_memory_fraction is a share of: free (the memory left after weights, activations and "
                    "runtime), total (the device, for everything the engine uses), weights_and_kv (the device, for "
                    "weights and KV cache; activations outside it)")
    max_batch: Count = Field(description="sequences one step runs at most (the default scheduler limit)")
    max_num_tokens: Count = Field(description="tokens one step runs at most (prefill chunks and decode tokens)")
    moe_a2a: Literal["allgather", "deepep_ll", "alltoall"] = Field(
        "allgather", description="the MoE exchange under attention data parallelism by default (ServePlan.moe_a2a)")
    chunked_prefill: bool = Field(True, description=SETTINGS_DOC["stack_chunked_prefill"])
    moe_kernel: Literal["measured_table", "grouped_gemm"] = Field(
        "grouped_gemm", description="how its fused MoE is priced: measured_table (the part's measured fused-MoE "
                                    "table, TensorRT-LLM's own kernel) or grouped_gemm (one grouped GEMM over the "
                                    "experts reached, from the GEMM table: vLLM's and SGLang's fused_moe)")
    step_overhead_s: Real = Field(ge=0, description="host seconds per step the device does not hide (scheduling, "
                                                    "sampling, launches beyond CUDA graphs)")
    sliding_window: bool = Field(description="a sliding-window layer (model.sliding_window) keeps and attends "
                                             "only its last window of tokens; false: the engine runs it as full "
                                             "attention over the whole context")
    vocab_parallel_embedding: bool = Field(False, description="the token embedding is split over the vocabulary across "
                                                        "the tp ranks, so each step all-reduces its output (false: "
                                                        "every rank holds the whole table)")
    reserves_whole_sequence: bool = Field(description="the scheduler admits a request only with KV blocks for "
                                                      "its whole input + output (true), or allocates blocks as "
                                                      "tokens come and preempts on shortage (false: a sequence "
                                                      "holds input + output / 2 on average)")
    prefix_caching: bool = Field(False, description="the engine keeps computed KV blocks and serves a later prompt's "
                                                    "matching prefix from them by default (vLLM V1's hashed blocks, "
                                                    "SGLang's radix cache, TensorRT-LLM's block reuse)")
    kv_block_tokens: Count = Field(16, description="tokens per KV-cache block: the unit a prefix is cached and "
                                                   "matched in")
    layer_calls: LayerCalls | None = Field(None, description="host calls per layer outside CUDA graphs (LayerCalls); "
                                                             "None: no launches priced (the executor's measured host "
                                                             "costs stand in)")
    releases: list[EngineRelease] = Field(default_factory=list, description="the request path by release, oldest "
                                                                            "first (EngineRelease); empty: none "
                                                                            "priced")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")

    @model_validator(mode="after")
    def _ordered(self):
        keys = [version_key(r.since, f"releases[{i}].since") for i, r in enumerate(self.releases)]
        if keys != sorted(keys) or len(set(keys)) != len(keys):
            raise ValueError(f"releases: since = {', '.join(r.since for r in self.releases)}; valid: increasing "
                             "versions, oldest first")
        return self

    def release(self, version: str | None = None) -> EngineRelease | None:
        """The release whose defaults `version` runs: the latest listed at or before it (None: the newest); None
        where the profile lists none. InputError for a version older than every release listed, or any version of a
        profile that lists none."""
        if not self.releases:
            if version is not None:
                raise InputError(f"stack_version = {version}: {self.name}'s profile lists no releases; valid: no "
                                 "stack_version")
            return None
        if version is None:
            return self.releases[-1]
        key = version_key(version, "stack_version")
        held = [r for r in self.releases if version_key(r.since, "since") <= key]
        if not held:
            raise InputError(f"stack_version = {version}: {self.name}'s profile starts at {self.releases[0].since}; "
                             f"valid: {self.releases[0].since} or later")
        return held[-1]


def load_serving_stack(name: str | ServingStack) -> ServingStack:
    """A serving stack by name (SERVING_STACKS) or the path of a YAML profile of the same schema."""
    if isinstance(name, ServingStack):
        return name
    text = str(name)
    if looks_like_path(text):
        return ServingStack.parse(read_mapping(Path(text), f"serving stack profile {text}"), where=text)
    key = text.lower()
    if key not in SERVING_STACKS:
        raise suggest(text, SERVING_STACKS, "serving stack")
    path = resources.files("perfmodel.hardware_specs") / "serving" / f"{key}.yaml"
    return ServingStack.parse(read_mapping(path, f"hardware_specs/serving/{key}.yaml"), where=key)


class ServePlan(Schema):
    """One layout of a serving job: dp replicas of tp x attention_dp x pp GPUs, and the load they serve.

    attention_dp > 1 is DeepSeek's data-parallel attention with wide expert parallelism (TensorRT-LLM
    `enable_attention_dp`, SGLang `--enable-dp-attention`, vLLM `--data-parallel-size` with
    `--enable-expert-parallel`): a replica's sequences are split over attention_dp groups of tp GPUs, each group
    running attention, the dense MLPs and the shared experts on its own sequences, tp ways; every MoE layer
    gathers all the replica's tokens and runs the routed experts over all tp x attention_dp GPUs, ep ways by
    expert and (tp x attention_dp) / ep ways within one, the engines' invariant tp x attention_dp = moe_tp x
    moe_ep."""

    gpus: Count | None = Field(None, description="GPUs in all (tp x attention_dp x pp x dp, and the prefill pool's); "
                                                 "default from the layout")
    tp: Count = Field(1, description="tensor parallel size of attention (of each attention data-parallel group)")
    attention_dp: Count = Field(1, description="attention data-parallel groups of tp GPUs within a replica, whose "
                                               "MoE layers span all of them (MoE models)")
    pp: Count = Field(1, description="pipeline stages of a replica")
    dp: Count = Field(1, description="model replicas (data parallel)")
    ep: Count = Field(1, description="expert parallel size of a MoE model within a replica's tp x attention_dp "
                                     "ranks (the experts' tensor split is tp x attention_dp / ep)")
    moe_a2a: Literal["allgather", "deepep_ll", "alltoall"] | None = Field(
        None, description="how a MoE layer's tokens reach the experts across the attention data-parallel groups "
                          "(serve.wide_ep): allgather (all-gather and reduce-scatter of every token), "
                          "deepep_ll (DeepEP's low-latency dispatch and combine of the routed copies, fp8 out), "
                          "alltoall (a bf16 all-to-all of the routed copies); None: the stack's default")
    two_batch_overlap: bool = Field(False, description="decode steps run as two half micro-batches, one's MoE "
                                                       "exchange behind the other's compute (SGLang "
                                                       "--enable-two-batch-overlap; attention_dp > 1)")
    precision: Literal["bf16", "fp16", "fp8", "fp4", "w4a16"] = Field(
        "bf16", description="GEMM weights and activations; w4a16: 4-bit weights (INT4 or MXFP4, groups of 32) with "
                            "bf16 activations on a MoE model's routed experts (every layer GEMM of a dense one), bf16 "
                            "elsewhere: gpt-oss's MXFP4 and Kimi-K2.5's INT4 checkpoints as vLLM runs them on Hopper")
    kv_dtype: Literal["bf16", "fp16", "fp8"] | None = Field(None, description="KV-cache dtype; default fp8 with "
                                                                               "fp8/fp4 GEMMs, else bf16")
    input_len: Count = Field(description="prompt tokens per request")
    output_len: Count = Field(description="generated tokens per request")
    concurrency: Count | None = Field(None, description="sequences in flight in all, split evenly over the dp "
                                                        "replicas; None: as many as memory and the stack allow "
                                                        "(max throughput)")
    stack: str = Field(DEFAULT_SERVING_STACK, description=f"serving stack, one of {', '.join(SERVING_STACKS)}, or "
                                                          "the path of a profile YAML")
    stack_version: str | None = Field(None, description="the stack's release whose defaults run the request path "
                                                        "(graphs, scheduling, front end: ServingStack.releases); "
                                                        "None: the newest the profile lists")
    prefill_dp: Count | None = Field(None, description="disaggregated serving: prefill replicas in a pool of their "
                                                       "own, each sending its prompts' KV caches to the decode "
                                                       "replicas (tp x pp x dp); None: the replicas do both")
    prefill_tp: Count | None = Field(None, description="tensor parallel size of each prefill replica (default tp)")
    prefill_attention_dp: Count | None = Field(None, description="attention data-parallel groups of prefill_tp GPUs "
                                                                 "in each prefill replica, its MoE layers over all of "
                                                                 "them (MoE models); None: 1")
    prefill_ep: Count | None = Field(None, description="expert parallel size within a prefill replica's prefill_tp x "
                                                       "prefill_attention_dp ranks; None: the largest dividing both "
                                                       "ep and those ranks")
    mem_fraction: Real | None = Field(
        None, gt=0, le=1, description="the memory share the engine was launched with, in its own meaning "
                                      "(ServingStack.memory_fraction_of: TensorRT-LLM free_gpu_memory_fraction, vLLM "
                                      "gpu_memory_utilization, SGLang mem_fraction_static); None: the stack's default")
    max_batch: Count | None = Field(None, description=SETTINGS_DOC["max_batch"])
    max_num_tokens: Count | None = Field(None, description=SETTINGS_DOC["max_num_tokens"])
    chunked_prefill: bool | None = Field(None, description=SETTINGS_DOC["chunked_prefill"])
    redundant_experts: Count0 = Field(0, description=SETTINGS_DOC["redundant_experts"])
    speculative: SpeculativeConfig | None = Field(None, description="speculative decoding (MTP or EAGLE-3) with its "
                                                                    "stated acceptance; None: one token a step")
    kv_offload_gb: Real = Field(0.0, ge=0, le=1_000_000, description="GiB of host memory the engine offloads KV "
                                                                      "blocks to, over all its ranks (vLLM "
                                                                      "--kv-offloading-size, the native "
                                                                      "OffloadingConnector; serve.kv_offload); 0: none")

    @property
    def kv(self) -> str:
        return self.kv_dtype or ("fp8" if self.precision in ("fp8", "fp4") else "bf16")

    @property
    def disaggregated(self) -> bool:
        return self.prefill_dp is not None

    @property
    def prefill_pool(self) -> tuple[int, int, int]:
        """(tp, attention_dp, ep) of each prefill replica: as given, else tp, 1 and the largest ep dividing both the
        decode ep and prefill_tp x prefill_attention_dp."""
        tp, adp = self.prefill_tp or self.tp, self.prefill_attention_dp or 1
        return tp, adp, self.prefill_ep or math.gcd(self.ep, tp * adp)

    @property
    def prefill_gpus(self) -> int:
        """GPUs of the prefill pool (0 where prefill and decode share the replicas)."""
        tp, adp, _ = self.prefill_pool
        return tp * adp * self.prefill_dp if self.disaggregated else 0

    @property
    def moe_ranks(self) -> int:
        """GPUs a replica's MoE layers span at each pipeline stage: tp x attention_dp."""
        return self.tp * self.attention_dp

    @property
    def decode_queries(self) -> int:
        """Tokens a decoding sequence runs through the model per step: 1, or draft_tokens + 1 to verify drafts."""
        return 1 if self.speculative is None else self.speculative.draft_tokens + 1

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a decoding sequence gains per step: 1, or the speculative acceptance's mean."""
        return 1.0 if self.speculative is None else self.speculative.tokens_per_step

    @property
    def life_steps(self) -> float:
        """Steps a request takes in an aggregated replica: its prefill's step (which samples its first token) and
        (output_len - 1) / tokens_per_step decode steps."""
        return 1.0 + (self.output_len - 1) / self.tokens_per_step

    def draft_plan(self) -> ServePlan:
        """The layout the draft runs in: this one's tp and attention groups at one stage (the last, beside the LM
        head), no draft of its own; an EAGLE-3 layer in bf16 (its checkpoints are), an MTP block at the model's
        precision, the KV cache in the target's dtype; no two-batch overlap of its own (under the target's, each
        half micro-batch runs its share of the draft: serve.wide_ep.two_batch_parts); no KV offload of its own (the
        target's step prices the stores of its cache, the draft's layers included: kv_cache.kv_bytes_per_token)."""
        s = self.speculative
        precision = "bf16" if s is not None and s.method == "eagle" else self.precision
        return self.model_copy(update={"pp": 1, "speculative": None, "precision": precision, "kv_dtype": self.kv,
                                       "two_batch_overlap": False, "kv_offload_gb": 0.0,
                                       "prefill_dp": None, "prefill_tp": None, "prefill_attention_dp": None,
                                       "prefill_ep": None})

    @property
    def etp(self) -> int:
        """Tensor split of each expert: the replica's tp x attention_dp ranks over ep (moe_tp)."""
        return self.moe_ranks // self.ep


def resolve_serve(plan: ServePlan, model: ModelConfig) -> ServePlan:
    """`plan` with gpus filled in (and a speculative draft's acceptance, where none is stated: published_acceptance),
    after refusing what no serving engine runs: gpus other than tp x pp x dp, tp not dividing the attention heads,
    pp more than the layers, ep not dividing tp or the experts, lengths beyond the model's context, a precision the
    stack lacks; of a prefill pool, the same of its prefill_tp, prefill_attention_dp and prefill_ep (`prefill_pool`).
    One line each, naming the field and what is valid. A disaggregated plan comes back with its prefill pool's
    fields filled in."""
    p = plan
    for field in ("prefill_tp", "prefill_attention_dp", "prefill_ep"):
        if getattr(p, field) is not None and p.prefill_dp is None:
            raise InputError(f"{field} = {getattr(p, field)} without prefill_dp: no prefill pool; valid: prefill_dp "
                             "with it (disaggregated serving), or neither")
    n = p.moe_ranks * p.pp * p.dp + p.prefill_gpus
    if p.gpus is not None and p.gpus != n:
        pool = (f" + prefill_tp x prefill_attention_dp x prefill_dp = {p.prefill_gpus}" if (
            p.prefill_attention_dp or 1) > 1 else f" + prefill_tp x prefill_dp = {p.prefill_gpus}") if (
            p.disaggregated) else ""
        names, values = ("tp x attention_dp x pp x dp", f"{p.tp} x {p.attention_dp} x {p.pp} x {p.dp}") if (
            p.attention_dp > 1) else ("tp x pp x dp", f"{p.tp} x {p.pp} x {p.dp}")
        raise InputError(f"gpus = {p.gpus} is not {names} = {values}{pool} = {n}; valid: gpus = {n}, or a layout "
                         "whose product is gpus")
    prefill_ep = prefill_pool_ep(p, model) if p.disaggregated else None
    check_pool(model, p.tp, p.attention_dp, p.ep, p.redundant_experts)
    if p.pp > model.n_layers:
        raise InputError(f"pp={p.pp} exceeds the {model.n_layers} layers of {model.name}; valid pp: "
                         f"1..{model.n_layers}")
    if p.two_batch_overlap and p.attention_dp == 1:
        raise InputError("two_batch_overlap with attention_dp = 1: the overlap hides the MoE exchange between "
                         "attention data-parallel groups; valid: attention_dp > 1, or no two_batch_overlap")
    if p.moe_a2a is not None and p.attention_dp == 1:
        raise InputError(f"moe_a2a = {p.moe_a2a} with attention_dp = 1: the exchange runs between attention "
                         "data-parallel groups (a tp-only replica combines its experts in the tp all-reduce); "
                         "valid: attention_dp > 1, or no moe_a2a")
    if p.input_len + p.output_len > model.max_seq_len:
        raise InputError(f"input_len + output_len = {p.input_len} + {p.output_len} exceeds {model.name}'s context "
                         f"(max_seq_len = {model.max_seq_len}); valid: at most {model.max_seq_len} tokens in all")
    if p.concurrency is not None and p.concurrency < p.dp:
        raise InputError(f"concurrency = {p.concurrency} is fewer than the dp = {p.dp} replicas it is spread over; "
                         f"valid: concurrency >= {p.dp}, or fewer replicas")
    if p.kv_offload_gb and load_serving_stack(p.stack).name != "vllm":
        raise InputError(f"kv_offload_gb = {p.kv_offload_gb:g} with stack {p.stack}: the offload priced is vLLM's "
                         "OffloadingConnector (--kv-offloading-size); valid: stack vllm, or kv_offload_gb = 0")
    s = p.speculative
    if s is not None and s.method == "mtp" and not model.mtp_layers:
        raise InputError(f"speculative.method = mtp: {model.name} has no multi-token prediction module (mtp_layers = 0; "
                         "config.json num_nextn_predict_layers); valid: method eagle (an EAGLE-3 draft layer), or no "
                         "speculative decoding")
    if s is not None and s.acceptance_rate is None and s.acceptance_length is None:
        s = published_acceptance(s, model)
    resolved = p.model_copy(update={"gpus": n, "prefill_tp": (p.prefill_tp or p.tp) if p.disaggregated else None,
                                    "prefill_attention_dp": (p.prefill_attention_dp or 1) if p.disaggregated else None,
                                    "prefill_ep": prefill_ep, "speculative": s})
    check_settings(resolved, model, with_settings(load_serving_stack(p.stack), p))  # release, slots, budget
    return resolved


class ServeEstimate(Schema):
    """What `perfmodel.serve.infer` predicts for one serving layout (per the whole deployment where it says)."""

    model: str
    hardware: str
    plan: ServePlan
    fits_in_memory: bool = Field(description="weights, activations and at least one sequence's KV cache fit")
    batch: float = Field(description="sequences in flight in all (dp replicas together)")
    kv_cache_tokens: float = Field(description="tokens the KV cache of one replica holds")
    output_tokens_per_s: float = Field(description="generated tokens per second, all GPUs together")
    total_tokens_per_s: float = Field(description="prompt and generated tokens per second, all GPUs together")
    requests_per_s: float = Field(description="requests completed per second, all GPUs together")
    ttft_s: float = Field(description="time to first token: the step that runs a request's prefill")
    tpot_s: float = Field(description="time per output token after the first (inter-token latency)")
    e2e_s: float = Field(description="request latency: ttft + (output_len - 1) x tpot")
    memory_gib: dict[str, float] = Field(description="per GPU: weights, kv_cache, activations, runtime, total, "
                                                     "capacity")
    decode_step_s: dict[str, float] = Field(description="one decode step of the steady batch by part (seconds)")
    prefill_s: dict[str, float] = Field(description="one request's prefill by part (seconds); disaggregated: one "
                                                    "step of the prefill pool")
    kv_transfer_s: float = Field(0.0, description="disaggregated: seconds to send one prompt's KV cache from the "
                                                  "prefill pool to a decode replica (part of ttft_s)")
    request_s: dict[str, float] = Field(default_factory=dict, description="ttft_s by part (seconds): frontend (HTTP, "
                                        "template, tokenising, streaming the first token), wait (for the step in "
                                        "flight), prefill (the steps that carry the prompt), kv_transfer")
    notes: list[str] = Field(default_factory=list)
