"""Measured kernel tables a hardware spec names (`Accelerator.kernel_tables`), read into regular grids.

The tables live in `hardware_specs/kernels/<part>/` (copied from NVIDIA AIConfigurator's measurements by
`hardware_specs/kernels/import_tables.py`; source, licence and framework per table in that folder's README.md and
sources.csv). A GEMM table holds one latency per (dtype, m, n, k) on a grid of 74 m x 22 n x 22 k values
(Y[m, n] = X[m, k] W[n, k]^T; m = tokens). `gemm_grid` turns one dtype of it into a dense array for vectorised
lookups (`cost.kernel_lookup.gemm_table_time`), filling its holes:

* **Holes.** The grid leaves out n = k = 65536, and the collector skipped shapes with m*n or m*k >= 2^31 (on
  H100 bf16: 116 of the 74 x 22 x 22 points). They are the largest shapes, where a GEMM is compute-bound, so a
  hole takes the time of the nearest measured shape below it (along m, then k, then n) scaled by the ratio of
  that dimension (FLOPs = 2 m n k). `GemmGrid.measured` marks them.
* **Measured non-monotonicity is kept.** On H100 bf16, 29% of the points take more than 2% longer than a shape
  that contains them (m = 193 x n = 51200 x k = 512: 0.061 ms; m = 256: 0.034 ms): the library picks another
  kernel there, and a framework calling it pays that. Forcing t to be monotone (a smaller GEMM as a padded
  larger one) would price a kernel nobody runs. Between grid points the interpolation is monotone along each
  axis: piecewise linear in logs, never outside its two neighbours.
"""

from __future__ import annotations

import gzip
import io
import zlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from ..errors import InputError

KERNELS = Path(str(resources.files("perfmodel.hardware_specs") / "kernels"))  # the catalogue's tables (package data)


def table_path(relative: str) -> Path:
    """A table named in a spec (relative to hardware_specs/kernels/, or absolute for a user's own)."""
    path = Path(relative)
    return path if path.is_absolute() else KERNELS / path


@dataclass(frozen=True)
class GemmGrid:
    """One dtype of a GEMM table on its grid: seconds per call at every (m, n, k) of the axes."""

    table: str  # as the spec names it
    dtype: str  # the plan's precision: bf16, fp8, fp4
    m: np.ndarray  # axis values, ascending
    n: np.ndarray
    k: np.ndarray
    seconds: np.ndarray  # (len m, len n, len k), holes filled (module docstring)
    measured: np.ndarray  # bool, same shape: False where the collector skipped the shape

    @property
    def label(self) -> str:
        """How a breakdown names what priced an op: 'table h100_sxm/gemm bf16'."""
        return f"table {self.table.removesuffix('.csv.gz')} {self.dtype}"


@lru_cache(maxsize=None)
def _rows(table: str) -> dict[str, str]:
    """The GEMM table `table`'s rows by dtype, as CSV text of m,n,k,latency_ms (the file read once per process;
    numpy parses only the dtypes a plan asks for, and no pandas: `perfmodel search` stays a light import)."""
    path = table_path(table)
    if not path.is_file():
        raise InputError(f"kernel table {path}: file does not exist; valid: a table under hardware_specs/kernels/ "
                         f"(hardware_specs/kernels/import_tables.py writes them) or an absolute path")
    try:
        header, _, body = gzip.decompress(path.read_bytes()).decode().partition("\n")
    except (OSError, ValueError, EOFError, zlib.error) as e:  # not gzip, corrupt, not text
        raise InputError(f"kernel table {path}: unreadable ({e}); valid: a gzipped CSV dtype,m,n,k,latency_ms") from None
    if header.strip().split(",") != ["dtype", "m", "n", "k", "latency_ms"]:
        raise InputError(f"kernel table {path}: header {header.strip()!r}; valid: dtype,m,n,k,latency_ms")
    body = body.strip().replace("\r\n", "\n")
    if not body or body.count(",") != 4 * (body.count("\n") + 1):  # 4 commas a row, counted at C speed
        lines = body.split("\n")
        bad = next((i + 2 for i, line in enumerate(lines) if line.count(",") != 4), 2)
        raise InputError(f"kernel table {path}: line {bad} does not have 5 fields (or the table has no rows); "
                         f"valid: rows dtype,m,n,k,latency_ms")
    return _by_dtype(body)


def _by_dtype(body: str) -> dict[str, str]:
    """CSV rows `dtype,...` -> {dtype: the rows without their dtype}. Rows grouped by dtype (as import_tables.py
    writes them) are cut into blocks with string searches; any other order falls back to a loop over lines."""
    blocks, pos = {}, 0
    while pos < len(body):
        dtype = body[pos:body.find(",", pos)]
        last = body.rfind("\n" + dtype + ",", pos)  # the block's last row (or its first, if it has one)
        end = body.find("\n", pos if last < 0 else last + 1)
        end = len(body) if end < 0 else end
        block = body[pos:end]
        if dtype in blocks or block.count("\n") != block.count("\n" + dtype + ","):  # another dtype inside
            break
        blocks[dtype] = block[len(dtype) + 1:].replace("\n" + dtype + ",", "\n")
        pos = end + 1
    else:
        return dict(sorted(blocks.items()))
    by_dtype: dict[str, list[str]] = {}
    for line in body.splitlines():
        dtype, _, numbers = line.partition(",")
        by_dtype.setdefault(dtype, []).append(numbers)
    return {d: "\n".join(rows) for d, rows in sorted(by_dtype.items())}


def table_dtypes(table: str) -> frozenset[str]:
    """The dtypes a GEMM table measured (bf16, fp8, fp4): the plan precisions it can price."""
    return frozenset(_rows(table))


@lru_cache(maxsize=None)
def gemm_grid(table: str, dtype: str) -> GemmGrid:
    """`dtype`'s rows of the GEMM table `table` as a GemmGrid; InputError naming the dtypes it has."""
    rows = _rows(table)
    if dtype not in rows:
        raise InputError(f"kernel table {table} has no {dtype} GEMMs; it has: {', '.join(sorted(rows))}")
    try:
        data = np.loadtxt(io.StringIO(rows[dtype]), delimiter=",", ndmin=2)
    except ValueError as e:  # a field that is not a number, ragged rows
        raise InputError(f"kernel table {table_path(table)}: unreadable ({e}); valid: a gzipped CSV "
                         f"dtype,m,n,k,latency_ms") from None
    if data.shape[1] != 4:
        raise InputError(f"kernel table {table_path(table)}: rows need 5 columns; valid: dtype,m,n,k,latency_ms")
    return _grid(table, dtype, data)


def _grid(table: str, dtype: str, data: np.ndarray) -> GemmGrid:
    """Rows (m, n, k, latency_ms) of one dtype on their grid, holes filled (module docstring)."""
    axes = [np.unique(data[:, i]) for i in range(3)]
    for name, axis in zip("mnk", axes):
        if len(axis) < 2 or axis[0] <= 0:
            raise InputError(f"kernel table {table} ({dtype}): {name} takes {len(axis)} value(s) from {axis[0]:g}; "
                             f"valid: at least 2 positive values on each of m, n, k (the lookup interpolates)")
    if not (data[:, 3] > 0).all():
        raise InputError(f"kernel table {table} ({dtype}): a latency_ms <= 0; valid: positive milliseconds")
    t = np.full([len(a) for a in axes], np.nan)
    idx = tuple(np.searchsorted(a, data[:, i]) for i, a in enumerate(axes))
    t[idx] = data[:, 3] * 1e-3  # ms -> s
    measured = ~np.isnan(t)
    # holes: the nearest measured shape below along m, then k, then n, scaled by that dimension (compute-bound
    # there: 2 m n k FLOPs)
    for axis in (0, 2, 1):
        t = np.moveaxis(t, axis, 0)
        for i in range(1, t.shape[0]):
            hole = np.isnan(t[i])
            t[i][hole] = t[i - 1][hole] * axes[axis][i] / axes[axis][i - 1]
        t = np.moveaxis(t, 0, axis)
    if np.isnan(t).any():
        raise InputError(f"kernel table {table} ({dtype}): a shape has no measured shape below it to scale from; "
                         f"valid: a table measured at the smallest m, n and k of its grid")
    return GemmGrid(table=table, dtype=dtype, m=axes[0], n=axes[1], k=axes[2], seconds=t, measured=measured)
