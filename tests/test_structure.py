"""The package's shape, read from its source and held to the layer table (perfmodel/layers.py): a stage per concern,
each importing only what its row allows, no import cycle, names a reader can follow, and docs drawn from the code
(docs/architecture.md).
"""

from __future__ import annotations

import ast
import fnmatch
import subprocess
import sys
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from perfmodel import layers

ROOT = Path(__file__).resolve().parents[1] / "perfmodel"
README = ROOT.parent / "README.md"
DOCS = ROOT.parent / "docs"
ARCHITECTURE = DOCS / "architecture.md"
# Past these a module or a function is worth a second look, not wrong: the test warns, it never fails.
LONG_MODULE, LONG_FUNCTION = 600, 80
MAX_SIDE_BY_SIDE = 15  # modules and subpackages in one folder: more and a reader stops scanning


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = sorted(ROOT.rglob("*.py"))
MODULES = {module_name(p): p for p in FILES}
PACKAGES = sorted(module_name(p) for p in FILES if p.name == "__init__.py")


def staged(name: str) -> bool:
    """Whether a module belongs to a stage (or a root face) of the table; the others are reported once, by
    test_every_module_has_a_stage, and left out of every other test."""
    return layers.stage_of(name) is not None


def package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def resolve(name: str, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom in module `name` reads from."""
    if not node.level:
        return node.module or ""
    package = package_of(name).split(".")
    return ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))


def imports(name: str, top_level_only: bool) -> set[str]:
    """perfmodel modules `name` imports (a `from X import y` of a submodule y counts as that submodule)."""
    tree = ast.parse(MODULES[name].read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            targets = [(resolve(name, node), a.name) for a in node.names]
        else:
            continue
        for mod, attr in targets:
            if attr and f"{mod}.{attr}" in MODULES:
                out.add(f"{mod}.{attr}")
            elif mod in MODULES:
                out.add(mod)
    return out - {name}


def test_every_module_has_a_stage():
    """Every module of perfmodel/ sits in a stage of the layer table or is one of its root faces."""
    homeless = defaultdict(list)
    for m in MODULES:
        if not staged(m):
            homeless[".".join(m.split(".")[:2])].append(m)
    assert not homeless, "modules of no stage (give them a row in perfmodel/layers.py, or move them out):\n" + \
        "\n".join(f"  {top}: {len(ms)} modules ({', '.join(sorted(ms)[:4])}{', ...' if len(ms) > 4 else ''})"
                  for top, ms in sorted(homeless.items()))


def test_the_table_is_the_package_root():
    """Every row of the table is a module or a package under perfmodel/, and every module at perfmodel/ is a row:
    the root holds the low stages (errors, types, files) and the faces (__init__, __main__, layers), nothing
    loose."""
    rows = {s.name for s in layers.STAGES + layers.ROOT}
    assert len(rows) == len(layers.STAGES) + len(layers.ROOT)
    for s in layers.STAGES + layers.ROOT:
        found = (ROOT / f"{s.name}.py").is_file() or (ROOT / s.name / "__init__.py").is_file()
        assert found, f"{s.name}: no such module or package"
    loose = sorted(p.stem for p in ROOT.glob("*.py"))
    assert set(loose) <= rows, f"modules at perfmodel/ that are no row of the table: {sorted(set(loose) - rows)}"
    for s in layers.STAGES:
        assert s.imports is None or all(layers.STAGES.index(layers.stage(n)) < layers.STAGES.index(s)
                                        for n in s.imports), f"{s.name} may import a stage above it"


def test_the_table_says_who_reads_what():
    ground = ("errors", "types", "files", "spec")
    assert layers.may_import("perfmodel.export.megatron.script") == ground
    assert layers.may_import("perfmodel.export.nearest")[-3:] == ("run", "search", "sweep")
    assert layers.may_import("perfmodel.export.checks.spread") == layers.may_import("perfmodel.export.nearest")
    assert layers.may_import("perfmodel.cost.step") == ground == layers.may_import("perfmodel.ingest.megatron.reader")
    assert layers.may_import("perfmodel.serve.batching") == (*ground, "ingest", "cost")
    assert layers.may_import("perfmodel") is None and layers.may_import("perfmodel.__main__") == ("cli",)
    assert layers.stage_of("perfmodel.no_such_stage.x") is None and layers.may_import("perfmodel.layers") == ()
    rows = {line.split()[0]: line for line in layers.diagram().splitlines() if line.startswith("  ") and line.split()}
    assert rows["spec/"].endswith("◂───────────┐") and rows["execute/"].endswith("┘")
    assert rows["cost/"].endswith("┤") and rows["export/"].endswith("writers ──┤")
    assert "─" not in rows["ingest/"]  # it reads spec, the stage right above it: no rail


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


def test_each_module_imports_what_its_row_allows():
    """Data flows one way: a module imports its own stage and the stages its row of the table names (by default
    every stage below it), function-level imports included. The narrow rows: `spec` reads only the ground,
    `ingest`, `cost`, `execute` and export's writers read only `spec` and the ground."""
    bad = []
    for m in (m for m in MODULES if staged(m)):
        own, allowed = layers.stage_of(m), layers.may_import(m)
        for n in sorted(imports(m, top_level_only=False)):
            other = layers.stage_of(n)
            if other is None or other == own or allowed is None or other.name in allowed:
                continue
            bad.append(f"{m} -> {n} ({own.name} may import: {', '.join(allowed) or 'nothing of perfmodel'})")
    assert not bad, "imports the layer table does not allow:\n" + "\n".join(bad)


def test_search_holds_no_cost_formula():
    """search/ orders, searches and reports: every cost it compares comes from cost/ (no kernel, collective or
    memory formula of its own)."""
    for m in (m for m in MODULES if m.startswith("perfmodel.search")):
        text = MODULES[m].read_text()
        for formula in ("collective_time(", "gemm_time(", "memory_bound_time(", "group_phases(", "state_bytes(",
                        "kept_bytes("):
            assert formula not in text, f"{m} computes {formula.rstrip('(')} itself"


def test_torch_only_where_the_table_allows():
    """The stages up to the search never import torch (they price ~10^5 plans in numpy)."""
    banned = [m for m in MODULES if staged(m) and not layers.stage_of(m).torch]
    assert len(banned) > 100
    for m in banned:
        tree = ast.parse(MODULES[m].read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                  if isinstance(n, ast.ImportFrom) and not n.level}
        assert "torch" not in names, f"{m} imports torch"


def test_dotted_paths_are_unique():
    """A dotted path names one file (no `x.py` beside an `x/` package), so a traceback's name says where it lives."""
    twice = [n for n, k in Counter(module_name(p) for p in FILES).items() if k > 1]
    assert not twice, f"dotted paths of two files: {twice}"


def test_long_modules_and_functions_are_named_for_reading():
    """A module over LONG_MODULE lines or a function over LONG_FUNCTION is named in pytest's warnings summary as
    worth a second look; it never fails (a long table or a long validator can be the clearest form)."""
    long = []
    functions = 0
    for m, p in MODULES.items():
        text = p.read_text()
        if (n := len(text.splitlines())) > LONG_MODULE:
            long.append(f"{m}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions += 1
                if (n := node.end_lineno - node.lineno + 1) > LONG_FUNCTION:
                    long.append(f"{m}.{node.name}: {n} lines")
    assert functions > 1000
    if long:
        warnings.warn(f"worth a second read (modules over {LONG_MODULE} lines, functions over {LONG_FUNCTION}):\n  "
                      + "\n  ".join(long), stacklevel=1)


def test_folders_stay_small():
    """At most MAX_SIDE_BY_SIDE modules and subpackages side by side in any folder below perfmodel/."""
    crowded = {}
    # perfmodel/ itself holds the table's rows, no more (test_the_table_is_the_package_root)
    for folder in (p.parent for p in ROOT.rglob("__init__.py") if p.parent != ROOT):
        entries = [p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        entries += [d for d in folder.iterdir() if (d / "__init__.py").is_file()]
        if len(entries) > MAX_SIDE_BY_SIDE:
            crowded[folder.relative_to(ROOT.parent).as_posix()] = len(entries)
    assert not crowded, f"folders of more than {MAX_SIDE_BY_SIDE} modules and subpackages: {crowded}"


def private_imports(name: str) -> list[tuple[str, str]]:
    """(module, private name) pairs `name` reads from perfmodel modules: `from X import _y`, or `m._y` on a module
    it imported by name."""
    tree = ast.parse(MODULES[name].read_text())
    out, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = resolve(name, node)
            for a in node.names:
                if f"{mod}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{mod}.{a.name}"
                elif mod in MODULES and a.name.startswith("_") and not a.name.startswith("__"):
                    out.append((mod, a.name))
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in MODULES})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            out.append((aliases[node.value.id], node.attr))
    return out


def test_no_private_name_crosses_a_package():
    """A name with a leading underscore is read only inside its own package (folder): what another package needs
    is public, or lives lower down where both can read it."""
    bad = sorted({f"{m} reads {mod}.{attr}" for m in MODULES if staged(m)
                  for mod, attr in private_imports(m) if package_of(mod) != package_of(m)})
    assert not bad, "private names read across packages:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_docstring_names_its_modules(package):
    """Each package's docstring is a newcomer's map of its folder: it names every module and subpackage in it in
    backticks and says what the package may import."""
    if not staged(package) and package != "perfmodel":
        pytest.skip("of no stage: test_every_module_has_a_stage reports it")
    folder = MODULES[package].parent
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text())) or ""
    names = [p.stem for p in folder.glob("*.py") if p.name != "__init__.py"]
    names += [d.name for d in folder.iterdir() if (d / "__init__.py").is_file()]
    missing = sorted(n for n in names if staged(f"{package}.{n}") and f"`{n}`" not in doc)
    assert not missing, f"{package}'s docstring does not name {missing}"
    assert "import" in doc, f"{package}'s docstring does not say what it may import"


def test_architecture_doc_is_rendered_from_the_table():
    """docs/architecture.md's diagram and package table are what perfmodel.layers renders now."""
    text = ARCHITECTURE.read_text()
    assert layers.render(text) == text, "docs/architecture.md is stale: run python -m perfmodel.layers"


def test_the_architecture_generator_rewrites_a_stale_page(tmp_path):
    page = tmp_path / "architecture.md"
    page.write_text(ARCHITECTURE.read_text().replace("| `cost/` |", "| `costs/` |"))
    assert layers.main(["--doc", str(page), "--check"]) == 1
    assert layers.main(["--doc", str(page)]) == 0
    assert page.read_text() == ARCHITECTURE.read_text()
    assert layers.main(["--doc", str(page), "--check"]) == 0


def test_every_doc_is_linked_from_the_readme():
    readme = README.read_text()
    unlinked = sorted(p.name for p in DOCS.glob("*.md") if f"](docs/{p.name})" not in readme)
    assert not unlinked, f"docs/ pages README.md does not link: {unlinked}"


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
    missing = sorted(set(PACKAGES) - set(setup["packages"]))
    assert not missing, f"not in pyproject's packages: {missing}"
    data = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    for p in data:
        home = next(d for d in p.parents if (d / "__init__.py").exists())  # the package the file ships in
        pkg = module_name(home / "__init__.py")
        rel = p.relative_to(home).as_posix()
        assert any(fnmatch.fnmatch(rel, pat) for pat in setup["package-data"].get(pkg, [])), \
            f"{p.relative_to(ROOT.parent)} is no package data of {pkg}"
