"""The power model (spec.hardware.power_model, cost.power): the clock a step's mix sustains under the board limit, checked by hand,
against the measured GEMM loop, through the estimate's breakdown and forecast's energy, and bad spec input."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodel import Plan, estimate, load_hardware
from perfmodel.cost.power import (COMM_PARTS, COMPUTE_PARTS, MEMORY_PARTS, WAIT_PARTS, at_clock, average_watts,
                                  loop_clock, phase_seconds, step_clock, step_energy_j)
from perfmodel.errors import InputError
from perfmodel.run.energy import power_for
from perfmodel.run.forecast import forecast
from perfmodel.spec.hardware.power_model import PowerModel
from perfmodel.spec.result import TimeBreakdown

PM = PowerModel(limit_w=700, window_s=1, idle_w=100, memory_w=400, comm_w=250, compute_w=1300, clock_exponent=3)
ZERO = {k: 0.0 for k in TimeBreakdown.model_fields}


def breakdown(**parts) -> dict:
    t = {**ZERO, **parts}
    t["total"] = sum(v for k, v in t.items() if k != "total")
    return t


def test_every_part_is_one_kind_of_time():
    parts = [*COMPUTE_PARTS, *MEMORY_PARTS, *COMM_PARTS, *WAIT_PARTS, "recompute"]
    assert sorted(parts) == sorted(set(TimeBreakdown.model_fields) - {"total"}) and len(parts) == len(set(parts))


def test_gemm_loop_clock_by_hand_and_the_measured_h200_loop():
    # compute only: 100 + 1200 s^3 = 700  ->  s = 0.5^(1/3)
    assert loop_clock(PM) == pytest.approx(0.5 ** (1 / 3))
    assert step_clock(PM, breakdown(gemm=1.0)) == pytest.approx(0.5 ** (1 / 3), abs=1e-9)
    # the H200's constants price its measured loop (654 of the table's 806 TFLOP/s at 8192^3) at 0.811
    for system in ("dgx-h200", "dgx-h100"):
        assert loop_clock(load_hardware(system).accelerator.power) == pytest.approx(654 / 806, abs=5e-4)


def test_a_mixed_step_sustains_a_higher_clock_by_hand():
    """1 s of GEMMs and 1 s memory-bound at full clock: at clock s the step is 1/s + 1 seconds and draws
    (100 + 1200 s^3)/s + 400 J; held to 700 W: 1200 s^3 - 300 s + 100 - 700 ... solved independently."""
    t = breakdown(gemm=1.0, memory_bound=1.0)
    s = float(step_clock(PM, t))
    # (100 + 1200 s^3) / s + 400 = 700 (1 / s + 1)  <=>  1200 s^3 - 300 s - 600 = 0
    roots = [r.real for r in np.roots([1200, 0, -300, -600]) if abs(r.imag) < 1e-9 and 0 < r.real <= 1]
    assert s == pytest.approx(roots[0], abs=1e-9) and s > loop_clock(PM)
    at = at_clock(t, s)
    assert at["gemm"] == pytest.approx(1 / s) and at["memory_bound"] == 1.0 and at["total"] == pytest.approx(1 / s + 1)
    assert average_watts(PM, at, s) == pytest.approx(700)


def test_a_light_step_keeps_the_tables_clock():
    t = breakdown(gemm=0.1, memory_bound=1.0, tp_comm=1.0, bubble=1.0)
    assert step_clock(PM, t) == 1.0
    # energy: 0.1 s at 1300 W, 1 s at 400, 1 s at 250, 1 s at 100
    assert step_energy_j(PM, t, 1.0) == pytest.approx(130 + 400 + 250 + 100)


def test_the_bubble_stretches_and_a_slower_device_fills_the_host_wait():
    t = breakdown(gemm=2.0, memory_bound=2.0, bubble=1.0, host=0.5)
    at = at_clock(t, 0.5)
    # the stage's 4 s become 6 s: the bubble 1.5 s; the device's 2.5 s more fill the 0.5 s host wait
    assert at["bubble"] == pytest.approx(1.5) and at["host"] == 0.0 and at["total"] == pytest.approx(7.5)
    # a faster device keeps the wait (not host-bound), or waits the longer (host-bound: the host takes 5 s)
    fast = at_clock(t, 2.0)
    assert fast["host"] == 0.5 and fast["total"] == pytest.approx(1.0 + 2.0 + 1.0 * 3 / 4 + 0.5)
    from perfmodel.cost.power import refill_host
    assert refill_host(fast, t, host_s=5.0)["total"] == pytest.approx(t["total"])
    # a recomputed forward splits as the step's mix: half compute here
    r = at_clock(breakdown(gemm=1.0, memory_bound=1.0, recompute=2.0), 0.5)
    assert r["recompute"] == pytest.approx(2.0 * (0.5 / 0.5 + 0.5))
    assert phase_seconds(breakdown(gemm=1.0, memory_bound=1.0, recompute=2.0))["compute"] == pytest.approx(2.0)


def test_the_estimate_reports_its_clock_and_power():
    plan = Plan(gpus=8, micro_batch=1, global_batch=64, seq_len=8192, zero=1)
    e = estimate("llama-3-8b", "dgx-h100", plan)
    c = e.clock
    assert c is not None and c.loop_clock < c.clock <= 1 and c.limit_w == 700
    assert c.power_w == pytest.approx(700, rel=1e-6) if c.clock < 1 else c.power_w <= 700
    assert sum(c.seconds.values()) == pytest.approx(e.step_time_s, rel=1e-9)
    assert c.energy_j == pytest.approx(sum(c.watts[k] * c.seconds[k] for k in c.seconds), rel=1e-12)
    assert estimate("llama-3-8b", "dgx-a100-80gb", plan).clock is None  # no power model: compute at the fraction


def test_forecast_energy_is_the_power_models_step_energy():
    plan = Plan(gpus=64, tp=8, pp=2, micro_batch=1, global_batch=128, seq_len=4096, sequence_parallel=True, zero=1)
    f = forecast("llama-3-8b", "dgx-h100", plan, "1B", interruption_rate=1e-15, checkpoint_interval_s=1e9)
    e = estimate("llama-3-8b", "dgx-h100", plan)
    per_step = 64 * (e.clock.energy_j + f.power.host_w * e.step_time_s) * f.power.pue / 3.6e6
    assert f.goodput == pytest.approx(1.0, abs=1e-6) and f.energy_kwh == pytest.approx(per_step * f.steps, rel=1e-6)


def test_overrides_keep_the_power_model_and_bad_draws_are_one_line():
    p = power_for(load_hardware("dgx-h100"), board_w=600)
    assert p.model.limit_w == 600 and p.model.compute_w == load_hardware("dgx-h100").accelerator.power.compute_w
    with pytest.raises(ValueError, match="memory_w = 800 W must lie between idle_w = 100 and limit_w = 700"):
        PowerModel(**{**PM.model_dump(), "memory_w": 800})
    data = load_hardware("dgx-h100").model_dump()
    data["accelerator"]["power"]["idle_w"] = 900
    from perfmodel.spec.hardware.system import System
    with pytest.raises(Exception, match="idle_w = 900 W must be below limit_w = 700 W"):
        System.model_validate(data)
    with pytest.raises(InputError):
        power_for(load_hardware("dgx-h100"), idle_w=700)


def test_a_host_bound_step_keeps_the_hosts_length(dgx_h100_fixed_clock):
    """GPT-3 125M, one sequence of 1024 on one H100: the host launches slower than the device runs (host-bound), so
    the clock the power model gives (1: a light step) leaves the step as long as at that clock without a power model:
    the faster device waits longer on its host."""
    plan = dict(gpus=1, micro_batch=1, global_batch=1, seq_len=1024)
    e = estimate("gpt3-125m", "dgx-h100", plan)
    assert e.host_bound and e.clock.clock == 1.0
    eff = dgx_h100_fixed_clock.efficiency.model_copy(update={"sustained_fraction": 0.99})
    flat = estimate("gpt3-125m", dgx_h100_fixed_clock.model_copy(update={"efficiency": eff}), plan)
    assert e.step_time_s == pytest.approx(flat.step_time_s, rel=1e-9)


def test_a_limit_given_to_forecast_sets_the_clock():
    """forecast --device-power 300 on an H100 (a 300 W limit in place of 700): the steps run at the clock 300 W gives,
    so a device's mean draw is within it (activity at most 1) and the step is longer."""
    plan = Plan(gpus=8, micro_batch=1, global_batch=64, seq_len=4096, zero=1)
    at700 = forecast("llama-3-8b", "dgx-h100", plan, "1B")
    at300 = forecast("llama-3-8b", "dgx-h100", plan, "1B", device_power_w=300)
    assert at300.device_activity <= 1 + 1e-9 and at300.step_time_s > at700.step_time_s
    assert at300.power.board_w == 300 and at300.power.model.limit_w == 300
    with pytest.raises(InputError, match="--device-power = 1300, --idle-power = 1200: .*compute_w = 1188 W is below"):
        power_for(load_hardware("dgx-h100"), board_w=1300, idle_w=1200)


def test_the_versus_table_shows_each_steps_clock():
    from perfmodel.cli.report import versus_table

    plan = dict(gpus=8, micro_batch=1, global_batch=64, seq_len=8192, zero=1)
    a, b = (estimate("llama-3-8b", "dgx-h100", {**plan, "stack": s}) for s in ("megatron-core", "torchtitan"))
    row = next(line for line in versus_table(a, b).splitlines() if line.split()[0] == "clock").split()
    assert [float(x) for x in row[1:3]] == pytest.approx([round(a.clock.clock, 3), round(b.clock.clock, 3)])
