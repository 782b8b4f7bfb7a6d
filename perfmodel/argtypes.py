"""argparse value types shared by the subcommands: bad values end as one line naming the flag (exit 2)."""

from __future__ import annotations

import argparse
import math


def integer(name: str, least: int = 1):
    """An integer >= least (`--nproc`, `--top`, `--steps`, ...)."""
    want = "a positive integer" if least == 1 else f"an integer >= {least}"

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {want}, got {text!r}") from None
        if v < least:
            raise argparse.ArgumentTypeError(f"{name} must be {want}, got {v}")
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
