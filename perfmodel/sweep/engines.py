"""Where a sweep's chunks run: one interface (`Engine.map`: chunks in, (chunk, rows) out as they finish), three
engines. The engine decides only where and in what order chunks run; each chunk's rows come from the same function
(`evaluate.run_chunk`), so every engine gives the same rows.

- `InProcess`: this process, one chunk after another (--workers 1).
- `LocalPool`: a process pool over this machine's cores (concurrent.futures, the standard library), at most two
  chunks per worker in flight so that a Ctrl-C loses little.
- `RayCluster`: Ray Core tasks over chunks (`perfmodel[ray]`): `ray.init(address)`, where no address is given Ray's
  own RAY_ADDRESS, else a local instance of `workers` CPUs; at most two tasks per cluster CPU in flight (ray.wait).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from ..errors import InputError
from .evaluate import run_chunk
from .points import Chunk
from .schema import Sweep

IN_FLIGHT_PER_WORKER = 2


class Engine:
    name = "engine"
    workers = 1

    def map(self, sweep: Sweep, chunks: Iterable[Chunk]) -> Iterator[tuple[Chunk, list[dict]]]:
        raise NotImplementedError

    def close(self, abort: bool = False) -> None:
        """Release the workers; `abort` (an error or a stop signal ended the sweep): stop the chunks in flight."""


class InProcess(Engine):
    name = "in-process"

    def map(self, sweep, chunks):
        for c in chunks:
            yield c, run_chunk(sweep, c)


class LocalPool(Engine):
    name = "local"

    def __init__(self, workers: int):
        self.workers = workers
        self.pool = ProcessPoolExecutor(max_workers=workers, initializer=_quiet_worker)

    def map(self, sweep, chunks):
        todo, running = iter(chunks), {}

        def refill():
            for c in todo:
                running[self.pool.submit(run_chunk, sweep, c)] = c
                if len(running) >= IN_FLIGHT_PER_WORKER * self.workers:
                    break
        refill()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                c = running.pop(f)
                yield c, f.result()
            refill()

    def close(self, abort: bool = False):
        if abort:  # Ctrl-C or SIGTERM: the workers stop now (their chunks are not written; --resume runs them)
            for p in list(getattr(self.pool, "_processes", {}).values()):
                p.kill()  # SIGKILL: a worker ignores the stop signals (_quiet_worker)
        self.pool.shutdown(wait=True, cancel_futures=True)


def _quiet_worker() -> None:
    """A pool worker ignores the SIGINT a terminal sends the whole process group, and SIGTERM: the parent alone
    decides (the handlers a worker inherits, errors.on_signals, are the parent's), then kills its workers
    (`LocalPool.close`). A worker dying first would end the sweep as a broken pool, not as a stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # It also dies with the parent, even a killed one (Linux: prctl PR_SET_PDEATHSIG; strictly, with the thread that
    # started the pool: the CLI's main thread; a caller of run_sweep from another thread keeps that thread alive).
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


class RayCluster(Engine):
    name = "ray"

    def __init__(self, address: str | None, workers: int | None):
        try:
            import ray
        except ImportError:
            raise InputError("--ray: Ray is not installed; valid: pip install 'perfmodel[ray]' (or pip install ray), "
                             "or run without --ray on this machine's cores") from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            kw = {"address": address} if address else {}
            if not address and not os.environ.get("RAY_ADDRESS"):
                kw["num_cpus"] = workers or os.cpu_count()  # a local instance of this machine
            try:
                ray.init(**kw, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            except ConnectionError as err:
                raise InputError(f"--ray {address or os.environ.get('RAY_ADDRESS', '')}: no Ray cluster there "
                                 f"({err}); valid: the address of a running cluster (ray start --head prints it), "
                                 "or --ray alone for a local instance") from None
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.task = ray.remote(run_chunk)
        self.running: dict = {}

    def map(self, sweep, chunks):
        ray = self.ray
        ref = ray.put(sweep)
        todo, running = iter(chunks), self.running

        def refill():
            for c in todo:
                running[self.task.remote(ref, c)] = c
                if len(running) >= IN_FLIGHT_PER_WORKER * self.workers:
                    break
        refill()
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            for r in done:
                c = running.pop(r)
                try:
                    rows = ray.get(r)
                except ray.exceptions.RayTaskError as err:  # a worker's refusal: its one line, not Ray's traceback
                    if isinstance(err.cause, InputError):
                        raise InputError(str(err.cause)) from None
                    raise
                yield c, rows
            refill()

    def close(self, abort: bool = False):
        if abort:  # the tasks in flight on a cluster that outlives this process
            for r in self.running:
                self.ray.cancel(r, force=True)
        if self.started:
            self.ray.shutdown()


def engine_for(workers: int | None, ray: bool, address: str | None) -> Engine:
    """--workers N (default: every core), or --ray [ADDRESS]."""
    if ray:
        return RayCluster(address, workers)
    n = workers or os.cpu_count() or 1
    return InProcess() if n == 1 else LocalPool(n)
