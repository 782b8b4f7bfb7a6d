"""The Python that MaxText's config check runs under: maxtext==0.2.5 needs Python >= 3.12 (its wheel's
Requires-Python) and JAX, which perfmodel's own environment need not have.

`python -m perfmodel.export.checks.maxtext_env [--python PYTHON3.12]` makes a venv in the frameworks cache (once,
at releases.maxtext_env_dir(); ~750 MB, ~1 min from PyPI) with what the import chain of maxtext/configs/pyconfig.py
and types.py needs: jax, jaxlib (CPU), omegaconf, pydantic, jinja2, pyyaml, flax, orbax-checkpoint, etils, psutil,
absl-py, packaging, pathwaysutils (maxtext/utils/max_utils.py, gcs_utils.py, elastic_utils.py and
common/common_types.py import them at module level). MaxText itself is not installed there:
releases.fetch unpacks its wheel and puts it first on PYTHONPATH, as for the other frameworks.
PERFMODEL_MAXTEXT_PYTHON names another interpreter with those packages instead (releases.maxtext_python).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ...errors import InputError
from .releases import maxtext_env_dir as env_dir

# The versions the check was first run with (2026-11-26), pinned so that every machine checks the same way.
REQUIREMENTS = ["jax==0.12.0.1", "jaxlib==0.12.0.1", "omegaconf==2.4.0", "pydantic==2.14.4", "jinja2==3.1.6",
                "pyyaml==6.0.4", "flax==0.12.12", "orbax-checkpoint==0.12.8", "etils==1.15.0", "psutil==7.2.2",
                "absl-py==2.5.1", "packaging==26.4", "pathwaysutils==0.1.13"]
MIN_PYTHON = (3, 12)


def _bin(root: Path) -> Path:
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _version(exe: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([exe, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=60).stdout.split()
        return int(out[0]), int(out[1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def find_base() -> str:
    """A Python >= 3.12 to make the venv from: python3.12 / 3.13 / 3.14 on PATH, this one, one of pyenv's, else one
    uv manages."""
    for name in ("python3.12", "python3.13", "python3.14"):
        exe = shutil.which(name)
        if exe and (_version(exe) or (0, 0)) >= MIN_PYTHON:
            return exe
    if (sys.version_info[:2]) >= MIN_PYTHON:
        return sys.executable
    # pyenv's other versions (this project's machines carry 3.12 there, off PATH)
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for exe in sorted(pyenv.glob("3.1[2-9]*/bin/python3")):
        if (_version(str(exe)) or (0, 0)) >= MIN_PYTHON:
            return str(exe)
    uv = shutil.which("uv")
    if uv:  # uv downloads a standalone CPython build when none is installed
        subprocess.run([uv, "python", "install", "3.12"], check=True)
        return subprocess.run([uv, "python", "find", "3.12"], check=True, capture_output=True,
                              text=True).stdout.strip()
    raise InputError("no Python >= 3.12 found (python3.12 on PATH, or uv to fetch one); valid: --python PATH of a "
                     "Python 3.12+ interpreter")


def create(base: str | None = None) -> str:
    """Make the venv (once) and return its interpreter."""
    root = env_dir()
    if (root / ".perfmodel-ready").exists():
        return str(_bin(root))
    base = base or find_base()
    if (_version(base) or (0, 0)) < MIN_PYTHON:
        raise InputError(f"--python = {base!r} is not Python >= 3.12 (maxtext 0.2.5's Requires-Python); valid: a "
                         "Python 3.12+ interpreter")
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([base, "-m", "venv", str(root)], check=True)
    subprocess.run([str(_bin(root)), "-m", "pip", "install", "--quiet", *REQUIREMENTS], check=True)
    (root / ".perfmodel-ready").write_text(" ".join(REQUIREMENTS) + "\n")
    return str(_bin(root))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", help="a Python >= 3.12 to make the venv from (default: python3.12 on PATH, or uv)")
    print(create(ap.parse_args().python))
