"""`perfmodel search`, `perfmodel export` and plan files on the command line (subprocesses): outputs, the
round trip through a plan file, and one-line errors with exit code 2 that leave nothing written."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import traceback
from pathlib import Path

import pandas as pd
import pytest

import perfmodel as pm
from perfmodel.spec.plan.file import load_plan_file

JOB = ["--model", "llama-3-8b", "--hardware", "dgx-h100", "--gpus", "64", "--global-batch", "256", "--seq-len", "8192"]
PREDICT = ["predict", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--gpus", "64", "--tp", "2", "--pp", "2",
           "--micro-batch", "1", "--global-batch", "256", "--seq-len", "8192", "--sequence-parallel", "--zero", "1"]


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfmodel", *argv], capture_output=True, text=True, timeout=120)


def run_here(*argv: str) -> subprocess.CompletedProcess:
    """`run` without the process: perfmodel.cli.main.main in this one (as `python -m perfmodel` calls it), for tests
    of what a file holds rather than of the process boundary (which test_bad_search_and_plan_input keeps)."""
    from perfmodel.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:  # argparse, as the process would exit
            rc = 0 if e.code is None else e.code
        except Exception:  # noqa: BLE001 - what the process would print as a traceback
            rc = 1
            err.write(traceback.format_exc())
    return subprocess.CompletedProcess(["perfmodel", *argv], rc, out.getvalue(), err.getvalue())


def one_line_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    d = tmp_path_factory.mktemp("search")
    out = d / "best.json"
    table = run("search", *JOB, "--top", "5", "--output", str(out), "--plot", str(d / "s.png"))
    js = run("search", *JOB, "--top", "0", "--format", "json")
    csv = run("search", *JOB, "--top", "0", "--format", "csv")
    return d, out, table, js, csv


def test_search_table_json_csv_agree(searched):
    d, out, table, js, csv = searched
    assert table.returncode == js.returncode == csv.returncode == 0, table.stderr + js.stderr + csv.stderr
    data = json.loads(js.stdout)
    rows = pd.DataFrame(data["plans"])
    frame = pd.read_csv(io.StringIO(csv.stdout))
    assert list(rows.columns) == list(frame.columns)
    assert len(rows) == len(frame) == data["summary"]["feasible"]  # --top 0: every feasible plan
    assert rows["step_time_s"].tolist() == pytest.approx(frame["step_time_s"].tolist(), rel=1e-12)
    assert {"step_time_s", "tokens_per_s", "mfu", "memory_gib", "fits_in_memory", "tp", "pp", "dp", "cp", "vpp",
            "micro_batch", "recompute", "sequence_parallel", "zero"} <= set(rows.columns)
    s = data["summary"]
    assert s["enumerated"] >= s["feasible"] > 0 and s["seconds"] > 0
    assert f"{s['enumerated']} plans enumerated, {s['feasible']} feasible" in table.stdout
    assert f"{s['enumerated']} plans enumerated" in csv.stderr
    assert (d / "s.png").stat().st_size > 10_000


def test_search_output_is_the_best_plan_and_predicts_the_same(searched):
    _, out, _, js, _ = searched
    pf = load_plan_file(out)
    best = json.loads(js.stdout)["plans"][0]
    for k in ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "recompute", "sequence_parallel", "zero"):
        assert getattr(pf.plan, k) == best[k], k
    assert pf.version == 1 and pf.mesh == {"pp": pf.plan.pp, "dp": pf.plan.dp, "cp": pf.plan.cp, "tp": pf.plan.tp}
    assert sum(pf.stage_layers) == 32 and pf.placements
    again = run("predict", "--plan", str(out), "--format", "json")
    assert again.returncode == 0, again.stderr
    est = json.loads(again.stdout)
    assert est["step_time_s"] == pytest.approx(pf.prediction.step_time_s, rel=1e-12)
    if pf.plan.stage_layers is None:  # the default split: the search's own row
        assert est["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)


def test_predict_save_plan_round_trip(tmp_path):
    path = tmp_path / "p.json"
    first = run(*PREDICT, "--format", "json", "--save-plan", str(path))
    assert first.returncode == 0, first.stderr
    again = run("predict", "--plan", str(path), "--format", "json")
    assert json.loads(again.stdout)["step_time_s"] == json.loads(first.stdout)["step_time_s"]
    pf = load_plan_file(path)
    assert (pf.plan.tp, pf.plan.pp, pf.plan.dp, pf.stage_layers) == (2, 2, 16, [16, 16])
    assert pf.prediction.step_time_s == json.loads(first.stdout)["step_time_s"]


@pytest.mark.parametrize("target,needle", [("megatron", "--tensor-model-parallel-size 2"),
                                           ("torchtitan", "tensor_parallel_degree=2,"),  # 0.3.0's Python config
                                           ("torchtitan --version 0.2.2", "tensor_parallel_degree = 2"),  # TOML
                                           ("deepspeed", '"train_batch_size": 256')])
def test_export_cli(saved, target, needle):
    p = run("export", str(saved), "--to", *target.split())
    assert p.returncode == 0, p.stderr
    assert needle in p.stdout


# ---------------------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing written
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("saved") / "ok.json"
    assert run(*PREDICT, "--save-plan", str(src)).returncode == 0
    return src


def _edited(tmp_path, src, edit) -> Path:
    data = json.loads(src.read_text())
    edit(data)
    dst = tmp_path / "edited.json"
    dst.write_text(json.dumps(data))
    return dst


@pytest.mark.parametrize("edit,needles", [
    (lambda d: d.update(version=2), ["version", "2", "valid version: 1"]),
    (lambda d: d["plan"].update(tp=4), ["tp*pp*cp*dp"]),
    (lambda d: d["mesh"].update(tp=8), ["mesh", "valid mesh"]),
    (lambda d: d.update(stage_layers=[10, 22]), ["stage_layers", "[16, 16]"]),
    (lambda d: d["placements"][0].update(output=["Shard(1)"]), ["placements.0", "one per mesh axis"]),
    (lambda d: d.pop("prediction"), ["prediction is required"]),
    (lambda d: d.pop("version"), ["version is required"]),
    (lambda d: d["prediction"].update(step_time_s=0.001), ["prediction.step_time_s = 0.001", "estimate"]),
    (lambda d: d["prediction"].update(fits_in_memory=False), ["prediction.fits_in_memory = False"]),
    (lambda d: d.update(placements=d["placements"][:2]), ["placements", "exactly once"]),
    (lambda d: d["placements"][1].update(output=["Shard(9)", "Replicate()", "Replicate()"]), ["Shard(d) with d < 3"]),
    (lambda d: d["placements"][1]["split"].update(nonsense=["tp"]), ["'nonsense'", "valid: batch, seq"]),
])
def test_edited_plan_files_are_refused(tmp_path, saved, edit, needles):
    line = one_line_error(run_here("predict", "--plan", str(_edited(tmp_path, saved, edit))))
    for n in needles:
        assert n in line, line
    line = one_line_error(run_here("export", str(_edited(tmp_path, saved, edit)), "--to", "megatron"))
    assert needles[0] in line


@pytest.mark.parametrize("argv,needles", [
    (["search", *JOB[:4], "--gpus", "0", *JOB[6:]], ["--gpus", "positive"]),
    (["search", *JOB[:4], "--gpus", "8,x", *JOB[6:]], ["--gpus", "8,x"]),
    (["search", "--model", "llama-3.1-405b", "--hardware", "dgx-h100", "--gpus", "8", "--global-batch", "8",
      "--seq-len", "8192"], ["smallest reserved memory", "GiB >"]),
    (["search", *JOB, "--only", "zero=7"], ["zero", "7"]),
    (["search", *JOB, "--only", "colour=red"], ["--only", "FIELD"]),
    (["search", *JOB, "--objective", "speed"], ["objective", "speed"]),
    (["export", "does-not-exist.json", "--to", "megatron"], ["does-not-exist.json", "does not exist"]),
    (["predict", "--plan", "x.json", "--tp", "2"], ["--plan", "drop --tp"]),
    (["predict", "--model", "llama-3-8b"], ["predict needs", "--hardware"]),
])
def test_bad_search_and_plan_input(argv, needles):
    line = one_line_error(run(*argv))
    for n in needles:
        assert n in line, line


def test_unwritable_output_writes_nothing(tmp_path):
    missing = tmp_path / "no-such-dir" / "best.json"
    line = one_line_error(run("search", *JOB, "--output", str(missing)))
    assert "does not exist" in line and not missing.exists()
    infeasible = tmp_path / "never.json"
    one_line_error(run("search", "--model", "llama-3.1-405b", "--hardware", "dgx-h100", "--gpus", "8",
                       "--global-batch", "8", "--seq-len", "8192", "--output", str(infeasible)))
    assert not infeasible.exists() and list(tmp_path.iterdir()) == []


def test_export_unknown_target(saved):
    line = one_line_error(run("export", str(saved), "--to", "jax"))
    assert "'jax'" in line and "megatron, torchtitan, deepspeed" in line


def test_plan_file_api_round_trip(tmp_path):
    from perfmodel.spec.plan.file import write_plan_file
    from perfmodel.search.plan_writer import plan_file

    m, h = pm.load_model("llama-3-8b"), pm.load_hardware("dgx-h100")
    pf = plan_file(m, h, pm.Plan(gpus=16, tp=4, pp=2, micro_batch=2, global_batch=64, seq_len=4096,
                                 sequence_parallel=True, zero=1))
    write_plan_file(pf, tmp_path / "a.json")
    back = load_plan_file(tmp_path / "a.json")
    assert back == pf
    assert pm.estimate(back.model, back.hardware, back.plan).step_time_s == pf.prediction.step_time_s


def test_each_command_evaluates_its_plan_once(tmp_path, monkeypatch):
    """predict --save-plan, predict --plan and export price the plan once: the plan file's PaSE tables take their
    reference from the same evaluation as the estimate (cost.estimate.evaluate_plan)."""
    from perfmodel.cli import main as cli
    from perfmodel.cost import estimate as E
    from perfmodel.cost.pase import tables as T

    calls = []
    real = E.evaluate

    def counted(model, system, lay, *a, **k):
        calls.append(len(lay))
        return real(model, system, lay, *a, **k)

    monkeypatch.setattr(E, "evaluate", counted)
    monkeypatch.setattr(T, "evaluate", counted)
    out = tmp_path / "p.json"
    flags = ["--model", "llama-3-8b", "--hardware", "dgx-h100", "--gpus", "16", "--tp", "8", "--pp", "1",
             "--micro-batch", "1", "--global-batch", "16", "--seq-len", "4096", "--sequence-parallel"]
    cli.run(["predict", *flags, "--save-plan", str(out)])
    assert calls == [1]
    for argv in (["predict", "--plan", str(out)], ["export", str(out), "--to", "megatron"]):
        calls.clear()
        cli.run(argv)
        assert calls == [1], argv
