"""A launch script's commands as the words the shell would pass, read as data (never run): scalar and array
assignments (`ARGS=( ... )` over several lines, with comments inside, `ARGS+=( ... )`), `$VAR`, `${VAR}`,
`${VAR:-default}`, `${ARR[@]}` and `$((a * b))` of known integers, and `if [[ A == B ]]; then ... else ... fi` whose
tests compare known strings. What Megatron-LM's and DeepSpeed's example scripts (examples/gpt3/*.sh,
examples/llama/*.sh), MaxText's and tpu-recipes' launch scripts and Megatron-Bridge's override lines are written with;
anything else the shell would compute stays as written. The one shell reader of perfmodel.ingest.
"""

from __future__ import annotations

import ast
import re
import shlex

from ..errors import InputError
from .sources import literal

_ASSIGN = re.compile(r"^(?:export\s+|local\s+|declare\s+(?:-\w+\s+)?)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
_ARRAY = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]\}")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-=]([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_POSITIONAL = re.compile(r"\$\{\d+:?-([^}]*)\}")  # ${1:-default}: the script run without arguments
_ARITH = re.compile(r"\$\(\(([^()]*)\)\)")


class Script:
    """The script's variables (arrays as word lists) and its commands, each as its expanded words."""

    def __init__(self, text: str, where: str, every_branch: bool = False) -> None:
        """`every_branch`: read the lines of every `if` / `elif` / `else` branch in order, as if no test were there
        (for a command under a test that needs the file system, `if [ -f "$CONFIG" ]`)."""
        self.where = where
        self.every_branch = every_branch
        self.vars: dict[str, list[str] | str] = {}
        self.commands: list[list[str]] = []
        self._run(re.sub(r"\\\r?\n", " ", text))

    # -- expansion ---------------------------------------------------------------------------------------
    def expand(self, word: str) -> list[str]:
        """One word as the words it expands to: an array element per word for `${ARR[@]}` (split further on
        spaces, as an unquoted expansion is), otherwise one word with its variables replaced."""
        if word in ("$@", "$*", "${@}", "${*}"):  # the script's own arguments: read as run without any
            return []
        m = _ARRAY.fullmatch(word)
        if m:
            v = self.vars.get(m.group(1), [])
            return [w for item in (v if isinstance(v, list) else [v]) for w in item.split()]

        def sub(m):
            name = m.group(1) or m.group(3)
            if name in self.vars:
                v = self.vars[name]
                return " ".join(v) if isinstance(v, list) else v
            return m.group(2) if m.group(2) is not None else m.group(0)

        word = _POSITIONAL.sub(lambda m: m.group(1), word)
        out = _VAR.sub(sub, _ARRAY.sub(lambda m: " ".join(self.expand(m.group(0))), word))
        out = _ARITH.sub(self._arith, out)
        plain = re.fullmatch(r"\$[A-Za-z_{]\S*", word) is not None
        return out.split() if plain and " " in out else [out]

    @staticmethod
    def _arith(m) -> str:
        expr = m.group(1).replace("$", "")
        if re.fullmatch(r"[\d\s+*/-]+", expr) and len(expr) < 80:
            nums = [int(x) for x in re.findall(r"\d+", expr)]
            if all(n < 2**31 for n in nums):
                try:
                    v = literal(ast.parse(expr.replace("/", "//").strip(), mode="eval").body)
                except SyntaxError:
                    v = None
                if isinstance(v, int):
                    return str(v)
        return m.group(0)

    def words(self, line: str) -> list[str]:
        try:
            return shlex.split(line, comments=True)
        except ValueError as err:
            raise InputError(f"{self.where}: line {line.strip()[:60]!r} is not shell ({err}); valid: a launch "
                             "script, an argument list, or a file of KEY=VALUE lines") from None

    # -- tests -------------------------------------------------------------------------------------------
    def test(self, words: list[str]) -> bool | None:
        """A `[[ ... ]]` / `[ ... ]` condition of known strings joined by || / &&; None where it is unknown."""
        result, op, i = None, None, 0
        while i < len(words):
            j = i
            while j < len(words) and words[j] not in ("||", "&&"):
                j += 1
            part = [w for w in words[i:j] if w not in ("[[", "]]", "[", "]", "]];", "];", "then", ";")]
            part = [w.rstrip(";") for w in part]
            value = self._one(part)
            if op is None:
                result = value
            elif op == "||":
                result = True if (result or value) else (None if None in (result, value) else False)
            else:
                result = False if (result is False or value is False) else (
                    None if None in (result, value) else True)
            op = words[j] if j < len(words) else None
            i = j + 1
        return result

    def _one(self, part: list[str]) -> bool | None:
        vals = [" ".join(self.expand(w)) for w in part]
        if any("$" in v for v in vals):
            return None
        if len(vals) == 3 and vals[1] in ("==", "=", "!="):
            return (vals[0] == vals[2]) == (vals[1] != "!=")
        if len(vals) == 2 and vals[0] in ("-z", "-n"):
            return (vals[1] == "") == (vals[0] == "-z")
        return None

    # -- the script --------------------------------------------------------------------------------------
    def _run(self, text: str) -> None:
        lines = text.splitlines()
        live: list[bool] = []  # one entry per open `if`: whether its current branch runs
        taken: list[bool] = []  # whether a branch of that `if` has run
        i = 0
        while i < len(lines):
            line = lines[i].strip()
            i += 1
            if not line or line.startswith("#"):
                continue
            m = _ASSIGN.match(line)
            if m and m.group(3).startswith("("):
                body = m.group(3)[1:]
                while ")" not in self._uncommented(body) and i < len(lines):
                    body += "\n" + lines[i]
                    i += 1
                if all(live):
                    self._array(m.group(1), m.group(2) == "+", body)
                continue
            words = self.words(line)
            if not words:
                continue
            head = words[0]
            if self.every_branch and head in ("if", "elif", "else", "fi", "then"):
                continue
            if head in ("if", "elif"):
                cond = self.test(words[1:])
                if head == "if":
                    live.append(bool(cond))
                    taken.append(bool(cond))
                elif live:
                    live[-1] = not taken[-1] and bool(cond)
                    taken[-1] = taken[-1] or live[-1]
                continue
            if head == "else" and live:
                live[-1] = not taken[-1]
                taken[-1] = True
                continue
            if head == "fi" and live:
                live.pop()
                taken.pop()
                continue
            if not all(live):
                continue
            if m and len(words) == 1:
                name, append, value = m.group(1), m.group(2) == "+", words[0].split("=", 1)[1]
                new = " ".join(self.expand(value)) if value else ""
                old = self.vars.get(name, "")
                self.vars[name] = (" ".join(old) if isinstance(old, list) else old) + new if append else new
                continue
            if head == "export" and all("=" in w for w in words[1:]):
                for w in words[1:]:
                    k, v = w.split("=", 1)
                    self.vars[k] = " ".join(self.expand(v))
                continue
            self.commands.append([e for w in words for e in self.expand(w)])

    def scalars(self) -> dict[str, str]:
        """The script's variables as the one word each expands to (an array's words joined by spaces)."""
        return {k: " ".join(v) if isinstance(v, list) else v for k, v in self.vars.items()}

    @staticmethod
    def _uncommented(body: str) -> str:
        return "\n".join(re.sub(r"(^|\s)#.*$", "", ln) for ln in body.splitlines())

    def _array(self, name: str, append: bool, body: str) -> None:
        text = self._uncommented(body)
        text = text[:text.rfind(")")]
        items = [e for w in self.words(text) for e in (self.expand(w) if w.startswith("$") else [w])]
        items = [" ".join(self.expand(w)) if "$" in w else w for w in items]
        old = self.vars.get(name, [])
        old = old if isinstance(old, list) else old.split()
        self.vars[name] = (old if append else []) + items
