"""Fixtures shared by several test modules."""

import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Kernel grids built from tables are cached on disk (perfmodel.spec.hardware.grid_cache.grid_cache_dir): the suite keeps
# its own cache, shared by its workers and the CLI processes it starts, and leaves the user's home alone.
os.environ.setdefault("PERFMODEL_CACHE_DIR", str(Path(tempfile.gettempdir()) / "perfmodel-tests-cache"))


@pytest.fixture
def no_host(monkeypatch):
    """Every shipped stack profile without its host rates (spec.stack.profile.Stack.host = None): for tests of the device's
    side of the model (pipeline bubbles, overlap windows, kernel rates) on plans the reference host would bound,
    whose hand-worked formulas leave the host out (cost.host.launch_queue is tested in tests/test_stacks.py)."""
    from perfmodel.spec.stack import profile as stack

    for name in stack.STACKS:
        monkeypatch.setitem(stack._LOADED, name, stack.load_stack(name).model_copy(update={"host": None}))


@pytest.fixture(scope="session")
def quick_cpu_calibration(tmp_path_factory) -> tuple[Path, str]:
    """One quick two-rank CPU calibration per test session (`perfmodel calibrate --device cpu --nproc 2 --quick
    --name cpu-ci-2p --output two.yaml`), made once for all the xdist workers under a file lock in their common
    temporary directory: tests/test_calibrate.py checks what it wrote, and notebook 04 validates against it
    instead of calibrating again (PERFMODEL_NOTEBOOK_CALIBRATION). (spec path, the command's printed text)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "quick-cpu-calibration"
    root.mkdir(exist_ok=True)
    spec, text = root / "two.yaml", root / "two.txt"
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker calibrates; the others wait for its files
        try:
            if not text.exists():
                from argparse import ArgumentParser

                from perfmodel.cli.commands import calibrate as cal_command

                ap = cal_command.add_parser(ArgumentParser().add_subparsers(), "calibrate", "")
                printed = cal_command.run(ap.parse_args(["--device", "cpu", "--nproc", "2", "--quick", "--name",
                                                         "cpu-ci-2p", "--output", str(spec)]))
                text.write_text(printed)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return spec, text.read_text()


@pytest.fixture(scope="session")
def llama2_7b():
    """Llama 2 7B: hidden 4096, 32 heads of 128 (no GQA), SwiGLU 11008, vocab 32000 (the preset)."""
    from perfmodel import load_model

    return load_model("llama-2-7b")


@pytest.fixture(scope="session")
def tpu_v5p():
    from perfmodel import load_hardware

    return load_hardware("tpu-v5p")


@pytest.fixture(scope="session")
def tpu_v6e():
    from perfmodel import load_hardware

    return load_hardware("tpu-v6e")


@pytest.fixture(scope="session")
def dgx_h100():
    from perfmodel import load_hardware

    return load_hardware("dgx-h100")


@pytest.fixture(scope="session")
def dgx_h100_fixed_clock(dgx_h100):
    """dgx-h100 without its power model: a mechanism test that compares two estimates compares them at one clock (the
    power model moves the clock with the step's mix: tests/test_power.py)."""
    return dgx_h100.model_copy(update={"accelerator": dgx_h100.accelerator.model_copy(update={"power": None})})


@pytest.fixture(scope="session")
def predict_cli():
    """`python -m perfmodel predict ARGS` as a user runs it: the CompletedProcess (returncode, stdout, stderr)."""
    def run(*args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "perfmodel", "predict", *map(str, args)], capture_output=True,
                              text=True)
    return run
