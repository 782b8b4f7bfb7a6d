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
    """A part without a power model (A100): its TDP and the module's shares of it."""
    p = power_for(load_hardware("dgx-a100-80gb"))
    # A100 SXM: 400 W board power; idle 10%, host 10% (Patterson et al. 2021: 330 W per 300 W V100)
    assert (p.board_w, p.idle_w, p.host_w, p.comm_share, p.pue) == pytest.approx((400, 40, 40, 0.5, 1.1))
    assert "datasheet" in p.sources["board_w"] and "Patterson" in p.sources["host_w"]
    assert (p.model.compute_w, p.model.memory_w, p.model.comm_w) == (400, 400, 220)
    assert power_for(load_hardware("tpu-v5p")) is None  # no published board power
    q = power_for(load_hardware("tpu-v5p"), board_w=400, idle_w=100, host_w=0, pue=1.2)
    assert (q.board_w, q.idle_w, q.host_w, q.pue) == (400, 100, 0, 1.2) and q.sources["idle_w"] == "--idle-power"


def test_a_power_model_gives_the_draws():
    """H100's power model (hardware_specs/accelerators/h100-sxm5-80gb.yaml): limit 700 W, waits at 142.2 W, exposed
    communication at the memory-bound draw, 473.3 W: (473.3 - 142.2) / (700 - 142.2) of the range."""
    p = power_for(load_hardware(SYSTEM))
    assert (p.board_w, p.idle_w, p.host_w) == pytest.approx((700, 142.2, 70))
    assert p.comm_share == pytest.approx((473.3 - 142.2) / (700 - 142.2)) and p.gemm_w is None
    assert "AIConfigurator" in p.sources["idle_w"] or "h200" in p.sources["idle_w"]


TIME = dict(gemm=3.0, attention=1.0, memory_bound=0.5, recompute=0.0, optimizer=0.5, tp_comm=1.0, cp_comm=0.0,
            ep_comm=0.0, pp_comm=0.5, dp_comm=0.5, zero3_comm=0.0, offload_comm=0.0, bubble=2.0, host=0.0,
            overhead=1.0, total=10.0)


def test_power_and_energy_by_hand():
    p = power_for(load_hardware("dgx-a100-80gb"))
    # compute 4 s and memory-bound 1 s at 400 W, exposed communication 2 s at 40 + 0.5 x 360 W, waiting 3 s at 40 W
    assert activity(p, TIME) == pytest.approx(((5 * 400 + 2 * 220 + 3 * 40) / 10 - 40) / 360)
    assert activity(p, TIME) == pytest.approx((5 + 0.5 * 2) / 10)  # the same: busy at 1, communication at 0.5
    assert device_power_w(p, 0.6) == pytest.approx(40 + 360 * 0.6 + 40)
    # 8 devices: an hour at activity 0.6 and half an hour waiting (idle 40 W + host 40 W), PUE 1.1
    want = 8 * (296 * 3600 + 80 * 1800) * 1.1 / 3.6e6
    assert facility_kwh(p, 8, 3600, 0.6, 1800) == pytest.approx(want, rel=1e-12)


def test_gemm_time_draws_the_parts_measured_gemm_power():
    """A part without a power model but with a measured GEMM draw (B200's 982.5 W in bf16 of its 1,000 W,
    hardware_specs/kernels/gemm_power.csv, its power model taken away): compute time at that draw, the rest of the
    busy time at the board power; a board power given below the measured draw caps it."""
    b200 = load_hardware("dgx-b200")
    bare = b200.model_copy(update={"accelerator": b200.accelerator.model_copy(update={"power": None})})
    p = power_for(bare)
    assert (p.board_w, p.idle_w, p.gemm_w, p.model.compute_w) == pytest.approx((1000, 100, 982.5, 982.5))
    assert "gemm_power_w[bf16] 982.5 W" in p.sources["gemm_w"]
    assert power_for(bare, precision="fp8").gemm_w == pytest.approx(879.8)
    watts = (4 * 982.5 + 1 * 1000 + 2 * 550 + 3 * 100) / 10
    assert activity(p, TIME) == pytest.approx((watts - 100) / 900)
    q = power_for(bare, board_w=900)
    assert q.gemm_w == 900 and "capped" in q.sources["gemm_w"]
    # with its power model the GEMM draw is the model's compute at the step's clock
    assert power_for(b200).gemm_w is None and power_for(b200).model.compute_w > 1000


def test_forecast_energy_by_hand_when_nothing_fails():
    """At a negligible interruption rate and a checkpoint interval far beyond the run, the wall time is the
    compute and the energy is every device at the step's power (cost.power at its clock) for that long."""
    est = estimate(MODEL, SYSTEM, PLAN)
    t, c = est.time_s, est.clock
    assert t.bubble > 0 and c is not None  # a pipeline waits in its bubble
    step_w = c.energy_j / t.total
    f = forecast(MODEL, SYSTEM, PLAN, "100B", interruption_rate=1e-15, checkpoint_interval_s=1e9)
    assert f.goodput == pytest.approx(1, abs=1e-6)
    assert f.device_activity == pytest.approx((step_w - 142.2) / (700 - 142.2), rel=1e-9)
    watts = step_w + 70
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
    assert "MWh" in table and "a model" in table and "held to the limit by the clock" in table


def test_a_board_power_given_as_text_is_one_line():
    with pytest.raises(InputError, match="--device-power = '700'"):
        power_for(load_hardware(SYSTEM), board_w="700")
