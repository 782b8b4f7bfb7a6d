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
    host_room: float  # host memory per device for offloaded tensors (memory_fit.host_limit)
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
    """Predict one training step of every plan in `lay` (resolved plans of one job) on `system`.

    `memory`: what `memory.stage_memory` returned for these plans, if the caller has it already; `headroom`: the
    share of the allocator's room the fit test keeps free beyond the band (`memory_fit.memory_limits`).
    """
    dev, mesh = Device(model, system, lay), Mesh.of(system, lay)
    t, pp, v, m, rc = lay.tp, lay.pp, lay.vpp, lay.num_microbatches, lay.recompute
    shard, zero, sp = lay.zero_shard, lay.zero, lay.sequence_parallel
    stack = dev.stack
    f, overlap = overlap_fraction(system, stack), lay.overlap_dp_comm
    # ZeRO 0-2's reduction (and ZeRO-1/2's gather) overlap only where the stack runs them per bucket, and with a
    # pipeline only where it syncs each chunk on its last micro-batch (not after the flush)
    overlap_steps = overlap & stack.overlap_grad_reduce & ((pp == 1) | stack.overlap_grad_reduce_with_pp)
    gbytes = GRAD_BYTES[lay.grad_dtype]
    wbytes = layout_wire_bytes(model, lay)  # what the gradient collectives carry per element (cost.comm.compression)
    none = np.zeros(len(lay))

    # --- one layer, the embedding and the head on one device, once per distinct row (cost.compute.units) ------------
    units = unit_costs(model, system, lay)
    per_plan = units.per_plan
    parts = {u: {k: per_plan(x) for k, x in units.parts[u].items()} for u in UNITS}
    fwd, bwd = ({u: per_plan(x[u]) for u in UNITS} for x in (units.fwd, units.bwd))
    kernels, calls_of = ({u: per_plan(x[u]) for u in UNITS} for x in (units.kernels, units.calls))
    host_f, host_b = ({u: per_plan(x[u]) for u in UNITS} for x in (units.host_f, units.host_b))
    speedup = per_plan(units.speedup)
    st = Stages.of(model, lay)
    rates = units.rates
    experts = ExpertDataGroup(system, lay, model)

    # --- pipeline: send activations forward and gradients backward at each chunk boundary ----------------
    link_bw, link_lat, link = C.group_p2p_link(system, t * lay.cp * lay.dp, pp)  # also the tied-embedding sync
    s_pp = lay.tokens_per_microbatch * model.hidden * ACT_BYTES / lay.sp_divisor
    one = C.p2p_time(s_pp, link_bw, link_lat)
    p2p = np.where(pp > 1, 2 * v * one, 0.0)
    stage_comms = [Comm("pp activations/gradients", "send/recv", "pp", nbytes=s_pp, seconds=one, calls=2 * v,
                        fwd=p2p / 2, bwd=p2p / 2, unit="stage", part="pp_comm", tier=link, active=pp > 1)]

    # --- stages ----------------------------------------------------------------------------------------------
    # per micro-batch of each stage: the device's seconds (its units and sends), and the host's launching them;
    # the stage takes the longer where the host runs ahead (cost.host.launch_queue.queued). The slowest stage's, part by part.
    sends = np.where(pp > 1, 2.0 * v, 0.0)  # send/recv calls per micro-batch of a stage
    send_host = launch_seconds(rates, sends)
    # full recompute by Megatron-LM's block method re-runs only some of a stage's layers
    share = recomputed_share(model, lay)
    bwd["layer"] = bwd["layer"] - (1 - share) * parts["layer"]["recompute"]
    parts["layer"]["recompute"] = parts["layer"]["recompute"] * share
    host_b["layer"] = host_b["layer"] - (1 - share) * per_plan(units.host_r["layer"])  # ... and launches as many
    unit_time = {u: sum(parts[u].values()) for u in UNITS}

    def device_pipeline(unit_time):  # (per micro-batch of each stage, the stages' mean): the device's seconds alone
        mean = (sum(unit_time[u] * n for u, n in unit_counts(model).items()) + pp * p2p) / pp
        return st.seconds(unit_time) + p2p, mean

    device_mb, t_mean_device = device_pipeline(unit_time)
    dev_f, dev_b = st.seconds(fwd) + p2p / 2, st.seconds(bwd) + p2p / 2
    # a pipeline's chunk steps and a synchronising MoE dispatch break the launch queue's stretch: the calls after
    # each are exposed (cost.host.launch_queue.stage_launches)
    launch_f, launch_b, synced, wait = stage_launches(rates, model, st.seconds(host_f), st.seconds(host_b), send_host,
                                                      dev_f, dev_b, pp, v, st.layers)
    per_mb = device_mb + wait  # the device's seconds, and those it waits on its host
    bottleneck = np.argmax(np.where(st.valid, per_mb, -np.inf), axis=0)
    held = {u: pick(st.count(u), bottleneck) for u in UNITS}  # units on the slowest stage
    stage_part = {k: sum(parts[u][k] * held[u] for u in UNITS) for k in STAGE_PARTS}
    stage_part["pp_comm"] = stage_part["pp_comm"] + p2p
    t_max = pick(per_mb, bottleneck)
    # the mean stage: the device's mean, and the stages' mean wait on their hosts
    t_pipe = pipeline_time(m, t_max, t_mean_device + st.mean(wait, pp), pp, v)
    host_mb = pick(launch_f + launch_b, bottleneck)  # the slowest stage's host seconds per micro-batch

    # --- data parallel (ZeRO 0/1/2), tied-embedding sync and optimizer, for the stage with most parameters -
    params_of = stage_params(model, lay, st.layers, st.embedding > 0, st.head > 0)
    experts_of = st.layers * expert_layer_params(model, lay)  # a MoE model's routed experts, reduced over edp
    big = np.argmax(np.where(st.valid, params_of + experts_of, -np.inf), axis=0)
    p_stage, pe_stage, nl = pick(params_of, big), pick(experts_of, big), np.maximum(pick(st.layers, big), 1)
    if lay.lora is not None:  # a LoRA fine-tune reduces, gathers and updates its adapters alone (spec.plan.finetune)
        p_stage, pe_stage = pick(st.layers, big) * adapter_params(model, lay), 0.0 * pe_stage
    # what the gradient reduction and the weight gathers hide behind: the backward / forward as long as the stage
    # runs them, the device's or its host's (cost.host.launch_queue.queued; a CPU device: both, one after the other)
    on_big = lambda per_unit: sum(per_unit[u] * pick(st.count(u), big) for u in UNITS)  # noqa: E731
    fwd_mb = queued(on_big(fwd), 0.0, on_big(host_f), 0.0, False, rates.serial)
    bwd_mb = queued(on_big(bwd), 0.0, on_big(host_b), 0.0, False, rates.serial)
    steps: list[Comm] = []
    on = (shard > 1) & (zero < 3)
    kind = np.where(zero == 0, "all_reduce", "reduce_scatter")
    g = on * gradient_sync(mesh, p_stage, wbytes, zero)
    # a MoE model's routed experts reduce over their edp group (MoE parallel folding), in the same backward
    edp = lay.edp
    on_e = (edp > 1) & (zero < 3) & (pe_stage > 0)
    g_e = on_e * gradient_sync(experts, pe_stage, wbytes, zero)
    reps = np.where(zero == 2, m, 1)  # ZeRO-2 reduces every micro-batch (gradients are not kept whole)
    # with interleaving, the chunks done before the last overlap what the schedule runs after the first of them:
    # in Megatron-LM's backward order the other vpp - 1 chunks' last pp micro-batches, (vpp - 1) pp chunk-
    # backwards (and as many chunk-forwards before the last chunk's weights are needed in the next forward)
    after = np.minimum((v - 1) * pp, m * v - 1)
    # hybrid sharding: the gradient shards all-reduced over the ZeRO group's replicas in the backward: FSDP2 (zero
    # 2/3) after every micro-batch's reduce-scatter but under a pipeline schedule (the last backward's alone)
    g_r = replicate_sync(system, lay, p_stage, wbytes)
    on_r = (lay.dp_replicate > 1) & (g_r > 0)
    reps_r = np.where((zero >= 2) & (pp == 1), m, 1) * on_r

    # torch DDP's buckets where the stack names them and wraps the stage in DDP (the plain-torch executor: ZeRO 0/1
    # without tp or pp; with tp, ZeRO-1 runs as FSDP2 and ZeRO-0 as one all-reduce: execute.parallel.data): the last
    # bucket, the first layers', waits for the end of the backward; DDP sizes its buckets by the gradient tensors'
    # own bytes (their dtype), whatever a communication hook then sends
    ddp = (zero < 2) & (t == 1) & (pp == 1)
    pieces = nl if stack.ddp_buckets is None else np.where(ddp, ddp_pieces(p_stage * gbytes, stack.ddp_buckets), nl)

    def exposed(traffic, chunks):  # one backward's exposed seconds of `traffic` sharing its window
        return np.where(overlap_steps, with_overlap(traffic, chunked(traffic, bwd_mb, pieces, chunks,
                                                                     after * bwd_mb / v), f), traffic)

    # dense and expert buckets, and the replicas' all-reduce where it runs in the same backward, share the window
    # they hide behind (ZeRO-2: every micro-batch's; under a pipeline the replicas' runs in the last one, whose
    # model chunks sync as they finish); their exposed seconds split by traffic. ZeRO-3's reduce-scatters hide
    # per unit (zero3_comm), and the replicas' all-reduce is priced against the whole backward besides
    both, chunks = g + g_e, np.where(zero == 2, 1, v)
    joint = np.minimum(reps * (both > 0), reps_r)  # backwards that run both
    dp_exp = (reps * (both > 0) - joint) * exposed(both, chunks)
    rep_exp = (reps_r - joint) * exposed(g_r, v)
    all_three = both + g_r
    shared = joint * exposed(all_three, np.where(reps_r < reps, v, chunks))
    dp_exp = dp_exp + shared * np.divide(both, all_three, out=np.zeros_like(all_three), where=all_three > 0)
    rep_exp = rep_exp + shared * np.divide(g_r, all_three, out=np.zeros_like(all_three), where=all_three > 0)
    part = np.divide(g, both, out=np.ones_like(both), where=both > 0)
    steps.append(Comm("dp gradient reduction", kind, "dp", nbytes=p_stage * wbytes, seconds=g, calls=reps,
                      bwd=dp_exp * part, unit="step", part="dp_comm", mask=ZERO_GROUP, active=on))
    steps.append(Comm("edp expert gradient reduction", kind, "edp", nbytes=pe_stage * wbytes, seconds=g_e,
                      calls=reps * on_e, bwd=dp_exp * (1 - part), unit="step", part="dp_comm",
                      tier=experts.tiers(), active=on_e))
    steps.append(Comm("dp replicate gradient all-reduce", "all_reduce", "replicate",
                      nbytes=p_stage * wbytes / shard, seconds=g_r, calls=reps_r, bwd=rep_exp, unit="step",
                      part="dp_comm", tier=group_tiers(system, *replica_group(lay), lay.gpus), active=on_r))
    on = (shard > 1) & np.isin(zero, (1, 2))
    w = on * weight_gather(mesh, p_stage)
    on_e = (edp > 1) & np.isin(zero, (1, 2)) & (pe_stage > 0)
    w_e = on_e * weight_gather(experts, pe_stage)
    gather_overlaps = overlap_steps & ((zero == 2) | stack.overlap_param_gather)  # ZeRO-1: as the stack runs it
    both = w + w_e
    exp = np.where(gather_overlaps, with_overlap(both, chunked(both, fwd_mb, nl, v, after * fwd_mb / v), f), both)
    part = np.divide(w, both, out=np.ones_like(both), where=both > 0)
    steps.append(Comm("zero weight all-gather", "all_gather", "dp", nbytes=p_stage * WEIGHT_BYTES, seconds=w, calls=1,
                      fwd=exp * part, unit="step", part="dp_comm", mask=ZERO_GROUP, active=on))
    steps.append(Comm("zero expert weight all-gather (edp)", "all_gather", "edp", nbytes=pe_stage * WEIGHT_BYTES,
                      seconds=w_e, calls=1 * on_e, fwd=exp * (1 - part), unit="step", part="dp_comm",
                      tier=experts.tiers(), active=on_e))
    on = sp & (t > 1) & (lay.lora is None)  # the norms train unless frozen under LoRA
    kept_whole = sp_replicated_params(model, pick(st.layers, big), pick(st.head, big) > 0)
    size = kept_whole * gbytes
    r = on * partial_sum(mesh, kept_whole, gbytes, BIT["tp"])
    steps.append(Comm("tp replicated-weight gradients (sp)", "all_reduce", "tp", nbytes=size, seconds=r, calls=1,
                      bwd=r, unit="step", part="dp_comm", mask=BIT["tp"], active=on))
    # first and last stage hold copies of the embedding: tied to the LM head, or read by the MTP modules
    on = (pp > 1) & (model.tie_embeddings or model.mtp_layers > 0) & (lay.lora is None)
    size = operators(model)["embedding"].weights[0].params / t * gbytes / np.where(zero >= 2, shard, 1)  # the local gradient
    one = on * C.ring_allreduce_time(size, 2, link_bw, link_lat)
    steps.append(Comm("embedding copies gradient sync", "all_reduce", "embedding", nbytes=size, seconds=one, calls=1,
                      bwd=one, unit="step", part="dp_comm", tier=link, active=on))
    dp_exposed = sum(c.exposed for c in steps)
    t_opt = ((optimizer_seconds(dev, p_stage, zero, shard, gbytes) + optimizer_seconds(dev, pe_stage, zero, edp, gbytes))
             * (1 - host_share(lay)) + compression_seconds(dev, p_stage, gbytes, lay.grad_compression, shard)
             + compression_seconds(dev, pe_stage, gbytes, lay.grad_compression, edp)
             ) / shared_host_speedup(system, lay)

    # the optimizer state kept in host memory: in for the update, out after it (cost.memory.offload.optimizer_copies)
    opt_state = state_bytes(p_stage, lay)["optimizer"] + state_bytes(pe_stage, lay, edp)["optimizer"]
    steps.append(optimizer_copies(system, opt_state, lay.optimizer_offload and not host_updates(lay)))
    # ... or updated on the host's CPUs (cost.host.host_update_time: DeepSpeed's ZeRO-Offload / SuperOffload)
    updated = p_stage / np.where(zero >= 1, shard, 1) + pe_stage / np.where(zero >= 1, edp, 1)
    steps.append(host_update_comm(system, lay, updated, updated, bwd_mb))
    t_copy = steps[-2].exposed + steps[-1].exposed + none
    # the step's collective calls (the host copies of an offloaded state are copies, priced with the update)
    step_calls = sum(np.asarray(c.calls, float) * np.asarray(c.active, bool) for c in steps if c.part != "offload_comm")
    # the step's end: the host loops over the stage's parameter tensors (clip, update, zero_grad) and makes the
    # step's calls while the device reduces and updates (cost.host.launch_queue.step_seconds)
    tensors = parameter_tensors(model)
    tensors_of = pick(st.layers * tensors["layer"] + st.embedding * tensors["embedding"]
                      + st.head * tensors["head"], big)
    if lay.lora is not None:  # the optimizer loops over the adapters, A and B per adapted linear
        tensors_of = pick(st.layers, big) * 2 * len(lay.lora.targets)
    host_update = rates.optimizer_tensor_s * tensors_of + rates.optimizer_step_s * (tensors_of > 0)
    host_calls_s = launch_seconds(rates, step_calls) + none
    # a stack that synchronises before the update has made the step's collective calls in its backward, before it
    sync = rates.sync_before_optimizer
    host_body = m * host_mb + (host_calls_s if sync else 0.0)
    host_tail = host_update + (0.0 if sync else host_calls_s)
    host_total = host_body + host_tail  # the host's seconds per step on the slowest stage
    # the pipeline at the device's seconds alone (what the host's lead is measured against)
    def device_bubble(device_mb, mean):  # the pipeline's bubble at the device's seconds (cost.pipeline.schedules)
        return pipeline_time(m, pick(device_mb, bottleneck), mean, pp, v) - m * pick(device_mb, bottleneck)

    t_pipe_device = m * pick(device_mb, bottleneck) + device_bubble(device_mb, t_mean_device)
    first = tuple(pick(x, bottleneck) for x in (launch_f, dev_f, launch_b, dev_b))  # one micro-batch's passes
    body = step_seconds(t_pipe, t_pipe_device, dp_exposed + t_opt + t_copy, host_body, host_tail,
                        pick(synced, bottleneck), rates.serial, first, sync)

    step = body
    time = {k: stage_part[k] * m for k in STAGE_PARTS}
    # parts sum to the step: the pipeline's bubble at the device's seconds, what the device waits on the host
    time.update(dp_comm=dp_exposed + none, bubble=device_bubble(device_mb, t_mean_device),
                optimizer=t_opt + none, host=clean(body - t_pipe_device - dp_exposed - t_opt - t_copy, body),
                offload_comm=time["offload_comm"] + t_copy,
                overhead=time["overhead"], total=step)
    # what the host dispatches per step on the slowest stage (what calibrate's host probe fits to)
    host_kernels = sum(kernels[u] * held[u] for u in UNITS) * m
    host_calls = (sum(calls_of[u] * held[u] for u in UNITS) + sends) * m + step_calls
    # the clock the step's own mix sustains under the board limit (cost.power), before a calibration from runs
    power, clock = system.accelerator.power, np.ones(len(lay))
    if power is not None:  # priced at the loop's clock (cost.compute.kernels.Device.fraction): from there to the step's
        priced = priced_clock(power)
        clock = step_clock(power, time, priced)
        compute_share = recompute_compute_share(time)
        before = time
        # the units at that clock, and the bubble of their pipeline: the stages trace to the breakdown
        unit_time, fwd, recomputed = clocked_units(parts, fwd, compute_share, clock / priced)
        parts = {u: {**parts[u], "recompute": recomputed[u]} for u in UNITS}
        device_mb, t_mean_device = device_pipeline(unit_time)
        t_max = pick(device_mb + wait, bottleneck)
        time = dict(at_clock(before, clock / priced), bubble=device_bubble(device_mb, t_mean_device))
        time["total"] = sum(time[k] for k in time if k != "total")
        time = refill_host(time, before, host_total)
    time = calibrated(time, system, lay.stack)
    memory, mem_kind = stage_memory(model, system, lay, st) if memory is None else memory

    # --- FLOPs ---------------------------------------------------------------------------------------------
    tokens = lay.tokens_per_step
    mflops = tokens * model_flops_per_token(model, lay.seq_len, frozen=lay.lora is not None)
    extra = {mode: recompute_flops_per_token(model, lay.seq_len, mode, lay.recompute_saved or ())
             for mode in get_args(Recompute)}
    extra["full"] = extra["full"] * share  # Megatron-LM's block method: some of the layers
    hflops = mflops + tokens * (np.select([among(rc, (k,)) for k in extra], list(extra.values()))
                                + mtp_flops_per_token(model, lay.seq_len)
                                + tiled_loss_flops_per_token(model, lay.loss_chunks))
    peak_dtype = lay.precision if lay.precision in NARROW_PRECISIONS else "bf16"
    return Step(lay=lay, stages=st, units=units, stage_comms=stage_comms, step_comms=steps, time=time, memory=memory,
                bottleneck=bottleneck, memory_kind=mem_kind, capacity=system.accelerator.hbm_bytes,
                headroom=headroom, **dict(zip(("budget", "limit"), memory_limits(system, lay.stack, headroom))),
                host_room=host_limit(system),
                model_flops=mflops, hardware_flops=hflops, peak_flops=system.accelerator.peak_flops(peak_dtype),
                peak_dtype=peak_dtype, unit_time={u: unit_time[u] + none for u in UNITS},
                unit_fwd={u: fwd[u] + none for u in UNITS},
                unit_recompute={u: parts[u]["recompute"] + none for u in UNITS}, p2p=p2p, stage_time_max=t_max,
                compute_speedup=speedup + none, moe_window=per_plan(units.moe_window),
                host_kernels=host_kernels + none, host_calls=host_calls + none, host_s=host_total + none,
                host_rates=rates, unit_host={u: (host_f[u] + none, host_b[u] + none) for u in UNITS},
                send_host=send_host + none, clock=clock)
