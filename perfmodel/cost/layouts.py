"""Many plans of one job as columns: what the cost functions read.

`estimate` (one plan) and the search (every layout of a job) run the same cost code; the only difference is
that here each varying plan field is a numpy array with one entry per plan. Fields that a search holds fixed
(the job: gpus, batch, sequence, precision, kernels) are shared scalars. The properties repeat `Plan`'s, in
array form.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from functools import cached_property
from typing import get_args

import numpy as np

from ..spec.plan.finetune import LoRA
from ..spec.plan.layout import Plan, Recompute, Schedule, state_dtypes

VARYING = ("tp", "pp", "dp", "cp", "vpp", "ep", "etp", "micro_batch", "zero", "recompute", "sequence_parallel", "schedule",
           "account_for_embedding", "account_for_loss", "dp_replicate")
SHARED = ("gpus", "global_batch", "seq_len", "precision", "attention", "grad_dtype", "grad_compression",
          "weight_dtype", "moment_dtype", "powersgd_rank", "overlap_dp_comm", "tp_comm_overlap", "stack",
          "first_stage_layers", "last_stage_layers", "expert_imbalance", "moe_capacity_factor", "moe_pad_to_capacity",
          "moe_dispatcher", "moe_dense_dispatch",
          "moe_overlap", "cuda_graphs", "fp8_recipe", "fp8_params", "loss_chunks", "recompute_modules", "recompute_saved", "recompute_offloaded",
          "activation_offload_layers", "offload_modules", "optimizer_offload", "recompute_num_layers", "recompute_method",
          "compile", "lora", "optimizer_update", "optimizer_offload_ratio")
CATEGORIES = {"recompute": get_args(Recompute), "schedule": get_args(Schedule)}
# What one device's kernels, tensors and weights depend on (pp, vpp and the schedule only set how many)
PER_DEVICE = ("tp", "cp", "dp", "ep", "etp", "micro_batch", "sequence_parallel", "zero", "recompute", "dp_replicate")


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
    moe_capacity_factor: float | None = None  # token dropping (Plan.moe_capacity_factor; None: dropless)
    moe_pad_to_capacity: bool = False  # every expert's input padded to its capacity
    moe_dispatcher: str = "alltoall"
    moe_overlap: bool = False
    moe_dense_dispatch: bool = False  # MaxText's one-hot dispatch on capacity-padded buffers (cost.compute.moe_dense)
    cuda_graphs: str | None = None  # Plan.cuda_graphs (None: the stack profile's HostProfile.graphs)
    fp8_recipe: str | None = None  # Plan.fp8_recipe: tensorwise | blockwise | mxfp8 (None: tensorwise's scales)
    fp8_params: bool = False  # Plan.fp8_params: the GEMM weights stored quantized, no bf16 copy (cost.memory.footprint)
    recompute_modules: tuple[str, ...] | list[str] | None = None  # selective: Megatron-Core's module list
    loss_chunks: int = 1  # the LM head and loss run in this many token chunks (Plan.loss_chunks)
    recompute_saved: tuple[str, ...] | list[str] | None = None  # names: the tensors kept (cost.compute.remat_names)
    recompute_offloaded: tuple[str, ...] | list[str] | None = None  # ... of them and the input, in host memory
    optimizer_offload: bool = False  # the optimizer state in host memory between steps (Plan.optimizer_offload)
    activation_offload_layers: int = 0  # Megatron-Core cpu_offloading: layers whose activations wait in host memory
    offload_modules: tuple[str, ...] | list[str] | None = None  # Megatron-Core fine-grained offloading (cost.memory.act_offload)
    optimizer_update: str = "device"  # where an offloaded state is updated (Plan.optimizer_update; cost.host.host_update)
    optimizer_offload_ratio: float = 1.0  # the share the host updates (Plan.optimizer_offload_ratio)
    dp_replicate: np.ndarray | int = 1  # hybrid sharding: replicas of the ZeRO group (Plan.dp_replicate)
    recompute_num_layers: int | None = None  # full: Megatron-LM --recompute-num-layers (None: every layer)
    recompute_method: str = "uniform"  # full: uniform | block
    compile: str = "none"  # torch.compile: none | model | model+loss (Plan.compile)
    tp_comm_overlap: bool | None = None  # Plan.tp_comm_overlap (None: the stack's)
    account_for_embedding: np.ndarray | bool = False  # Megatron-LM's accounting (spec.plan.megatron_split.megatron_chunks)
    account_for_loss: np.ndarray | bool = False
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    stage_layers: list[int] | None = None  # an explicit split (one plan only)
    lora: LoRA | dict | None = None  # Plan.lora: adapters on a frozen base (None: every weight trains)
    weight_dtype: str | None = None  # Plan.weight_dtype: fp32 (a master exists) | bf16 (None: the stack's)
    moment_dtype: str | None = None  # Plan.moment_dtype: Adam's m and v, fp32 | bf16 (None: the stack's)
    _distinct: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # this instance's only
    _codes: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # field -> (codes, count)

    def __post_init__(self):
        if isinstance(self.lora, dict):
            self.lora = LoRA(**self.lora)
        if self.grad_dtype is None or self.tp_comm_overlap is None:  # a job that leaves them to its stack
            from ..spec.stack.profile import stack_defaults

            self.grad_dtype, self.tp_comm_overlap = stack_defaults(self.stack, self.grad_dtype, self.tp_comm_overlap)
        if self.weight_dtype is None or self.moment_dtype is None:
            self.weight_dtype, self.moment_dtype = state_dtypes(self.stack, self.weight_dtype, self.moment_dtype)
        for name in VARYING:
            setattr(self, name, np.ascontiguousarray(np.atleast_1d(getattr(self, name))))  # not strided: faster
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
        out = Layouts(**d)
        out._codes.update({name: (code[index], base) for name, (code, base) in self._codes.items()})
        return out

    def __len__(self) -> int:
        return len(self.tp)

    def distinct(self, names: tuple[str, ...] = PER_DEVICE) -> tuple[np.ndarray, np.ndarray]:
        """Index of a representative plan of each distinct combination of the VARYING fields `names`, and each
        plan's combination: formulas that read only those fields run once per combination (`take`), and their results
        are copied out to every plan (`result[inverse]`). A search has thousands of plans per combination."""
        if names not in self._distinct:
            self._distinct[names] = _distinct(len(self), [self.code(name) for name in names])
        return self._distinct[names]

    def code(self, name: str) -> tuple[np.ndarray, int]:
        """Field `name` of every plan as a small integer code, and how many codes there are (equal values, equal
        codes): what `distinct` packs. Strings of a known category by their index in it."""
        if name not in self._codes:
            col = getattr(self, name)
            if name in CATEGORIES:  # a few known strings: their index (a string sort would cost more than the rest)
                col = np.select([col == v for v in CATEGORIES[name]], range(len(CATEGORIES[name])), -1)
                if (col < 0).any():
                    raise ValueError(f"Layouts.{name} holds a value outside {CATEGORIES[name]}")  # a bug, not input
            self._codes[name] = _dense(col.ravel())
        return self._codes[name]

    def plan(self, i: int) -> Plan:
        """Plan i as a `Plan` (resolved: dp and schedule filled in)."""
        d = {name: getattr(self, name)[i].item() for name in VARYING}
        d.update({name: getattr(self, name) for name in SHARED})
        if self.stage_layers is not None:
            d["stage_layers"] = self.stage_layers
        return Plan(**d)

    @cached_property
    def num_microbatches(self) -> np.ndarray:
        """Micro-batches per pipeline per step: global / (dp * micro_batch)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @cached_property
    def tokens_per_microbatch(self) -> np.ndarray:
        """Tokens of one micro-batch on one device: micro_batch * seq_len / cp."""
        return self.micro_batch * self.seq_len / self.cp

    @cached_property
    def sp_divisor(self) -> np.ndarray:
        """tp with sequence parallelism, else 1."""
        return np.where(self.sequence_parallel, self.tp, 1)

    @cached_property
    def zero_shard(self) -> np.ndarray:
        """Ranks over which ZeRO shards state: the dp * cp holding replicas of the same weights, over dp_replicate."""
        return self.dp * self.cp // self.dp_replicate

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @cached_property
    def pipelined(self) -> np.ndarray:
        """pp > 1: the plan's stages are more than one (the last then holds its own copy of a tied LM head)."""
        return self.pp > 1

    @cached_property
    def edp(self) -> np.ndarray:
        """Expert data-parallel size: tp * cp * dp / (ep * etp) (MoE parallel folding)."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)


def _dense(col: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value's index among the distinct values of `col`, and their count: by a table over the value range
    when the values are small non-negative integers (O(n)), else by a sort."""
    if col.dtype.kind in "iub" and len(col) and col.min() >= 0 and col.max() < 4 * len(col) + 64:
        col = col.astype(np.int64)
        present = np.bincount(col) > 0
        index = np.cumsum(present) - 1
        return index[col], int(present.sum())
    values, inverse = np.unique(col, return_inverse=True)
    return inverse.ravel().astype(np.int64), len(values)


def _distinct(n: int, codes: list[tuple[np.ndarray, int]]) -> tuple[np.ndarray, np.ndarray]:
    """`Layouts.distinct` from the fields' codes: one mixed-radix key per plan, ranked by a table over the keys
    where they are few (O(n)) or by one sort. `first`: one representative per key (equal keys, equal fields, so
    any serves), in key order; `inverse`: each plan's rank."""
    radix = 1
    for _, base in codes:
        radix *= max(base, 1)
    if radix >= 2**62:  # more combinations than an int64 packs (never for plans of one job)
        raise ValueError("Layouts.distinct: too many combinations to pack")
    key = np.zeros(n, np.int64)
    for code, base in codes:
        key = key * base + code
    if radix <= 4 * n + 1024:
        present = np.zeros(radix, bool)
        present[key] = True
        rank = np.cumsum(present) - 1
        rep = np.empty(radix, np.int64)
        rep[key] = np.arange(n)
        return rep[present], rank[key]
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.ravel()


_AMONG: dict[tuple[int, tuple], tuple[object, np.ndarray]] = {}
_AMONG_SIZE = 64  # entries kept (each holds its column alive, so that an id is never reused while cached)


def among(values, choices: tuple) -> np.ndarray | bool:
    """Whether each of `values` (a category column of `Layouts`, e.g. recompute, or one string) is one of `choices`.

    Memoized per column object: a search asks the same question of the same column of ~10^5 plans dozens of
    times, and a string comparison costs about 1 ms per 10^5 elements (an integer one 0.04 ms)."""
    if not isinstance(values, np.ndarray) or values.ndim == 0:
        return np.isin(values, choices)
    key = (id(values), choices)
    hit = _AMONG.get(key)
    if hit is not None and hit[0] is values:
        return hit[1]
    if len(_AMONG) >= _AMONG_SIZE:
        _AMONG.clear()
    mask = np.isin(values, choices)
    _AMONG[key] = (values, mask)
    return mask


def spread(obj, inverse: np.ndarray):
    """`obj` (an Op or Comm, or a list of them) computed on distinct plans, copied out to every plan."""
    if isinstance(obj, list):
        return [spread(o, inverse) for o in obj]
    for f in fields(obj) if is_dataclass(obj) else ():
        x = getattr(obj, f.name)
        if isinstance(x, np.ndarray) and x.ndim:
            setattr(obj, f.name, x[inverse])
    return obj
