"""Run a sweep: check it whole, lay out its chunks, skip the finished ones (--resume), run the rest on an engine and
write each chunk's rows as it finishes, with a progress bar (points/s, time left) and a summary of the infeasible
rows by reason."""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from pathlib import Path

from pydantic import Field

from ..errors import InputError
from ..types import Schema
from ..spec.hardware.system import load_hardware
from ..spec.model.catalogue import load_model
from .engines import Engine, engine_for
from .points import chunks as make_chunks
from .points import code_version, points
from .schema import Sweep
from .store import manifest, open_store, write_chunk


class SweepRun(Schema):
    """What one `perfmodel sweep` run did."""

    name: str
    out: str
    engine: str
    workers: int
    points: int = Field(description="designs (base systems x axis points)")
    workloads: int
    chunks: int
    skipped_chunks: int = Field(description="finished before (--resume)")
    rows_run: int = Field(description="(point, workload) searches run now")
    seconds: float
    rows_per_s: float
    infeasible: dict[str, int] = Field(description="reason (numbers blanked) -> rows run now")


def check_workloads(sweep: Sweep) -> None:
    """Refuse, before anything runs or is written, a workload whose model, stack or job is not valid input, and a
    base system that is not known. A point a system cannot run (too few devices, nothing fits) is a result."""
    from ..search.space import Job
    from ..spec.serving.schema import ServePlan

    for name in sweep.systems:
        load_hardware(name)
    for w in sweep.workloads:
        j = w.job
        try:
            load_model(j.model)
            if w.kind == "train":
                Job(gpus=j.gpus, global_batch=j.global_batch, seq_len=j.seq_len, precision=j.precision,
                    **({"stack": j.stack} if j.stack else {}))
            else:
                ServePlan(input_len=j.input_len, output_len=j.output_len, precision=j.precision,
                          concurrency=j.concurrency, **({"stack": j.stack} if j.stack else {}))
        except InputError as err:
            raise InputError(f"workloads.{w.name}: {err}") from None


def reason_kind(reason: str) -> str:
    """A reason with its counts and measures blanked (the limits it names kept: 'TPOT 50 ms'), so that rows failing
    the same way count together."""
    text = re.sub(r"(?<![\w.-])\d+(?:\.\d+)?(?![\w.-])(?! ms\b)", "#", reason)  # not inside a name: llama-3-70b
    return text if len(text) <= 200 else text[:199] + "…"


def run_sweep(sweep: Sweep, out, workers: int | None = None, ray: bool = False, address: str | None = None,
              resume: bool = False, progress: bool = True, engine: Engine | None = None) -> SweepRun:
    """Run `sweep` into folder `out` (module docstring); returns what ran. Ctrl-C stops it with every finished chunk
    kept; --resume runs the rest."""
    out = Path(out)
    if workers is not None and workers < 1:
        raise InputError(f"--workers {workers}: valid: 1 or more processes")
    check_workloads(sweep)
    pts = points(sweep)
    todo_all = make_chunks(sweep, pts)
    man = manifest(sweep, code_version(), [c.key for c in todo_all], len(pts))
    engine = engine or engine_for(workers, ray, address)  # refused (Ray missing, no cluster) before a file is written
    try:
        done = open_store(out, sweep, man, resume)
    except BaseException:
        engine.close()
        raise
    todo = [c for c in todo_all if c.key not in done]
    total_rows = sum(len(c.points) for c in todo)
    bar = _bar(total_rows, progress, engine)
    reasons: Counter = Counter()
    t0, ran, ended = time.perf_counter(), 0, False
    try:
        for chunk, rows in engine.map(sweep, todo):
            write_chunk(out, chunk.key, rows)
            ran += len(rows)
            reasons.update(reason_kind(r["reason"]) for r in rows if not r["feasible"])
            if bar is not None:
                bar.update(len(rows))
        ended = True
    finally:
        if bar is not None:
            bar.close()
        engine.close(abort=not ended)
    secs = time.perf_counter() - t0
    return SweepRun(name=sweep.name, out=str(out), engine=engine.name, workers=engine.workers, points=len(pts),
                    workloads=len(sweep.workloads), chunks=len(todo_all), skipped_chunks=len(done), rows_run=ran,
                    seconds=secs, rows_per_s=ran / secs if secs > 0 else 0.0, infeasible=dict(reasons.most_common()))


def _bar(total: int, progress: bool, engine: Engine):
    """A tqdm bar on stderr (rows/s and time left), redrawn at most every half second on a terminal and every 10 s
    into a log."""
    if not progress or total == 0:
        return None
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    return tqdm(total=total, unit="search", desc=f"sweep ({engine.name}, {engine.workers} worker"
                f"{'s' if engine.workers > 1 else ''})", file=sys.stderr, mininterval=0.5 if tty else 10.0,
                dynamic_ncols=tty)
