"""Failures and checkpoints (perfmodel.run.reliability): Young and Daly against their closed forms by hand, the
expected wall time against a Monte-Carlo simulation of the same failure model (within 2%), and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfmodel.errors import InputError
from perfmodel.run.reliability import daly_interval, expected_wall_s, job_mtbf_s, young_interval


def test_llama3_job_mtbf_by_hand():
    """419 unexpected interruptions in 54 days on 16,384 H100: 1.97e-5 per GPU-hour, M = 1296 h / 419 = 3.09 h."""
    rate = 419 / (54 * 24 * 16384)
    assert rate == pytest.approx(1.97e-5, rel=2e-3)
    assert job_mtbf_s(rate, 16384) / 3600 == pytest.approx(54 * 24 / 419, rel=1e-12)


def test_young_and_daly_by_hand():
    # delta 60 s, M 3 h = 10800 s: Young sqrt(2 * 60 * 10800) = 1138.42 s
    assert young_interval(60, 10800) == pytest.approx(1138.4199, rel=1e-6)
    # Daly: x = 60 / 21600; 1138.42 * (1 + sqrt(x)/3 + x/9) - 60
    x = 60 / 21600
    assert daly_interval(60, 10800) == pytest.approx(1138.4199 * (1 + math.sqrt(x) / 3 + x / 9) - 60, rel=1e-6)
    assert daly_interval(30000, 10000) == 10000  # delta >= 2M: checkpoint every M


def test_daly_interval_minimises_the_expected_wall_time():
    delta, restart, mtbf, work = 120.0, 600.0, 4 * 3600.0, 30 * 86400.0
    best = daly_interval(delta, mtbf)
    grid = np.linspace(0.3 * best, 3 * best, 2001)
    walls = [expected_wall_s(work, t, delta, restart, mtbf) for t in grid]
    assert abs(grid[int(np.argmin(walls))] / best - 1) < 0.01
    assert expected_wall_s(work, best, delta, restart, mtbf) <= expected_wall_s(work, young_interval(delta, mtbf),
                                                                              delta, restart, mtbf) * (1 + 1e-9)


def simulate_wall_s(work_s, interval_s, delta_s, restart_s, mtbf_s, runs, rng) -> float:
    """Monte-Carlo of the module's model: segments of interval + delta; an exponential failure inside a segment
    (or a restart) loses it and costs the time until the failure; after each failure a restart of restart_s."""
    segments = int(round(work_s / interval_s))
    seg = interval_s + delta_s
    total = 0.0
    for _ in range(runs):
        t = 0.0
        for _ in range(segments):
            while True:
                f = rng.exponential(mtbf_s)
                if f >= seg:
                    t += seg
                    break
                t += f
                while True:  # the restart, itself interruptible
                    g = rng.exponential(mtbf_s)
                    if g >= restart_s:
                        t += restart_s
                        break
                    t += g
        total += t
    return total / runs


@pytest.mark.parametrize("delta, restart, mtbf", [(60.0, 600.0, 3 * 3600.0), (300.0, 1800.0, 1.5 * 3600.0)])
def test_expected_wall_time_agrees_with_a_monte_carlo_simulation(delta, restart, mtbf):
    rng = np.random.default_rng(1)
    tau = daly_interval(delta, mtbf)
    work = 200 * tau
    want = simulate_wall_s(work, tau, delta, restart, mtbf, 200, rng)
    assert expected_wall_s(work, tau, delta, restart, mtbf) == pytest.approx(want, rel=0.02)


def test_bad_rates_and_intervals_are_input_errors():
    with pytest.raises(InputError, match="interruption rate = 0.*valid: a positive number"):
        job_mtbf_s(0, 8)
    with pytest.raises(InputError, match="checkpoint interval = -1"):
        expected_wall_s(1.0, -1, 1, 1, 1)


def simulate_waiting_s(work_s, interval_s, delta_s, restart_s, mtbf_s, runs, rng) -> tuple[float, float]:
    """As simulate_wall_s, also adding up the time spent writing checkpoints and restarting (interrupted attempts
    included): (mean wall, mean waiting)."""
    segments = int(round(work_s / interval_s))
    wall = waiting = 0.0
    for _ in range(runs):
        for _ in range(segments):
            while True:
                f = rng.exponential(mtbf_s)
                if f >= interval_s + delta_s:
                    wall, waiting = wall + interval_s + delta_s, waiting + delta_s
                    break
                wall, waiting = wall + f, waiting + max(0.0, f - interval_s)  # in the write when it struck
                while True:
                    g = rng.exponential(mtbf_s)
                    if g >= restart_s:
                        wall, waiting = wall + restart_s, waiting + restart_s
                        break
                    wall, waiting = wall + g, waiting + g
    return wall / runs, waiting / runs


@pytest.mark.parametrize("delta, restart, mtbf", [(60.0, 600.0, 3 * 3600.0), (600.0, 1800.0, 1.0 * 3600.0)])
def test_waiting_time_agrees_with_a_monte_carlo_simulation(delta, restart, mtbf):
    """run.reliability.waiting_per_compute_s (what the energy model charges at idle power) against the same simulation:
    checkpoint writes and restarts, interrupted ones included, within 2%."""
    from perfmodel.run.reliability import waiting_per_compute_s

    rng = np.random.default_rng(2)
    tau = daly_interval(delta, mtbf)
    work = 200 * tau
    wall, waiting = simulate_waiting_s(work, tau, delta, restart, mtbf, 200, rng)
    goodput = tau / expected_wall_s(tau, tau, delta, restart, mtbf)
    assert waiting_per_compute_s(tau, delta, restart, mtbf, goodput) * work == pytest.approx(waiting, rel=0.02)
    assert wall - work - waiting > 0  # and the rest is lost work
