"""Figures: each renders, and what it draws equals the numbers of the estimate, search, what-if, measurement or
calibration it shows. The pipeline timeline is also checked against the closed-form pipeline time and the
in-flight counts of the memory model, which are derived independently of the simulation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.calibrate.machine.raw import load_raw
from perfmodel.cost.pipeline.schedules import (
    in_flight,
    pipeline_time,
    schedule_blocks,
    schedule_order,
)
from perfmodel.spec.measurement import load_measurement
from perfmodel.plots.breakdown import MEMORY_PARTS, TIME_PARTS, memory_bars, time_bars
from perfmodel.plots.calibration_fit import calibration_axes
from perfmodel.plots.prediction import estimate_figure
from perfmodel.plots.measured_steps import steps_axes
from perfmodel.plots.gantt import gantt
from perfmodel.plots.search_results import heatmap, heatmap_table, search_figure
from perfmodel.plots.upgrades import upgrade_bars, whatif_figure
from perfmodel.search import search
from perfmodel.search.whatif import across_systems, bound_shares, upgraded, upgrades

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PNG = b"\x89PNG\r\n\x1a\n"
GIB = 2**30
STAGE_PARTS = ("gemm", "attention", "memory_bound", "recompute", "tp_comm", "cp_comm", "pp_comm", "zero3_comm")


def _plan(**kw):
    base = dict(gpus=512, tp=8, pp=4, micro_batch=1, global_batch=1024, seq_len=8192, sequence_parallel=True,
                zero=1, recompute="selective")
    return pm.Plan(**{**base, **kw})


@pytest.fixture(scope="module")
def est():
    return pm.estimate("llama-3-70b", "dgx-h100", _plan())


@pytest.fixture(scope="module")
def est_vpp():
    return pm.estimate("llama-3-70b", "dgx-h100", _plan(vpp=5, recompute="full", global_batch=128))


def _bars(ax, prefix: str) -> dict[str, list[tuple[float, float]]]:
    """gid suffix -> [(bottom, height)] of the bar segments drawn with gid PREFIX:SUFFIX."""
    out: dict[str, list] = {}
    for patch in ax.patches:
        gid = patch.get_gid() or ""
        if gid.startswith(prefix + ":"):
            out.setdefault(gid.split(":", 1)[1], []).append((patch.get_y(), patch.get_height()))
    return out


# --- the schedule simulation ------------------------------------------------------------------------------
CASES = [("gpipe", 4, 1, 8), ("1f1b", 4, 1, 8), ("1f1b", 4, 1, 2), ("1f1b", 1, 1, 3), ("interleaved", 4, 2, 8),
         ("interleaved", 4, 3, 4), ("interleaved", 2, 4, 6), ("interleaved", 8, 2, 16)]


@pytest.mark.parametrize("schedule,pp,vpp,m", CASES)
@pytest.mark.parametrize("f,r,b", [(1.0, 0.0, 2.0), (1.0, 0.5, 2.0), (2.0, 0.0, 1.0)])
def test_equal_stages_makespan_is_the_closed_form(schedule, pp, vpp, m, f, r, b):
    blocks = schedule_blocks(schedule, pp, vpp, m, [f] * pp, [b] * pp, [r] * pp)
    t = f + r + b
    assert blocks["end_s"].max() == pytest.approx(float(pipeline_time(m, t, t, pp, vpp)))
    # by hand for 1F1B and GPipe: (m + pp - 1) t; every stage is busy m t
    if schedule != "interleaved":
        assert blocks["end_s"].max() == pytest.approx((m + pp - 1) * t)
    busy = (blocks["end_s"] - blocks["start_s"]).groupby(blocks["stage"]).sum()
    assert busy.tolist() == pytest.approx([m * t] * pp)


@pytest.mark.parametrize("schedule,pp,vpp,m", CASES)
def test_blocks_respect_dependencies_and_never_overlap(schedule, pp, vpp, m):
    blocks = schedule_blocks(schedule, pp, vpp, m, [1.0] * pp, [2.0] * pp)
    key = {(r.stage, r.micro_batch, r.chunk, r.kind): r for r in blocks.itertuples()}
    assert len(key) == 2 * pp * vpp * m  # one forward and one backward per stage, micro-batch and chunk
    for (s, i, c, kind), r in key.items():
        if kind == "forward" and s > 0:
            assert r.start_s >= key[(s - 1, i, c, "forward")].end_s - 1e-12
        if kind == "backward":
            assert r.start_s >= key[(s, i, c, "forward")].end_s - 1e-12
            if s < pp - 1:
                assert r.start_s >= key[(s + 1, i, c, "backward")].end_s - 1e-12
    for _, rows in blocks.sort_values("start_s").groupby("stage"):
        assert (rows["start_s"].to_numpy()[1:] >= rows["end_s"].to_numpy()[:-1] - 1e-12).all()


@pytest.mark.parametrize("schedule,pp,vpp,m", [c for c in CASES if c[1] > 1])
def test_peak_in_flight_matches_the_memory_model(schedule, pp, vpp, m):
    """The most chunks a rank holds (forward run, backward not yet) is what the memory model charges."""
    for rank in range(pp):
        held = peak = 0
        for d, _, _ in schedule_order(schedule, pp, vpp, m, rank):
            held += 1 if d == "F" else -1
            peak = max(peak, held)
        assert peak == in_flight(schedule, pp, vpp, m, rank)


def test_stage_times_trace_to_the_step(est, est_vpp):
    for e in (est, est_vpp):
        m, t = e.num_microbatches, e.time_s
        totals = [s.fwd_s + s.recompute_s + s.bwd_s for s in e.stages]
        assert [s.layers for s in e.stages] == e.stage_layers
        assert max(totals) * m == pytest.approx(sum(getattr(t, k) for k in STAGE_PARTS))
        assert max(s.recompute_s for s in e.stages) * m == pytest.approx(t.recompute)
        pipe = float(pipeline_time(m, max(totals), np.mean(totals), e.plan.pp, e.plan.vpp))
        assert pipe + t.dp_comm + t.optimizer + t.host == pytest.approx(e.step_time_s)  # host: its waits
        assert pipe - m * max(totals) == pytest.approx(t.bubble)


# --- breakdowns -------------------------------------------------------------------------------------------
def test_time_and_memory_bars_draw_the_estimates(est, est_vpp):
    fig, (a, b) = plt.subplots(1, 2)
    time_bars(a, {"one": est, "two": est_vpp})
    memory_bars(b, [est, est_vpp])
    drawn = _bars(a, "time")
    assert set(drawn) == {p for p in TIME_PARTS if getattr(est.time_s, p) or getattr(est_vpp.time_s, p)}
    for part, segs in drawn.items():
        assert [h for _, h in segs] == pytest.approx([getattr(est.time_s, part), getattr(est_vpp.time_s, part)])
    tops = [max(y + h for y, h in (segs[i] for segs in drawn.values())) for i in (0, 1)]
    assert tops == pytest.approx([est.step_time_s, est_vpp.step_time_s])  # the parts stack to the step time
    mem = _bars(b, "memory")
    for part in MEMORY_PARTS:
        assert [h for _, h in mem[part]] == pytest.approx([getattr(e.memory_bytes, part) / GIB for e in (est, est_vpp)])
    caps = [ln.get_ydata()[0] for ln in b.lines if ln.get_gid() == "memory:capacity"]
    assert caps == pytest.approx([80.0])
    plt.close(fig)


def test_gantt_draws_the_stage_times(est_vpp):
    fig, ax = plt.subplots()
    gantt(ax, est_vpp)
    pp, v, m = est_vpp.plan.pp, est_vpp.plan.vpp, est_vpp.num_microbatches
    for kind, field in (("forward", "fwd_s"), ("recompute", "recompute_s"), ("backward", "bwd_s")):
        colls = [c for c in ax.collections if c.get_gid() == f"pipeline:{kind}"]
        assert len(colls) == pp
        for stage, c in enumerate(colls):
            widths = [p.vertices[:, 0].max() - p.vertices[:, 0].min() for p in c.get_paths()]
            assert len(widths) == m * v
            assert widths == pytest.approx([getattr(est_vpp.stages[stage], field) / v] * (m * v))
    assert f"estimate: {est_vpp.time_s.bubble:.3g} s" in ax.get_title()
    # the legend sits beside the axes: inside, it covered the end of the last stage's blocks
    legend = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    assert legend.x0 >= ax.get_window_extent().x1
    plt.close(fig)


def test_gantt_without_a_pipeline_says_so():
    """pp 1: one row of micro-batches one after another (gradient accumulation), no bubble, and a title that
    does not call it a pipeline."""
    e = pm.estimate("llama-3-8b", "dgx-h100", pm.Plan(gpus=8, micro_batch=2, global_batch=32, seq_len=4096))
    fig, ax = plt.subplots()
    gantt(ax, e)
    fwd = [c for c in ax.collections if c.get_gid() == "pipeline:forward"]
    starts = sorted(p.vertices[:, 0].min() for p in fwd[0].get_paths())
    assert len(fwd) == 1 and len(starts) == e.num_microbatches == 2
    # micro-batch 1's forward starts when micro-batch 0's forward and backward are done
    assert starts[1] == pytest.approx(e.stages[0].fwd_s + e.stages[0].bwd_s + e.stages[0].recompute_s)
    assert e.time_s.bubble == 0 and ax.get_title().startswith("no pipeline (pp 1): 2 micro-batch(es)")
    plt.close(fig)


def test_predict_figure_is_a_png(est, tmp_path):
    out = estimate_figure(est, tmp_path / "p.png")
    assert out.read_bytes()[:8] == PNG


# --- search -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def res():
    return search("llama-3-8b", "dgx-h100", [16, 64], global_batch=64, seq_len=4096)


def test_heatmap_is_the_fastest_plan_per_cell(res, tmp_path):
    grid = heatmap_table(res)
    df = res.table[res.table["gpus"] == res.table["gpus"].iloc[0]]
    for tp in grid.index:
        for pp_ in grid.columns:
            sel = df[(df["tp"] == tp) & (df["pp"] == pp_)]["step_time_s"]
            assert grid.loc[tp, pp_] == pytest.approx(sel.min()) if len(sel) else np.isnan(grid.loc[tp, pp_])
    fig, ax = plt.subplots()
    heatmap(ax, res)
    image = [im for im in ax.images if im.get_gid() == "search:heatmap"][0]
    assert np.nanmin(image.get_array()) == pytest.approx(res.table["step_time_s"].min())
    plt.close(fig)
    assert search_figure(res, tmp_path / "s.png").read_bytes()[:8] == PNG


# --- what-if ----------------------------------------------------------------------------------------------
def test_part_lists_cover_the_breakdowns():
    """The figures' and what-if's part lists name every breakdown field once (a new field cannot go undrawn)."""
    from perfmodel.spec.result import MemoryBreakdown, TimeBreakdown
    from perfmodel.search.whatif import BOUND

    assert sorted(TIME_PARTS) == sorted(f for f in TimeBreakdown.model_fields if f != "total")  # stacked otherwise
    views = ("allocated", "reserved", "device", "between_steps", "host")  # sums of the parts; host is off the device
    assert list(MEMORY_PARTS) == [f for f in MemoryBreakdown.model_fields if f not in views]
    grouped = [p for parts in BOUND.values() for p in parts]
    assert sorted(grouped) == sorted(TIME_PARTS)


def test_bound_shares_by_hand(est):
    t = est.time_s
    s = bound_shares(t)
    assert sum(s.values()) == pytest.approx(1.0)
    assert s["compute"] == pytest.approx((t.gemm + t.attention + t.recompute) / t.total)
    assert s["bubble"] == pytest.approx(t.bubble / t.total)


def test_upgraded_changes_one_resource():
    h100 = pm.load_hardware("dgx-h100")
    more = upgraded(h100, "scale_up_size", 2)
    assert more.tiers[0].domain_size == 2 * h100.tiers[0].domain_size
    assert more.accelerator.name == "H100-SXM5-80GB (scale_up_size x2)"  # a hypothetical part says so
    assert more.accelerator.model_copy(update={"name": h100.accelerator.name}) == h100.accelerator
    assert more.tiers[1].bandwidth_gbps == h100.tiers[1].bandwidth_gbps
    fast = upgraded(h100, "flops", 2)
    assert fast.accelerator.peak_tflops["bf16"] == 2 * h100.accelerator.peak_tflops["bf16"]
    assert fast.tiers == h100.tiers and fast.efficiency == h100.efficiency
    with pytest.raises(pm.InputError, match="one network tier"):
        upgraded(pm.load_hardware("gh200"), "scale_out_bandwidth", 2)  # one NVLink-C2C node: no scale-out tier
    with pytest.raises(pm.InputError, match="finite number > 0"):
        upgraded(h100, "flops", float("nan"))
    with pytest.raises(pm.InputError, match="hbm_capacity x0.01 of dgx-h100 is not a valid system"):
        upgraded(h100, "hbm_capacity", 0.01)  # less memory than the system's fixed overhead


def test_whatif_rows_are_the_searched_best_plans(tmp_path):
    w = across_systems("llama-3-8b", ["dgx-a100-80gb", "dgx-h100", "tpu-v5e"], 512, 256, 4096)
    best = search("llama-3-8b", "dgx-h100", 512, 256, 4096)
    row = w.table.set_index("system").loc["dgx-h100"]
    assert row["step_time_s"] == pytest.approx(best.table["step_time_s"].iloc[0])
    v5e = {r.system: r for r in w.rows}["tpu-v5e"]
    # 512 chips: two 256-chip v5e pods over the data-centre network, 197 bf16 TFLOP/s a chip against 989
    assert v5e.layout is not None and v5e.step_time_s > row["step_time_s"]
    u = upgrades("llama-3-8b", "dgx-h100", 512, 256, 4096)
    assert u.rows[0].speedup == 1.0
    for r in u.rows[1:]:
        assert r.speedup == pytest.approx(u.rows[0].step_time_s / r.step_time_s)
    fig, ax = plt.subplots()
    upgrade_bars(ax, u)
    widths = [p.get_width() for p in ax.patches if p.get_gid() == "whatif:speedup"]
    assert widths == pytest.approx([r.speedup for r in u.rows[1:]])
    plt.close(fig)
    assert whatif_figure(w, tmp_path / "w.png", u).read_bytes()[:8] == PNG


# --- measurement and calibration (committed results) ------------------------------------------------------
def test_steps_figure_draws_every_step():
    path = next((RESULTS / "validation" / "cpu-vm" / "plans").glob("*.measured.json"))
    m = load_measurement(path)
    fig = steps_axes({"plan": (m, 0.5)})
    ax = fig.axes[0]
    line = [ln for ln in ax.lines if ln.get_gid() == "measurement:steps"][0]
    assert list(line.get_ydata()) == pytest.approx(m.step_times())
    assert [ln.get_ydata()[0] for ln in ax.lines if ln.get_gid() == "measurement:step_time"] == \
        pytest.approx([m.step_time_s])
    plt.close(fig)


def test_calibration_figure_draws_every_fit_point():
    raw = load_raw(RESULTS / "calibration" / "cpu-sandbox-4p.raw.json")
    fig = calibration_axes(raw)
    ax = fig.axes[0]
    for coll in ax.collections:
        gid = coll.get_gid() or ""
        if gid.startswith("calibration:"):
            pts = [p for p in raw.fit.points if p.quantity == gid.split(":")[1]]
            assert np.allclose(coll.get_offsets(), [[p.measured_s, p.predicted_s] for p in pts], rtol=1e-12)
    assert sum(len(c.get_offsets()) for c in ax.collections if (c.get_gid() or "").startswith("calibration:")) \
        == len(raw.fit.points)
    plt.close(fig)


# --- the command line ---------------------------------------------------------------------------------------
def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "perfmodel", *argv], capture_output=True, text=True, timeout=300)


def test_cli_plots(tmp_path):
    r = _cli("predict", "--plot", str(tmp_path / "p.png"))
    assert r.returncode == 0 and (tmp_path / "p.png").read_bytes()[:8] == PNG
    assert "Llama" in r.stdout or "llama" in r.stdout
    r = _cli("whatif", "--model", "llama-3-8b", "--gpus", "64", "--global-batch", "64", "--seq-len", "4096",
             "--hardware", "dgx-a100-80gb,dgx-h100", "--upgrade", "dgx-h100", "--plot", str(tmp_path / "w.png"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "w.png").read_bytes()[:8] == PNG
    assert "dgx-a100-80gb" in r.stdout and "flops x2" in r.stdout


@pytest.mark.parametrize("argv,words", [
    (("predict", "--plot", "{tmp}/p.pdf"), ["--plot", "p.pdf", ".png"]),
    (("predict", "--plot", "{tmp}/missing/p.png"), ["--plot", "does not exist"]),
    (("predict", "--plot", ""), ["--plot", "''", ".png"]),  # an empty name is refused, not taken as "no plot"
    (("validate", "--sweep", "cpu-smoke", "--out-dir", "{tmp}/v", "--plot", ""), ["--plot", "''", ".png"]),
    (("validate", "--sweep", "cpu-smoke", "--out-dir", "{tmp}/v", "--csv", ""), ["--csv", "''", ".csv"]),
    (("whatif", "--model", "llama-3-8b", "--gpus", "8", "--global-batch", "8", "--seq-len", "2048",
      "--factor", "0"), ["--factor", "> 0"]),
    (("whatif", "--model", "llama-3-8b", "--gpus", "8", "--global-batch", "8", "--seq-len", "2048",
      "--hardware", "dgx-h10"), ["dgx-h10", "did you mean"]),
    (("whatif", "--model", "gpt2-124m", "--gpus", "8", "--global-batch", "8", "--seq-len", "4096",
      "--hardware", "dgx-h100", "--plot", "{tmp}/w.png"), ["no system has a plan", "max_seq_len = 1024"]),
    (("calibrate", "--device", "cpu", "--output", "{tmp}/c.yaml", "--plot", "{tmp}/c.svg"), ["--plot", ".png"]),
    (("calibrate", "--device", "cpu", "--output", "{tmp}/c.yaml", "--plot", ""), ["--plot", "''", ".png"]),
])
def test_cli_bad_plot_input(tmp_path, argv, words):
    r = _cli(*(a.format(tmp=tmp_path) for a in argv))
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and all(w in r.stderr for w in words), r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written
