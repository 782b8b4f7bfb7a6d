"""Hypothesis strategies that turn a valid input document (a parsed YAML/JSON mapping) into invalid files, and the
check that the tool refuses each one by the project's bad-input rule (tests/test_fuzz_files.py; the CLI flags'
fuzzing has its own helpers, tests/fuzz_cli_inputs.py).

A variant is (content bytes or a special path, the names the error must mention). Document mutations change one
node of the base: a wrong type or an out-of-range number at any key path, a missing key, an unknown key; file
mutations damage the file itself: truncation, random bytes, an empty file, a directory, no file at all, deep
nesting, a list or a scalar at the top level.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from hypothesis import strategies as st

INF, NAN = float("inf"), float("nan")
# Values that are out of range for a number field, or of the wrong type for it.
BAD_NUMBERS = [0, -1, -0.5, 0.5, 1e308, -1e308, 10**30, -(10**30), 2**64, NAN, INF, -INF]
WRONG_TYPES = ["8", "", "nan", [], [1], {}, {"k": 1}, True, False, None]
BAD_BOOLS = [0, 1, 2.5, "true", "yes", None, [], {}]
BAD_STRINGS = [0, 1.5, -1, True, None, [], {}, ["x"], "no-such-value", "two\nlines"]
BAD_NULLS = [-1, 0, 0.5, 10**30, NAN, INF, "x", True, [], {}]
BAD_LISTS = [0, "x", None, True, {}, [], [None], [-1], ["x"]]
BAD_DICTS = [0, "x", None, True, [], ["x"], {}]
# Unknown keys: mostly plain names, some with quotes, unicode and line breaks (a message must stay one line).
KEY_TEXT = st.one_of(st.from_regex(r"\A[a-z][a-z0-9_]{0,12}\Z"),
                     st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8))


def bad_values(value) -> list:
    """Replacements of `value` that are invalid for a field holding it (by its type)."""
    if isinstance(value, bool):
        return BAD_BOOLS
    if isinstance(value, (int, float)):
        return BAD_NUMBERS + WRONG_TYPES
    if isinstance(value, str):
        return BAD_STRINGS
    if value is None:
        return BAD_NULLS
    if isinstance(value, list):
        return BAD_LISTS + ([value + [-1], value + ["x"], value[:-1]] if value else [])
    return BAD_DICTS


def node_paths(doc, prefix: tuple = ()) -> list[tuple]:
    """Every key path below `doc` (dict keys and list indices), parents before children."""
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        out.append(prefix + (k,))
        out += node_paths(v, prefix + (k,))
    return out


def dict_paths(doc) -> list[tuple]:
    """Paths of the mappings in `doc` (the root is ())."""
    return [()] + [p for p in node_paths(doc) if isinstance(get_at(doc, p), dict)]


def get_at(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def leaf_name(path: tuple) -> str:
    """The field a path ends in: its last key (list indices belong to the key holding the list)."""
    names = [k for k in path if isinstance(k, str)]
    return names[-1] if names else "(root)"


def spellings(name: str) -> list[str]:
    """How a message may write a name: as is, or escaped as repr() writes it."""
    return [name, repr(name)[1:-1], json.dumps(name)[1:-1]]


@dataclass
class Variant:
    """One invalid input: file content (None: `special` says what stands at the path) and what the error must
    name (any of `names`; the file path is added by the check where `path_named`)."""

    what: str
    content: bytes | None = None
    special: str = ""  # "directory" | "missing"
    names: list[str] = field(default_factory=list)
    path_named: bool = False
    wrong_type: bool = False  # a value of another JSON type than the base's (never valid: no silent coercion)


def json_type(value) -> str:
    """The JSON type of a value: null, boolean, number, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, (int, float)) else type(value).__name__


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump(doc, fmt: str) -> bytes:
    if fmt == "json":
        return (json.dumps(doc, indent=2) + "\n").encode()
    # libyaml's emitter where PyYAML has it (the same text as SafeDumper's, ~10x faster: a fifth of a fuzz
    # test's time went to dumping); non-ASCII escaped: a key reads back as written
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False).encode()


@st.composite
def doc_mutations(draw, base: dict, fmt: str, paths: list[tuple] | None = None, extra_keys: bool = True):
    """One node of `base` changed: replaced by an invalid value for its type, deleted, or a key added (at
    `paths` only, where given: the keys a loader reads)."""
    paths = paths if paths is not None else node_paths(base)
    kinds = ["replace", "replace", "replace", "delete"] + (["extra"] if extra_keys else [])
    kind = draw(st.sampled_from(kinds))
    doc = copy.deepcopy(base)
    if kind == "extra":
        where = draw(st.sampled_from(dict_paths(base)))
        node = get_at(doc, where)
        # YAML keys may be numbers, null or bools (JSON writes them as strings)
        key = draw(st.one_of(KEY_TEXT, st.sampled_from([1, 2.5, None, True]))
                   .filter(lambda k: k not in node and k != "<<" and str(k).lower() not in map(str.lower, node)))
        node[key] = draw(st.sampled_from([1, "x", None, [], {}]))
        names = spellings(key) if isinstance(key, str) else [repr(key), json.dumps(key)]
        return Variant(f"extra key {'.'.join(map(str, where + (key,)))!r}", dump(doc, fmt), names=names)
    deletable = [p for p in paths if isinstance(p[-1], str)]
    path = draw(st.sampled_from(deletable if kind == "delete" else paths))
    parent = get_at(doc, path[:-1])
    if kind == "delete":
        del parent[path[-1]]
        return Variant(f"delete {'.'.join(map(str, path))}", dump(doc, fmt), names=spellings(path[-1]))
    old = get_at(base, path)
    value = draw(st.sampled_from(bad_values(old)))
    parent[path[-1]] = value
    return Variant(f"{'.'.join(map(str, path))} = {value!r}", dump(doc, fmt), names=spellings(leaf_name(path)),
                   wrong_type=value is not None and old is not None and json_type(value) != json_type(old))


@st.composite
def file_mutations(draw, base: dict, fmt: str):
    """The file itself damaged: truncated, bytes overwritten, random bytes, empty, a directory, absent, nested too
    deep, or a list or scalar at the top level. The error must name the file."""
    text = dump(base, fmt)
    kind = draw(st.sampled_from(["truncate", "truncate", "corrupt", "binary", "empty", "directory", "missing",
                                 "nested", "top-level"]))
    if kind == "truncate":
        cut = draw(st.integers(0, len(text) - 1))
        return Variant(f"truncated at byte {cut}", text[:cut], path_named=True)
    if kind == "corrupt":
        at = draw(st.integers(0, len(text) - 1))
        junk = draw(st.binary(min_size=1, max_size=16))
        return Variant(f"bytes {at}.. overwritten by {junk!r}", text[:at] + junk + text[at + len(junk):],
                       path_named=True)
    if kind == "binary":
        return Variant("random bytes", draw(st.binary(min_size=1, max_size=64)), path_named=True)
    if kind == "empty":
        return Variant("empty file", b"", path_named=True)
    if kind in ("directory", "missing"):
        return Variant(kind, special=kind, path_named=True)
    if kind == "nested":  # lists or mappings nested deeper than any schema (a parser that recurses may crash)
        n = draw(st.sampled_from([100, 1000, 100_000]))
        deep = ["[" * n + "]" * n, '{"a": ' * n + "1" + "}" * n]
        if fmt == "yaml":
            deep += ["- " * n + "x", "a:\n" + "".join(" " * i + "- \n" for i in range(1, min(n, 300)))]
        return Variant(f"nested {n} deep", draw(st.sampled_from(deep)).encode(), path_named=True)
    top = draw(st.sampled_from([[base], [], 5, "text", None, 1.5, True]))
    return Variant(f"top level {type(top).__name__}", dump(top, fmt), path_named=True)


def variants(base: dict, fmt: str, paths: list[tuple] | None = None, extra_keys: bool = True):
    """Document mutations (mostly) and file mutations of `base`."""
    return st.one_of(doc_mutations(base, fmt, paths, extra_keys), doc_mutations(base, fmt, paths, extra_keys),
                     doc_mutations(base, fmt, paths, extra_keys), file_mutations(base, fmt))


def place(v: Variant, path: Path) -> Path:
    """Put the variant at `path` (its parent exists and is empty of it)."""
    if v.special == "directory":
        path.mkdir()
    elif v.special != "missing":
        path.write_bytes(v.content)
    return path


def snapshot(root: Path) -> dict:
    """Every file and directory under root with its size and modification time."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st_ = p.stat()
            out[str(p)] = (p.is_dir(), st_.st_size, st_.st_mtime_ns)
    return out


@dataclass
class Outcome:
    rc: int | None
    out: str
    err: str
    error: BaseException | None
    warned: list[str]


def call(fn, *args) -> Outcome:
    """Run fn(*args) capturing stdout, stderr, warnings and any exception (as the user would see them)."""
    out, err = io.StringIO(), io.StringIO()
    rc, error = None, None
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        warnings.simplefilter("always")
        try:
            rc = fn(*args)
        except BaseException as e:  # noqa: BLE001 - the check reports whatever escaped
            error = e
    return Outcome(rc, out.getvalue(), err.getvalue(), error, [f"{w.category.__name__}: {w.message}" for w in caught])


def refusal_problems(o: Outcome, names: list[str]) -> list[str]:
    """What is wrong with a CLI refusal (empty: it is right): exit code 2, one line 'error: ...' on stderr, no
    traceback, no warning, and the message names one of `names`."""
    problems = []
    if o.error is not None:
        problems.append(f"raised {type(o.error).__name__}: {o.error}")
    if o.rc != 2:
        problems.append(f"exit code {o.rc}, not 2")
    lines = o.err.splitlines()
    if len(lines) != 1 or not lines[0].startswith("error: ") or len(lines[0]) <= len("error: "):
        problems.append(f"stderr is not one 'error: ...' line: {o.err!r}")
    if "Traceback" in o.err + o.out:
        problems.append("a traceback was printed")
    if o.warned:
        problems.append(f"warnings: {o.warned}")
    if names and not any(n in o.err for n in names):
        problems.append(f"the message names none of {names[:3]}: {o.err.strip()!r}")
    return problems


def finite_json_numbers(text: str) -> bool:
    """Whether every number in a JSON document is finite (a prediction of NaN or inf seconds is no answer)."""
    bad = []

    def seen(x):
        if not math.isfinite(float(x)):
            bad.append(x)
        return float(x)
    json.loads(text, parse_float=seen, parse_constant=seen)
    return not bad
