"""The processes of one launch, found by a tag in their environment, and stopping every one of them.

The ranks are children of torchrun's agent (forked by execute/launch/agent.py; torch's own subprocess workers would each be
in a session of their own), and a rank whose agent was killed is re-parented to init and out of reach of a walk
down the process tree. Every process of a launch inherits its
environment, so the launch puts a tag there (`TAG_VAR`) and finds them all by it in /proc, re-parented or not.
Linux only (/proc); elsewhere `tagged` finds nothing and stopping falls back to torchrun's own process group.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

TAG_VAR = "PERFMODEL_LAUNCH_TAG"
RANK_NAME = "pm-rank-"  # /proc/PID/comm of a rank forked by execute.launch.agent: RANK_NAME + its rank (15 characters)
PROC = Path("/proc")

# /proc/PID/stat's state letters (proc(5)) a user can act on
STATES = {"T": "stopped (SIGSTOP, SIGTSTP or a debugger)", "t": "stopped by a debugger (tracing)",
          "D": "waiting in uninterruptible I/O (a disk or network file system)", "Z": "exited (a zombie)"}


@dataclass(frozen=True)
class Proc:
    pid: int
    rank: int | None  # the worker's RANK (its environment, or the name a forked rank gives itself); None for the agent
    state: str  # one letter of /proc/PID/stat


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def forked_rank(pid: int) -> str | None:
    """The rank a worker forked by execute.launch.agent named itself with (/proc/PID/comm RANK_NAME + rank), or None."""
    try:
        name = (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return None
    return name[len(RANK_NAME):] if name.startswith(RANK_NAME) else None


def state(pid: int) -> str | None:
    """The one-letter state of `pid` (proc(5)), or None once it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]  # the command name in parentheses may hold spaces


def tagged(var: str, value: str) -> list[Proc]:
    """Every live process whose environment has var=value (this process excluded), zombies included."""
    if not PROC.is_dir():
        return []
    out = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        env = _environ(int(entry.name))
        if env.get(var) != value:
            continue
        st = state(int(entry.name))
        if st is not None:
            rank = env.get("RANK") or forked_rank(int(entry.name))
            out.append(Proc(int(entry.name), int(rank) if rank and rank.isdigit() else None, st))
    return out


def send(pid: int, sig: int) -> None:
    """`sig` to `pid`, then SIGCONT (a stopped process acts on a signal only once continued; SIGKILL aside); a
    process already gone is no error."""
    for s in (sig, signal.SIGCONT):
        try:
            os.kill(pid, s)
        except (ProcessLookupError, PermissionError):
            return


def stop_all(tag: str, grace_s: float, leader: int | None = None) -> None:
    """Stop every process of the launch tagged `tag`: SIGTERM (with SIGCONT, so that a stopped one receives it),
    then SIGKILL for those still alive after `grace_s`. `leader`: torchrun's pid, whose process group is signalled
    too where /proc cannot be read."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [p.pid for p in tagged(TAG_VAR, tag) if p.state != "Z"]
        if leader is not None:
            try:
                os.killpg(leader, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in pids:
            send(pid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline and any(p.state != "Z" for p in tagged(TAG_VAR, tag)):
            time.sleep(0.05)
        if not any(p.state != "Z" for p in tagged(TAG_VAR, tag)):
            break
