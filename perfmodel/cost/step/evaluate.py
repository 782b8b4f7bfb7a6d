"""One training step of many plans at once (`evaluate`), composed of the stages of this package in order, and
what it returns (`Step`); the step's model and hardware FLOPs (`step_flops`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import numpy as np

from ...spec.hardware.system import DEFAULT_HEADROOM, NARROW_PRECISIONS, System
from ...spec.model.config import ModelConfig
from ...spec.plan.recompute import Recompute
from ..comm.mesh import Mesh
from ..comm.sharded import Comm
from ..compute.flops import (
    model_flops_per_token,
    mtp_flops_per_token,
    recompute_flops_per_token,
    tiled_loss_flops_per_token,
)
from ..compute.kernels import Device
from ..compute.moe import ExpertDataGroup
from ..compute.units import Units
from ..host.launch_queue import HostRates
from ..layouts import Layouts, among
from ..memory.fit import VERDICTS, host_limit, memory_limits, memory_verdict
from ..memory.footprint import stage_memory
from ..pipeline.stages import UNITS, Stages
from .breakdown import step_breakdown
from .clock import at_power_clock
from .data_parallel import gradient_reductions, optimizer_time, reduced_stage, state_offload, step_syncs, weight_gathers
from .host import host_step
from .run_fit import calibrated
from .stage import pipeline_sends, slowest_stage, unit_seconds


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
    offload = state_offload(system, lay, big)  # the optimizer state in host memory: offload_comm
    t_copy = sum(c.exposed for c in offload) + np.zeros(len(lay))
    steps += offload
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
