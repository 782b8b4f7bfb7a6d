"""Energy of a training run: each device's power over a step, its share of the host and the facility draw, from
the step's predicted time breakdown. It is a model, not a measurement: docs/forecast.md says what it was checked
against (MLPerf Training v4.0 Power) and which inputs are assumptions.

Per device (W) the draw is the power model's (cost.power, one formula for the clock and the energy): compute at
the step's clock, memory-bound kernels, exposed communication and waits each at their own draw
(`cost.power.average_watts`), from the part's `Accelerator.power` where it has one. A part without one gets a power
model of its board power (`Accelerator.tdp_w`): compute at the part's measured GEMM draw (`gemm_power_w`, capped at
the board power) or the board power, memory-bound work at the board power, communication at `comm_share` of the
range above idle and waits at idle (IDLE_SHARE of the board power); its compute never exceeds the board power, so its
clock stays the tables'. Each device also carries a share of its node's host (CPUs, memory, NICs, fans): `host_w`,
drawn all the time. The facility multiplies all of it by the PUE.
Units: watts, seconds, joules; kWh = J / 3.6e6.
"""

from __future__ import annotations


from pydantic import Field, PositiveFloat

from ..cost.power import average_watts
from ..errors import InputError, check_number
from ..types import Schema
from ..spec.hardware.system import System
from ..spec.hardware.power_model import PowerModel

JOULES_PER_KWH = 3.6e6
# Patterson et al. 2021, "Carbon Emissions and Large Neural Network Training" (arXiv 2104.10350), Table 4:
# GPT-3 on 10,000 V100 drew 330 W of measured system power per processor (processor, memory, NIC, fans and
# host CPU) against the V100's 300 W board power, so the rest of the system is 10% of board power.
HOST_SHARE = 330.0 / 300.0 - 1.0
# The same table: the data centres of those runs had a PUE of 1.10 (Microsoft, GPT-3) to 1.12 (Google).
PUE = 1.10
# An H100 SXM idles at about 70 W of its 700 W board power (nvidia-smi power.draw of an idle card, as seen in
# public logs; not measured by this project: the power-draw benchmark measures it where a GPU is lent).
IDLE_SHARE = 0.10
# Assumption, not measured: a device that only communicates (copy engines, a few SMs of NCCL kernels, HBM and
# links busy) draws half of its dynamic range. The power-draw benchmark measures a copy-bound stand-in.
COMM_SHARE = 0.5


class Power(Schema):
    """The power inputs of a run, with where each came from."""

    board_w: PositiveFloat = Field(description="the board power limit, W (the power model's limit_w, or TDP)")
    idle_w: float = Field(ge=0, description="device power while it waits, W")
    host_w: float = Field(ge=0, description="host power per device (its share of CPUs, memory, NICs, fans), W")
    comm_share: float = Field(ge=0, le=1, description="share of board - idle drawn while only communicating")
    pue: float = Field(ge=1, description="facility power / IT power")
    gemm_w: float | None = Field(None, description="device power while GEMMs run, W, where no power model gives it: "
                                                   "the part's measured draw (Accelerator.gemm_power_w) at most "
                                                   "board_w; None: board_w, or the power model's compute draw")
    model: PowerModel = Field(description="the draws by kind of time the energy is priced with (cost.power)")
    sources: dict[str, str] = Field(default_factory=dict, description="input -> where its value came from")


# Each power input's valid range (the CLI's flags take the same, cli.commands.forecast): the physical one, with upper
# limits far beyond any device (a B200 board is 1,000 W) that keep every energy a finite number.
RANGES = {
    "--device-power": dict(low=0.0, high=1e5, above=True, what="the device's board power, W"),
    "--idle-power": dict(low=0.0, high=1e5, what="W"),
    "--host-power": dict(low=0.0, high=1e5, what="W per device"),
    "--comm-power-share": dict(low=0.0, high=1.0),
    "--pue": dict(low=1.0, high=10.0, what="facility power over IT power"),
}


def power_for(system: System, board_w: float | None = None, idle_w: float | None = None,
              host_w: float | None = None, comm_share: float | None = None, pue: float | None = None,
              precision: str = "bf16") -> Power | None:
    """The run's power inputs: each given value, else the part's power model (`Accelerator.power`; the values given
    replace its limit, idle and communication draws, and the run is priced at the clock that limit gives), or, without one,
    its board power (`Accelerator.tdp_w`) and the module's shares of it; GEMMs of a part without a power model draw
    its measured draw for `precision` (`Accelerator.gemm_power_w`, capped at the board power) where it has one. None
    where no board power is known (the spec leaves tdp_w and power null and none is given)."""
    for flag, value in zip(RANGES, (board_w, idle_w, host_w, comm_share, pue)):
        check_number(flag, value, **RANGES[flag])
    acc = system.accelerator
    pm = acc.power
    board = board_w if board_w is not None else (pm.limit_w if pm is not None else acc.tdp_w)
    if board is None:
        return None
    where = f"{acc.name} power: " if pm is not None else ""
    src = {"board_w": "--device-power" if board_w is not None else
           where + (pm.sources.get("limit_w", "") if pm is not None else f"{acc.name} tdp_w: {acc.sources.get('tdp_w', '')}"),
           "idle_w": "--idle-power" if idle_w is not None else
           where + pm.sources.get("idle_w", "") if pm is not None else f"{IDLE_SHARE:.0%} of board power (H100: ~70 of "
                                                                        "700 W idle; public nvidia-smi logs)",
           "host_w": "--host-power" if host_w is not None else f"{HOST_SHARE:.0%} of board power (Patterson et al. "
                                                               "2021, Table 4: GPT-3, 330 W per 300 W V100)",
           "comm_share": "--comm-power-share" if comm_share is not None else
           where + pm.sources.get("comm_w", "") if pm is not None else "assumption: half the dynamic range",
           "pue": "--pue" if pue is not None else "Patterson et al. 2021, Table 4: 1.10 (Microsoft) to 1.12 (Google)"}
    idle = idle_w if idle_w is not None else (pm.idle_w if pm is not None else IDLE_SHARE * board)
    if idle >= board:
        raise InputError(f"--idle-power = {idle:g} W {'exceeds' if idle > board else 'equals'} the board power "
                         f"{board:g} W; valid: 0 to below {board:g}")
    gemm = None
    if pm is None:
        measured = acc.gemm_power_w.get(precision)
        gemm = None if measured is None else min(measured, board)
        src["gemm_w"] = (f"{acc.name} gemm_power_w[{precision}] {measured:g} W" + (
            f", capped at the board power {board:g} W" if measured > board else "")
            + f": {acc.sources.get('gemm_power_w', '')}" if measured is not None
            else f"board power (no measured GEMM draw for {acc.name} in {precision})")
        share = COMM_SHARE if comm_share is None else comm_share
        model = PowerModel(limit_w=board, window_s=1.0, idle_w=idle, memory_w=board, comm_w=comm_draw(idle, board, share),
                           compute_w=board if gemm is None else max(gemm, idle))
    else:
        src["gemm_w"] = f"{acc.name} power model: compute_w at the step's clock (cost.power.compute_watts)"
        share = (pm.comm_w - pm.idle_w) / (pm.limit_w - pm.idle_w) if comm_share is None else comm_share
        update = {"limit_w": board, "idle_w": idle}
        if comm_share is not None or idle_w is not None or board_w is not None:
            update["comm_w"] = comm_draw(idle, board, share)
        for k in ("memory_w",):  # a draw the overrides leave outside [idle, board] is held at its nearer end
            update[k] = min(max(getattr(pm, k), idle), board)
        try:
            model = PowerModel(**{**pm.model_dump(), **update})
        except InputError as err:  # an override that leaves the part's draws inconsistent (PowerModel's message)
            given = ", ".join(f"{f} = {v:g}" for f, v in (("--device-power", board_w), ("--idle-power", idle_w),
                                                          ("--comm-power-share", comm_share)) if v is not None)
            raise InputError(f"{given}: {str(err).split('; valid')[0]} in {acc.name}'s power model; valid: an idle "
                             f"power below its draws (compute {pm.compute_w:g} W, memory-bound {pm.memory_w:g} W) "
                             f"and a board power above its idle") from None
    return Power(board_w=board, idle_w=idle, host_w=host_w if host_w is not None else HOST_SHARE * board,
                 comm_share=share, pue=PUE if pue is None else pue, gemm_w=gemm, model=model, sources=src)


def comm_draw(idle: float, board: float, share: float) -> float:
    """Draw while only communicating, W: idle + share x (board - idle), `share` of the range above idle."""
    return idle + share * (board - idle)


def step_watts(power: Power, time: dict, clock=1.0):
    """Mean draw of one device over a step, W, before its host share: the power model's (`cost.power.average_watts`)
    of the TimeBreakdown parts `time` (floats or arrays) at the step's `clock`."""
    return average_watts(power.model, time, clock)


def activity(power: Power, time: dict, clock=1.0):
    """Mean dynamic activity of a device over a step (0-1): (step_watts - idle) / (board - idle). The slowest stage's
    breakdown stands for every stage: stages with less work wait longer in fact, so this is high where the pipeline
    is unbalanced."""
    return (step_watts(power, time, clock) - power.idle_w) / (power.board_w - power.idle_w)


def device_power_w(power: Power, act):
    """Power of one device and its host share at dynamic activity `act`, W, before the PUE:
    idle + (board - idle) * act + host."""
    return power.idle_w + (power.board_w - power.idle_w) * act + power.host_w


def facility_kwh(power: Power, devices: int, busy_s, act, waiting_s=0.0):
    """Facility energy, kWh, of `devices` devices that train for `busy_s` seconds at activity `act` and wait
    (idle, host on) for `waiting_s`: devices * (P(act) busy_s + P(0) waiting_s) * PUE / 3.6e6."""
    joules = devices * (device_power_w(power, act) * busy_s + device_power_w(power, 0.0) * waiting_s)
    return joules * power.pue / JOULES_PER_KWH
