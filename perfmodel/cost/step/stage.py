"""Per micro-batch: one layer, the embedding and the head on one device (`unit_seconds`), a stage's pipeline sends
(`pipeline_sends`), and the stages with the slowest of them and the pipeline's seconds (`slowest_stage`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ..comm import collectives as C
from ..comm.sharded import Comm
from ..compute.kernels import ACT_BYTES
from ..compute.units import STAGE_PARTS, Units, unit_costs
from ..host.launch_queue import HostRates, launch_seconds, stage_launches
from ..layouts import Layouts
from ..memory.footprint import recomputed_share
from ..pipeline.schedules import pipeline_time
from ..pipeline.stages import UNITS, Stages, pick, unit_counts


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
