"""`perfmodel forecast`: the whole run of a plan (perfmodel.run.forecast) from predict's flags or a plan file."""

from __future__ import annotations

import argparse
import sys

from ...errors import InputError
from ...run.energy import COMM_SHARE, HOST_SHARE, IDLE_SHARE, PUE
from ...run.energy import RANGES as ENERGY_RANGES
from ...run.forecast import RANGES as FORECAST_RANGES
from ...run.forecast import Forecast, RampStage, forecast, parse_tokens
from ...run.reliability import INTERRUPTION_RATE, RESTART_OVERHEAD_S
from ..argtypes import MAX_COUNT, number, path
from ..plan_flags import add_plan_flags
from ..plan_input import plan_input


def _ramp(text: str) -> list[RampStage]:
    out = []
    for part in text.split(","):
        try:
            gb, steps = (int(x) for x in part.split(":"))
            if max(gb, steps) > MAX_COUNT:
                raise ValueError(part)
            out.append(RampStage(global_batch=gb, steps=steps))
        except (ValueError, InputError):
            raise argparse.ArgumentTypeError(f"--ramp {text!r}: give GLOBAL_BATCH:STEPS pairs separated by commas, "
                                             f"each a positive integer up to {MAX_COUNT}, e.g. 256:1000,512:1000"
                                             ) from None
    return out


RANGES = {**FORECAST_RANGES, **ENERGY_RANGES}  # each number flag's range: the API's (forecast.py, energy.py)


def _number(flag: str):
    return number(flag, **RANGES[flag])


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help,
                       description="Forecast training a plan on --tokens tokens (docs/forecast.md).")
    add_plan_flags(p)
    p.add_argument("--tokens", required=True, help="tokens to train: 15T, 300B, 2.5e12")
    p.add_argument("--ramp", type=_ramp, help="batch-size ramp before the plan's global batch: GB:STEPS,...")
    p.add_argument("--price", type=_number("--price"), help="USD per device-hour (default: the spec's list price)")
    p.add_argument("--interruption-rate", type=_number("--interruption-rate"), default=INTERRUPTION_RATE,
                   help=f"interruptions per device-hour (default {INTERRUPTION_RATE:.3g}: Llama 3 405B)")
    p.add_argument("--restart-s", type=_number("--restart-s"), default=RESTART_OVERHEAD_S,
                   help=f"seconds to detect an interruption and reschedule, before reading the checkpoint "
                        f"(default {RESTART_OVERHEAD_S:g})")
    p.add_argument("--checkpoint", choices=["sync", "async"], default="sync",
                   help="async: only the copy to host memory blocks training")
    p.add_argument("--checkpoint-interval", type=_number("--checkpoint-interval"),
                   help="compute seconds between checkpoints (default: Daly's optimum)")
    e = p.add_argument_group("energy (perfmodel.run.energy; defaults and sources in docs/forecast.md)")
    e.add_argument("--device-power", type=_number("--device-power"), help="board power while computing, W "
                   "(default: the spec's tdp_w)")
    e.add_argument("--idle-power", type=_number("--idle-power"), help="device power while waiting, W "
                   f"(default {IDLE_SHARE * 100:.0f}%% of board power)")
    e.add_argument("--host-power", type=_number("--host-power"), help="host power per device, W "
                   f"(default {HOST_SHARE * 100:.0f}%% of board power)")
    e.add_argument("--comm-power-share", type=_number("--comm-power-share"),
                   help=f"share of the dynamic power drawn while only communicating (default {COMM_SHARE:g})")
    e.add_argument("--pue", type=_number("--pue"), help=f"facility power over IT power (default {PUE:g})")
    e.add_argument("--grid-intensity", type=_number("--grid-intensity"), metavar="GCO2_PER_KWH",
                   help="grid carbon intensity; adds emissions")
    p.add_argument("--storage", type=path("--storage"), metavar="FILE.yaml", help="the checkpoint store as a "
                   "spec.hardware.system.Storage mapping (docs/forecast.md; default: the spec's storage tier, else the cited "
                   "default)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--plot", type=path("--plot", "a file ending in .png"), metavar="FILE.png",
                   help="goodput against the checkpoint interval and cluster size")
    return p


def run(a: argparse.Namespace) -> str:
    parse_tokens(a.tokens)  # before any model work
    storage = None
    if a.storage is not None:
        from pathlib import Path

        from ...files import read_mapping
        from ...spec.hardware.system import Storage

        storage = Storage.parse(read_mapping(Path(a.storage), f"--storage {a.storage}"), f"--storage {a.storage}")
    if a.plot is not None:
        from ...plots.canvas import check_plot_path

        check_plot_path(a.plot)
    p = plan_input(a)
    f = forecast(p.model, p.system, p.plan, a.tokens, a.ramp, a.price, a.interruption_rate, a.restart_s, a.checkpoint,
                 a.checkpoint_interval, device_power_w=a.device_power, idle_power_w=a.idle_power,
                 host_power_w=a.host_power, comm_power_share=a.comm_power_share, pue=a.pue,
                 grid_intensity=a.grid_intensity, storage=storage)
    out = f.model_dump_json(indent=2) if a.format == "json" else forecast_table(f)
    if a.plot is not None:
        from ...plots.goodput import forecast_figure
        from ...run.reliability import DEFAULT_STORAGE

        forecast_figure(f, storage or p.system.storage or DEFAULT_STORAGE, a.plot)
        print(f"wrote {a.plot}", file=sys.stderr)
    return out


def forecast_table(f: Forecast) -> str:
    money = (f"${f.cost_usd:,.0f}  (${f.price_usd_per_device_hour:g} per device-hour: {f.price_source})"
             if f.cost_usd is not None else "-  (no price: give --price)")
    rows = [
        (f"{f.model} on {f.gpus} x {f.hardware}, {f.tokens:.3g} tokens", ""),
        ("steps", f"{f.steps:,}  ({f.step_time_s:.3f} s each)"),
        ("wall clock", f"{f.wall_clock_days:.1f} days  (compute {f.compute_s / 86400:.1f} days, goodput "
                       f"{f.goodput:.1%})"),
        ("device-hours", f"{f.device_hours:,.0f}"),
        ("cost", money),
        ("energy", energy_line(f)),
        ("interruptions", f"{f.interruptions_expected:.0f} expected  (job MTBF {f.job_mtbf_hours:.1f} h at "
                          f"{f.interruption_rate_per_device_hour:.3g} per device-hour)"),
        ("checkpoint", f"{f.checkpoint_bytes / 1e12:.2f} TB, write {f.checkpoint_write_s:.0f} s, read "
                       f"{f.checkpoint_read_s:.0f} s, blocks {f.checkpoint_blocking_s:.1f} s ({f.checkpoint_mode})"),
        ("checkpoint every", f"{f.checkpoint_interval_s / 60:.1f} min of compute = {f.checkpoint_interval_steps:.0f} "
                             f"steps ({f.interval_rule})"),
        ("restart", f"{f.restart_s:.0f} s"),
        ("storage", f.storage_source),
    ]
    out = [rows[0][0]] + [f"  {k:<18}{v}" for k, v in rows[1:]]
    return "\n".join(out + [f"  note: {n}" for n in f.notes])


def energy_line(f: Forecast) -> str:
    if f.energy_kwh is None:
        return "-  (no board power: give --device-power)"
    p = f.power
    co2 = f", {f.emissions_t_co2:,.0f} t CO2" if f.emissions_t_co2 is not None else ""
    return (f"{f.energy_kwh / 1e3:,.0f} MWh{co2}  (mean {f.average_power_kw:,.0f} kW; a device at activity "
            f"{f.device_activity:.2f} between {p.idle_w:.0f} and {p.board_w:.0f} W"
            + (f" (GEMMs at their measured {p.gemm_w:.0f} W)" if p.gemm_w is not None
               else f" (compute at {p.model.compute_w:.0f} W at the tables' clock, held to the limit by the clock)"
               if p.model.compute_w > p.board_w else " (GEMMs at board power)")
            + f", host {p.host_w:.0f} W, PUE {p.pue:g}; a model)")
