"""Save and resume a plan's training with torch.distributed.checkpoint (DCP), inside the workers.

What a save holds, and why it is enough for a resumed run to give bit-for-bit the losses of an uninterrupted one
(tests/test_checkpoint_resume.py):
  model, optimizer  `Trainer.state_dict` (torch's get_state_dict: FSDP2 and tensor-parallel DTensors stay sharded,
                    each rank writing its own shards; plain replicated tensors are written once). The optimizer
                    state holds AdamW's moments and its step count, which sets the bias correction.
  progress          each rank's loss shares and step times so far (the measurement reports every step), and on
                    rank 0 the earlier saves' records; JSON text under a key of its own per rank (exact: Python
                    writes a float's shortest repr that reads back the same)
  RNG               each rank's torch generator states: nothing in training draws from them now (batches are a
                    function of (seed, step), initial weights of (seed, name), dropout is not run), but a random op
                    added later would then resume exactly too
Not held (PowerSGD's hook state would be: its plans are refused with checkpoint flags, execute.run_plans.run_plans),
because nothing else carries over between steps: gradients (every step ends with zero_grad(set_to_none)) and
micro-batch accumulation (all micro-batches of a step run inside Trainer.step).

The save is written into step-N.tmp; once every rank's shards are written (an all-reduce of the write times is
the barrier) rank 0 commits it (manifest.commit: manifest.json, then one rename). DCP's collectives run on a gloo
group of their own: async saves run them from a background thread, which must not interleave with training's.
While rank 0 hashes the files the others go on to the next step and wait for it at its first collective: a save
rank 0 takes longer to hash than the process-group timeout (execute.run_plans.PG_TIMEOUT_S, 120 s by default; about
100 GB at a disk's 1 GB/s) would stop the run. The executor's models are far from that.

Async (`--checkpoint-async`): dcp.async_save with torch 2.13's default stager, which copies the state dict to
host memory before it returns (so training may change the weights at once), then writes from a thread. On CPU with
gloo it worked and resumed to identical losses (2026-11-23, 2-vCPU sandbox, DDP / FSDP2 / TP / PP / ZeRO-1
plans). A save is committed at the end of the next step (every rank waits for its write there, so all ranks
commit at the same point), or when the run ends.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ...spec.measurement import CheckpointSave
from .manifest import Identity, commit, step_dir, tmp_dir


def _max(values: list[float], group) -> list[float]:
    """Each value's largest over the ranks (the slowest rank sets a save's time)."""
    if group is None:
        return values
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()


class Checkpointer:
    """One plan's saves (every `every` steps into `root`) and its resume, on this rank."""

    def __init__(self, trainer, root: str, every: int | None, mode: str, group, ident: dict, plan_file: str,
                 mark=None):
        """`mark(point)` is told "saveN" as the save after step N starts and "commitN" once its shards are
        written, before the commit (the worker reports it as the rank's place, and tests fail there)."""
        self.trainer, self.root, self.every, self.mode, self.group = trainer, Path(root), every, mode, group
        self.ident, self.plan_file = Identity(**ident), plan_file
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.saves: list[CheckpointSave] = []  # rank 0: every committed save, earlier launches' included
        self.read_s: float | None = None
        self.pending = None  # an async save not yet committed: (step, tmp, future, start, blocking_s, finished)
        self.mark = mark or (lambda point: None)

    # -- what is saved -------------------------------------------------------------------------------------
    def _state(self, shares: list[float], times: list[float]) -> dict:
        progress = {"shares": shares, "times": times,
                    "saves": [s.model_dump() for s in self.saves] if self.rank == 0 else []}
        rng = {"cpu": torch.get_rng_state()}
        if self.trainer.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.trainer.device)
        return {**self.trainer.state_dict(), f"progress.rank{self.rank}": json.dumps(progress),
                f"rng.rank{self.rank}": rng}

    # -- saving --------------------------------------------------------------------------------------------
    def after_step(self, done: int, shares: list[float], times: list[float]) -> None:
        """Called after every step (`done` steps run): commit an async save begun a step ago, save if it is time."""
        self.flush()
        if self.every and done % self.every == 0:
            self.save(done, shares, times)

    def save(self, step: int, shares: list[float], times: list[float]) -> None:
        import torch.distributed.checkpoint as dcp

        self.mark(f"save{step}")
        tmp = tmp_dir(self.root, step)
        start = time.perf_counter()
        state = self._state(shares, times)
        if self.mode == "async":
            future = dcp.async_save(state, checkpoint_id=str(tmp), process_group=self.group)
            finished = []
            future.add_done_callback(lambda f: finished.append(time.perf_counter()))
            self.pending = (step, tmp, future, start, time.perf_counter() - start, finished)
            return
        dcp.save(state, checkpoint_id=str(tmp), process_group=self.group)
        took = time.perf_counter() - start
        self._commit(step, tmp, took, took)

    def flush(self) -> None:
        """Wait for an async save's write to finish on this rank and commit it."""
        if self.pending is None:
            return
        step, tmp, future, start, blocking, finished = self.pending
        self.pending = None
        future.result()
        self._commit(step, tmp, (finished[0] if finished else time.perf_counter()) - start, blocking)

    def _commit(self, step: int, tmp: Path, write_s: float, blocking_s: float) -> None:
        self.mark(f"commit{step}")
        write_s, blocking_s = _max([write_s, blocking_s], self.group)  # also the barrier: every rank has written
        if self.rank == 0:
            record = CheckpointSave(step=step, write_s=write_s, blocking_s=blocking_s, bytes=0)
            self.saves.append(commit(tmp, step_dir(self.root, step), self.ident, self.plan_file, record).save)

    # -- resuming ------------------------------------------------------------------------------------------
    def load(self, directory: str, step: int, earlier: list[dict]) -> tuple[list[float], list[float]]:
        """Load the save in `directory` (checked by the parent: manifest.latest) into the trainer; returns this
        rank's loss shares and step times of the `step` steps it holds. `earlier`: the save's own record (from its
        manifest), which its progress cannot hold."""
        import torch.distributed.checkpoint as dcp

        start = time.perf_counter()
        state = self._state([], [])
        dcp.load(state, checkpoint_id=directory, process_group=self.group)
        self.trainer.load_state_dict(state)
        rng = state[f"rng.rank{self.rank}"]
        torch.set_rng_state(rng["cpu"])
        if "cuda" in rng:
            torch.cuda.set_rng_state(rng["cuda"], self.trainer.device)
        progress = json.loads(state[f"progress.rank{self.rank}"])
        self.read_s = _max([time.perf_counter() - start], self.group)[0]
        if len(progress["shares"]) != step or len(progress["times"]) != step:
            raise RuntimeError(f"checkpoint {directory} holds {len(progress['shares'])} steps of progress on rank "
                               f"{self.rank}, its manifest says {step}")
        self.saves = [CheckpointSave(**s) for s in progress["saves"] + earlier]
        return progress["shares"], progress["times"]

    def record(self) -> dict:
        """Rank 0: the checkpoint fields of the measurement (spec.measurement.CheckpointRecord)."""
        return {"directory": str(self.root), "every": self.every, "mode": self.mode,
                "saves": [s.model_dump() for s in self.saves], "read_s": self.read_s}
