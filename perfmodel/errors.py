"""How a command ends in error: bad input (`InputError`: one line naming the field, the value and what would be
valid), a launched run that failed or was stopped (`RunFailed`, `RunInterrupted`), and stop signals turned into
`Interrupted` (`on_signals`).

Every entry point (CLI, Python API, spec and plan files) raises `InputError` for bad input; the CLI turns it
into that one line on stderr and exit code 2. The executor's launcher (execute.launch.torchrun) raises the run errors; they
live here so that the CLI catches them without loading the launcher.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import functools
import math
import signal
import threading
from collections.abc import Iterable
from typing import Annotated, Any

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
)


def _plain(v):
    """numpy integer/float/bool scalars (from sweeps and fits) become Python ones; everything else is left to strict
    checks."""
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    return v


# The largest count a file, the API or a flag takes (2**31 - 1, torch's and NCCL's int32 limit; argtypes uses it too): far beyond any cluster, batch, width or sequence, and it keeps what the cost model
# derives from counts (divisors, products in int64) fast and exact. A typo such as 10**30 is refused.
MAX_COUNT = 2**31 - 1

# Counts and flags: no silent coercion of True to 1, 8.0 to 8 or "yes" to True.
Count = Annotated[int, BeforeValidator(_plain), Strict(), Field(gt=0, le=MAX_COUNT)]
Count0 = Annotated[int, BeforeValidator(_plain), Strict(), Field(ge=0, le=MAX_COUNT)]  # a count that may be 0
Flag = Annotated[bool, BeforeValidator(_plain), Strict()]
def _whole(v):
    """An int for a Literal of ints, which Strict() does not apply to: True == 1 and 1.0 == 1 would pass it."""
    v = _plain(v)
    if isinstance(v, (bool, float)):
        raise ValueError(f"got {v!r}; valid: an integer, not a {type(v).__name__}")
    return v


IntLiteral = BeforeValidator(_whole)  # Annotated[Literal[0, 1, 2], IntLiteral]
# Numbers in files: an int or a float (finite: Schema refuses NaN and inf), never a bool or a numeric string.
Real = Annotated[float, BeforeValidator(_plain), Strict()]
PositiveReal = Annotated[float, BeforeValidator(_plain), Strict(), Field(gt=0)]


# Characters str.splitlines() breaks a line at; a message echoing user text (a key, a name) escapes them.
_LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})


class InputError(ValueError):
    """Bad user input. The message is one line: field, value, what is valid (line breaks in echoed user text are
    escaped, as repr() writes them)."""

    def __init__(self, message: str = "", *args) -> None:
        super().__init__(str(message).translate(_LINE_BREAKS), *args)


def check_number(name: str, value, low: float = 0.0, high: float | None = None, above: bool = False,
                 what: str = "") -> None:
    """Refuse, in one line, a given number (None: not given) that is not a finite int or float in [low, high]
    (or above `low` with `above`)."""
    if value is None:
        return
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if number and np.isfinite(value) and (value > low if above else value >= low) and (high is None or value <= high):
        return
    valid = f"{'>' if above else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
    raise InputError(f"{name} = {value!r}; valid: {valid}{f' ({what})' if what else ''}")


def suggest(name: str, choices: Iterable[str], what: str) -> InputError:
    """An 'unknown NAME' error that lists the closest known names."""
    choices = sorted(choices)
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=3, cutoff=0.5)
    close = [c for c in choices if c.lower() in close]
    hint = f"did you mean: {', '.join(close)}?" if close else f"known: {', '.join(choices)}"
    return InputError(f"unknown {what} '{name}'; {hint}")


def _loc_part(x) -> str:
    """A field path component as a message writes it: a printable key as is, any other (an unknown key that is
    empty, has control characters or leading or trailing blanks) quoted as repr() writes it."""
    text = str(x)
    return text if text and text.isprintable() and text.strip() == text else repr(text)


def format_validation_error(err: ValidationError, where: str) -> str:
    """Collapse a pydantic ValidationError into one line per the project's bad-input rule."""
    parts = []
    for e in err.errors():
        loc = ".".join(_loc_part(x) for x in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if not loc:  # a check of the whole object (a model validator): its message names the fields
            parts.append(f"{where}: {msg}")
        elif e["type"] == "missing":
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

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)

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


class RunFailed(RuntimeError):
    """A launched run that did not finish; the message is one line (what died, how, where the log is)."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM (or another stop signal) to this process, raised like Ctrl-C's KeyboardInterrupt (`on_signals`)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class RunInterrupted(RunFailed):
    """The user stopped a launched run (Ctrl-C, SIGTERM); `exit_code` is the shell's 128 + signal."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


@contextlib.contextmanager
def on_signals(signums=(signal.SIGTERM, signal.SIGHUP)):
    """Within the block, these signals raise Interrupted in the main thread (as SIGINT raises KeyboardInterrupt),
    so that a launch stops its ranks and leaves nothing half-written, and SIGXFSZ is ignored, so that a write past
    the file-size limit fails with EFBIG (one line, cli.main) instead of killing the process; the previous
    handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in signums}
    old[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@functools.lru_cache(maxsize=4096)  # a search asks for the same n many times
def divisors(n: int) -> tuple[int, ...]:
    """Every positive divisor of n, ascending (the valid values a refusal lists for a size that must divide n)."""
    return tuple(sorted({x for d in range(1, math.isqrt(n) + 1) if n % d == 0 for x in (d, n // d)}))


def values_text(vals, limit: int = 12) -> str:
    """Valid values as a refusal lists them: the first `limit`, then "..."."""
    return ", ".join(map(str, vals[:limit])) + (", ..." if len(vals) > limit else "")
