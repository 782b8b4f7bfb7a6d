"""Energy of a training run: a model of the power each device, its share of the host and the facility draw,
from the step's predicted time breakdown. It is a model, not a measurement: docs/forecast.md says what it
was checked against (MLPerf Training v4.0 Power) and which inputs are assumptions.

Per device (W): P = idle + (board - idle) * activity, where activity is 1 while the device computes (GEMMs,
attention, memory-bound kernels, recompute, the optimizer; communication hidden behind them rides along) but
(gemm - idle) / (board - idle) during GEMM time where the part's GEMM draw was measured (`Accelerator.gemm_power_w`),
`comm_share` while it only communicates (exposed collectives and sends) and 0 while it waits (pipeline bubble,
host overhead, checkpoint writes, restarts). Each device also carries a share of its node's host (CPUs,
memory, NICs, fans): `host_w`, drawn all the time. The facility multiplies all of it by the PUE.
Units: watts, seconds, joules; kWh = J / 3.6e6.
"""

from __future__ import annotations


from pydantic import Field, PositiveFloat

from ..cost.step import COMM_TIME
from ..errors import InputError, Schema, check_number
from ..spec.hardware import System

JOULES_PER_KWH = 3.6e6
# Patterson et al. 2021, "Carbon Emissions and Large Neural Network Training" (arXiv 2104.10350), Table 4:
# GPT-3 on 10,000 V100 drew 330 W of measured system power per processor (processor, memory, NIC, fans and
# host CPU) against the V100's 300 W board power, so the rest of the system is 10% of board power.
HOST_SHARE = 330.0 / 300.0 - 1.0
# The same table: the data centres of those runs had a PUE of 1.10 (Microsoft, GPT-3) to 1.12 (Google).
PUE = 1.10
# An H100 SXM idles at about 70 W of its 700 W board power (nvidia-smi power.draw of an idle card, as seen in
# public logs; not measured by this project: benchmarks/power_draw.py measures it where a GPU is lent).
IDLE_SHARE = 0.10
# Assumption, not measured: a device that only communicates (copy engines, a few SMs of NCCL kernels, HBM and
# links busy) draws half of its dynamic range. benchmarks/power_draw.py measures a copy-bound stand-in.
COMM_SHARE = 0.5

# The TimeBreakdown parts by what a device does in them (tests/test_energy.py: every part in exactly one)
BUSY_PARTS = ("gemm", "attention", "memory_bound", "recompute", "optimizer")
COMM_PARTS = COMM_TIME
IDLE_PARTS = ("bubble", "host", "overhead")  # host: the device waits on its host's launches


class Power(Schema):
    """The power inputs of a run, with where each came from."""

    board_w: PositiveFloat = Field(description="device power while computing, W (the board power / TDP)")
    idle_w: float = Field(ge=0, description="device power while it waits, W")
    host_w: float = Field(ge=0, description="host power per device (its share of CPUs, memory, NICs, fans), W")
    comm_share: float = Field(ge=0, le=1, description="share of board - idle drawn while only communicating")
    pue: float = Field(ge=1, description="facility power / IT power")
    gemm_w: float | None = Field(None, description="device power while GEMMs run, W: the part's measured draw "
                                                   "(Accelerator.gemm_power_w) at most board_w; None: board_w")
    sources: dict[str, str] = Field(default_factory=dict, description="input -> where its value came from")

    @property
    def gemm_share(self) -> float:
        """Share of board - idle drawn during GEMM time: (gemm_w - idle) / (board - idle), 1 without gemm_w."""
        if self.gemm_w is None or self.board_w <= self.idle_w:
            return 1.0
        return min(1.0, max(0.0, (self.gemm_w - self.idle_w) / (self.board_w - self.idle_w)))


# Each power input's valid range (the CLI's flags take the same, cli.forecast_command): the physical one, with upper
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
    """The run's power inputs: each given value, else the spec's board power (`Accelerator.tdp_w`) and the
    module's shares of it; during GEMM time the part's measured draw for `precision` (`Accelerator.gemm_power_w`,
    capped at the board power) where it has one. None where no board power is known (the spec leaves tdp_w
    null and none is given)."""
    for flag, value in zip(RANGES, (board_w, idle_w, host_w, comm_share, pue)):
        check_number(flag, value, **RANGES[flag])
    acc = system.accelerator
    board = board_w if board_w is not None else acc.tdp_w
    if board is None:
        return None
    src = {"board_w": "--device-power" if board_w is not None else f"{acc.name} tdp_w: {acc.sources.get('tdp_w', '')}",
           "idle_w": "--idle-power" if idle_w is not None else f"{IDLE_SHARE:.0%} of board power (H100: ~70 of 700 W "
                                                               "idle; public nvidia-smi logs, unverified here)",
           "host_w": "--host-power" if host_w is not None else f"{HOST_SHARE:.0%} of board power (Patterson et al. "
                                                               "2021, Table 4: GPT-3, 330 W per 300 W V100)",
           "comm_share": "--comm-power-share" if comm_share is not None else "assumption: half the dynamic range",
           "pue": "--pue" if pue is not None else "Patterson et al. 2021, Table 4: 1.10 (Microsoft) to 1.12 (Google)"}
    measured = acc.gemm_power_w.get(precision)
    gemm = None if measured is None else min(measured, board)
    src["gemm_w"] = (f"{acc.name} gemm_power_w[{precision}] {measured:g} W" + (f", capped at the board power {board:g} W"
                                                                             if measured > board else "")
                     + f": {acc.sources.get('gemm_power_w', '')}" if measured is not None
                     else f"board power (no measured GEMM draw for {acc.name} in {precision})")
    idle = idle_w if idle_w is not None else IDLE_SHARE * board
    if idle > board:
        raise InputError(f"--idle-power = {idle:g} W exceeds the board power {board:g} W; valid: 0 to {board:g}")
    return Power(board_w=board, idle_w=idle, host_w=host_w if host_w is not None else HOST_SHARE * board,
                 comm_share=COMM_SHARE if comm_share is None else comm_share, pue=PUE if pue is None else pue,
                 gemm_w=gemm, sources=src)


def activity(time: dict, comm_share: float, gemm_share: float = 1.0):
    """Mean dynamic activity of a device over a step (0-1) from its TimeBreakdown parts (floats or arrays):
    (busy + (gemm_share - 1) * gemm + comm_share * exposed communication) / total, GEMM time at `gemm_share`
    (`Power.gemm_share`: the measured draw of GEMMs) and the other busy parts at 1. The slowest stage's breakdown
    stands for every stage: stages with less work wait longer in fact, so this is high where the pipeline is
    unbalanced."""
    busy = sum(time[k] for k in BUSY_PARTS) + (gemm_share - 1.0) * time["gemm"]
    comm = sum(time[k] for k in COMM_PARTS)
    return (busy + comm_share * comm) / time["total"]


def device_power_w(power: Power, act):
    """Power of one device and its host share at dynamic activity `act`, W, before the PUE:
    idle + (board - idle) * act + host."""
    return power.idle_w + (power.board_w - power.idle_w) * act + power.host_w


def facility_kwh(power: Power, devices: int, busy_s, act, waiting_s=0.0):
    """Facility energy, kWh, of `devices` devices that train for `busy_s` seconds at activity `act` and wait
    (idle, host on) for `waiting_s`: devices * (P(act) busy_s + P(0) waiting_s) * PUE / 3.6e6."""
    joules = devices * (device_power_w(power, act) * busy_s + device_power_w(power, 0.0) * waiting_s)
    return joules * power.pue / JOULES_PER_KWH
