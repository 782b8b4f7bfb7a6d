"""One training step of many plans at once: units, communication, pipeline, data parallelism, memory.

Step time = pipeline time of the m micro-batches (slowest stage, plus the bubble)
          + exposed data-parallel / ZeRO-1/2 communication + the optimizer step
          (+ the optimizer state's copies from and to host memory where it is kept there, cost.memory.offload).
A stage is built from units (its layers, plus the embedding on the first stage and the LM head and loss on
the last). Per micro-batch a unit costs its operators' forward, backward and recomputed forward
(`cost.compute.units.op_kernels`) plus the exposed communication it causes:
  - the tensors its operators pass to each other (tensor parallelism): never overlapped, except the sequence-
    parallel re-gather of a GEMM's input in the backward (`cost.comm.sharded.edge_cost`);
  - context-parallel key/value exchange: overlapped with the attention kernel (`cost.comm.sharded.kv_exchange`);
  - ZeRO-3 weight gathers and gradient reduce-scatters: overlapped with the compute of the unit they serve,
    except the embedding's, which starts the forward and ends the backward with nothing to hide behind;
  - pipeline sends: exposed.
The host launches every kernel and collective ahead of the device (cost.host.launch_queue): a stage's micro-batch takes the
longer of its device seconds and its host's (`host`: the seconds the device waits), and the step's end the longer
of the device's reduction and update and the host's optimizer loop (the stack's calls, priced on the system's host:
cost.host.launch_queue.host_rates). Data-parallel gradient reduction (every
micro-batch for ZeRO-2, once otherwise) overlaps the backward of the last micro-batch except its last layer's
bucket (torch DDP's last bucket where the stack names its buckets: Stack.ddp_buckets); ZeRO-1/2 weight gathers overlap the first forward of the next step likewise (ZeRO-1's only where the
stack's overlap_param_gather says so); with pp > 1 and tied embeddings, the first and last stages all-reduce the
embedding gradient (exposed); with sequence parallelism the tp group all-reduces the gradients of the weights
it keeps whole (norms, row-parallel biases) in one flat call (exposed).

On a spec calibrated from measured runs the parts are scaled last (`calibrated`).

Every quantity is a numpy array with one entry per plan (`Layouts` columns), and stage quantities have a
leading axis over the stage kinds (first, middle, last; or each stage of an explicit split).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import numpy as np

from ..spec.hardware.system import DEFAULT_HEADROOM, NARROW_PRECISIONS, System
from ..spec.model.config import ModelConfig
from ..spec.plan.recompute import Recompute
from .comm import collectives as C
from .comm.compression import GRAD_BYTES, compression_seconds, layout_wire_bytes
from .memory.frozen import adapter_params
from .compute.flops import (
    model_flops_per_token, mtp_flops_per_token, recompute_flops_per_token, tiled_loss_flops_per_token,
)
from .host.launch_queue import HostRates, launch_seconds, parameter_tensors, queued, stage_launches, step_seconds
from .compute.kernels import ACT_BYTES, Device
from .layouts import Layouts, among
from .memory.footprint import recomputed_share, sp_replicated_params, stage_memory, stage_params
from .memory.offload import optimizer_copies
from .host.host_update import host_share, host_updates
from .host.host_update_time import host_update_comm
from .memory.fit import VERDICTS, host_limit, memory_limits, memory_verdict
from .comm.mesh import BIT, Mesh
from .compute.moe import ExpertDataGroup, expert_layer_params, group_tiers
from .compute.operator_table import operators
from .pipeline.schedules import pipeline_time
from .power import at_clock, clocked_units, priced_clock, recompute_compute_share, refill_host, step_clock
from .comm.sharded import (
    ZERO_GROUP, Comm, chunked, ddp_pieces, gradient_sync, optimizer_seconds, overlap_fraction, partial_sum,
    replica_group, replicate_sync, weight_gather, with_overlap,
)
from .pipeline.stages import UNITS, Stages, pick, shared_host_speedup, unit_counts
from .memory.states import WEIGHT_BYTES, state_bytes
from .compute.units import STAGE_PARTS, Units, unit_costs


@dataclass
class Step:
    """Everything `evaluate` derives for a set of plans: headline arrays and the detail `estimate` reports."""

    lay: Layouts
    stages: Stages
    units: Units  # one layer, the embedding and the head per distinct row: ops, comms (plan j's row: index[j])
    stage_comms: list[Comm]  # per micro-batch of a stage: its sends
    step_comms: list[Comm]  # per step
    time: dict[str, np.ndarray]  # TimeBreakdown fields
    memory: dict[str, np.ndarray]  # MemoryBreakdown fields (the stage kind with most memory)
    bottleneck: np.ndarray  # stage kind index
    memory_kind: np.ndarray
    capacity: float
    headroom: float  # the fit test's share of the allocator's room kept free
    budget: float  # reserved up to which a plan fits: the band's upper end within the room less the headroom
    limit: float  # reserved past which it does not: the band's lower end past capacity - runtime (memory_limits)
    host_room: float  # host memory per device for offloaded tensors (memory.fit.host_limit)
    model_flops: float
    hardware_flops: np.ndarray
    peak_flops: float
    peak_dtype: str
    unit_time: dict[str, np.ndarray]  # seconds per micro-batch of one layer, the embedding, the head (all parts)
    unit_fwd: dict[str, np.ndarray]  # ... of which forward (compute + exposed comm)
    unit_recompute: dict[str, np.ndarray]  # ... of which recomputed forward
    p2p: np.ndarray  # seconds per micro-batch of a stage's sends
    stage_time_max: np.ndarray  # seconds per micro-batch of the slowest stage
    compute_speedup: np.ndarray  # cost.compute.kernel_time.shared_core_speedup applied to compute (1: no shared host)
    moe_window: np.ndarray  # seconds of a layer's compute per micro-batch that moe_overlap hides its dispatch behind
    host_kernels: np.ndarray  # operator launches per step on the slowest stage (host_counts)
    host_calls: np.ndarray  # collective calls and sends per step on the slowest stage
    host_s: np.ndarray  # the host's seconds per step on the slowest stage (launches, calls, optimizer loop)
    unit_host: dict[str, tuple[np.ndarray, np.ndarray]]  # unit -> host seconds launching its forward, backward
    send_host: np.ndarray  # host seconds of a stage's sends per micro-batch
    host_rates: HostRates  # what they were priced at (cost.host.launch_queue)
    clock: np.ndarray  # fraction of the kernel tables' clock the compute ran at under the power limit (cost.power)

    @property
    def step_time_s(self) -> np.ndarray:
        return self.time["total"]

    @property
    def verdict(self) -> np.ndarray:
        """Each plan's cost.memory.fit.memory_verdict: fits, tight or does not fit."""
        return memory_verdict(self.memory["reserved"], self.budget, self.limit, self.memory["host"], self.host_room)

    @property
    def fits(self) -> np.ndarray:
        """Plans whose reserved memory is within the device (fits or tight); only the others are out."""
        return self.verdict != VERDICTS[2]

    @property
    def tight(self) -> np.ndarray:
        """Plans within the device but inside the headroom the budget keeps free."""
        return self.verdict == VERDICTS[1]

    @property
    def mfu(self) -> np.ndarray:
        return self.model_flops / (self.step_time_s * self.lay.gpus * self.peak_flops)


# The parts of a step that a calibration from measured runs scales (spec.hardware.system.RunFit): time the devices compute
# (or wait on computing neighbours), and exposed communication.
COMPUTE_TIME = ("gemm", "attention", "memory_bound", "recompute", "bubble", "optimizer")
COMM_TIME = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "zero3_comm", "offload_comm")


def clean(part, total):
    """A difference of step parts with its rounding noise (below 1e-9 of the step) set to 0."""
    return np.where(np.abs(part) < 1e-9 * np.abs(total), 0.0, part)


def run_fit_time(compute, comm, host, compute_speed, network_speed, host_speed=1.0, step_overhead_s=0.0):
    """Step seconds with a calibration from measured runs (calibrate.runs.from_runs): compute / compute_speed + comm /
    network_speed + host / host_speed + step_overhead_s (`compute`, `comm`: the step's COMPUTE_TIME and COMM_TIME
    seconds at the spec's rates; `host`: the seconds the device waits on its host plus the stack's per-step
    overhead). First-order in the speeds: a slower network leaves the exposed communication exposed for longer and
    hides no more of the rest, which the fit does not re-derive."""
    return compute / compute_speed + comm / network_speed + host / host_speed + step_overhead_s


def calibrated(time: dict, system: System, stack: str) -> dict:
    """The TimeBreakdown parts of a step of software stack `stack` on `system`: as evaluated, or, on a spec
    calibrated from measured runs of that stack (`System.run_fit`, `RunFit.applies_to`), each compute part divided
    by its compute_speed, each communication part by its network_speed, the host parts by its host_speed and the
    fitted per-step overhead added (`run_fit_time`, part by part)."""
    fit = system.run_fit
    if fit is None or not fit.applies_to(stack):
        return time
    out = dict(time)
    for k in COMPUTE_TIME:
        out[k] = run_fit_time(time[k], 0.0, 0.0, fit.compute_speed, 1.0)
    for k in COMM_TIME:
        out[k] = run_fit_time(0.0, time[k], 0.0, 1.0, fit.network_speed)
    out["host"] = run_fit_time(0.0, 0.0, time["host"], 1.0, 1.0, fit.host_speed)
    out["overhead"] = run_fit_time(0.0, 0.0, time["overhead"], 1.0, 1.0, fit.host_speed, fit.step_overhead_s)
    out["total"] = sum(out[k] for k in (*COMPUTE_TIME, *COMM_TIME, "host", "overhead"))
    return out


def evaluate(model: ModelConfig, system: System, lay: Layouts, memory=None, headroom: float = DEFAULT_HEADROOM) -> Step:
    """Predict one training step of every plan in `lay` (resolved plans of one job) on `system`, stage by stage as
    the module docstring composes it: the units, the pipeline's sends, the slowest stage, the data-parallel
    collectives and the optimizer of the stage with most parameters, the host, the step's parts, the clock under the
    power limit, a calibration from runs, memory and FLOPs.

    `memory`: what `memory.stage_memory` returned for these plans, if the caller has it already; `headroom`: the
    share of the allocator's room the fit test keeps free beyond the band (`memory.fit.memory_limits`).
    """
    dev, mesh, experts = Device(model, system, lay), Mesh.of(system, lay), ExpertDataGroup(system, lay, model)
    st = Stages.of(model, lay)
    us = unit_seconds(model, system, lay)  # one layer, the embedding and the head per micro-batch
    sends = pipeline_sends(model, system, lay, us.rates)  # a stage's sends per micro-batch
    slow = slowest_stage(model, lay, st, us, sends)  # the stages, the slowest, the pipeline's seconds
    big = reduced_stage(model, lay, st, us)  # the stage whose data-parallel collectives and update the step waits on
    steps = (gradient_reductions(model, system, lay, dev, mesh, experts, big)
             + weight_gathers(system, lay, dev, mesh, experts, big) + step_syncs(model, lay, mesh, st, big, sends))
    dp_exposed = sum(c.exposed for c in steps)
    t_opt = optimizer_time(dev, system, lay, big)
    steps += state_offload(system, lay, big)  # the optimizer state in host memory: offload_comm
    t_copy = steps[-2].exposed + steps[-1].exposed + np.zeros(len(lay))
    host = host_step(model, lay, st, us, sends, slow, big, steps)
    time = step_breakdown(lay, slow, dp_exposed, t_opt, t_copy, host, us.rates)
    clocked = at_power_clock(model, system, lay, st, us, sends, slow, time, host.total)
    time = calibrated(clocked.time, system, lay.stack)
    memory, mem_kind = stage_memory(model, system, lay, st) if memory is None else memory
    mflops, hflops = step_flops(model, lay, us.share)
    peak_dtype = lay.precision if lay.precision in NARROW_PRECISIONS else "bf16"
    none = np.zeros(len(lay))
    return Step(lay=lay, stages=st, units=us.units, stage_comms=sends.comms, step_comms=steps, time=time,
                memory=memory, bottleneck=slow.bottleneck, memory_kind=mem_kind,
                capacity=system.accelerator.hbm_bytes, headroom=headroom,
                **dict(zip(("budget", "limit"), memory_limits(system, lay.stack, headroom))),
                host_room=host_limit(system), model_flops=mflops, hardware_flops=hflops,
                peak_flops=system.accelerator.peak_flops(peak_dtype), peak_dtype=peak_dtype,
                unit_time={u: clocked.unit_time[u] + none for u in UNITS},
                unit_fwd={u: clocked.fwd[u] + none for u in UNITS},
                unit_recompute={u: clocked.recompute[u] + none for u in UNITS}, p2p=sends.seconds,
                stage_time_max=clocked.stage_time_max, compute_speedup=us.units.per_plan(us.units.speedup) + none,
                moe_window=us.units.per_plan(us.units.moe_window),
                host_kernels=host.kernels + none,
                host_calls=host.calls + none, host_s=host.total + none, host_rates=us.rates,
                unit_host={u: (us.host_f[u] + none, us.host_b[u] + none) for u in UNITS},
                send_host=sends.host + none, clock=clocked.clock)


# --- the stages of `evaluate`, in its order ------------------------------------------------------------------


@dataclass
class UnitSeconds:
    """Per plan, one layer, the embedding and the head per micro-batch on one device (`unit_seconds`)."""

    units: Units  # once per distinct row (cost.compute.units.unit_costs)
    parts: dict[str, dict[str, np.ndarray]]  # unit -> STAGE_PARTS seconds
    time: dict[str, np.ndarray]  # unit -> all its parts
    fwd: dict[str, np.ndarray]  # unit -> the device's forward seconds (compute + exposed comm)
    bwd: dict[str, np.ndarray]  # ... backward (its recomputed forward included)
    kernels: dict[str, np.ndarray]  # unit -> operator launches
    calls: dict[str, np.ndarray]  # unit -> collective calls
    host_f: dict[str, np.ndarray]  # unit -> the host's seconds launching its forward
    host_b: dict[str, np.ndarray]  # ... its backward
    share: np.ndarray  # share of a stage's layers full recompute re-runs (memory.footprint.recomputed_share)

    @property
    def rates(self) -> HostRates:
        return self.units.rates


def unit_seconds(model: ModelConfig, system: System, lay: Layouts) -> UnitSeconds:
    """One layer, the embedding and the head on one device, priced once per distinct row of `lay`
    (cost.compute.units.unit_costs: their operators' kernels and the communication they expose) and copied out to
    every plan. Full recompute by Megatron-LM's block method re-runs only some of a stage's layers
    (cost.memory.footprint.recomputed_share): a layer's backward keeps that share of its recomputed forward, and
    its host launches as many."""
    units = unit_costs(model, system, lay)
    per_plan = units.per_plan
    parts = {u: {k: per_plan(x) for k, x in units.parts[u].items()} for u in UNITS}
    fwd, bwd = ({u: per_plan(x[u]) for u in UNITS} for x in (units.fwd, units.bwd))
    kernels, calls = ({u: per_plan(x[u]) for u in UNITS} for x in (units.kernels, units.calls))
    host_f, host_b = ({u: per_plan(x[u]) for u in UNITS} for x in (units.host_f, units.host_b))
    share = recomputed_share(model, lay)
    bwd["layer"] = bwd["layer"] - (1 - share) * parts["layer"]["recompute"]
    parts["layer"]["recompute"] = parts["layer"]["recompute"] * share
    host_b["layer"] = host_b["layer"] - (1 - share) * per_plan(units.host_r["layer"])
    time = {u: sum(parts[u].values()) for u in UNITS}
    return UnitSeconds(units, parts, time, fwd, bwd, kernels, calls, host_f, host_b, share)


@dataclass
class Sends:
    """A stage's pipeline sends per micro-batch (`pipeline_sends`)."""

    seconds: np.ndarray  # send/recv seconds per micro-batch of a stage
    calls: np.ndarray  # send/recv calls per micro-batch of a stage
    host: np.ndarray  # the host's seconds launching them
    comms: list[Comm]  # the stage's sends as Step.stage_comms
    link: tuple  # (bandwidth, latency, tier) between neighbouring stages: also the embedding copies' sync


def pipeline_sends(model: ModelConfig, system: System, lay: Layouts, rates: HostRates) -> Sends:
    """A stage sends its activations forward and receives its gradients backward at each of its vpp chunk
    boundaries, a micro-batch's tokens x hidden in bf16 (/ tp under sequence parallelism) each way, exposed, over
    the link between neighbouring stages (cost.comm.collectives.group_p2p_link, p2p_time); none with pp = 1."""
    pp, v = lay.pp, lay.vpp
    link_bw, link_lat, link = C.group_p2p_link(system, lay.tp * lay.cp * lay.dp, pp)
    s_pp = lay.tokens_per_microbatch * model.hidden * ACT_BYTES / lay.sp_divisor
    one = C.p2p_time(s_pp, link_bw, link_lat)
    p2p = np.where(pp > 1, 2 * v * one, 0.0)
    comms = [Comm("pp activations/gradients", "send/recv", "pp", nbytes=s_pp, seconds=one, calls=2 * v,
                  fwd=p2p / 2, bwd=p2p / 2, unit="stage", part="pp_comm", tier=link, active=pp > 1)]
    calls = np.where(pp > 1, 2.0 * v, 0.0)
    return Sends(p2p, calls, launch_seconds(rates, calls), comms, (link_bw, link_lat, link))


def device_pipeline(model: ModelConfig, st: Stages, unit_time: dict, p2p, pp) -> tuple[np.ndarray, np.ndarray]:
    """(seconds per micro-batch of each stage, the stages' mean): the device's alone, its units and sends."""
    mean = (sum(unit_time[u] * n for u, n in unit_counts(model).items()) + pp * p2p) / pp
    return st.seconds(unit_time) + p2p, mean


def device_bubble(lay: Layouts, device_mb, mean, bottleneck) -> np.ndarray:
    """The pipeline's bubble at the device's seconds (cost.pipeline.schedules.pipeline_time less the slowest
    stage's m micro-batches)."""
    m = lay.num_microbatches
    return pipeline_time(m, pick(device_mb, bottleneck), mean, lay.pp, lay.vpp) - m * pick(device_mb, bottleneck)


@dataclass
class SlowestStage:
    """The stages per micro-batch and the slowest of them (`slowest_stage`)."""

    device_mb: np.ndarray  # per stage kind: the device's seconds (units and sends)
    mean_device: np.ndarray  # the stages' mean of those
    wait: np.ndarray  # per stage kind: seconds the device waits on its host
    bottleneck: np.ndarray  # the slowest stage kind
    held: dict[str, np.ndarray]  # unit -> how many the slowest stage holds
    part: dict[str, np.ndarray]  # its STAGE_PARTS seconds (its sends in pp_comm)
    seconds: np.ndarray  # its seconds, the device's and those it waits
    pipeline: np.ndarray  # the pipeline's seconds per step
    host_mb: np.ndarray  # its host's seconds
    synced: np.ndarray  # its synchronisations (cost.host.launch_queue.stage_launches)
    first: tuple  # one micro-batch's passes on it: (host forward, device forward, host backward, device backward)


def slowest_stage(model: ModelConfig, lay: Layouts, st: Stages, us: UnitSeconds, sends: Sends) -> SlowestStage:
    """Per micro-batch of each stage, the device's seconds (its units and sends) and its host's launching them: the
    stage takes the longer where the host runs ahead (cost.host.launch_queue.stage_launches: a pipeline's chunk
    steps and a synchronising MoE dispatch break the launch queue's stretch, the calls after each exposed). The
    slowest stage's, part by part, and the pipeline's seconds at the slowest and the mean stage, the mean's wait on
    its host included (cost.pipeline.schedules.pipeline_time)."""
    pp, v, m, p2p = lay.pp, lay.vpp, lay.num_microbatches, sends.seconds
    device_mb, mean = device_pipeline(model, st, us.time, p2p, pp)
    dev_f, dev_b = st.seconds(us.fwd) + p2p / 2, st.seconds(us.bwd) + p2p / 2
    launch_f, launch_b, synced, wait = stage_launches(us.rates, model, st.seconds(us.host_f), st.seconds(us.host_b),
                                                      sends.host, dev_f, dev_b, pp, v, st.layers)
    per_mb = device_mb + wait
    bottleneck = np.argmax(np.where(st.valid, per_mb, -np.inf), axis=0)
    held = {u: pick(st.count(u), bottleneck) for u in UNITS}
    part = {k: sum(us.parts[u][k] * held[u] for u in UNITS) for k in STAGE_PARTS}
    part["pp_comm"] = part["pp_comm"] + p2p
    t_max = pick(per_mb, bottleneck)
    return SlowestStage(device_mb, mean, wait, bottleneck, held, part, t_max,
                        pipeline=pipeline_time(m, t_max, mean + st.mean(wait, pp), pp, v),
                        host_mb=pick(launch_f + launch_b, bottleneck), synced=pick(synced, bottleneck),
                        first=tuple(pick(x, bottleneck) for x in (launch_f, dev_f, launch_b, dev_b)))


@dataclass
class ReducedStage:
    """The stage with most parameters: the data-parallel collectives and the update the step waits on are its."""

    big: np.ndarray  # its stage kind
    params: np.ndarray  # the dense parameters it reduces and updates (a LoRA fine-tune: its adapters)
    expert_params: np.ndarray  # a MoE model's routed experts', reduced over edp
    layers: np.ndarray  # its layers (at least 1): the backward's buckets
    fwd_mb: np.ndarray  # seconds of its forward per micro-batch, the device's or its host's
    bwd_mb: np.ndarray  # ... of its backward


def reduced_stage(model: ModelConfig, lay: Layouts, st: Stages, us: UnitSeconds) -> ReducedStage:
    """The stage with most parameters (cost.memory.footprint.stage_params, and its routed experts') and what its
    collectives hide behind: its forward and backward as long as the stage runs them, the device's or its host's
    (cost.host.launch_queue.queued; a CPU device: both, one after the other)."""
    params_of = stage_params(model, lay, st.layers, st.embedding > 0, st.head > 0)
    experts_of = st.layers * expert_layer_params(model, lay)
    big = np.argmax(np.where(st.valid, params_of + experts_of, -np.inf), axis=0)
    p_stage, pe_stage, nl = pick(params_of, big), pick(experts_of, big), np.maximum(pick(st.layers, big), 1)
    if lay.lora is not None:  # a LoRA fine-tune reduces, gathers and updates its adapters alone (spec.plan.finetune)
        p_stage, pe_stage = pick(st.layers, big) * adapter_params(model, lay), 0.0 * pe_stage
    on_big = lambda per_unit: sum(per_unit[u] * pick(st.count(u), big) for u in UNITS)  # noqa: E731
    serial = us.rates.serial
    fwd_mb = queued(on_big(us.fwd), 0.0, on_big(us.host_f), 0.0, False, serial)
    bwd_mb = queued(on_big(us.bwd), 0.0, on_big(us.host_b), 0.0, False, serial)
    return ReducedStage(big, p_stage, pe_stage, nl, fwd_mb, bwd_mb)


def overlapped_steps(lay: Layouts, stack) -> np.ndarray:
    """Where ZeRO 0-2's reduction (and ZeRO-1/2's gather) overlap: the stack runs them per bucket, and with a
    pipeline only where it syncs each chunk on its last micro-batch (not after the flush)."""
    return lay.overlap_dp_comm & stack.overlap_grad_reduce & ((lay.pp == 1) | stack.overlap_grad_reduce_with_pp)


def chunks_after(lay: Layouts) -> np.ndarray:
    """With interleaving, the chunk passes the schedule runs after the first of the chunks done before the last,
    which they overlap: in Megatron-LM's backward order the other vpp - 1 chunks' last pp micro-batches, (vpp - 1)
    pp chunk-backwards (and as many chunk-forwards before the last chunk's weights are needed in the next forward)."""
    return np.minimum((lay.vpp - 1) * lay.pp, lay.num_microbatches * lay.vpp - 1)


def gradient_reductions(model: ModelConfig, system: System, lay: Layouts, dev: Device, mesh: Mesh,
                        experts: ExpertDataGroup, r: ReducedStage) -> list[Comm]:
    """The stage's gradient reduction per step (ZeRO 0-2; ZeRO-3's reduce-scatters hide per unit, zero3_comm): the
    dense gradients over dp (cost.comm.sharded.gradient_sync; every micro-batch under ZeRO-2, which does not keep
    them whole), a MoE model's routed experts over edp in the same backward (MoE parallel folding), and under hybrid
    sharding the replicas' all-reduce of the shards (replicate_sync: FSDP2 after every micro-batch's reduce-scatter
    but under a pipeline schedule, the last backward's alone). Each overlaps the backward except its last bucket
    (torch DDP's last bucket where the stack names its buckets: Stack.ddp_buckets; cost.comm.sharded.chunked,
    with_overlap); the dense and expert buckets, and the replicas' all-reduce where it runs in the same backward,
    share that window, their exposed seconds split by traffic."""
    pp, v, m, zero, shard, edp = lay.pp, lay.vpp, lay.num_microbatches, lay.zero, lay.zero_shard, lay.edp
    f, overlap_steps = overlap_fraction(system, dev.stack), overlapped_steps(lay, dev.stack)
    wbytes = layout_wire_bytes(model, lay)  # what the gradient collectives carry per element (cost.comm.compression)
    on = (shard > 1) & (zero < 3)
    kind = np.where(zero == 0, "all_reduce", "reduce_scatter")
    g = on * gradient_sync(mesh, r.params, wbytes, zero)
    on_e = (edp > 1) & (zero < 3) & (r.expert_params > 0)
    g_e = on_e * gradient_sync(experts, r.expert_params, wbytes, zero)
    reps = np.where(zero == 2, m, 1)
    after = chunks_after(lay)
    g_r = replicate_sync(system, lay, r.params, wbytes)
    on_r = (lay.dp_replicate > 1) & (g_r > 0)
    reps_r = np.where((zero >= 2) & (pp == 1), m, 1) * on_r
    # torch DDP's buckets where the stack names them and wraps the stage in DDP (the plain-torch executor: ZeRO 0/1
    # without tp or pp; with tp, ZeRO-1 runs as FSDP2 and ZeRO-0 as one all-reduce: execute.parallel.data); DDP sizes
    # its buckets by the gradient tensors' own bytes (their dtype), whatever a communication hook then sends
    ddp = (zero < 2) & (lay.tp == 1) & (pp == 1)
    buckets = dev.stack.ddp_buckets
    pieces = r.layers if buckets is None else np.where(
        ddp, ddp_pieces(r.params * GRAD_BYTES[lay.grad_dtype], buckets), r.layers)

    def exposed(traffic, chunks):  # one backward's exposed seconds of `traffic` sharing its window
        return np.where(overlap_steps, with_overlap(traffic, chunked(traffic, r.bwd_mb, pieces, chunks,
                                                                     after * r.bwd_mb / v), f), traffic)

    both, chunks = g + g_e, np.where(zero == 2, 1, v)
    joint = np.minimum(reps * (both > 0), reps_r)  # backwards that run both
    dp_exp = (reps * (both > 0) - joint) * exposed(both, chunks)
    rep_exp = (reps_r - joint) * exposed(g_r, v)
    all_three = both + g_r
    shared = joint * exposed(all_three, np.where(reps_r < reps, v, chunks))
    dp_exp = dp_exp + shared * np.divide(both, all_three, out=np.zeros_like(all_three), where=all_three > 0)
    rep_exp = rep_exp + shared * np.divide(g_r, all_three, out=np.zeros_like(all_three), where=all_three > 0)
    part = np.divide(g, both, out=np.ones_like(both), where=both > 0)
    return [Comm("dp gradient reduction", kind, "dp", nbytes=r.params * wbytes, seconds=g, calls=reps,
                 bwd=dp_exp * part, unit="step", part="dp_comm", mask=ZERO_GROUP, active=on),
            Comm("edp expert gradient reduction", kind, "edp", nbytes=r.expert_params * wbytes, seconds=g_e,
                 calls=reps * on_e, bwd=dp_exp * (1 - part), unit="step", part="dp_comm", tier=experts.tiers(),
                 active=on_e),
            Comm("dp replicate gradient all-reduce", "all_reduce", "replicate", nbytes=r.params * wbytes / shard,
                 seconds=g_r, calls=reps_r, bwd=rep_exp, unit="step", part="dp_comm",
                 tier=group_tiers(system, *replica_group(lay), lay.gpus), active=on_r)]


def weight_gathers(system: System, lay: Layouts, dev: Device, mesh: Mesh, experts: ExpertDataGroup,
                   r: ReducedStage) -> list[Comm]:
    """ZeRO-1/2's weight all-gathers per step, the dense weights over dp and the routed experts' over edp
    (cost.comm.sharded.weight_gather): overlapped with the first forward of the next step but its first bucket
    (ZeRO-1's only where the stack's overlap_param_gather says so), their exposed seconds split by traffic."""
    zero, shard, edp, stack = lay.zero, lay.zero_shard, lay.edp, dev.stack
    on = (shard > 1) & np.isin(zero, (1, 2))
    w = on * weight_gather(mesh, r.params)
    on_e = (edp > 1) & np.isin(zero, (1, 2)) & (r.expert_params > 0)
    w_e = on_e * weight_gather(experts, r.expert_params)
    gather_overlaps = overlapped_steps(lay, stack) & ((zero == 2) | stack.overlap_param_gather)
    both = w + w_e
    hidden = chunked(both, r.fwd_mb, r.layers, lay.vpp, chunks_after(lay) * r.fwd_mb / lay.vpp)
    exp = np.where(gather_overlaps, with_overlap(both, hidden, overlap_fraction(system, stack)), both)
    part = np.divide(w, both, out=np.ones_like(both), where=both > 0)
    return [Comm("zero weight all-gather", "all_gather", "dp", nbytes=r.params * WEIGHT_BYTES, seconds=w, calls=1,
                 fwd=exp * part, unit="step", part="dp_comm", mask=ZERO_GROUP, active=on),
            Comm("zero expert weight all-gather (edp)", "all_gather", "edp", nbytes=r.expert_params * WEIGHT_BYTES,
                 seconds=w_e, calls=1 * on_e, fwd=exp * (1 - part), unit="step", part="dp_comm",
                 tier=experts.tiers(), active=on_e)]


def step_syncs(model: ModelConfig, lay: Layouts, mesh: Mesh, st: Stages, r: ReducedStage, sends: Sends) -> list[Comm]:
    """The gradient syncs after the backward, exposed: with sequence parallelism the tp group all-reduces the
    gradients of the weights it keeps whole (norms, row-parallel biases; cost.memory.footprint.sp_replicated_params)
    in one flat call (cost.comm.sharded.partial_sum); with pp > 1 the first and last stages, which both hold the
    embedding (tied to the LM head, or read by the MTP modules), all-reduce its local gradient over the link between
    stages (cost.comm.collectives.ring_allreduce_time). Neither under LoRA, whose base weights are frozen."""
    t, pp, zero, shard = lay.tp, lay.pp, lay.zero, lay.zero_shard
    gbytes = GRAD_BYTES[lay.grad_dtype]
    on = lay.sequence_parallel & (t > 1) & (lay.lora is None)
    kept_whole = sp_replicated_params(model, pick(st.layers, r.big), pick(st.head, r.big) > 0)
    size = kept_whole * gbytes
    s = on * partial_sum(mesh, kept_whole, gbytes, BIT["tp"])
    sp = Comm("tp replicated-weight gradients (sp)", "all_reduce", "tp", nbytes=size, seconds=s, calls=1,
              bwd=s, unit="step", part="dp_comm", mask=BIT["tp"], active=on)
    link_bw, link_lat, link = sends.link
    on = (pp > 1) & (model.tie_embeddings or model.mtp_layers > 0) & (lay.lora is None)
    size = operators(model)["embedding"].weights[0].params / t * gbytes / np.where(zero >= 2, shard, 1)
    one = on * C.ring_allreduce_time(size, 2, link_bw, link_lat)
    return [sp, Comm("embedding copies gradient sync", "all_reduce", "embedding", nbytes=size, seconds=one, calls=1,
                     bwd=one, unit="step", part="dp_comm", tier=link, active=on)]


def optimizer_time(dev: Device, system: System, lay: Layouts, r: ReducedStage) -> np.ndarray:
    """The device's optimizer step on the stage's parameter shards (cost.comm.sharded.optimizer_seconds: the dense
    ones over the ZeRO group, the experts' over edp), less the share the host updates (cost.host.host_update), plus
    the gradient compression's compute (cost.comm.compression.compression_seconds), over the shared host's speed-up
    (cost.pipeline.stages.shared_host_speedup)."""
    zero, shard, edp, gbytes = lay.zero, lay.zero_shard, lay.edp, GRAD_BYTES[lay.grad_dtype]
    p, pe = r.params, r.expert_params
    return ((optimizer_seconds(dev, p, zero, shard, gbytes) + optimizer_seconds(dev, pe, zero, edp, gbytes))
            * (1 - host_share(lay)) + compression_seconds(dev, p, gbytes, lay.grad_compression, shard)
            + compression_seconds(dev, pe, gbytes, lay.grad_compression, edp)
            ) / shared_host_speedup(system, lay)


def state_offload(system: System, lay: Layouts, r: ReducedStage) -> list[Comm]:
    """The optimizer state kept in host memory: copied in for the update and out after it
    (cost.memory.offload.optimizer_copies), or updated on the host's CPUs (cost.host.host_update_time:
    DeepSpeed's ZeRO-Offload / SuperOffload), behind the last backward."""
    zero, shard, edp = lay.zero, lay.zero_shard, lay.edp
    opt_state = state_bytes(r.params, lay)["optimizer"] + state_bytes(r.expert_params, lay, edp)["optimizer"]
    copies = optimizer_copies(system, opt_state, lay.optimizer_offload and not host_updates(lay))
    updated = r.params / np.where(zero >= 1, shard, 1) + r.expert_params / np.where(zero >= 1, edp, 1)
    return [copies, host_update_comm(system, lay, updated, updated, r.bwd_mb)]


@dataclass
class HostStep:
    """The host's work per step on the slowest stage (`host_step`)."""

    kernels: np.ndarray  # operator launches (what calibrate's host probe fits to)
    calls: np.ndarray  # collective calls and sends
    body: np.ndarray  # seconds: its micro-batches' launches (and the step's calls where the stack syncs first)
    tail: np.ndarray  # seconds: the step's end, the optimizer loop (and the step's calls otherwise)
    total: np.ndarray


def host_step(model: ModelConfig, lay: Layouts, st: Stages, us: UnitSeconds, sends: Sends, slow: SlowestStage,
              r: ReducedStage, steps: list[Comm]) -> HostStep:
    """The host's launches, calls and seconds per step on the slowest stage (cost.host.launch_queue): its
    micro-batches' launches, the step's collective calls (the host copies of an offloaded state are copies, priced
    with the update), and at the step's end the loop over the stage's parameter tensors (clip, update, zero_grad;
    under LoRA the adapters, A and B per adapted linear) while the device reduces and updates. A stack that
    synchronises before the update has made the step's collective calls in its backward, before it."""
    m, rates = lay.num_microbatches, us.rates
    step_calls = sum(np.asarray(c.calls, float) * np.asarray(c.active, bool) for c in steps if c.part != "offload_comm")
    tensors = parameter_tensors(model)
    tensors_of = pick(st.layers * tensors["layer"] + st.embedding * tensors["embedding"]
                      + st.head * tensors["head"], r.big)
    if lay.lora is not None:
        tensors_of = pick(st.layers, r.big) * 2 * len(lay.lora.targets)
    host_update = rates.optimizer_tensor_s * tensors_of + rates.optimizer_step_s * (tensors_of > 0)
    host_calls_s = launch_seconds(rates, step_calls) + np.zeros(len(lay))
    sync = rates.sync_before_optimizer
    body = m * slow.host_mb + (host_calls_s if sync else 0.0)
    tail = host_update + (0.0 if sync else host_calls_s)
    return HostStep(kernels=sum(us.kernels[u] * slow.held[u] for u in UNITS) * m,
                    calls=(sum(us.calls[u] * slow.held[u] for u in UNITS) + sends.calls) * m + step_calls,
                    body=body, tail=tail, total=body + tail)


def step_breakdown(lay: Layouts, slow: SlowestStage, dp_exposed, t_opt, t_copy, host: HostStep,
                   rates: HostRates) -> dict[str, np.ndarray]:
    """The step's TimeBreakdown parts. The step (cost.host.launch_queue.step_seconds): the pipeline at the device's
    and its host's seconds, then the exposed data-parallel collectives, the optimizer and the offloaded state's
    copies at the device against the host's end of step. Its parts sum to it: the slowest stage's parts m times,
    the pipeline's bubble at the device's seconds (`device_bubble`), and what the device waits on the host."""
    m, none = lay.num_microbatches, np.zeros(len(lay))
    bubble = device_bubble(lay, slow.device_mb, slow.mean_device, slow.bottleneck)
    t_pipe_device = m * pick(slow.device_mb, slow.bottleneck) + bubble
    body = step_seconds(slow.pipeline, t_pipe_device, dp_exposed + t_opt + t_copy, host.body, host.tail,
                        slow.synced, rates.serial, slow.first, rates.sync_before_optimizer)
    time = {k: slow.part[k] * m for k in STAGE_PARTS}
    time.update(dp_comm=dp_exposed + none, bubble=bubble, optimizer=t_opt + none,
                host=clean(body - t_pipe_device - dp_exposed - t_opt - t_copy, body),
                offload_comm=time["offload_comm"] + t_copy, overhead=time["overhead"], total=body)
    return time


@dataclass
class Clocked:
    """The step at the clock it runs at under the power limit (`at_power_clock`)."""

    time: dict[str, np.ndarray]  # TimeBreakdown parts
    clock: np.ndarray  # fraction of the kernel tables' clock
    unit_time: dict[str, np.ndarray]  # unit -> seconds per micro-batch (all parts)
    fwd: dict[str, np.ndarray]  # ... of which forward
    recompute: dict[str, np.ndarray]  # ... of which recomputed forward
    stage_time_max: np.ndarray  # the slowest stage's seconds per micro-batch


def at_power_clock(model: ModelConfig, system: System, lay: Layouts, st: Stages, us: UnitSeconds, sends: Sends,
                   slow: SlowestStage, time: dict, host_total) -> Clocked:
    """The clock the step's own mix sustains under the board limit (cost.power.step_clock), before a calibration
    from runs. The kernel tables price at the loop's clock (cost.compute.kernels.Device.fraction); from there to the
    step's: the units (cost.power.clocked_units), the bubble of their pipeline, and the host's part refilled
    (cost.power.refill_host), so that the stages trace to the breakdown. Without a power model: as priced, clock 1."""
    power = system.accelerator.power
    if power is None:
        return Clocked(time, np.ones(len(lay)), us.time, us.fwd, {u: us.parts[u]["recompute"] for u in UNITS},
                       slow.seconds)
    priced = priced_clock(power)
    clock = step_clock(power, time, priced)
    compute_share = recompute_compute_share(time)
    unit_time, fwd, recomputed = clocked_units(us.parts, us.fwd, compute_share, clock / priced)
    device_mb, mean = device_pipeline(model, st, unit_time, sends.seconds, lay.pp)
    t_max = pick(device_mb + slow.wait, slow.bottleneck)
    after = dict(at_clock(time, clock / priced), bubble=device_bubble(lay, device_mb, mean, slow.bottleneck))
    after["total"] = sum(after[k] for k in after if k != "total")
    return Clocked(refill_host(after, time, host_total), clock, unit_time, fwd, recomputed, t_max)


def step_flops(model: ModelConfig, lay: Layouts, share) -> tuple[np.ndarray, np.ndarray]:
    """(model FLOPs, hardware FLOPs) per step: the model's (cost.compute.flops.model_flops_per_token; under LoRA
    its frozen base's), and those plus the forward the plan's recompute re-runs (recompute_flops_per_token; full
    by Megatron-LM's block method: `share` of the layers), the MTP modules' (mtp_flops_per_token) and a tiled
    loss's rebuilt logits (tiled_loss_flops_per_token)."""
    tokens = lay.tokens_per_step
    mflops = tokens * model_flops_per_token(model, lay.seq_len, frozen=lay.lora is not None)
    extra = {mode: recompute_flops_per_token(model, lay.seq_len, mode, lay.recompute_saved or ())
             for mode in get_args(Recompute)}
    extra["full"] = extra["full"] * share
    hflops = mflops + tokens * (np.select([among(lay.recompute, (k,)) for k in extra], list(extra.values()))
                                + mtp_flops_per_token(model, lay.seq_len)
                                + tiled_loss_flops_per_token(model, lay.loss_chunks))
    return mflops, hflops
