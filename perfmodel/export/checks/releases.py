"""Run a framework's own configuration checks on an exported configuration (`perfmodel export --check`).

Each target's check is a small script (`<target>_check.py`) that reads the exported text on stdin, hands it to the
framework's own parsing and validation code and prints one JSON line: accepted or the framework's error. The
script runs in a subprocess whose PYTHONPATH starts with the framework's release unpacked from PyPI (`fetch`), so
several releases of one framework are checked side by side and none has to be installed; only their light
dependencies are (the `frameworks` extra). The framework's code, not a copy of its rules, decides.

Why a subprocess: the frameworks import torch extensions, set global state (DeepSpeed's accelerator, torchtitan's
registries) and two releases of one package cannot be imported in one interpreter. MaxText's check runs under
another interpreter too: maxtext 0.2.5 needs Python >= 3.12 and JAX (checks.maxtext_env makes it).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from pydantic import Field

from ...errors import InputError
from ...types import Schema

# The release of each framework version an exporter targets: export.<target>.VERSIONS names the version, this the
# PyPI distribution whose code is checked. Megatron-LM's training/arguments.py is not on PyPI: its check runs the
# megatron-core release of that branch (megatron_check's docstring says what that covers).
DEFAULT_CACHE = Path.home() / ".cache" / "perfmodel" / "frameworks"
CHECK_TIMEOUT_S = 600


class CheckResult(Schema):
    """One exported configuration run through one framework release's own checks."""

    target: str = Field(description="megatron | torchtitan | deepspeed | maxtext")
    version: str = Field(description="the framework version checked (export.<target>.VERSIONS)")
    distribution: str = Field(description="the PyPI release whose code ran, e.g. megatron-core==0.16.1")
    accepted: bool = Field(description="the framework's checks raised nothing")
    error: str = Field("", description="the framework's own message when it refused the configuration")
    checks: list[str] = Field(default_factory=list, description="the framework functions that ran, in order")


def cache_dir() -> Path:
    return Path(os.environ.get("PERFMODEL_FRAMEWORKS_DIR", DEFAULT_CACHE))


HOW_MAXTEXT = "python -m perfmodel.export.checks.maxtext_env [--python PYTHON3.12]"


def maxtext_env_dir() -> Path:
    """Where checks.maxtext_env makes the Python >= 3.12 + JAX venv MaxText's check runs under."""
    return cache_dir() / "maxtext-env"


def maxtext_python() -> str | None:
    """The interpreter for MaxText's check: PERFMODEL_MAXTEXT_PYTHON, else the cache's venv once made; None when
    neither is there."""
    if os.environ.get("PERFMODEL_MAXTEXT_PYTHON"):
        return os.environ["PERFMODEL_MAXTEXT_PYTHON"]
    made = maxtext_env_dir() / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    return str(made) if (maxtext_env_dir() / ".perfmodel-ready").exists() and made.exists() else None


# Releases whose Requires-Python excludes perfmodel's own Python: downloaded as wheels for this version
_PYTHON_FOR = {"maxtext": "3.12"}


def fetch(distribution: str) -> Path:
    """The import root of `distribution` ("name==version") unpacked from PyPI into the cache (downloaded once, no
    dependencies): the wheel's contents, or the sdist's top folder."""
    name, _, version = distribution.partition("==")
    if not version:
        raise InputError(f"distribution = {distribution!r} names no version; valid: name==version")
    root = cache_dir() / f"{name}-{version}"
    done = root / ".perfmodel-unpacked"
    if done.exists():
        return Path(done.read_text().strip())
    root.mkdir(parents=True, exist_ok=True)
    # one process unpacks, the others wait for it (two checks at once, or the tests' workers)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return Path(done.read_text().strip())
        return _unpack(distribution, root, done)


def _unpack(distribution: str, root: Path, done: Path) -> Path:
    """Download `distribution` into `root`, unpack it, and record its import root in `done` (written last)."""
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp, distribution]
        if distribution.partition("==")[0] in _PYTHON_FOR:
            cmd += ["--python-version", _PYTHON_FOR[distribution.partition("==")[0]], "--only-binary=:all:"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
        if run.returncode:
            raise InputError(f"{distribution} could not be downloaded for its checks: "
                             f"{(run.stderr or run.stdout).strip().splitlines()[-1:]}")
        (archive,) = Path(tmp).iterdir()
        target = root / "src"
        shutil.rmtree(target, ignore_errors=True)
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as z:
                z.extractall(target)
            top = target
        else:
            with tarfile.open(archive) as t:
                t.extractall(target, filter="data")
            (top,) = target.iterdir()
    done.write_text(str(top))
    return top


def run_check(target: str, version: str, distribution: str, text: str) -> CheckResult:
    """`text` (an export for `target` at `version`) through the checks of `distribution`'s code."""
    return run_checks(target, version, distribution, [text])[0]


def run_checks(target: str, version: str, distribution: str, texts: list[str]) -> list[CheckResult]:
    """Each of `texts` through the checks of `distribution`'s code, in one subprocess (the framework is imported
    once): perfmodel.export.checks.batch calls `<target>_check.check(text, version)` on each."""
    python, paths = sys.executable, []
    if target == "maxtext":  # another interpreter, which needs perfmodel (the check scripts) on its path
        python, paths = maxtext_python(), [str(Path(__file__).resolve().parents[3])]
        if python is None:
            raise InputError(f"--to maxtext --check: MaxText 0.2.5's config code needs Python >= 3.12 with JAX; "
                             f"none is set up (PERFMODEL_MAXTEXT_PYTHON unset, no {maxtext_env_dir()}); make it "
                             f"with: {HOW_MAXTEXT}")
    root = fetch(distribution)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *paths, os.environ.get("PYTHONPATH", "")])
               .rstrip(os.pathsep))
    env.setdefault("CUDA_VISIBLE_DEVICES", "")  # the checks never need a GPU; keep them off one
    for _ in range(2):  # a native crash mid-batch (not a refusal: refusals are answers) gets one more try
        run = subprocess.run([python, "-m", "perfmodel.export.checks.batch", target, version],
                             input=json.dumps(texts), capture_output=True, text=True, env=env,
                             timeout=CHECK_TIMEOUT_S)
        lines = [ln for ln in run.stdout.splitlines() if ln.startswith("[")]
        try:
            answered = json.loads(lines[-1]) if lines else []
        except json.JSONDecodeError:  # cut off mid-line
            answered = []
        if len(answered) == len(texts):  # a crash after the answer does not count
            break
    else:
        tail = (run.stderr or run.stdout).strip().splitlines()[-5:]
        return [CheckResult(target=target, version=version, distribution=distribution, accepted=False,
                            error="the check itself failed: " + " | ".join(tail)) for _ in texts]
    return [CheckResult(target=target, version=version, distribution=distribution, **out) for out in answered]
