"""The page's forms, read off the CLI's own argparse parsers, and the argv a filled form is run as.

A field is a CLI flag: its name, help, default, choices and kind (text, choice, checkbox), and where the page
shows it: its section, plain label and whether it is folded away (`form_groups`). Flags whose values
name files on the server (their type is `cli.argtypes.path`: --plan, --save-plan, --plot, --storage, ...) are
left out: the page reads no path (a model or spec file arrives as an upload). A refusal is the CLI's own one-line message, with the
field it names (`field_of`) so the page can show it beside that field.
"""

from __future__ import annotations

import argparse
import re

from ..cli.main import COMMANDS, command_module
from ..errors import InputError
from ..files import looks_like_path
from . import form_groups

OUTPUT_FLAGS = {"--format", "--help", "--versus"}  # the page asks for JSON itself; --versus prints a second table
UPLOADABLE = {"--model": "model", "--hardware": "hardware"}  # flags a file upload may fill


class PageParser(argparse.ArgumentParser):
    """The CLI's parser with its one-line error raised as an InputError (the CLI prints it and exits 2)."""

    def error(self, message):
        raise InputError(f"{self.prog}: {message}")


def parser(command: str) -> argparse.ArgumentParser:
    """`perfmodel COMMAND`'s own parser (`cli.<command>_command.add_parser`), raising instead of exiting."""
    if command not in COMMANDS:
        raise InputError(f"command = {command!r}; valid: {', '.join(COMMANDS)}")
    sub = PageParser(prog="perfmodel").add_subparsers(dest="cmd", parser_class=PageParser)
    p = command_module(command).add_parser(sub, command, COMMANDS[command][1])
    p.set_defaults(cmd=command)  # as the CLI's top-level parser sets it
    return p


def fields(command: str) -> list[dict]:
    """The form of `command`: one entry per flag the page may set (module docstring)."""
    out = []
    p = parser(command)
    for act in p._actions:
        flag = next((o for o in act.option_strings if o.startswith("--")), None)
        if flag is None or getattr(act.type, "names_path", False) or flag in OUTPUT_FLAGS:
            continue
        # --moe-overlap / --no-moe-overlap: ticked is the flag, unticked leaves it to the stack (its release's recipe)
        choices = act.choices if act.choices is not None else getattr(act.type, "options", None)  # stack names
        if isinstance(act, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
            kind = "checkbox"
        elif choices is not None:
            kind = "choice"
        else:
            kind = "text"
        default = act.default if act.default not in (None, argparse.SUPPRESS, False, []) else None
        out.append({"flag": flag, "name": act.dest, "kind": kind, "help": (act.help or "").replace("%%", "%"),
                    "choices": [str(c) for c in choices] if choices is not None else None,
                    "default": None if default is None else str(default), "required": bool(act.required),
                    "repeat": isinstance(act, argparse._AppendAction),
                    # choices a type offers (stack names) are suggestions: the parser also takes a release@version
                    "open": act.choices is None and choices is not None,
                    "upload": UPLOADABLE.get(flag), **form_groups.place(command, flag)})
    return out


def fields_by_flag(command: str) -> dict[str, dict]:
    """`fields(command)` by flag."""
    return {f["flag"]: f for f in fields(command)}


def argv(command: str, values: dict[str, object], uploads: dict[str, str] | None = None) -> list[str]:
    """The CLI arguments of a filled form: `values` by flag ("--tp": "8"; a checkbox true/false; a repeated flag a
    list), empty values left out (the CLI's default), `uploads` ("--model": server-side path of an uploaded file)
    in place of the typed value. InputError for a flag the form does not have or a path in a preset field."""
    known = fields_by_flag(command)
    out: list[str] = []
    for flag, value in values.items():
        f = known.get(flag)
        if f is None:
            raise InputError(f"{flag} is not a field of {command}; valid: {', '.join(known)}")
        if value is None or value == "" or value is False or value == []:
            continue
        if f["kind"] == "checkbox":
            if value not in (True, "true", "on", "1"):
                raise InputError(f"{flag} = {value!r}: a checkbox is true or false")
            out.append(flag)
            continue
        for v in value if isinstance(value, list) else [value]:
            text = str(v).strip()
            if flag in UPLOADABLE and not (uploads and flag in uploads) and (looks_like_path(text) or
                                                                             re.search(r"[/\\]", text)):
                raise InputError(f"{flag} = {text!r}: the page reads no file path; valid: a preset name, or "
                                 "upload the file")
            out += [flag, text]
    for flag, path in (uploads or {}).items():
        if flag not in UPLOADABLE or flag not in known:
            raise InputError(f"upload for {flag}: valid: {', '.join(u for u in UPLOADABLE if u in known)}")
        out = _drop(out, flag) + [flag, path]
    return out


def _drop(args: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        else:
            out.append(a)
    return out


def parse(command: str, args: list[str]) -> argparse.Namespace:
    """The CLI's parse of `perfmodel COMMAND ARGS`; InputError with its one-line message."""
    return parser(command).parse_args(args)


def field_of(message: str, command: str) -> str | None:
    """The flag a refusal names: `--flag` in it, else a field's name as `name =` / `name=` (the cost model's
    messages, e.g. "tp=3 does not divide ...", or "unknown model ..."), else None (shown above the form)."""
    flags = [f["flag"] for f in fields(command)]
    for flag in sorted(flags, key=len, reverse=True):
        if re.search(re.escape(flag) + r"(?![\w-])", message):
            return flag
    for flag in sorted(flags, key=len, reverse=True):
        name = flag[2:].replace("-", "_")
        if re.search(r"(?<![\w.-])" + re.escape(name) + r"\s*=", message) or re.search(
                r"\bunknown " + re.escape(name) + r"\b", message):
            return flag
    return None
