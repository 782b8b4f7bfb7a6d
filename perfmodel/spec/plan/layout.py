"""The parallel layout and training settings of one run, and its validation against a model and a system."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field

from ...errors import InputError, divisors, values_text
from ...types import Count, Flag, IntLiteral, Real, Schema
from ...types import Precision as TypesPrecision
from .finetune import LoRA, check_lora
from .fp8_recipes import Fp8Recipe, fp8_recipe_of
from .offload_rules import OffloadModule, check_act_offload
from ..hardware.system import System
from .megatron_split import default_stage_layers, megatron_chunks, megatron_slots
from ..model.global_attention import kv_head_counts
from ..model.config import ModelConfig
from .recompute import (
    OFFLOAD_TENSORS, RECOMPUTE_MODULES, SAVED_TENSORS, OffloadTensor, Recompute, RecomputeModule, SavedTensor,
    check_host, check_recompute,
)
from ..stack.profile import DEFAULT_STACK, STACKS, check_compile, check_graphs, load_stack, stack_defaults
from .moe_rules import apply_release, check_experts
from ..stack.release import Dispatcher, GraphScope
Precision = TypesPrecision  # re-exported: plans, jobs and release lines share one list
Schedule = Literal["1f1b", "interleaved", "gpipe"]
# tokens of the busiest expert over the mean: 1 is balanced routing; 64 bounds a typo, not a measurement
Imbalance = Annotated[Real, Field(ge=1.0, le=64.0)]
OptimizerUpdate = Literal["device", "host", "host_overlapped"]  # Plan.optimizer_update


class Plan(Schema):
    """A layout (tp x pp x dp x cp [x vpp]) plus batch, recompute, ZeRO and precision choices.

    Device order follows Megatron-LM (tp innermost, then cp, dp, pp), which decides which network tier
    each process group spans. `resolve` fills the inferred fields (dp or gpus, schedule) and checks the plan
    against a model and a system.
    """

    gpus: Count | None = Field(None, description="devices in the job; inferred as tp*pp*cp*dp when omitted")
    tp: Count = Field(1, description="tensor-parallel size; divides n_heads, n_kv_heads and ffn_hidden")
    pp: Count = Field(1, description="pipeline-parallel stages; at most n_layers")
    dp: Count | None = Field(None, description="data-parallel size; inferred as gpus / (tp*pp*cp)")
    dp_replicate: Count = Field(
        1, description="hybrid sharding (FSDP2 HSDP, torchtitan data_parallel_replicate_degree, MaxText dcn_data "
                       "with fsdp inside): ZeRO shards over dp*cp / dp_replicate ranks, its replicas (outermost) "
                       "all-reduce the gradient shards; divides dp, needs zero >= 1; default 1")
    cp: Count = Field(1, description="context-parallel size (splits the sequence); divides seq_len")
    vpp: Count = Field(1, description="interleaved virtual pipeline chunks per rank")
    ep: Count = Field(1, description="expert-parallel size: routed experts split over ep ranks (MoE models); with "
                                     "etp folded over a stage's tp*cp*dp ranks (Megatron-Core MoE parallel folding)")
    etp: Count = Field(1, description="expert tensor-parallel size: each expert's MLP split over etp ranks")
    expert_imbalance: Imbalance = Field(
        1.0, description="tokens of the busiest expert over the mean (1: balanced routing, as "
                                          "--moe-router-force-load-balancing runs it; cost.compute.moe)")
    moe_capacity_factor: Real | None = Field(
        None, gt=0, le=64, description="token dropping: each expert takes at most ceil(factor x T k / E) of a "
                                       "device's T routed tokens, the rest dropped (Megatron-Core "
                                       "--moe-expert-capacity-factor, moe_utils.get_capacity); null: dropless")
    moe_pad_to_capacity: Flag = Field(
        False, description="with moe_capacity_factor: every expert's input padded to its capacity, so the grouped "
                           "GEMMs and the all-to-all run capacity-sized buffers whatever the routing (Megatron-Core "
                           "--moe-pad-expert-input-to-capacity)")
    moe_dispatcher: Dispatcher = Field(
        "alltoall", description="how routed tokens reach their experts (Megatron-Core --moe-token-dispatcher-type; "
                                "flex: DeepEP / HybridEP, each token sent once per domain holding its experts)")
    moe_overlap: Flag = Field(
        False, description="hide the expert-parallel dispatch and combine of one micro-batch behind the other's "
                           "compute (Megatron-Core --overlap-moe-expert-parallel-comm; cost.comm.sharded.moe_comms)")
    moe_dense_dispatch: Flag = Field(
        False, description="MaxText's dense MoE path (sparse_matmul: false): tokens reach the experts by one-hot "
                           "dispatch and combine einsums on capacity-padded buffers (moe_capacity_factor; unset: "
                           "base.yml's -1, every expert runs every token) instead of grouped GEMMs; MoE models only "
                           "(cost.compute.moe_dense)")
    cuda_graphs: GraphScope | None = Field(
        None, description="what runs as CUDA graph replays: none, layer (per-layer graphs, where the stack's profile "
                          "has them), step (full-iteration graphs, Megatron-Core cuda_graph_impl full_iteration: no "
                          "host launches or MoE synchronisation inside the step); default: the stack's (its release's "
                          "recipe, else HostProfile.graphs)")
    micro_batch: Count = Field(description="sequences per micro-batch per data-parallel rank")
    global_batch: Count = Field(description="sequences per optimizer step")
    seq_len: Count = Field(description="tokens per sequence; at most max_seq_len for learned positions")
    recompute: Recompute = Field(
        "none", description="activation recomputation in the backward: none; selective (Megatron-Core "
                            "--recompute-granularity selective: the recompute_modules); full (whole layers, "
                            "recompute_num_layers of them); per-op (torchtitan's per-op selective checkpointing: "
                            "keeps attention outputs and every second matmul's, rebuilds the rest); names (JAX's "
                            "save_only_these_names, MaxText's remat policies: keeps the layer input and "
                            "recompute_saved, rebuilds the rest)")
    recompute_modules: list[RecomputeModule] | None = Field(
        None, description="recompute = selective: Megatron-Core --recompute-modules, any of "
                          f"{', '.join(RECOMPUTE_MODULES)}; default [core_attn] (Korthikanti et al. 2022)")
    recompute_saved: list[SavedTensor] | None = Field(
        None, description=f"recompute = names: the layer tensors kept, any of {', '.join(SAVED_TENSORS)}; default "
                          "none (the layer input alone)")
    recompute_offloaded: list[OffloadTensor] | None = Field(
        None, description=f"recompute = names: of {', '.join(OFFLOAD_TENSORS)}, those kept (the layer input, "
                          "recompute_saved) in host memory, not the device's (MaxText 'offload'; cost.memory.offload)")
    activation_offload_layers: Annotated[int, Field(ge=0)] = Field(
        0, description="Megatron-Core cpu_offloading: the first this many layers hold what they save for the backward "
                       "in host memory (cpu_offloading_num_layers; Transformer Engine's cpu_offload); pp = 1, "
                       "recompute none (spec.plan.offload_rules; cost.memory.act_offload)")
    offload_modules: list[OffloadModule] | None = Field(
        None, description="Megatron-Core fine-grained activation offloading (offload_modules): what these submodules "
                          "save for the backward in host memory, every layer (spec.plan.offload_rules; cost.memory.act_offload)")
    recompute_num_layers: Count | None = Field(
        None, description="recompute = full: Megatron-LM --recompute-num-layers; with recompute_method uniform the "
                          "layers of each chunk are checkpointed in groups of this many, with block only the first "
                          "this many of each chunk are recomputed; default every layer (1 per group)")
    recompute_method: Literal["uniform", "block"] = Field(
        "uniform", description="recompute = full: Megatron-LM --recompute-method")
    loss_chunks: Count = Field(
        1, description="the LM head and loss over this many chunks of a micro-batch's tokens, each chunk's logits "
                       "rebuilt in the backward (MaxText num_vocab_tiling; cost.memory.footprint.loss_temporary_bytes)")
    optimizer_offload: Flag = Field(
        False, description="keep the optimizer state in host memory between steps, copied to the device for the "
                           "update and back (MaxText optimizer_memory_host_offload; cost.memory.states.host_optimizer, "
                           "cost.memory.offload.optimizer_copies); needs the system's host link")
    optimizer_update: OptimizerUpdate = Field(
        "device", description="optimizer_offload: where the update runs. device: the state copied to the device "
                              "for it and back (MaxText); host: on the host's CPUs after the backward, the "
                              "gradients copied out as they are reduced and the new weights back (DeepSpeed "
                              "ZeRO-Offload's DeepSpeedCPUAdam), so the device never holds the offloaded state; "
                              "host_overlapped: as host, each parameter group's update starting as its gradients "
                              "arrive, behind the backward (DeepSpeed SuperOffload); cost.host.host_update")
    optimizer_offload_ratio: Annotated[Real, Field(gt=0.0, le=1.0)] = Field(
        1.0, description="optimizer_update host / host_overlapped: the share of the optimizer state (and its update) "
                         "in host memory, the rest kept and updated on the device (DeepSpeed offload_optimizer.ratio, "
                         "ZeRO-3)")
    sequence_parallel: Flag = Field(False, description="split norms, residuals and dropout over tp (Korthikanti et "
                                                       "al. 2022); resolve turns it off at tp = 1")
    zero: Annotated[Literal[0, 1, 2, 3], IntLiteral] = Field(
        0, description="1: optimizer state sharded; 2: + gradients; 3: + parameters")
    precision: Precision = Field("bf16", description="GEMM precision; everything else stays bf16")
    fp8_recipe: Fp8Recipe | None = Field(
        None, description="precision = fp8: how Transformer Engine scales it: tensorwise (one scale per tensor: "
                          "delayed or current scaling), blockwise (DeepSeek-V3's 1x128 activation and 128x128 weight "
                          "blocks, fp32 scales), mxfp8 (OCP microscaling: an E8M0 scale per 32 values, Blackwell's "
                          "tensor cores; --precision mxfp8); default tensorwise (Transformer Engine's)")
    fp8_params: Flag = Field(
        False, description="precision = fp8: the layers' GEMM weights are stored quantized, no bf16 copy beside them "
                           "(Transformer Engine fp8_model_init: Megatron-LM --fp8-param-gather, the fp8_param_gather of "
                           "Megatron-Bridge's and NeMo's fp8 precision recipes); the fp32 master stays in the optimizer")
    schedule: Schedule | None = Field(None, description="pipeline schedule; default interleaved if vpp > 1 else 1f1b")
    attention: Literal["flash", "unfused"] = Field(
        "flash", description="fused (FlashAttention-style) kernel, or unfused QK^T / softmax / dropout / AV")
    compile: Literal["none", "model", "model+loss"] = Field(
        "none", description="torch.compile as torchtitan's [compile] components: model (each block; 2024), "
                            "model+loss (2025); its memory effects in cost.memory.footprint; stacks that compile only")
    grad_dtype: Literal["fp32", "bf16"] | None = Field(None, description="gradient buffer, accumulation and reduction "
                                                                         "dtype; default: the stack's (Stack.grad_dtype)")
    weight_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="the stored parameters: fp32 (an fp32 master exists, as the stack keeps it: beside bf16 "
                          "weights, or as the parameter itself: Stack.fsdp_master_weights, fp32_parameters) or bf16 "
                          "(no master; MaxText weight_dtype, Megatron-Core --main-params-dtype); default: the stack's "
                          "(bf16 with Stack.bf16_state, else fp32; cost.memory.states.state_bytes)")
    moment_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="Adam's first and second moments (MaxText mu_dtype, Megatron-Core --exp-avg-dtype / "
                          "--exp-avg-sq-dtype): 4 + 4 or 2 + 2 bytes per parameter; default: the stack's (bf16 with "
                          "Stack.bf16_state, else fp32)")
    grad_compression: Literal["none", "bf16", "powersgd"] = Field(
        "none", description="data-parallel gradient format on the wire (cost.comm.compression): as grad_dtype, bf16, or "
                            "PowerSGD of rank powersgd_rank (torch DDP communication hooks)")
    powersgd_rank: Count = Field(1, description="PowerSGD's rank r (torch PowerSGDState matrix_approximation_rank; "
                                                "default 1 as there)")
    overlap_dp_comm: Flag = Field(True, description="data-parallel / ZeRO collectives overlap with compute")
    lora: LoRA | None = Field(None, description="fine-tune low-rank adapters on a frozen base (spec.plan.finetune); "
                                                "default: every weight trains")
    tp_comm_overlap: Flag | None = Field(None, description="with sequence parallelism, tp all-gathers / reduce-scatters "
                                                           "beside the GEMMs; default: the stack's (Stack.tp_comm_overlap)")
    stack: str = Field(DEFAULT_STACK, description=f"software stack that runs the plan, one of {', '.join(STACKS)}, "
                                                  "or the path of a profile YAML (perfmodel.spec.stack.profile: kernels, "
                                                  f"overlap, optimizer, host costs); default {DEFAULT_STACK}")
    stage_layers: list[Count] | None = Field(
        None, description="layers on each pipeline stage, first to last; default: as even as possible, the "
                          "remainder on middle stages (default_stage_layers)")
    account_for_embedding: Flag = Field(
        False, description="count the input embedding as one layer when splitting the pipeline: the first virtual "
                           "chunk holds one layer fewer (Megatron-LM --account-for-embedding-in-pipeline-split)")
    account_for_loss: Flag = Field(
        False, description="count the LM head and loss as one layer: the last virtual chunk holds one layer fewer "
                           "(Megatron-LM --account-for-loss-in-pipeline-split)")
    first_stage_layers: Count | None = Field(
        None, description="layers on the first stage, the rest split evenly (Megatron-LM "
                          "--decoder-first-pipeline-num-layers)")
    last_stage_layers: Count | None = Field(
        None, description="layers on the last stage (Megatron-LM --decoder-last-pipeline-num-layers)")

    def _resolved(self) -> int:
        if self.dp is None:
            raise InputError("plan.dp is not known yet: pass gpus and dp, or use perfmodel.estimate / spec.plan.layout.resolve")
        return self.dp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline per step (gradient-accumulation steps): global / (dp * micro_batch)."""
        return self.global_batch // (self._resolved() * self.micro_batch)

    @property
    def tokens_per_microbatch(self) -> float:
        """Tokens of one micro-batch on one device: micro_batch * seq_len / cp (context parallel splits the sequence)."""
        return self.micro_batch * self.seq_len / self.cp

    @property
    def sp_divisor(self) -> int:
        """What sequence parallelism divides norm/residual/dropout work and activations by: tp with SP, else 1."""
        return self.tp if self.sequence_parallel else 1

    @property
    def zero_shard(self) -> int:
        """Ranks over which ZeRO shards state: the dp * cp holding replicas of the same weights, over dp_replicate."""
        return self._resolved() * self.cp // self.dp_replicate

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def edp(self) -> int:
        """Expert data-parallel size: a stage's tp*cp*dp ranks over ep*etp (MoE parallel folding)."""
        return self.tp * self.cp * self._resolved() // (self.ep * self.etp)


def split_of(plan: Plan, n_layers: int) -> list[int]:
    """Layers on each pipeline stage: the plan's stage_layers, or Megatron-LM's split of its accounting and
    first / last stage counts (`megatron_chunks`, summed per stage), or the default split."""
    if plan.stage_layers is not None:
        return list(plan.stage_layers)
    if megatron_rules(plan):
        chunks = chunk_layers(plan, n_layers)
        return [sum(chunks[s::plan.pp]) for s in range(plan.pp)]
    return default_stage_layers(n_layers, plan.pp)


def megatron_rules(plan: Plan) -> bool:
    """Whether the plan splits its pipeline by Megatron-LM's accounting or first / last stage counts."""
    return bool(plan.account_for_embedding or plan.account_for_loss or plan.first_stage_layers is not None
                or plan.last_stage_layers is not None)


def chunk_layers(plan: Plan, n_layers: int) -> list[int]:
    """Layers of every virtual chunk in pipeline order (chunk c runs on stage c % pp): Megatron-LM's rules where
    the plan sets them, else each stage's layers (explicit or default) split over its vpp chunks as evenly as
    possible, earlier chunks taking the rest."""
    if megatron_rules(plan):
        return megatron_chunks(n_layers, plan.pp, plan.vpp, plan.account_for_embedding, plan.account_for_loss,
                               plan.first_stage_layers, plan.last_stage_layers)
    split, pp, vpp = split_of(plan, n_layers), plan.pp, plan.vpp
    return [split[c % pp] // vpp + (c // pp < split[c % pp] % vpp) for c in range(pp * vpp)]


def resolve(plan: Plan, model: ModelConfig, system: System) -> Plan:
    """Fill inferred fields and check the plan; InputError (field, value, what is valid) on the first problem."""
    p = plan.model_dump()
    tp, pp, cp = p["tp"], p["pp"], p["cp"]
    mp = tp * pp * cp
    if p["gpus"] is None and p["dp"] is None:
        raise InputError("plan needs gpus or dp (gpus = tp*pp*cp*dp)")
    if p["dp"] is None:
        if p["gpus"] % mp:
            below = p["gpus"] // mp * mp  # the multiples of mp on either side of gpus
            near = [g for g in (below, below + mp) if g > 0]
            raise InputError(
                f"gpus = {p['gpus']} is not divisible by tp*pp*cp = {tp}*{pp}*{cp} = {mp}; "
                f"valid gpus: multiples of {mp} (e.g. {', '.join(map(str, near))})"
            )
        p["dp"] = p["gpus"] // mp
    if p["gpus"] is None:
        p["gpus"] = mp * p["dp"]
    if mp * p["dp"] != p["gpus"]:
        hint = f", or use dp = {p['gpus'] // mp}" if p["gpus"] % mp == 0 else ""
        raise InputError(f"tp*pp*cp*dp = {tp}*{pp}*{cp}*{p['dp']} = {mp * p['dp']} != gpus = {p['gpus']}; omit dp to "
                         f"infer it{hint}")
    system.check_gpus(p["gpus"])
    apply_release(p, plan.model_fields_set, model, system)
    heads, kv, g = model.n_heads, math.gcd(*kv_head_counts(model)), model.global_attention
    if heads % tp:
        raise InputError(f"tp={tp} does not divide num_attention_heads = {heads}; valid tp: {values_text(divisors(math.gcd(heads, kv)))}")
    if model.n_kv_heads % tp:
        raise InputError(f"tp={tp} does not divide num_key_value_heads = {model.n_kv_heads}; valid tp: {values_text(divisors(math.gcd(heads, kv)))}")
    if g is not None and g.n_kv_heads % tp:
        raise InputError(f"tp={tp} does not divide the global layers' key/value heads (global_attention.n_kv_heads) = "
                         f"{g.n_kv_heads}; valid tp: {values_text(divisors(math.gcd(heads, kv)))}")
    if model.ffn_hidden % tp:
        raise InputError(
            f"tp={tp} does not divide ffn_hidden = {model.ffn_hidden}; valid tp: "
            f"{values_text(divisors(math.gcd(math.gcd(heads, kv), model.ffn_hidden)))}"
        )
    if pp > model.n_layers:
        raise InputError(f"pp={pp} is larger than n_layers = {model.n_layers}; valid pp: 1..{model.n_layers}")
    vpp = p["vpp"]
    if vpp > 1 and pp == 1:
        raise InputError(f"vpp={vpp} needs pipeline parallelism; valid with pp=1: vpp=1")
    rules = p["account_for_embedding"] or p["account_for_loss"] or p["first_stage_layers"] or p["last_stage_layers"]
    slots = megatron_slots(model.n_layers, p["account_for_embedding"], p["account_for_loss"])
    both = megatron_slots(model.n_layers, True, True)
    if pp * vpp > slots:
        hint = (f" (or 1..{both // pp}, counting embedding and loss as layers: account_for_embedding, "
                "account_for_loss)" if pp * vpp <= both and not rules else "")
        raise InputError(f"pp*vpp = {pp}*{vpp} = {pp * vpp} chunks exceeds n_layers = {model.n_layers}"
                         f"{' + accounted embedding/loss' if slots > model.n_layers else ''}; valid vpp: "
                         f"1..{slots // pp}{hint}")
    if rules and pp == 1:
        raise InputError("account_for_embedding / account_for_loss / first_stage_layers / last_stage_layers split "
                         "a pipeline; valid with pp=1: none of them")
    if rules and p["stage_layers"] is not None:
        raise InputError(f"stage_layers = {p['stage_layers']} and Megatron-LM's split rules (account_for_embedding, "
                         "account_for_loss, first/last_stage_layers) both set the split; valid: one of them")
    if rules:
        megatron_chunks(model.n_layers, pp, vpp, p["account_for_embedding"], p["account_for_loss"],
                        p["first_stage_layers"], p["last_stage_layers"])  # refuses what Megatron-LM refuses
    split = p["stage_layers"]
    if split is not None and (len(split) != pp or sum(split) != model.n_layers or min(split) < vpp):
        raise InputError(
            f"stage_layers = {split} must list pp = {pp} stages of at least vpp = {vpp} layers summing to "
            f"n_layers = {model.n_layers}; e.g. {default_stage_layers(model.n_layers, pp)}"
        )
    sched = p["schedule"] or ("interleaved" if vpp > 1 else "1f1b")
    if sched == "interleaved" and vpp == 1:
        raise InputError("schedule=interleaved needs vpp > 1; valid with vpp=1: 1f1b, gpipe")
    if sched != "interleaved" and vpp > 1:
        raise InputError(f"schedule={sched} cannot run vpp={vpp} chunks per rank; valid with vpp > 1: interleaved")
    p["schedule"] = sched
    dpmb = p["dp"] * p["micro_batch"]
    if p["global_batch"] % dpmb:
        lo = p["global_batch"] // dpmb * dpmb
        eg = ", ".join(str(x) for x in (lo, lo + dpmb) if x > 0)
        raise InputError(
            f"global_batch = {p['global_batch']} is not divisible by dp*micro_batch = {p['dp']}*{p['micro_batch']} = {dpmb}; "
            f"valid global_batch: multiples of {dpmb} (e.g. {eg})"
        )
    m = p["global_batch"] // dpmb
    if sched == "interleaved" and m % pp:
        raise InputError(
            f"interleaved schedule needs the micro-batch count (global_batch/(dp*micro_batch) = {m}) to be a multiple "
            f"of pp = {pp}; valid global_batch: multiples of {dpmb * pp}"
        )
    s = p["seq_len"]
    if s % cp:
        raise InputError(f"cp={cp} does not divide seq_len = {s}; valid cp: {values_text(divisors(s))}")
    if p["sequence_parallel"] and tp > 1 and (s // cp) % tp:
        raise InputError(f"sequence_parallel with tp={tp} splits the {s // cp} tokens of each context-parallel rank "
                         f"over tp, which tp does not divide; valid: seq_len a multiple of cp*tp = {cp * tp} "
                         "(Megatron-LM requires it too), or sequence parallelism off")
    if model.position == "learned" and s > model.max_seq_len:
        raise InputError(
            f"seq_len = {s} exceeds {model.name}'s learned position table (max_seq_len = {model.max_seq_len}); valid seq_len: 1..{model.max_seq_len}"
        )
    _check_replicate(p)
    check_experts(p, model)
    _check_compression(p, model)
    check_lora(p, model)
    check_recompute(p, model)
    check_act_offload(p, model)
    check_host(p, system)
    check_host_update(p, system)
    check_compile(p["stack"], p["compile"])  # refuses an unknown stack, a bad profile file, compile it lacks
    check_graphs(p["stack"], p["cuda_graphs"])
    system.accelerator.peak_flops(p["precision"])  # raises for a dtype the part lacks
    p["fp8_recipe"] = fp8_recipe_of(p["precision"], p["fp8_recipe"], system)
    if p["fp8_params"] and p["precision"] != "fp8":
        raise InputError(f"fp8_params = true with precision = {p['precision']}: weights are stored in fp8 only when "
                         "the GEMMs run in it; valid: precision = fp8, or fp8_params = false")
    if p["precision"] not in system.efficiency.matmul_max:
        raise InputError(f"precision={p['precision']}: {system.name} has no matmul efficiency for it; valid: {', '.join(system.efficiency.matmul_max)}")
    if tp == 1:
        p["sequence_parallel"] = False
    p["grad_dtype"], p["tp_comm_overlap"] = stack_defaults(p["stack"], p["grad_dtype"], p["tp_comm_overlap"])
    p["weight_dtype"], p["moment_dtype"] = state_dtypes(p["stack"], p["weight_dtype"], p["moment_dtype"])
    return Plan(**p)


def state_dtypes(stack: str, weight_dtype: str | None, moment_dtype: str | None) -> tuple[str, str]:
    """(weight_dtype, moment_dtype) of a plan, the stack's where the plan leaves them None: bf16 for both on a stack
    that trains bf16 state with no master (Stack.bf16_state), else fp32; what `resolve` and cost.layouts fill in."""
    own = "bf16" if load_stack(stack).bf16_state else "fp32"
    return weight_dtype or own, moment_dtype or own


def _check_replicate(p: dict) -> None:
    """dp_replicate (hybrid sharding) against dp and the ZeRO stage."""
    r, dp = p["dp_replicate"], p["dp"]
    if r > 1 and dp % r:
        raise InputError(f"dp_replicate = {r} does not divide dp = {dp}; valid dp_replicate: "
                         f"{values_text(divisors(dp))}")
    if r > 1 and p["zero"] == 0:
        raise InputError(f"dp_replicate = {r} with zero = 0: hybrid sharding replicates a ZeRO group, and with zero "
                         "0 every data-parallel rank is a replica already; valid: zero 1, 2 or 3, or dp_replicate 1")


# PowerSGD runs only as torch DDP's communication hook: one whole replica of a dense model per rank.
POWERSGD_LAYOUT = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero": 0}


def _check_compression(p: dict, model: ModelConfig) -> None:
    """Refuse PowerSGD outside POWERSGD_LAYOUT or on a MoE model."""
    if p["grad_compression"] != "powersgd":
        return
    bad = {k: p[k] for k, v in POWERSGD_LAYOUT.items() if p[k] != v}
    if bad or model.moe is not None:
        what = ", ".join(f"{k}={v}" for k, v in bad.items()) or f"the MoE model {model.name}"
        raise InputError(f"grad_compression = powersgd with {what}: PowerSGD runs as a torch DDP communication hook "
                         "on whole replicas of a dense model; valid with tp=1, pp=1, cp=1, ep=1, zero=0 (or "
                         "grad_compression = bf16, which every layout takes)")


def layout_label(plan: Plan) -> str:
    """Short layout: the parallel axes > 1, ZeRO, SP, recompute and batch split, e.g. 'pp2 dp2 vpp2 mb1x4'."""
    parts = [f"{a}{getattr(plan, a)}" for a in ("pp", "dp", "cp", "tp", "ep", "etp") if (getattr(plan, a) or 1) > 1]
    if plan.vpp > 1:
        parts.append(f"vpp{plan.vpp}")
    if plan.account_for_embedding or plan.account_for_loss:
        parts.append("acc" + "e" * plan.account_for_embedding + "l" * plan.account_for_loss)
    if plan.sequence_parallel:
        parts.append("sp")
    if plan.zero:
        parts.append(f"z{plan.zero}")
    if plan.recompute != "none":
        parts.append(f"rc-{plan.recompute[:3]}")
    parts.append(f"mb{plan.micro_batch}x{plan.num_microbatches}")
    return " ".join(parts or ["1"])


def check_host_update(p: dict, system: System) -> None:
    """A host update (Plan.optimizer_update) is one of an offloaded optimizer state's, priced where the system
    states its host memory bandwidth (cost.host.host_update), and a partial offload (optimizer_offload_ratio < 1)
    DeepSpeed's ZeRO-3 host update's (runtime/zero/offload_config.py: ratio 'Only valid with ZeRO Stage 3')."""
    if p["optimizer_update"] != "device" and not p["optimizer_offload"]:
        raise InputError(f"optimizer_update = {p['optimizer_update']} without optimizer_offload: the host updates "
                         "the state it keeps; valid: optimizer_offload true, or optimizer_update device")
    if p["optimizer_offload_ratio"] < 1 and (p["optimizer_update"] == "device" or p["zero"] != 3):
        raise InputError(f"optimizer_offload_ratio = {p['optimizer_offload_ratio']} with optimizer_update = "
                         f"{p['optimizer_update']} at zero = {p['zero']}: a partial offload is DeepSpeed ZeRO-3's "
                         "host update; valid: 1, or optimizer_update host / host_overlapped with zero 3")
    if p["optimizer_update"] != "device" and system.host is not None and system.host.memory_bandwidth_gbps is None:
        raise InputError(f"optimizer_update = {p['optimizer_update']} on {system.name}, whose host section states no "
                         "memory_bandwidth_gbps (what the host's optimizer update streams through); valid: "
                         "optimizer_update device, or a system spec that states it (e.g. gh200, dgx-h100)")
