"""A launch script's text as bash's grammar sees it (read as data, never run): tokens, then a tree of commands.

Tokens as bash makes them: a word runs on over newlines inside quotes, `$( )`, `$(( ))`, `${ }`, backticks and
`NAME=( ... )` arrays; `\\`-newline joins lines; a command goes on after `|`, `&&`, `||`; `#` starts a comment only
where a word would start; heredocs (`<<EOF`, `<<'EOF'`, `<<"EOF"`, `<<-EOF`, tabs stripped) take the lines after
their command's line up to the delimiter. The tree: simple commands (assignments, words, redirections), pipelines,
`&&` / `||` lists, `if`/`elif`/`else`, `for`, `while`/`until`, `case`, `{ }`, `( )`, `[[ ]]`, `(( ))` and function
definitions. Words stay as written (quotes and `$` in them): perfmodel.ingest.shell.expand expands them.

Written here rather than taken from a library: bashlex (PyPI, last release 0.18 of 2023-01) refuses `NAME=( ... )`
arrays, `[[ ]]`, `case` and `$(( ))`, which the frameworks' launch scripts are written with. tree-sitter-bash 0.25
(the bash-reader speed benchmark measures it) parses them all without an ERROR node, but splits words bash keeps
whole (`z${Z}/$DTYPE/tp`, `$(dirname "$0")/x_$1_y`) and reads `a && b | c` as `(a && b) | c`: one of the 47 scripts
tests/test_shell_script.py runs under bash then reads otherwise, and a script it refuses gets no reason.
"""

from __future__ import annotations

from typing import NamedTuple

from ...errors import InputError
from ..reading import refusal

OPS = ("<<-", "<<<", ";;&", "&>>", ";;", ";&", "&&", "||", "|&", "<<", ">>", ">&", "<&", "&>", "<>", ">|",
       ";", "&", "|", "(", ")", "<", ">")
META = set(" \t\n;&|()<>")
REDIRECTS = {"<", ">", ">>", ">&", "<&", "&>", "&>>", "<>", ">|", "<<", "<<-", "<<<"}
RESERVED_END = {"then", "elif", "else", "fi", "do", "done", "esac", "}", "in"}


def not_shell(where: str, line: int, what: str, valid: str = "a bash script (bash -n accepts it)") -> InputError:
    """The one-line refusal of a script bash itself would refuse."""
    return refusal(where, f"line {line} is not shell: {what}", valid)


class Tok(NamedTuple):
    kind: str  # "word", "op", "nl", "io" (a redirection's fd number), "arith" (a `(( ))` command's expression)
    text: str
    line: int
    body: str | None = None  # a heredoc's lines (on its `<<` / `<<-` token)
    quoted: bool = False  # a heredoc whose delimiter is quoted: its body is not expanded


def skip_quote(text: str, i: int, where: str, line: int) -> int:
    """The index after the quoted string starting at text[i] (a ' or a ")."""
    q = text[i]
    i += 1
    while i < len(text):
        c = text[i]
        if c == q:
            return i + 1
        if q == '"' and c == "\\":
            i += 2
            continue
        if q == '"' and c == "$" and text[i + 1:i + 2] in ("(", "{"):
            i = skip_dollar(text, i, where, line)
            continue
        if q == '"' and c == "`":
            i = skip_backtick(text, i, where, line)
            continue
        i += 1
    raise not_shell(where, line, f"the quote {q} opened here is never closed",
                    "a launch script, an argument list, or a file of KEY=VALUE lines")


def skip_backtick(text: str, i: int, where: str, line: int) -> int:
    j = i + 1
    while j < len(text) and text[j] != "`":
        j += 2 if text[j] == "\\" else 1
    if j >= len(text):
        raise not_shell(where, line, "the backtick opened here is never closed")
    return j + 1


def skip_dollar(text: str, i: int, where: str, line: int) -> int:
    """The index after `$( )`, `$(( ))` or `${ }` starting at text[i] (its quotes and nested expansions skipped)."""
    opener = text[i + 1]
    close = ")" if opener == "(" else "}"
    depth, j = 0, i + 1
    while j < len(text):
        c = text[j]
        if c in "'\"" and not (c == "'" and close == "}"):
            j = skip_quote(text, j, where, line)
            continue
        if c == "\\":
            j += 2
            continue
        if c == "`":
            j = skip_backtick(text, j, where, line)
            continue
        if c == "#" and close == ")" and text[j - 1] in " \t\n":  # a comment inside $( )
            while j < len(text) and text[j] != "\n":
                j += 1
            continue
        if c == opener:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise not_shell(where, line, f"the ${opener} opened here is never closed")


def _skip_part(text: str, j: int, where: str, line: int) -> int | None:
    """The index after the quoted string, `\\x` escape, `$( )` / `$(( ))` / `${ }` or backticks starting at text[j];
    None where none starts there."""
    c = text[j]
    if c in "'\"":
        return skip_quote(text, j, where, line)
    if c == "\\":
        return j + 2
    if c == "$" and text[j + 1:j + 2] in ("(", "{"):
        return skip_dollar(text, j, where, line)
    if c == "`":
        return skip_backtick(text, j, where, line)
    return None


def _skip_array(text: str, i: int, where: str, line: int) -> int:
    """The index after the `( ... )` of an array assignment at text[i] (comments and newlines inside)."""
    j = i + 1
    while j < len(text):
        c = text[j]
        part = _skip_part(text, j, where, line)
        if part is not None:
            j = part
        elif c == "#" and text[j - 1] in " \t\n(":
            while j < len(text) and text[j] != "\n":
                j += 1
        elif c == ")":
            return j + 1
        else:
            j += 1
    raise not_shell(where, line, "the array's ( opened here is never closed", "NAME=( words )")


def _is_assign_prefix(word: str) -> bool:
    name = word[:-1].rstrip("+").split("[", 1)[0]
    return word.endswith("=") and name.isidentifier() and name.isascii()


def _read_heredocs(text: str, i: int, pending: list, toks: list) -> int:
    """Read the bodies of the heredocs opened on the line that ends at text[i-1]; returns where the next line is."""
    for at, strip, delim, quoted in pending:
        lines = []
        while i < len(text):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            ln = text[i:end]
            i = end + 1
            if (ln.lstrip("\t") if strip else ln) == delim:
                break
            lines.append(ln.lstrip("\t") if strip else ln)
        toks[at] = toks[at]._replace(body="".join(ln + "\n" for ln in lines), quoted=quoted)
    pending.clear()
    return i


def _delimiter(word: str) -> tuple[str, bool]:
    """A heredoc delimiter with its quotes removed, and whether it had any (then the body is not expanded)."""
    quoted = any(c in word for c in "'\"\\")
    return "".join(c for c in word if c not in "'\"\\"), quoted


def tokenize(text: str, where: str) -> list[Tok]:
    toks: list[Tok] = []
    pending: list = []  # heredocs opened on this line: (token index, strip tabs, delimiter, quoted)
    want_delim = None
    i, line = 0, 1
    while i < len(text):
        c = text[i]
        if c in " \t\r":
            i += 1
        elif c == "\\" and text[i + 1:i + 2] == "\n":
            i += 2
            line += 1
        elif c == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
        elif c == "\n":
            toks.append(Tok("nl", "\n", line))
            i += 1
            line += 1
            if pending:
                start = i
                i = _read_heredocs(text, i, pending, toks)
                line += text.count("\n", start, i)
        elif c == "(" and text[i + 1:i + 2] == "(" and _command_starts(toks):
            j = _skip_arith(text, i, where, line)
            toks.append(Tok("arith", text[i + 2:j - 2], line))
            i = j
        elif c in "<>" and text[i + 1:i + 2] == "(":  # <( ) / >( ): process substitution, a word
            j = _word_end(text, skip_dollar(text, i, where, line), where, line)
            toks.append(Tok("word", text[i:j], line))
            line += text.count("\n", i, j)
            i = j
        elif c in META:
            op = next(o for o in OPS if text.startswith(o, i))
            toks.append(Tok("op", op, line))
            i += len(op)
            if op in ("<<", "<<-"):
                want_delim = (len(toks) - 1, op == "<<-")
        else:
            j = _word_end(text, i, where, line)
            word = text[i:j]
            line += word.count("\n")
            if word.isdigit() and text[j:j + 1] in ("<", ">"):
                toks.append(Tok("io", word, line))
            else:
                toks.append(Tok("word", word, line))
            if want_delim is not None:
                delim, quoted = _delimiter(word)
                pending.append((want_delim[0], want_delim[1], delim, quoted))
                want_delim = None
            i = j
    toks.append(Tok("nl", "\n", line))
    if pending:
        _read_heredocs(text, len(text), pending, toks)
    return toks


def _command_starts(toks: list[Tok]) -> bool:
    """Whether a command starts here (where `((` opens an arithmetic command, not two subshells)."""
    if not toks or toks[-1].kind == "nl":
        return True
    last = toks[-1]
    return (last.kind == "op" and last.text in (";", "&&", "||", "|", "&")) or (
        last.kind == "word" and last.text in ("if", "elif", "while", "until", "then", "do", "else", "!", "{"))


def _skip_arith(text: str, i: int, where: str, line: int) -> int:
    """The index after a `(( ... ))` command starting at text[i]."""
    depth, j = 0, i
    while j < len(text):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise not_shell(where, line, "the (( opened here is never closed")


def _word_end(text: str, i: int, where: str, line: int) -> int:
    j = i
    while j < len(text):
        c = text[j]
        if c == "'" and text[j - 1:j] == "$" and j > i:  # $'...': ANSI-C quoting, escapes inside
            k = j + 1
            while k < len(text) and text[k] != "'":
                k += 2 if text[k] == "\\" else 1
            j = k + 1
            continue
        part = _skip_part(text, j, where, line)
        if part is not None:
            j = part
        elif c == "(" and _is_assign_prefix(text[i:j]):
            j = _skip_array(text, j, where, line)
        elif c in META:
            break
        else:
            j += 1
    return min(j, len(text))
