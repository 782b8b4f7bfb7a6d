"""Launching a module of this package under `torchrun`, and turning a failed launch into one clear line.

Used by `perfmodel execute`, `validate` and `calibrate`. The parent process imports no torch: it starts
torchrun (on CPU `python -m perfmodel.execute.launch.agent`: torchrun's flags and elastic agent, the ranks forked) in its
own session, streams the workers' `[perfmodel]` lines, keeps everything
else in a log file, follows where each rank is (`[perfmodel-at]` lines) and whether one is stopped, and enforces
a wall-clock limit. A rank that dies is noticed by torchrun's agent (it polls every `MONITOR_INTERVAL_S`), which
stops the others; collectives carry a timeout too (the worker's `pg_timeout_s`) so that ranks on other hosts stop
as well. Whatever happens (a failure, the limit, Ctrl-C or SIGTERM, the parent killed), every process of the
launch is gone within a few seconds (processes.py), and the failure is one line naming the rank, where it was and
why (`describe`, `_root_cause`).
"""

from __future__ import annotations

import functools

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from ...errors import Interrupted, RunFailed, RunInterrupted, on_signals  # noqa: F401 (callers import them here too)
from ...files import portable_text
from .processes import STATES, TAG_VAR, Proc, send, state, stop_all, tagged

PREFIX = "[perfmodel]"  # worker lines with this prefix are shown to the user; the rest goes to the log
AT = "[perfmodel-at]"  # "[perfmodel-at] RANK PLACE": where a worker is (step, save, write), for failure messages
# the agent's log lines as it stops the workers after a failure: torchrun's subprocess context, and the fork context
# of execute.launch.agent (torch.multiprocessing.spawn)
CLOSING = ("closing signal SIGTERM", "via signal SIGTERM")
POLL_S = 0.5  # how often the workers' process states are read (a rank stopped by SIGSTOP is seen within this)
MONITOR_INTERVAL_S = 0.2
SHUTDOWN_TIMEOUT_S = 5


def torchrun_command(module: str, args: list[str], nproc: int, rdzv: list[str] | None = None,
                     forked: bool = False) -> list[str]:
    """torchrun for `module` on `nproc` processes, standalone on one host or with the user's `--nnodes/--rdzv-*`
    flags for many. `forked` (CPU ranks): `python -m perfmodel.execute.launch.agent`, which takes torchrun's flags (its own
    parser) and runs torchrun's elastic agent with the ranks forked from one process that imported torch once
    (execute/launch/agent.py); else `python -m torch.distributed.run`, each rank a new process (GPU ranks: forking is
    safe only while the parent has not touched CUDA, and no GPU here could show that it holds)."""
    where = list(rdzv) if rdzv else ["--standalone"]
    runner = "perfmodel.execute.launch.agent" if forked else "torch.distributed.run"
    shutdown = [f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}"] if torchrun_takes("--shutdown-timeout") else []
    return [sys.executable, "-m", runner, *where, f"--nproc-per-node={nproc}", "--max-restarts=0",
            f"--monitor-interval={MONITOR_INTERVAL_S}", *shutdown, "-m", module, *args]


@functools.cache
def torchrun_takes(flag: str) -> bool:
    """Whether this torch's torchrun defines `flag`, read from its source without importing torch (this process
    imports none): --shutdown-timeout is new in torch 2.13 (the CPU pin); the torch a GPU machine brings may be
    older (2.11 on this project's lent H100 refuses the flag: every launch failed), and without it torchrun stops
    the survivors of a failed rank after its own grace."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    source = Path(next(iter(spec.submodule_search_locations))) / "distributed" / "run.py"
    try:
        return f'"{flag}"' in source.read_text()
    except OSError:
        return False


# glibc malloc on CPU ranks (mallopt(3); environment variables set the same parameters at process start).
# Timing: the mmap and trim thresholds at the maxima glibc's own dynamic thresholds climb to once a loop has
# freed its large blocks (DEFAULT_MMAP_THRESHOLD_MAX = 32 MiB on 64-bit; trim at twice the mmap threshold), so
# freed tensors are reused from the heap, as torch's CUDA caching allocator reuses its blocks, from the first
# plan of a launch on. Measured on 2026-11-22 (2-vCPU sandbox, torch 2.13.0+cpu, 4 ranks, the cpu-smoke dp4
# and fsdp4 plans, two runs each with and without it): blocks >= 64 KiB returned to the
# OS at once made the steps 1.4-2.0x slower (page faults and zeroing on every large allocation).
# Memory: every block of a page (4 KiB) or more mapped and returned at once, so that resident memory follows the
# live tensors (execute/memory_probe.py); execute runs this in an untimed phase (set_allocator). A page, not 64 KiB: a small
# model's tensors (tiny-llama's 64 x 64 fp32 weights are 16 KiB) fell under 64 KiB, stayed resident in the heap
# after they were freed, and the measure (high-water mark minus resident size after freeing) read 0-0.2 MiB
# for plans holding 2-4 MiB. Measured 2026-11-22 (2-vCPU sandbox, tests/test_execute.py's two-process plans):
# with a page the same plans read 1.5-4.9 MiB over two runs, and the ones checked by hand hold at least their
# fp32 weights, gradients and Adam moments (test_peak_memory_holds_the_training_state); the cpu-smoke plans
# (tensors >= 1 MiB) read the same to 0.1 MiB under both settings.
MALLOC_TIMING = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}
MALLOC_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(4 << 10)}


def allocator_text(settings: dict[str, str]) -> str:
    """How a measurement names an allocator setting (MALLOC_TIMING, MALLOC_MEMORY): 'NAME=VALUE ...'."""
    return " ".join(f"{k}={v}" for k, v in settings.items())


def worker_env(device: str, measure_memory: bool = False) -> dict[str, str]:
    """Environment of the workers. On CPU each rank computes on one thread (ranks share the cores, so that
    measured and calibrated rates agree), and glibc's allocator is set for timing or for measuring resident
    memory (MALLOC_TIMING, MALLOC_MEMORY)."""
    env = dict(os.environ)
    if device == "cpu":
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env.pop("MALLOC_TRIM_THRESHOLD_", None)
        env.update(MALLOC_MEMORY if measure_memory else MALLOC_TIMING)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    return env

GLIBC_TRIM_DEFAULT = 128 << 10  # DEFAULT_TRIM_THRESHOLD (glibc malloc/malloc.c): where settings name no trim threshold
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt(3) parameters (glibc malloc.h)


def set_allocator(settings: dict[str, str]) -> bool:
    """Set this process's glibc allocator now as the environment `settings` (MALLOC_TIMING or MALLOC_MEMORY) set
    it at a process's start: mallopt(3) of the mmap and trim thresholds, which also stops glibc moving them
    itself, as the environment variables do; then malloc_trim(0), which returns the heap's free pages to the OS
    (those inside it too, glibc >= 2.8): the agent imported torch with the allocator set for timing, and a tensor
    of the memory phase that reused a free block it left would not raise the resident size. The worker switches
    the phases of one CPU launch this way (its ranks are forked from the agent, which glibc set up long before).
    False where there is no glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt, malloc_trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim = int(settings.get("MALLOC_TRIM_THRESHOLD_", GLIBC_TRIM_DEFAULT))
    done = bool(mallopt(M_TRIM_THRESHOLD, trim)) and bool(mallopt(M_MMAP_THRESHOLD,
                                                                 int(settings["MALLOC_MMAP_THRESHOLD_"])))
    malloc_trim(0)
    return done


# -- what went wrong, in one line ---------------------------------------------------------------------------
# Error texts (a worker's exception, torchrun's log) and the cause each names. Checked in order; the first match
# wins. CUDA's and NCCL's texts are torch 2.x's (c10/cuda/CUDACachingAllocator.cpp, ProcessGroupNCCL.cpp).
CAUSES = [
    (r"CUDA out of memory\. Tried to allocate ([\d.]+ [KMGT]?i?B)", "out of GPU memory (tried to allocate {0})"),
    (r"(?:CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED)", "out of GPU memory (in a CUDA library)"),
    (r"can't allocate memory: you tried to allocate (\d+) bytes",
     "out of host memory (tried to allocate {0} bytes; the address-space limit, ulimit -v, or the machine's RAM)"),
    (r"\bMemoryError\b|Cannot allocate memory|std::bad_alloc", "out of host memory (ulimit -v or the machine's RAM)"),
    (r"\[Errno 28\]|No space left on device", "the disk is full (No space left on device)"),
    (r"\[Errno 27\]|File too large", "a file passed the file-size limit (ulimit -f) or the file system's largest file"),
    (r"\[Errno 122\]|Disk quota exceeded", "the disk quota is used up (Disk quota exceeded)"),
    (r"Watchdog caught collective operation timeout.*?OpType=(\w+)",
     "an NCCL {0} timed out (a peer rank stopped, hung or died; NCCL's watchdog)"),
    (r"NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError", "NCCL failed (a peer rank died, or "
     "the network between the GPUs; NCCL_DEBUG=INFO says more)"),
    (r"Timed out waiting (\d+)ms", "a collective timed out after {0} ms waiting for a peer rank (stopped, hung or "
     "dead)"),
    (r"Connection (?:reset by peer|closed by peer)|Broken pipe", "a peer rank's connection closed (it died)"),
    # a native abort's own words, where nothing above explains it: C++'s std::terminate, glibc's heap checks
    (r"terminate called (after throwing an instance of '[^']+'|without an active exception|recursively)",
     "std::terminate in native code (terminate called {0})"),
    (r"((?:free|malloc|realloc)\(\): [^\n]+|double free or corruption[^\n]*|corrupted size vs\. prev_size[^\n]*)",
     "the C heap was corrupted (glibc: {0})"),
]
HINTS = {  # a rank ended by a signal: what usually sends it
    "SIGKILL": "sent from outside the run: the kernel's out-of-memory killer, a scheduler, or kill -9",
    "SIGXFSZ": "a file passed the file-size limit, ulimit -f",
    "SIGSEGV": "a crash in native code", "SIGABRT": "an abort in native code; NCCL's watchdog aborts on a timeout",
    "SIGBUS": "a bad memory mapping: a file truncated under it, or /dev/shm full",
}
PEER = "a peer rank's connection closed"  # what the survivors of a dead rank report; never the cause
FAILED = re.compile(r" rank (\d+) failed(?: during (.+?))?: (.*)")  # a worker's failure line, after PREFIX


def describe(text: str) -> str | None:
    """The cause an error text shows (CAUSES), or None."""
    for pattern, cause in CAUSES:
        m = re.search(pattern, text, re.S)
        if m:
            return cause.format(*m.groups())
    return None


def _where(at: dict[int, str], ranks: list[int] | None = None) -> str:
    """'during step 3 of p.json' where the ranks agree, else each rank's place (the progress they reported)."""
    places = {r: at[r] for r in (ranks if ranks is not None else sorted(at)) if r in at}
    if not places:
        return ""
    if len(set(places.values())) == 1:
        return f"during {next(iter(places.values()))}"
    shown = sorted(places.items())[:8]
    return "with " + ", ".join(f"rank {r} during {p}" for r, p in shown) + (", ..." if len(places) > 8 else "")


def _root_cause(log: str, at: dict[int, str] | None = None, stopped: dict[int, str] | None = None) -> str:
    """The failed rank, where it was and why: a rank seen stopped (`stopped`), else the first failure torchrun
    reports (a signal before an error exit; the SIGTERM torchrun sends the survivors last), with the worker's
    own failure line or the cause its log shows."""
    at, stopped = at or {}, stopped or {}
    ours = {}  # rank -> the worker's own line
    for line in log.splitlines():
        m = FAILED.match(line.split(PREFIX, 1)[1]) if PREFIX in line else None
        if m and not m.group(3).startswith(PEER):
            ours.setdefault(int(m.group(1)), (m.group(2), m.group(3)))
    if stopped:
        rank = min(stopped)
        return f"rank {rank} was {STATES.get(stopped[rank], 'stalled')} {_where(at, [rank])}".rstrip() + \
            "; its peers waited for it"
    start = min((i for i in (log.find("Failures:"), log.find("Root Cause")) if i >= 0), default=len(log))
    report = log[start:]  # torchrun's summary: other failures, then the first observed one
    failures = [(int(r), int(c)) for r, c in re.findall(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", report, re.S)]
    failures.sort(key=lambda f: (f[1] == -signal.SIGTERM, f[1] >= 0, f[0] not in ours))
    killed = failures and failures[0][1] < 0 and failures[0][1] != -signal.SIGTERM
    if ours and not killed:  # a rank's own line: the first failure torchrun saw among those that wrote one
        rank = next((r for r, _ in failures if r in ours), min(ours))
        during, cause = ours[rank]
        return f"rank {rank} failed{' during ' + during if during else ''}: {cause}"
    if failures:
        rank, code = failures[0]
        if code < 0 and -code in signal.Signals._value2member_map_:
            name = signal.Signals(-code).name
            cause = describe(log) if name != "SIGKILL" else None  # a native abort's own words (NCCL's watchdog)
            said = f": {cause}" if cause and not cause.startswith(PEER) else f" ({HINTS[name]})" if name in HINTS else ""
            return f"rank {rank} was killed by {name} {_where(at, [rank])}".rstrip() + said
        cause = describe(log)
        return f"rank {rank} stopped with exit code {code} {_where(at, [rank])}".rstrip() + \
            (f": {cause}" if cause and not cause.startswith(PEER) else "")
    cause = describe(log)
    return f"the workers failed{': ' + cause if cause else ''}"


def _with_parent() -> None:
    """In torchrun's process before it starts: SIGTERM when this process dies (prctl PR_SET_PDEATHSIG), so that a
    parent killed outright (SIGKILL: no handler runs) still takes the run with it, even in a step that prints
    nothing (otherwise a worker learns it at its next line, from the broken pipe); torchrun stops its workers on
    SIGTERM (and SIGKILLs them after SHUTDOWN_TIMEOUT_S)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # 1: PR_SET_PDEATHSIG


class _Watch:
    """Reads the workers' lines (the `[perfmodel]` ones to the user, `[perfmodel-at]` progress to `at`, all to the
    log) and polls the workers' process states, remembering any rank seen stopped."""

    def __init__(self, proc: subprocess.Popen, log, echo, tag: str, nproc: int):
        self.proc, self.log, self.echo, self.tag, self.nproc = proc, log, echo, tag, nproc
        self.at: dict[int, str] = {}
        self.stopped: dict[int, str] = {}
        self.closing: float | None = None  # when torchrun began stopping the workers after a failure
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._pump, daemon=True),
                        threading.Thread(target=self._poll, daemon=True)]
        for t in self.threads:
            t.start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.log.write(portable_text(line))
            self.log.flush()
            if self.closing is None and any(c in line for c in CLOSING):
                self.closing = time.monotonic()
            if line.startswith(AT):
                rank, _, text = line[len(AT):].strip().partition(" ")
                if rank.isdigit():
                    self.at[int(rank)] = text
            elif PREFIX in line and not FAILED.match(line.split(PREFIX, 1)[1]):  # failures: one line at the end
                self.echo(line.rstrip("\n").split(PREFIX, 1)[1].strip())

    def _poll(self) -> None:
        workers: list[Proc] = []
        while not self.done.wait(POLL_S):
            if len(workers) < self.nproc:  # the workers start after torchrun's rendezvous
                workers = [p for p in tagged(TAG_VAR, self.tag) if p.rank is not None]
            if self.closing is not None and time.monotonic() - self.closing > SHUTDOWN_TIMEOUT_S:
                # torch 2.13's agent stops the survivors of a failed rank with a fixed 30 s grace (its
                # _stop_workers ignores --shutdown-timeout): those still alive after ours are killed here
                for p in workers:
                    send(p.pid, signal.SIGKILL)
            for p in workers if self.closing is None else []:  # once torchrun stops them, states say nothing
                st = state(p.pid)
                if st in ("T", "t") and p.rank not in self.stopped:
                    self.stopped[p.rank] = st
                elif st in ("R", "S", "D"):  # continued (one killed or gone stays named)
                    self.stopped.pop(p.rank, None)

    def close(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join(5)


def launch(module: str, args: list[str], nproc: int, *, device: str, log_path: str | Path,
           timeout_s: float, rdzv: list[str] | None = None, echo=None, measure_memory: bool = False,
           limit_s: float | None = None) -> None:
    """Run `module` under torchrun and wait. RunFailed (one line: which rank, where, why) if any rank fails or
    the limit passes; RunInterrupted on Ctrl-C or SIGTERM (`on_signals`). Every process of the launch is gone
    when this returns or raises (execute.launch.processes.stop_all).
    `measure_memory`: the workers' allocator set for measuring resident memory from their start, not for timing
    (worker_env; the executor's own CPU launches start set for timing and switch per phase, set_allocator).
    `limit_s`: the limit the user gave, where this launch has only what the caller's set-up left of it.

    `echo(line)` receives the workers' `[perfmodel]` lines as they come (default: print to stderr).
    """
    echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    cmd = torchrun_command(module, args, nproc, rdzv, forked=device == "cpu")
    log_path = Path(log_path)
    tag = uuid.uuid4().hex
    env = {**worker_env(device, measure_memory), TAG_VAR: tag}
    start = time.monotonic()
    with open(log_path, "w") as log:
        log.write(portable_text("$ " + " ".join(cmd)) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True, preexec_fn=_with_parent if sys.platform == "linux" else None)
        watch = _Watch(proc, log, echo, tag, nproc)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            at, stopped = dict(watch.at), dict(watch.stopped)
            stop_all(tag, SHUTDOWN_TIMEOUT_S, proc.pid)
            watch.close()
            why = _root_cause("", at, stopped) if stopped else f"stopped {_where(at)}" if at else ""
            raise RunFailed(f"the run passed its limit of {limit_s or timeout_s:g} s and was stopped (all ranks "
                            f"killed){'; ' + why if why else ''}; log: {log_path}") from None
        except KeyboardInterrupt as err:
            at = dict(watch.at)
            stop_all(tag, SHUTDOWN_TIMEOUT_S, proc.pid)
            watch.close()
            signum = getattr(err, "signum", signal.SIGINT)
            name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
            where = _where(at)
            raise RunInterrupted(f"interrupted by {name}{' ' + where if where else ''}; all ranks stopped after "
                                 f"{time.monotonic() - start:.1f} s; log: {log_path}", signum) from None
        stop_all(tag, SHUTDOWN_TIMEOUT_S)  # torchrun stops its workers; any it missed go now
        at, stopped = dict(watch.at), dict(watch.stopped)
        watch.close()
    if rc != 0:
        cause = _root_cause(log_path.read_text(), at, stopped)
        raise RunFailed(f"{cause}; all ranks stopped after {time.monotonic() - start:.1f} s; log: {log_path}")
