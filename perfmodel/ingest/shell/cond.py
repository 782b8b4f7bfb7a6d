"""A `[ ]` / `test` / `[[ ]]` condition over words already expanded (perfmodel.ingest.shell.script): three-valued,
None where it needs what a reader cannot know (a file's existence, a value not read)."""

from __future__ import annotations

import fnmatch
import re


def glob(value: str, pattern: str) -> bool:
    """A bash pattern (*, ?, [...]) matching all of `value` (a case arm, `[[ A == B* ]]`)."""
    return fnmatch.fnmatchcase(value, pattern)


UNARY_FILE = {"-f", "-d", "-e", "-x", "-r", "-w", "-s", "-L", "-h", "-p", "-S", "-b", "-c", "-g", "-u", "-k", "-O",
              "-G", "-N", "-t"}
BINARY = {"==", "=", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "=~", "-nt", "-ot", "-ef"}


class Condition:
    """A test's words as an expression: !, ( ), -a / -o / && / ||, unary -z -n and file tests, binary string and
    integer comparisons; three-valued (None: not known)."""

    def __init__(self, items: list[tuple[str, str, bool]], double: bool) -> None:
        self.items, self.double, self.i = items, double, 0

    def peek(self) -> str | None:
        return self.items[self.i][0] if self.i < len(self.items) else None

    def value(self) -> bool | None:
        try:
            v = self.either()
        except (IndexError, ValueError):
            return None
        return v if self.i == len(self.items) else None

    def either(self) -> bool | None:
        v = self.both()
        while self.peek() in ("||", "-o"):
            self.i += 1
            w = self.both()
            v = True if (v is True or w is True) else (False if (v is False and w is False) else None)
        return v

    def both(self) -> bool | None:
        v = self.negation()
        while self.peek() in ("&&", "-a"):
            self.i += 1
            w = self.negation()
            v = False if (v is False or w is False) else (True if (v is True and w is True) else None)
        return v

    def negation(self) -> bool | None:
        if self.peek() == "!":
            self.i += 1
            v = self.negation()
            return None if v is None else not v
        if self.peek() == "(" or self.peek() == "\\(":
            self.i += 1
            v = self.either()
            self.i += 1
            return v
        return self.primary()

    def primary(self) -> bool | None:
        raw, text, known = self.items[self.i]
        if self.i + 2 < len(self.items) and self.items[self.i + 1][0] in BINARY:
            (op, _, _), (rraw, rtext, rknown) = self.items[self.i + 1], self.items[self.i + 2]
            self.i += 3
            if not (known and rknown) or op in ("-nt", "-ot", "-ef"):
                return None
            return _compare(text, op, rtext, self.double and not rraw.startswith(("'", '"')))
        if raw in ("-z", "-n", "-v") or raw in UNARY_FILE:
            _, arg, aknown = self.items[self.i + 1]
            self.i += 2
            if raw in UNARY_FILE or not aknown:
                return None
            return (arg == "") if raw == "-z" else (arg != "")
        self.i += 1
        return (text != "") if known else None


def _compare(a: str, op: str, b: str, pattern: bool) -> bool | None:
    if op in ("==", "=", "!="):
        same = glob(a, b) if pattern else a == b
        return same if op != "!=" else not same
    if op == "=~":
        try:
            return re.search(b, a) is not None
        except re.error:
            return None
    if op in ("<", ">"):
        return (a < b) if op == "<" else (a > b)
    try:
        x, y = int(a), int(b)
    except ValueError:
        return None
    return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]
