"""The whole run of a plan: steps, wall-clock days, device-hours and dollars, checkpoints, interruptions and
goodput (`perfmodel forecast`; every output field is explained in docs/forecast.md).

From a plan's estimate (`cost.estimate`): the failure-free compute time of all steps (a batch-size ramp's steps
at their own global batch first). The checkpoint holds every parameter's bf16 weight and its fp32 master copy and
two Adam moments (`run.reliability.checkpoint_bytes`), written by all nodes at once to the system's store
(`spec.hardware.system.Storage`, or `run.reliability.DEFAULT_STORAGE`). Interruptions, checkpoint interval, wall time
and goodput follow `perfmodel.run.reliability` (Young 1974; Daly 2006).
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field

from ..cost.estimate import estimate
from .energy import Power, activity, facility_kwh, power_for
from ..errors import InputError, check_number
from ..types import Count, Schema
from ..spec.hardware.system import Storage, System, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.model.catalogue import load_model
from ..spec.plan.layout import Plan, resolve
from .reliability import (
    DEFAULT_STORAGE,
    INTERRUPTION_RATE,
    RESTART_OVERHEAD_S,
    SECONDS_PER_HOUR,
    checkpoint_bytes,
    goodput_at,
)

class RampStage(Schema):
    """Steps run at a smaller global batch before the plan's own (a batch-size warm-up)."""

    global_batch: Count
    steps: Count


class Forecast(Schema):
    """A training run of `tokens` tokens with the plan: time, money, checkpoints, interruptions."""

    model: str
    hardware: str
    gpus: int
    tokens: float = Field(description="tokens trained")
    steps: int = Field(description="optimizer steps (the ramp's included)")
    step_time_s: float = Field(description="predicted seconds per step at the plan's global batch")
    compute_s: float = Field(description="failure-free seconds of all steps")
    wall_clock_s: float = Field(description="expected seconds to finish, checkpoints, lost work and restarts "
                                            "included (run.reliability.expected_wall_s)")
    wall_clock_days: float
    device_hours: float = Field(description="gpus x wall_clock_s / 3600")
    price_usd_per_device_hour: float | None
    price_source: str = ""
    cost_usd: float | None = Field(description="device_hours x price (null: no price known; give --price)")
    goodput: float = Field(description="compute_s / wall_clock_s (0-1)")
    interruption_rate_per_device_hour: float
    job_mtbf_hours: float = Field(description="mean hours between interruptions of the whole job")
    interruptions_expected: float = Field(description="wall_clock_s / job MTBF")
    checkpoint_bytes: float = Field(description="bf16 weights + fp32 master weights + Adam moments, whole model")
    checkpoint_mode: Literal["sync", "async"]
    checkpoint_write_s: float = Field(description="seconds to write one checkpoint to the store")
    checkpoint_read_s: float = Field(description="seconds to read it back on a restart")
    checkpoint_blocking_s: float = Field(description="seconds a checkpoint stops training (sync: the write; "
                                                     "async: the copy to host memory)")
    checkpoint_interval_s: float = Field(description="compute seconds between checkpoints")
    checkpoint_interval_steps: float
    interval_rule: str = Field(description="daly (optimum), or given")
    restart_s: float = Field(description="seconds from an interruption to training again: detection and "
                                         "rescheduling plus reading the checkpoint")
    restart_overhead_s: float = Field(description="of that, detection and rescheduling")
    storage_source: str = Field(description="the spec's storage tier, or the default's citation")
    energy_kwh: float | None = Field(description="facility energy of the run, kWh (perfmodel.run.energy; null: no "
                                                 "board power known, give --device-power)")
    average_power_kw: float | None = Field(description="energy_kwh / wall-clock hours: the job's mean facility draw")
    device_activity: float = Field(description="mean dynamic activity of a device over a step, 0-1 "
                                               "(perfmodel.run.energy.activity)")
    power: Power | None = Field(description="the power inputs and their sources")
    grid_intensity_g_per_kwh: float | None = None
    emissions_t_co2: float | None = Field(description="energy_kwh x --grid-intensity, tonnes CO2 (null without it)")
    notes: list[str] = Field(default_factory=list)


# Each number input's valid range (the CLI's flags take the same, cli.commands.forecast): the physical one, with upper
# limits far beyond any real job that keep every derived time and cost finite (a restart of 1e308 s overflowed the
# goodput model).
RANGES = {
    "--price": dict(low=0.0, high=1e6, above=True, what="USD per device-hour"),
    "--interruption-rate": dict(low=0.0, high=1.0, above=True, what="interruptions per device-hour; Llama 3: 1.97e-5"),
    "--restart-s": dict(low=0.0, high=1e7, what="seconds"),
    # an interval past the run means no checkpoint (Daly's overflow is refused in run.reliability.expected_wall_s)
    "--checkpoint-interval": dict(low=0.0, high=1e12, above=True, what="seconds of compute"),
    "--grid-intensity": dict(low=0.0, high=1e4, what="gCO2 per kWh"),
}


def check_ramp(ramp: list[RampStage] | None, plan: Plan) -> None:
    """Each ramp stage's global batch is at most the plan's and splits into its data-parallel micro-batches."""
    step = plan.dp * plan.micro_batch
    for stage in ramp or []:
        if stage.global_batch > plan.global_batch:
            raise InputError(f"--ramp: global batch {stage.global_batch} exceeds the plan's {plan.global_batch}; "
                             "valid: a ramp up to the plan's global batch")
        if stage.global_batch % step:
            raise InputError(f"--ramp: global batch {stage.global_batch} is not a multiple of dp*micro_batch = "
                             f"{plan.dp}*{plan.micro_batch} = {step}; valid: stages of {step}, {2 * step}, ... "
                             "sequences")


def parse_tokens(text: str | float) -> float:
    """'15T', '300B', '2.5e12', 1e9 -> tokens."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMBT]?)\s*", str(text))
        if not m:
            raise InputError(f"--tokens {text!r} is not a token count; valid: a number with an optional K, M, B "
                             "or T suffix, e.g. 15T, 300B, 2.5e12")
        value = float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[m.group(2)]
    if not value > 0 or not math.isfinite(value):
        raise InputError(f"--tokens {text!r}: valid: a positive, finite token count")
    return value


def forecast(model: ModelConfig | str, system: System | str, plan: Plan, tokens: str | float,
             ramp: list[RampStage] | None = None, price: float | None = None,
             interruption_rate: float = INTERRUPTION_RATE, restart_overhead_s: float = RESTART_OVERHEAD_S,
             checkpoint: Literal["sync", "async"] = "sync", checkpoint_interval_s: float | None = None, *,
             device_power_w: float | None = None, idle_power_w: float | None = None,
             host_power_w: float | None = None, comm_power_share: float | None = None, pue: float | None = None,
             grid_intensity: float | None = None, storage: Storage | None = None) -> Forecast:
    """Forecast the run of `tokens` tokens with `plan` (module docstring); the power arguments override
    perfmodel.run.energy.power_for's defaults, `grid_intensity` (gCO2 per kWh) adds emissions, `storage` replaces
    the spec's store (or the default)."""
    model, system = load_model(model), load_hardware(system)
    plan = Plan(**plan) if isinstance(plan, dict) else plan
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a perfmodel.Plan (or a dict of its fields), got {type(plan).__name__}")
    plan = resolve(plan, model, system)
    total = parse_tokens(tokens)
    for flag, value in zip(RANGES, (price, interruption_rate, restart_overhead_s, checkpoint_interval_s,
                                    grid_intensity)):
        check_number(flag, value, **RANGES[flag])
    check_ramp(ramp, plan)
    power = power_for(system, device_power_w, idle_power_w, host_power_w, comm_power_share, pue, plan.precision)
    if power is not None and system.accelerator.power is not None and power.model != system.accelerator.power:
        # a limit or draws given for a part with a power model: its steps run at the clock they give (cost.power)
        system = system.model_copy(update={"accelerator": system.accelerator.model_copy(update={"power": power.model})})
    est = estimate(model, system, plan)

    def act_of(e):  # a step's mean activity at its own clock (run.energy.activity, cost.power's draws)
        return activity(power, e.time_s.model_dump(), e.clock.clock if e.clock else 1.0) if power else 0.0

    tokens_per_step = plan.global_batch * plan.seq_len
    compute, steps, done, active = 0.0, 0, 0.0, 0.0  # active: compute seconds x activity
    for stage in ramp or []:
        e = estimate(model, system, plan.model_copy(update={"global_batch": stage.global_batch}))
        compute, steps, done = compute + stage.steps * e.step_time_s, steps + stage.steps, \
            done + stage.steps * stage.global_batch * plan.seq_len
        active += stage.steps * e.step_time_s * act_of(e)
    if done >= total:
        raise InputError(f"the ramp trains {done:.3g} tokens, not fewer than --tokens {total:.3g}; valid: a ramp "
                         "shorter than the run")
    main = math.ceil((total - done) / tokens_per_step)
    compute, steps = compute + main * est.step_time_s, steps + main
    act = (active + main * est.step_time_s * act_of(est)) / compute
    given = storage is not None
    storage = storage or system.storage or DEFAULT_STORAGE
    nbytes = checkpoint_bytes(model)
    g = goodput_at(plan.gpus, nbytes, storage, interruption_rate, restart_overhead_s, checkpoint,
                   checkpoint_interval_s)
    tau, mtbf, wall = g["interval_s"], g["mtbf_s"], compute / g["goodput"]
    price_v = price if price is not None else (system.price.usd_per_device_hour if system.price else None)
    source = "--price" if price is not None else (f"{system.price.source} ({system.price.date})" if system.price
                                                  else "")
    hours = plan.gpus * wall / SECONDS_PER_HOUR
    notes = [] if price_v is not None else [f"no price: {system.name} lists none; give --price USD per device-hour"]
    waiting = compute * g["waiting_per_compute_s"]  # the rest of wall - compute is lost work, computed again
    kwh = None
    if power is None:
        notes.append(f"no energy: {system.accelerator.name} has no published board power; give --device-power W")
    else:
        kwh = facility_kwh(power, plan.gpus, wall - waiting, act, waiting)
    if not est.fits_in_memory:
        notes.append(f"the plan does not fit in memory (reserves {est.memory_bytes.reserved / 2**30:.1f} GiB on ranks {est.memory_rank}, over the {est.memory_budget_bytes / 2**30:.1f} GiB budget)")
    return Forecast(
        model=model.name, hardware=system.name, gpus=plan.gpus, tokens=total, steps=steps,
        step_time_s=est.step_time_s, compute_s=compute, wall_clock_s=wall, wall_clock_days=wall / 86400,
        device_hours=hours, price_usd_per_device_hour=price_v, price_source=source,
        cost_usd=None if price_v is None else hours * price_v, goodput=compute / wall,
        interruption_rate_per_device_hour=interruption_rate, job_mtbf_hours=mtbf / SECONDS_PER_HOUR,
        interruptions_expected=wall / mtbf, checkpoint_bytes=nbytes, checkpoint_mode=checkpoint,
        checkpoint_write_s=g["write_s"], checkpoint_read_s=g["read_s"], checkpoint_blocking_s=g["delta_s"],
        checkpoint_interval_s=tau, checkpoint_interval_steps=tau / est.step_time_s,
        interval_rule="daly" if checkpoint_interval_s is None else "given", restart_s=g["restart_s"],
        restart_overhead_s=restart_overhead_s,
        storage_source="--storage" if given else "the spec's storage tier" if system.storage
        else "default: " + storage.sources["write_gbps"],
        energy_kwh=kwh, average_power_kw=None if kwh is None else kwh / (wall / SECONDS_PER_HOUR),
        device_activity=act, power=power, grid_intensity_g_per_kwh=grid_intensity,
        emissions_t_co2=None if kwh is None or grid_intensity is None else kwh * grid_intensity / 1e6, notes=notes)
