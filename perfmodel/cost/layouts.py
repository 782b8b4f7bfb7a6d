"""Many plans of one job as columns: what the cost functions read.

`estimate` (one plan) and the search (every layout of a job) run the same cost code; the only difference is
that here each varying plan field is a numpy array with one entry per plan. Fields that a search holds fixed
(the job: gpus, batch, sequence, precision, kernels) are shared scalars. The properties repeat `Plan`'s, in
array form.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import get_args

import numpy as np

from ..plan import Plan, Recompute, Schedule

VARYING = ("tp", "pp", "dp", "cp", "vpp", "ep", "etp", "micro_batch", "zero", "recompute", "sequence_parallel", "schedule",
           "account_for_embedding", "account_for_loss")
SHARED = ("gpus", "global_batch", "seq_len", "precision", "attention", "grad_dtype", "grad_compression",
          "powersgd_rank", "overlap_dp_comm", "stack",
          "first_stage_layers", "last_stage_layers", "expert_imbalance", "moe_dispatcher",
          "moe_overlap", "recompute_modules", "recompute_num_layers", "recompute_method")
CATEGORIES = {"recompute": get_args(Recompute), "schedule": get_args(Schedule)}
# What one device's kernels, tensors and weights depend on (pp, vpp and the schedule only set how many)
PER_DEVICE = ("tp", "cp", "dp", "ep", "etp", "micro_batch", "sequence_parallel", "zero", "recompute")


@dataclass
class Layouts:
    """Resolved plans of one job; VARYING fields are equal-length arrays, SHARED fields scalars."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    vpp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    micro_batch: np.ndarray
    zero: np.ndarray
    recompute: np.ndarray  # none | selective | full | per-op
    sequence_parallel: np.ndarray
    schedule: np.ndarray  # 1f1b | interleaved | gpipe
    gpus: int
    global_batch: int
    seq_len: int
    precision: str
    attention: str
    grad_dtype: str
    grad_compression: str
    powersgd_rank: int
    overlap_dp_comm: bool
    stack: str
    expert_imbalance: float = 1.0
    moe_dispatcher: str = "alltoall"
    moe_overlap: bool = False
    recompute_modules: tuple[str, ...] | list[str] | None = None  # selective: Megatron-Core's module list
    recompute_num_layers: int | None = None  # full: Megatron-LM --recompute-num-layers (None: every layer)
    recompute_method: str = "uniform"  # full: uniform | block
    account_for_embedding: np.ndarray | bool = False  # Megatron-LM's pipeline accounting (plan.megatron_chunks)
    account_for_loss: np.ndarray | bool = False
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    stage_layers: list[int] | None = None  # an explicit split (one plan only)
    _distinct: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # this instance's only

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
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.init})

    def take(self, index) -> Layouts:
        """The plans at `index` (an integer array) as a new Layouts."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        d.update({name: getattr(self, name)[index] for name in VARYING})
        return Layouts(**d)

    def __len__(self) -> int:
        return len(self.tp)

    def distinct(self, names: tuple[str, ...] = PER_DEVICE) -> tuple[np.ndarray, np.ndarray]:
        """Index of a representative plan of each distinct combination of the VARYING fields `names`, and each
        plan's combination: formulas that read only those fields run once per combination (`take`), and their results
        are copied out to every plan (`result[inverse]`). A search has thousands of plans per combination."""
        if names not in self._distinct:
            if names != PER_DEVICE and set(names) <= set(PER_DEVICE):  # from the finer split, on its few plans
                first, inverse = self.distinct(PER_DEVICE)
                f2, inv2 = _distinct(self.take(first), names)
                self._distinct[names] = (first[f2], inv2[inverse])
            else:
                self._distinct[names] = _distinct(self, names)
        return self._distinct[names]

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

    @property
    def edp(self) -> np.ndarray:
        """Expert data-parallel size: tp * cp * dp / (ep * etp) (MoE parallel folding)."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)


def _distinct(lay: Layouts, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """`Layouts.distinct` by one sort: a mixed-radix code per plan over the fields (strings by their index)."""
    cols, radix = [], 1
    for name in names:
        col = getattr(lay, name)
        if name in CATEGORIES:  # a few known strings: their index (a string sort would cost more than the rest)
            col = np.select([col == v for v in CATEGORIES[name]], range(len(CATEGORIES[name])), -1)
            if (col < 0).any():
                raise ValueError(f"Layouts.{name} holds a value outside {CATEGORIES[name]}")  # a bug, not input
        elif col.dtype.kind not in "iub":
            col = np.unique(col, return_inverse=True)[1]
        col = col.astype(np.int64).ravel()
        cols.append((col, int(col.max(initial=0)) + 1))
        radix *= cols[-1][1]
    code = np.zeros(len(lay), np.int64)
    if radix >= 2**62:  # too many values to pack: each field's index among its values present instead
        cols = [(inv.ravel(), int(inv.max(initial=0)) + 1) for inv in (np.unique(c, return_inverse=True)[1]
                                                                     for c, _ in cols)]
        if np.prod([float(b) for _, b in cols]) >= 2**62:  # more combinations than plans could ever be
            raise ValueError("Layouts.distinct: too many combinations to pack")
    for col, base in cols:
        code = code * base + col
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def spread(obj, inverse: np.ndarray):
    """`obj` (an Op or Comm, or a list of them) computed on distinct plans, copied out to every plan."""
    if isinstance(obj, list):
        return [spread(o, inverse) for o in obj]
    for f in fields(obj) if is_dataclass(obj) else ():
        x = getattr(obj, f.name)
        if isinstance(x, np.ndarray) and x.ndim:
            setattr(obj, f.name, x[inverse])
    return obj
