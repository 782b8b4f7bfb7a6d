"""argparse value types shared by the subcommands, and the parser they run in: a bad flag or value ends as one
line naming the flag (exit 2)."""

from __future__ import annotations

import argparse
import math
import sys

from ..errors import InputError, check_number
from ..types import MAX_COUNT


class Parser(argparse.ArgumentParser):
    """argparse's parser with one-line errors: 'error: PROG: MESSAGE (see PROG --help)' and exit 2 (argparse prints
    the usage and the message by default)."""

    def error(self, message):
        print(f"error: {self.prog}: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(2)


def integer(name: str, least: int = 1, most: int = MAX_COUNT):
    """An integer from least to most (`--nproc`, `--top`, `--steps`, ...)."""
    want = "a positive integer" if least == 1 else f"an integer >= {least}"

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {want}, got {text!r}") from None
        if v < least:
            raise argparse.ArgumentTypeError(f"{name} must be {want}, got {v}")
        if v > most:
            raise argparse.ArgumentTypeError(f"{name} must be {want} up to {most}, got {v}")
        return v
    return parse


def seconds(name: str):
    """A positive, finite number of seconds (`--timeout`)."""
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number of seconds, got {text!r}") from None
        if not v > 0 or math.isinf(v):
            raise argparse.ArgumentTypeError(f"{name} must be a positive number of seconds, got {text!r}")
        return v
    return parse


def number(name: str, low: float = 0.0, high: float | None = None, above: bool = False, what: str = ""):
    """A finite number in [low, high] (above: > low), for flags such as `--price` or `--factor`; refused in
    errors.check_number's words: '--price = -1.0; valid: > 0 and <= 1e+06 (USD per device-hour)'."""
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        try:
            check_number(name, v, low, high, above, what)
        except InputError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return v
    return parse


def capacity_factor(name: str):
    """`--moe-capacity-factor C`: a number in (0, 64], or 'none' (dropless, where a stack's release would drop)."""
    num = number(name, 0.0, 64.0, above=True, what="times an expert's mean share of the routed tokens; or none")

    def parse(text):
        return "none" if str(text).strip().lower() == "none" else num(text)
    return parse


def path(name: str, what: str = "a file or directory"):
    """A file or directory name: not empty (an empty name would mean the working directory, or no flag at all)."""
    def parse(text):
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{name} must name {what}, got {text!r}")
        return text
    parse.names_path = True  # a flag whose value is a file on this machine (the planner page leaves it out)
    return parse


def word(name: str, example: str):
    """A non-empty value without spaces, passed on as given (torchrun's rendezvous settings)."""
    def parse(text):
        if not text or any(c.isspace() for c in text):
            raise argparse.ArgumentTypeError(f"{name} must be a non-empty value without spaces (e.g. {example}), "
                                             f"got {text!r}")
        return text
    return parse


def names(name: str):
    """A comma-separated list of names or paths, none of them empty (`whatif --hardware a,b`)."""
    def parse(text):
        parts = [p.strip() for p in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(f"{name} must be names separated by commas, none empty (e.g. "
                                             f"dgx-h100,dgx-b200), got {text!r}")
        return parts
    return parse


def counts(name: str):
    """Positive integers separated by commas (`search --gpus 256,512`)."""
    one = integer(name)

    def parse(text):
        try:
            return [one(part) for part in text.split(",")]
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"{name} must be positive integers up to {MAX_COUNT} separated by "
                                             f"commas (e.g. 256,512), got {text!r}") from None
    return parse


RDZV_BACKENDS = ("c10d", "etcd", "etcd-v2", "static")  # torchrun's (torch.distributed.elastic.rendezvous)


def nodes(text):
    """torchrun's --nnodes: N, or MIN:MAX for an elastic job."""
    parts, one = text.split(":"), integer("--nnodes")
    try:
        low, high = one(parts[0]), one(parts[-1])
        if len(parts) > 2 or low > high:
            raise argparse.ArgumentTypeError(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"--nnodes must be a positive integer N or MIN:MAX (elastic), got "
                                         f"{text!r}") from None
    return f"{low}:{high}" if len(parts) == 2 else str(low)


def stack_name(names, lines):
    """A stack (`--stack`): one of `names`, or a release line of `lines` with an optional '@VERSION' (checked when the
    plan resolves, which names the valid versions)."""
    def parse(text):
        base = text.partition("@")[0]
        if (base in names and "@" not in text) or base in lines:
            return text
        raise argparse.ArgumentTypeError(f"--stack {text!r}: valid: {', '.join(names)}, or "
                                         f"{', '.join(f'{n}[@VERSION]' for n in lines)} (perfmodel stacks list)")
    parse.options = [*names, *lines, *releases_of(lines)]  # what a form offers (perfmodel.app.forms): every release
    return parse


def releases_of(lines) -> list[str]:
    """Every release of the release lines `lines`, spelled as `--stack` takes it (megatron-bridge@26.08)."""
    from ..spec.stack.release import load_line

    return [f"{n}@{r.version}" for n in lines for r in load_line(n).releases]
