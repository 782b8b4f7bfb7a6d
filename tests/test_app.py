"""The planner page's server (perfmodel.app): its forms are the CLI's flags, its answers the CLI's, bad input is
the CLI's one-line message beside the field, no path is read from the page, and requests run side by side."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from perfmodel.app import forms  # noqa: E402
from perfmodel.app.server import MAX_UPLOAD, create_app  # noqa: E402
from perfmodel.cli.main import main  # noqa: E402
from perfmodel.cli.plan_flags import EXAMPLE  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app()) as c:
        yield c


def cli_json(capsys, *argv) -> dict:
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_forms_are_the_cli_flags_without_paths():
    flags = [f["flag"] for f in forms.fields("predict")]
    assert "--tp" in flags and "--sequence-parallel" in flags and "--headroom" in flags
    assert not {"--plan", "--save-plan", "--plot", "--format"} & set(flags)
    # every flag whose type names a file is left out, whatever the command (forecast's --storage FILE.yaml)
    assert "--storage" not in [f["flag"] for f in forms.fields("forecast")]
    tp = next(f for f in forms.fields("predict") if f["flag"] == "--tp")
    assert tp["kind"] == "text" and tp["name"] == "tp"
    zero = next(f for f in forms.fields("predict") if f["flag"] == "--zero")
    assert zero["kind"] == "choice" and zero["choices"] == ["0", "1", "2", "3"]
    assert next(f for f in forms.fields("infer") if f["flag"] == "--max-throughput")["kind"] == "checkbox"
    assert forms.argv("predict", {"--tp": "8", "--sequence-parallel": True, "--pp": "", "--moe-overlap": False}) == [
        "--tp", "8", "--sequence-parallel"]


def test_the_page_reads_no_path():
    with pytest.raises(Exception, match="reads no file path"):
        forms.argv("predict", {"--model": "/etc/passwd.json"})
    with pytest.raises(Exception, match="reads no file path"):
        forms.argv("predict", {"--hardware": "spec.yml"})
    with pytest.raises(Exception, match="not a field of predict"):
        forms.argv("predict", {"--save-plan": "x.json"})


def test_predict_is_the_clis_predict(client, capsys):
    out = client.post("/api/predict", json={"values": forms_values(EXAMPLE)}).json()
    cli = cli_json(capsys, "predict")
    assert out["estimate"]["step_time_s"] == cli["step_time_s"]
    assert out["estimate"]["memory_bytes"] == cli["memory_bytes"]
    assert main(["predict"]) == 0
    assert out["table"] == capsys.readouterr().out.rstrip("\n")
    # the schedule: 4 stages x 64 micro-batches x (forward, backward) blocks, ending at the pipeline's span
    s = out["schedule"]
    assert len(s["stage"]) == 4 * 64 * 3 and set(s["kind"]) == {"forward", "recompute", "backward"}
    # an empty form is the built-in example too, as `perfmodel predict` with no flags
    assert client.post("/api/predict", json={"values": {}}).json()["estimate"]["step_time_s"] == cli["step_time_s"]


def forms_values(argv: list[str]) -> dict:
    out, i = {}, 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]] = argv[i + 1]
            i += 2
        else:
            out[argv[i]] = True
            i += 1
    return out


def test_bad_input_is_the_clis_message_beside_its_field(client, capsys):
    values = forms_values(EXAMPLE) | {"--tp": "16"}  # "tp=16 does not divide num_key_value_heads = 8; ..."
    r = client.post("/api/predict", json={"values": values})
    assert r.status_code == 400
    argv = [x for k, v in values.items() for x in ([k] if v is True else [k, v])]
    assert main(["predict", *argv]) == 2
    assert r.json()["message"] in capsys.readouterr().err
    assert r.json()["field"] == "--tp" and "Traceback" not in r.text
    r = client.post("/api/predict", json={"values": {"--gpus": "many"}})
    assert r.status_code == 400 and r.json()["field"] == "--gpus" and "positive integer" in r.json()["message"]
    r = client.post("/api/predict", json={"values": forms_values(EXAMPLE) | {"--model": "no-such-model"}})
    assert r.status_code == 400 and r.json()["field"] == "--model"


def test_uploads_are_parsed_by_the_cli_loaders_and_capped(client, capsys, tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16,
           "num_key_value_heads": 4, "intermediate_size": 2816, "vocab_size": 32000, "max_position_embeddings": 2048}
    values = {"--hardware": "dgx-h100", "--gpus": "8", "--tp": "2", "--pp": "1", "--micro-batch": "1",
              "--global-batch": "32", "--seq-len": "2048", "--model": "config.json"}
    up = {"--model": {"name": "config.json", "text": json.dumps(cfg)}}
    out = client.post("/api/predict", json={"values": values, "uploads": up}).json()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    argv = [x for k, v in (values | {"--model": str(path)}).items() for x in (k, v)]
    assert out["estimate"]["step_time_s"] == cli_json(capsys, "predict", *argv)["step_time_s"]
    bad = {"--model": {"name": "my-config.json", "text": json.dumps(cfg | {"num_attention_heads": 0})}}
    r = client.post("/api/predict", json={"values": values, "uploads": bad})
    assert r.status_code == 400 and "my-config.json" in r.json()["message"] and "perfmodel-app-" not in r.text
    big = {"--model": {"name": "config.json", "text": "x" * (MAX_UPLOAD + 1)}}
    r = client.post("/api/predict", json={"values": values, "uploads": big})
    assert r.status_code == 400 and "up to" in r.json()["message"]
    spec = {"--hardware": {"name": "s.yaml", "text": "accelerator:\n  kernel_tables: {gemm: /etc/x.csv.gz}\n"}}
    r = client.post("/api/predict", json={"values": values | {"--hardware": "s.yaml"}, "uploads": spec})
    assert r.status_code == 400 and "kernel table files" in r.json()["message"]  # no server file read through it
    r = client.post("/api/predict", json={"values": values, "uploads": {"--model": {"name": "a.exe", "text": "{}"}}})
    assert r.status_code == 400 and ".json" in r.json()["message"]


def test_search_runs_as_a_job_and_answers_as_the_cli(client, capsys):
    values = {"--model": "llama-3-8b", "--hardware": "dgx-h100", "--gpus": "8,16", "--global-batch": "64",
              "--seq-len": "4096", "--top": "5"}
    job = client.post("/api/search", json={"values": values}).json()["job"]
    for _ in range(600):
        j = client.get(f"/api/jobs/{job}").json()
        if j["state"] != "running":
            break
        threading.Event().wait(0.05)
    assert j["state"] == "done"
    cli = cli_json(capsys, "search", *[x for k, v in values.items() for x in (k, v)])
    assert j["result"]["plans"] == cli["plans"] and j["result"]["pareto"] == cli["pareto"]
    r = client.post("/api/search", json={"values": values | {"--gpus": "0"}})
    assert r.status_code == 400 and r.json()["field"] == "--gpus"


def test_forecast_and_infer_answer_as_the_cli(client, capsys):
    f = client.post("/api/forecast", json={"values": forms_values(EXAMPLE) | {"--tokens": "1T"}}).json()
    assert f["wall_clock_days"] == cli_json(capsys, "forecast", *EXAMPLE, "--tokens", "1T")["wall_clock_days"]
    serve = ["--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "8", "--precision", "fp8",
             "--input-len", "1000", "--output-len", "1000", "--max-throughput"]
    out = client.post("/api/infer", json={"values": forms_values(serve)}).json()
    assert out["output_tokens_per_s"] == cli_json(capsys, "infer", *serve)["output_tokens_per_s"]
    r = client.post("/api/infer", json={"values": forms_values(serve) | {"--input-len": "0"}})
    assert r.status_code == 400 and r.json()["field"] == "--input-len"


def test_export_is_the_clis_export(client, capsys, tmp_path):
    plan = tmp_path / "plan.json"
    assert main(["predict", "--save-plan", str(plan)]) == 0
    capsys.readouterr()
    out = client.post("/api/export", json={"values": {}, "to": "megatron", "check": False}).json()
    assert main(["export", str(plan), "--to", "megatron"]) == 0
    assert out["text"] == capsys.readouterr().out and out["version"] == "core_r0.16"
    r = client.post("/api/export", json={"values": {}, "to": "jax"})
    assert r.status_code == 400 and "megatron, torchtitan, deepspeed" in r.json()["message"]


def test_twenty_concurrent_requests_are_all_answered(client):
    values = forms_values(EXAMPLE)

    def one(i):
        return client.post("/api/predict", json={"values": values | {"--micro-batch": str(1 + i % 2)}})

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(one, range(20)))
    assert all(r.status_code == 200 for r in answers)
    assert len({r.json()["estimate"]["step_time_s"] for r in answers}) == 2


def test_page_and_assets_are_served_without_a_cdn(client):
    page = client.get("/").text
    assert "/static/plotly.min.js" in page and "http" not in page.replace("http-equiv", "")
    assert client.get("/static/plotly.min.js").status_code == 200
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/../server.py").status_code == 404
