"""Reading user files (YAML or JSON mappings) with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .errors import InputError


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
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise InputError(f"{where}: malformed YAML{at}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    return data
