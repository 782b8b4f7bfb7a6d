"""torchrun's elastic agent with its workers forked from one process that has imported torch once.

`python -m torch.distributed.run ... -m MODULE ARGS` starts every worker as a new Python, and each imports torch
again: on a 2-core CPU host about 3 CPU-s a rank before its first step, plus about 2 CPU-s for torchrun's own
import. Here the agent takes the same flags (torchrun's own parser, `torch.distributed.run.parse_args`), imports
MODULE, and hands torch's `elastic_launch` (what torchrun runs) a callable, `MODULE.main(ARGS)`, started with
`start_method="fork"`: the rendezvous, the environment of each rank (RANK, WORLD_SIZE, MASTER_ADDR ...), the
monitoring, the failure summary and the shutdown are torchrun's. Measured 2026-11-24 (2-vCPU sandbox, torch
2.13.0+cpu, 4 gloo ranks that import torch and DTensor, all-reduce once and leave): 9.1 s wall and 15.0 CPU-s
under torchrun's subprocess workers, 3.3 s and 3.25 CPU-s forked. execute.launch.torchrun runs CPU ranks here; GPU ranks
start under `torch.distributed.run` as new processes (a fork is safe only while the parent has not touched CUDA, and
no GPU was at hand to show that it holds).

A forked rank names itself `pm-rank-N` (prctl PR_SET_NAME): its /proc/PID/environ is the agent's, without RANK,
so execute.launch.processes reads the rank from /proc/PID/comm. torch's fork context reports one failed rank, the first
it happens to join; torchrun's subprocess context reports every one, and execute.launch.torchrun names the rank killed by
a signal before the peers that lost it. So the agent watches its ranks end (waitid with WNOWAIT: the exit status
is read, the child is left for torch to reap) and, when the launch fails, prints each ended rank in the failure
summary's own format (`rank : N`, `exitcode : C`) after torch's summary.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
import threading
import uuid

from .processes import RANK_NAME, forked_rank

FORKED_VAR = "PERFMODEL_FORKED_RANK"  # set in a forked rank: leave by returning, not by os._exit


def _rank_main(module: str, argv: list[str]):
    """One rank: name the process, run MODULE.main(argv), return its exit code (the fork context waits for a
    return value from every rank that succeeds)."""
    os.environ[FORKED_VAR] = "1"
    try:
        ctypes.CDLL(None).prctl(15, f"{RANK_NAME}{os.environ.get('RANK', '')}".encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the rank keeps its name, and processes finds no rank
        pass
    code = importlib.import_module(module).main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    return code or 0


class _Endings:
    """The ranks of this agent that ended, in the order they ended: pid -> (rank, exit code; -signal if killed)."""

    def __init__(self, poll_s: float = 0.02):
        self.ended: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(poll_s,), daemon=True)
        self._thread.start()

    def _children(self) -> set[int]:
        me = os.getpid()
        pids: set[int] = set()
        try:
            for tid in os.listdir(f"/proc/{me}/task"):
                with open(f"/proc/{me}/task/{tid}/children") as f:
                    pids.update(int(x) for x in f.read().split())
        except OSError:  # not Linux, or a thread gone meanwhile: what was read so far
            pass
        return pids

    def _watch(self, poll_s: float) -> None:
        while not self._stop.wait(poll_s):
            for pid in self._children() - self.ended.keys():
                try:
                    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    continue
                rank = forked_rank(pid)
                if info is None or rank is None:
                    continue
                killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
                self.ended[pid] = (rank, -info.si_status if killed else info.si_status)

    def summary(self) -> str:
        self._stop.set()
        self._thread.join(1)
        lines = ["Failures: the ranks as they ended (perfmodel.execute.launch.agent)"]
        for i, (pid, (rank, code)) in enumerate(self.ended.items()):
            if code:
                lines += [f"[{i}]:", f"  rank      : {rank}", f"  exitcode  : {code} (pid: {pid})"]
        return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.standalone:  # what torch.distributed.run.run does for --standalone
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    config, _, cmd_args = config_from_args(args)
    config.start_method = "fork"
    if cmd_args[:2] != ["-u", "-m"] or len(cmd_args) < 3:
        raise SystemExit(f"perfmodel.execute.launch.agent runs a module (-m MODULE ...), got {cmd_args}")
    module, module_args = cmd_args[2], cmd_args[3:]
    imported = importlib.import_module(module)  # once, here: the forked ranks find it imported
    getattr(imported, "preload", lambda: None)()  # and what its ranks import on first use
    endings = _Endings()
    try:
        elastic_launch(config, _rank_main)(module, module_args)
    except BaseException:
        print(endings.summary(), flush=True)
        raise


if __name__ == "__main__":
    main()
