"""Whether a plan's memory fits: the device's room for the reserved view (cost.memory.footprint), widened by the band the
measured peaks give the estimate (the stack profile's memory_band), and the host's memory for what the plan
offloads there (cost.memory.offload)."""

from __future__ import annotations

import numpy as np

from ...errors import InputError
from ...spec.hardware.system import DEFAULT_HEADROOM, GiB, System
from ...spec.plan.layout import resolve
from ...spec.stack.profile import MemoryBand, load_stack
from ..layouts import Layouts
from .footprint import stage_memory


def memory_budget(system: System, headroom: float = DEFAULT_HEADROOM) -> float:
    """Bytes the reserved view may reach on one device: (capacity - runtime) * (1 - headroom), the runtime being
    the system's memory_overhead_gib (context, NCCL buffers, workspaces outside torch's allocator). InputError
    for a headroom that is not a number >= 0 and < 1."""
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0.0 <= headroom < 1.0:
        raise InputError(f"headroom = {headroom!r}; valid: a share of the memory to keep free, >= 0 and < 1 "
                         f"(default {DEFAULT_HEADROOM})")
    return (system.accelerator.hbm_bytes - system.memory_overhead_bytes) * (1.0 - headroom)


VERDICTS = ("fits", "tight", "does not fit")
NO_BAND = MemoryBand(low=0.0, high=0.0, rows=1, groups=1, source="no band: the estimate taken as exact")


def reserved_band(stack: str | None) -> MemoryBand:
    """The reserved view's band of the stack's profile (`Stack.memory_band`; NO_BAND where it has none)."""
    return load_stack(stack).memory_band.get("reserved", NO_BAND) if stack else NO_BAND


def memory_limits(system: System, stack: str | None, headroom: float = DEFAULT_HEADROOM) -> tuple[float, float]:
    """(budget, limit), bytes of predicted reserved memory on one device: a plan fits if the band's upper end
    predicted * (1 + high) stays within what the allocator can reserve less the headroom the user keeps free,
    (capacity - runtime) * (1 - headroom) (`memory_budget`), so budget = that / (1 + high); it does not fit if
    even the lower end predicted * (1 + low) exceeds capacity - runtime, so limit = that / (1 + low). Between the
    two the capacity lies inside the band: tight. The band is the stack's measured-peak residuals' 0.1/0.9
    quantiles (`reserved_band`; written by the measured-memory benchmark)."""
    band = reserved_band(stack)
    return memory_budget(system, headroom) / (1.0 + band.high), memory_budget(system, 0.0) / (1.0 + band.low)


def band_ends(reserved, room: float, budget: float, limit: float, headroom: float) -> tuple:
    """(reserved * (1 + low), reserved * (1 + high)), bytes: the band's ends around a reserved estimate, read back
    from `memory_limits`' budget = room (1 - headroom) / (1 + high) and limit = room / (1 + low), `room` being
    capacity - runtime (`memory_budget` with no headroom)."""
    return reserved * room / limit, reserved * room * (1 - headroom) / budget


def host_limit(system: System) -> float:
    """Bytes of host memory per device that offloaded tensors may fill (System.host; none without a host link)."""
    return system.host.memory_gib * GiB if system.host is not None else 0.0


def memory_verdict(reserved, budget: float, limit: float, host=0.0, host_room: float = 0.0):
    """fits (the band's upper end within capacity - runtime less the headroom: reserved <= budget), tight (the
    capacity inside the band: reserved <= limit), or does not fit (even the band's lower end beyond what the
    allocator can reserve, or `host` bytes offloaded beyond the host's `host_room`, `host_limit`); budget and
    limit from `memory_limits`. Only "does not fit" takes a plan out (a search keeps tight plans and says so):
    runs that really ran sit inside the band."""
    r = np.asarray(reserved)
    device = np.where(r <= budget, VERDICTS[0], np.where(r <= limit, VERDICTS[1], VERDICTS[2]))
    return np.where(np.asarray(host) > host_room, VERDICTS[2], device)


def plan_fit(model, system: System, plan, headroom: float = DEFAULT_HEADROOM) -> dict:
    """The fit verdict of `plan` (resolved here) from its memory alone, without timing the step, as a search prunes
    before it times the rest: the fullest stage's views (`cost.memory.footprint.stage_memory`) against `memory_limits`.
    `estimate` reports the same verdict with the step's timing. Returns bytes: verdict, reserved, low and high (the
    band's ends), room (capacity - runtime), host, and the parts (weights, gradients, optimizer, activations,
    transient)."""
    plan = resolve(plan, model, system)
    mem, _ = stage_memory(model, system, Layouts.from_plan(plan))
    budget, limit = memory_limits(system, plan.stack, headroom)
    room = memory_budget(system, 0.0)
    r = float(mem["reserved"][0])
    out = {k: float(mem[k][0]) for k in ("weights", "gradients", "optimizer", "activations", "transient", "host")}
    return dict(out, verdict=str(memory_verdict(r, budget, limit, out["host"], host_limit(system))), reserved=r,
                **dict(zip(("low", "high"), band_ends(r, room, budget, limit, headroom))), room=room, stack=plan.stack,
                gpus=plan.gpus)
