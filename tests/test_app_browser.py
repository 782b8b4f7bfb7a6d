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


@pytest.fixture(scope="module")
def server():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "perfmodel", "app", "--port", str(port)],
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
    yield url, port
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
