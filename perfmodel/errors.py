"""User-facing input errors: one line naming the field, the value and what would be valid.

Every entry point (CLI, Python API, spec and plan files) raises `InputError` for bad input; the CLI turns it
into that one line on stderr and exit code 2.
"""

from __future__ import annotations

import contextvars
import difflib
from collections.abc import Iterable
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError

def _plain(v):
    """numpy integer/bool scalars (from sweeps) become Python ones; everything else is left to strict checks."""
    if isinstance(v, (np.integer, np.bool_)):
        return v.item()
    return v


# Counts and flags: no silent coercion of True to 1, 8.0 to 8 or "yes" to True.
Count = Annotated[int, BeforeValidator(_plain), Strict(), Field(gt=0)]
Flag = Annotated[bool, BeforeValidator(_plain), Strict()]


class InputError(ValueError):
    """Bad user input. The message is one line: field, value, what is valid."""


def check_number(name: str, value, low: float = 0.0, high: float | None = None, above: bool = False,
                 what: str = "") -> None:
    """Refuse, in one line, a given number (None: not given) that is not a finite int or float in [low, high]
    (or above `low` with `above`)."""
    if value is None:
        return
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if number and np.isfinite(value) and (value > low if above else value >= low) and (high is None or value <= high):
        return
    valid = f"between {low:g} and {high:g}" if high is not None else f"{'>' if above else '>='} {low:g}"
    raise InputError(f"{name} = {value!r}; valid: {valid}{f' ({what})' if what else ''}")


def suggest(name: str, choices: Iterable[str], what: str) -> InputError:
    """An 'unknown NAME' error that lists the closest known names."""
    choices = sorted(choices)
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=3, cutoff=0.5)
    close = [c for c in choices if c.lower() in close]
    hint = f"did you mean: {', '.join(close)}?" if close else f"known: {', '.join(choices)}"
    return InputError(f"unknown {what} '{name}'; {hint}")


def format_validation_error(err: ValidationError, where: str) -> str:
    """Collapse a pydantic ValidationError into one line per the project's bad-input rule."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(root)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            parts.append(f"{where}.{loc} is required")
        elif e["type"] == "extra_forbidden":
            parts.append(f"{where}.{loc} is not a known field")
        elif "input" in e and not isinstance(e["input"], (dict, list)) and e["type"] != "value_error":
            parts.append(f"{where}.{loc} = {e['input']!r}: {msg}")
        else:
            parts.append(f"{where}.{loc}: {msg}")
    return "; ".join(parts)


# Pydantic calls a custom __init__ for nested models too; only the outermost call turns errors into InputError,
# so that nested failures keep their full field path (e.g. System.tiers.0.bandwidth_gbps).
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("schema_depth", default=0)


class Schema(BaseModel):
    """Base of every input/output schema: unknown fields are errors, and validation failures are InputError."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    def __init__(self, /, **data: Any) -> None:
        outer = _depth.get() == 0
        token = _depth.set(_depth.get() + 1)
        try:
            super().__init__(**data)
        except ValidationError as err:
            if not outer:
                raise
            raise InputError(format_validation_error(err, type(self).__name__)) from None
        finally:
            _depth.reset(token)

    @classmethod
    def parse(cls, data: Any, where: str | None = None):
        """Validate a mapping (e.g. loaded YAML/JSON) into this schema, raising InputError on failure."""
        if not isinstance(data, dict):
            raise InputError(f"{where or cls.__name__}: expected a mapping of fields, got {type(data).__name__}")
        token = _depth.set(_depth.get() + 1)
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise InputError(format_validation_error(err, where or cls.__name__)) from None
        finally:
            _depth.reset(token)
