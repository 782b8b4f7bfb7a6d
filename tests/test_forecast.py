"""perfmodel forecast: one plan's run by hand (steps, compute, checkpoint, Daly interval and wall time, device-hours,
cost), the ramp, asynchronous checkpoints, and the command's output and bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from perfmodel import Plan, estimate, load_model
from perfmodel.errors import InputError
from perfmodel.run.forecast import RampStage, forecast, parse_tokens
from perfmodel.run.reliability import DEFAULT_STORAGE, INTERRUPTION_RATE

PLAN = Plan(gpus=64, tp=8, pp=1, micro_batch=1, global_batch=128, seq_len=4096, sequence_parallel=True, zero=1)
MODEL, SYSTEM = "llama-3-8b", "dgx-h100"


def test_a_plan_dict_works_and_anything_else_is_refused():
    assert forecast(MODEL, SYSTEM, PLAN.model_dump(exclude_none=True), "1T").steps == forecast(MODEL, SYSTEM, PLAN,
                                                                                               "1T").steps
    with pytest.raises(InputError, match="plan must be a perfmodel.Plan"):
        forecast(MODEL, SYSTEM, "tp=8", "1T")


def test_tokens_parse():
    assert parse_tokens("15T") == 15e12 and parse_tokens("300B") == 3e11 and parse_tokens("2.5e12") == 2.5e12
    for bad in ("15Q", "-1T", "", "inf"):
        with pytest.raises(InputError, match="--tokens"):
            parse_tokens(bad)


def test_one_run_by_hand():
    f = forecast(MODEL, SYSTEM, PLAN, "1T", price=3.0)
    step = estimate(MODEL, SYSTEM, PLAN).step_time_s
    steps = math.ceil(1e12 / (128 * 4096))
    assert f.steps == steps and f.compute_s == pytest.approx(steps * step, rel=1e-12)
    params = load_model(MODEL).n_params()
    assert f.checkpoint_bytes == params * 14  # bf16 weights + fp32 master + two fp32 Adam moments
    # 8 nodes x 25 GB/s = 200 GB/s < 250 GB/s aggregate, at the 16% a save burst reaches
    assert f.checkpoint_write_s == pytest.approx(params * 14 / (200e9 * 0.16), rel=1e-12)
    assert f.checkpoint_read_s == pytest.approx(params * 14 / (200e9 * 0.215), rel=1e-12)
    mtbf = 3600 / (INTERRUPTION_RATE * 64)
    assert f.job_mtbf_hours == pytest.approx(mtbf / 3600)
    d = f.checkpoint_write_s
    x = d / (2 * mtbf)
    tau = math.sqrt(2 * d * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - d
    assert f.checkpoint_interval_s == pytest.approx(tau, rel=1e-12)
    restart = 660 + f.checkpoint_read_s
    wall = mtbf * math.exp(restart / mtbf) * (math.exp((tau + d) / mtbf) - 1) * f.compute_s / tau
    assert f.wall_clock_s == pytest.approx(wall, rel=1e-12) and f.goodput == pytest.approx(f.compute_s / wall)
    assert f.device_hours == pytest.approx(64 * wall / 3600) and f.cost_usd == pytest.approx(3.0 * 64 * wall / 3600)
    assert f.interruptions_expected == pytest.approx(wall / mtbf)
    assert 0.9 < f.goodput < 1


def test_ramp_steps_run_first_at_their_batch():
    ramp = [RampStage(global_batch=32, steps=100), RampStage(global_batch=64, steps=100)]
    f, plain = forecast(MODEL, SYSTEM, PLAN, "1T", ramp=ramp), forecast(MODEL, SYSTEM, PLAN, "1T")
    ramp_tokens = (32 + 64) * 100 * 4096
    assert f.steps == 200 + math.ceil((1e12 - ramp_tokens) / (128 * 4096))
    t32, t64 = (estimate(MODEL, SYSTEM, PLAN.model_copy(update={"global_batch": g})).step_time_s for g in (32, 64))
    main = f.steps - 200
    assert f.compute_s == pytest.approx(100 * (t32 + t64) + main * plain.step_time_s, rel=1e-12)
    with pytest.raises(InputError, match="ramp trains"):
        forecast(MODEL, SYSTEM, PLAN, "1M", ramp=ramp)


def test_async_checkpoints_block_only_for_the_copy_to_host():
    f = forecast(MODEL, SYSTEM, PLAN, "1T", checkpoint="async")
    sync = forecast(MODEL, SYSTEM, PLAN, "1T")
    assert f.checkpoint_blocking_s == pytest.approx(f.checkpoint_bytes / 64 / (DEFAULT_STORAGE.staging_gbps * 1e9))
    assert f.checkpoint_interval_s >= f.checkpoint_write_s and f.goodput > sync.goodput


def test_bigger_jobs_fail_more_often_and_lose_more():
    small = forecast(MODEL, SYSTEM, PLAN, "1T")
    big = forecast(MODEL, SYSTEM, PLAN.model_copy(update={"gpus": 1024, "global_batch": 2048}), "1T")
    assert big.job_mtbf_hours == pytest.approx(small.job_mtbf_hours / 16) and big.goodput < small.goodput


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "perfmodel", "forecast", *argv], capture_output=True, text=True,
                          timeout=120)


FLAGS = ("--model", MODEL, "--hardware", SYSTEM, "--gpus", "64", "--tp", "8", "--pp", "1", "--micro-batch", "1",
         "--global-batch", "128", "--seq-len", "4096", "--sequence-parallel", "--zero", "1")


def test_command_json_has_the_fields_docs_explain():
    r = _cli(*FLAGS, "--tokens", "1T", "--format", "json", "--price", "3")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in ("wall_clock_days", "device_hours", "cost_usd", "goodput", "interruptions_expected",
                "job_mtbf_hours", "checkpoint_bytes", "checkpoint_write_s", "checkpoint_interval_s", "restart_s"):
        assert key in out
    assert out["cost_usd"] == pytest.approx(forecast(MODEL, SYSTEM, PLAN, "1T", price=3.0).cost_usd)


@pytest.mark.parametrize("extra, needle", [
    (("--tokens", "15Q"), "--tokens '15Q' is not a token count"),
    (("--tokens", "1T", "--price", "-1"), "--price = -1.0; valid"),
    (("--tokens", "1T", "--interruption-rate", "0"), "--interruption-rate = 0.0"),
    (("--tokens", "1T", "--ramp", "256"), "--ramp '256': give GLOBAL_BATCH:STEPS"),
])
def test_bad_input_is_one_line_exit_2(extra, needle):
    r = _cli(*FLAGS, *extra)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_spec_list_price_or_a_note():
    f = forecast(MODEL, SYSTEM, PLAN, "1T")
    assert f.price_usd_per_device_hour == 12.29 and "p5.48xlarge" in f.price_source and "2024-01" in f.price_source
    assert f.cost_usd == pytest.approx(f.device_hours * 12.29)
    none = forecast(MODEL, "dgx-b200", PLAN, "1T")
    assert none.cost_usd is None and any("give --price" in n for n in none.notes)


def test_plot_writes_a_png_and_a_bad_path_is_refused_before_work(tmp_path):
    out = tmp_path / "run.png"
    r = _cli(*FLAGS, "--tokens", "1T", "--plot", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = _cli(*FLAGS, "--tokens", "1T", "--plot", str(tmp_path / "run.pdf"))
    assert r.returncode == 2 and "--plot" in r.stderr and not (tmp_path / "run.pdf").exists()


def test_search_ranks_by_time_and_cost_to_train():
    """train-time / train-cost divide step time and GPU-hours per step by the goodput of the GPU count (forecast's
    defaults): the plan's own forecast has the same goodput, and bigger counts have less of it."""
    from perfmodel.search.ranking import search

    res = search(MODEL, SYSTEM, [64, 1024], 2048, 4096, objective="train-cost", space={"tp": [8], "pp": [1]})
    t = res.table
    assert (t.wall_gpu_hours_per_step == t.gpu_hours_per_step / t.goodput).all()
    assert list(t.wall_gpu_hours_per_step) == sorted(t.wall_gpu_hours_per_step)
    g = t.groupby("gpus").goodput.first()
    assert g[1024] < g[64]
    best = res.plan(0)
    assert forecast(MODEL, SYSTEM, best, "1T").goodput == pytest.approx(t.goodput.iloc[0], rel=1e-12)


def test_a_store_of_ones_own(tmp_path):
    """--storage FILE (or a spec's storage tier) replaces the default store: a faster store writes faster, so the
    optimum interval is shorter and the goodput higher; a bad file is one line, exit 2."""
    fast = tmp_path / "store.yaml"
    fast.write_text("write_gbps: 2000\nread_gbps: 7000\nnode_gbps: 50\ndevices_per_node: 8\nwrite_efficiency: 1\n"
                    "read_efficiency: 1\nstaging_gbps: 64\n")
    r = _cli(*FLAGS, "--tokens", "1T", "--format", "json", "--storage", str(fast))
    assert r.returncode == 0, r.stderr
    out, base = json.loads(r.stdout), forecast(MODEL, SYSTEM, PLAN, "1T")
    params = load_model(MODEL).n_params()
    assert out["checkpoint_write_s"] == pytest.approx(params * 14 / (8 * 50e9), rel=1e-12)  # 8 nodes x 50 GB/s
    assert out["storage_source"] == "--storage" and out["goodput"] > base.goodput
    fast.write_text("write_gbps: -1\n")
    r = _cli(*FLAGS, "--tokens", "1T", "--storage", str(fast))
    assert r.returncode == 2 and "--storage" in r.stderr and "write_gbps" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
