"""The planner page's Sweep tab in a real browser: `perfmodel app` started in a folder whose perfmodel-runs/sweeps/
holds a small finished sweep, driven in headless Chromium (Debian's chromium, by Playwright): the sweep is listed and
loaded, its front drawn and tabled as `perfmodel sweep report DIR` reports it, an objective picked, and a folder that
is not a sweep's refused in one line beside its field.

Skipped where no Chromium or Playwright is installed, unless PERFMODEL_BROWSER_TESTS=required, as
tests/test_app_browser.py. With PERFMODEL_SCREENSHOTS=DIR the tab's screenshot is written there (app-sweep.png).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

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
SWEEP = """\
name: app-tiny
systems: [dgx-h100, dgx-a100-80gb]
axes:
  flops: {factors: [0.5, 1, 2]}
  price: {factors: [0.5, 1]}
workloads:
  - {name: t, train: {model: llama-3-8b, gpus: 64, global_batch: 512, seq_len: 8192}}
chunk_points: 4
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`perfmodel app` run where a user ran `perfmodel sweep tiny.yaml` before: perfmodel-runs/sweeps/app-tiny."""
    from perfmodel.sweep.run import run_sweep
    from perfmodel.sweep.schema import load_sweep

    cwd = tmp_path_factory.mktemp("app-sweep-cwd")
    (cwd / "tiny.yaml").write_text(SWEEP)
    run_sweep(load_sweep(cwd / "tiny.yaml"), cwd / "perfmodel-runs" / "sweeps" / "app-tiny", workers=1, progress=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
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
    yield url, cwd / "perfmodel-runs" / "sweeps" / "app-tiny"
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
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    yield pg
    ctx.close()


def front_x(page) -> int:
    return page.evaluate("document.getElementById('chart-sweep-front').data[1].x.length")


def test_a_listed_sweep_loads_its_front_as_the_report_gives_it(page, server, tmp_path):
    from perfmodel.sweep.analysis import report

    url, folder = server
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


def test_a_folder_that_is_not_a_sweep_is_refused_beside_its_field(page, server, tmp_path):
    from perfmodel.errors import InputError
    from perfmodel.sweep.analysis import report

    url, _ = server
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
