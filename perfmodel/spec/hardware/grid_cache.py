"""Grids built from measured kernel tables (spec.hardware.kernel_tables), kept on disk between processes.

Parsing a GEMM table's text and filling its grid's holes takes ~40-80 ms, binning an attention table ~35 ms (on an
H100 system a fifth of what `perfmodel search` does in-process, 2-core sandbox); reading the built arrays back takes
~2 ms. PERFMODEL_CACHE_DIR moves the cache; set empty, nothing is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from pathlib import Path

import numpy as np

DEFAULT_CACHE = Path.home() / ".cache" / "perfmodel" / "kernel_grids"


def grid_cache_dir() -> Path | None:
    """Where built grids are kept: $PERFMODEL_CACHE_DIR/kernel_grids, else ~/.cache/perfmodel/kernel_grids;
    None (no disk cache) where PERFMODEL_CACHE_DIR is set empty."""
    root = os.environ.get("PERFMODEL_CACHE_DIR")
    if root is None:
        return DEFAULT_CACHE
    return Path(root) / "kernel_grids" if root else None


def disk_cached(kind: str, path: Path, table: str, build, result_type, fields: tuple[str, ...], **strings: str):
    """`build()`, a `result_type` dataclass of `table` (the table file at `path`), the numpy arrays `fields` and the
    `strings`, read from the disk cache where an earlier process built it from the same table bytes with the same
    grid code (spec.hardware.kernel_tables). The key hashes
    the table file's bytes, `kind`, the strings and this file's source, so an edited table or grid code never reads
    a stale grid. A cache that cannot be read or written is passed by (the grid built again); an InputError from
    `build` propagates and nothing is written."""
    folder = grid_cache_dir()
    try:
        data = Path(path).read_bytes()
    except OSError:
        return build()  # the build names the missing file
    key = hashlib.sha256(data + repr((kind, sorted(strings.items()))).encode() + _SOURCE_HASH).hexdigest()[:32]
    target = None if folder is None else folder / f"{kind}-{key}.npz"
    if target is not None and target.is_file():
        try:
            with np.load(target, allow_pickle=False) as z:
                arrays = {f: z[f] for f in fields}
            return result_type(table=table, **strings, **arrays)
        except (OSError, ValueError, KeyError, zlib.error, EOFError):
            pass  # a torn or foreign file: built again below and replaced
    grid = build()
    if target is not None:
        tmp = target.with_name(f"{target.stem}.{os.getpid()}.tmp.npz")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            np.savez(tmp, **{f: getattr(grid, f) for f in fields})
            os.replace(tmp, target)  # atomic: a concurrent reader sees the whole file or none
        except OSError:  # a full or read-only disk: no cache, and no partial file left
            with contextlib.suppress(OSError):
                tmp.unlink()
    return grid


# the grid code's own source: a grid built by other code is not read back
_SOURCE_HASH = hashlib.sha256(b"".join(Path(__file__).with_name(n).read_bytes()
                                       for n in ("kernel_tables.py", "grid_cache.py"))).digest()
