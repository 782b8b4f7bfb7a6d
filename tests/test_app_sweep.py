"""The planner page's Sweep tab (perfmodel.app.sweep_tab): a finished sweep's results folder answered as
`perfmodel sweep report DIR` answers it, the sweeps under perfmodel-runs/sweeps/ listed, and bad input refused in
the report's one line, HTTP 400, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from perfmodel.app.server import create_app  # noqa: E402
from perfmodel.errors import InputError  # noqa: E402
from perfmodel.sweep.analysis import point_table, report  # noqa: E402
from perfmodel.sweep.run import run_sweep  # noqa: E402
from perfmodel.sweep.schema import load_sweep  # noqa: E402
from perfmodel.sweep.store import load_results  # noqa: E402

# two base systems x 3 x 2 grid points, one training workload: a front of two points (the H100's speed against
# the A100's tokens per dollar), a categorical axis (system) and numeric ones; about two seconds on one process
SWEEP = """\
name: app-tiny
systems: [dgx-h100, dgx-a100-80gb]
axes:
  flops: {factors: [0.5, 1, 2]}
  price: {factors: [0.5, 1]}
workloads:
  - {name: t, train: {model: llama-3-8b, gpus: 64, global_batch: 512, seq_len: 8192}}
objectives: [tokens_per_s_per_gpu, tokens_per_usd]
chunk_points: 4
"""


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app()) as c:
        yield c


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("app-sweep")
    (root / "tiny.yaml").write_text(SWEEP)
    out = root / "out"
    run_sweep(load_sweep(root / "tiny.yaml"), out, workers=1, progress=False)
    return out


def files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


def refusal(fn, *args) -> str:
    with pytest.raises(InputError) as err:
        fn(*args)
    return str(err.value)


def test_the_tab_is_the_reports_answer(client, sweep_dir):
    r = client.post("/api/sweep", json={"dir": str(sweep_dir)})
    assert r.status_code == 200, r.text
    out, rep = r.json(), report(sweep_dir)
    assert out["report"] == json.loads(rep.model_dump_json())  # front, best, sensitivity, infeasible: the CLI's
    assert out["report"]["pareto"] == rep.pareto and len(rep.pareto) == 2
    assert {p["system"] for p in rep.pareto} == {"dgx-h100", "dgx-a100-80gb"}
    assert out["command"] == f"perfmodel sweep report {sweep_dir}"
    # every feasible point, as `perfmodel sweep report DIR --format csv` lists it, for the scatter and its hover
    man, df = load_results(sweep_dir)
    pts = point_table(df, list(man["sweep"]["axes"]), man["sweep"]["constraints"])
    feas = pts[pts["feasible"]]
    assert out["points"]["point"] == feas["point"].tolist() and len(feas) == rep.feasible_points == 12
    assert out["points"]["system"] == feas["system"].tolist() and out["points"]["flops"] == feas["flops"].tolist()
    assert out["points"]["tokens_per_usd"] == feas["tokens_per_usd"].tolist()
    assert out["objectives"][:2] == rep.objectives and "step_time_s" in out["objectives"]  # the pickers' choices
    assert "ttft_s" not in out["objectives"]  # no serving workload: nothing to draw
    assert out["units"]["tokens_per_usd"]["direction"] == "max"


def test_chosen_objectives_are_the_reports_objective_flags(client, sweep_dir):
    r = client.post("/api/sweep", json={"dir": str(sweep_dir), "x": "step_time_s", "y": "tokens_per_usd"})
    assert r.status_code == 200, r.text
    rep = report(sweep_dir, ["step_time_s", "tokens_per_usd"])
    assert r.json()["report"] == json.loads(rep.model_dump_json())
    assert r.json()["command"].endswith("--objective step_time_s --objective tokens_per_usd")
    one = client.post("/api/sweep", json={"dir": str(sweep_dir), "x": "step_time_s", "y": "step_time_s"}).json()
    assert one["report"]["objectives"] == ["step_time_s"]
    assert one["report"]["pareto"] == report(sweep_dir, ["step_time_s"]).pareto


def test_bad_input_is_the_reports_one_line_and_writes_nothing(client, sweep_dir, tmp_path):
    before = files(sweep_dir)
    # not a sweep's folder
    r = client.post("/api/sweep", json={"dir": str(tmp_path)})
    assert r.status_code == 400 and r.json() == {"message": refusal(report, tmp_path), "field": "dir"}
    assert "not a sweep's results folder" in r.json()["message"] and list(tmp_path.iterdir()) == []
    # a sweep with no finished chunk yet
    empty = tmp_path / "started"
    (empty / "chunks").mkdir(parents=True)
    shutil.copy(sweep_dir / "sweep.json", empty / "sweep.json")
    r = client.post("/api/sweep", json={"dir": str(empty)})
    assert r.status_code == 400 and r.json()["message"] == refusal(report, empty)
    assert "no finished chunk" in r.json()["message"] and sorted(files(empty)) == ["chunks", "sweep.json"]
    # an unknown objective, beside the picker that named it
    r = client.post("/api/sweep", json={"dir": str(sweep_dir), "x": "tokens_per_s_per_gpu", "y": "speed"})
    assert r.status_code == 400
    assert r.json() == {"message": refusal(report, sweep_dir, ["tokens_per_s_per_gpu", "speed"]), "field": "y"}
    # no folder, a manifest that is not one, a chunk that is not Parquet: one line each, no traceback
    for body, words in [({}, "results folder: empty"), ({"dir": "  "}, "results folder: empty"),
                        ({"dir": str(sweep_dir), "x": 3}, "objective")]:
        r = client.post("/api/sweep", json=body)
        assert r.status_code == 400 and words in r.json()["message"], r.text
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "sweep.json").write_text("[1, 2]")
    r = client.post("/api/sweep", json={"dir": str(tmp_path / "junk")})
    assert r.status_code == 400 and "not a sweep's manifest" in r.json()["message"]
    broken = tmp_path / "broken"
    shutil.copytree(sweep_dir, broken)
    next((broken / "chunks").glob("*.parquet")).write_text("not parquet")
    r = client.post("/api/sweep", json={"dir": str(broken)})
    assert r.status_code == 400 and "not readable" in r.json()["message"] and "\n" not in r.json()["message"]
    assert "Traceback" not in r.text
    r = client.post("/api/sweep", content=b"not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not JSON" in r.json()["message"]
    assert files(sweep_dir) == before  # the results folder read, never written


def test_sweeps_under_the_default_folder_are_listed(client, sweep_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert client.get("/api/sweeps").json() == {"root": "perfmodel-runs/sweeps", "sweeps": []}
    root = tmp_path / "perfmodel-runs" / "sweeps"
    shutil.copytree(sweep_dir, root / "app-tiny")
    (root / "not-a-sweep").mkdir()
    (root / "stray.txt").write_text("x")
    out = client.get("/api/sweeps").json()
    [s] = out["sweeps"]
    assert (s["name"], s["dir"], s["points"]) == ("app-tiny", "perfmodel-runs/sweeps/app-tiny", 12)
    assert s["finished"] == s["chunks"] == len(list((sweep_dir / "chunks").glob("*.parquet")))
    # the listed folder, relative to the server's working directory, loads as the report reads it
    r = client.post("/api/sweep", json={"dir": s["dir"]})
    assert r.status_code == 200 and r.json()["report"]["pareto"] == report(sweep_dir).pareto


def test_the_page_has_the_tab(client):
    page = client.get("/").text
    assert 'data-tab="sweep"' in page and 'id="chart-sweep-front"' in page and "/static/sweep.js" in page
    assert client.get("/static/sweep.js").status_code == 200
