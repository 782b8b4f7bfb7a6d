"""Faults planned by a test, met by the workers (execute/worker.py's `at`): tests/test_faults.py uses them to
show that every way a rank can fail ends the run cleanly.

PERFMODEL_TEST_FAULT="KIND:RANK:POINT[,KIND:RANK:POINT]". Each KIND is what the fault really is, not a mock:
  kill   SIGKILL to itself (as the kernel's out-of-memory killer or `kill -9` would)
  stop   SIGSTOP to itself: the rank stalls, alive, until the run's --timeout
  raise  an exception out of the training code
  oom    the rank's address space limited (RLIMIT_AS, as `ulimit -v`) to what it holds plus OOM_MARGIN, then
         OOM_STEP_BYTES asked for, as a step of a larger model would: torch's allocator fails
  fsize  the rank's file-size limit (RLIMIT_FSIZE, as `ulimit -f`) set to FSIZE_BYTES: its next larger write
         fails with EFBIG, as a full disk fails with ENOSPC (the worker ignores SIGXFSZ so the write errs)
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import time

VAR = "PERFMODEL_TEST_FAULT"
LINE = "injected fault:"  # "injected fault: KIND rank R POINT at UNIX_TIME" in the launch's log
KINDS = ("kill", "stop", "raise", "oom", "fsize")
OOM_MARGIN = 64 << 20
OOM_STEP_BYTES = 1 << 30  # 1 GiB of fp32 activations: far past the margin
FSIZE_BYTES = 4096  # a tiny model's shards and measurement are tens of KiB and more


def planned(rank: int) -> dict[str, str]:
    """This rank's faults: point -> kind."""
    out = {}
    for item in filter(None, os.environ.get(VAR, "").split(",")):
        kind, r, point = item.split(":")
        if kind not in KINDS:
            raise ValueError(f"{VAR}: kind {kind!r}; valid: {', '.join(KINDS)}")
        if int(r) == rank:
            out[point] = kind
    return out


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def meet(point: str) -> None:
    """Fail here if a fault is planned for this rank at `point` (first a line to the log with the time, from
    which tests measure how long the run takes to end)."""
    rank = int(os.environ.get("RANK", "0"))
    kind = planned(rank).get(point)
    if kind is not None:
        print(f"{LINE} {kind} rank {rank} {point} at {time.time():.3f}", file=sys.stderr, flush=True)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif kind == "raise":
        raise RuntimeError(f"injected fault at {point} ({VAR})")
    elif kind == "oom":
        import torch

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (_address_space() + OOM_MARGIN, hard))
        torch.empty(OOM_STEP_BYTES // 4, dtype=torch.float32).fill_(1.0)
    elif kind == "fsize":
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_BYTES, hard))


def lift_memory_limit() -> None:
    """Raise the address-space limit back to its hard limit (a failed rank needs memory to say why)."""
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    except (ValueError, OSError):
        pass
