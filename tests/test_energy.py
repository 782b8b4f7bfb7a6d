"""Energy of a run (perfmodel.run.energy, forecast's energy fields, search --objective energy): by hand for one plan,
the defaults and their sources, overrides, and bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from perfmodel import Plan, estimate, load_hardware
from perfmodel.run.energy import activity, device_power_w, facility_kwh, power_for
from perfmodel.errors import InputError
from perfmodel.run.forecast import forecast

PLAN = Plan(gpus=64, tp=8, pp=2, micro_batch=1, global_batch=128, seq_len=4096, sequence_parallel=True, zero=1)
MODEL, SYSTEM = "llama-3-8b", "dgx-h100"


def test_defaults_are_shares_of_the_datasheet_board_power():
    p = power_for(load_hardware(SYSTEM))
    # H100 SXM: 700 W board power; idle 10% (~70 W), host 10% (Patterson et al. 2021: 330 W per 300 W V100)
    assert (p.board_w, p.idle_w, p.host_w, p.comm_share, p.pue) == pytest.approx((700, 70, 70, 0.5, 1.1))
    assert "datasheet" in p.sources["board_w"] and "Patterson" in p.sources["host_w"]
    assert power_for(load_hardware("tpu-v5p")) is None  # no published board power
    q = power_for(load_hardware("tpu-v5p"), board_w=400, idle_w=100, host_w=0, pue=1.2)
    assert (q.board_w, q.idle_w, q.host_w, q.pue) == (400, 100, 0, 1.2) and q.sources["idle_w"] == "--idle-power"


def test_power_and_energy_by_hand():
    p = power_for(load_hardware(SYSTEM))
    time = dict(gemm=3.0, attention=1.0, memory_bound=0.5, recompute=0.0, optimizer=0.5, tp_comm=1.0, cp_comm=0.0,
                ep_comm=0.0, pp_comm=0.5, dp_comm=0.5, zero3_comm=0.0, offload_comm=0.0, bubble=2.0, overhead=1.0,
                total=10.0)
    # busy 5 s, exposed communication 2 s at half the dynamic range, waiting 3 s
    assert activity(time, 0.5) == pytest.approx((5 + 0.5 * 2) / 10)
    assert device_power_w(p, 0.6) == pytest.approx(70 + 630 * 0.6 + 70)
    # 8 devices: an hour at activity 0.6 and half an hour waiting (idle 70 W + host 70 W), PUE 1.1
    want = 8 * (518 * 3600 + 140 * 1800) * 1.1 / 3.6e6
    assert facility_kwh(p, 8, 3600, 0.6, 1800) == pytest.approx(want, rel=1e-12)


def test_gemm_time_draws_the_parts_measured_gemm_power():
    """B200's GEMMs of >= 1e12 FLOPs draw a median 982.5 W in bf16 of its 1,000 W (hardware_specs/kernels/
    gemm_power.csv): GEMM time runs at (982.5 - 100) / (1000 - 100) of the dynamic range, the rest of the busy time
    at 1; a part without a measured draw (H100) keeps the board power for GEMMs."""
    p = power_for(load_hardware("dgx-b200"))
    assert (p.board_w, p.idle_w, p.gemm_w) == pytest.approx((1000, 100, 982.5))
    assert p.gemm_share == pytest.approx(882.5 / 900) and "gemm_power_w[bf16] 982.5 W" in p.sources["gemm_w"]
    assert power_for(load_hardware("dgx-b200"), precision="fp8").gemm_w == pytest.approx(879.8)
    time = dict(gemm=3.0, attention=1.0, memory_bound=0.5, recompute=0.0, optimizer=0.5, tp_comm=1.0, cp_comm=0.0,
                ep_comm=0.0, pp_comm=0.5, dp_comm=0.5, zero3_comm=0.0, offload_comm=0.0, bubble=2.0, overhead=1.0,
                total=10.0)
    assert activity(time, 0.5, p.gemm_share) == pytest.approx((3 * 882.5 / 900 + 2 + 0.5 * 2) / 10)
    # a board power given below the measured draw caps it
    q = power_for(load_hardware("dgx-b200"), board_w=900)
    assert q.gemm_w == 900 and q.gemm_share == 1.0 and "capped" in q.sources["gemm_w"]
    h = power_for(load_hardware(SYSTEM))
    assert h.gemm_w is None and h.gemm_share == 1.0 and h.sources["gemm_w"].startswith("board power")
    f = forecast(MODEL, "dgx-b200", PLAN, "100B", interruption_rate=1e-15, checkpoint_interval_s=1e9)
    t = estimate(MODEL, "dgx-b200", PLAN).time_s
    assert f.power.gemm_w == pytest.approx(982.5)
    act = activity(t.model_dump(), 0.5, p.gemm_share)
    assert f.device_activity == pytest.approx(act, rel=1e-12) and act < activity(t.model_dump(), 0.5)


def test_forecast_energy_by_hand_when_nothing_fails():
    """At a negligible interruption rate and a checkpoint interval far beyond the run, the wall time is the
    compute and the energy is every device at the step's activity for that long."""
    est = estimate(MODEL, SYSTEM, PLAN)
    t = est.time_s
    busy = t.gemm + t.attention + t.memory_bound + t.recompute + t.optimizer
    comm = t.tp_comm + t.cp_comm + t.ep_comm + t.pp_comm + t.dp_comm + t.zero3_comm + t.offload_comm
    act = (busy + 0.5 * comm) / t.total
    assert t.bubble > 0 and 0 < act < 1  # a pipeline waits in its bubble
    f = forecast(MODEL, SYSTEM, PLAN, "100B", interruption_rate=1e-15, checkpoint_interval_s=1e9)
    assert f.goodput == pytest.approx(1, abs=1e-6) and f.device_activity == pytest.approx(act, rel=1e-12)
    watts = 70 + 630 * act + 70
    assert f.energy_kwh == pytest.approx(64 * watts * f.compute_s * 1.1 / 3.6e6, rel=1e-6)
    assert f.average_power_kw == pytest.approx(64 * watts * 1.1 / 1e3, rel=1e-6)
    assert f.emissions_t_co2 is None
    g = forecast(MODEL, SYSTEM, PLAN, "100B", interruption_rate=1e-15, checkpoint_interval_s=1e9, grid_intensity=400)
    assert g.emissions_t_co2 == pytest.approx(g.energy_kwh * 400 / 1e6)


def test_failures_cost_energy_waiting_and_recomputing():
    """Checkpoint waits and restarts draw idle power, lost work the step's: the energy lies between the compute
    at the step's power plus all the extra time idle, and all the wall time at the step's power."""
    f = forecast(MODEL, SYSTEM, PLAN, "1T", interruption_rate=1e-2)
    p, n = f.power, 64
    low = n * (device_power_w(p, f.device_activity) * f.compute_s
               + device_power_w(p, 0) * (f.wall_clock_s - f.compute_s)) * p.pue / 3.6e6
    high = n * device_power_w(p, f.device_activity) * f.wall_clock_s * p.pue / 3.6e6
    assert f.goodput < 0.95 and low < f.energy_kwh < high


def test_no_board_power_is_a_note_not_a_number():
    f = forecast(MODEL, "tpu-v5p", Plan(gpus=64, tp=1, pp=1, micro_batch=1, global_batch=128, seq_len=4096), "1T")
    assert f.energy_kwh is None and any("--device-power" in n for n in f.notes)


def test_search_ranks_by_energy():
    from perfmodel.search.ranking import search

    res = search(MODEL, SYSTEM, [64, 128], 512, 4096, objective="energy", space={"tp": [1, 2, 8], "pp": [1, 2]})
    t = res.table
    assert list(t.energy_kwh_per_step) == sorted(t.energy_kwh_per_step)
    best = res.plan(0)
    f = forecast(MODEL, SYSTEM, best, "1T")
    assert t.energy_kwh_per_step.iloc[0] == pytest.approx(f.energy_kwh / f.steps, rel=1e-9)
    with pytest.raises(InputError, match="objective = energy: TPU-v5p has no published board power"):
        search(MODEL, "tpu-v5p", 64, 512, 4096, objective="energy")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "perfmodel", "forecast", "--model", MODEL, "--hardware", SYSTEM,
                           "--gpus", "64", "--tp", "8", "--pp", "1", "--micro-batch", "1", "--global-batch", "128",
                           "--seq-len", "4096", "--tokens", "1T", *args], capture_output=True, text=True)


@pytest.mark.parametrize("extra, needle", [
    (("--pue", "0.9"), "--pue = 0.9; valid: >= 1 and <= 10"),
    (("--idle-power", "900"), "--idle-power = 900 W exceeds the board power 700 W"),
    (("--device-power", "0"), "--device-power = 0.0; valid: > 0 and <= 100000"),
    (("--comm-power-share", "2"), "--comm-power-share = 2.0; valid: >= 0 and <= 1"),
    (("--grid-intensity", "-5"), "--grid-intensity = -5.0; valid"),
    (("--host-power", "nan"), "--host-power = nan; valid"),
])
def test_bad_energy_input_is_one_line_exit_2(extra, needle):
    r = _cli(*extra)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_command_prints_energy_and_its_json_fields():
    r = _cli("--grid-intensity", "400", "--format", "json")
    import json

    out = json.loads(r.stdout)
    assert out["energy_kwh"] > 0 and out["emissions_t_co2"] == pytest.approx(out["energy_kwh"] * 400 / 1e6)
    assert out["power"]["board_w"] == 700
    table = _cli().stdout
    assert "MWh" in table and "a model" in table and "(GEMMs at board power)" in table


def test_every_part_of_a_step_is_busy_communicating_or_waiting_exactly_once():
    from perfmodel.run.energy import BUSY_PARTS, COMM_PARTS, IDLE_PARTS
    from perfmodel.spec.result import TimeBreakdown

    parts = [*BUSY_PARTS, *COMM_PARTS, *IDLE_PARTS]
    assert sorted(parts) == sorted(set(TimeBreakdown.model_fields) - {"total"}) and len(parts) == len(set(parts))
    with pytest.raises(InputError, match="--device-power = '700'"):
        power_for(load_hardware(SYSTEM), board_w="700")
