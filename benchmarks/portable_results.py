"""Rewrite result files written before perfmodel kept machine paths out of them (issue 35), in place.

    python benchmarks/portable_results.py [--old-root DIR ...] [FOLDER ...]   (default: benchmarks/results)

What the writers now do, applied to old files: a measurement names its plan by the file name beside it; the
calibrate command a spec cites names its output by file name (`calibrate.machine.calibration.command_line`); and in logs and
reports the checkout's folder becomes relative, its virtual environment `$PYTHON`, the temporary folder `$TMP`
and the home folder `~` (`files.portable_text`). --old-root: the checkout folder the files were made in, where it
was not this one. Prints each file it changed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from perfmodel.files import portable_text

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".json", ".yaml", ".yml", ".log", ".txt", ".csv", ".md"}


def portable(text: str, roots: list[str]) -> str:
    """The old checkouts' paths made relative (their virtual environment $PYTHON), then this machine's places as
    the writers now write them (`files.portable_text`)."""
    text = re.sub(r"--output (/[^\s;)'\"`]*/)([^/\s;)'\"`]+)", r"--output \2", text)
    for root in sorted(roots, key=len, reverse=True):
        text = text.replace(f"{root}/.venv", "$PYTHON").replace(f"{root}/", "").replace(root, ".")
    return portable_text(text)


def rewrite(path: Path, roots: list[str]) -> bool:
    text = path.read_text()
    new = text
    if path.name.endswith((".measured.json", ".served.json")):
        data = json.loads(text)
        ref = data.get("plan_file", "")
        if ref.startswith("/"):
            new = new.replace(json.dumps(ref), json.dumps(ref.rsplit("/", 1)[-1]))
    new = portable(new, roots)
    if new != text:
        path.write_text(new)
    return new != text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path, default=[ROOT / "benchmarks" / "results"])
    ap.add_argument("--old-root", action="append", default=[], help="checkout folder the files were made in")
    a = ap.parse_args(argv)
    roots = [str(ROOT), *a.old_root]
    for folder in a.folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and rewrite(path, roots):
                print(f"rewrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
