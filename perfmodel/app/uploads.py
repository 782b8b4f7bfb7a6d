"""The checks every upload of files to the page shares (framework configs, profiler traces): how many files, and
where each one lands in the request's private folder. What a file may hold is its uploader's to check."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import InputError


def check_count(files, what: str, most: int, valid: str) -> None:
    """At least one file and at most `most`; InputError in one line naming `what` ('config upload') otherwise."""
    if not isinstance(files, list) or not files:
        raise InputError(f"{what}: no file; valid: {valid}")
    if len(files) > most:
        raise InputError(f"{what}: {len(files)} files; valid: at most {most}")


def upload_path(sent: str, folder: Path, taken: list[Path], what: str, name: re.Pattern, valid: str) -> Path:
    """Where the file the browser sent as `sent` lands: its base name (a path's folders dropped) inside `folder`,
    matching `name`; InputError in one line for another name, a name already sent, or one leaving the folder."""
    base = re.split(r"[/\\]", sent)[-1]
    if not name.fullmatch(base) or base in (".", ".."):
        raise InputError(f"{what}: file name {sent!r}; valid: {valid}")
    path = folder / base
    if path in taken:
        raise InputError(f"{what}: {base!r} is sent twice; valid: each file once")
    if path.resolve().parent != folder.resolve():  # the name pattern rules this out; checked where it is written
        raise InputError(f"{what}: file name {sent!r} leaves the upload folder")
    return path
