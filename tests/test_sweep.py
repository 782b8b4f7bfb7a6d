"""`perfmodel sweep`: the report's arithmetic against hand counts, the points and systems a sweep file makes, the
engines giving the same rows (in process, a local pool, Ray), a killed sweep resumed to the same rows, and bad
input refused with nothing written."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.sweep.axes import node_changes, node_flops, technology_nodes
from perfmodel.sweep.points import points, system_of
from perfmodel.sweep.analysis import pareto_mask, point_table, report, sobol_first
from perfmodel.sweep.run import run_sweep
from perfmodel.sweep.schema import OBJECTIVES, Sweep, load_sweep
from perfmodel.sweep.store import load_results, manifest, write_chunk, write_manifest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "sweeps" / "example.yaml"
TINY = {"name": "tiny", "systems": ["dgx-h100"],
        "axes": {"flops": {"factors": [0.5, 1, 2]}, "hbm_capacity": {"values": [40, 80]}},
        "workloads": [{"name": "t8", "train": {"model": "llama-3-8b", "gpus": 16, "global_batch": 64,
                                              "seq_len": 4096}}],
        "objectives": ["tokens_per_s_per_gpu", "step_time_s"], "chunk_points": 1}


def write_sweep(tmp_path: Path, data: dict, name: str = "sweep.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


# -- the report's arithmetic, by hand ----------------------------------------------------------------------------

def hand_folder(tmp_path: Path) -> Path:
    """A results folder written by hand: axes a, b in {1, 2} (a grid), two workloads of weights 1 and 3 whose
    tokens/s per GPU are a x b^0.5 and 4 a x b^0.5, and a step time that is 1 / b^2 for the first (the second is
    serving: no step time). Point 3 (a = b = 2) of the serving workload misses its SLO."""
    sweep = Sweep.parse({"name": "hand", "systems": ["dgx-h100"],
                         "axes": {"a": {"values": [1, 2]}, "b": {"values": [1, 2]}},
                         "workloads": [{"name": "w1", "train": {"model": "llama-3-8b", "gpus": 8, "global_batch": 8,
                                                                "seq_len": 1024}},
                                       {"name": "w2", "weight": 3, "serve": {"model": "llama-3-8b", "gpus": 1,
                                                                             "input_len": 8, "output_len": 8}}],
                         "objectives": ["tokens_per_s_per_gpu", "step_time_s"]})
    rows = []
    for i, (a, b) in enumerate([(1, 1), (1, 2), (2, 1), (2, 2)]):
        for w, kind, weight, scale in (("w1", "train", 1.0, 1.0), ("w2", "serve", 3.0, 4.0)):
            ok = not (i == 3 and w == "w2")
            rows.append({"point": i, "system": "dgx-h100", "a": float(a), "b": float(b), "workload": w, "kind": kind,
                         "weight": weight, "feasible": ok, "reason": "" if ok else "no layout of 1 GPUs within the SLO",
                         **{o: np.nan for o in OBJECTIVES},
                         "tokens_per_s_per_gpu": scale * a * b ** 0.5 if ok else np.nan,
                         "step_time_s": 1 / b ** 2 if kind == "train" else np.nan})
    out = tmp_path / "hand"
    out.mkdir()
    man = manifest(sweep, "v", ["c0"], 4)
    write_manifest(out, man)
    write_chunk(out, "c0", rows)
    return out


def test_point_aggregate_is_the_weighted_geometric_mean(tmp_path):
    man, df = load_results(hand_folder(tmp_path))
    pts = point_table(df, ["a", "b"], {"fits": True, "slo": True})
    # point 1 (a = 1, b = 2): exp((1 log(sqrt 2) + 3 log(4 sqrt 2)) / 4) = 4^(3/4) sqrt 2
    assert pts.loc[1, "tokens_per_s_per_gpu"] == pytest.approx(4 ** 0.75 * math.sqrt(2))
    assert pts.loc[1, "step_time_s"] == pytest.approx(0.25)  # the training workload alone has it
    assert pts["feasible"].tolist() == [True, True, True, False]  # point 3's serving row misses its SLO
    assert point_table(df, ["a", "b"], {"fits": True, "slo": False})["feasible"].all()


def test_pareto_front_and_sensitivities_against_a_hand_count(tmp_path):
    r = report(hand_folder(tmp_path))
    # feasible points 0, 1, 2 (tokens/s per GPU max, step time min):
    #   0: (4^.75, 1), 1: (4^.75 sqrt2, 0.25), 2: (2 4^.75, 1); 1 beats 0 on both; 2 is fastest; 1 has the shortest step
    assert [p["point"] for p in r.pareto] == [1, 2]
    assert r.best["tokens_per_s_per_gpu"]["point"] == 2 and r.best["step_time_s"]["point"] == 1
    sens = {(s.axis, s.objective): s for s in r.sensitivity}
    # over points 0-2: log y = log a + 0.5 log b + const; the least squares over (1,1), (1,2), (2,1) is exact
    assert sens["a", "tokens_per_s_per_gpu"].elasticity == pytest.approx(1.0)
    assert sens["b", "tokens_per_s_per_gpu"].elasticity == pytest.approx(0.5)
    assert sens["b", "step_time_s"].elasticity == pytest.approx(-2.0)
    # Sobol' first order of a on log y: values L0 = c, L1 = c + h/2, L2 = c + h (h = log 2); E[log y | a=1] =
    # c + h/4 (points 0, 1), E[. | a=2] = c + h; each point's conditional mean: c+h/4, c+h/4, c+h
    ly = np.log([4 ** 0.75, 4 ** 0.75 * 2 ** 0.5, 2 * 4 ** 0.75])
    cond = np.array([ly[:2].mean()] * 2 + [ly[2]])
    assert sens["a", "tokens_per_s_per_gpu"].sobol_first == pytest.approx(cond.var() / ly.var())
    # step time 1, 1/4, 1 (b = 1, 2, 1): a explains the mean of log(1/4) / 2 at a = 1 against 0 at a = 2
    lt = np.log([1, 0.25, 1])
    assert sens["a", "step_time_s"].sobol_first == pytest.approx(np.var([lt[:2].mean()] * 2 + [0]) / lt.var())
    assert sens["b", "step_time_s"].sobol_first == pytest.approx(1.0)  # b alone sets the step time
    assert r.infeasible == {"w2: no layout of # GPUs within the SLO": 1}


def test_pareto_mask_by_hand():
    v = np.array([[1, 5], [2, 4], [2, 4], [3, 1], [1, 1], [0.5, 6]], float)
    # maximise both: (3,1) and (2,4) and (1,5) and (0.5,6) are on the front; the duplicate (2,4) once; (1,1) is not
    assert pareto_mask(v, [True, True]).tolist() == [True, True, False, True, False, True]
    # minimise the second: (1,1) beats (1,5); (3,1) is best on both
    assert pareto_mask(v, [True, False]).tolist() == [False, False, False, True, False, False]


def test_sobol_first_is_one_for_the_only_axis_and_none_without_variance():
    assert sobol_first(np.array(["1", "2"]), np.array([1.0, 2.0])) == pytest.approx(1.0)
    assert sobol_first(np.array(["1", "2"]), np.array([3.0, 3.0])) is None


# -- points and systems ------------------------------------------------------------------------------------------

def test_grid_points_and_their_systems():
    sweep = Sweep.parse(TINY)
    pts = points(sweep)
    assert [dict(p.values) for p in pts[:3]] == [{"flops": 0.5, "hbm_capacity": 40}, {"flops": 0.5, "hbm_capacity": 80},
                                                {"flops": 1, "hbm_capacity": 40}]
    s = system_of(sweep, pts[1])
    base = system_of(sweep, pts[3])  # flops x1, 80 GiB
    assert s.accelerator.peak_tflops["bf16"] == pytest.approx(0.5 * base.accelerator.peak_tflops["bf16"])
    assert s.accelerator.peak_tflops["fp8"] == pytest.approx(0.5 * base.accelerator.peak_tflops["fp8"])  # every dtype
    assert s.accelerator.hbm_capacity_gib == 80 and system_of(sweep, pts[0]).accelerator.hbm_capacity_gib == 40
    assert s.accelerator.kernel_tables == {} and all(not t.by_group for t in s.tiers)  # pricing: datasheet


def test_sampled_points_are_reproducible_and_inside_their_ranges():
    data = dict(TINY, axes={"flops": {"low": 0.5, "high": 4, "log": True},
                            "scale_up_size": {"low": 4, "high": 72, "of": "value", "integer": True}},
                sampling={"method": "lhs", "points": 20, "seed": 3})
    a, b = points(Sweep.parse(data)), points(Sweep.parse(data))
    assert a == b and len(a) == 20
    f = np.array([dict(p.values)["flops"] for p in a])
    assert (f >= 0.5).all() and (f <= 4).all()
    # a Latin hypercube puts one point in each of 20 equal strata of log(flops)
    strata = np.floor((np.log(f) - np.log(0.5)) / (np.log(8) / 20)).astype(int)
    assert sorted(strata) == list(range(20))
    sizes = {dict(p.values)["scale_up_size"] for p in a}
    assert all(float(s).is_integer() and 4 <= s <= 72 for s in sizes)


def test_technology_node_scaling_by_hand():
    # a DGX B200 (N5-family 4NP) moved to N3, from the presets: N3 logic density 1.60, power at iso clock 0.66, so the
    # units a fixed area and board power run at once are min(1.60, 1 / 0.66) = 1.5152x; HBM3E 8 stacks x 9.2 Gb/s x
    # 1024 pins / 8 = 9.4208 TB/s and 8 x 24 = 192 GiB; NVLink 900 GB/s, NIC 100 GB/s per device and direction
    sweep = Sweep.parse(TINY | {"systems": ["dgx-b200"], "axes": {"technology_node": {"values": ["N3"], "base": "N5"}}})
    s = system_of(sweep, points(sweep)[0])
    assert s.accelerator.peak_tflops["bf16"] == pytest.approx(2250 / 0.66)  # 1/0.66 < 1.60: power-bound
    assert s.accelerator.hbm_bandwidth_tbps == pytest.approx(9.4208)
    assert s.accelerator.hbm_capacity_gib == pytest.approx(192)
    assert (s.tiers[0].bandwidth_gbps, s.tiers[-1].bandwidth_gbps) == (900, 100)
    assert node_changes("N5", "N5")["flops"] == ("factor", 1.0)
    t = technology_nodes()
    for m in t.memories:  # a stack's bandwidth is its pins times their rate
        assert m.bandwidth_per_stack_gbps == pytest.approx(m.pin_gbps * m.bus_bits / 8, rel=0.01)
    assert node_flops(t.node("A14")) == pytest.approx(t.node("A14").logic_density)  # area-bound from N2 on


def test_every_technology_node_number_cites_a_source():
    t = technology_nodes()
    for n in t.nodes:
        for field in ("year", "logic_density", "logic_speed", "logic_power", "sram_density", "memory", "memory_stacks",
                      "scale_up_gbps", "scale_out_gbps"):
            assert n.sources.get(field, "").strip(), f"{n.name}.{field} has no source"
    for m in t.memories:
        for field in ("pin_gbps", "bus_bits", "capacity_per_stack_gib"):
            assert m.sources.get(field, "").strip(), f"{m.name}.{field} has no source"


# -- running: engines, resume ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def example_runs(tmp_path_factory):
    """sweeps/example.yaml through the CLI on one worker, two, and a local Ray instance of two CPUs."""
    tmp = tmp_path_factory.mktemp("example")
    outs = {}
    for label, flags in (("one", ["--workers", "1"]), ("two", ["--workers", "2"]), ("ray", ["--ray"])):
        out = tmp / label
        assert main(["sweep", str(EXAMPLE), "--out", str(out), "--quiet", *flags]) == 0
        outs[label] = out
    return outs


def test_every_engine_gives_the_same_rows(example_runs):
    frames = {k: load_results(v)[1] for k, v in example_runs.items()}
    one = frames["one"]
    sweep = load_sweep(EXAMPLE)
    assert len(one) == sweep.total_points * len(sweep.workloads)
    assert one["feasible"].all()
    for k in ("two", "ray"):
        pd.testing.assert_frame_equal(frames[k], one, check_exact=True)


def test_example_report_json(example_runs, capsys):
    assert main(["sweep", "report", str(example_runs["two"]), "--format", "json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["rows"] == r["expected_rows"] == 54 and r["feasible_points"] == 18
    pts = report(example_runs["one"])
    assert r["pareto"] == [dict(p) for p in pts.pareto]
    # more board power: faster and fewer tokens per kWh; so the front runs along the power axis
    assert sorted({p["power"] for p in r["pareto"]}) == [800, 1000, 1200]
    el = {(s["axis"], s["objective"]): s["elasticity"] for s in r["sensitivity"]}
    assert el["power", "tokens_per_s_per_gpu"] > 0 > el["power", "tokens_per_kwh"]


@pytest.mark.parametrize("sig, workers", [(signal.SIGKILL, "1"), (signal.SIGTERM, "2")], ids=["crash", "sigterm"])
def test_a_killed_sweep_resumes_to_the_same_rows(tmp_path, sig, workers):
    # 48 points, one chunk each: the kill comes after 2 chunks, and the other 46 take seconds (~0.13 s each on 2
    # workers here), so a loaded machine cannot finish them between the test's look and its kill (24 did, once)
    axes = TINY["axes"] | {"scale_out_bandwidth": {"factors": [0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4]}}
    path = write_sweep(tmp_path, TINY | {"axes": axes})
    whole = tmp_path / "whole"
    run_sweep(load_sweep(path), whole, workers=1, progress=False)
    part = tmp_path / "part"
    cmd = [sys.executable, "-m", "perfmodel", "sweep", str(path), "--out", str(part), "--workers", workers, "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, text=True)
    chunks = part / "chunks"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(chunks.glob("[!.]*.parquet")) if chunks.is_dir() else []) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, sig)  # SIGKILL: a crash, no handler runs; SIGTERM: the sweep and its workers stop
    err = proc.communicate(timeout=60)[1]
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err
        assert "--resume for the rest" in err and err.rstrip().endswith("nothing was left half-written")
    n = len(list(chunks.glob("[!.]*.parquet")))
    assert 2 <= n < 48, "the sweep should be stopped part-way"
    assert main(["sweep", str(path), "--out", str(part), "--quiet"]) == 2  # without --resume: refused
    assert len(list(chunks.glob("[!.]*.parquet"))) == n  # and nothing changed
    assert main(["sweep", str(path), "--out", str(part), "--resume", "--quiet", "--workers", "1"]) == 0
    pd.testing.assert_frame_equal(load_results(part)[1], load_results(whole)[1], check_exact=True)
    assert main(["sweep", str(path), "--out", str(part), "--resume", "--quiet", "--format", "json"]) == 0


def test_a_worker_of_another_version_is_refused():
    from dataclasses import replace

    from perfmodel.sweep.evaluate import run_chunk
    from perfmodel.sweep.points import chunks

    sweep = Sweep.parse(TINY)
    c = chunks(sweep)[0]
    assert len(run_chunk(sweep, c)) == 1
    with pytest.raises(InputError, match="a sweep worker runs another perfmodel version"):
        run_chunk(sweep, replace(c, version="0123456789abcdef"))


# -- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, words", [
    ({"objectives": ["speed"]}, "objectives: 'speed' is not known; valid: tokens_per_s_per_gpu"),
    ({"axes": {"flops": {"low": 1, "high": 2}}}, "axes.flops has a low / high range, which the grid cannot list"),
    ({"axes": {"flops": {"factors": [1, 2]}}, "pricing": "tables"}, "axes.flops with pricing = tables"),
    ({"axes": {"technology_node": {"values": ["N3"]}}}, "axes.technology_node: give values"),
    ({"sampling": {"method": "sobol"}}, "valid: points only with lhs / sobol"),
    ({"workloads": [{"name": "x"}]}, "give exactly one of train or serve"),
    ({"chunk_points": 0}, "chunk_points"),
    ({"axes": {}, "sampling": {"method": "lhs", "points": 4}}, "with no axes would draw the same point 4 times"),
    ({"name": ".hidden"}, "sweep.yaml.name = '.hidden': String should match pattern"),
    ({"axes": {"flops": {"factors": [1, 2], "log": True}}}, "log, integer and of describe a low / high range"),
    ({"sampling": {"method": "lhs", "points": 2_000_000_000}}, "valid: at most 10000000 per sweep file"),
])
def test_bad_sweep_files_are_refused_by_field(tmp_path, capsys, change, words):
    path = write_sweep(tmp_path, TINY | change)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("change, words", [
    ({"axes": {"accelerator.no_such": {"factors": [2]}}}, "axes.accelerator.no_such is not a field of the system spec"),
    ({"workloads": [{"name": "x", "train": {"model": "llama-9", "gpus": 8, "global_batch": 8, "seq_len": 8}}]},
     "workloads.x: unknown model 'llama-9'"),
    ({"systems": ["dgx-h1000"]}, "unknown hardware 'dgx-h1000'"),
    ({"axes": {"technology_node": {"values": ["N9"], "base": "N5"}}}, "unknown technology node 'N9'"),
])
def test_bad_points_and_workloads_are_refused_before_anything_is_written(tmp_path, capsys, change, words):
    path = write_sweep(tmp_path, TINY | change)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


def test_results_folders_are_never_overwritten(tmp_path, capsys):
    path = write_sweep(tmp_path, TINY | {"axes": {"flops": {"factors": [1]}}})
    other = write_sweep(tmp_path, TINY | {"name": "other", "axes": {"flops": {"factors": [2]}}}, "other.yaml")
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--quiet", "--workers", "1"]) == 0
    before = {f: f.read_bytes() for f in out.rglob("*") if f.is_file()}
    for argv, words in (([str(other), "--out", str(out)], "holds the results of another sweep"),
                        ([str(path), "--out", str(out)], "already holds this sweep (1 of 1 chunks finished)"),
                        ([str(path), "--out", str(tmp_path / "new"), "--resume"], "holds no sweep"),
                        (["report", str(tmp_path)], "not a sweep's results folder"),
                        (["report"], "give DIR"),
                        (["report", str(out), "--objective", "speed"], "--objective 'speed' is not known"),
                        (["report", str(out), "--workers", "2"], "--workers does nothing here"),
                        ([str(path), "--plot", "x.png"], "--plot does nothing here")):
        assert main(["sweep", *argv]) == 2, argv
        assert words in capsys.readouterr().err
    assert {f: f.read_bytes() for f in out.rglob("*") if f.is_file()} == before


def test_ray_missing_is_one_line_and_writes_nothing(monkeypatch, tmp_path, capsys):
    import builtins

    real = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray":
            raise ImportError("no ray")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_ray)
    out = tmp_path / "out"
    assert main(["sweep", str(write_sweep(tmp_path, TINY)), "--out", str(out), "--ray"]) == 2
    assert "pip install 'perfmodel[ray]'" in capsys.readouterr().err and not out.exists()


def test_reports_of_odd_folders_and_flags(tmp_path, capsys):
    one = write_sweep(tmp_path, TINY | {"axes": {}}, "one.yaml")  # one point, no axes: no sensitivity
    out = tmp_path / "one"
    assert main(["sweep", str(one), "--out", str(out), "--quiet", "--workers", "1"]) == 0
    assert "Pareto front (1 points)" in capsys.readouterr().out
    assert main(["sweep", "report", str(out), "--objective", "step_time_s", "--objective", "step_time_s",
                 "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["objectives"] == ["step_time_s"]
    assert main(["sweep", str(one), "--out", str(tmp_path / "x"), "--format", "csv"]) == 2
    assert "--format csv lists a finished sweep's points" in capsys.readouterr().err
    (out / "sweep.json").write_text("{not json")
    assert main(["sweep", "report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the sweep's results are not readable" in err and "Traceback" not in err


def test_schema_file_is_current():
    from perfmodel.sweep.schema import sweep_json_schema

    assert json.loads((ROOT / "sweeps" / "schema.json").read_text()) == sweep_json_schema()


def test_elasticity_holds_a_categorical_axis_fixed():
    from perfmodel.sweep.analysis import elasticities

    # y = k(node) x^0.5 with node levels before the numeric axis in the design matrix
    sub = pd.DataFrame({"node": ["N7", "N7", "N5", "N5", "N3", "N3"], "x": [1.0, 4.0] * 3})
    k = {"N7": 1.0, "N5": 3.0, "N3": 7.0}
    y = np.array([k[n] * x ** 0.5 for n, x in zip(sub["node"], sub["x"])])
    el = elasticities(sub, ["node", "x"], y)
    assert el["node"] is None and el["x"] == pytest.approx(0.5)
