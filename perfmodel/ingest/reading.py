"""Other people's programs read as data, never run: the design perfmodel's two small interpreters share.

The shell reader (perfmodel.ingest.shell) reads a launch script as bash would expand it; the recipe reader
(perfmodel.ingest.bridge.recipe) follows a Megatron-Bridge recipe function over its Python syntax tree. Neither runs
a command, imports a module or looks at the environment. Both follow the program in order over the values it
states itself, and say what they could not read instead of guessing it.

What is read: literals; the names and variables the program sets; arithmetic and string operations on values
already known; the branch whose test is known; calls of the functions the files given define, their arguments
bound; in the shell, loops over known words.

What is named as not read: a value that needs the program to run: a command's output, a call the reader does not
follow, the environment, the script's arguments, the shell's own state, the file system. It is never guessed: it
stays as its source text, with why, in a `NotRead`, which prints as that text, so a key set from it shows what the
file says. The Python readers keep it as the value (perfmodel.ingest.sources.literal makes it for every config
module read as data) and the key's fate names it not read; the shell reader keeps the word as written and records
it in its `Unread` ledger (each text with its first reason), which a message quotes as `NotRead.named` does:
"TEXT: why" (`$(nvidia-smi -L | wc -l): command output`).

How far: each program read has one `Budget`: at most MAX_STEPS steps (a shell command, a Python statement) and
MAX_DEPTH calls nested; a shell loop runs at most MAX_LOOP times, a Python list expression builds at most MAX_LIST
elements. Past a limit the budget raises `OverBudget`, whose message is the one form both readers give ("more than
20000 commands followed", "more than 16 nested calls"). The shell reader names what lies past it as not read (the
rest of the script, a call nested too deep) and keeps the words it has read; the recipe reader refuses the file (a
config half built is not the config), in the one-line form of every refusal here (`refusal`: where, what, valid).
"""

from __future__ import annotations

from ..errors import InputError

MAX_STEPS = 20_000  # steps followed in one program; launch scripts and recipes take hundreds
MAX_DEPTH = 16  # calls nested; scripts and recipes nest three or four
MAX_LOOP = 256  # iterations of one shell loop
MAX_LIST = 100_000  # elements one Python list expression may build ([["decoder"] * 4] * 14)


class NotRead:
    """A value the program computes that a reader does not: its source text as written, and why it is not read.
    Equal to another of the same text (the reason is the first reader's), and printed as that text."""

    __slots__ = ("text", "why")

    def __init__(self, text: str, why: str = "") -> None:
        self.text, self.why = text, why

    @property
    def named(self) -> str:
        """The value as a message names it: "TEXT: why"."""
        return f"{self.text}: {self.why}" if self.why else self.text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other) -> bool:
        return isinstance(other, NotRead) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


class Unread(dict[str, str]):
    """What a reader left not read: each source text -> why (the first reason given is kept)."""

    def name(self, text: str, why: str) -> NotRead:
        return NotRead(text, self.setdefault(text, why))

    def of(self, text: str) -> NotRead:
        return NotRead(text, self[text])


class OverBudget(Exception):
    """A reading past its budget; the message says which limit."""


class Budget:
    """The steps taken and the calls nested while one program is read; `steps_are` names a step (commands,
    statements)."""

    def __init__(self, steps_are: str) -> None:
        self.steps_are, self.steps, self.depth = steps_are, 0, 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise OverBudget(f"more than {MAX_STEPS} {self.steps_are} followed")

    def enter(self) -> None:
        """One call deeper; `leave` when it returns."""
        if self.depth >= MAX_DEPTH:
            raise OverBudget(f"more than {MAX_DEPTH} nested calls")
        self.depth += 1

    def leave(self) -> None:
        self.depth -= 1


def refusal(where: str, what: str, valid: str) -> InputError:
    """The one line that refuses a file: where, what is wrong, and what would be read."""
    return InputError(f"{where}: {what}; valid: {valid}")
