"""Launching a module of this package under `torchrun`, and turning a failed launch into one clear line.

Used by `perfmodel execute`, `validate` and `calibrate`. The parent process imports no torch: it starts
`python -m torch.distributed.run` in its own process group, streams the workers' `[perfmodel]` lines, keeps
everything else in a log file, and enforces a wall-clock limit. A rank that dies is noticed by torchrun's
agent (it polls every `MONITOR_INTERVAL_S`), which stops the others (SIGTERM, then SIGKILL after
`SHUTDOWN_TIMEOUT_S`); collectives carry a timeout too (the worker's `pg_timeout_s`) so that ranks on other
hosts stop as well. Whatever happens, the launch returns within `timeout_s` plus a few seconds.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

PREFIX = "[perfmodel]"  # worker lines with this prefix are shown to the user; the rest goes to the log
MONITOR_INTERVAL_S = 0.2
SHUTDOWN_TIMEOUT_S = 5


class RunFailed(RuntimeError):
    """A launched run that did not finish; the message is one line (what died, how, where the log is)."""


def torchrun_command(module: str, args: list[str], nproc: int, rdzv: list[str] | None = None) -> list[str]:
    """`python -m torch.distributed.run` for `module` on `nproc` processes: standalone on one host, or with the
    user's `--nnodes/--rdzv-*` flags for many."""
    where = list(rdzv) if rdzv else ["--standalone"]
    return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={nproc}", "--max-restarts=0",
            f"--monitor-interval={MONITOR_INTERVAL_S}", f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}",
            "-m", module, *args]


# glibc malloc on CPU ranks (mallopt(3); environment variables set the same parameters at process start).
# Timing: the mmap and trim thresholds at the maxima glibc's own dynamic thresholds climb to once a loop has
# freed its large blocks (DEFAULT_MMAP_THRESHOLD_MAX = 32 MiB on 64-bit; trim at twice the mmap threshold), so
# freed tensors are reused from the heap, as torch's CUDA caching allocator reuses its blocks, from the first
# plan of a launch on. Measured on 2026-11-22 (2-vCPU sandbox, torch 2.13.0+cpu, 4 ranks, the cpu-smoke dp4
# and fsdp4 plans, two runs each with and without it; issue 4's session-5 note): blocks >= 64 KiB returned to the
# OS at once made the steps 1.4-2.0x slower (page faults and zeroing on every large allocation).
# Memory: every block of a page (4 KiB) or more mapped and returned at once, so that resident memory follows the
# live tensors (execute/memory.py); execute runs this in a separate, untimed launch. A page, not 64 KiB: a small
# model's tensors (tiny-llama's 64 x 64 fp32 weights are 16 KiB) fell under 64 KiB, stayed resident in the heap
# after they were freed, and the measure (high-water mark minus resident size after freeing) read 0-0.2 MiB
# for plans holding 2-4 MiB. Measured 2026-11-22 (2-vCPU sandbox, tests/test_execute.py's two-process plans):
# with a page the same plans read 1.5-4.9 MiB over two runs, and the ones checked by hand hold at least their
# fp32 weights, gradients and Adam moments (test_peak_memory_holds_the_training_state); the cpu-smoke plans
# (tensors >= 1 MiB) read the same to 0.1 MiB under both settings.
MALLOC_TIMING = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}
MALLOC_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(4 << 10)}


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


def _root_cause(log: str) -> str:
    """The rank and exit status torchrun reports as the first failure, and the worker's own last error line."""
    ours = [ln.split(PREFIX, 1)[1].strip() for ln in log.splitlines() if PREFIX in ln and " failed: " in ln]
    ours.sort(key=lambda line: "Connection reset" in line or "Connection closed" in line)  # the peers' errors last
    start = min((i for i in (log.find("Failures:"), log.find("Root Cause")) if i >= 0), default=len(log))
    report = log[start:]  # torchrun's summary: other failures, then the first observed one
    failures = [(int(r), int(c)) for r, c in re.findall(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", report, re.S)]
    # A rank killed by a signal is the cause; ranks that exited with an error were usually its peers,
    # whose collectives broke when it died.
    # SIGTERM is what torchrun sends the survivors once one rank has failed: it comes last.
    failures.sort(key=lambda f: (f[1] == -signal.SIGTERM, f[1] >= 0))
    parts = []
    if failures:
        rank, code = failures[0]
        how = f"signal {signal.Signals(-code).name}" if code < 0 and -code in signal.Signals._value2member_map_ \
            else f"exit code {code}"
        parts.append(f"rank {rank} stopped with {how}")
    if failures and failures[0][1] < 0:  # a killed rank: its peers' broken-connection errors say nothing more
        ours = [line for line in ours if "Connection" not in line]
    if ours:
        parts.append(ours[0])
    return "; ".join(parts) or "the workers failed"


def launch(module: str, args: list[str], nproc: int, *, device: str, log_path: str | Path,
           timeout_s: float, rdzv: list[str] | None = None, echo=None, measure_memory: bool = False,
           limit_s: float | None = None) -> None:
    """Run `module` under torchrun and wait. RunFailed (one line) if any rank fails or the limit passes.
    `measure_memory`: the workers' allocator set for measuring resident memory, not for timing (worker_env).
    `limit_s`: the limit the user gave, where this launch has only what an earlier launch left of it.

    `echo(line)` receives the workers' `[perfmodel]` lines as they come (default: print to stderr).
    """
    echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    cmd = torchrun_command(module, args, nproc, rdzv)
    log_path = Path(log_path)
    start = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=worker_env(device, measure_memory),
                                start_new_session=True)

        def pump():
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if PREFIX in line and " failed: " not in line:
                    echo(line.rstrip("\n").split(PREFIX, 1)[1].strip())

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            reader.join(5)
            raise RunFailed(f"the run passed its limit of {limit_s or timeout_s:g} s and was stopped (all ranks killed); "
                            f"log: {log_path}") from None
        except KeyboardInterrupt:
            _kill(proc)
            raise
        reader.join(5)
    if rc != 0:
        cause = _root_cause(log_path.read_text())
        raise RunFailed(f"{cause}; all ranks stopped after {time.monotonic() - start:.1f} s; log: {log_path}")


def _kill(proc: subprocess.Popen) -> None:
    """Stop torchrun and every worker it started (they share its process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            continue
