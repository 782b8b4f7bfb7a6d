"""Fixtures shared by several test modules."""

import os
import tempfile
from pathlib import Path

import pytest

# Kernel grids built from tables are cached on disk (perfmodel.spec.grid_cache.grid_cache_dir): the suite keeps
# its own cache, shared by its workers and the CLI processes it starts, and leaves the user's home alone.
os.environ.setdefault("PERFMODEL_CACHE_DIR", str(Path(tempfile.gettempdir()) / "perfmodel-tests-cache"))


@pytest.fixture
def no_host(monkeypatch):
    """Every shipped stack profile without its host rates (spec.stack.Stack.host = None): for tests of the device's
    side of the model (pipeline bubbles, overlap windows, kernel rates) on plans the reference host would bound,
    whose hand-worked formulas leave the host out (cost.launch_queue is tested in tests/test_stacks.py)."""
    from perfmodel.spec import stack

    for name in stack.STACKS:
        monkeypatch.setitem(stack._LOADED, name, stack.load_stack(name).model_copy(update={"host": None}))
