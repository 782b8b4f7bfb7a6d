"""The step at the clock its own kernel mix sustains under the board power limit (`at_power_clock`, cost.power)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ..layouts import Layouts
from ..pipeline.stages import UNITS, Stages, pick
from ..power import at_clock, clocked_units, priced_clock, recompute_compute_share, refill_host, step_clock
from .stage import Sends, SlowestStage, UnitSeconds, device_bubble, device_pipeline


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
