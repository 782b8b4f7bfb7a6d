"""Reading user files (YAML or JSON mappings) with one-line errors, writing outputs atomically, and what keeps a
written file portable: references relative to it (`relative_ref`), machine paths out of logs (`portable_text`)."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

import yaml

from .errors import InputError

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: ~10x faster
# Deepest nesting of mappings and lists a file may have (specs nest 4 deep). Deeper documents are refused before
# they are built: PyYAML's C composer recurses without a limit (a crash at ~20000 levels), json a RecursionError.
MAX_DEPTH = 64
_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _yaml_depth(text: str, where: str) -> None:
    """Refuse YAML nested deeper than MAX_DEPTH, from the parser's events (a state machine: no recursion)."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                raise InputError(f"{where}: nested more than {MAX_DEPTH} levels deep at line {mark.line + 1}, "
                                 f"column {mark.column + 1}; valid: a mapping of fields as the schema nests them")
        elif isinstance(event, _CLOSE):
            depth -= 1


def _deep(where: str) -> InputError:
    return InputError(f"{where}: nested more than {MAX_DEPTH} levels deep; valid: a mapping of fields as the schema "
                      "nests them")


_NO_KEY = object()


def _check_tree(data, where: str):
    """Refuse data nested deeper than MAX_DEPTH (YAML aliases can nest what the events do not show; each shared
    node is walked once, and a cycle is as deep as it goes), or a mapping key that is not a string (YAML reads
    `1:`, `null:`, `yes:` or a date as a number, None, a bool or a date; a field name is text)."""
    todo, seen = [(data, 1)], set()
    while todo:
        node, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise _deep(where)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            bad = next((k for k in node if not isinstance(k, str)), _NO_KEY)
            if bad is not _NO_KEY:
                raise InputError(f"{where}: key {bad!r} ({type(bad).__name__}) is not a string; valid: field names "
                                 f"(quote a key that YAML reads otherwise: \"{bad}\": ...)")
        todo += [(v, depth + 1) for v in (node.values() if isinstance(node, dict) else node)
                 if isinstance(v, (dict, list))]
    return data


def _json(text: str, where: str):
    """json.loads, with a document nested deeper than MAX_DEPTH refused in one line."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise _deep(where) from None
    return _check_tree(data, where) if isinstance(data, (dict, list)) else data


def looks_like_path(spec: str) -> bool:
    """A spec names a file if it has a data-file suffix or exists on disk; otherwise it is a preset name."""
    return spec.endswith((".yaml", ".yml", ".json")) or Path(spec).is_file()


def read_mapping(path, where: str | None = None) -> dict:
    """Parse a YAML or JSON file (by suffix; YAML otherwise) into a dict, or raise InputError saying why."""
    where = where or str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{where}: file does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{where}: cannot read ({err.__class__.__name__}: {err})") from None
    if str(path).endswith(".json"):
        try:
            data = _json(text, where)
        except json.JSONDecodeError as err:
            raise InputError(f"{where}: malformed JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
    else:
        try:
            _yaml_depth(text, where)
            data = yaml.load(text, Loader=_LOADER)
            if isinstance(data, (dict, list)):
                _check_tree(data, where)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise InputError(f"{where}: malformed YAML{at}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    return data


def read_json_object(path, what: str) -> dict:
    """A JSON file holding one object (plan, measurement and calibration files), or InputError in one line:
    '<what> '<path>' does not exist / cannot be read / is not valid JSON / must hold a JSON object'."""
    path = Path(path)
    try:
        data = _json(path.read_text(), f"{what} {str(path)!r}")
    except FileNotFoundError:
        raise InputError(f"{what} {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{what} {str(path)!r} cannot be read: {err}") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{what} {str(path)!r} is not valid JSON: line {err.lineno}: {err.msg}") from None
    if not isinstance(data, dict):
        raise InputError(f"{what} {str(path)!r} must hold a JSON object, got {type(data).__name__}")
    return data


def check_suffix(path, what: str, suffix: str) -> None:
    """Refuse an output whose name does not end in `suffix` (e.g. ".png"), naming the flag."""
    if not str(path).lower().endswith(suffix):
        raise InputError(f"{what} {str(path)!r}: the file is {suffix[1:].upper()}; give a name ending in {suffix}")


def check_output(path, what: str, suffix: str) -> Path:
    """Refuse, before any work, an output named without `suffix` (checked on the name as given: Path("")
    reads ".") or that cannot be written."""
    check_suffix(path, what, suffix)
    return check_writable(path, what)


def check_writable(path, what: str) -> Path:
    """Refuse an output path that cannot be written, before any work is done (one line naming the flag)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{what} {str(path)!r} is a directory; give a file name such as {path / 'out'}")
    if not path.parent.is_dir():
        raise InputError(f"{what} {str(path)!r}: directory {str(path.parent)!r} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise InputError(f"{what} {str(path)!r}: directory {str(path.parent)!r} is not writable")
    return path


def check_creatable(path, what: str) -> Path:
    """As `check_writable`, but a folder that does not exist yet is fine where the nearest existing one above it is
    a writable directory (`make_parents` creates it once the run is known to go ahead)."""
    path = Path(path)
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder == path.parent or not folder.is_dir():
        return check_writable(path, what)
    if not os.access(folder, os.W_OK):
        raise InputError(f"{what} {str(path)!r}: directory {str(folder)!r} is not writable")
    return path


def make_parents(paths) -> None:
    """Create the folders of `paths` (outputs passed `check_creatable`)."""
    for p in paths:
        Path(p).parent.mkdir(parents=True, exist_ok=True)


def write_atomic(path, write, what: str = "output") -> Path:
    """Call write(temporary_path) and rename the result onto `path`: never a half-written file at `path`."""
    path = check_writable(path, what)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file (mkstemp makes it private)
        os.replace(tmp, path)
    except OSError as err:  # e.g. a full disk: named by the file the user asked for, not the temporary
        Path(tmp).unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


RUNS_DIR = Path("perfmodel-runs")  # where `perfmodel execute` and `validate` write by default (.gitignore covers it)


def relative_ref(target, from_file) -> str:
    """`target` as a file written at `from_file` names it: relative to `from_file`'s folder, with '/' (the file
    name alone where they lie side by side), so a results folder moved or shared whole keeps its links and no
    machine's directory layout travels with it."""
    rel = os.path.relpath(os.path.abspath(target), os.path.dirname(os.path.abspath(from_file)))
    return Path(rel).as_posix()


def portable_text(text: str) -> str:
    """`text` (a log line, a command) with this machine's paths replaced by placeholders: the Python environment
    ($PYTHON), the temporary folder ($TMP), the working folder (.) and the home folder (~)."""
    places = [(sys.prefix, "$PYTHON"), (sys.base_prefix, "$PYTHON"), (tempfile.gettempdir(), "$TMP"),
              (os.getcwd(), "."), (os.path.expanduser("~"), "~")]
    places += [(os.path.realpath(p), n) for p, n in places]
    for place, name in sorted({(p, n) for p, n in places if len(p) > 1}, key=lambda x: -len(x[0])):
        # whole path components only: /tmpfs or /var/tmp is not the temporary folder /tmp
        text = re.sub(r"(?<![\w.$~/-])" + re.escape(place) + r"(?=/|$|[^\w.-])", lambda _: name, text)
    return text
