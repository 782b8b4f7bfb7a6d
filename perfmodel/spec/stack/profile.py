"""Software stacks: what a training framework does that the hardware spec does not say.

A `Stack` is data (`hardware_specs/stacks/NAME.yaml`, installed as `perfmodel.hardware_specs/stacks`): the
attention kernel it runs, which data-parallel collectives it overlaps with what, its optimizer implementation,
the streaming multiprocessors its collectives take from compute while they overlap, and host costs the device
does not hide. Every number cites the framework's code, its documentation or a measurement this project made
(`sources`; a test fails where one lacks it). A plan names its stack (`Plan.stack`, `--stack`); the estimate
reads the profile through `cost.step.evaluate.evaluate`.

A profile may also carry a prediction `interval`: the spread of the relative error of predictions for runs of
that stack, taken from residuals (`Interval`), never an efficiency.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field

from ...errors import InputError, suggest
from ...types import Schema
from ...files import looks_like_path, read_mapping
from ..host.profile import CallKind, Calls, Dispatch, HostProfile, OpName, PassCalls  # noqa: F401 (re-exported)
from .release import profile_fields, profile_of, release_lines, split_stack

STACKS = ("megatron-core", "nemo", "torchtitan", "composer-fsdp1", "deepspeed", "nanotron", "plain-torch", "llmc",
          "nanogpt", "hf-transformers", "maxtext")
DEFAULT_STACK = "megatron-core"
EXECUTOR_STACK = "plain-torch"  # perfmodel's own executor (perfmodel execute / validate)
Optimizer = Literal["fused", "foreach", "forloop"]
StepPass = Literal["zero_grad_buffer", "check_grads", "prescale_grads", "master_copy"]
# Element-wise ops a stack's eager model code runs as separate torch ops (cost.memory.stack_kept.eager_kept_bytes)
EagerOp = Literal["norm", "glu", "qkv_buffer", "out_proj_copy"]


LARGE_GPUS = 1024  # the "large" regime: data-parallel collectives span more tiers than the dev set mostly measured
# Where the model is known to be weaker than in a one-stage bf16 job of a few hundred devices. pp_or_cp: activations
# cross ranks every micro-batch (pipeline sends and bubble, the context-parallel ring), priced from schedules.
REGIMES = {"pp_or_cp": "pp > 1 or cp > 1", "low_precision": "fp8 or fp4 GEMMs",
           "large": f"more than {LARGE_GPUS} devices"}
Regime = Literal[tuple(REGIMES)]


# quantised GEMM operands (1 B or less, with scales): fp8 / fp4 (Transformer Engine), int8 (AQT on TPU)
NARROW_PRECISIONS = ("fp8", "fp4", "int8")

def regimes_of(plan) -> tuple[str, ...]:
    """The regimes (REGIMES) a plan is in, where an interval may be wider (`Interval.around`)."""
    within = {"pp_or_cp": plan.pp > 1 or plan.cp > 1, "low_precision": plan.precision in NARROW_PRECISIONS,
              "large": (plan.gpus or plan.tp * plan.pp * plan.cp * (plan.dp or 1)) > LARGE_GPUS}
    return tuple(r for r in REGIMES if within[r])


class Band(Schema):
    """An interval's bounds over the residuals of the runs in one regime."""

    low: float = Field(gt=-1, le=0, description="lower quantile of measured/predicted - 1 (<= 0)")
    high: float = Field(ge=0, description="upper quantile of measured/predicted - 1 (>= 0)")
    rows: int = Field(ge=1, description="residuals the quantiles come from")
    groups: int = Field(ge=1, description="source groups (clusters, papers) those residuals come from")


MemoryView = Literal["allocated", "reserved"]


class MemoryBand(Schema):
    """Where a measured memory peak lies around the prediction in one view: quantiles of measured / predicted - 1
    over the measured-peak rows named in `source` (low at the lower tail, high at the upper), so the peak lies
    in [predicted * (1 + low), predicted * (1 + high)] at the stated coverage. The fit verdict reads the reserved
    view's (cost.memory.fit.memory_limits)."""

    low: float = Field(gt=-1, le=0, description="lower quantile of measured/predicted - 1 (<= 0)")
    high: float = Field(ge=0, lt=1, description="upper quantile of measured/predicted - 1 (>= 0)")
    coverage: float = Field(0.8, gt=0, lt=1, description="nominal share of peaks between low and high")
    held_out: float | None = Field(None, ge=0, le=1, description="the share of a source group's peaks inside the "
                                   "band built without that group, groups weighted once")
    rows: int = Field(ge=1, description="residuals the quantiles come from")
    groups: int = Field(ge=1, description="source groups those residuals come from")
    source: str = Field(description="which residuals: the command that produced them")


# What an interval's runs span (`Domain`): a plan outside them is an extrapolation, and its interval is wider by
# what the development sets show such a step costs (`Interval.extrapolation`, perfmodel.calibrate.runs.intervals).
EXTRAPOLATIONS = {"generation": "a hardware generation none of its runs used",
                  "precision": "a precision none of its runs used",
                  "devices": "more devices than any of its runs",
                  "release": "a stack or stack release none of its runs ran"}
Extrapolation = Literal[tuple(EXTRAPOLATIONS)]


def precision_class(precision: str) -> str:
    """How an interval's domain tells precisions apart: fp8, fp4 and int8 by name, 16-bit (bf16, fp16) as one."""
    return precision if precision in NARROW_PRECISIONS else "16-bit"


class Domain(Schema):
    """What the runs an interval came from span."""

    generations: list[str] = Field(description="hardware generations of the runs (Accelerator.generation)")
    precisions: list[str] = Field(description="precision classes of the runs (16-bit, fp8, fp4: precision_class)")
    max_devices: int = Field(ge=1, description="the most devices any of the runs used")
    stacks: list[str] = Field(default_factory=list, description="the stacks the runs ran, a release line's as "
                              "name@version (spec.stack.release.pinned); []: not recorded (no release extrapolation)")


class Interval(Schema):
    """Where the measured step time lies around a prediction: quantiles of measured / predicted - 1 over the
    residuals named in `source` (low at the lower tail, high at the upper; `held_out`: the share of held-out
    groups' runs it held). The JSON's step_time_s_low/high are predicted * (1 + low) and predicted * (1 + high), widened to a
    regime's band for a plan in that regime (`around`)."""

    low: float = Field(gt=-1, le=0, description="lower quantile of measured/predicted - 1 (<= 0)")
    high: float = Field(ge=0, description="upper quantile of measured/predicted - 1 (>= 0)")
    coverage: float = Field(0.8, gt=0, lt=1, description="nominal share of runs between low and high (the "
                                                         "quantiles' level)")
    held_out: float | None = Field(None, ge=0, le=1, description="development set, all stacks together: the share of "
                                   "a source group's runs inside the intervals built without that group, groups "
                                   "weighted once (perfmodel.calibrate.runs.intervals)")
    rows: int = Field(ge=1, description="residuals the quantiles come from")
    source: str = Field(description="which residuals: the command that produced them")
    regimes: dict[Regime, Band] = Field(default_factory=dict, description="wider bounds for plans in a regime "
                                        "(REGIMES) whose runs' residuals spread wider than low..high")
    domain: Domain | None = Field(None, description="what the runs span; null: unknown (no extrapolation is told)")
    extrapolation: dict[Extrapolation, float] = Field(
        default_factory=dict, description="per way a plan can lie outside `domain` (EXTRAPOLATIONS), what both bounds "
        "widen by: the least widening that brings the runs held out that way (a generation, a precision, the "
        "largest jobs, each predicted from the others' interval) to the stated coverage "
        "(perfmodel.calibrate.runs.intervals.extrapolation_widths)")

    def outside(self, generation: str, precision: str, devices: int, stack: str | None = None) -> list[str]:
        """The ways (EXTRAPOLATIONS) a plan on a `generation` part, at `precision`, on `devices`, run by `stack` (a
        release pinned: name@version) lies outside the runs this interval came from (none where the domain is
        unknown; no release extrapolation where it records no stacks or no stack is given)."""
        d = self.domain
        if d is None:
            return []
        out = {"generation": generation not in d.generations,
               "precision": precision_class(precision) not in d.precisions, "devices": devices > d.max_devices,
               "release": stack is not None and bool(d.stacks) and stack not in d.stacks}
        return [k for k in EXTRAPOLATIONS if out[k]]

    def bounds(self, regimes, generation: str, precision: str, devices: int,
               stack: str | None = None) -> tuple[float, float, list[str], list[str]]:
        """(low, high, the regimes that widened them, the extrapolations that widened them): `around`, then both
        bounds widened by the ways the plan lies outside the runs, their `extrapolation` widths added in quadrature
        (independent unknowns: a new generation at a new precision is not twice as uncertain as either)."""
        low, high, wider = self.around(regimes)
        # a way whose width is 0 widens nothing: the runs held out that way were covered already, so it goes untold
        far = [k for k in self.outside(generation, precision, devices, stack) if self.extrapolation.get(k, 0.0) > 0]
        w = sum(self.extrapolation.get(k, 0.0) ** 2 for k in far) ** 0.5
        return max(low - w, -0.99), high + w, wider, far

    def around(self, regimes) -> tuple[float, float, list[str]]:
        """(low, high, the regimes that widened them) for a plan in `regimes` (`regimes_of`): the union of this
        interval and the bands of those regimes."""
        low, high, wider = self.low, self.high, []
        for r in regimes:
            b = self.regimes.get(r)
            if b is not None and (b.low < low or b.high > high):
                low, high = min(low, b.low), max(high, b.high)
                wider.append(r)
        return low, high, wider


class Stack(Schema):
    """One training framework as the cost model prices it (see the module docstring)."""

    name: str = Field(description="stack name; what `--stack NAME` and a plan's `stack` take")
    description: str = Field(description="the framework and the settings this profile describes")
    versions: str = Field(description="framework versions whose code the profile's citations read")
    attention_kernel: str = Field(description="the fused attention kernel the stack runs (plan.attention = flash)")
    attention_native: bool = Field(
        False, description="that kernel is the part's own fused attention (cuDNN fused attention, FlashAttention-3 "
                           "or TensorRT-LLM's FMHA on Hopper and Blackwell; on Ampere FlashAttention-2 is that kernel): "
                           "a part's measured attention table of a native kernel prices it (Accelerator."
                           "attention_table_kernel); false: FlashAttention-2, priced by a table of that kernel or by "
                           "the spec's attention_max")
    attention_speed: float = Field(
        gt=0, description="throughput of that kernel relative to the kernel that prices it: FlashAttention-2 (a "
                          "table of it, or the hardware spec's attention_max), or the part's native kernel where "
                          "attention_native (1: the same kernel)")
    optimizer: Optimizer = Field(
        description="Adam implementation: fused (one multi-tensor kernel), foreach (torch's _multi_tensor_adamw: "
                    "one kernel per elementwise op over all tensors), forloop (the same ops per tensor)")
    overlap_grad_reduce: bool = Field(
        description="ZeRO 0-2: the gradient reduction (and ZeRO-1/2's weight gather) runs per bucket beside the "
                    "backward (forward), when the plan's overlap_dp_comm allows it")
    overlap_param_gather: bool = Field(
        True, description="ZeRO-1: the all-gather of the updated weights runs per bucket beside the next forward "
                          "(false: the optimizer step gathers them before it returns). ZeRO-2's gather follows "
                          "overlap_grad_reduce: the shipped stacks run ZeRO-2 as FSDP does (gathered in the "
                          "forward, prefetched) or overlap neither")
    overlap_grad_reduce_with_pp: bool = Field(
        description="... also with pipeline parallelism (false where the pipeline engine reduces after its flush)")
    ddp_buckets: tuple[int, int] | None = Field(
        None, description="ZeRO 0/1 under torch DistributedDataParallel: (first bucket, bucket cap) in bytes of "
                          "gradient, the reducer's bucket sizes (its buckets take the parameters in reverse order, "
                          "so the last bucket, holding the first layers' and the embedding's gradients, is ready "
                          "only when the backward ends: cost.comm.sharded.ddp_pieces); null: one bucket per layer")
    grad_dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="the dtype the stack keeps, accumulates and reduces gradients in by default (a plan's "
                            "grad_dtype overrides it): a memory saver where bf16")
    tp_comm_overlap: bool = Field(
        False, description="with sequence parallelism at tp > 1, the tensor-parallel all-gathers and reduce-scatters "
                           "run in chunks beside the GEMMs they feed or follow (Transformer Engine's userbuffers, "
                           "Megatron-LM --tp-comm-overlap, torchtitan's async TP, XLA), by default (a plan's "
                           "tp_comm_overlap overrides it)")
    tp_overlap_sms: int = Field(
        0, ge=0, description="SMs the overlapped tensor-parallel communication kernels hold while a GEMM runs beside "
                             "them (userbuffers' num_sm); the GEMM loses that share of its rate for the overlap")
    comm_ctas: int = Field(
        ge=0, description="thread blocks (one per NCCL channel) an overlapped collective keeps on the SMs; "
                          "compute beside it loses comm_ctas / compute_units of its rate (0: none taken)")
    expandable_segments: bool = Field(
        False, description="the stack runs torch's caching allocator with PYTORCH_CUDA_ALLOC_CONF="
                           "expandable_segments:True (segments grow in place instead of one per large request)")
    allocator_slack: float = Field(
        ge=0, le=1, description="reserved / allocated - 1 at the step's peak on CUDA: the caching allocator's "
                                "segments beyond the live tensors (freed blocks kept, splits, 2 MiB rounding); "
                                "0 on a CPU, which has no caching allocator")
    tp_saves_input_shard: bool = Field(
        True, description="tensor parallelism with sequence parallelism saves a column-parallel GEMM's input as "
                          "its sequence shard and gathers it again in the backward (Megatron-LM, Korthikanti et "
                          "al. 2022); false: the gathered input is saved whole (DTensor ColwiseParallel, nanotron)")
    fsdp_master_weights: bool = Field(
        False, description="ZeRO-3 as FSDP runs it: the sharded fp32 parameter is the optimizer's master copy (no "
                           "bf16 shard beside it)")
    fp32_parameters: bool = Field(
        False, description="the fp32 parameters are the optimizer's master at every ZeRO stage, replicated below "
                           "ZeRO-3, and Adam keeps its moments alone (XLA stacks with weight_dtype float32); false: "
                           "fsdp_master_weights at ZeRO-3, bf16 weights beside an fp32 master elsewhere")
    expert_bias_loop: list[Literal["fc1", "fc2"]] = Field(
        default_factory=list, description="the expert linears whose bias (GPT-OSS) the stack adds in a loop over the "
                                          "local experts, a memory-bound pass of its own over the routed tokens "
                                          "(Megatron-Core TEGroupedMLP._apply_bias: fc2; cost.compute.moe.moe_kernels' "
                                          "expert_bias_fc1/fc2); empty: added in the GEMMs")
    step_passes: list[StepPass] = Field(
        default_factory=list, description="passes over the gradients and weights the stack's optimizer step makes "
                                          "beside the fused Adam kernel (cost.memory.states.step_pass_bytes): "
                                          "zero_grad_buffer (the whole local fp32 gradient buffer zeroed each step), "
                                          "check_grads (a norm of each bucket before its reduction), prescale_grads "
                                          "(the buffer scaled by 1/(dp x cp) before a sum reduction), master_copy "
                                          "(the updated fp32 master copied into the bf16 weights as a pass of its "
                                          "own): Megatron-LM's DDP and distributed optimizer; empty: none")
    dense_embedding_grad: bool = Field(
        False, description="the embedding's backward builds a dense vocab x hidden gradient each micro-batch and "
                           "adds it to an fp32 main gradient (torch's dense embedding backward under Megatron-LM's "
                           "DDP hook: cost.compute.embedding_grad); false: only the looked-up rows are priced")
    bf16_state: bool = Field(
        False, description="the parameters and Adam's moments are bf16 with no fp32 master (a model built in bf16 "
                           "and trained as it is: NeMo AutoModel's FSDP2 with param_dtype bf16 and torch.optim.Adam, "
                           "whose moments take the parameter's dtype): 2 B of weights and 4 of optimizer state per "
                           "parameter (cost.memory.states.state_bytes)")
    zero3_live_params: float | None = Field(
        None, gt=0, description="ZeRO-3 gathers weights module by module and keeps at most this many parameters "
                                "gathered at once (DeepSpeed stage3_max_live_parameters); null: whole wrapped units "
                                "(an FSDP block) and the next one prefetched (cost.memory.footprint.zero_copy_bytes)")
    zero3_per_tensor: bool = Field(
        False, description="ZeRO-3 gathers each weight tensor where its matmul runs and reduce-scatters each "
                           "gradient where it is made, one more tensor in flight (XLA's SPMD partitioner and "
                           "latency-hiding scheduler): two of the largest module gathered and its gradient, not "
                           "whole units (cost.memory.footprint.zero_copy_bytes)")
    zero3_pp_unsharded: bool = Field(
        False, description="with pipeline parallelism, ZeRO-3 keeps the stage's weights gathered (bf16) and its "
                           "gradients unsharded (fp32) through the step, resharding and reducing once")
    torch_pipelining: bool = Field(
        False, description="pipeline parallelism runs on torch.distributed.pipelining's PipelineStage: a receive "
                           "buffer for every micro-batch's input and output gradient, allocated once and kept, and "
                           "the last stage keeping every micro-batch's output until the step ends "
                           "(cost.memory.footprint.pipeline_buffer_bytes)")
    loss_bytes_per_logit: float = Field(
        ge=4, le=32, description="bytes per logit (per token and local vocabulary entry) the cross entropy holds at "
                                 "its peak, the bf16 logits and their fp32 temporaries together (4: one fp32 copy)")
    tp_loss_bytes_per_logit: float | None = Field(
        None, ge=4, le=32, description="as loss_bytes_per_logit where tp > 1 and the stack computes the cross entropy "
                                       "over the vocabulary shards with its own decomposed kernels (torch's "
                                       "loss_parallel); null: the same as loss_bytes_per_logit")
    compiled_loss_bytes_per_logit: float | None = Field(
        None, ge=4, le=32, description="as loss_bytes_per_logit for a plan with compile = model+loss, the stack "
                                       "compiling its loss with torch.compile (Inductor fuses the fp32 upcast, log-softmax and "
                                       "gradient); null: the stack runs no torch.compile, and such a plan is refused")
    narrow_saved_inputs: bool = Field(
        False, description="under fp8/fp4 the stack saves a layer GEMM's input for the backward as its quantized "
                           "columnwise copy with its scales (Transformer Engine), not in bf16 (torchao's Float8Linear "
                           "saves the bf16 input and casts it again in the backward)")
    narrow_weight_copies: int = Field(
        1, ge=1, le=2, description="quantized copies of each GEMM weight the stack caches between micro-batches under "
                                   "fp8/fp4: 2 where both the rowwise (forward) and the columnwise (data-gradient) "
                                   "copy are kept (Transformer Engine's weight workspace)")
    eager_unfused: list[EagerOp] = Field(
        default_factory=list, description="element-wise ops the stack's model code runs as separate eager torch ops, "
                                          "whose autograd saves more than a fused kernel keeps (norm: a Python RMSNorm's "
                                          "fp32 upcast; glu: act(gate), beside gate, up and their product; qkv_buffer: "
                                          "with as many kv heads as query heads, one permuted [3, b, s, H, d] qkv buffer "
                                          "that q's view keeps whole beside a separate kv copy; out_proj_copy: a "
                                          "[seq, batch] layout whose transposed attention output the output "
                                          "projection's matmul copies and saves when micro_batch > 1); torch.compile "
                                          "(plan compile) fuses them (cost.memory.stack_kept.eager_kept_bytes)")
    eager_attention: bool = Field(False, description="with attention = unfused, the stack runs scale, mask and "
                                  "softmax as separate eager PyTorch ops (fp32 softmax under autocast: "
                                  "cost.compute.kernels.EAGER_SOFTMAX_BYTES) rather than Megatron-LM's fused "
                                  "scale-mask-softmax kernel; torch.compile fuses them again")
    vocab_multiple: int = Field(1, ge=1, description="the stack pads the vocabulary to a multiple of this times tp "
                                                    "(Megatron-LM --make-vocab-size-divisible-by), so each rank's LM "
                                                    "head GEMM has vocab_multiple-aligned rows; 1: the model's vocab "
                                                    "as its config gives it")
    autocast_linears: dict[Literal["qkv", "mlp_in"], int] = Field(default_factory=dict, description=(
        "the stack trains fp32 parameters under torch.autocast (bf16/fp16 plans on a GPU): a linear casts its weight "
        "and bias each forward and their gradients back, and its input where a norm produced it in fp32, once per "
        "nn.Linear reading it; here how many read the first norm's output (qkv: 3 for separate q, k, v; 1 fused) and "
        "the second's (mlp_in, doubled for a gated MLP); eager, the stream between them stays fp32 (cost.compute.autocast); "
        "empty: no autocast"))
    bias_grad_reduction: bool = Field(False, description="a linear's bias gradient is its own reduction over the "
                                      "tokens (eager nn.Linear: cost.compute.autocast.bias_grad_bytes); false: the GEMM epilogue's")
    moe_probs_in_experts: bool = Field(False, description="the router's probabilities weight the experts' activation "
                                       "(Megatron-Core >= 0.13: the weighted SwiGLU/GeGLU between the grouped GEMMs), "
                                       "whose backward reads the fc1 output it keeps anyway, and the combine sums "
                                       "unweighted; false: they weight the expert outputs at the combine (or the "
                                       "routed inputs before the experts), which keeps a bf16 copy per routed token "
                                       "(T k h) for the probabilities' gradient (cost.compute.moe.moe_kept_bytes)")
    host: HostProfile | None = Field(None, description="the calls the stack's host thread makes, by kind "
                                                       "(cost.host.launch_queue prices them on the system's host); null: "
                                                       "the host is not priced (one XLA executable per step)")
    interval: Interval | None = Field(None, description="prediction interval for runs of this stack")
    moe_interval: Interval | None = Field(None, description="prediction interval for mixture-of-experts runs of "
                                                            "this stack (none: MoE estimates quote no interval)")
    memory_band: dict[MemoryView, MemoryBand] = Field(default_factory=dict, description="per memory view, where "
                                                      "measured peaks lie around the prediction (none: no band)")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")

    def optimizer_passes(self) -> float:
        """HBM bytes of this stack's Adam step relative to a fused one (dimensionless).

        Fused (apex FusedAdam, torch `fused=True`): one read of p, g, m, v and one write of p, m, v per element,
        7 tensor-passes. torch's `_multi_tensor_adamw` (torch/optim/adamw.py; the for-loop variant runs the same
        ops one tensor at a time) runs p.mul_(1 - lr*wd) [2 passes], m.lerp_(g) [3], v.mul_ [2],
        v.addcmul_(g, g) [3], v.sqrt() [2], /bias_correction2_sqrt [2], +eps [2], p.addcdiv_(m, denom) [4]:
        20 passes, 20/7 of the fused kernel's traffic."""
        return 1.0 if self.optimizer == "fused" else 20.0 / 7.0

    def overlap_share(self, accelerator) -> float:
        """Fraction of a collective's overlapped seconds that still cost compute time (dimensionless): NCCL's
        `comm_ctas` thread blocks hold that share of the SMs, so compute beside the collective runs at
        1 - comm_ctas / compute_units of its rate. 0 off CUDA (gloo runs on host threads, TPU ICI on DMA engines)."""
        if accelerator.torch_device != "cuda":
            return 0.0
        return min(1.0, self.comm_ctas / accelerator.compute_units)


def _stack_files() -> dict[str, object]:
    root = resources.files("perfmodel.hardware_specs") / "stacks"
    return {e.name.removesuffix(".yaml"): e for e in root.iterdir() if e.name.endswith(".yaml")}


def list_stacks() -> list[str]:
    return sorted(_stack_files())


_LOADED: dict[str, Stack] = {}


def load_stack(spec: str | Path | Stack) -> Stack:
    """A stack by name (one of STACKS) or by path to a YAML profile of the same schema (a file is read again
    when it changes: cached by resolved path and modification time)."""
    if isinstance(spec, Stack):
        return spec
    spec = str(spec)
    if looks_like_path(spec):
        path = Path(spec)
        try:
            key = f"{path.resolve()}@{path.stat().st_mtime_ns}"
        except OSError:
            key = spec  # read_mapping names the missing file
        if key not in _LOADED:
            _LOADED[key] = Stack.parse(read_mapping(path, f"stack profile {spec}"), where=spec)
        return _LOADED[key]
    profile = profile_of(spec).lower()  # a release line (megatron-bridge@26.08) runs its profile
    fields = profile_fields(spec)  # ... with the fields its line runs differently (none for most)
    key = f"{split_stack(spec)[0].lower()}:{profile}" if fields else profile
    if key not in _LOADED:
        files = _stack_files()
        if profile not in files:
            raise suggest(spec, [*files, *release_lines()], "stack")
        raw = read_mapping(files[profile], f"hardware_specs/stacks/{profile}.yaml")
        _LOADED[key] = Stack.parse({**raw, **fields}, where=key)
    return _LOADED[key]


def check_graphs(stack: str | Path | Stack, graphs: str | None) -> None:
    """Refuse a plan's cuda_graphs = layer where the stack's profile counts no graphed layer (HostProfile)."""
    h = load_stack(stack).host
    if graphs == "layer" and (h is None or h.graphed_layer is None):
        raise InputError(f"cuda_graphs = layer with stack = {str(stack)!r}, whose profile counts no per-layer graph "
                         "replays (host.graphed_layer); valid: none, step, or a stack that graphs layers")


def check_compile(stack: str | Path | Stack, compile: str) -> Stack:
    """The stack (`load_stack`), after refusing a plan's compile (none | model | model+loss) where the stack runs no
    torch.compile (compiled_loss_bytes_per_logit null)."""
    s = load_stack(stack)
    if compile != "none" and s.compiled_loss_bytes_per_logit is None:
        can = [n for n in STACKS if load_stack(n).compiled_loss_bytes_per_logit is not None]
        raise InputError(f"compile = {compile} with stack = {str(stack)!r}, which runs no torch.compile; valid: "
                         f"compile = none, or a stack that compiles: {', '.join(can)}")
    return s


def stack_defaults(stack: str, grad_dtype: str | None, tp_comm_overlap: bool | None) -> tuple[str, bool]:
    """(grad_dtype, tp_comm_overlap) of a plan, the stack's own where the plan leaves them None (Stack.grad_dtype,
    Stack.tp_comm_overlap): what spec.plan.layout.resolve and cost.layouts.Layouts both fill in."""
    s = load_stack(stack)
    return grad_dtype or s.grad_dtype, s.tp_comm_overlap if tp_comm_overlap is None else tp_comm_overlap
