"""How a command ends in error: bad input (`InputError`: one line naming the field, the value and what would be
valid), a launched run that failed or was stopped (`RunFailed`, `RunInterrupted`), and stop signals turned into
`Interrupted` (`on_signals`).

Every entry point (CLI, Python API, spec and plan files) raises `InputError` for bad input; the CLI turns it
into that one line on stderr and exit code 2. The executor's launcher (execute.launch.torchrun) raises the run
errors; they live here so that the CLI catches them without loading the launcher. The schema base and the field
types are `perfmodel.types`'.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import math
import signal
import threading
from collections.abc import Iterable

import numpy as np



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
