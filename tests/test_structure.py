"""The package's shape, read from its source: data flows one way, no import cycle, small modules.

specs -> model + plan -> estimate (cost/) -> search -> plan file -> executor -> measurement -> calibration:
the cost model imports nothing downstream of it (search, execute, calibrate, validate, export, plots, the CLI),
the operator facts and plan-file schema nothing of the cost model (the executor reads plan files without it),
and the executor nothing of the cost model or the search.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "perfmodel"
MAX_LINES = 450


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


def test_no_import_cycle_at_load():
    graph = {m: imports(m, top_level_only=True) for m in MODULES}
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                # a package __init__ re-exporting what its own modules define is the one cycle Python resolves
                cycle = stack[stack.index(n):] + [m, n]
                assert False, f"import cycle: {' -> '.join(cycle)}"
            if n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


DOWNSTREAM_OF_COST = ("perfmodel.search", "perfmodel.execute", "perfmodel.calibrate", "perfmodel.validat",
                      "perfmodel.export", "perfmodel.plots", "perfmodel.cli", "perfmodel.whatif",
                      "perfmodel.launch", "perfmodel.planfile")


@pytest.mark.parametrize("package, forbidden", [
    ("perfmodel.cost", DOWNSTREAM_OF_COST),
    ("perfmodel.operators", ("perfmodel.cost", *DOWNSTREAM_OF_COST)),
    ("perfmodel.planfile", ("perfmodel.cost", "perfmodel.search", "perfmodel.execute", "perfmodel.export")),
    ("perfmodel.execute", ("perfmodel.cost", "perfmodel.search", "perfmodel.calibrate", "perfmodel.export")),
    ("perfmodel.export", ("perfmodel.cost", "perfmodel.search", "perfmodel.execute")),
])
def test_data_flows_one_way(package, forbidden):
    for m in (m for m in MODULES if m == package or m.startswith(package + ".")):
        bad = sorted(n for n in imports(m, top_level_only=False) if n.startswith(forbidden))
        assert not bad, f"{m} imports {bad}: that reaches back up the chain (specs -> cost -> search -> plan file)"


def test_search_holds_no_cost_formula():
    """search/ orders, searches and reports: every cost it compares comes from cost/ (no kernel, collective or
    memory formula of its own)."""
    for m in (m for m in MODULES if m.startswith("perfmodel.search")):
        text = MODULES[m].read_text()
        for formula in ("collective_time(", "gemm_time(", "memory_bound_time(", "group_phases(", "state_bytes(",
                        "kept_bytes("):
            assert formula not in text, f"{m} computes {formula.rstrip('(')} itself"


def test_modules_are_small():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
