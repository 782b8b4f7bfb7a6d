"""The layer table: every stage of perfmodel, lowest first, with what it holds and what it may import.

A module imports its own stage and the stages its row allows: by default every stage below it, function-level
imports included. The table has three readers: `tests/test_structure.py` holds the source to it,
docs/architecture.md's diagram and package table are rendered from it, and a newcomer reads it first.

    python -m perfmodel.layers           # rewrite the generated blocks of docs/architecture.md
    python -m perfmodel.layers --check   # exit 1 if a block differs from what the table and the code give now

Run from the checkout's root (or pass --doc): the package renders the page, the caller says where it is.

This module imports nothing of perfmodel, so that reading the table loads nothing else.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
DOC = Path("docs") / "architecture.md"  # the working directory's: an installed package has no docs/ of its own


@dataclass(frozen=True)
class Stage:
    name: str  # a module or a package directly under perfmodel/
    purpose: str  # one line: what it holds
    imports: tuple[str, ...] | None = None  # the stages it may import besides itself; None: every stage below it
    torch: bool = True  # whether it may import torch
    wider: tuple[str, ...] = ()  # its modules (dotted under perfmodel.) that may import every stage below it


GROUND = ("errors", "types", "files")  # the root modules every stage may read

STAGES = (
    Stage("errors", "how a command ends in error: one-line input errors, a failed or stopped run, stop signals",
          imports=(), torch=False),
    Stage("types", "the pydantic `Schema` base and the field types that refuse silent coercion",
          imports=("errors",), torch=False),
    Stage("files", "user files read with one-line errors, outputs written atomically and kept portable",
          imports=("errors", "types"), torch=False),
    Stage("spec", "what a user describes, as schemas and catalogues: model, hardware, host, stack, plan, serving, "
                  "results, measurements", imports=GROUND, torch=False),
    Stage("ingest", "a framework's own config read as data into a model and a plan, every key accounted for",
          imports=(*GROUND, "spec"), torch=False),
    Stage("cost", "the one cost model of a training step: kernels, collectives, memory, pipeline, host; one plan "
                  "or ~10^5 as columns", imports=(*GROUND, "spec"), torch=False),
    Stage("serve", "serving (inference) priced with the same kernels and collectives: KV cache, step time, "
                   "batching, request-level simulation", torch=False),
    Stage("run", "the whole training run of one plan: days, dollars, energy, failures, checkpoints", torch=False),
    Stage("search", "every layout of a job ranked, pipeline stage splits, per-operator sharding (PaSE), what-ifs",
          torch=False),
    Stage("sweep", "design-space sweeps: many systems x workloads, each searched, on every core or Ray"),
    Stage("export", "a plan file as one framework release's config, and that release's own checks",
          imports=(*GROUND, "spec"), wider=("export.nearest", "export.checks")),
    Stage("execute", "plan files run for real under torchrun and measured; checkpoints saved and resumed",
          imports=(*GROUND, "spec")),
    Stage("calibrate", "measurements back into a spec: microbenchmarks, a user's runs and logs, profiler traces"),
    Stage("plots", "figures of every answer (matplotlib, headless)"),
    Stage("validate", "predicted against measured: built-in sweeps run for real, metrics, checkpoint checks"),
    Stage("cli", "the `perfmodel` command: parse, call the Python API, format; one module per command"),
    Stage("app", "`perfmodel app`: the planner page, its forms read off the CLI's parsers"),
)

# The modules at perfmodel/ that are no stage: the package's faces.
ROOT = (
    Stage("__init__", "the public face: `estimate`, `load_model`, `load_hardware`, `Plan`, `Estimate`, "
                      "`ModelConfig`, `System`, `InputError`, read lazily"),
    Stage("__main__", "`python -m perfmodel`: the `perfmodel` command", imports=("cli",)),
    Stage("layers", "this table, and the diagram and table of docs/architecture.md rendered from it", imports=()),
)

BEGIN = "<!-- BEGIN GENERATED: {} (python -m perfmodel.layers) -->"
END = "<!-- END GENERATED -->"


def stage(name: str) -> Stage:
    return next(s for s in STAGES + ROOT if s.name == name)


def stage_of(module: str) -> Stage | None:
    """The stage (or root face) a dotted module name belongs to; None for a module of no stage."""
    parts = module.split(".") + ["__init__"]  # perfmodel itself is its __init__
    if parts[0] != "perfmodel":
        return None
    return next((s for s in STAGES + ROOT if s.name == parts[1]), None)


def may_import(module: str) -> tuple[str, ...] | None:
    """The stages `module` may import besides its own (None: any stage, the lazy public face)."""
    own = stage_of(module)
    if own is None:
        return ()
    if own in ROOT:
        return own.imports
    below = tuple(s.name for s in STAGES[:STAGES.index(own)])
    short = module.removeprefix("perfmodel.")
    if own.imports is None or any(short == w or short.startswith(w + ".") for w in own.wider):
        return below
    return own.imports


def is_module(s: Stage) -> bool:
    return (PACKAGE / f"{s.name}.py").exists()


def path_of(s: Stage) -> str:
    return f"{s.name}.py" if is_module(s) else f"{s.name}/"


def summary(init: Path) -> str:
    """The first paragraph of a package's docstring, on one line, as a table cell."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split()).removesuffix(".").replace("|", "\\|")


def reads(s: Stage) -> str:
    """What a stage may import, in words."""
    if s.imports is None:
        text = "every stage below"
    elif not s.imports:
        text = "nothing of perfmodel"
    else:
        text = ", ".join(f"`{n}`" for n in s.imports)
    if s.wider:
        text += f" (`{'`, `'.join(w.removeprefix(s.name + '.') for w in s.wider)}`: every stage below)"
    return text + ("" if s.torch else "; no torch")


def diagram() -> str:
    """The stages in the table's order, lowest at the top, each read by those under it. A rail joins a stage that
    reads less than everything above it to the highest stage it may read; a dashed line marks where torch begins."""
    names = [path_of(s) + (" writers" if s.wider else "") for s in STAGES]
    rails: dict[int, list[int]] = {}  # the highest stage a narrowed stage reads -> the narrowed stages
    for i, s in enumerate(STAGES):
        if s.imports:
            top = max(STAGES.index(stage(n)) for n in s.imports)
            if top < i - 1:  # it skips the stages in between
                rails.setdefault(top, []).append(i)
    left = 2 + max(map(len, names)) + 3  # the first rail's column
    grid = [[*f"  {n}".ljust(left + 4 * len(rails))] for n in names]
    spans = []  # (column, first row, last row) of each rail
    for k, (top, sources) in enumerate(sorted(rails.items(), key=lambda kv: -max(kv[1]))):
        col, end = left + 4 * k, max(sources)
        spans.append((col, top, end))
        for row in range(top, end + 1):
            grid[row][col] = "┐" if row == top else "┘" if row == end else "┤" if row in sources else "│"
        for row in (top, *sources):
            start = 2 + len(names[row]) + 1
            grid[row][start] = "◂" if row == top else "─"
            for c in range(start + 1, col):
                grid[row][c] = "┼" if grid[row][c] == "│" else "─"
    torch_from = next(i for i, s in enumerate(STAGES) if s.torch)
    out = []
    for i, row in enumerate(grid):
        out.append("".join(row).rstrip())
        if i + 1 == len(grid):
            break
        dashed = i + 1 == torch_from
        gap = [*("  " + "┄" * (len(row) - 2) if dashed else "    │".ljust(len(row)))]
        for col, first, last in spans:
            if first <= i < last:
                gap[col] = "│"
        out.append("".join(gap).rstrip() + (" torch may be imported from here down" if dashed else ""))
    return "```\n" + "\n".join(out) + "\n```\n"


def table() -> str:
    """One line per package: the root faces, then every stage and its subpackages, with what each may import."""
    lines = ["| package | holds | may import |", "|---|---|---|"]
    lines += [f"| `{s.name}.py` | {s.purpose} | {'every stage (lazily)' if s.imports is None else reads(s)} |"
              for s in ROOT]
    for s in STAGES:
        lines.append(f"| `{path_of(s)}` | {s.purpose} | {reads(s)} |")
        if not is_module(s):
            for init in sorted((PACKAGE / s.name).rglob("__init__.py")):
                if init.parent != PACKAGE / s.name:
                    lines.append(f"| `{init.parent.relative_to(PACKAGE).as_posix()}/` | {summary(init)} | |")
    return "\n".join(lines) + "\n"


BLOCKS = {"diagram": diagram, "packages": table}


def render(text: str) -> str:
    """`text` (docs/architecture.md) with every generated block replaced by what the table and the code give."""
    for name, make in BLOCKS.items():
        begin = BEGIN.format(name)
        if begin not in text:
            raise ValueError(f"docs/architecture.md has no block {begin!r}")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(END, 1)
        text = f"{head}{begin}\n{make()}{END}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfmodel.layers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/architecture.md is stale")
    parser.add_argument("--doc", type=Path, default=DOC, help="the page to rewrite (default: %(default)s)")
    args = parser.parse_args(argv)
    text = args.doc.read_text()
    new = render(text)
    if args.check:
        if new != text:
            print(f"{args.doc} is stale: run python -m perfmodel.layers", file=sys.stderr)
            return 1
        return 0
    if new != text:
        args.doc.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
