"""Many plans of one job as columns: what the cost functions read.

`estimate` (one plan) and the search (every layout of a job) run the same cost code; the only difference is
that here each varying plan field is a numpy array with one entry per plan. Fields that a search holds fixed
(the job: gpus, batch, sequence, precision, kernels) are shared scalars. The properties repeat `Plan`'s, in
array form.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..plan import Plan

VARYING = ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero", "recompute", "sequence_parallel", "schedule")
SHARED = ("gpus", "global_batch", "seq_len", "precision", "attention", "grad_dtype", "overlap_dp_comm")


@dataclass
class Layouts:
    """Resolved plans of one job; VARYING fields are equal-length arrays, SHARED fields scalars."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    vpp: np.ndarray
    micro_batch: np.ndarray
    zero: np.ndarray
    recompute: np.ndarray  # none | selective | full
    sequence_parallel: np.ndarray
    schedule: np.ndarray  # 1f1b | interleaved | gpipe
    gpus: int
    global_batch: int
    seq_len: int
    precision: str
    attention: str
    grad_dtype: str
    overlap_dp_comm: bool
    stage_layers: list[int] | None = None  # an explicit split (one plan only)

    def __post_init__(self):
        for name in VARYING:
            setattr(self, name, np.atleast_1d(np.asarray(getattr(self, name))))
        n = {len(getattr(self, name)) for name in VARYING}
        if len(n) != 1:
            raise ValueError(f"Layouts columns differ in length: {sorted(n)}")
        if self.stage_layers is not None and len(self) != 1:
            raise ValueError("an explicit stage_layers split describes one plan")

    @classmethod
    def from_plan(cls, plan: Plan) -> Layouts:
        """One resolved plan as a Layouts of length 1."""
        d = plan.model_dump()
        return cls(**{f.name: d[f.name] for f in fields(cls)})

    def take(self, index) -> Layouts:
        """The plans at `index` (an integer array) as a new Layouts."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update({name: getattr(self, name)[index] for name in VARYING})
        return Layouts(**d)

    def __len__(self) -> int:
        return len(self.tp)

    def plan(self, i: int) -> Plan:
        """Plan i as a `Plan` (resolved: dp and schedule filled in)."""
        d = {name: getattr(self, name)[i].item() for name in VARYING}
        d.update({name: getattr(self, name) for name in SHARED})
        if self.stage_layers is not None:
            d["stage_layers"] = self.stage_layers
        return Plan(**d)

    @property
    def num_microbatches(self) -> np.ndarray:
        """Micro-batches per pipeline per step: global / (dp * micro_batch)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def tokens_per_microbatch(self) -> np.ndarray:
        """Tokens of one micro-batch on one device: micro_batch * seq_len / cp."""
        return self.micro_batch * self.seq_len / self.cp

    @property
    def sp_divisor(self) -> np.ndarray:
        """tp with sequence parallelism, else 1."""
        return np.where(self.sequence_parallel, self.tp, 1)

    @property
    def zero_shard(self) -> np.ndarray:
        """Ranks holding replicas of the same weights, over which ZeRO shards state: dp * cp."""
        return self.dp * self.cp

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len
