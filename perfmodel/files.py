"""Reading user files (YAML or JSON mappings) with one-line errors."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml

from .errors import InputError

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: ~10x faster


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
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"{where}: malformed JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
    else:
        try:
            data = yaml.load(text, Loader=_LOADER)
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
        data = json.loads(path.read_text())
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
