"""Reading a framework's config files as data: argument lists as --key value pairs, Python config modules as the
syntax tree of their calls and assignments (never executed), YAML, TOML and JSON, each failure one line naming the
file. Launch scripts are read by perfmodel.ingest.shell.script.

Shared by the readers of perfmodel.ingest; nothing here knows a framework's keys.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..files import read_mapping
from .reading import NotRead

try:  # Python 3.11+; tomli is the same parser, packaged for 3.10
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MAX_BYTES = 8 * 2**20  # a config is kilobytes; a file this large is not one


def read_text(path: Path, what: str) -> str:
    """The text of a config file, or one line saying why it cannot be read."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise InputError(f"{what} {str(path)!r}: {path.stat().st_size} bytes is not a config file; valid: a file "
                             f"under {MAX_BYTES // 2**20} MiB")
        return path.read_text()
    except FileNotFoundError:
        raise InputError(f"{what} {str(path)!r}: file does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{what} {str(path)!r}: is a folder; valid: a config file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{what} {str(path)!r}: cannot read ({err.__class__.__name__})") from None


def read_toml(path: Path, what: str) -> dict:
    try:
        return tomllib.loads(read_text(path, what))
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{what} {str(path)!r}: malformed TOML: {err}") from None


def read_json(path: Path, what: str) -> dict:
    text = read_text(path, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{what} {str(path)!r}: malformed JSON at line {err.lineno}, column {err.colno}: "
                         f"{err.msg}") from None
    if not isinstance(data, dict):
        raise InputError(f"{what} {str(path)!r}: expected a JSON object, got {type(data).__name__}")
    return data


def read_yaml(path: Path, what: str) -> dict:
    read_text(path, what)  # the size and readability checks
    return read_mapping(path, f"{what} {str(path)!r}")


# ---- argument lists (the shell reader is perfmodel.ingest.shell.script) ------------------------------------


def number(value, stated: str, kind: type = int, low: int = 0):
    """A config value a key needs as a finite number (`kind` int: a whole one) of at least `low`, as `kind`; else one
    line, `stated` naming the key and value as the reader writes them (JSON's 1e400 is inf, a bool is no number)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= low
    if ok and isinstance(value, float):
        ok = math.isfinite(value) and (kind is float or value.is_integer())
    if ok and kind is float and isinstance(value, int):
        ok = abs(value) < 2**1023  # a float holds it
    if not ok:
        raise InputError(f"{stated} is not a {'whole ' if kind is int else ''}number >= {low}; valid: a "
                         f"{'count' if kind is int else 'number'} of {low} or more")
    return kind(value)


def options(words: list[str], nargs=()) -> list[tuple[str, str | None]]:
    """`--name value`, `--name=value` and bare `--flag` pairs of an argument list, in order (other words skipped);
    an option of `nargs` takes every word up to the next option, joined by spaces (Megatron's nargs='+')."""
    def is_option(w: str) -> bool:
        return w.startswith("--") and len(w) > 2

    out = []
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if not is_option(w):
            continue
        if "=" in w:
            out.append(tuple(w.split("=", 1)))
            continue
        vals = []
        while i < len(words) and not is_option(words[i]):
            vals.append(words[i])
            i += 1
            if w not in nargs:
                break
        out.append((w, " ".join(vals) if vals else None))
    return out


# ---- Python, as data -----------------------------------------------------------------------------------------

# a Python expression a config module computes is kept as its text, named as not read (perfmodel.ingest.reading);
NOT_LITERAL = "computed by the module: not a literal"


def literal(node: ast.AST, names: dict[str, Any] | None = None) -> Any:
    """The value of a literal expression (numbers, strings, lists, dicts, tuples, True/False/None, unary minus,
    arithmetic on known numbers, names the module assigned literals to); anything else a `NotRead`."""
    names = names or {}
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [literal(e, names) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {literal(k, names): literal(v, names) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = literal(node.operand, names)
        return -v if isinstance(v, (int, float)) else NotRead(ast.unparse(node), NOT_LITERAL)
    if isinstance(node, ast.BinOp):
        a, b = literal(node.left, names), literal(node.right, names)
        ops = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y,
               ast.FloorDiv: lambda x, y: x // y, ast.Pow: lambda x, y: x ** y}
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 2**40 for v in (a, b))
        small = not isinstance(node.op, ast.Pow) or (isinstance(b, int) and 0 <= b < 64)  # 2**10, never 10**9**9
        if type(node.op) in ops and numbers and small and not (isinstance(node.op, ast.FloorDiv) and b == 0):
            return ops[type(node.op)](a, b)
        return NotRead(ast.unparse(node), NOT_LITERAL)
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    return NotRead(ast.unparse(node), NOT_LITERAL)


def parse_python(path: Path, what: str) -> ast.Module:
    """The syntax tree of a Python config module (parsed, never run)."""
    text = read_text(path, what)
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as err:
        raise InputError(f"{what} {str(path)!r}: not Python (line {err.lineno}: {err.msg})") from None


def call_name(node: ast.AST) -> str:
    """The dotted name a call calls: `Trainer.Config(...)` -> 'Trainer.Config'."""
    f = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(f)


def module_names(tree: ast.Module) -> dict[str, Any]:
    """Module-level names assigned literal values (`SEQ = 8192`), which calls further down may use."""
    names: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            v = literal(stmt.value, names)
            if not isinstance(v, NotRead):
                names[stmt.targets[0].id] = v
    return names


def functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's top-level functions by name (config registries and recipe modules define one per config)."""
    return {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
