"""The fit verdict's error band: quantiles of measured-peak residuals (perfmodel.calibrate.runs.memory_band), the budget
and limit they give (cost.memory.fit.memory_limits), the verdict at its edges, and the estimate's fields."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel import estimate
from perfmodel.calibrate.runs.memory_band import band_of, build_bands, held_out_share, residual_rows, write_bands
from perfmodel.cost.memory import fit as memory_fit
from perfmodel.cost.memory.fit import memory_budget, memory_limits, memory_verdict, reserved_band
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.stack.profile import STACKS, MemoryBand, load_stack

ROOT = Path(__file__).resolve().parents[1]


def test_band_quantiles_by_hand():
    # one group each: midpoints at 1/8, 3/8, 5/8, 7/8; 0.1 and 0.9 lie outside them, so the ends
    assert band_of([-0.1, 0.0, 0.1, 0.2], ["a", "b", "c", "d"]) == (-0.1, 0.2)
    # group a's three rows weigh 1/3 each, b's one row 1: midpoints 1/12, 1/4, 5/12, 3/4 of the weight 2;
    # 0.1 lies between the first two zeros, 0.9 past b's 0.3
    assert band_of([0.0, 0.0, 0.0, 0.3], ["a", "a", "a", "b"]) == (0.0, 0.3)
    # a band holds the prediction: all residuals positive still give low 0
    assert band_of([0.05, 0.1], ["a", "b"]) == (0.0, 0.1)


def test_held_out_share_by_hand():
    # without a: b, c -> (0, 0.2)... b at 0.1 and c at 0.2 with midpoints 1/4, 3/4: q 0.1 -> 0.1 (clamped), so
    # the band is (0.0, 0.2) after holding 0 in; a's 0.0 and 0.0 inside: 1. Without b: a (0.0 twice, weight 1/2
    # each) and c (0.2): midpoints 1/8, 3/8, 3/4 of 2 -> (0.0, 0.2); b's 0.1 inside: 1. Without c: a and b give
    # (0.0, 0.1); c's 0.2 outside: 0. Mean 2/3.
    assert held_out_share([0.0, 0.0, 0.1, 0.2], ["a", "a", "b", "c"]) == pytest.approx(0.667, abs=1e-3)
    assert held_out_share([0.1, 0.2], ["a", "a"]) is None


def test_limits_and_verdict_at_the_band_edges(monkeypatch):
    system = load_hardware("dgx-h100")
    room = memory_budget(system, 0.0)
    assert room == pytest.approx((80 - system.memory_overhead_gib) * 2**30)
    band = MemoryBand(low=-0.05, high=0.10, rows=10, groups=3, source="test")
    monkeypatch.setattr(memory_fit, "reserved_band", lambda stack: band)
    budget, limit = memory_limits(system, "megatron-core")
    assert budget == pytest.approx(room / 1.10) and limit == pytest.approx(room / 0.95)
    # a 20% headroom keeps the fit edge at 0.8 room / 1.1; the edge of "does not fit" stays physical
    assert memory_limits(system, "megatron-core", 0.2) == pytest.approx((0.8 * room / 1.10, room / 0.95))
    r = np.array([0.99 * room / 1.10, 1.01 * room / 1.10, room, 0.99 * room / 0.95, 1.01 * room / 0.95])
    assert list(memory_verdict(r, budget, limit)) == ["fits", "tight", "tight", "tight", "does not fit"]
    # offloaded bytes past the host's room take a plan out whatever its device memory
    assert memory_verdict(0.5 * room, budget, limit, host=2.0, host_room=1.0) == "does not fit"


def test_no_band_takes_the_estimate_as_exact():
    assert reserved_band(None) == memory_fit.NO_BAND
    system = load_hardware("dgx-h100")
    room = memory_budget(system, 0.0)
    budget, limit = memory_limits(system, None)
    assert budget == pytest.approx(room) and limit == pytest.approx(room)


def test_estimate_carries_its_band():
    e = estimate("llama-3.1-8b", "dgx-h100", dict(tp=1, pp=1, dp=8, micro_batch=1, global_batch=64, seq_len=4096,
                                                    zero=1, recompute="selective"))
    band = reserved_band(e.plan.stack)
    r = e.memory_bytes.reserved
    assert e.memory_band_low_bytes == pytest.approx(r * (1 + band.low))
    assert e.memory_band_high_bytes == pytest.approx(r * (1 + band.high))
    assert e.memory_room_bytes == pytest.approx((80 - load_hardware("dgx-h100").memory_overhead_gib) * 2**30)
    assert e.memory_band_source == band.source
    want = "fits" if r * (1 + band.high) <= e.memory_room_bytes else (
        "tight" if r * (1 + band.low) <= e.memory_room_bytes else "does not fit")
    assert e.memory_verdict == want


def test_a_plan_short_beyond_its_band_says_by_how_much():
    e = estimate("llama-3.1-70b", "dgx-h100", dict(tp=1, pp=1, dp=8, micro_batch=1, global_batch=8, seq_len=4096))
    assert e.memory_verdict == "does not fit"
    short = (e.memory_band_low_bytes - e.memory_room_bytes) / 2**30
    note = next(n for n in e.notes if n.startswith("does not fit"))
    assert f"short by {short:.1f} GiB beyond the band" in note


def test_residual_rows_add_the_other_view():
    t = pd.DataFrame({"row_id": ["a", "b"], "group": ["g", "h"], "stack": ["nanotron", "torchtitan"],
                      "view": ["allocated", "reserved"], "measured_gib": [10.0, 20.0], "predicted_gib": [8.0, 25.0],
                      "measured_other_gib": [12.0, np.nan], "predicted_other_gib": [15.0, 22.0]})
    rows = residual_rows(t)
    assert list(rows["view"]) == ["allocated", "reserved", "reserved"]
    assert list(rows["residual"]) == pytest.approx([10 / 8 - 1, 20 / 25 - 1, 12 / 15 - 1])


def test_bands_write_into_the_profiles_and_are_read_back(tmp_path):
    for s in STACKS:
        (tmp_path / f"{s}.yaml").write_text((ROOT / "hardware_specs" / "stacks" / f"{s}.yaml").read_text())
    rows = pd.DataFrame({"group": ["a", "b", "c", "a"], "stack": ["torchtitan", "nanotron", "megatron-core",
                                                                  "torchtitan"],
                         "view": ["reserved"] * 4, "residual": [0.02, -0.04, 0.08, 0.0]})
    bands = build_bands(rows, "test")
    # torchtitan's rows come from one group: every stack's rows give its band
    assert bands["torchtitan"]["reserved"].rows == 4 and bands["torchtitan"]["reserved"].groups == 3
    changed = write_bands(bands, tmp_path)
    assert set(changed) == {f"{s}.yaml" for s in STACKS}
    assert write_bands(bands, tmp_path) == []  # idempotent
    stack = load_stack(tmp_path / "torchtitan.yaml")
    assert stack.memory_band["reserved"] == bands["torchtitan"]["reserved"]


def test_committed_bands_are_the_dev_rows_bands():
    """The profiles' bands are what benchmarks/measured_memory.py --write-bands gives on the bundled dev rows
    today: a memory change that moves the residuals must rewrite them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from measured_memory import table

    data = ROOT / "benchmarks" / "data"
    rows = residual_rows(table(data / "measured_memory_dev.csv", data / "published_moe_runs_dev.csv"))
    for s, views in build_bands(rows, "").items():
        for v, b in views.items():
            got = load_stack(s).memory_band[v]
            assert (got.low, got.high, got.rows, got.groups) == (b.low, b.high, b.rows, b.groups), (s, v)
