"""What the user states beside a config's files, for what the files leave out of themselves: the arguments a launch
script is run with ($1, $2, ...: `perfmodel import --script-args`) and the vocabulary of a tokenizer the files name
only by its path (`--vocab-size`). The hardware and the device count, which a config leaves to its launcher, are
given to `plan_of` instead (they do not change how the files read).

`read_config` sets `GIVEN` for the readers while they read; the shell reader binds a script's positional parameters
to `script_args`, and the Megatron-style readers size the vocabulary by `vocab_size` where the files name a tokenizer
whose size they do not state. A refusal for what one of them supplies starts "FLAG is needed:", as the launch's do.
"""

from __future__ import annotations

import shlex
from contextvars import ContextVar

from pydantic import Field

from ..errors import InputError
from ..types import Count, Schema

VOCAB_FLAG = "--vocab-size"
ARGS_FLAG = "--script-args"
GIVEN_SOURCE = "the command line"


class Given(Schema):
    """The user's flags for what a config's files leave out of themselves."""

    script_args: list[str] | None = Field(None, description="the launch script's arguments as the user runs it ($1, "
                                                            "$2, ...); None: not given (what the script takes from "
                                                            "them is not read)")
    vocab_size: Count | None = Field(None, description="the tokenizer's vocabulary, where the files name a tokenizer "
                                                       "file whose size they do not state (before the framework pads "
                                                       "it)")

    @classmethod
    def of(cls, script_args: str | None = None, vocab_size: int | None = None) -> Given:
        """From the flags as typed: --script-args as one string split as the shell splits it."""
        args = None
        if script_args is not None:
            try:
                args = shlex.split(script_args)
            except ValueError as err:
                raise InputError(f"{ARGS_FLAG} = {script_args!r} is not a shell word list ({err}); valid: the words "
                                 "the script is run with, quoted as a shell quotes them") from None
        return cls(script_args=args, vocab_size=vocab_size)


GIVEN: ContextVar[Given] = ContextVar("perfmodel_ingest_given", default=Given())
# the flags of GIVEN a reader took a value from while reading (read_config names the others as not used)
USED: ContextVar[set[str]] = ContextVar("perfmodel_ingest_given_used", default=set())


def used(flag: str) -> None:
    """Note that a reader took `flag`'s value (VOCAB_FLAG, ARGS_FLAG)."""
    USED.get().add(flag)


def unused(given: Given) -> list[str]:
    """The flags `given` set that no reader took, each as a line of import's report."""
    out = []
    if given.vocab_size is not None and VOCAB_FLAG not in USED.get():
        out.append(f"{VOCAB_FLAG} {given.vocab_size}: not used (the files state the vocabulary, or their tokenizer's "
                   "size is known)")
    if given.script_args is not None and ARGS_FLAG not in USED.get():
        out.append(f"{ARGS_FLAG} {' '.join(given.script_args)!r}: not used (no script among the files reads its "
                   "arguments)")
    return out
