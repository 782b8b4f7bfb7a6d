"""A sweep's results folder: `sweep.json` (the sweep as run, its code version and chunk keys) and one Parquet file
per finished chunk under `chunks/`, each written whole or not at all (files.write_atomic). A crash or Ctrl-C loses
only the chunks in flight; `--resume` runs the chunks whose files are missing. Read the rows with
`load_results(DIR)`, pandas (`pd.read_parquet(DIR / "chunks")`) or DuckDB (`SELECT * FROM 'DIR/chunks/*.parquet'`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError
from ..files import check_creatable, write_atomic
from .schema import Sweep

MANIFEST = "sweep.json"


def manifest(sweep: Sweep, version: str, keys: list[str], points: int) -> dict:
    """The folder's sweep.json: the sweep as last run (the report reads its objectives and constraints), what its rows
    depend on (`Sweep.rows_key`: a folder takes only the same), the code version and the chunks' keys."""
    return {"sweep": sweep.model_dump(mode="json"), "rows_key": sweep.rows_key(), "code_version": version,
            "points": points, "chunks": keys}


def open_store(out: Path, sweep: Sweep, man: dict, resume: bool) -> set[str]:
    """Prepare folder `out` for this sweep and return the keys of its finished chunks. Refused (nothing written):
    a folder that holds another sweep (other rows: `Sweep.rows_key`) or another code version's results, or this
    sweep's without --resume, or --resume where there is nothing to resume. With --resume after a code change the
    old version's chunks move to superseded/<version>/ (kept; chunks/ holds one version's rows)."""
    path = out / MANIFEST
    if path.is_file():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise InputError(f"--out {out}: {MANIFEST} is not readable ({err}); valid: a new folder, or a sweep's "
                             "results folder") from None
        done = finished(out) & set(man["chunks"])
        if old.get("rows_key") != man["rows_key"]:
            raise InputError(f"--out {out} holds the results of another sweep ({old.get('sweep', {}).get('name')!r}: "
                             "its systems, axes, sampling, workloads or chunks differ); valid: a new --out folder "
                             "(nothing there was changed)")
        if old.get("code_version") != man["code_version"] and not resume:
            raise InputError(f"--out {out} holds this sweep's results from another perfmodel version "
                             f"({old.get('code_version')} != {man['code_version']}); valid: --resume (runs every "
                             "chunk again, beside the old files) or a new --out folder")
        if not resume:
            raise InputError(f"--out {out} already holds this sweep ({len(done)} of {len(man['chunks'])} chunks "
                             "finished); valid: --resume to run the rest, or a new --out folder")
        (out / "chunks").mkdir(exist_ok=True)
        for stray in (out / "chunks").glob(".*"):  # a write a crash cut short (files.write_atomic's temporary)
            stray.unlink(missing_ok=True)
        stale = [f for f in (out / "chunks").glob("*.parquet") if f.stem not in man["chunks"]]
        if stale:  # another code version's, or a changed model or spec file's: kept, out of the way of a glob
            keep = out / "superseded" / str(old.get("code_version"))
            keep.mkdir(parents=True, exist_ok=True)
            for f in stale:
                f.rename(keep / f.name)
        write_manifest(out, man)
        return done
    if resume:
        raise InputError(f"--resume: {out} holds no sweep ({MANIFEST} not found); valid: the --out folder of an "
                         "earlier run of this sweep, or drop --resume")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--out {out} exists and is not an empty folder; valid: a new or empty folder")
    check_creatable(out / MANIFEST, "--out")
    (out / "chunks").mkdir(parents=True, exist_ok=True)
    write_manifest(out, man)
    return set()


def write_manifest(out: Path, man: dict) -> None:
    write_atomic(out / MANIFEST, lambda tmp: Path(tmp).write_text(json.dumps(man, indent=1)), "--out")


def finished(out: Path) -> set[str]:
    """Keys of the chunks whose Parquet file is there (written whole: write_atomic)."""
    folder = out / "chunks"
    return {f.stem for f in folder.glob("[!.]*.parquet")} if folder.is_dir() else set()


def write_chunk(out: Path, key: str, rows: list[dict]) -> None:
    """One chunk's rows as `chunks/<key>.parquet` (pyarrow), whole or not at all."""
    import pandas as pd

    df = pd.DataFrame(rows)
    (out / "chunks").mkdir(parents=True, exist_ok=True)
    write_atomic(out / "chunks" / f"{key}.parquet", lambda tmp: df.to_parquet(tmp, index=False), "--out")


def load_results(out) -> tuple[dict, "object"]:
    """(manifest, rows): the sweep's finished rows as one DataFrame, in the sweep's order (workload as listed, then
    point), from the chunks of the manifest's code version."""
    import pandas as pd

    out = Path(out)
    path = out / MANIFEST
    if not path.is_file():
        raise InputError(f"{out}: not a sweep's results folder ({MANIFEST} not found); valid: the --out folder of "
                         "perfmodel sweep")
    try:
        man = json.loads(path.read_text())
        keys = [k for k in man["chunks"] if (out / "chunks" / f"{k}.parquet").is_file()]
        if not keys:
            raise InputError(f"{out}: no finished chunk yet (0 of {len(man['chunks'])}); valid: a sweep that has run")
        df = pd.concat([pd.read_parquet(out / "chunks" / f"{k}.parquet") for k in keys], ignore_index=True)
        order = {w["name"]: i for i, w in enumerate(man["sweep"]["workloads"])}
        man["sweep"]["objectives"], man["sweep"]["axes"], man["sweep"]["constraints"], man["points"]  # noqa: B018
    except InputError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:  # pyarrow's errors are ValueErrors
        raise InputError(f"{out}: the sweep's results are not readable ({type(err).__name__}: {err}); valid: the "
                         "--out folder of a perfmodel sweep run, as it wrote it") from None
    df = df.assign(_w=df["workload"].map(order)).sort_values(["_w", "point"], kind="stable").drop(columns="_w")
    return man, df.reset_index(drop=True)
