"""Measured kernel tables a hardware spec names (`Accelerator.kernel_tables`), read into regular grids.

The tables live in `hardware_specs/kernels/<part>/` (copied from NVIDIA AIConfigurator's measurements by
`hardware_specs/kernels/import_tables.py`; source, licence and framework per table in that folder's README.md and
sources.csv). A GEMM table holds one latency per (dtype, m, n, k) on a grid of 74 m x 22 n x 22 k values
(Y[m, n] = X[m, k] W[n, k]^T; m = tokens). `gemm_grid` turns one dtype of it into a dense array for vectorised
lookups (`cost.compute.kernel_lookup.gemm_table_time`), filling its holes:

* **Where a table lies.** A spec names a table relative to its own file's folder (a calibrated spec's own
  tables, `perfmodel calibrate` writes them beside it), relative to hardware_specs/kernels/ (the catalogue's), or
  by an absolute path (`table_path`). A spec read from a file (inside `spec_folder(its folder)`) holds a table
  beside it by its absolute path (`held_name`); a spec written to a file (inside `spec_folder(that folder)`)
  names it relative to that folder again (`written_name`): no written file holds a machine path.

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

import contextlib
import contextvars
import gzip
import io
import os
import zlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from ...errors import InputError
from .grid_cache import disk_cached

KERNELS = Path(str(resources.files("perfmodel.hardware_specs") / "kernels"))  # the catalogue's tables (package data)


# The folder of the spec file being read or written (`spec_folder`): what a relative table name is relative to.
# A context variable, not pydantic's validation context, which does not reach models nested in a Schema (its own
# __init__ validates them).
_SPEC_FOLDER: contextvars.ContextVar[Path | None] = contextvars.ContextVar("spec_folder", default=None)


@contextlib.contextmanager
def spec_folder(folder: str | Path):
    """Inside it, the Accelerators validated (a spec file read) and serialised (one written) name their tables
    relative to `folder`, the folder of that file (`held_name`, `written_name`)."""
    token = _SPEC_FOLDER.set(Path(folder))
    try:
        yield
    finally:
        _SPEC_FOLDER.reset(token)


def write_with_tables(obj, path: str | Path, what: str) -> Path:
    """Write a schema (a plan or measurement file) as JSON atomically (never half-written), its spec's kernel tables
    outside the catalogue named relative to the file's folder (`written_name`)."""
    from ...files import write_atomic

    with spec_folder(Path(path).parent):
        text = obj.model_dump_json(indent=2) + "\n"
    return write_atomic(path, lambda tmp: Path(tmp).write_text(text), what)


def current_spec_folder() -> Path | None:
    """The folder `spec_folder` set, or None outside one."""
    return _SPEC_FOLDER.get()


def table_path(name: str, folder: str | Path | None = None) -> Path:
    """Where the table a spec names lies: an absolute path as it is; a relative name beside the spec file (in
    `folder`, the folder of the file it was read from) if it is there, else under hardware_specs/kernels/."""
    path = Path(name)
    if path.is_absolute():
        return path
    if folder is not None and (Path(folder) / path).is_file():
        return (Path(folder) / path).resolve()
    return KERNELS / path


def held_name(name: str, folder: str | Path | None) -> str:
    """The name a loaded spec holds for the table it names `name` in a file in `folder`: a catalogue name as
    written, a table beside the file by its absolute path (found from any working directory; never written:
    `written_name`)."""
    path = table_path(name, folder)
    return name if path == KERNELS / name else str(path)


def written_name(name: str, folder: str | Path) -> str:
    """The name a spec file written into `folder` gives the table a spec holds as `name`: a catalogue name as it
    is, any other table relative to `folder` (`perfmodel calibrate`'s own tables: beside the spec), so that no
    written file holds a machine's absolute path."""
    path = Path(name)
    if not path.is_absolute():
        return name
    if path.is_relative_to(KERNELS):
        return path.relative_to(KERNELS).as_posix()
    return Path(os.path.relpath(path, Path(folder).resolve())).as_posix()


def table_label(table: str) -> str:
    """How a breakdown names a table: 'h100_sxm/gemm' for the catalogue's, the file name alone for a table outside
    it ('cpu-4p.gemm': a calibrated spec's own, by no machine path)."""
    return (Path(table).name if Path(table).is_absolute() else table).removesuffix(".csv.gz")


def _stamp(table: str) -> tuple[int, int] | None:
    """(mtime, size) of a table outside the catalogue, None for the catalogue's (package data): a grid cached in
    this process is read again when a calibration rewrites its table."""
    if not Path(table).is_absolute():
        return None
    try:
        st = Path(table).stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


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
        """How a breakdown names what priced an op: 'table h100_sxm/gemm bf16' (`table_label`)."""
        return f"table {table_label(self.table)} {self.dtype}"


def _rows(table: str) -> dict[str, str]:
    """The GEMM table `table`'s rows by dtype, as CSV text of m,n,k,latency_ms (the file read once per process,
    or once per version of a table outside the catalogue; numpy parses only the dtypes a plan asks for, and no
    pandas: `perfmodel search` stays a light import)."""
    return _rows_of(table, _stamp(table))


@lru_cache(maxsize=None)
def _rows_of(table: str, stamp) -> dict[str, str]:
    path = table_path(table)
    if not path.is_file():
        raise InputError(f"kernel table {path}: file does not exist; valid: a table beside the spec file, under "
                         f"hardware_specs/kernels/ (hardware_specs/kernels/import_tables.py writes them) or at an "
                         f"absolute path")
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


def gemm_grid(table: str, dtype: str) -> GemmGrid:
    """`dtype`'s rows of the GEMM table `table` as a GemmGrid; InputError naming the dtypes it has."""
    return _gemm_grid(table, dtype, _stamp(table))


@lru_cache(maxsize=None)
def _gemm_grid(table: str, dtype: str, stamp) -> GemmGrid:
    return disk_cached("gemm", table_path(table), table, lambda: _gemm_grid_built(table, dtype, stamp), GemmGrid,
                        ("m", "n", "k", "seconds", "measured"), dtype=dtype)


def _gemm_grid_built(table: str, dtype: str, stamp) -> GemmGrid:
    rows = _rows_of(table, stamp)
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


ATTENTION_HEADER = ["head_dim", "isl", "batch", "heads", "latency_ms"]


@dataclass(frozen=True)
class AttentionGrid:
    """A context-attention table as forward throughput on a grid: FLOP/s at every (head dim, prompt length, work).

    Work is the kernel's parallel width, sequences x query heads (what fills the SMs: FlashAttention-2 Sec. 3.2
    parallelises over batch, heads and query blocks); the rows of each (head dim, length) are binned on powers of
    two of it and their throughput's median kept. A bin no row fills takes the nearest filled bin below it (the
    collector caps tokens per call, so the widest calls at the longest prompts are missing: saturated there),
    else above it. Each row's time is the FMHA's alone: the same call at a one-token prompt is taken off
    (`attention_grid`).
    FLOPs are the causal forward's, 4 x batch x heads x head_dim x isl (isl + 1) / 2 (QK^T and PV over the
    unmasked pairs), as cost.compute.kernels.flash_attention_flops counts them.
    """

    table: str
    head_dim: np.ndarray  # ascending
    isl: np.ndarray  # ascending
    work: np.ndarray  # powers of two, ascending
    flops_per_s: np.ndarray  # (len head_dim, len isl, len work)

    @property
    def label(self) -> str:
        return f"table {table_label(self.table)} bf16"


def attention_row_kept(t, t_one):
    """Whether an attention call of t seconds (or ms), whose one-token call takes t_one, gives the table a rate:
    at least twice t_one (shorter calls are mostly the fixed part, whose noise a difference would inflate).
    Element-wise on arrays."""
    return t >= 2 * t_one


def _table_rows(table: str, header: list[str], columns, dtype=float) -> tuple[Path, np.ndarray]:
    """The rows of the gzipped CSV `table` (its `columns`, as `dtype`) after checking its header is `header`:
    the attention, MoE and all-reduce tables' one reader. InputError naming the file and the valid form."""
    path = table_path(table)
    valid = "valid: a gzipped CSV " + ",".join(header)
    try:
        head, _, body = gzip.decompress(path.read_bytes()).decode().partition("\n")
        data = np.loadtxt(io.StringIO(body), delimiter=",", usecols=columns, dtype=dtype, ndmin=2)
    except FileNotFoundError:
        raise InputError(f"kernel table {path}: file does not exist; valid: a table under hardware_specs/kernels/ "
                         f"or an absolute path") from None
    except (OSError, ValueError, EOFError, zlib.error) as e:
        raise InputError(f"kernel table {path}: unreadable ({e}); {valid}") from None
    if head.strip().split(",") != header or len(data) == 0:
        raise InputError(f"kernel table {path}: header {head.strip()!r}, or no rows; {valid}")
    if dtype is float and not (data > 0).all():
        raise InputError(f"kernel table {path}: a value <= 0; {valid}, every value positive")
    return path, data


def attention_grid(table: str) -> AttentionGrid:
    """The attention table `table` (gzipped CSV head_dim,isl,batch,heads,latency_ms) as an AttentionGrid."""
    return _attention_grid(table, _stamp(table))


@lru_cache(maxsize=None)
def _attention_grid(table: str, stamp) -> AttentionGrid:
    return disk_cached("attention", table_path(table), table, lambda: _attention_grid_built(table), AttentionGrid,
                        ("head_dim", "isl", "work", "flops_per_s"))


def _attention_grid_built(table: str) -> AttentionGrid:
    path, data = _table_rows(table, ATTENTION_HEADER, range(5))
    hd, isl, batch, heads, ms = data.T
    # The fixed part: the collector's op is the FMHA plus its RoPE/KV-cache kernel and launch, which a training
    # step prices apart (its rope op); their time at a one-token prompt of the same call is taken off each row,
    # and only rows where the attention itself is at least that long are kept (shorter ones are mostly the
    # fixed part, whose noise a difference would inflate).
    calls = list(zip(hd.tolist(), batch.tolist(), heads.tolist()))
    ones = isl == isl.min()
    fixed_of = {call: t for call, t, one in zip(calls, ms.tolist(), ones) if one}
    fixed = np.array([fixed_of.get(call, np.nan) for call in calls])
    found = ~np.isnan(fixed)
    keep = found & (isl > isl.min()) & attention_row_kept(ms, fixed)
    if not keep.any():
        raise InputError(f"kernel table {path}: no row at the shortest prompt ({isl.min():g}) to take the fixed "
                         f"part from, or none twice as long as it; valid: rows at isl = 1 for each head_dim, batch "
                         f"and heads")
    hd, isl, batch, heads, ms, fixed = (x[keep] for x in (hd, isl, batch, heads, ms, fixed))
    flops = 4.0 * batch * heads * hd * isl * (isl + 1) / 2
    rate = flops / ((ms - fixed) * 1e-3)
    work_bin = np.round(np.log2(batch * heads)).astype(int)
    hds, isls, works = np.unique(hd), np.unique(isl), 2.0 ** np.arange(work_bin.max() + 1)
    grid = np.full((len(hds), len(isls), len(works)), np.nan)
    ih, ii = np.searchsorted(hds, hd), np.searchsorted(isls, isl)
    for key in np.unique(np.stack([ih, ii, work_bin]), axis=1).T:
        sel = (ih == key[0]) & (ii == key[1]) & (work_bin == key[2])
        grid[tuple(key)] = np.median(rate[sel])
    for w in range(1, len(works)):  # unfilled bins: the nearest filled one below (the widest calls, capped)
        hole = np.isnan(grid[:, :, w])
        grid[:, :, w][hole] = grid[:, :, w - 1][hole]
    for w in range(len(works) - 2, -1, -1):  # then above (the narrowest calls at short prompts, dropped)
        hole = np.isnan(grid[:, :, w])
        grid[:, :, w][hole] = grid[:, :, w + 1][hole]
    for i in range(len(isls) - 2, -1, -1):  # a head dim with no kept row at a short prompt: the next longer's
        hole = np.isnan(grid[:, i])
        grid[:, i][hole] = grid[:, i + 1][hole]
    if np.isnan(grid).any():
        raise InputError(f"kernel table {path}: a head dim has no row at the longest prompt; valid: every "
                         f"head_dim measured at the table's longest isl")
    return AttentionGrid(table=table, head_dim=hds, isl=isls, work=works, flops_per_s=grid)


MOE_HEADER = ["dtype", "hidden", "inter", "topk", "experts", "tp", "ep", "tokens", "latency_ms"]


@dataclass(frozen=True)
class MoeCurves:
    """A fused-MoE table: for each (dtype, hidden, inter, topk, experts, moe_tp, moe_ep) the tokens entering the
    layer (ascending) and the forward's seconds on one GPU (hardware_specs/kernels/import_tables.py import_moe)."""

    table: str
    curves: dict  # key tuple -> (tokens array, seconds array)

    @property
    def label(self) -> str:
        return f"table {table_label(self.table)}"


def moe_curves(table: str) -> MoeCurves:
    """The MoE table `table` (gzipped CSV dtype,hidden,inter,topk,experts,tp,ep,tokens,latency_ms) as MoeCurves."""
    return _moe_curves(table, _stamp(table))


@lru_cache(maxsize=None)
def _moe_curves(table: str, stamp) -> MoeCurves:
    _, dtypes = _table_rows(table, MOE_HEADER, [0], str)
    _, data = _table_rows(table, MOE_HEADER, range(1, 9))
    dtypes = dtypes[:, 0]
    curves: dict = {}
    for d, row in zip(dtypes.tolist(), data.tolist()):
        key = (d, *(int(v) for v in row[:6]))
        curves.setdefault(key, []).append((row[6], row[7] / 1e3))
    return MoeCurves(table, {k: tuple(np.array(c) for c in zip(*sorted(v))) for k, v in curves.items()})


ALLREDUCE_HEADER = ["gpus", "bytes", "latency_ms"]


def allreduce_curves(table: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """An all-reduce table (gzipped CSV gpus,bytes,latency_ms) as {gpus: (message bytes ascending, seconds)}."""
    return _allreduce_curves(table, _stamp(table))


@lru_cache(maxsize=None)
def _allreduce_curves(table: str, stamp) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    _, data = _table_rows(table, ALLREDUCE_HEADER, range(3))
    out = {}
    for g in np.unique(data[:, 0]).astype(int).tolist():
        rows = data[data[:, 0] == g]
        order = np.argsort(rows[:, 1])
        out[g] = (rows[order, 1], rows[order, 2] / 1e3)
    return out


DECODE_HEADER = ["kv_bytes", "head_dim", "q_heads", "kv_heads", "batch", "past", "latency_ms"]
DecodeCurves = dict  # (kv bytes, head dim, q heads, kv heads) -> {batch: (keys ascending, seconds)}


def decode_curves(table: str) -> DecodeCurves:
    """A decode-attention table (gzipped CSV kv_bytes,head_dim,q_heads,kv_heads,batch,past,latency_ms: one new
    token per sequence over `past` cached ones, hardware_specs/kernels/import_tables.py import_decode_attention) as
    {(kv_bytes, head_dim, q_heads, kv_heads): {batch: (keys = past + 1 ascending, seconds per layer call)}}."""
    return _decode_curves(table, _stamp(table))


@lru_cache(maxsize=None)
def _decode_curves(table: str, stamp) -> DecodeCurves:
    _, data = _table_rows(table, DECODE_HEADER, range(7))
    out: DecodeCurves = {}
    for row in data:
        rows = out.setdefault(tuple(int(v) for v in row[:4]), {}).setdefault(int(row[4]), [])
        rows.append((row[5] + 1, row[6] / 1e3))
    return {k: {b: tuple(np.array(c) for c in zip(*sorted(v))) for b, v in by.items()} for k, by in out.items()}
