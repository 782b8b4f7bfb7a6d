"""benchmarks/probes/power_duty.py without a GPU: the limit rule against hand-solved cases, the fit recovering the constants
a synthetic run was made from, the window evidence of a hand-made long burst, and the phase machinery on CPU
tensors with a fake nvidia-smi (--dry-run)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.probes import power_duty as pd

# The constants the synthetic runs are made from: the brief's H200-like figures (700 W is the H200's power.limit,
# benchmarks/results/device/lent_gpu-h200.txt; 806 TFLOP/s its kernel table's bf16 8192^3 GEMM,
# tests/test_device_mechanisms.py).
TRUE = {"idle_w": 100.0, "memory_w": 470.0, "compute_w": 1150.0, "alpha": 2.5, "table_tflops": 806.0, "limit_w": 700.0}


def synthetic_run(c: dict, power_noise_w: float = 0.0, rate_noise: float = 0.0, seed: int = 0) -> dict:
    """A run record as power_duty.measure writes it, from the model: each phase's work at s = 1 (GEMM, memory and
    idle seconds per cycle, as the script's phases), its clock from the limit rule, its time shares at that clock,
    its mean power the mix's average at that clock, its GEMM rate s x the table's; optionally with Gaussian noise
    on the power (W) and on the rate (relative)."""
    rng = np.random.default_rng(seed)
    mixes = [("idle", "idle", None, 0, 0, 1), ("gemm", "gemm", 1.0, 1, 0, 0), ("mem", "mem", 0.0, 0, 1, 0)]
    mixes += [(f"gemm_mem_{d * 100:.0f}", "gemm_mem", d, d, 1 - d, 0) for d in (0.25, 0.5, 0.75)]
    mixes += [(f"gemm_idle_{d * 100:.0f}", "gemm_idle", d, d, 0, 1 - d) for d in (0.25, 0.5, 0.75)]
    phases = []
    for name, kind, duty, g0, m, i in mixes:
        s = pd.sustained_s(g0, m, i, c)
        wall = g0 / s + m + i
        phases.append({"name": name, "kind": kind, "duty": duty,
                       "shares": {"gemm": g0 / s / wall, "mem": m / wall, "idle": i / wall},
                       "gemm_tflops": s * c["table_tflops"] * (1 + rate_noise * rng.standard_normal()) if g0 else None,
                       "power_mean_w": pd.mix_power(s, g0, m, i, c) + power_noise_w * rng.standard_normal(),
                       "sm_mhz_median": 1980 * s})
    return {"limit_w": c["limit_w"], "max_sm_mhz": 1980.0, "phases": phases}


def test_the_limit_rule_against_hand_solved_mixes():
    """Pure GEMM: (compute - idle) s^alpha = limit - idle, so s = ((700 - 100) / (1150 - 100))^(1 / 2.5) = 0.7994.
    GEMM and idle, 1 s each at s = 1, idle 100 W, compute 1100 W, alpha 2, limit 500 W: the mix's power times
    (1 + s) is 100 + 1000 s^2 + 100 s, = 500 (1 + s) gives 5 s^2 - 2 s - 2 = 0, s = (1 + sqrt 11) / 5; at a 600 W
    limit the full clock draws 600 W exactly, so s = 1. GEMM and 400 W memory, 1 s each: 100 + 1000 s^2 + 400 s =
    500 (1 + s) gives 10 s^2 - s - 4 = 0, s = (1 + sqrt 161) / 20."""
    assert pd.sustained_s(1, 0, 0, TRUE) == pytest.approx((600 / 1050) ** (1 / 2.5), rel=1e-9)
    assert pd.sustained_s(1, 0, 0, TRUE) == pytest.approx(0.7994, abs=1e-4)
    c = {"idle_w": 100.0, "memory_w": 400.0, "compute_w": 1100.0, "alpha": 2.0, "limit_w": 500.0}
    assert pd.sustained_s(1, 0, 1, c) == pytest.approx((1 + math.sqrt(11)) / 5, rel=1e-9)
    assert pd.sustained_s(1, 0, 1, {**c, "limit_w": 600.0}) == 1.0
    assert pd.sustained_s(1, 1, 0, c) == pytest.approx((1 + math.sqrt(161)) / 20, rel=1e-9)
    assert pd.mix_power(0.5, 1, 1, 0, c) == pytest.approx((2 * (100 + 1000 * 0.25) + 400) / 3)  # 2 s GEMM, 1 s memory
    assert pd.sustained_s(0, 1, 1, c) == 1.0  # no GEMM: nothing the SM clock slows


def test_adds_per_gemm_nearest_the_duty_with_the_shortest_cycle():
    """Equal kernels: 25% is 1 GEMM + 3 adds, 75% 3 + 1. GEMM 1.5 ms, add 0.7 ms, 25%: 1 + 6 gives 1.5 / 5.7 =
    0.263 (off by more than 0.01), 2 + 13 gives 3 / 12.1 = 0.248 (within it, the fewest GEMMs that are)."""
    assert pd.mix_counts(0.25, 1.0, 1.0) == (1, 3) and pd.mix_counts(0.75, 1.0, 1.0) == (3, 1)
    assert pd.mix_counts(0.25, 1.5, 0.7) == (2, 13)


@pytest.mark.parametrize("table", [806.0, None], ids=["table rate held", "table rate fitted"])
def test_the_fit_recovers_the_constants_of_an_exact_run(table):
    """Noise-free data made by the same rule: every residual is zero at the true constants, so the least squares
    lands on them to its tolerance (1e-12 on the step): 1e-6 relative leaves room for the root finder's 1e-13."""
    r = pd.fit(synthetic_run(TRUE), table_tflops=table)
    for k in ("idle_w", "memory_w", "compute_w", "alpha", "table_tflops"):
        assert r["constants"][k] == pytest.approx(TRUE[k], rel=1e-6), k
    assert r["constants"]["limit_w"] == 700.0 and ("table_tflops" in r["free"]) == (table is None)
    by = {p["name"]: p for p in r["phases"]}
    assert by["gemm"]["s"] == pytest.approx((600 / 1050) ** 0.4, rel=1e-6)  # 806 x 0.7994 TFLOP/s over the table
    assert by["gemm_idle_50"]["s_rule"] == 1.0  # 0.5 x 1150 + 0.5 x 100 = 625 W at full clock: under the limit
    assert by["gemm_mem_50"]["rule_w"] == pytest.approx(700, rel=1e-9)  # 810 W at full clock: held at the limit
    assert by["gemm"]["sm_over_max"] == pytest.approx(by["gemm"]["s"], rel=1e-9)


def test_the_fit_recovers_the_constants_within_their_errors_from_noisy_data():
    """5 W of Gaussian noise on each phase's mean power (the fit's sigma_w; nvidia-smi's power reading is good to
    about +-5 W) and 0.1% on each GEMM rate (CUDA events over 20 s of GEMMs), 50 fixed seeds: the fit's standard
    errors are calibrated (the truth lies within 2 of them for >= 90% of seed x constant, 95% if Gaussian; within
    3 for >= 97%, 99.7%), and the design resolves the constants: the RMS error over the seeds is < 0.1 in alpha and
    < 20 W in compute_w (for this noise it is 0.055 and 9 W; idle and memory ~4 W, a single phase's noise)."""
    keys, within2, within3, err = ("idle_w", "memory_w", "compute_w", "alpha"), 0, 0, {"alpha": [], "compute_w": []}
    for seed in range(50):
        r = pd.fit(synthetic_run(TRUE, power_noise_w=5.0, rate_noise=0.001, seed=seed), table_tflops=806.0)
        for k in keys:
            e = r["constants"][k] - TRUE[k]
            within2, within3 = within2 + (abs(e) < 2 * r["stderr"][k]), within3 + (abs(e) < 3 * r["stderr"][k])
            err.get(k, []).append(e)
    assert within2 >= 0.9 * 200 and within3 >= 0.97 * 200, (within2, within3)
    assert np.sqrt(np.mean(np.square(err["alpha"]))) < 0.1 and np.sqrt(np.mean(np.square(err["compute_w"]))) < 20


def test_window_evidence_of_a_hand_made_long_burst():
    """Bursts of 1.5 s in 25-ms segments: full rate (806) for the first 200 ms, then pure GEMM's throttled rate
    (a window of about 200 ms). The first segment runs 1 / s_pure faster than the burst's steady rate, the rate
    settles at 200 ms, and the burst's clock, (0.2 + 1.3 s_pure) / 1.5, sits 0.2 / 1.5 of the way from pure GEMM's
    to the short bursts' at the same duty (full clock)."""
    run = synthetic_run(TRUE)
    s_pure = (600 / 1050) ** 0.4
    rates = [806.0 if 25 * j < 200 else 806.0 * s_pure for j in range(60)]
    segs = [[b, 25.0 * j, 25.0, 25.0 * r] for b in range(3) for j, r in enumerate(rates)]  # [burst, offset, ms, GEMMs]
    long_ = {"name": "long_burst", "kind": "long_burst", "duty": 0.5, "on_s": 1.5, "sleep_s": 1.5, "segments": segs,
             "gemm_tflops": sum(rates) / 60, "power_instant_max_w": 900.0}  # equal-time segments: the mean rate
    w = pd.window_evidence({**run, "phases": run["phases"] + [long_]}, TRUE)
    assert w["bursts"] == 3 and w["settle_ms"] == 200.0
    assert w["first_over_steady"] == pytest.approx(1 / s_pure, rel=1e-9)
    assert w["short_phase"] == "gemm_idle_50" and w["s_short_same_duty"] == pytest.approx(1.0, rel=1e-9)
    assert w["s_long"] == pytest.approx((0.2 + 1.3 * s_pure) / 1.5, rel=1e-9)
    assert w["position"] == pytest.approx(0.2 / 1.5, rel=1e-6)


def test_dry_run_drives_every_phase_on_cpu(tmp_path):
    """The GPU path's phases on CPU tensors (fp32 64^3 GEMM, 2 MiB adds) with a fake nvidia-smi printing a fixed
    row: ten phases in order, each plan's counts from the recorded kernel times by hand (idle-gap sleeps
    k tg (1 - d) / d), the shares from the kernels' timers, the smi rows parsed (the fake row's 700 W limit)."""
    pytest.importorskip("torch")  # the `torch` extra; the rest of this file needs only scipy
    out = tmp_path / "dry.json"
    assert pd.main(["--dry-run", "--seconds", "0.15", "--settle", "0.05", "--cooldown", "0", "--size", "64",
                    "--mem-gib", str(2 / 1024), "--burst-ms", "0.2", "--long-on", "0.03", "--long-off", "0.03",
                    "--out", str(out)]) == 0
    run = json.loads(out.read_text())
    names = [p["name"] for p in run["phases"]]
    assert names == ["idle", "gemm", "mem", "gemm_mem_25", "gemm_mem_50", "gemm_mem_75", "gemm_idle_25",
                     "gemm_idle_50", "gemm_idle_75", "long_burst"]
    by, tg, tm = {p["name"]: p for p in run["phases"]}, run["alone"]["gemm_ms"], run["alone"]["mem_ms"]
    for d in (0.25, 0.5, 0.75):
        mix, gap = by[f"gemm_mem_{d * 100:.0f}"], by[f"gemm_idle_{d * 100:.0f}"]
        assert (mix["gemms"], mix["mems"]) == pd.mix_counts(d, tg, tm)
        assert gap["gemms"] == max(1, round(0.2 / tg)) and gap["sleep_s"] == pytest.approx(
            gap["gemms"] * tg / 1e3 * (1 - d) / d, rel=1e-9)
    for p in run["phases"]:
        assert sum(p["shares"].values()) == pytest.approx(1.0, abs=1e-9) and p["wall_s"] > 0
    assert by["idle"]["gemm_count"] == 0 and by["idle"]["shares"]["idle"] == 1.0
    assert by["gemm"]["gemm_tflops"] > 0 and by["mem"]["shares"]["mem"] > 0.5 and by["mem"]["gemm_s"] == 0
    assert by["long_burst"]["segments"] and all(len(s) == 4 for s in by["long_burst"]["segments"])
    smi = [dict(zip(run["smi"]["columns"], row)) for row in run["smi"]["rows"]]
    assert smi and run["limit_w"] == 700.0 and run["max_sm_mhz"] == 1980.0 and smi[0]["power.draw"] == 100.0
    assert smi[0]["clocks_event_reasons.active"] == "0x0000000000000000" and smi[0]["timestamp"].startswith("20")
    assert sum(p["samples"] for p in run["phases"]) >= 1  # rows land in phases by nvidia-smi's own timestamps
