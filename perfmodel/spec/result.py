"""Output schema of `estimate`: the headline numbers and the breakdowns that trace them to the formulas."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..types import Flag, Real, Schema

LEGACY_HEADROOM = 0.10  # the fit test's headroom before plan files recorded it (and before the band, 2026-11-28)
from .plan.layout import Plan


class MemoryBreakdown(Schema):
    """Peak bytes on one device in three views, each the one before plus its own parts (cost.memory.footprint).

    allocated: what torch's caching allocator hands to tensors at the step's peak, the figure to compare with
    torch.cuda.max_memory_allocated; reserved: allocated plus the allocator's cached segments and fragmentation
    (max_memory_reserved); device: reserved plus what lies outside the allocator, CUDA context, NCCL buffers and
    library workspaces (nvidia-smi / NVML)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float = Field(description="what the stage keeps for its backward at the peak, and the working "
                                           "set of the layer in its backward (recomputed tensors included)")
    transient: float = Field(description="short-lived buffers at the peak: ZeRO's gathered weights and gradients, "
                                         "MoE dispatch buffers, fp8/fp4 weight copies, the loss's fp32 temporaries, "
                                         "an offloaded tensor in flight; with the optimizer state in host memory, "
                                         "at least what the update brings back beyond the freed activations")
    allocated: float = Field(description="weights + gradients + optimizer + activations + transient")
    fragmentation: float = Field(description="the caching allocator's reserved but unallocated bytes at the peak "
                                             "(the stack's allocator profile)")
    reserved: float = Field(description="allocated + fragmentation")
    runtime: float = Field(description="outside the allocator: CUDA context, NCCL buffers, library workspaces "
                                       "(the system's memory_overhead_gib)")
    device: float = Field(description="reserved + runtime: what nvidia-smi shows")
    between_steps: float = Field(description="allocated between steps: weights, gradients, optimizer state and "
                                             "cached fp8/fp4 weights (activations and transients freed)")
    host: float = Field(0.0, description="in host memory, outside the device's views: the tensors the names policy "
                                         "offloads (Plan.recompute_offloaded), every waiting layer's, and the "
                                         "optimizer state where it is kept there (Plan.optimizer_offload)")


class RankMemory(Schema):
    """One pipeline stage's devices (all ranks of a stage hold the same)."""

    stage: int = Field(description="pipeline rank, 0 = first")
    ranks: str = Field(description="global ranks of the stage in Megatron-LM's device order (tp innermost, then "
                                   "cp, dp, pp), e.g. '0-7'")
    layers: int
    memory_bytes: MemoryBreakdown


class TimeBreakdown(Schema):
    """Seconds of one step on the slowest pipeline stage; the parts sum to `total`.

    Compute parts are the stage's m micro-batches; comm parts are the exposed (not overlapped) share; the
    overlapped share of each collective is in `Estimate.comms`.
    """

    gemm: float
    attention: float
    memory_bound: float = Field(description="norms, activations, residuals, dropout, rotary, casts, embedding, loss")
    recompute: float
    tp_comm: float
    cp_comm: float
    ep_comm: float = Field(0.0, description="expert-parallel token dispatch and combine (all-to-all or all-gather "
                                            "/ reduce-scatter over ep) and the etp gathers of a MoE model, exposed")
    pp_comm: float
    dp_comm: float = Field(description="gradient collectives at the end of the step: data-parallel reduction, "
                                       "ZeRO-1/2 parameter gathers, the tied-embedding gradient sync between first "
                                       "and last stage, and the tp all-reduce of sequence-parallel replicated-"
                                       "weight gradients")
    zero3_comm: float = Field(description="ZeRO-3 parameter gathers and gradient reduce-scatters")
    offload_comm: float = Field(0.0, description="copies of offloaded tensors to host memory in the forward and back "
                                                 "in the backward, exposed beyond their layer's compute, and the "
                                                 "optimizer state's copies in and out for the update (cost.memory.offload)")
    bubble: float
    optimizer: float
    host: float = Field(0.0, description="seconds the device waits on its host: where launching the step's kernels, "
                                         "collectives and optimizer loop takes the host longer than the device takes "
                                         "to run them (cost.host.launch_queue; a CPU device: all of it)")
    overhead: float = Field(0.0, description="host time per step outside the model that no call count prices: on a "
                                             "spec calibrated from runs, the fitted per-step overhead "
                                             "(RunFit.step_overhead_s, cost.step.run_fit.calibrated); 0 otherwise (the host's "
                                             "launches are `host`)")
    total: float


class StageTime(Schema):
    """One pipeline stage, per micro-batch over all its chunks: what the schedule's blocks take.

    Forward and backward include the communication they expose and half the stage's sends each; backward
    excludes the recomputed forward, which is `recompute_s`. fwd + recompute + bwd of the bottleneck stage,
    times the micro-batches, is the step's compute and stage-communication parts (`TimeBreakdown`).
    """

    stage: int
    layers: int
    embedding: bool
    head: bool
    mtp_modules: int = Field(0, description="multi-token prediction modules on the stage (the last; each priced "
                                            "as one more layer and head)")
    fwd_s: float
    recompute_s: float
    bwd_s: float


class OpTime(Schema):
    """One operator on the slowest stage, per micro-batch."""

    name: str
    where: str = Field(description="layer (per layer) | embedding | head")
    kind: str
    count: int = Field(description="instances per micro-batch on the stage (layers for layer ops)")
    fwd_s: float
    bwd_s: float
    recompute_s: float
    fwd_flops: float
    formula: str
    priced_by: str = Field("datasheet", description="'datasheet' (the spec's peak rates and efficiencies) or the "
                           "measured table that priced it, e.g. 'table h100_sxm/gemm bf16' (+ ', outside its grid' "
                           "where a shape was extrapolated by FLOPs)")


class CommTime(Schema):
    """One collective (or send) pattern of the step."""

    name: str
    collective: str
    group: str
    group_size: int
    tiers: str = Field(description="tier phases the group spans, innermost first")
    priced_by: str = Field("datasheet", description="per tier, NetworkTier.fit's source: 'measured' (fits per "
                           "group size, by_group: of the catalogue's NCCL tables or a calibration's own timings), "
                           "'calibrated' (per-kind fits, by_kind) or 'datasheet'")
    bytes: float = Field(description="message size per call")
    calls: float = Field(description="calls per step on the slowest stage")
    seconds_per_call: float
    total_s: float
    exposed_s: float


class HostSummary(Schema):
    """What the host launching the slowest stage spends (cost.host.launch_queue): the stack's calls priced on the system's
    host, and how much of it the device waits on."""

    host: str = Field(description="the host (spec.host.cpu: catalogue name) and its CPU")
    source: str = Field(description="whose calls at whose costs")
    launch_s: float = Field(description="host seconds per step launching the slowest stage (its micro-batches, "
                                        "collectives, optimizer loop)")
    share: float = Field(description="launch_s over the step time")
    wait_s: float = Field(description="seconds per step the device waits on the host (time_s.host)")
    layer_forward_s: float = Field(description="host seconds launching one layer's forward per micro-batch")
    layer_backward_s: float = Field(description="... its backward, a recomputed forward included")
    layer_forward_device_s: float = Field(description="the device's seconds of one layer's forward per micro-batch")
    layer_backward_device_s: float = Field(description="... of its backward")
    layer_forward_calls: dict[str, float] = Field(description="a mean layer's forward calls by kind (the stack's "
                                                              "counts, spec.stack.profile.HostProfile)")
    layer_backward_calls: dict[str, float] = Field(description="its backward's calls by kind")
    serial: bool = Field(False, description="a CPU device: its ranks compute on the host thread that launches, so the "
                                            "launches add to the step rather than run ahead of it")


class ClockPower(Schema):
    """The clock a step's compute ran at under the board limit and the power it drew (cost.power)."""

    clock: Real = Field(description="fraction of the kernel tables' clock the compute-bound kernels ran at; the "
                                    "time breakdown, the stages and the gemm and attention ops are at it")
    loop_clock: Real = Field(description="the same part's clock for a compute-bound kernel looping alone")
    power_w: Real = Field(description="mean board power of one device over the step, W")
    limit_w: Real = Field(description="the board limit the average is held to, W")
    watts: dict[str, Real] = Field(description="draw by kind of time (compute at this clock, memory, comm, wait), W")
    seconds: dict[str, Real] = Field(description="the step's seconds of each kind of time")
    energy_j: Real = Field(description="energy of one device over one step, J (sum of watts x seconds)")


class Estimate(Schema):
    """Prediction for one training step of one plan."""

    model: str
    hardware: str
    gpus: int
    params: int
    step_time_s: float
    step_time_s_low: float | None = Field(None, description="lower end of the prediction interval (perfmodel.spec.stack.profile."
                                                            "Interval); null where neither spec nor stack has one")
    step_time_s_high: float | None = Field(None, description="upper end of the prediction interval")
    interval_source: str = Field("", description="which residuals the interval comes from, and its coverage")
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    hfu: float
    mfu_peak_dtype: str = Field(description="peak the MFU/HFU divide by: dense bf16 unless precision is fp8/fp4")
    fits_in_memory: bool = Field(description="the reserved view of every rank is within the device (capacity - "
                                             "runtime): memory_verdict fits or tight")
    memory_verdict: Literal["fits", "tight", "does not fit"] = Field(
        "fits", description="fits: the band's upper end (memory_band_high_bytes) within capacity - runtime less the "
                            "headroom; tight: that room inside the band; does not fit: even the band's lower end "
                            "(memory_band_low_bytes) beyond capacity - runtime (cost.memory.fit.memory_verdict)")
    memory_capacity_bytes: float = Field(description="the accelerator's memory")
    memory_headroom: float = Field(description="share of what the allocator can reserve (capacity - runtime) "
                                               "kept free by the fit test (--headroom)")
    memory_budget_bytes: float = Field(description="(capacity - runtime) * (1 - headroom) / (1 + band high): the "
                                                   "predicted reserved bytes up to which a plan fits")
    memory_room_bytes: float = Field(0.0, description="capacity - runtime: what the allocator can reserve at all")
    memory_band_low_bytes: float = Field(0.0, description="reserved on the fullest rank at the band's lower end: "
                                                          "reserved * (1 + low), the measured peaks' 0.1 quantile")
    memory_band_high_bytes: float = Field(0.0, description="... at its upper end, reserved * (1 + high)")
    memory_band_source: str = Field("", description="where the band comes from (Stack.memory_band's source)")
    memory_free_bytes: float = Field(description="budget - reserved on the fullest rank (negative: short by that)")
    memory_stage: str = Field(description="pipeline stage whose memory is reported (the fullest)")
    memory_rank: str = Field(description="global ranks of that stage")
    memory_bytes: MemoryBreakdown = Field(description="the fullest rank")
    memory_ranks: list[RankMemory] = Field(description="every pipeline stage, first to last")
    time_s: TimeBreakdown
    host: HostSummary | None = Field(None, description="the host that launches the kernels and what it spends (null: "
                                                    "not priced: a stack of one XLA executable, a system that names "
                                                    "no host)")
    host_s: float = Field(0.0, description="the host's seconds per step launching the slowest stage's kernels, "
                                           "collectives and optimizer loop (cost.host.launch_queue); the device waits time_s.host of "
                                           "them")
    host_bound: bool = Field(False, description="the host's seconds exceed the device's: the step is as long as the host "
                                                "takes to launch it, not as its kernels take to run")
    model_flops_per_step: float
    hardware_flops_per_step: float
    num_microbatches: int
    stage_layers: list[int] = Field(description="layers on each pipeline stage, first to last")
    bottleneck_stage: str
    stages: list[StageTime] = Field(description="every pipeline stage's seconds per micro-batch (the pipeline "
                                                "timeline's blocks: cost.pipeline.schedules.schedule_blocks)")
    ops: list[OpTime]
    comms: list[CommTime]
    plan: Plan
    notes: list[str] = Field(default_factory=list)
    clock: ClockPower | None = Field(None, description="the step's clock and power (null: the part has no power "
                                                       "model; compute at sustained_fraction alone)")


class Prediction(Schema):
    """The headline numbers of the estimate the file was written with."""

    step_time_s: Real = Field(description="seconds per training step")
    tokens_per_s: Real = Field(description="global_batch * seq_len / step_time_s")
    mfu: Real = Field(description="model FLOPs utilisation against the dense peak (cost.compute.flops)")
    memory_bytes: Real = Field(description="peak reserved bytes (allocated + allocator fragmentation) on the "
                                           "fullest device")
    memory_capacity_bytes: Real = Field(description="accelerator memory, bytes")
    memory_headroom: Real = Field(LEGACY_HEADROOM, ge=0, lt=1,
                                  description="the headroom the fit test kept (share of capacity - runtime); the "
                                              "default in files written before it was recorded")
    fits_in_memory: Flag = Field(description="the verdict is fits or tight on every rank: even the band's lower end of "
                                             "reserved within capacity - runtime")
