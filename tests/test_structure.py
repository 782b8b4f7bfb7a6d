"""The package's shape, read from its source: one subpackage per stage of the data flow, data flowing one way, no
import cycle, small modules with names of their own (docs/architecture.md).

specs -> cost -> run / search -> export (and ingest, its inverse), execute -> calibrate -> validate, with plots and
cli on top: a module imports only its own package and the stages below it (function-level imports included), the
executor and the config readers only the specs (ingest: and the exporters' tables), the exporters' writers only the
specs.
"""

from __future__ import annotations

import ast
import fnmatch
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "perfmodel"
MAX_LINES = 450
# The stages, lowest first: a module may import its own stage and those before it.
LAYERS = ("perfmodel.errors", "perfmodel.types", "perfmodel.files", "perfmodel.spec", "perfmodel.cost", "perfmodel.serve", "perfmodel.run",
          "perfmodel.search", "perfmodel.sweep", "perfmodel.published", "perfmodel.export", "perfmodel.ingest", "perfmodel.execute", "perfmodel.calibrate",
          "perfmodel.plots", "perfmodel.validate", "perfmodel.cli", "perfmodel.app")
LOOSE = {"__init__.py", "__main__.py", "errors.py", "types.py", "files.py"}  # the modules at the package root


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def imports(name: str, top_level_only: bool) -> set[str]:
    """perfmodel modules `name` imports (a `from X import y` of a submodule y counts as that submodule)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [(mod, a.name) for a in node.names]
        else:
            continue
        for mod, attr in targets:
            if attr and f"{mod}.{attr}" in MODULES:
                out.add(f"{mod}.{attr}")
            elif mod in MODULES:
                out.add(mod)
    return out - {name}


def layer_of(name: str) -> int:
    """The stage a module belongs to (the package root's __init__ / __main__ sit above every stage)."""
    for i, layer in reversed(list(enumerate(LAYERS))):
        if name == layer or name.startswith(layer + "."):
            return i
    return len(LAYERS)


@pytest.mark.parametrize("top_level_only", [True, False], ids=["at load", "function-level imports too"])
def test_no_import_cycle(top_level_only):
    graph = {m: imports(m, top_level_only) for m in MODULES}
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [m, n] if n in stack else [n, m, n]
                assert False, f"import cycle: {' -> '.join(cycle)}"
            if n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_data_flows_one_way():
    """No module reaches back up the flow: each imports only its own stage and the stages before it."""
    bad = []
    for m in MODULES:
        if layer_of(m) == len(LAYERS):
            continue  # perfmodel/__init__ (the public face) and __main__
        bad += [f"{m} -> {n}" for n in sorted(imports(m, top_level_only=False)) if layer_of(n) > layer_of(m)]
    assert not bad, "imports that reach back up the chain:\n" + "\n".join(bad)


@pytest.mark.parametrize("package, allowed", [
    ("perfmodel.execute", ("perfmodel.errors", "perfmodel.types", "perfmodel.files", "perfmodel.spec", "perfmodel.execute")),
    ("perfmodel.spec", ("perfmodel.errors", "perfmodel.types", "perfmodel.files", "perfmodel.spec")),
    # a framework's config read in: the specs it fills, and the exporters' tables of what each framework names
    ("perfmodel.ingest", ("perfmodel.errors", "perfmodel.types", "perfmodel.files", "perfmodel.spec", "perfmodel.export",
                          "perfmodel.ingest")),
])
def test_stages_that_read_only_the_specs(package, allowed):
    """The executor reads plan files and writes measurements: nothing of the cost model or the search."""
    for m in (m for m in MODULES if m == package or m.startswith(package + ".")):
        bad = sorted(n for n in imports(m, top_level_only=False) if not n.startswith(allowed))
        assert not bad, f"{m} imports {bad}"


def test_exporters_read_only_plan_files():
    """The per-framework writers read plan files only; re-predicting a changed plan is `export.nearest`'s."""
    writers = [m for m in MODULES if m.startswith("perfmodel.export.") and not m.startswith("perfmodel.export.checks")
               and m != "perfmodel.export.nearest"]
    assert len(writers) >= 10
    for m in writers:
        bad = sorted(n for n in imports(m, top_level_only=False)
                     if not n.startswith(("perfmodel.errors", "perfmodel.types", "perfmodel.files", "perfmodel.spec", "perfmodel.export")))
        assert not bad, f"{m} imports {bad}"


def test_search_holds_no_cost_formula():
    """search/ orders, searches and reports: every cost it compares comes from cost/ (no kernel, collective or
    memory formula of its own)."""
    for m in (m for m in MODULES if m.startswith("perfmodel.search")):
        text = MODULES[m].read_text()
        for formula in ("collective_time(", "gemm_time(", "memory_bound_time(", "group_phases(", "state_bytes(",
                        "kept_bytes("):
            assert formula not in text, f"{m} computes {formula.rstrip('(')} itself"


def test_no_torch_below_the_executor():
    """The cost model, the search and the specs never import torch (they price ~10^5 plans in numpy)."""
    for m in MODULES:
        if layer_of(m) <= LAYERS.index("perfmodel.search"):
            tree = ast.parse(MODULES[m].read_text())
            names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
            assert "torch" not in names, f"{m} imports torch"


def test_modules_are_small():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_at_most_four_loose_modules_at_the_root():
    loose = sorted(p.name for p in ROOT.glob("*.py"))
    assert set(loose) <= LOOSE, f"loose modules at perfmodel/: {loose}"


def test_every_module_name_says_one_thing():
    """No two modules share a file name (package faces and entry points aside)."""
    names = Counter(p.name for p in ROOT.rglob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not [n for n, k in names.items() if k > 1], f"file names used twice: {[n for n, k in names.items() if k > 1]}"


def test_every_stage_says_what_it_owns_and_imports():
    """Each subpackage's __init__ has a docstring saying what it holds and what it may import."""
    for init in ROOT.rglob("__init__.py"):
        if init.parent == ROOT:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert len(doc) > 150 and "import" in doc, f"{init.relative_to(ROOT.parent)}: no docstring of what it owns"


@pytest.mark.parametrize("argv, code", [
    (["--help"], "import perfmodel.cli.main, sys; sys.argv = ['perfmodel', '--help']\n"
                 "try:\n    perfmodel.cli.main.main()\nexcept SystemExit:\n    pass"),
    (["import"], "import perfmodel; perfmodel.load_model"),
    (["search"], "from perfmodel.cli.main import run; run(['search', '--model', 'llama-3-8b', '--hardware', "
                 "'dgx-h100', '--gpus', '64', '--global-batch', '256', '--seq-len', '4096', '--format', 'json'])"),
], ids=["perfmodel --help", "import perfmodel", "perfmodel search --format json"])
def test_light_commands_import_no_heavy_library(argv, code):
    """`perfmodel --help`, `import perfmodel` and a search load neither torch, matplotlib nor pandas."""
    check = code + "\nimport sys\nheavy = [m for m in ('torch', 'matplotlib', 'pandas') if m in sys.modules]\n" \
                   "assert not heavy, heavy"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_wheel_installs_every_package_and_its_data():
    """pyproject's packages list every subpackage and its package-data every file of the package that is not Python
    (a non-editable install had lacked perfmodel.ingest and perfmodel.serve, and the Bridge bases' JSON)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    setup = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {module_name(p) for p in ROOT.rglob("__init__.py")}
    assert packages <= set(setup["packages"]), f"not in pyproject's packages: {sorted(packages - set(setup['packages']))}"
    data = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    for p in data:
        home = next(d for d in p.parents if (d / "__init__.py").exists())  # the package the file ships in
        pkg = module_name(home / "__init__.py")
        rel = p.relative_to(home).as_posix()
        assert any(fnmatch.fnmatch(rel, pat) for pat in setup["package-data"].get(pkg, [])), \
            f"{p.relative_to(ROOT.parent)} is no package data of {pkg}"
