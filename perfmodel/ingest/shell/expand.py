"""A shell word as the words bash would pass (read as data, never run): quotes ('...', "...", $'...', \\x),
parameters ($VAR, ${VAR}, ${ARR[@]}, ${ARR[i]}, ${#ARR[@]}, ${#VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:=d}, ${VAR:+x},
${VAR#p}, ${VAR%p}, ${VAR/p/r}, ${VAR,,}, ${VAR^^}, ${VAR:off:len}, ${!VAR}), $((...)) of known integers, and
field splitting of what is not quoted. `[ ]` / `[[ ]]` / `test` conditions of known strings and numbers.

What a reader cannot know stays as written and is named in `unread`, the word -> why (an `Unread` ledger: the
design both readers of programs share is perfmodel.ingest.reading's): command output ($(...), backticks), $RANDOM
and the shell's own state ($$, $?, $!), a variable the script never sets (its environment's value), the script's own
arguments ($1 ...), arithmetic on any of these. Such a word is kept whole (never split). Where a test or a
`${VAR:-d}` asks about a variable the script never sets, it reads as unset (empty): the script as run in a bare
environment, which is what its stated defaults are for (`bare_read` says a test read so: the branch it takes is
followed as not known to run, and a usage guard's `exit` there does not end the reading).
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import re
from typing import NamedTuple

from ...errors import InputError
from ..given import ARGS_FLAG, used
from ..reading import Unread
from .lex import skip_backtick, skip_dollar, skip_quote

SHELL_STATE = {"RANDOM": "a random number", "SRANDOM": "a random number", "$": "the shell's process id",
               "!": "a background process's id", "?": "a command's exit status", "BASHPID": "the shell's process id",
               "SECONDS": "the time", "EPOCHSECONDS": "the time", "LINENO": "the line number",
               "-": "the shell's options", "PPID": "the shell's parent process id"}
EXPANSIONS = ("$", "`", "<(", ">(")  # how a word not read starts (the rest of `unread` are variables, commands)
UNSET = "not set in the script: its environment's value"
ARGUMENT = "the script's argument"
_PARAM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#?$!-])(?:\[([^\]]*)\])?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Part(NamedTuple):
    text: str
    quoted: bool  # not split into fields
    known: bool = True


BREAK = Part("\0break", True)  # between the elements of "${ARR[@]}": each its own word
EMPTY = Part("", False)  # "${ARR[@]}" of no elements: no word at all


class Expansion:
    """Variables and positional parameters, and the expansion of words over them."""

    def __init__(self, where: str = "") -> None:
        self.where, self.line = where, 0  # the file, and the line of the command expanded (for a refusal)
        self.vars: dict[str, list[str] | str] = {}
        self.unknown: set[str] = set()  # variables whose value holds something not read (the value is its text)
        self.positional: list[str] | None = None  # None: the script's own (not known)
        self.script_args: list[str] | None = None  # the script's own arguments where the user gives them
        self.unread = Unread()  # a word or variable not read -> why
        self.testing = False  # in a test or a case word: an unset variable reads as empty
        self.bare_read = False  # a test read something as a bare run has it (unset, no arguments): see Script.if_
        self.bare: dict[str, str] = {}  # a variable set from unset ones: its value with those read as empty

    # -- the public expansions ------------------------------------------------------------------------------
    def fields(self, raw: str) -> list[str]:
        """A command's word as the words it expands to (unquoted expansions split on blanks)."""
        out, cur, have = [], [], False
        for p in self.scan(raw, "word"):
            if p is BREAK:
                out.append("".join(cur))
                cur, have = [], False
            elif p.quoted or not p.known:
                cur.append(p.text)
                have = True
            else:
                pieces = re.split(r"[ \t\n]+", p.text)
                for k, piece in enumerate(pieces):
                    if k:
                        if have or cur:
                            out.append("".join(cur))
                        cur, have = [], False
                    if piece:
                        cur.append(piece)
                        have = True
        if have or cur:
            out.append("".join(cur))
        return out

    def string(self, raw: str, mode: str = "word") -> tuple[str, bool]:
        """A word expanded without field splitting (an assignment's value, a case word, a heredoc's body), and
        whether all of it is known."""
        parts = self.scan(raw, mode)  # "${ARR[@]}" where no words are split: its elements joined by spaces
        return "".join(" " if p is BREAK else p.text for p in parts), all(p.known for p in parts)

    def heredoc(self, body: str) -> str:
        return self.string(body, "heredoc")[0]

    def heredoc_of(self, delimiter: str, body: str) -> str | None:
        """A heredoc's body expanded; None (named not read) where an expansion in it is never closed, which bash
        -n accepts and the command fails on when run."""
        try:
            return self.heredoc(body)
        except InputError as err:
            self.unread.name(f"<<{delimiter} (line {self.line})", f"its body does not expand: {err}")
            return None

    def assign_element(self, name: str, index: str, text: str, known: bool, append: bool) -> None:
        """NAME[i]=value, NAME[i]+=value: a scalar is element 0 (as bash makes it), -1 the last element. An index
        not read, or past the array's end (bash's arrays are sparse, these a list of words), leaves the array not
        read, as `read` leaves its variable."""
        old = self.vars.get(name)
        items = list(old) if isinstance(old, list) else [] if old is None else [old]
        k = self.arith(index)
        k = k + len(items) if k is not None and k < 0 else k
        if k is None or not 0 <= k <= len(items):
            self.vars[name] = f"${{{name}[{index}]}}"
            self.unknown.add(name)
            self.unread.name(self.vars[name], "an element set at an index not read, or past the array's end")
            return
        items += [""] * (k + 1 - len(items))
        items[k] = (items[k] if append else "") + text
        self.vars[name] = items
        if not known:
            self.unknown.add(name)

    # -- scanning -------------------------------------------------------------------------------------------
    def scan(self, s: str, mode: str) -> list[Part]:
        """`s` as parts; mode "word" (unquoted), "dq" (inside double quotes) or "heredoc" (a body: " is plain)."""
        out: list[Part] = []
        quoted = mode != "word"
        i = 0
        while i < len(s):
            c = s[i]
            if c == "\\":
                nxt = s[i + 1:i + 2]
                if not quoted or nxt in "$`\\\n" or (mode == "dq" and nxt == '"'):
                    if nxt != "\n":
                        out.append(Part(nxt, True))
                    i += 2
                else:
                    out.append(Part("\\", True))
                    i += 1
            elif c == "'" and not quoted:
                j = s.find("'", i + 1)
                j = len(s) if j < 0 else j
                out.append(Part(s[i + 1:j], True))
                i = j + 1
            elif c == '"' and mode == "word":
                j = skip_quote(s, i, self.where, self.line)
                out += self.scan(s[i + 1:j - 1], "dq") or [Part("", True)]
                i = j
            elif c == "$" and s[i + 1:i + 2] == "'" and not quoted:
                j = i + 2
                while j < len(s) and s[j] != "'":
                    j += 2 if s[j] == "\\" else 1
                text = s[i + 2:j]
                for a, b in (("\\n", "\n"), ("\\t", "\t"), ("\\'", "'"), ("\\\\", "\\")):
                    text = text.replace(a, b)
                out.append(Part(text, True))
                i = j + 1
            elif c == "$":
                i, parts = self._dollar(s, i, quoted)
                out += parts
            elif c == "`":
                j = skip_backtick(s, i, self.where, self.line)
                out.append(self._not_read(s[i:j], "command output"))
                i = j
            elif c in "<>" and s[i + 1:i + 2] == "(" and not quoted:
                j = skip_dollar(s, i, self.where, self.line)
                out.append(self._not_read(s[i:j], "a process substitution (a command's output as a file)"))
                i = j
            else:
                out.append(Part(c, quoted))
                i += 1
        return out

    def segments(self, text: str, quoted: bool) -> list[Part]:
        """A variable's value that holds words not read (`OPTS="--save $(dirname $0)/ckpt --bf16"`): those words
        kept whole, the rest known (and split where not quoted)."""
        words = sorted((w for w in self.unread if w.startswith(EXPANSIONS)), key=len, reverse=True)
        if not words:
            return [Part(text, quoted)]
        out, at = [], 0
        for m in re.finditer("|".join(map(re.escape, words)), text):
            out += [Part(text[at:m.start()], quoted), Part(m.group(0), True, False)]
            at = m.end()
        return out + [Part(text[at:], quoted)]

    def _not_read(self, text: str, why: str) -> Part:
        self.unread.name(text, why)
        return Part(text, True, False)

    def _dollar(self, s: str, i: int, quoted: bool) -> tuple[int, list[Part]]:
        nxt = s[i + 1:i + 2]
        if s.startswith("$((", i):
            j = skip_dollar(s, i, self.where, self.line)
            v = self.arith(s[i + 3:j - 2])
            return j, [Part(str(v), quoted) if v is not None else
                       self._not_read(s[i:j], "arithmetic on a value not read")]
        if nxt == "(":
            j = skip_dollar(s, i, self.where, self.line)
            return j, [self._not_read(s[i:j], "command output")]
        if nxt == "{":
            j = skip_dollar(s, i, self.where, self.line)
            return j, self._brace(s[i + 2:j - 1], s[i:j], quoted)
        m = _NAME.match(s, i + 1) or re.compile(r"[0-9@*#?$!-]").match(s, i + 1)
        if not m:
            return i + 1, [Part("$", quoted)]
        return m.end(), self._render(m.group(0), None, s[i:m.end()], quoted)

    # -- parameters -----------------------------------------------------------------------------------------
    def lookup(self, name: str, index: str | None) -> tuple[list[str] | str | None, bool]:
        """(value, known): None where unset; an array's elements for index @ or *."""
        if name in SHELL_STATE:
            return None, False
        if name.isdigit() or name in "@*#":
            if self.positional is None:
                self.bare_read = True
                if name in "@*":
                    return [], True
                return ("0", True) if name == "#" else (None, True)
            if self.positional is self.script_args:  # the script's own, not a function's: the user's flag is read
                used(ARGS_FLAG)
            if name in "@*":
                return list(self.positional), True
            if name == "#":
                return str(len(self.positional)), True
            k = int(name)
            return (self.positional[k - 1] if 0 < k <= len(self.positional) else None), True
        if name not in self.vars:
            return None, True
        v, known = self.vars[name], name not in self.unknown
        if not known and self.testing and name in self.bare:
            self.bare_read = True
            return self.bare[name], True
        if index in ("@", "*"):
            return (v if isinstance(v, list) else [v]), known
        if isinstance(v, list):
            k = self.arith(index) if index is not None else 0
            if k is None:
                return None, False
            return (v[k] if -len(v) <= k < len(v) else None), known
        return (v if index in (None, "0") else None), known

    def _render(self, name: str, index: str | None, src: str, quoted: bool) -> list[Part]:
        value, known = self.lookup(name, index)
        if not known:
            if name in SHELL_STATE or value is None:
                return [self._not_read(src, SHELL_STATE.get(name, "a value not read"))]
            return self.segments(_join(value), quoted)
        if value is None:
            if self.testing:
                self.bare_read = True
                return [Part("", quoted)]
            return [self._not_read(src, ARGUMENT if name.isdigit() else UNSET)]
        if isinstance(value, list):
            if not quoted or index == "*" or name == "*":
                return [Part(" ".join(value), quoted)]
            out = []
            for k, v in enumerate(value):
                out += [BREAK] if k else []
                out.append(Part(v, True))
            return out or [EMPTY]
        return [Part(value, quoted)]

    def _brace(self, inner: str, src: str, quoted: bool) -> list[Part]:
        """${...}: the forms the frameworks' scripts use; any other stays as written, named not read."""
        mode = "dq" if quoted else "word"
        if inner.startswith("#") and len(inner) > 1:
            m = _PARAM.fullmatch(inner[1:])
            if m:
                value, known = self.lookup(m.group(1), m.group(2))
                if known:
                    n = len(value) if value is not None else 0
                    return [Part(str(n), quoted)]
                return [self._not_read(src, "the length of a value not read")]
        if inner.startswith("!"):
            m = _PARAM.fullmatch(inner[1:])
            if m and m.group(2) in ("@", "*"):
                value, known = self.lookup(m.group(1), "@")
                if known:
                    return [Part(" ".join(str(k) for k in range(len(value or []))), quoted)]
            elif m:
                target, known = self.lookup(m.group(1), m.group(2))
                if known and isinstance(target, str) and _NAME.fullmatch(target):
                    return self._render(target, None, src, quoted)
            return [self._not_read(src, "an indirect reference not read")]
        m = _PARAM.match(inner)
        if not m:
            return [self._not_read(src, "a parameter expansion perfmodel does not read")]
        name, index, op = m.group(1), m.group(2), inner[m.end():]
        if not op:
            return self._render(name, index, src, quoted)
        value, known = self.lookup(name, index)
        if not known:
            return [self._not_read(src, SHELL_STATE.get(name, "a value not read"))]
        colon = len(op) > 1 and op[0] == ":" and op[1] in "-=+?"
        kind = op[1] if colon else op[0]
        if kind in "-=+?" and (colon or op[0] in "-=+?"):
            word = op[2:] if colon else op[1:]
            empty = value is None or (colon and value in ("", []))
            if kind == "+":
                return self.scan(word, mode) if not empty else [Part("", quoted)]
            if not empty:
                return self._render(name, index, src, quoted)
            if kind == "?":
                return [self._not_read(src, UNSET)]
            parts = self.scan(word, mode)
            if kind == "=" and _NAME.fullmatch(name):
                self.vars[name] = "".join(p.text for p in parts if p is not BREAK)
            return parts or [Part("", quoted)]
        if value is None:
            self.bare_read = self.bare_read or self.testing
            return [Part("", quoted)] if self.testing else [self._not_read(src, UNSET)]
        many = isinstance(value, list)
        if many and op.startswith(":"):  # ${ARR[@]:off:len}, ${@:off:len}: a slice of the words ($@ from $1)
            nums = [self.arith(x) for x in op[1:].split(":", 1)]
            if None in nums:
                return [self._not_read(src, "a slice of a value not read")]
            start = max(0, nums[0] - (1 if name in "@*" else 0))
            out = value[start:start + nums[1]] if len(nums) > 1 else value[start:]
        else:
            out = [_operate(v, op, self) for v in (value if many else [value])]
        if any(v is None for v in out):
            return [self._not_read(src, "a parameter expansion perfmodel does not read")]
        if many and quoted and "@" in (index, name):
            return [q for k, v in enumerate(out) for q in ([BREAK] if k else []) + [Part(v, True)]] or [EMPTY]
        return [Part(" ".join(out), quoted)]

    # -- arithmetic -----------------------------------------------------------------------------------------
    def arith(self, expr: str, depth: int = 0) -> int | None:
        """$(( expr )) of known integers (variables named with or without $); None where anything is not known."""
        text, known = self.string(expr, "heredoc")
        if not known or depth > 8:
            return None
        missing = []

        def name(m):
            v, ok = self.lookup(m.group(0), None)
            if not ok or v is None or isinstance(v, list):
                missing.append(m.group(0))
                return "0"
            v = v.strip()
            if re.fullmatch(r"-?\d+", v):
                return f"({v})"
            n = self.arith(v, depth + 1)
            missing.extend([] if n is not None else [m.group(0)])
            return f"({n})"

        text = _NAME.sub(name, text).replace("&&", " and ").replace("||", " or ")
        text = re.sub(r"!(?!=)", " not ", text)
        if missing or len(text) > 400:
            return None
        try:
            return _evaluate(ast.parse(text.strip(), mode="eval").body)
        except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError, RecursionError):
            return None


def _join(value) -> str:
    return " ".join(value) if isinstance(value, list) else value


def _operate(v: str, op: str, ex: Expansion) -> str | None:
    """One value through ${VAR<op>}: #, ##, %, %% (patterns), /, //, /#, /% (replacement), ^^ ^ ,, , (case),
    :off[:len]; None for an operator not read."""
    def pattern(p):
        text, known = ex.string(p)
        return text if known else None

    if op[:2] in ("##", "%%") or op[:1] in "#%":
        longest = op[:2] in ("##", "%%")
        pat = pattern(op[2:] if longest else op[1:])
        if pat is None:
            return None
        cuts = range(len(v) + 1)
        if op[0] == "#":
            hits = [k for k in cuts if fnmatch.fnmatchcase(v[:k], pat)]
            return v[(max(hits) if longest else min(hits)):] if hits else v
        hits = [k for k in cuts if fnmatch.fnmatchcase(v[k:], pat)]
        return v[:(min(hits) if longest else max(hits))] if hits else v
    if op[:1] == "/":
        body = op[2:] if op[1:2] in "/#%" and len(op) > 1 else op[1:]
        pat, _, rep = body.partition("/")
        pat, rep = pattern(pat), pattern(rep)
        if pat is None or rep is None:
            return None
        if op[1:2] == "#":
            return rep + v[len(pat):] if v.startswith(pat) else v
        if op[1:2] == "%":
            return v[:-len(pat)] + rep if pat and v.endswith(pat) else v
        return v.replace(pat, rep) if op[1:2] == "/" else v.replace(pat, rep, 1)
    case = {"^^": str.upper, ",,": str.lower, "^": lambda s: s[:1].upper() + s[1:],
            ",": lambda s: s[:1].lower() + s[1:]}
    for k, f in case.items():
        if op == k:
            return f(v)
    if op.startswith(":"):
        nums = [ex.arith(x) for x in op[1:].split(":", 1)]
        if None in nums:
            return None
        start = nums[0] if nums[0] >= 0 else max(0, len(v) + nums[0])
        return v[start:start + nums[1]] if len(nums) > 1 and nums[1] >= 0 else v[start:]
    return None


def _evaluate(node) -> int:
    """A parsed arithmetic expression of integers (bash's C-like operators; / and % truncate toward zero)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp):
        v = _evaluate(node.operand)
        ops = {ast.USub: lambda x: -x, ast.UAdd: lambda x: x, ast.Invert: lambda x: ~x, ast.Not: lambda x: int(not x)}
        return ops[type(node.op)](v)
    if isinstance(node, ast.BoolOp):
        vals = [_evaluate(v) for v in node.values]
        return int(all(vals) if isinstance(node.op, ast.And) else any(vals))
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        a, b = _evaluate(node.left), _evaluate(node.comparators[0])
        return int(_COMPARE[type(node.ops[0])](a, b))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        a, b = _evaluate(node.left), _evaluate(node.right)
        # each operator computed only once its operands are in range (a dict of results would compute 3 ** b
        # for `3 >> b`)
        shift = isinstance(node.op, (ast.Pow, ast.LShift, ast.RShift))
        if max(abs(a), abs(b)) >= 2**63 or (shift and not 0 <= b < 64):
            raise ValueError("out of range")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return q if not isinstance(node.op, ast.Mod) else a - b * q
        return _BINARY[type(node.op)](a, b)
    raise ValueError("not an integer expression")  # a float, a string, `@`, a chained comparison


_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
            ast.NotEq: operator.ne}
# bash's binary arithmetic operators as Python parses them (/ and % apart: they truncate toward zero)
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.BitAnd: operator.and_,
           ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.Pow: operator.pow, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift, ast.Div: None, ast.FloorDiv: None, ast.Mod: None}
