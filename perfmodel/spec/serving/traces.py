"""Request traces from production LLM services, read into per-request arrival times (s), prompt and output
lengths (tokens), and where the trace has them, the ids of each prompt's 512-token blocks (`Trace`); the input of a
`Workload` of `arrival = "trace"` (`TraceSource` names the file).

Formats, each as its publisher writes it:
- mooncake: kvcache-ai/Mooncake `FAST25-release/traces/{conversation,toolagent,synthetic}_trace.jsonl` and the older
  `FAST25-release/arxiv-trace/mooncake_trace.jsonl` (FAST25-release/README.md, "Trace Format"): one JSON object a
  line, `timestamp` (ms from the trace's start), `input_length`, `output_length` (tokens) and `hash_ids`, the
  remapped hashes of the prompt's blocks of 512 tokens, "identical hash IDs indicate reusable prefix KV cache
  blocks" (two prompts sharing their first 12 ids share their first 12 x 512 tokens).
- azure: Azure/AzurePublicDataset `data/AzureLLMInferenceTrace_{code,conv}.csv` (AzureLLMInferenceDataset2023.md,
  Patel et al. 2024, "Splitwise") and the week-long `AzureLLMInferenceTrace_{code,conv}_1week.csv` of 2024
  (AzureLLMInferenceDataset2024.md, Stojkovic et al. 2025, "DynamoLLM"): CSV of `TIMESTAMP` (the invocation time, a
  date and time; 2023 `2023-11-16 18:17:03.9799600`, 2024 `2024-05-10 00:00:00.009930+00:00`, the same three
  columns), `ContextTokens`, `GeneratedTokens`.
- burstgpt: HPMLL/BurstGPT `data/BurstGPT_{1,2,3}.csv` and `BurstGPT_without_fails_*.csv` (README.md, "Data
  Schema"; Wang et al. 2025, "BurstGPT"): CSV of `Timestamp` (s from 0:00:00 of the first day), `Model`, `Request
  tokens`, `Response tokens`, `Total tokens`, `Log Type` (release 3 adds `Session ID` and `Elapsed time` after
  `Timestamp`; columns are read by name). "Some failure that `Response tokens` are `0`s" (README.md): such a row is
  a request the service failed, and is dropped (counted in `Trace.dropped`), as `BurstGPT_without_fails_*.csv`
  drops them; so is a row of no request tokens (an engine serves no empty prompt).
`auto` tells them apart by the first line: a JSON object with `timestamp`, `input_length` and `output_length` is
Mooncake's; a CSV header with `TIMESTAMP`, `ContextTokens` and `GeneratedTokens` Azure's; with `Timestamp`,
`Request tokens` and `Response tokens` BurstGPT's.

`start` and `limit` take a window of the requests kept; times are taken from the window's first request and divided
by `TraceSource.speed` (2: the trace sent twice as fast). A row of no output tokens is dropped in every format (it
asks nothing of the engine), counted in `Trace.dropped`. A bad file is an InputError of one line naming the
file, the line, the field, the value and what is valid: a missing column or key, a value that is no number (or no
whole number of tokens, or negative), times that go back, no request at all.
"""

from __future__ import annotations

import io
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from ...errors import InputError
from ...types import Schema

TRACE_FORMATS = ("auto", "mooncake", "azure", "burstgpt")
MOONCAKE_BLOCK_TOKENS = 512  # FAST25-release/README.md: "The block size is 512 tokens"
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
MAX_TOKENS = 100_000_000  # past any model's context: a value above it is a corrupt row, not a request
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
VALID = ("valid: a Mooncake JSONL trace (timestamp, input_length, output_length, hash_ids), an Azure LLM inference "
         "CSV (TIMESTAMP, ContextTokens, GeneratedTokens) or a BurstGPT CSV (Timestamp, Model, Request tokens, "
         "Response tokens, Total tokens, Log Type)")


class TraceSource(Schema):
    """A request trace to replay (`Workload.trace`): the file, its format, its time scale and the window of its
    requests sent."""

    path: str = Field(min_length=1, description="the trace file (Mooncake JSONL, Azure or BurstGPT CSV)")
    format: Literal["auto", "mooncake", "azure", "burstgpt"] = Field(
        "auto", description="auto (told by the first line), mooncake, azure or burstgpt")
    speed: float = Field(1.0, gt=0, le=1e6, description="time scale: the trace's times divided by it (2: every "
                                                        "request sent at half its recorded time, twice the rate)")
    start: int = Field(0, ge=0, le=100_000_000, description="requests of the trace skipped before the window")
    limit: int | None = Field(None, ge=1, le=1_000_000, description="requests sent from `start` on (None: the rest, "
                                                                    "at most 1,000,000)")


@dataclass(frozen=True)
class Trace:
    """A trace's requests as read (`read_trace`): arrival times (s from the first request of the window, already
    divided by the speed), prompt and output tokens, and for Mooncake each prompt's block ids (`block_tokens` a
    block); `dropped`: rows left out and why; `rows`: the requests read before the window."""

    path: str
    format: str
    arrive: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    blocks: tuple[tuple[int, ...], ...] | None = None
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    dropped: dict[str, int] = field(default_factory=dict)
    rows: int = 0

    def __len__(self) -> int:
        return len(self.arrive)


def read_trace(source: TraceSource | dict | str) -> Trace:
    """The requests of `source` (a TraceSource, its fields, or a path read as `auto`); InputError for a file that is
    missing, empty, of no known format, or bad in one of its rows (module docstring). Read once per file version
    (path, size, modification time) and settings: a simulation asks for it more than once."""
    if isinstance(source, str):
        source = TraceSource(path=source)
    elif isinstance(source, dict):
        source = TraceSource.parse(source, where="trace")
    try:
        st = os.stat(source.path)
    except OSError:
        raise InputError(f"trace {source.path}: no such file; {VALID}") from None
    if not os.path.isfile(source.path):
        raise InputError(f"trace {source.path}: a directory, not a file; {VALID}")
    return _read(source.path, st.st_size, st.st_mtime_ns, source.format, source.speed, source.start, source.limit)


@lru_cache(maxsize=8)
def _read(path: str, size: int, mtime: int, fmt: str, speed: float, start: int, limit: int | None) -> Trace:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as err:
        raise InputError(f"trace {path}: cannot be read ({err.strerror}); {VALID}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(f"trace {path}: byte {err.start} is not UTF-8 text; {VALID}") from None
    if not text.strip():
        raise InputError(f"trace {path}: empty file; {VALID}")
    if "\x00" in text:
        raise InputError(f"trace {path}: binary data (NUL bytes), not a trace; {VALID}")
    fmt = detect(path, text) if fmt == "auto" else fmt
    if fmt == "mooncake":
        t, i, o, blocks = _mooncake(path, text)
    else:
        t, i, o, blocks = _csv(path, text, fmt)
    rows = len(t)
    keep = (i > 0) & (o > 0)
    dropped = {}
    if fmt == "burstgpt" and (o == 0).any():
        dropped["failed (0 response tokens)"] = int((o == 0).sum())
    elif (o == 0).any():
        dropped["no output tokens"] = int((o == 0).sum())
    if ((i == 0) & (o > 0)).any():
        dropped["no prompt tokens"] = int(((i == 0) & (o > 0)).sum())
    idx = np.flatnonzero(keep)[start:]
    idx = idx[: limit if limit is not None else 1_000_000]
    if not len(idx):
        window = f" from request {start}" if start else ""
        raise InputError(f"trace {path}: no request to send{window} ({rows} read, {rows - int(keep.sum())} without "
                         f"prompt or output tokens); valid: a trace of at least one request of both, start < "
                         f"{int(keep.sum())}")
    arrive = (t[idx] - t[idx[0]]) / speed
    arrive.setflags(write=False)
    ins, outs = i[idx].astype(np.int64), o[idx].astype(np.int64)
    ins.setflags(write=False)
    outs.setflags(write=False)
    chains = tuple(blocks[k] for k in idx) if blocks is not None else None
    return Trace(path, fmt, arrive, ins, outs, chains, MOONCAKE_BLOCK_TOKENS, dropped, rows)


def detect(path: str, text: str) -> str:
    """The format of a trace by its first line (module docstring); InputError naming what the line has."""
    head = text.lstrip().split("\n", 1)[0].strip()
    if head.startswith("{"):
        try:
            rec = json.loads(head)
        except ValueError:
            raise InputError(f"trace {path}: line 1 starts a JSON object but is no JSON; {VALID}") from None
        if isinstance(rec, dict) and all(k in rec for k in MOONCAKE_KEYS):
            return "mooncake"
        keys = ", ".join(list(rec)[:8]) if isinstance(rec, dict) else type(rec).__name__
        raise InputError(f"trace {path}: line 1 is a JSON object of {keys or 'no keys'}, no Mooncake request; "
                         f"{VALID}")
    cols = {c.strip() for c in head.split(",")}
    if set(AZURE_COLUMNS) <= cols:
        return "azure"
    if set(BURSTGPT_COLUMNS) <= cols:
        return "burstgpt"
    shown = head if len(head) <= 120 else head[:117] + "..."
    raise InputError(f"trace {path}: line 1 = {shown!r} names no known trace's columns; {VALID}")


def _bad(path: str, line: int, name: str, value, valid: str) -> InputError:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return InputError(f"trace {path}: line {line}, {name} = {shown}; valid: {valid}")


def _numbers(values: list) -> np.ndarray:
    """Floats of a CSV's strings or JSON's numbers, NaN where one is none (an integer past a float's range too)."""
    try:
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float)
    except OverflowError:
        def one(v) -> float:
            try:
                return float(v)
            except (TypeError, ValueError, OverflowError):
                return math.nan
        return np.array([one(v) for v in values], dtype=float)


def _tokens(path: str, name: str, values: list, lines: list[int]) -> np.ndarray:
    """Whole numbers of tokens >= 0 (a CSV's strings or JSON's numbers); InputError at the first that is not."""
    num = _numbers(values)
    bad = ~np.isfinite(num) | (num < 0) | (num != np.round(num)) | (num > MAX_TOKENS)
    if bad.any():
        k = int(np.argmax(bad))
        raise _bad(path, lines[k], name, values[k], f"a whole number of tokens from 0 to {MAX_TOKENS:,}")
    return num.astype(np.int64)


def _times(path: str, name: str, values: list, lines: list[int], unit: float, valid: str) -> np.ndarray:
    """Finite numbers in non-decreasing order, times `unit` (s); InputError at the first that is not."""
    num = _numbers(values)
    bad = ~np.isfinite(num)
    if bad.any():
        k = int(np.argmax(bad))
        raise _bad(path, lines[k], name, values[k], valid)
    return _ordered(path, name, values, lines, num * unit)


def _ordered(path: str, name: str, values: list, lines: list[int], t: np.ndarray) -> np.ndarray:
    back = np.flatnonzero(np.diff(t) < 0)
    if len(back):
        k = int(back[0]) + 1
        raise _bad(path, lines[k], name, values[k], f"times in the order recorded, none before the line before's "
                                                    f"{values[k - 1]!r} (line {lines[k - 1]}); sort the trace by {name}")
    return t


def _mooncake(path: str, text: str) -> tuple:
    t, i, o, blocks, lines = [], [], [], [], []
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            raise InputError(f"trace {path}: line {n} is no JSON object; valid: one request a line, "
                             '{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}'
                             ) from None
        if not isinstance(rec, dict):
            raise InputError(f"trace {path}: line {n} is a JSON {type(rec).__name__}, not an object; valid: one "
                             "request a line with timestamp, input_length, output_length")
        for key in MOONCAKE_KEYS:
            if key not in rec:
                raise InputError(f"trace {path}: line {n} has no {key}; valid: timestamp (ms), input_length, "
                                 "output_length (tokens) and hash_ids")
        ids = rec.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
            raise _bad(path, n, "hash_ids", ids, "a list of integer block ids (512 tokens a block)")
        t.append(rec["timestamp"])
        i.append(rec["input_length"])
        o.append(rec["output_length"])
        blocks.append(tuple(ids))
        lines.append(n)
    for name, vals in (("timestamp", t), ("input_length", i), ("output_length", o)):
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in vals):
            k = next(k for k, v in enumerate(vals) if isinstance(v, bool) or not isinstance(v, int | float))
            valid = "a number of ms from the trace's start" if name == "timestamp" else "a whole number of tokens"
            raise _bad(path, lines[k], name, vals[k], valid)
    times = _times(path, "timestamp", t, lines, 1e-3, "a finite number of ms from the trace's start")
    return (times, _tokens(path, "input_length", i, lines), _tokens(path, "output_length", o, lines), blocks)


def _csv(path: str, text: str, fmt: str) -> tuple:
    try:
        with warnings.catch_warnings():  # a row longer than the header: an error, not an index or a lost field
            warnings.simplefilter("error", pd.errors.ParserWarning)
            df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True,
                             index_col=False)
    except (pd.errors.ParserError, pd.errors.ParserWarning, pd.errors.EmptyDataError, ValueError) as err:
        msg = str(err).strip().split("\n")[0]
        raise InputError(f"trace {path}: not a CSV table ({msg}); {VALID}") from None
    df.columns = [str(c).strip() for c in df.columns]
    need = AZURE_COLUMNS if fmt == "azure" else BURSTGPT_COLUMNS
    for col in need:
        if col not in df.columns:
            raise InputError(f"trace {path}: line 1 (the header) has no column {col!r} ({fmt}); valid: a header "
                             f"naming {', '.join(need)}")
    if df.empty:
        raise InputError(f"trace {path}: a header and no request; valid: at least one row under "
                         f"{', '.join(need)}")
    lines = list(range(2, len(df) + 2))  # the header is line 1
    ts, ins, outs = (df[c].tolist() for c in need)
    if fmt == "azure":
        stamp = pd.to_datetime(pd.Series(ts), format="ISO8601", utc=True, errors="coerce")
        if stamp.isna().any():
            k = int(np.argmax(stamp.isna().to_numpy()))
            raise _bad(path, lines[k], "TIMESTAMP", ts[k], "a date and time, e.g. 2023-11-16 18:17:03.9799600")
        t = _ordered(path, "TIMESTAMP", ts, lines, (stamp - stamp.iloc[0]).dt.total_seconds().to_numpy())
        return t, _tokens(path, "ContextTokens", ins, lines), _tokens(path, "GeneratedTokens", outs, lines), None
    t = _times(path, "Timestamp", ts, lines, 1.0, "a finite number of seconds")
    return t, _tokens(path, "Request tokens", ins, lines), _tokens(path, "Response tokens", outs, lines), None


def describe(trace: Trace, speed: float = 1.0) -> str:
    """One line: the trace, its requests, their span and mean lengths, and what was dropped."""
    span = float(trace.arrive[-1]) if len(trace) else 0.0
    drop = (f"; of the file's {trace.rows:,} rows, dropped " + ", ".join(f"{v:,} {k}" for k, v in trace.dropped.items())
            if trace.dropped else "")
    scale = f" (times / {speed:g})" if speed != 1 else ""
    return (f"trace {os.path.basename(trace.path)} ({trace.format}): {len(trace):,} requests over {span:,.1f} s"
            f"{scale}, mean prompt {trace.input_len.mean():,.0f} and output {trace.output_len.mean():,.0f} tokens"
            f"{drop}")


def mean_lengths(trace: Trace) -> tuple[int, int]:
    """The trace's mean prompt and output tokens, rounded (at least 1): the nominal lengths of a plan that replays
    it where none are given."""
    return (max(1, math.floor(float(trace.input_len.mean()) + 0.5)),
            max(1, math.floor(float(trace.output_len.mean()) + 0.5)))
