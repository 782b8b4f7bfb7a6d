"""The planner page's server (perfmodel.app): its forms are the CLI's flags, its answers the CLI's, bad input is
the CLI's one-line message beside the field, no path is read from the page, and requests run side by side."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
    assert client.get("/static/app.js").status_code == 200 and client.get("/static/forms.js").status_code == 200
    assert client.get("/static/../server.py").status_code == 404


def test_the_form_speaks_plain_words_in_sections():
    from perfmodel.app.form_groups import FLAGS, SECTIONS, place

    predict = forms.fields_by_flag("predict")
    tp = predict["--tp"]
    assert (tp["section"], tp["label"], tp["rare"]) == ("layout", "Tensor-parallel size", False)
    assert predict["--recompute"]["section"] == "memory" and predict["--zero"]["section"] == "memory"
    assert predict["--headroom"]["section"] == "memory" and predict["--precision"]["section"] == "precision"
    assert predict["--recompute-saved"]["rare"] and not predict["--model"]["rare"]
    # every flag of every tab is drawn in a known section (--from and --name: the upload box): one the table
    # does not label yet is folded under "More settings" by its flag, so a new CLI flag never vanishes
    for command in ("predict", "search", "infer", "forecast"):
        for f in forms.fields(command):
            assert f["section"] in {*SECTIONS, "config"}, (command, f["flag"])
            assert f["flag"] in FLAGS or (f["section"], f["label"], f["rare"]) == ("more", f["flag"], True)
    labelled = [f for f in forms.fields("predict") if f["flag"] in FLAGS]
    assert all(f["label"] != f["flag"] for f in labelled) and len(labelled) >= 50
    assert {f for f, (s, _, _) in FLAGS.items() if s == "config"} == {"--from", "--name"}
    # a flag the table does not list still shows, folded under its own name
    assert place("predict", "--brand-new-flag") == {"section": "more", "label": "--brand-new-flag", "rare": True}
    # the stack list is a suggestion (a release@version is typed), zero's a closed choice
    assert predict["--stack"]["open"] and "torchtitan" in predict["--stack"]["choices"]
    assert not predict["--zero"]["open"]


TORCHTITAN_8B = Path(__file__).parent / "fixtures" / "configs" / "torchtitan" / "llama3_8b.toml"
LAUNCH = ["--from", "torchtitan", "--hardware", "dgx-h100", "--gpus", "8"]


def upload(text: str, name: str = "llama3_8b.toml", **box) -> dict:
    return {"files": [{"name": name, "text": text}], "framework": "torchtitan", "hardware": "dgx-h100", "gpus": "8"
            } | box


def test_an_uploaded_config_is_priced_as_predict_config(client, capsys, tmp_path):
    from perfmodel.ingest import read_config

    out = client.post("/api/import", json=upload(TORCHTITAN_8B.read_text())).json()
    cli = cli_json(capsys, "predict", "--config", str(TORCHTITAN_8B), *LAUNCH)
    assert out["estimate"]["step_time_s"] == cli["step_time_s"] and out["estimate"]["memory_bytes"] == cli["memory_bytes"]
    imp = out["import"]
    assert imp["command"] == "perfmodel predict --config llama3_8b.toml " + " ".join(LAUNCH)
    # every key the file states, with its fate, as perfmodel import reads it (sources by the name the page sent)
    want = read_config([TORCHTITAN_8B], "torchtitan").keys
    assert [(k["key"], k["value"], k["fate"], k["became"], k["why"]) for k in imp["keys"]] == [
        (k.key, k.value, k.fate, k.became, k.why) for k in want]
    assert "perfmodel-app-" not in json.dumps(out)
    # the form's values, run as predict's flags (the model as its upload), price the plan again
    values = imp["values"]
    assert values["--hardware"] == "dgx-h100" and values["--gpus"] == "8"
    up = {"--model": imp["model_upload"]} if imp["model_upload"] else None
    again = client.post("/api/predict", json={"values": values, "uploads": up}).json()
    model = tmp_path / (up["--model"]["name"] if up else "unused")
    if up:
        model.write_text(up["--model"]["text"])
    argv = [x for k, v in (values | ({"--model": str(model)} if up else {})).items()
            for x in ([k] if v is True else [k, v])]
    assert again["estimate"]["step_time_s"] == cli_json(capsys, "predict", *argv)["step_time_s"]
    # every field of this config has a place in the form: the form as filled is the config's plan
    assert imp["not_in_form"] == [] and again["estimate"]["step_time_s"] == cli["step_time_s"]


def test_a_model_no_preset_matches_is_filled_in_as_an_upload(tmp_path):
    from perfmodel.app.config_upload import model_field, plan_values
    from perfmodel.spec.model.catalogue import load_model

    assert model_field(load_model("llama-3-8b")) == ("llama-3-8b", None)
    custom = load_model("llama-3-8b").model_copy(update={"name": "my llama/8b", "n_layers": 30})
    name, up = model_field(custom)
    assert name == up["name"] == "my-llama-8b.json"
    (tmp_path / name).write_text(up["text"])
    assert load_model(str(tmp_path / name)) == custom  # what `--model FILE.json` reads back
    # plan fields as the form's values; what the form cannot say is named
    values, left = plan_values({"tp": 2, "overlap_dp_comm": False, "tp_comm_overlap": True, "sequence_parallel": True,
                                "recompute_modules": ["core_attn", "mlp"], "dp": None, "moe_overlap": False,
                                "stage_layers": [3, 5], "lora": {"rank": 16, "modules": "all"}})
    assert values == {"--tp": "2", "--no-overlap-dp-comm": True, "--tp-comm-overlap": "on",
                      "--sequence-parallel": True, "--recompute-modules": "core_attn,mlp", "--lora-rank": "16",
                      "--lora-modules": "all"}
    assert left == ["moe_overlap = False", "stage_layers = 3,5"]


def test_a_bad_upload_is_one_line_naming_the_file(client, capsys):
    bad = client.post("/api/import", json=upload("[training\nlocal_batch_size = 2\n", name="broken.toml"))
    assert bad.status_code == 400 and "broken.toml" in bad.json()["message"] and "\n" not in bad.json()["message"]
    assert "perfmodel-app-" not in bad.text and "Traceback" not in bad.text
    r = client.post("/api/import", json=upload(TORCHTITAN_8B.read_text(), hardware="", gpus=""))
    assert r.status_code == 400 and "--hardware is needed" in r.json()["message"]
    r = client.post("/api/import", json=upload(TORCHTITAN_8B.read_text(), framework=""))
    assert r.status_code == 400 and "torchtitan" in r.json()["message"]
    r = client.post("/api/import", json=upload(TORCHTITAN_8B.read_text(), name=".bashrc"))
    assert r.status_code == 400 and "file name" in r.json()["message"]
    r = client.post("/api/import", json=upload("x" * (MAX_UPLOAD + 1)))
    assert r.status_code == 400 and "up to" in r.json()["message"]
    r = client.post("/api/import", json=upload(TORCHTITAN_8B.read_text(), hardware="../spec.yaml"))
    assert r.status_code == 400 and "reads no file path" in r.json()["message"]
    # a folder the browser sends along is dropped: the file lands in the upload folder under its base name
    ok = client.post("/api/import", json=upload(TORCHTITAN_8B.read_text(), name="../../llama3_8b.toml"))
    assert ok.status_code == 200 and ok.json()["import"]["files"] == ["llama3_8b.toml"]


# ---------------------------------------------------------------------------------------------------------
# Profiler traces uploaded: what they measured beside the form's plan on the spec they calibrate
# ---------------------------------------------------------------------------------------------------------
HTA = Path(__file__).parent / "fixtures" / "traces" / "hta"
H200_TRACE = Path(__file__).parent.parent / "benchmarks" / "results" / "traces" / "gpu-single-h200" / "gpt2-124m-mb1" \
    / "rank-0.pt.trace.json.gz"
GPT2_FORM = {"--model": "gpt2-124m", "--hardware": "dgx-h100", "--gpus": "1", "--tp": "1", "--pp": "1",
             "--micro-batch": "1", "--global-batch": "1", "--seq-len": "1024", "--stack": "plain-torch"}


def trace_upload(*paths: Path, values=GPT2_FORM, **extra) -> dict:
    import base64

    files = [{"name": p.name, "data": base64.b64encode(p.read_bytes()).decode()} for p in paths]
    return {"files": files, "values": values, **extra}


def test_an_uploaded_trace_shows_what_it_measured_beside_the_calibrated_prediction(client, capsys):
    """The H200's trace of GPT-2 124M: its fields are calibrate --from-trace --format json's, and the prediction is
    predict --trace's for the form's plan (the form's dgx-h100 set aside: the trace's own GPU's system is its base)."""
    out = client.post("/api/trace", json=trace_upload(H200_TRACE)).json()
    assert out["trace"] == cli_json(capsys, "calibrate", "--from-trace", str(H200_TRACE))
    argv = [x for k, v in GPT2_FORM.items() if k != "--hardware" for x in (k, v)]
    cli = cli_json(capsys, "predict", *argv, "--trace", str(H200_TRACE))
    est = out["prediction"]["estimate"]
    assert est["hardware"] == cli["hardware"] == "dgx-h200-trace" and est["step_time_s"] == cli["step_time_s"]
    assert out["calibrated"]["name"] == "dgx-h200-trace" and 0 < out["calibrated"]["matmul_max"]["bf16"] <= 1
    assert out["command"] == "perfmodel predict " + " ".join(argv) + " --trace rank-0.pt.trace.json.gz"
    assert out["why"] is None and "perfmodel-app-" not in json.dumps(out)
    # the form's hardware as the base: an H100 is not the GPU the trace ran on, refused in one line
    r = client.post("/api/trace", json=trace_upload(H200_TRACE, base="form"))
    assert r.status_code == 400 and "the trace ran on NVIDIA H200" in r.json()["message"]
    assert "\n" not in r.json()["message"]


def test_a_trace_without_gemm_shapes_prices_on_what_it_measured_and_says_what_not(client, capsys):
    """An A100 all-reduce trace without shapes: the spec of what it measured (its collectives, its device
    copies' bandwidth; the catalogue's GEMM efficiency), its GEMM rates listed as not calibrated with the flags that
    would give them."""
    path = HTA / "nccl_data.json.gz"
    out = client.post("/api/trace", json=trace_upload(path)).json()
    assert out["trace"] == cli_json(capsys, "calibrate", "--from-trace", str(path))
    assert out["calibrated"]["name"] == "dgx-a100-40gb-trace" and out["why"] is None
    gemm = next(m for m in out["trace"]["not_calibrated"] if m["what"] == "GEMM rates")
    assert "--plan PLAN.json or --config FILE --from FRAMEWORK" in gemm["why"]
    assert out["trace"]["collectives"]["all_reduce/2"]["calls"] > 0


def test_a_bad_trace_upload_is_refused_in_one_line_naming_the_file(client, monkeypatch):
    import base64
    import gzip

    from perfmodel.app import trace_upload as tu

    good = (HTA / "mi250_rocm.json.gz").read_bytes()

    def send(name: str, data: bytes, **extra):
        r = client.post("/api/trace", json={"files": [{"name": name, "data": base64.b64encode(data).decode()}],
                                            "values": GPT2_FORM, **extra})
        assert r.status_code == 400 and "\n" not in r.json()["message"] and "Traceback" not in r.text
        assert "perfmodel-app-" not in r.text
        return r.json()["message"]

    assert "step.json" in send("step.json", b"") and "is empty" in send("step.json", b"")
    assert "not JSON" in send("step.json", b"hello, not json")
    assert "truncated or damaged gzip" in send("step.json.gz", good[: len(good) // 2])
    assert "file name" in send(".bashrc.json", good) and "file name" in send("trace.txt", good)
    assert "valid: catalogue" in send("t.json.gz", good, base="elsewhere")
    r = client.post("/api/trace", json={"files": [{"name": "t.json", "data": "not base64!"}], "values": GPT2_FORM})
    assert r.status_code == 400 and "not base64" in r.json()["message"]
    r = client.post("/api/trace", json={"files": [], "values": GPT2_FORM})
    assert r.status_code == 400 and "no file" in r.json()["message"]
    monkeypatch.setattr(tu, "MAX_TRACE_BYTES", 1000)
    assert "up to 1000 bytes" in send("big.json.gz", good)
    monkeypatch.setattr(tu, "MAX_TRACE_BYTES", 32 << 20)
    monkeypatch.setattr(tu, "MAX_JSON_BYTES", 1 << 16)  # a small gzip that inflates past the limit
    assert "gunzipped" in send("bomb.json.gz", gzip.compress(b" " * (1 << 20)))
