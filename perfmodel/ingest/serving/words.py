"""A serving or benchmark command line as words and flags, read as the shell and Python's argparse would read it,
never run.

`command_words` splits the text as bash does for one simple command (`shlex` in POSIX mode: quotes, escapes,
backslash-newline continuations, `#` comments), keeps `export NAME=VALUE` lines and `NAME=VALUE` prefixes as
environment variables, and drops a trailing `&`. `flags_of` walks the words after the program as argparse does:
`--flag=value` and `--flag value`, a switch that takes no value (the caller's `switches`), `--no-flag` for a
vLLM BooleanOptionalAction, a unique prefix of a known flag (argparse's `allow_abbrev`, on by default: the vLLM
recipes' `--random-input 2048` is `--random-input-len`), and vLLM's underscore spellings (`--max_num_seqs`:
vllm/utils/argparse_utils.py FlexibleArgumentParser turns `_` into `-` in flag names) and dotted keys of a JSON
flag (`--speculative-config.method mtp`, the same parser's `--json-arg.key value`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ...errors import InputError

_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_NUMBER = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


@dataclass(frozen=True)
class Flag:
    """One flag of a command as written: `written` (its spelling, `-tp`, `--max_num_seqs`), `name` (the canonical
    long name it resolved to, `--tensor-parallel-size`), its value (None for a switch, "false" for `--no-X`), a
    dotted sub-key (`--speculative-config.method`: "method"), its position among the command's words, and how it
    was read where that needs saying (an abbreviation)."""

    written: str
    name: str
    value: str | None
    word: int
    sub: str = ""
    how: str = ""


def command_words(text: str, what: str) -> tuple[list[str], dict[str, str]]:
    """The words of the one command in `text` and the environment variables it sets (`export` lines and `NAME=V`
    prefixes). InputError, naming `what`, for text the shell cannot split, none or several commands."""
    text = str(text).replace("\\\r\n", " ").replace("\\\n", " ")
    env: dict[str, str] = {}
    commands: list[list[str]] = []
    for line in text.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError as err:
            raise InputError(f"{what} {line.strip()[:80]!r}: the shell cannot split it ({err}); valid: one command "
                             "line with its quotes closed") from None
        while words and words[-1] in ("&", ";"):
            words.pop()
        if not words:
            continue
        if words[0] == "export":
            env.update(w.split("=", 1) for w in words[1:] if _ENV.match(w))
            continue
        while words and _ENV.match(words[0]):
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        if words:
            commands.append(words)
    if not commands:
        raise InputError(f"{what} is empty; valid: one command line, e.g. 'vllm serve meta-llama/Llama-3.1-8B-Instruct "
                         "-tp 1'")
    if len(commands) > 1:
        firsts = ", ".join(repr(" ".join(c[:3])) for c in commands[:3])
        raise InputError(f"{what} holds {len(commands)} commands ({firsts}); valid: one command (its continuation "
                         "lines ending in a backslash)")
    return commands[0], env


def is_flag(word: str) -> bool:
    """A word argparse reads as an option: starts with '-' and is not a number (SGLang's `--chunked-prefill-size
    -1` takes -1 as a value)."""
    return word.startswith("-") and len(word) > 1 and not _NUMBER.fullmatch(word)


def flags_of(words: list[str], start: int, known: dict[str, str], switches: set[str],
             what: str) -> tuple[list[Flag], list[tuple[int, str]]]:
    """The flags of `words[start:]` and the positional words left over ((position, word)).

    `known` maps every spelling the program accepts (long names, short forms such as `-tp`) to its canonical long
    name; `switches` are the canonical names that take no value. A flag not in `known` keeps its own spelling and
    takes the next word as its value unless that word is a flag (it may be a switch: the caller names it unknown
    either way)."""
    flags: list[Flag] = []
    loose: list[tuple[int, str]] = []
    i = start
    while i < len(words):
        word = words[i]
        if not is_flag(word):
            loose.append((i, word))
            i += 1
            continue
        head, eq, inline = word.partition("=")
        name, sub, how = _resolve(head, known)
        negated = False
        if name not in known.values() and name.startswith("--no-"):
            positive, _, how2 = _resolve("--" + name[5:], known)
            if positive in switches:
                name, negated, how = positive, True, how2
        if negated:
            if eq:
                raise InputError(f"{what}: {word!r} takes no value; valid: {head} alone")
            flags.append(Flag(head, name, "false", i, sub, how))
            i += 1
            continue
        if name in switches and not sub:
            value, at = (inline if eq else None), i
            if not eq and i + 1 < len(words) and words[i + 1].lower() in ("true", "false"):
                value, i = words[i + 1], i + 1  # a switch written with its value, as a YAML config's key: true
            flags.append(Flag(head, name, value, at, sub, how))
            i += 1
            continue
        if eq:
            flags.append(Flag(head, name, inline, i, sub, how))
            i += 1
        elif i + 1 < len(words) and not is_flag(words[i + 1]):
            flags.append(Flag(head, name, words[i + 1], i, sub, how))
            i += 2
        else:
            flags.append(Flag(head, name, None, i, sub, how))
            i += 1
    return flags, loose


def _resolve(head: str, known: dict[str, str]) -> tuple[str, str, str]:
    """(canonical name, dotted sub-key, how it was read) of a flag's spelling."""
    if head in known:
        return known[head], "", ""
    base, dot, sub = head.partition(".")
    if dot and base in known:
        return known[base], sub, ""
    if head.startswith("--"):
        dashed = "--" + head[2:].replace("_", "-")
        if dashed in known:
            return known[dashed], "", f"vLLM's FlexibleArgumentParser reads {head} as {dashed}"
        if dot:
            dashed_base = "--" + base[2:].replace("_", "-")
            if dashed_base in known:
                return known[dashed_base], sub, ""
        prefixed = sorted({v for k, v in known.items() if k.startswith(dashed) and k.startswith("--")})
        if len(prefixed) == 1 and not dot:
            return prefixed[0], "", f"argparse's abbreviation of {prefixed[0]}"
    return head, "", ""
