"""Every notebook under notebooks/ is committed without outputs and runs top to bottom without touching the repo.

Each notebook is executed with nbclient in a python3 kernel, from notebooks/ (its relative paths resolve from
there), with PERFMODEL_NOTEBOOK_OUT pointing at the test's temporary directory (the notebooks write only there).
The per-cell timeout is generous so that a slow CI machine does not flake; the goal of under 3 minutes per
notebook on a 2-core machine is checked by the wall time each test prints (shown even without -s).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT_S = 600
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".hypothesis", ".ipynb_checkpoints", ".venv", "build", "dist"}


def repo_files() -> dict[str, tuple[int, int]]:
    """Every file of the working tree git does not ignore (tracked or not) -> (size, mtime ns); a directory walk
    without the usual caches where git is unavailable."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True, timeout=60).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.SubprocessError):
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                 if p.is_file() and not SKIP_DIRS & set(p.relative_to(ROOT).parts)
                 and not any(part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)]
    state = {}
    for name in names:
        try:
            st = (ROOT / name).stat()
        except FileNotFoundError:  # listed by git as tracked but deleted in the working tree
            continue
        state[name] = (st.st_size, st.st_mtime_ns)
    return state


def test_notebooks_exist():
    assert PATHS, f"no notebooks under {NOTEBOOKS}"


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: code cells {dirty} carry outputs or execution counts; strip them before committing"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", f"{path.name}: kernelspec is not python3"


@pytest.fixture
def calibration(request):
    """The session's quick CPU calibration for the notebook that validates against one (04_validate: its live
    run), so the suite calibrates once (conftest.quick_cpu_calibration); None for the others."""
    if request.node.callspec.params["path"].name != "04_validate.ipynb":
        return None
    return request.getfixturevalue("quick_cpu_calibration")[0]


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_runs_top_to_bottom(path, tmp_path, monkeypatch, capsys, calibration):
    nb = nbformat.read(path, as_version=4)
    monkeypatch.setenv("PERFMODEL_NOTEBOOK_OUT", str(tmp_path))
    if calibration is not None:
        monkeypatch.setenv("PERFMODEL_NOTEBOOK_CALIBRATION", str(calibration))
    before = repo_files()
    start = time.perf_counter()
    # The kernel talks over IPC sockets in a directory of its own: over TCP, two workers' kernels can pick the same
    # free port between its choice and the bind (CI, 2026-11-27: "ZMQError: Address already in use").
    sockets = Path(tempfile.mkdtemp(prefix="nbk"))  # short: a Unix socket path holds ~100 characters
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(sockets / "k"))
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    try:
        client.execute()  # raises CellExecutionError, naming the cell and the traceback, if any cell fails
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    wall_s = time.perf_counter() - start
    with capsys.disabled():
        print(f"\n{path.name}: executed in {wall_s:.1f} s")
    errors = [(i, out.get("ename"), out.get("evalue")) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors, f"{path.name}: cells raised {errors}"
    after = repo_files()
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    assert not changed, f"{path.name} changed the repository: {changed}"
