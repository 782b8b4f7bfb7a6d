"""One training step of one plan: compute, communication, pipeline and memory put together.

Step time = pipeline time of the m micro-batches (slowest stage, plus the bubble)
          + exposed data-parallel / ZeRO-1/2 communication + the optimizer step.
A stage is built from units (its layers, plus the embedding on the first stage and the LM head and loss on
the last). Per micro-batch a unit costs its ops' forward, backward and recomputed forward (ops.py) plus the
exposed communication it causes:
  - tensor-parallel collectives: never overlapped;
  - context-parallel key/value exchange: overlapped with the attention kernel;
  - ZeRO-3 weight gathers and gradient reduce-scatters: overlapped with the compute of the unit they serve,
    except the embedding's, which starts the forward and ends the backward with nothing to hide behind;
  - pipeline sends: exposed.
Per step: data-parallel gradient reduction (every micro-batch for ZeRO-2, once otherwise) overlaps the
backward of the last micro-batch except its last layer's bucket; ZeRO-1/2 weight gathers overlap the first
forward of the next step likewise; with pp > 1 and tied embeddings, the first and last stages all-reduce the
embedding gradient (exposed); with sequence parallelism the tp group all-reduces the gradients of the weights
it keeps whole (norms, row-parallel biases) in one flat call (exposed).
"Overlapped" hides at most `Efficiency.comm_overlap` of a collective (1 on GPUs and TPUs, whose collectives
have their own engines; measured near 0 for gloo, which runs on the cores that compute): `_with_overlap`.

The same code predicts one plan (`estimate`) and every layout of a search (`evaluate` over `Layouts`
columns): every quantity below is a numpy array with one entry per plan, and stage quantities have a leading
axis over the stage kinds (first, middle, last; or each stage of an explicit split).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..hardware import System, load_hardware
from ..models import ModelConfig, load_model
from ..plan import Plan, default_stage_layers, resolve
from ..result import (
    CommTime,
    Estimate,
    MemoryBreakdown,
    OpTime,
    StageTime,
    TimeBreakdown,
)
from . import comm as C
from .compute import shared_core_speedup
from .flops import model_flops_per_token, recompute_flops_per_token
from .layouts import Layouts
from .memory import (
    GRAD_BYTES,
    WEIGHT_BYTES,
    adam_step_bytes,
    embedding_activation_bytes,
    head_activation_bytes,
    layer_activation_bytes,
    layer_params_per_device,
    sp_replicated_params,
    stage_params_per_device,
    state_bytes,
)
from .ops import (
    ACT_BYTES,
    GEMM_INPUT_BYTES,
    Device,
    Op,
    embedding_ops,
    head_ops,
    layer_ops,
    zero3_copy_op,
)
from .pipeline import in_flight, pipeline_time, stage_layers

COMPUTE_PARTS = {"gemm": "gemm", "attention": "attention", "memory": "memory_bound"}
COMPUTE_PART_NAMES = (*COMPUTE_PARTS.values(), "recompute")
STAGE_PARTS = ("gemm", "attention", "memory_bound", "recompute", "tp_comm", "cp_comm", "pp_comm", "zero3_comm")
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "other", "total")
UNITS = ("layer", "embedding", "head")


def unit_counts(model: ModelConfig) -> dict[str, int]:
    """How many of each unit the whole model has."""
    return {"layer": model.n_layers, "embedding": 1, "head": 1}


@dataclass
class Pattern:
    """A communication pattern of one unit (or of the step), per plan: per-call seconds, calls and exposed
    seconds per unit per micro-batch (per step for unit "step"; per stage for "stage")."""

    name: str
    collective: object  # str, or an array of str (sequence parallel or not)
    group: str
    size: object  # bytes per call
    seconds: object  # per call
    calls: object
    exposed: object
    unit: str
    part: str  # TimeBreakdown field the exposed time is charged to
    active: object  # plans that run this pattern
    n: object = 1  # group size and stride in device order (collectives) ...
    stride: object = 1
    tier: object = None  # ... or the tier name (sends and the tied-embedding sync)

    def row(self, system: System, gpus: int, group_size: int, count: float, i: int, n_plans: int) -> CommTime:
        """The pattern for plan i (of n_plans) as a CommTime row, `count` units on the reported stage."""
        at = lambda x: _item(x, i, n_plans)
        name = self.name if self.unit in ("layer", "stage", "step") else f"{self.name} ({self.unit})"
        tiers = (at(self.tier) if self.tier is not None
                 else C.describe(C.group_phases(system, int(at(self.n)), int(at(self.stride)), gpus)))
        calls, seconds = at(self.calls), at(self.seconds)
        return CommTime(name=name, collective=at(self.collective), group=self.group, group_size=group_size,
                        tiers=tiers, bytes=at(self.size), calls=calls * count, seconds_per_call=seconds,
                        total_s=seconds * calls * count, exposed_s=at(self.exposed) * count)


def _item(x, i: int, n: int):
    """Element i of a per-plan value (an array of n, or a scalar shared by all) as a Python value."""
    x = np.broadcast_to(np.asarray(x), (n,))[i]
    return x.item() if isinstance(x, np.generic) else x


def _overlapped(comm, window, pieces):
    """Exposed seconds of `comm` split into `pieces` equal buckets that overlap a `window` of compute:
    the last bucket always waits for the compute to end; the rest hides behind it until the window is full."""
    return np.where(comm > 0, np.maximum(comm / pieces, comm - window * (1 - 1 / pieces)), 0.0)


def _with_overlap(comm, exposed, fraction):
    """Exposed seconds when only `fraction` of the communication can run beside compute (Efficiency.comm_overlap):
    the rest adds to the step, the overlappable part is exposed as the schedule leaves it (`exposed`, what the
    whole of `comm` would leave). fraction 1: `exposed`; 0: all of `comm`."""
    return (1.0 - fraction) * comm + fraction * exposed


def _unit_parts(ops: list[Op], recompute) -> dict[str, np.ndarray]:
    """Per-micro-batch seconds of a unit's ops by breakdown part (recomputed forwards in `recompute`)."""
    out = dict.fromkeys(STAGE_PARTS, 0.0)
    for op in ops:
        out[COMPUTE_PARTS[op.kind]] = out[COMPUTE_PARTS[op.kind]] + op.fwd_s + op.bwd_s
        out["recompute"] = out["recompute"] + op.recompute_s(recompute)
    return out


@dataclass
class Stages:
    """The stage kinds whose times and memory are compared: arrays (kinds, plans) of unit counts."""

    layers: np.ndarray
    embedding: np.ndarray
    head: np.ndarray
    rank: np.ndarray  # pipeline rank whose in-flight micro-batches the kind holds
    valid: np.ndarray  # kinds a plan has (no middle stage with pp = 2, no last with pp = 1)

    @classmethod
    def of_split(cls, split) -> Stages:
        """Every stage of a split (layers per stage), one plan: the first holds the embedding, the last the head."""
        n = len(split)
        col = lambda x: np.asarray(x, float)[:, None]
        ranks = np.arange(n)
        return cls(col(split), col(ranks == 0), col(ranks == n - 1), col(ranks), np.ones((n, 1), bool))

    def count(self, unit: str) -> np.ndarray:
        return self.layers if unit == "layer" else getattr(self, unit)

    def seconds(self, per_unit: dict) -> np.ndarray:
        """Seconds per micro-batch on each stage: every unit's seconds times how many of it the stage holds."""
        return sum(per_unit[u] * self.count(u) for u in UNITS)

    def name(self, kind: int, pp: int, explicit: bool) -> str:
        if pp == 1:
            return "single"
        if kind == 0:
            return "first"
        if (explicit and kind == pp - 1) or (not explicit and kind == 2):
            return "last"
        return f"stage {kind}" if explicit else "middle"


def _stages(model: ModelConfig, lay: Layouts) -> Stages:
    """First, (largest) middle and last stage of the default split per plan; or each stage of an explicit one."""
    pp = lay.pp
    if lay.stage_layers is not None:
        return Stages.of_split(lay.stage_layers)
    values, inverse = np.unique(pp, return_inverse=True)
    lf, lm, ll = np.array([stage_layers(model.n_layers, int(p)) for p in values], float)[inverse].T
    one = np.ones(len(lay))
    return Stages(layers=np.stack([lf, lm, ll]), embedding=np.stack([one, 0 * one, 0 * one]),
                  head=np.stack([(pp == 1) * one, 0 * one, one]), rank=np.stack([0 * one, one, pp - 1.0]),
                  valid=np.stack([one > 0, pp > 2, pp > 1]))


def _pipeline_busy(model: ModelConfig, lay: Layouts, st: Stages, parts: dict) -> np.ndarray:
    """Fraction of its ranks a pipeline keeps computing: the mean stage's compute per micro-batch over the
    slowest stage's (1 without pipelining)."""
    compute = {u: sum(parts[u][k] for k in COMPUTE_PART_NAMES) for u in UNITS}
    per_stage = st.seconds(compute)
    slowest = np.max(np.where(st.valid, per_stage, 0.0), axis=0)
    mean = sum(compute[u] * n for u, n in unit_counts(model).items()) / lay.pp
    return np.minimum(np.divide(mean, slowest, out=np.ones_like(slowest), where=slowest > 0), 1.0)


def _shared_host_speedup(system: System, lay: Layouts, busy=1.0) -> np.ndarray:
    """cost.compute.shared_core_speedup for every plan with `busy` of its ranks computing; 1 without
    system.shared_host."""
    host = system.shared_host
    if host is None:
        return np.ones(len(lay))
    return shared_core_speedup(np.broadcast_to(busy, (len(lay),)), lay.gpus, host.ranks, host.cores)


def _pick(values: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """values[kind[j], j] for every plan j."""
    return np.take_along_axis(np.broadcast_to(values, (values.shape[0], len(kind))), kind[None, :], 0)[0]


@dataclass
class Step:
    """Everything `evaluate` derives for a set of plans: headline arrays and the detail `estimate` reports."""

    lay: Layouts
    stages: Stages
    ops: dict
    patterns: list
    step_patterns: list
    time: dict  # TimeBreakdown fields -> arrays
    memory: dict  # MemoryBreakdown fields -> arrays (the stage kind with most memory)
    bottleneck: np.ndarray  # stage kind index
    memory_kind: np.ndarray
    capacity: float
    model_flops: float
    hardware_flops: np.ndarray
    peak_flops: float
    peak_dtype: str
    unit_time: dict  # seconds per micro-batch of one layer, the embedding, the head (compute + exposed comm)
    unit_fwd: dict  # ... of which forward (compute + exposed comm)
    unit_recompute: dict  # ... of which recomputed forward (backward = unit_time - unit_fwd - unit_recompute)
    p2p: np.ndarray  # seconds per micro-batch of a stage's sends
    stage_time_max: np.ndarray  # seconds per micro-batch of the slowest stage
    compute_speedup: np.ndarray  # cost.compute.shared_core_speedup applied to compute (1: no shared host)

    @property
    def step_time_s(self) -> np.ndarray:
        return self.time["total"]

    @property
    def fits(self) -> np.ndarray:
        return self.memory["total"] <= self.capacity

    @property
    def mfu(self) -> np.ndarray:
        return self.model_flops / (self.step_time_s * self.lay.gpus * self.peak_flops)


def _distinct(*cols):
    """Index of the first plan of each distinct combination of `cols`, and each plan's combination."""
    code = np.zeros(len(cols[0]), np.int64)
    for c in cols:
        values, inv = np.unique(c, return_inverse=True)
        code = code * len(values) + inv
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return first, inverse


def unit_ops(model: ModelConfig, system: System, lay: Layouts) -> dict[str, list[Op]]:
    """The ops of each unit for every plan, costed once per distinct combination of the fields they read.

    A micro-batch's kernels depend on tp, cp, micro_batch and sequence parallelism, and (through fp8 weight
    casts) on dp and ZeRO; a search has thousands of plans per combination, so the formulas run on the
    distinct combinations and the results are copied out to every plan.
    """
    first, inverse = _distinct(lay.tp, lay.cp, lay.micro_batch, lay.sequence_parallel, lay.dp, lay.zero)
    dev = Device(model, system, lay.take(first))
    ops = {"layer": layer_ops(dev), "embedding": embedding_ops(dev), "head": head_ops(dev)}
    spread = lambda x: np.asarray(x)[inverse] if np.ndim(x) else x
    for unit_list in ops.values():
        for op in unit_list:
            for name in ("fwd_s", "bwd_s", "fwd_flops", "bwd_flops", "active"):
                setattr(op, name, spread(getattr(op, name)))
    return ops


def _unit_params(model: ModelConfig, lay: Layouts) -> dict[str, np.ndarray]:
    """Parameters per device of one layer, the embedding (+ positions) and the head (final norm + LM head copy)."""
    t, pp = lay.tp, lay.pp
    p_emb = stage_params_per_device(model, t, pp, 0, True, False)
    return {"layer": layer_params_per_device(model, t), "embedding": p_emb,
            "head": stage_params_per_device(model, t, pp, 0, pp == 1, True) - np.where(pp == 1, p_emb, 0.0)}


def stage_memory(model: ModelConfig, system: System, lay: Layouts, st: Stages | None = None, per_kind=False):
    """Bytes per device on the most loaded stage of every plan: ({MemoryBreakdown field: array}, stage kind);
    with per_kind, {field: array (stage kinds, plans)} for every stage kind of `st` instead.

    Needs no kernel times, so a search can drop the plans that do not fit before timing the rest.
    """
    st = _stages(model, lay) if st is None else st
    t, pp, v, m, rc = lay.tp, lay.pp, lay.vpp, lay.num_microbatches, lay.recompute
    shard, zero, gbytes = lay.zero_shard, lay.zero, GRAD_BYTES[lay.grad_dtype]
    zero3 = (zero == 3) & (shard > 1)
    p_layer, p_emb, p_head = _unit_params(model, lay).values()
    params_of = stage_params_per_device(model, t, pp, st.layers, st.embedding == 1, st.head == 1)
    chunks = in_flight(lay.schedule, pp, v, m, st.rank)
    act = layer_activation_bytes(model, lay) * st.layers / v * chunks
    # The layer in its backward holds what recomputation rebuilt for it: all of its activations (full) or
    # its attention core (selective); its stored share is already counted above.
    act = act + layer_activation_bytes(model, lay, "none") - layer_activation_bytes(model, lay, rc)
    act = act + st.embedding * embedding_activation_bytes(model, lay) * chunks / v
    act = act + st.head * head_activation_bytes(model, lay) * np.where(lay.schedule == "gpipe", m, 1)
    states = state_bytes(params_of, lay)
    # Transient whole copies, never more than the sharding saved (a stage of one or two layers): the largest
    # unit on the stage gathered twice (current + prefetch) and its gradients once.
    freed = params_of * (1 - 1 / shard)
    unit = np.maximum.reduce([p_layer * (st.layers > 0), p_emb * st.embedding, p_head * st.head])
    other = system.memory_overhead_bytes + np.where(
        zero3, np.minimum(2 * unit, freed) * WEIGHT_BYTES + np.minimum(unit, freed) * gbytes,
        np.where((zero == 2) & (shard > 1), np.minimum(unit, freed) * gbytes, 0.0))
    narrow = GEMM_INPUT_BYTES[lay.precision]
    if narrow < 2:  # cached narrow copies of the layers' projection weights (not embedding / LM head)
        other = other + st.layers * model.matmul_params_per_layer() / t * narrow / np.where(zero == 3, shard, 1)
    total = states["weights"] + states["gradients"] + states["optimizer"] + act + other
    by_kind = dict(states, activations=act, other=other, total=total)
    if per_kind:
        return {k: np.broadcast_to(by_kind[k], total.shape) for k in MEMORY_PARTS}
    mem_kind = np.argmax(np.where(st.valid, total, -np.inf), axis=0)
    memory = {k: _pick(np.broadcast_to(by_kind[k], total.shape), mem_kind) for k in MEMORY_PARTS}

    return memory, mem_kind


def evaluate(model: ModelConfig, system: System, lay: Layouts, memory=None) -> Step:
    """Predict one training step of every plan in `lay` (resolved plans of one job) on `system`.

    `memory`: what `stage_memory` returned for these plans, if the caller has it already.
    """
    dev = Device(model, system, lay)
    t, cp, pp, v, dp = lay.tp, lay.cp, lay.pp, lay.vpp, lay.dp
    m, rc, shard, gpus = lay.num_microbatches, lay.recompute, lay.zero_shard, lay.gpus
    sp, zero, overlap = lay.sequence_parallel, lay.zero, lay.overlap_dp_comm
    f = system.efficiency.comm_overlap
    gbytes = GRAD_BYTES[lay.grad_dtype]
    fwd_passes = np.where(rc == "full", 2, 1)  # forwards a layer runs per micro-batch (its own + recomputed)
    none = np.zeros(len(lay))

    ops = unit_ops(model, system, lay)
    unit_params = _unit_params(model, lay)
    zero3 = (zero == 3) & (shard > 1)
    for unit, params in unit_params.items():
        ops[unit].append(zero3_copy_op(dev, params, gbytes, active=zero3))
    parts = {u: _unit_parts(ops[u], rc) for u in UNITS}
    # Busy seconds per direction (compute, later + exposed comm): what ZeRO/DP collectives can hide behind.
    fwd = {u: sum(op.fwd_s for op in ops[u]) + none for u in UNITS}
    bwd = {u: sum(op.bwd_s + op.recompute_s(rc) for op in ops[u]) + none for u in UNITS}
    st = _stages(model, lay)
    speedup = _shared_host_speedup(system, lay, _pipeline_busy(model, lay, st, parts))
    for u in UNITS:  # ranks sharing a host's cores compute faster while pipeline neighbours wait
        for k in COMPUTE_PART_NAMES:
            parts[u][k] = parts[u][k] / speedup
        fwd[u], bwd[u] = fwd[u] / speedup, bwd[u] / speedup
    patterns: list[Pattern] = []

    def charge(p: Pattern, fwd_exposed=0.0, bwd_exposed=0.0):
        p.exposed = fwd_exposed + bwd_exposed
        parts[p.unit][p.part] = parts[p.unit][p.part] + p.exposed
        fwd[p.unit] = fwd[p.unit] + fwd_exposed
        bwd[p.unit] = bwd[p.unit] + bwd_exposed
        patterns.append(p)

    # --- tensor parallel: activations of T tokens x hidden, bf16 -------------------------------------------
    tp_g, cp_g, dp_g = C.Groups(system, t, 1, gpus), C.Groups(system, cp, t, gpus), C.Groups(system, shard, t, gpus)
    s_tp = dev.tokens * model.hidden * ACT_BYTES
    tp_group = {"n": t, "stride": 1}
    # with SP: all-gather before / reduce-scatter after each TP region (two of each per direction); without:
    # all-reduce after each row-parallel GEMM, in each direction (Shoeybi et al. 2019, Fig. 4; Korthikanti et
    # al. 2022, Fig. 5). Each kind at its own rate (a calibrated spec may fit them apart).
    ag, rs, ar = (tp_g.time(k, s_tp) for k in ("all_gather", "reduce_scatter", "all_reduce"))
    one = np.where(sp, (ag + rs) / 2, ar)  # per call: SP's calls alternate all-gather and reduce-scatter
    kind = np.where(sp, "all_gather / reduce_scatter", "all_reduce")
    per_dir = np.where(sp, 4, 2)
    on = t > 1
    charge(Pattern("tp activations", kind, "tp", s_tp, one, per_dir * (fwd_passes + 1), 0, "layer", "tp_comm", on,
                   **tp_group), per_dir * one, per_dir * one * fwd_passes)
    # embedding: reduce the vocab-parallel lookup (RS with SP; AR without), and with SP gather its grad;
    # head: gather the final-norm output (SP) and reduce the LM-head input gradient (RS with SP; AR without).
    n_sp = np.where(sp, 2, 1)
    charge(Pattern("tp embedding", kind, "tp", s_tp, one, n_sp, 0, "embedding", "tp_comm", on, **tp_group),
           np.where(sp, rs, ar), np.where(sp, ag, 0.0))
    charge(Pattern("tp lm head", kind, "tp", s_tp, one, n_sp, 0, "head", "tp_comm", on, **tp_group),
           np.where(sp, ag, 0.0), np.where(sp, rs, ar))
    ce = tp_g.time("all_reduce", dev.tokens * 4)  # max, sum-exp, target (fp32)
    charge(Pattern("tp cross-entropy stats", "all_reduce", "tp", dev.tokens * 4, ce, 3, 0, "head", "tp_comm", on,
                   **tp_group), 3 * ce)

    # --- context parallel: all-gather K and V of the sequence, reduce-scatter their gradients ---------------
    s_kv = lay.micro_batch * lay.seq_len * 2 * model.kv_dim / t * ACT_BYTES
    ag, rs = cp_g.time("all_gather", s_kv), cp_g.time("reduce_scatter", s_kv)
    attn = [op for op in ops["layer"] if op.kind == "attention" or op.name.startswith("attn")]
    a_f, a_b = sum(op.fwd_s for op in attn) / speedup, sum(op.bwd_s for op in attn) / speedup
    again = np.isin(rc, ("full", "selective"))  # the recomputed attention needs K and V again
    # forward: gather K, V; backward: gather them again and reduce-scatter their gradients
    exp_f = _with_overlap(ag, np.maximum(0.0, ag - a_f), f)
    exp_b = _with_overlap(ag + rs, np.maximum(0.0, ag + rs - a_b), f)
    calls = 3 + again
    charge(Pattern("cp key/value exchange", "all_gather / reduce_scatter", "cp", s_kv,
                   ((calls - 1) * ag + rs) / calls, calls, 0, "layer", "cp_comm", cp > 1, n=cp, stride=t),
           exp_f, exp_b + exp_f * again)

    # --- ZeRO-3: gather a unit's weights before its forward and backward, reduce-scatter its gradients ------
    for unit, params in unit_params.items():
        on = zero3 & (params > 0)
        ag = on * dp_g.time("all_gather", params * WEIGHT_BYTES)
        rs = on * dp_g.time("reduce_scatter", params * gbytes)
        # The embedding is first in the forward and last in the backward: nothing to hide behind.
        hidden = overlap and unit != "embedding"
        e_f = _with_overlap(ag, np.maximum(0.0, ag - fwd[unit]), f) if hidden else ag
        e_b = _with_overlap(ag + rs, np.maximum(0.0, ag + rs - bwd[unit]), f) if hidden else ag + rs
        share = np.divide(ag, ag + rs, out=np.zeros_like(ag), where=ag + rs > 0)  # split by traffic
        charge(Pattern("zero3 weight all-gather", "all_gather", "dp", params * WEIGHT_BYTES, ag, 2, 0, unit,
                       "zero3_comm", on, n=shard, stride=t), e_f, e_b * share)
        charge(Pattern("zero3 gradient reduce-scatter", "reduce_scatter", "dp", params * gbytes, rs, 1, 0, unit,
                       "zero3_comm", on, n=shard, stride=t), 0.0, e_b * (1 - share))

    # --- pipeline: send activations forward and gradients backward at each chunk boundary ----------------
    # One tier carries stage-to-stage sends and the tied-embedding sync.
    link_bw, link_lat, link = C.group_p2p_link(system, t * cp * dp, pp)
    s_pp = dev.tokens * model.hidden * ACT_BYTES / lay.sp_divisor
    one = C.p2p_time(s_pp, link_bw, link_lat)
    p2p = np.where(pp > 1, 2 * v * one, 0.0)
    patterns.append(Pattern("pp activations/gradients", "send/recv", "pp", s_pp, one, 2 * v, p2p, "stage",
                            "pp_comm", pp > 1, tier=link))

    # --- stages ----------------------------------------------------------------------------------------------
    stage_part = {k: st.seconds({u: parts[u][k] for u in UNITS}) for k in STAGE_PARTS}
    stage_part["pp_comm"] = stage_part["pp_comm"] + p2p
    per_mb = sum(stage_part.values())
    bottleneck = np.argmax(np.where(st.valid, per_mb, -np.inf), axis=0)
    t_mean = (sum(sum(parts[u].values()) * n for u, n in unit_counts(model).items()) + pp * p2p) / pp
    t_max = _pick(per_mb, bottleneck)
    t_pipe = pipeline_time(m, t_max, t_mean, pp, v)

    # --- data parallel (ZeRO 0/1/2), tied-embedding sync and optimizer, for the stage with most parameters -
    params_of = stage_params_per_device(model, t, pp, st.layers, st.embedding == 1, st.head == 1)
    big = np.argmax(np.where(st.valid, params_of, -np.inf), axis=0)
    p_stage, nl = _pick(params_of, big), np.maximum(_pick(st.layers, big), 1)
    fwd_mb = sum(fwd[u] * _pick(st.count(u), big) for u in UNITS)
    bwd_mb = sum(bwd[u] * _pick(st.count(u), big) for u in UNITS)
    step_patterns: list[Pattern] = []
    on = (shard > 1) & (zero < 3)
    g = on * np.where(zero == 0, dp_g.time("all_reduce", p_stage * gbytes), dp_g.time("reduce_scatter", p_stage * gbytes))
    reps = np.where(zero == 2, m, 1)  # ZeRO-2 reduces every micro-batch (gradients are not kept whole)
    exp = reps * (_with_overlap(g, _overlapped(g, bwd_mb, nl), f) if overlap else g)
    step_patterns.append(Pattern("dp gradient reduction", np.where(zero == 0, "all_reduce", "reduce_scatter"), "dp",
                                 p_stage * gbytes, g, reps, exp, "step", "dp_comm", on, n=shard, stride=t))
    on = (shard > 1) & np.isin(zero, (1, 2))
    w = on * dp_g.time("all_gather", p_stage * WEIGHT_BYTES)
    exp = _with_overlap(w, _overlapped(w, fwd_mb, nl), f) if overlap else w
    step_patterns.append(Pattern("zero weight all-gather", "all_gather", "dp", p_stage * WEIGHT_BYTES, w, 1, exp,
                                 "step", "dp_comm", on, n=shard, stride=t))
    on = sp & (t > 1)
    size = sp_replicated_params(model, _pick(st.layers, big), _pick(st.head, big) == 1) * gbytes
    r = on * tp_g.time("all_reduce", size)
    step_patterns.append(Pattern("tp replicated-weight gradients (sp)", "all_reduce", "tp", size, r, 1, r, "step",
                                 "dp_comm", on, **tp_group))
    on = (pp > 1) & model.tie_embeddings  # first and last stage hold copies of the embedding
    size = model.vocab * model.hidden / t * gbytes / np.where(zero >= 2, shard, 1)  # the local gradient
    one = on * C.ring_allreduce_time(size, 2, link_bw, link_lat)
    step_patterns.append(Pattern("tied embedding gradient sync", "all_reduce", "embedding", size, one, 1, one,
                                 "step", "dp_comm", on, tier=link))
    dp_exposed = sum(p.exposed for p in step_patterns)
    opt_params = p_stage / np.where(zero >= 1, shard, 1)
    t_opt = dev.optimizer(opt_params * adam_step_bytes(gbytes)) / _shared_host_speedup(system, lay)

    step = t_pipe + dp_exposed + t_opt
    time = {k: _pick(stage_part[k], bottleneck) * m for k in STAGE_PARTS}
    time.update(dp_comm=dp_exposed + none, bubble=t_pipe - m * t_max, optimizer=t_opt + none, total=step)

    memory, mem_kind = stage_memory(model, system, lay, st) if memory is None else memory

    # --- FLOPs ---------------------------------------------------------------------------------------------
    tokens = lay.tokens_per_step
    mflops = tokens * model_flops_per_token(model, lay.seq_len)
    extra = {mode: recompute_flops_per_token(model, lay.seq_len, mode) for mode in ("none", "selective", "full")}
    hflops = mflops + tokens * np.select([rc == k for k in extra], list(extra.values()))
    peak_dtype = lay.precision if lay.precision in ("fp8", "fp4") else "bf16"
    return Step(lay=lay, stages=st, ops=ops, patterns=patterns, step_patterns=step_patterns, time=time,
                memory=memory, bottleneck=bottleneck, memory_kind=mem_kind, capacity=system.accelerator.hbm_bytes,
                model_flops=mflops, hardware_flops=hflops, peak_flops=system.accelerator.peak_flops(peak_dtype),
                peak_dtype=peak_dtype, unit_time={u: sum(parts[u].values()) + none for u in UNITS},
                unit_fwd={u: fwd[u] + none for u in UNITS}, unit_recompute={u: parts[u]["recompute"] + none for u in UNITS},
                p2p=p2p,
                stage_time_max=t_max, compute_speedup=speedup + none)


def estimate(model: ModelConfig | str, hardware: System | str, plan: Plan | dict) -> Estimate:
    """Predict one training step of `plan` for `model` on `hardware` (objects, preset names or file paths)."""
    model, system = load_model(model), load_hardware(hardware)
    if isinstance(plan, dict):
        plan = Plan(**plan)
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a perfmodel.Plan (or a dict of its fields), got {type(plan).__name__}")
    plan = resolve(plan, model, system)
    return report_plan(model, system, evaluate(model, system, Layouts.from_plan(plan)), 0)


def stage_times(step: Step, i: int, split: list[int]) -> list[StageTime]:
    """Plan i's seconds per micro-batch on each stage of `split` (layers per stage): the units it holds (the
    first has the embedding, the last the head) at their forward / recompute / backward times, plus its sends
    (half with the forward, half with the backward)."""
    n, pp, st = len(step.lay), len(split), Stages.of_split(split)
    at = lambda x: float(_item(x, i, n))
    per_stage = lambda per_unit: st.seconds({u: at(per_unit[u]) for u in UNITS})[:, 0]
    p2p = at(step.p2p)
    total, fwd, rec = per_stage(step.unit_time) + p2p, per_stage(step.unit_fwd) + p2p / 2, \
        per_stage(step.unit_recompute)
    return [StageTime(stage=r, layers=layers, embedding=r == 0, head=r == pp - 1, fwd_s=float(fwd[r]),
                      recompute_s=float(rec[r]), bwd_s=float(total[r] - fwd[r] - rec[r]))
            for r, layers in enumerate(split)]


def report_plan(model: ModelConfig, system: System, step: Step, i: int) -> Estimate:
    """Plan i of an evaluated set as an Estimate: the headline numbers and the rows that trace them."""
    lay, st = step.lay, step.stages
    plan = lay.plan(i)
    explicit = lay.stage_layers is not None
    pp, v, m, gpus = plan.pp, plan.vpp, plan.num_microbatches, plan.gpus
    b, k_mem = int(step.bottleneck[i]), int(step.memory_kind[i])
    n = len(lay)
    at = lambda x: float(_item(x, i, n))
    count = {u: int(_item(st.count(u)[b], i, n)) for u in UNITS}
    rc = plan.recompute
    time_s = TimeBreakdown(**{k: at(x) for k, x in step.time.items()})
    membd = MemoryBreakdown(**{k: at(x) for k, x in step.memory.items()})
    sizes = {"tp": plan.tp, "cp": plan.cp, "dp": plan.zero_shard, "pp": pp, "embedding": 2}
    on = lambda p: bool(_item(p.active, i, n))
    comms = [p.row(system, gpus, sizes[p.group], m if p.unit == "stage" else count[p.unit] * m, i, n)
             for p in step.patterns if on(p) and (p.unit == "stage" or count[p.unit])]
    comms += [p.row(system, gpus, sizes[p.group], 1, i, n) for p in step.step_patterns if on(p)]
    fast = at(step.compute_speedup)  # op times at the rate of ranks sharing a host (1 elsewhere)
    ops = [OpTime(name=op.name, where=u, kind=op.kind, count=count[u], fwd_s=at(op.fwd_s) / fast,
                  bwd_s=at(op.bwd_s) / fast, recompute_s=at(op.recompute_s(rc)) / fast, fwd_flops=at(op.fwd_flops),
                  formula=op.formula)
           for u in UNITS if count[u] for op in step.ops[u] if on(op)]

    step_s, cap = time_s.total, step.capacity
    fits = membd.total <= cap
    mem_stage, bottleneck = st.name(k_mem, pp, explicit), st.name(b, pp, explicit)
    split = plan.stage_layers or default_stage_layers(model.n_layers, pp)
    mflops, hflops, peak = step.model_flops, at(step.hardware_flops), step.peak_flops
    tokens = lay.tokens_per_step
    notes = [f"MFU/HFU against dense {step.peak_dtype} peak {peak / 1e12:.1f} TFLOP/s per device"]
    if fast != 1.0:
        host = system.shared_host
        notes.append(f"the spec's rates were measured with {host.ranks} ranks sharing {host.cores} cores; this job "
                     f"keeps fewer of them computing at once ({plan.gpus} ranks, pipeline stages waiting on the "
                     f"slowest), so they compute {fast:.2f}x faster (cost.compute.shared_core_speedup); compute, "
                     "op and optimizer times above include it")
    if not fits:
        notes.append(f"does not fit: needs {membd.total / 2**30:.1f} GiB > {cap / 2**30:.1f} GiB "
                     f"on the {mem_stage} stage (short by {(membd.total - cap) / 2**30:.1f} GiB)")
    if v > 1 and model.n_layers % (pp * v):
        notes.append(f"{model.n_layers} layers do not split evenly into pp*vpp = {pp * v} chunks: chunks differ by "
                     "one layer (as in Megatron-LM's uneven first/last stages); activation memory uses the mean chunk")
    if model.position != "learned" and plan.seq_len > model.max_seq_len:
        notes.append(f"seq_len {plan.seq_len} exceeds the model's max_seq_len {model.max_seq_len}")

    return Estimate(
        model=model.name, hardware=system.name, gpus=gpus, params=model.n_params(),
        step_time_s=step_s, tokens_per_s=tokens / step_s, tokens_per_s_per_gpu=tokens / step_s / gpus,
        model_tflops_per_gpu=mflops / step_s / gpus / 1e12, mfu=mflops / (step_s * gpus * peak),
        hfu=hflops / (step_s * gpus * peak), mfu_peak_dtype=step.peak_dtype,
        fits_in_memory=fits, memory_capacity_bytes=cap, memory_shortfall_bytes=max(0.0, membd.total - cap),
        memory_stage=mem_stage, memory_bytes=membd, time_s=time_s,
        model_flops_per_step=mflops, hardware_flops_per_step=hflops, num_microbatches=m,
        stage_layers=split, bottleneck_stage=bottleneck, stages=stage_times(step, i, split),
        ops=ops, comms=comms, plan=plan, notes=notes,
    )
