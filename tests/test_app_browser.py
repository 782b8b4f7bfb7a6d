"""The planner page in a real browser: `perfmodel app` served as a user starts it, driven in headless Chromium
(Debian's chromium, by Playwright), its numbers read off the page and compared with `perfmodel ... --format json`.

Skipped where no Chromium or Playwright is installed, unless PERFMODEL_BROWSER_TESTS=required (.ci/run sets it
and installs both). With PERFMODEL_SCREENSHOTS=DIR each tab's screenshot is written there (docs/img is made so).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from perfmodel.cli.main import main
from perfmodel.cli.plan_flags import EXAMPLE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("PERFMODEL_BROWSER_TESTS") == "required"
try:
    from playwright.sync_api import sync_playwright
except ImportError:
    sync_playwright = None
if sync_playwright is None or CHROMIUM is None:
    if REQUIRED:
        raise RuntimeError(f"browser tests required: playwright {'missing' if sync_playwright is None else 'ok'}, "
                           f"chromium {CHROMIUM or 'missing'}")
    pytest.skip("no Chromium or Playwright here (PERFMODEL_BROWSER_TESTS=required makes this an error)",
                allow_module_level=True)
pytestmark = pytest.mark.xdist_group("browser")  # one server and browser, one worker
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(cwd=None):
    """`perfmodel app` on a free port, run from `cwd` (default this one) as a user starts it: (url, process), once it
    answers."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "perfmodel", "app", "--port", str(port)], cwd=cwd,
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=1).read()
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read())
            time.sleep(0.1)
    return url, proc


@pytest.fixture(scope="module")
def server():
    url, proc = start_app()
    yield url, int(url.rsplit(":", 1)[1].rstrip("/"))
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS,
                              env={**os.environ, "HOME": str(tmp_path_factory.mktemp("chromium-home"))})
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = ctx.new_page()
    yield pg
    ctx.close()


def shot(page, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("PERFMODEL_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"app-{name}.png"), full_page=False)
    assert (folder / f"app-{name}.png").stat().st_size > 10_000


def cli_json(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def open_page(page, url):
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)


def test_the_server_listens_on_loopback_only(server):
    _, port = server
    others = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)} - {"127.0.0.1"}
    for host in others:
        with socket.socket() as s:
            s.settimeout(2)
            assert s.connect_ex((host, port)) != 0, f"perfmodel app answered on {host}"


def test_opened_it_shows_the_clis_example(page, server, capsys, tmp_path):
    url, _ = server
    open_page(page, url)
    cli = cli_json(capsys, "predict")
    assert page.text_content("#step-time") == f"{cli['step_time_s']:.3f} s"
    assert main(["predict"]) == 0
    assert page.text_content("#predict-table") == capsys.readouterr().out.rstrip("\n")
    assert page.evaluate("document.getElementById('chart-schedule').data.length") == 3
    shot(page, "predict", tmp_path)


def test_fields_change_the_answer_as_the_cli_would(page, server, capsys):
    url, _ = server
    open_page(page, url)
    before = page.text_content("#step-time")
    page.fill("[data-flag='--tp']", "4")
    page.fill("[data-flag='--pp']", "8")
    page.wait_for_function(f"document.getElementById('step-time').textContent !== {before!r}", timeout=30_000)
    args = [*EXAMPLE]
    args[args.index("--tp") + 1], args[args.index("--pp") + 1] = "4", "8"
    assert page.text_content("#step-time") == f"{cli_json(capsys, 'predict', *args)['step_time_s']:.3f} s"
    # the link holds the inputs: opened elsewhere it shows the same plan
    link = page.url
    assert "--tp=4" in link and "--pp=8" in link
    other = page.context.new_page()
    open_page(other, link)
    assert other.text_content("#step-time") == page.text_content("#step-time")


def test_bad_input_shows_the_clis_message_beside_the_field(page, server, capsys):
    url, _ = server
    open_page(page, url)
    page.fill("[data-flag='--tp']", "16")
    page.wait_for_selector("#predict-error:not([hidden])", timeout=30_000)
    args = [*EXAMPLE]
    args[args.index("--tp") + 1] = "16"
    assert main(["predict", *args]) == 2
    err = capsys.readouterr().err
    beside = page.text_content("[data-flag='--tp'] ~ .field-error")
    assert beside and beside in err and "Traceback" not in page.content()


def test_a_search_draws_its_front_and_loads_a_plan(page, server, capsys, tmp_path):
    url, _ = server
    open_page(page, url + "#tab=search")
    page.click("#search-run")
    page.wait_for_selector("#search-table tr.pick", timeout=120_000)
    assert page.evaluate("document.getElementById('chart-pareto-memory').data[1].x.length") >= 1
    shot(page, "search", tmp_path)
    cli = cli_json(capsys, "search", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--gpus", "8,16,32",
                   "--global-batch", "256", "--seq-len", "4096", "--top", "20")
    best = cli["plans"][0]
    page.click("#search-table tr.pick")
    page.wait_for_selector("#tab-predict.active")
    page.wait_for_function(f"document.getElementById('step-time').textContent === '{best['step_time_s']:.3f} s'",
                           timeout=30_000)


def test_an_export_downloads_a_file_the_framework_accepts(page, server, tmp_path):
    from perfmodel.export.checks.releases import run_check
    from perfmodel.export.targets import versions

    url, _ = server
    open_page(page, url + "#tab=export")
    page.select_option("#export-to", "megatron")
    page.click("#export-run")
    page.wait_for_selector("#export-download:not([hidden])", timeout=300_000)
    assert "accepted" in page.text_content("#export-verdict")
    with page.expect_download() as d:
        page.click("#export-download")
    path = tmp_path / d.value.suggested_filename
    d.value.save_as(path)
    version = next(iter(versions("megatron")))
    assert run_check("megatron", version, versions("megatron")[version], path.read_text()).accepted
    shot(page, "export", tmp_path)


def test_forecast_and_serve_tabs_answer_as_the_cli(page, server, capsys, tmp_path):
    url, _ = server
    open_page(page, url + "#tab=forecast")
    page.click("#forecast-run")
    page.wait_for_selector("#forecast-cards .card")
    f = cli_json(capsys, "forecast", *EXAMPLE, "--tokens", "1T")
    assert page.text_content("[data-key='days'] b") == f"{f['wall_clock_days']:.1f}"
    shot(page, "forecast", tmp_path)
    page.click("#tabs [data-tab='serve']")
    page.click("#serve-run")
    page.wait_for_selector("#serve-cards .card")
    s = cli_json(capsys, "infer", "--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "8",
                 "--precision", "fp8", "--input-len", "1000", "--output-len", "1000", "--max-throughput")
    assert f"{round(s['output_tokens_per_s']):,}" in page.text_content("#serve-cards")
    shot(page, "serve", tmp_path)


def test_the_form_is_in_sections_with_plain_labels(page, server):
    url, _ = server
    open_page(page, url)
    legends = page.eval_on_selector_all("#form-predict > fieldset > legend", "els => els.map(e => e.textContent)")
    assert legends[:7] == ["Model", "Cluster", "Batch", "Layout (parallelism)", "Memory", "Precision", "Stack"]
    tp = page.locator("#form-predict label:has([data-flag='--tp'])")
    assert tp.inner_text().strip() == "Tensor-parallel size" and tp.get_attribute("title").startswith("--tp")
    # rare fields are folded away, and shown when opened; the catalogues are offered as lists
    saved = page.locator("#form-predict [data-flag='--recompute-saved']")
    assert not saved.is_visible()
    page.click("#form-predict details.more > summary")
    assert saved.is_visible()
    assert page.eval_on_selector_all("#list-models option", "os => os.length") > 10
    assert page.get_attribute("[data-flag='--stack']", "list") == "list-predict--stack"


FIXTURE = Path(__file__).parent / "fixtures" / "configs" / "torchtitan" / "llama3_8b.toml"


def test_an_uploaded_config_is_priced_as_predict_config(page, server, capsys, tmp_path):
    from perfmodel.ingest import read_config

    url, _ = server
    open_page(page, url)
    page.click("#import-box > summary")
    page.set_input_files("#import-files", str(FIXTURE))
    page.select_option("#import-from", "torchtitan")
    page.fill("#import-hardware", "dgx-h100")
    page.fill("#import-gpus", "8")
    page.click("#import-run")
    page.wait_for_selector("#import-result:not([hidden])", timeout=60_000)
    launch = ["--from", "torchtitan", "--hardware", "dgx-h100", "--gpus", "8"]
    cli = cli_json(capsys, "predict", "--config", str(FIXTURE), *launch)
    assert page.text_content("#step-time") == f"{cli['step_time_s']:.3f} s"
    assert page.text_content("#import-command") == "perfmodel predict --config llama3_8b.toml " + " ".join(launch)
    keys = read_config([FIXTURE], "torchtitan").keys
    assert page.locator("#import-keys tr").count() == 1 + len(keys)  # a row per key, under the header
    shot(page, "import", tmp_path)
    # the form holds the imported plan: edited, it predicts again as the CLI does with the form's flags
    assert page.input_value("[data-flag='--gpus']") == "8" and page.input_value("[data-flag='--hardware']") == "dgx-h100"
    assert page.input_value("[data-flag='--recompute']") == "per-op" and page.text_content("#import-note") == ""
    before = page.text_content("#step-time")
    page.select_option("[data-flag='--recompute']", "full")
    page.wait_for_function(f"document.getElementById('step-time').textContent !== {before!r}", timeout=30_000)
    assert page.is_visible("#import-edited")  # the page says the numbers are no longer the config's
    values = page.evaluate("values('predict')")
    model = page.evaluate("UPLOADS.predict['--model'] || null")
    if model:
        (tmp_path / model["name"]).write_text(model["text"])
        values["--model"] = str(tmp_path / model["name"])
    argv = [x for k, v in values.items() for x in ([k] if v is True else [k, v])]
    assert page.text_content("#step-time") == f"{cli_json(capsys, 'predict', *argv)['step_time_s']:.3f} s"


def test_a_bad_upload_shows_one_line_in_the_page(page, server, tmp_path):
    url, _ = server
    open_page(page, url)
    bad = tmp_path / "broken.toml"
    bad.write_text("[training\n")
    page.click("#import-box > summary")
    page.set_input_files("#import-files", str(bad))
    page.select_option("#import-from", "torchtitan")
    page.fill("#import-hardware", "dgx-h100")
    page.click("#import-run")
    page.wait_for_selector("#import-error:not([hidden])", timeout=30_000)
    message = page.text_content("#import-error")
    assert "broken.toml" in message and "\n" not in message and "Traceback" not in page.content()


H200_TRACE = Path(__file__).parent.parent / "benchmarks" / "results" / "traces" / "gpu-single-h200" / "gpt2-124m-mb1" \
    / "rank-0.pt.trace.json.gz"
GPT2_FORM = {"--model": "gpt2-124m", "--hardware": "dgx-h100", "--gpus": "1", "--tp": "1", "--pp": "1",
             "--micro-batch": "1", "--global-batch": "1", "--seq-len": "1024", "--stack": "plain-torch"}


def test_an_uploaded_trace_shows_what_it_measured_beside_the_calibrated_prediction(page, server, capsys, tmp_path):
    from urllib.parse import urlencode

    url, _ = server
    open_page(page, url + "#" + urlencode({"tab": "predict", **GPT2_FORM}))
    page.click("#trace-box > summary")
    page.set_input_files("#trace-files", str(H200_TRACE))
    page.click("#trace-run")
    page.wait_for_selector("#trace-result:not([hidden])", timeout=60_000)
    argv = [x for k, v in GPT2_FORM.items() if k != "--hardware" for x in (k, v)]
    cli = cli_json(capsys, "predict", *argv, "--trace", str(H200_TRACE))
    assert page.text_content("#step-time") == f"{cli['step_time_s']:.3f} s"  # the cards: the calibrated prediction
    words = page.text_content("#trace-command").split()  # the form's flags in its own order, then the trace
    assert words[:2] == ["perfmodel", "predict"] and words[-2:] == ["--trace", "rank-0.pt.trace.json.gz"]
    assert dict(zip(words[2:-2:2], words[3:-2:2])) == {k: v for k, v in GPT2_FORM.items() if k != "--hardware"}
    measured = cli_json(capsys, "calibrate", "--from-trace", str(H200_TRACE))
    rows = page.locator("#trace-measured tr")
    assert rows.nth(1).inner_text().split("\t") == ["device", measured["device"]]
    assert page.locator("#trace-kernels tr").count() == 1 + len(measured["kernels"])  # a row per class
    assert page.locator("#trace-gemm tr").count() == 1 + min(20, len(measured["gemm"]))
    assert "dgx-h200-trace" in page.text_content("#trace-predicted")
    shot(page, "trace", tmp_path)


def test_a_bad_trace_shows_one_line_in_the_page(page, server, tmp_path):
    url, _ = server
    open_page(page, url)
    bad = tmp_path / "step.json"
    bad.write_text("hello, not json")
    page.click("#trace-box > summary")
    page.set_input_files("#trace-files", str(bad))
    page.click("#trace-run")
    page.wait_for_selector("#trace-error:not([hidden])", timeout=30_000)
    message = page.text_content("#trace-error")
    assert "step.json" in message and "not JSON" in message and "\n" not in message
    assert "perfmodel-app-" not in message and "Traceback" not in page.content()


# -- the Sweep tab: `perfmodel app` run where a user ran `perfmodel sweep tiny.yaml` before ----------------------

@pytest.fixture(scope="module")
def sweep_server(tmp_path_factory):
    """The app served from a folder holding perfmodel-runs/sweeps/app-tiny (tests/test_app_sweep.py's SWEEP)."""
    from test_app_sweep import SWEEP

    from perfmodel.sweep.run import run_sweep
    from perfmodel.sweep.schema import load_sweep

    cwd = tmp_path_factory.mktemp("app-sweep-cwd")
    (cwd / "tiny.yaml").write_text(SWEEP)
    run_sweep(load_sweep(cwd / "tiny.yaml"), cwd / "perfmodel-runs" / "sweeps" / "app-tiny", workers=1, progress=False)
    url, proc = start_app(cwd)
    yield url, cwd / "perfmodel-runs" / "sweeps" / "app-tiny"
    proc.terminate()
    proc.wait(10)


def front_x(page) -> int:
    return page.evaluate("document.getElementById('chart-sweep-front').data[1].x.length")


def test_a_listed_sweep_loads_its_front_as_the_report_gives_it(page, sweep_server, tmp_path):
    from perfmodel.sweep.analysis import report

    url, folder = sweep_server
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    page.click("#tabs [data-tab='sweep']")  # the newest sweep found is loaded when the tab opens
    page.wait_for_selector("#sweep-result:not([hidden])", timeout=60_000)
    assert page.input_value("#sweep-dir") == "perfmodel-runs/sweeps/app-tiny"
    assert page.locator("#sweep-found option").all_inner_texts()[1].startswith("app-tiny: 12 points")
    rep = report(folder)
    assert page.evaluate("document.getElementById('chart-sweep-front').data[0].x.length") == rep.feasible_points
    assert front_x(page) == len(rep.pareto) == 2
    assert page.text_content("#sweep-command") == "perfmodel sweep report perfmodel-runs/sweeps/app-tiny"
    assert page.locator("#sweep-best tr").count() == 1 + len(rep.best)
    assert page.locator("#sweep-sensitivity tr").count() == 1 + len(rep.sensitivity)
    assert page.input_value("#sweep-x") == rep.objectives[0] and page.input_value("#sweep-y") == rep.objectives[1]
    assert "dir=perfmodel-runs%2Fsweeps%2Fapp-tiny" in page.url and "x=" not in page.url  # the sweep's own objectives
    folder_ = Path(os.environ.get("PERFMODEL_SCREENSHOTS") or tmp_path)
    folder_.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder_ / "app-sweep.png"))
    # another objective picked: the report on the two drawn, and the link holds them
    page.select_option("#sweep-y", "step_time_s")
    page.wait_for_function("document.getElementById('sweep-command').textContent.includes('step_time_s')")
    assert front_x(page) == len(report(folder, [rep.objectives[0], "step_time_s"]).pareto)
    assert "y=step_time_s" in page.url and "tab=sweep" in page.url


def test_a_folder_that_is_not_a_sweep_is_refused_beside_its_field(page, sweep_server, tmp_path):
    from perfmodel.errors import InputError
    from perfmodel.sweep.analysis import report

    url, _ = sweep_server
    page.goto(url + "#tab=sweep")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    page.fill("#sweep-dir", str(tmp_path))
    page.press("#sweep-dir", "Enter")  # Enter loads, as the button does
    page.wait_for_selector("#sweep-error:not([hidden])", timeout=30_000)
    with pytest.raises(InputError) as err:
        report(tmp_path)
    assert page.text_content("#sweep-error") == str(err.value) and "\n" not in str(err.value)
    assert page.text_content("#sweep-dir ~ .field-error") == str(err.value)
    assert page.is_hidden("#sweep-result") and list(tmp_path.iterdir()) == []
