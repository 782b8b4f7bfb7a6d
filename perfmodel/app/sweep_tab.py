"""The Sweep tab: a finished sweep's results folder read back as `perfmodel sweep report DIR [--objective X
--objective Y] --format json` reads it (`sweep.analysis.report`), with every point's objectives as `--format csv` lists
them (`sweep.analysis.point_table`) for the scatter, and the sweeps found under the default folder.

The folder is a path on the machine the server runs on (relative: to the server's working directory). It is only
read: its sweep.json, then its chunks/*.parquet through `sweep.store.load_results`; nothing is written. A folder
that is not a sweep's, a sweep with no finished chunk, or an unknown objective is the report's one-line InputError.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from ..errors import InputError
from ..files import RUNS_DIR

ROOT = RUNS_DIR / "sweeps"  # where `perfmodel sweep SWEEP.yaml` writes without --out
MAX_FOUND = 200


def found(root: Path = ROOT) -> dict:
    """The sweeps under `root` (one folder each, holding sweep.json), newest first: name, folder, points, chunks
    finished of all; a folder whose manifest is not readable is left out."""
    out = []
    if root.is_dir():
        for d in root.iterdir():
            man = _manifest(d)
            if man is None:
                continue
            chunks = man.get("chunks") if isinstance(man.get("chunks"), list) else []
            done = sum((d / "chunks" / f"{k}.parquet").is_file() for k in chunks if isinstance(k, str))
            out.append({"name": str(man["sweep"].get("name") or d.name), "dir": str(d), "points": man.get("points"),
                        "chunks": len(chunks), "finished": done,
                        "objectives": list(man["sweep"].get("objectives") or []),
                        "modified": (d / "sweep.json").stat().st_mtime})
    out.sort(key=lambda s: -s["modified"])
    return {"root": str(root), "sweeps": out[:MAX_FOUND]}


def _manifest(d: Path) -> dict | None:
    try:
        man = json.loads((d / "sweep.json").read_text())
    except (OSError, ValueError):
        return None
    return man if isinstance(man, dict) and isinstance(man.get("sweep"), dict) else None


def folder(text) -> Path:
    """The results folder the page names: a path on this machine (~ expanded), holding a sweep's manifest."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("results folder: empty; valid: a sweep's results folder (the --out of perfmodel sweep), "
                         f"e.g. {ROOT}/NAME")
    path = Path(text.strip()).expanduser()
    if (path / "sweep.json").is_file() and _manifest(path) is None:
        raise InputError(f"{path}: sweep.json is not a sweep's manifest; valid: the --out folder of perfmodel sweep")
    return path


def objectives_of(x, y) -> list[str] | None:
    """The report's objectives: None (the sweep's own) when the page names none, else x and y (one when they are
    the same: the front of one objective)."""
    chosen = [o for o in (x, y) if o]
    if any(not isinstance(o, str) for o in chosen):
        raise InputError("objective: valid: an objective's name (text)")
    return list(dict.fromkeys(chosen)) or None


def results(data: dict) -> dict:
    """The report of folder `data["dir"]` on objectives `data["x"]`, `data["y"]` (default the sweep's), the feasible
    points on every objective they have a value for, and the CLI command that answers the same."""
    from ..sweep.analysis import analyse, plain
    from ..sweep.schema import OBJECTIVES

    x, y = data.get("x"), data.get("y")
    try:
        path = folder(data.get("dir"))
        objectives = objectives_of(x, y)
        rep, pts, man = analyse(path, objectives)  # a damaged folder is one line too (store.load_results)
    except InputError as err:  # the report's own message, beside the field it is about
        err.field = next((k for k, o in (("x", x), ("y", y)) if o and repr(o) in str(err)), None) or (
            "x" if str(err).startswith(("--objective", "objective")) else "dir")
        raise
    sweep = man["sweep"]
    axes = list(sweep["axes"])
    feas = pts[pts["feasible"]]
    # the pickers offer every objective the feasible points have a value for, the sweep's own first; the scatter
    # and its hover need the report's objectives only (another pair picked is another request)
    have = [o for o in dict.fromkeys([*rep.objectives, *sweep["objectives"], *OBJECTIVES])
            if o in feas and feas[o].notna().any()]
    points = {k: [plain(v) for v in feas[k]] for k in dict.fromkeys(["point", "system", *axes, *rep.objectives])}
    flags = " ".join(f"--objective {o}" for o in objectives or [])  # names: OBJECTIVES's, plain words
    return {"report": json.loads(rep.model_dump_json()), "point_axes": axes, "objectives": have, "points": points,
            "units": {o: {"direction": OBJECTIVES[o][0], "unit": OBJECTIVES[o][1], "what": OBJECTIVES[o][2]}
                      for o in OBJECTIVES},
            "command": f"perfmodel sweep report {shlex.quote(str(path))}" + (f" {flags}" if flags else "")}

