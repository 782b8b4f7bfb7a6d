"""PaSE: the per-operator sharding of one pipeline stage over its device mesh, by exact dynamic programming.

Elango 2021, "PaSE: Parallelization Strategies for Efficient DNN Training" (IPDPS 2021). The training step is a
graph of operators (vertices) joined by the tensors they pass (edges). A configuration of a vertex splits its
iteration space over the mesh: each mesh axis splits one iteration-space dimension, or none. The cost of a
strategy (one configuration per vertex) is the sum of vertex costs (compute and the collectives inside the op)
and edge costs (redistributing a tensor from the placement its producer writes to the placement its consumer
reads, forward and backward). PaSE orders the vertices greedily so that the set of processed vertices that
still have unprocessed neighbours (the dependent set) stays small (GENERATESEQ), then runs an exact dynamic
program over that order whose table is indexed by the configurations of the dependent set.

Here the mesh is the stage mesh of a plan, axes ("dp", "cp", "tp") of sizes plan.dp, plan.cp, plan.tp in
Megatron device order (tp innermost). The axis names only label device groups (which network tier they span);
the search may split any dimension over any axis, so it can rediscover Megatron-LM's tensor parallelism
(Shoeybi et al. 2019), sequence parallelism (Korthikanti et al. 2022) and data parallelism, or find something
else where the hardware makes it cheaper. Placements are reported in DTensor vocabulary (`placements()`).

Our extensions of PaSE, which minimises time only:
  - Memory. Without a memory term the time-optimal strategy replicates weights whenever that saves
    communication (pure data parallelism), which a 175B model cannot afford. Each configuration also has a
    per-device memory cost (model states, sharded by the weight's split and by the plan's ZeRO stage over the
    dp/cp axes on which the weight is replicated, plus the activations it keeps for the backward times the
    micro-batches in flight), scaled to the first pipeline stage. A memory budget is enforced by Lagrangian
    relaxation: the exact DP minimises time + lambda * bytes, and lambda >= 0 is searched (`_fit_budget`) for the
    smallest value whose optimum fits. The search walks the lower convex hull of (bytes, time): each step solves
    at the lambda where the lines through the best-known infeasible and feasible strategies cross, so it
    finds the exact breakpoint in a handful of DP runs (a bisection whose split point is the crossing, not
    the midpoint). A Lagrangian optimum lies on that hull; a strategy strictly inside it (better time within
    the budget but never optimal for any lambda) is not found, the usual price of the relaxation.
  - Two ways to run an edge into a GEMM: gather its input and keep the gathered copy for the weight gradient,
    or keep the producer's shard and gather it again in the backward (Megatron-LM sequence parallelism does
    the latter, Korthikanti et al. 2022). The second trades one more all-gather per micro-batch
    for activation bytes; the DP takes the cheaper in time + lambda * bytes, edge by edge (`CostTables.alt`).
  - Block chain (exact). Vertices no edge passes over (the embedding, every residual, the head ops) cut the
    graph into a chain of blocks. `ChainProblem` runs the DP inside each block with its two boundary vertices
    kept in the table, which gives the block's min-plus map from its input's configuration to its output's,
    and composes the maps along the chain. Identical layers have identical cost tables, so their blocks share
    one map: a DP run costs a few blocks instead of n_layers of them. `Problem` runs the same recurrence over
    the whole graph in one GENERATESEQ order; tests check both against brute force.
  - Compression of the DP table (exact). The cost of an edge depends on a configuration only through the
    placement of the tensor at that end. Once a vertex in the dependent set has only some edges left, its
    configurations that place those tensors alike are interchangeable for the rest of the program; the table
    keeps the cheapest of each class (with its argmin for the traceback).

Modelling choices (units: seconds per training step, bytes per device):
  - Iteration space: batch = micro_batch * dp (the sequences one micro-batch step of the whole stage mesh
    processes: each dp rank of the plan runs micro_batch of them), seq, hidden, heads, ffn, vocab. The vocab
    may be split by any factor (Megatron pads it to a multiple of the split); other dimensions must divide.
  - Vertex cost: num_microbatches x (forward + backward + recomputed forward) with the kernels of
    `cost.ops` on the local shard, plus the collectives inside the op (norm statistics when the hidden
    dimension is split, the key/value all-gather and gradient reduce-scatter of a sequence-split attention
    overlapped with the kernel as `cost.estimate` does for context parallelism, the cross-entropy statistics
    of a vocabulary split), plus the weight-gradient reduction once per step (all-reduce over the axes that
    split batch or sequence while the weight is replicated; ZeRO 1/2/3 turn the dp/cp part into
    reduce-scatters plus weight all-gathers). These per-step collectives are counted exposed (an upper
    bound: `estimate` hides most of them behind the backward).
  - Edge cost: num_microbatches x (forward redistribution + backward redistribution of the gradient), per
    axis Shard->Replicate all-gather, Partial->Replicate all-reduce, Partial->Shard reduce-scatter,
    Shard(a)->Shard(b) all-to-all, Replicate->Shard a free local slice. Shrinking steps run first and growing
    ones last, so each collective moves the tensor as sharded as it can be at that point. Under full
    recomputation the forward redistribution into a layer op runs twice. A producer that feeds two consumers
    (the residual stream) pays each redistribution separately, PaSE's pairwise edge model; a runtime that
    needs the same placement twice would redistribute once.
  - Memory is that of the first pipeline stage: its layers (the default split, or plan.stage_layers) plus the
    embedding and, conservatively, the head as well. A tied LM head is counted as its own copy (its placement
    may differ from the embedding's). Time is summed over the whole graph (every stage).
  - The weight gradients of sequence-split norms are all-reduced over the axis (Megatron-LM does so for
    sequence parallelism; `cost.estimate` charges the same reduction once per step, as one flat call:
    "tp replicated-weight gradients (sp)").
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import Field

from ..cost import comm as C
from ..cost.memory import GRAD_BYTES, OPTIMIZER_BYTES, WEIGHT_BYTES
from ..cost.ops import (
    ACT_BYTES,
    ELEMENTWISE_BYTES,
    Device,
    Op,
    attention_ops,
    elementwise_op,
    linear_op,
    residual_bytes,
)
from ..cost.pipeline import in_flight, stage_layers
from ..errors import InputError, Schema
from ..hardware import System, load_hardware
from ..models import ModelConfig, load_model
from ..plan import Plan, resolve
from ..planfile import DATA_AXES, OPS, OpPlacement, ParallelStyle

AXES = ("dp", "cp", "tp")  # the stage mesh, outermost first (planfile.PLACEMENT_AXES)
LAYER_KINDS = ("norm1", "qkv", "attention", "out_proj", "residual1", "norm2", "mlp_in", "activation", "mlp_out",
               "residual2")
_R, _P = 0, 1  # placement codes per axis: Replicate, Partial (an input: Replicate whose gradient is Partial),
_S = 2  # then Shard(i) = 2 + i
_BASE = 5  # codes per axis: R, P, Shard(0..2)


# ---------------------------------------------------------------------------------------------------------
# The operator graph
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dim:
    """One iteration-space dimension: its size, the number a split must divide, and whether a split may pad."""

    name: str
    size: int
    divisor: int  # a split must divide this (e.g. gcd(heads, kv heads) where keys and values are split too)
    padded: bool = False  # the vocabulary: padded to a multiple of the split (Megatron make-vocab-divisible)


@dataclass(frozen=True)
class OpKind:
    """A kind of operator: iteration space, the dims of its tensors, and what it computes.

    `out` / `ins` / `weight` list the iteration dims each tensor has, in tensor order (activations
    [batch, seq, features], weights in torch layout [out, in]); a split of a dim a tensor lacks makes that
    tensor Partial (an output: the dim was contracted) or Replicate (an input or weight).
    """

    name: str
    family: str  # embedding | norm | linear | attention | residual | activation | loss
    dims: tuple[Dim, ...]
    out: tuple[str, ...] | None  # None: the loss (a scalar)
    ins: tuple[tuple[str, ...], ...]
    weight: tuple[str, ...] | None = None
    params: float = 0.0  # weights (and biases) of the op
    out_width: float = 0.0  # elements per token of the output activation
    gemm: tuple[str, float, str, float] | None = None  # (out dim, out features, in dim, in features)
    layer: bool = False  # one per transformer layer (else once per model)
    extra_weights: tuple[tuple[tuple[str, ...], float], ...] = ()  # (dims, params): the learned position table

    def dim_index(self, name: str) -> int:
        return [d.name for d in self.dims].index(name)


@dataclass(frozen=True)
class Vertex:
    name: str
    kind: str
    layer: int | None = None


@dataclass(frozen=True)
class Edge:
    """Producer `src` -> consumer `dst` (its input `slot`); `key` names the edge's cost matrix."""

    src: int
    dst: int
    slot: int
    key: str


@dataclass
class Graph:
    """Vertices, edges, and the kinds (empty for graphs built by hand with their own cost tables)."""

    vertices: list[Vertex]
    edges: list[Edge]
    kinds: dict[str, OpKind] = field(default_factory=dict)
    _by_key: dict | None = field(default=None, repr=False)

    def edges_by_key(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Edge key -> (edge indices, producers, consumers): what vectorised evaluation gathers at once."""
        if self._by_key is None:
            groups: dict[str, list[int]] = {}
            for i, e in enumerate(self.edges):
                groups.setdefault(e.key, []).append(i)
            self._by_key = {k: (np.array(ix), np.array([self.edges[i].src for i in ix]),
                                np.array([self.edges[i].dst for i in ix])) for k, ix in groups.items()}
        return self._by_key

    def neighbours(self) -> list[set[int]]:
        nb: list[set[int]] = [set() for _ in self.vertices]
        for e in self.edges:
            nb[e.src].add(e.dst)
            nb[e.dst].add(e.src)
        return nb


def _dp_size(plan: Plan) -> int:
    if plan.dp is None:
        raise InputError("plan.dp is not known yet: resolve the plan first (perfmodel.plan.resolve)")
    return plan.dp


def op_kinds(model: ModelConfig, plan: Plan) -> dict[str, OpKind]:
    """The 14 operator kinds of a decoder-only transformer (planfile.OPS), sized from the model and the plan."""
    m = model
    h, f, v, q, kv = m.hidden, m.ffn_hidden, m.vocab, m.q_dim, m.kv_dim
    gmul = 2 if m.gated else 1  # mlp_in computes gate and up (split alike over ffn, as Megatron interleaves)
    batch = Dim("batch", plan.micro_batch * _dp_size(plan), plan.micro_batch * _dp_size(plan))
    seq = Dim("seq", plan.seq_len, plan.seq_len)
    hid = Dim("hidden", h, h)
    heads_kv = Dim("heads", m.n_heads, math.gcd(m.n_heads, m.n_kv_heads))  # a split cuts K and V heads too
    heads_q = Dim("heads", m.n_heads, m.n_heads)
    ffn = Dim("ffn", f, f)
    voc = Dim("vocab", v, v, padded=True)
    bs, bsh = ("batch", "seq"), ("batch", "seq", "hidden")
    bias_qkv = (q + 2 * kv) if m.linear_bias in ("qkv", "all") else 0
    bias_all = m.linear_bias == "all"
    norm = {"family": "norm", "dims": (batch, seq, hid), "out": bsh, "ins": (bsh,), "weight": ("hidden",),
            "params": m.norm_params(), "out_width": h}
    res = {"family": "residual", "dims": (batch, seq, hid), "out": bsh, "ins": (bsh, bsh), "out_width": h,
           "layer": True}
    kinds = [
        OpKind("embedding", "embedding", (batch, seq, hid, voc), bsh, (bs,), ("vocab", "hidden"), m.vocab * h, h,
               extra_weights=((("hidden",), m.position_params()),) if m.position_params() else ()),
        OpKind("norm1", layer=True, **norm),
        OpKind("qkv", "linear", (batch, seq, heads_kv, hid), ("batch", "seq", "heads"), (bsh,), ("heads", "hidden"),
               h * (q + 2 * kv) + bias_qkv, q + 2 * kv, ("heads", q + 2 * kv, "hidden", h), True),
        OpKind("attention", "attention", (batch, seq, heads_kv), ("batch", "seq", "heads"),
               (("batch", "seq", "heads"),), None, 0.0, q, None, True),
        OpKind("out_proj", "linear", (batch, seq, hid, heads_q), bsh, (("batch", "seq", "heads"),),
               ("hidden", "heads"), q * h + (h if bias_all else 0), h, ("hidden", h, "heads", q), True),
        OpKind("residual1", **res),
        OpKind("norm2", layer=True, **norm),
        OpKind("mlp_in", "linear", (batch, seq, ffn, hid), ("batch", "seq", "ffn"), (bsh,), ("ffn", "hidden"),
               gmul * h * f + (gmul * f if bias_all else 0), gmul * f, ("ffn", gmul * f, "hidden", h), True),
        OpKind("activation", "activation", (batch, seq, ffn), ("batch", "seq", "ffn"), (("batch", "seq", "ffn"),),
               None, 0.0, f, None, True),
        OpKind("mlp_out", "linear", (batch, seq, hid, ffn), bsh, (("batch", "seq", "ffn"),), ("hidden", "ffn"),
               f * h + (h if bias_all else 0), h, ("hidden", h, "ffn", f), True),
        OpKind("residual2", **res),
        OpKind("final_norm", **norm),
        OpKind("lm_head", "linear", (batch, seq, voc, hid), ("batch", "seq", "vocab"), (bsh,), ("vocab", "hidden"),
               v * h, v, ("vocab", v, "hidden", h)),
        OpKind("loss", "loss", (batch, seq, voc), None, (("batch", "seq", "vocab"),)),
    ]
    return {k.name: k for k in kinds}


def operator_graph(model: ModelConfig, plan: Plan) -> Graph:
    """Embedding, n_layers x (norm1 ... residual2), final norm, LM head, loss, with the residual edges.

    Layer l reads x (the embedding or residual2 of layer l-1) in norm1 and in residual1 (slot 1); residual1 feeds
    norm2 and residual2 (slot 1). `plan` must be resolved (dp known).
    """
    kinds = op_kinds(model, plan)
    vertices: list[Vertex] = []
    edges: list[Edge] = []

    def add(kind: str, layer: int | None = None) -> int:
        vertices.append(Vertex(kind if layer is None else f"{kind}.{layer}", kind, layer))
        return len(vertices) - 1

    def link(src: int, dst: int, slot: int = 0):
        key = f"{vertices[src].kind}->{vertices[dst].kind}:{slot}"
        edges.append(Edge(src, dst, slot, key))

    x = add("embedding")
    for layer in range(model.n_layers):
        ids = {k: add(k, layer) for k in LAYER_KINDS}
        link(x, ids["norm1"])
        for a, b in itertools.pairwise(LAYER_KINDS):  # norm1 -> qkv -> ... -> residual1 -> norm2 -> ... -> residual2
            link(ids[a], ids[b])
        link(x, ids["residual1"], 1)
        link(ids["residual1"], ids["residual2"], 1)
        x = ids["residual2"]
    for kind in ("final_norm", "lm_head", "loss"):
        v = add(kind)
        link(x, v)
        x = v
    return Graph(vertices, edges, kinds)


# ---------------------------------------------------------------------------------------------------------
# The mesh and redistribution costs
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Mesh:
    """The non-trivial axes of the stage mesh (sizes > 1), outermost first, and how their groups sit on the tiers."""

    system: System
    gpus: int
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    full: dict[str, int]  # every axis of AXES, size-1 ones included
    _phases: dict[int, list] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, plan: Plan, system: System) -> Mesh:
        """dp, cp, tp of a resolved plan in Megatron device order: tp stride 1, cp stride tp, dp stride tp*cp."""
        full = {"dp": _dp_size(plan), "cp": plan.cp, "tp": plan.tp}
        stride = {"tp": 1, "cp": plan.tp, "dp": plan.tp * plan.cp}
        names = tuple(a for a in AXES if full[a] > 1)
        return cls(system, plan.gpus, names, tuple(full[a] for a in names), tuple(stride[a] for a in names), full)

    def phases(self, mask: int) -> list:
        """Hierarchical phases of the group of axes in bitmask `mask`: each axis on its own tiers, innermost first."""
        if mask not in self._phases:
            out = []
            for a in reversed(range(len(self.names))):
                if mask >> a & 1:
                    out += C.group_phases(self.system, self.sizes[a], self.strides[a], self.gpus)
            self._phases[mask] = out
        return self._phases[mask]

    def collective(self, kind: str, nbytes, mask) -> np.ndarray:
        """`comm.collective_time` of `kind` on `nbytes` over each element's group of axes (bitmask); 0 for none."""
        nbytes, mask = np.broadcast_arrays(np.asarray(nbytes, float), np.asarray(mask, int))
        out = np.zeros(nbytes.shape)
        for g in np.unique(mask):
            if g:
                sel = mask == g
                out[sel] = C.collective_time(kind, nbytes[sel], self.phases(int(g)))
        return out


def _prod_sizes(mesh: Mesh, sel: np.ndarray) -> np.ndarray:
    """Product of axis sizes where sel[..., a] is true."""
    return np.prod(np.where(sel, np.asarray(mesh.sizes, float), 1.0), axis=-1)


def _bits(sel: np.ndarray) -> np.ndarray:
    return (sel.astype(int) << np.arange(sel.shape[-1])).sum(axis=-1)


def redistribution_time(mesh: Mesh, src: np.ndarray, dst: np.ndarray, full_bytes: float) -> np.ndarray:
    """Seconds to turn a tensor of `full_bytes` (un-sharded) from placement codes `src` into `dst`, shape (N, axes).

    Codes per axis: 0 Replicate, 1 Partial, 2 + i Shard(i); `dst` is never Partial. In order: local slices
    (Replicate->Shard, free), one reduce-scatter over the Partial->Shard axes, an all-to-all per
    Shard(i)->Shard(j) axis, one all-reduce over the Partial->Replicate axes, one all-gather over the
    Shard->Replicate axes. Each moves the tensor as sharded over the other axes as it is at that point: an axis
    counts as sharded if it is Shard before or after (shrinking steps first, growing steps last). The all-to-all
    moves (n-1)/n of each rank's local bytes (NCCL's all-to-all bus bandwidth convention).
    """
    src, dst = np.atleast_2d(src), np.atleast_2d(dst)
    s_shard, d_shard = src >= _S, dst >= _S
    partial = src == _P
    sharded = s_shard | d_shard
    rs, ar = partial & d_shard, partial & ~d_shard
    ag = s_shard & ~d_shard
    a2a = s_shard & d_shard & (src != dst)
    t = mesh.collective("reduce_scatter", full_bytes / _prod_sizes(mesh, sharded & ~rs), _bits(rs))
    local = full_bytes / _prod_sizes(mesh, sharded)
    for a in range(src.shape[1]):
        t = t + mesh.collective("all_to_all", local, np.where(a2a[:, a], 1 << a, 0))
    t = t + mesh.collective("all_reduce", local, _bits(ar))
    t = t + mesh.collective("all_gather", full_bytes / _prod_sizes(mesh, d_shard), _bits(ag))
    return t


def parse_placements(placements: Sequence[str]) -> list[int]:
    """'Replicate()', 'Partial()', 'Shard(i)' -> codes 0, 1, 2 + i."""
    out = []
    for p in placements:
        if p == "Replicate()":
            out.append(_R)
        elif p == "Partial()":
            out.append(_P)
        elif p.startswith("Shard(") and p.endswith(")") and p[6:-1].isdigit():
            out.append(_S + int(p[6:-1]))
        else:
            raise InputError(f"placement {p!r} is not valid; valid: Replicate(), Partial(), Shard(i)")
    return out


def redistribute_time(mesh: Mesh, src: Sequence[str], dst: Sequence[str], full_bytes: float) -> float:
    """`redistribution_time` for one pair of placements in DTensor words, one per non-trivial axis (mesh.names)."""
    if len(src) != len(mesh.names) or len(dst) != len(mesh.names):
        raise InputError(f"placements {list(src)} -> {list(dst)} need one entry per mesh axis {list(mesh.names)}")
    return float(redistribution_time(mesh, np.array([parse_placements(src)]), np.array([parse_placements(dst)]),
                                     full_bytes)[0])


def _placement_name(code: int) -> str:
    return "Replicate()" if code == _R else "Partial()" if code == _P else f"Shard({code - _S})"


# ---------------------------------------------------------------------------------------------------------
# Configurations of one kind, and their placements
# ---------------------------------------------------------------------------------------------------------
def configurations(kind: OpKind, mesh: Mesh) -> np.ndarray:
    """Every valid split: (K, axes) array, entry = index of the dim that axis splits, -1 for none.

    Each axis splits at most one dim, a dim may be split over several axes, and the product of the axis sizes
    that split a dim must divide it (the vocabulary may pad). Row 0 leaves the tp-like axes unsplit.
    The executor's semantics bound the choice (`planfile.DATA_AXES`): the dp axis is data parallelism (it splits
    the
    batch of every op), the cp axis context parallelism (the sequence), and attention's sequence is split by
    cp only (keys and values are gathered over cp; a tp split of it would be a second context parallelism).
    """
    n_axes, dims = len(mesh.sizes), kind.dims
    names = [d.name for d in dims]
    allowed = []
    for axis in mesh.names:
        only = DATA_AXES.get(axis)
        if only is not None:
            allowed.append([names.index(only)] if only in names else [-1])
        else:
            allowed.append([-1] + [i for i, n in enumerate(names) if not (kind.family == "attention" and n == "seq")])
    rows = []
    for choice in itertools.product(*allowed):
        ok = True
        for d, dim in enumerate(dims):
            split = math.prod(n for n, c in zip(mesh.sizes, choice) if c == d)
            if split > dim.size or (not dim.padded and dim.divisor % split):
                ok = False
                break
        if ok:
            rows.append(choice)
    return np.array(rows, dtype=int).reshape(len(rows), n_axes)


def placement_codes(kind: OpKind, configs: np.ndarray, tensor: tuple[str, ...], role: str) -> np.ndarray:
    """Per configuration and axis, the placement code of a tensor with dims `tensor` (role out | in | weight).

    An axis splitting a dim the tensor has: Shard(position). A dim it lacks: an output is Partial (contracted),
    an input is code 1 (Replicate, gradient Partial), a weight Replicate (gradient Partial, reduced per step).
    """
    codes = np.zeros(configs.shape, dtype=int)
    for d, dim in enumerate(kind.dims):
        if dim.name in tensor:
            code = _S + tensor.index(dim.name)
        else:
            code = _R if role == "weight" else _P
        codes[configs == d] = code
    return codes


def _class_ids(codes: np.ndarray) -> np.ndarray:
    return (codes * _BASE ** np.arange(codes.shape[1])).sum(axis=1) if codes.shape[1] else np.zeros(len(codes), int)


def _codes_of(ids: np.ndarray, n_axes: int) -> np.ndarray:
    return (ids[:, None] // _BASE ** np.arange(n_axes)) % _BASE


# ---------------------------------------------------------------------------------------------------------
# Cost tables: one vector per vertex kind, one matrix per edge kind
# ---------------------------------------------------------------------------------------------------------
@dataclass
class CostTables:
    """Costs the DP reads. Vertex kind -> (K,) seconds per step and bytes per device; edge key -> a matrix of
    seconds per step over (producer class, consumer class) with each side's config -> class map.

    `alt[key]`, where present, is a second way to run the edge, (seconds, bytes) over the same classes: the
    consumer keeps its input as the producer wrote it (sharded) and gathers it again in the backward, as
    Megatron-LM sequence parallelism does for its GEMM inputs (Korthikanti et al. 2022): one more forward
    redistribution per micro-batch, minus the activation bytes it saves.
    The DP takes the cheaper of the two at its lambda (`edge_objective`).
    """

    time: dict[str, np.ndarray]
    memory: dict[str, np.ndarray]
    edge: dict[str, np.ndarray]
    src_class: dict[str, np.ndarray]
    dst_class: dict[str, np.ndarray]
    edge_kinds: dict[str, tuple[str, str]]  # edge key -> (producer kind, consumer kind)
    configs: dict[str, np.ndarray] = field(default_factory=dict)  # kind -> (K, axes) dim index per axis
    mesh: Mesh | None = None
    alt: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def size(self, kind: str) -> int:
        return len(self.time[kind])

    def edge_objective(self, key: str, lam: float) -> np.ndarray:
        """Seconds + lam * bytes of edge `key` over (producer class, consumer class), the cheaper way."""
        if key not in self.alt:
            return self.edge[key]
        t, mem = self.alt[key]
        return np.minimum(self.edge[key], t + lam * mem)

    def edge_parts(self, key: str, lam: float, row, col) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(seconds, bytes, alternative taken) of edge `key` at class pairs (row, col), the way the DP takes it."""
        base = self.edge[key][row, col]
        if key not in self.alt:
            return base, np.zeros_like(base), np.zeros(np.shape(base), bool)
        t, mem = self.alt[key][0][row, col], self.alt[key][1][row, col]
        use = t + lam * mem < base
        return np.where(use, t, base), np.where(use, mem, 0.0), use

    def edge_matrix(self, key: str, lam: float = 0.0) -> np.ndarray:
        """Seconds + lam * bytes of edge `key` over (producer config, consumer config)."""
        return self.edge_objective(key, lam)[np.ix_(self.src_class[key], self.dst_class[key])]


def tied_configurations(graph: Graph, tables: CostTables) -> dict[str, np.ndarray]:
    """Configurations of the embedding and LM head that never split the hidden dimension.

    Tied embeddings are one weight [vocab, hidden] for both operators; splitting it only by the vocabulary (or
    not at all) keeps one placement that serves both, Megatron-LM's vocab-parallel pair (Shoeybi et al. 2019,
    Sec. 3). An untied embedding may also split its hidden columns, which moves less data.
    """
    keep = {}
    for kind in ("embedding", "lm_head"):
        hidden = [d.name for d in graph.kinds[kind].dims].index("hidden")
        keep[kind] = np.flatnonzero((tables.configs[kind] != hidden).all(axis=1))
    return keep


def restrict_tables(tables: CostTables, keep: dict[str, Sequence[int]]) -> CostTables:
    """The same costs over a subset of each kind's configurations (`keep[kind]`: indices; kinds absent keep all)."""
    idx = {k: np.asarray(keep.get(k, range(tables.size(k))), int) for k in tables.time}
    sub = CostTables(
        time={k: v[idx[k]] for k, v in tables.time.items()},
        memory={k: v[idx[k]] for k, v in tables.memory.items()},
        edge=dict(tables.edge),
        src_class={e: c[idx[tables.edge_kinds[e][0]]] for e, c in tables.src_class.items()},
        dst_class={e: c[idx[tables.edge_kinds[e][1]]] for e, c in tables.dst_class.items()},
        edge_kinds=dict(tables.edge_kinds),
        configs={k: v[idx[k]] for k, v in tables.configs.items()},
        mesh=tables.mesh,
        alt=dict(tables.alt),
    )
    return sub


@dataclass
class _Ctx:
    """What every cost function reads: model, system, plan, kernels, mesh, step constants."""

    model: ModelConfig
    system: System
    plan: Plan
    mesh: Mesh
    dev: Device
    m: int  # micro-batches per step
    layer_weight: float  # a layer's share of the first stage: first-stage layers / n_layers
    chunks: float  # model chunks in flight on the first stage (pipeline.in_flight), per vpp chunk of layers


class _Split:
    """Split factor, local size and axis bitmask of every dim, over all configurations of one kind."""

    def __init__(self, kind: OpKind, configs: np.ndarray, mesh: Mesh):
        self.kind, self.configs, self.mesh = kind, configs, mesh
        sizes = np.asarray(mesh.sizes, float)
        self._split, self._mask = {}, {}
        for d, dim in enumerate(kind.dims):
            on = configs == d
            self._split[dim.name] = np.prod(np.where(on, sizes, 1.0), axis=1) if on.shape[1] else np.ones(len(on))
            self._mask[dim.name] = _bits(on) if on.shape[1] else np.zeros(len(on), int)

    def split(self, dim: str) -> np.ndarray:
        return self._split[dim] if dim in self._split else np.ones(len(self.configs))

    def mask(self, dim: str) -> np.ndarray:
        return self._mask[dim] if dim in self._mask else np.zeros(len(self.configs), int)

    def local(self, dim: str, size: float | None = None) -> np.ndarray:
        """Local extent of `dim` (or of `size` features along it); the vocabulary rounds up (padding)."""
        d = self.kind.dims[self.kind.dim_index(dim)]
        full = d.size if size is None else size
        return np.ceil(full / self.split(dim)) if d.padded else full / self.split(dim)

    @property
    def tokens(self) -> np.ndarray:
        return self.local("batch") * self.local("seq")


def _op_seconds(ops: list[Op], recompute: str) -> np.ndarray:
    """Forward + backward + recomputed forward of `ops`, per micro-batch."""
    return sum(np.asarray(op.fwd_s + op.bwd_s + op.recompute_s(recompute), float) for op in ops)


def _compute(kind: OpKind, c: _Split, x: _Ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kernel seconds, exposed collective seconds, activation bytes kept for the backward) per micro-batch.

    Kernels and bytes per element as `cost.ops` (layer_ops, embedding_ops, head_ops, attention_ops) on the local
    shard; kept bytes term by term as `cost.memory.layer_activation_bytes` (Korthikanti et al. 2022, Sec. 4.1).
    """
    m, p, dev = x.model, x.plan, x.dev
    rc = p.recompute
    T = c.tokens
    rec = ("full",) if kind.layer else ()
    drop = 1.0 if m.dropout > 0 else 0.0
    again = 2.0 if rc == "full" and kind.layer else 1.0  # forward passes of a layer op
    zero = np.zeros(len(c.configs))
    fam = kind.family
    if fam == "embedding":
        h_l = c.local("hidden")
        ops = [elementwise_op(dev, "embedding", T * h_l, 4, 2 + 8 / c.split("vocab"), ())]
        if m.position == "learned":
            ops.append(elementwise_op(dev, "position_embedding", T * h_l, *ELEMENTWISE_BYTES["position_embedding"], ()))
        if drop:
            ops.append(elementwise_op(dev, "embedding_dropout", T * h_l, *ELEMENTWISE_BYTES["embedding_dropout"], ()))
        return _op_seconds(ops, rc), zero, drop * T * h_l
    if fam == "norm":
        h_l = c.local("hidden")
        # A hidden split needs the per-token statistics summed: fp32 mean (and variance for LayerNorm), forward
        # and again for the backward's reductions.
        stats = T * 4.0 * (2 if m.norm == "layernorm" else 1)
        comm = (again + 1) * x.mesh.collective("all_reduce", stats, c.mask("hidden"))
        return _op_seconds([elementwise_op(dev, kind.name, T * h_l, *ELEMENTWISE_BYTES["norm"], rec)], rc), comm, 2 * T * h_l
    if fam == "linear":
        out_dim, n_full, in_dim, k_full = kind.gemm
        n, k = c.local(out_dim, n_full), c.local(in_dim, k_full)
        prec = "bf16" if kind.name == "lm_head" else None  # the LM head stays bf16 (head_ops)
        ops = linear_op(dev, kind.name, T, n, k, rec, precision=prec)
        if kind.name == "qkv" and m.position == "rope":
            ops.append(elementwise_op(dev, "rope", T * (m.q_dim + m.kv_dim) / c.split("heads"), *ELEMENTWISE_BYTES["rope"]))
        return _op_seconds(ops, rc), zero, 2 * T * k
    if fam == "attention":
        return _attention(c, x)
    if fam == "residual":
        ops = [elementwise_op(dev, kind.name, T * c.local("hidden"), *residual_bytes(drop))]
        return _op_seconds(ops, rc), zero, drop * T * c.local("hidden")
    if fam == "activation":
        f_l = c.local("ffn")
        act = "swiglu" if m.gated else "gelu"
        ops = [elementwise_op(dev, act, T * f_l, *ELEMENTWISE_BYTES[act])]
        return _op_seconds(ops, rc), zero, 2 * T * f_l * (2 if m.gated else 1)
    if fam == "loss":
        v_l = c.local("vocab")
        ops = [elementwise_op(dev, "cross_entropy", T * v_l, *ELEMENTWISE_BYTES["cross_entropy"], ())]
        # Vocab-parallel cross-entropy: all-reduce max, sum-exp and target logit (fp32 per token), as estimate's
        # "tp cross-entropy stats".
        comm = 3 * x.mesh.collective("all_reduce", T * 4.0, c.mask("vocab"))
        return _op_seconds(ops, rc), comm, 4 * T * v_l
    raise ValueError(f"unknown op family {fam}")


def _attention(c: _Split, x: _Ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Attention core as `ops.attention_ops` on the local heads and queries; a sequence split all-gathers the
    keys and values of the whole sequence over its axes and reduce-scatters their gradients, overlapped with the
    kernel (estimate's context-parallel pattern: forward gather, backward gather + reduce-scatter)."""
    m, p, dev = x.model, x.plan, x.dev
    T, heads = c.tokens, c.local("heads")
    sq = p.seq_len / c.split("seq")
    drop = 1.0 if m.dropout > 0 else 0.0
    ops = attention_ops(dev, tokens=T, heads=heads, q_len=sq, sequences=c.local("batch"))
    if p.attention == "flash":
        core = 4.0 * heads * T  # fp32 log-sum-exp
    else:
        core = (2 + 3 * drop) * heads * p.seq_len * T
    a_f = sum(np.asarray(op.fwd_s, float) for op in ops)
    a_b = sum(np.asarray(op.bwd_s, float) for op in ops)
    kv = c.local("batch") * p.seq_len * 2 * m.kv_dim / c.split("heads") * ACT_BYTES
    one = x.mesh.collective("all_gather", kv, c.mask("seq"))
    exp_f = np.maximum(0.0, one - a_f)
    rerun = 1.0 if p.recompute in ("full", "selective") else 0.0
    comm = exp_f * (1 + rerun) + np.maximum(0.0, 2 * one - a_b)
    kept = 2.0 * T * (m.q_dim + 2 * m.kv_dim) / c.split("heads") + (0.0 if p.recompute == "selective" else core)
    return _op_seconds(ops, p.recompute), comm, kept


def _weight_costs(kind: OpKind, configs: np.ndarray, x: _Ctx) -> tuple[np.ndarray, np.ndarray]:
    """(seconds per step of the weight's collectives, bytes of its model states) per configuration.

    States: 2 B weight + grad bytes + 12 B Adam per parameter over the weight's shards, and over the dp/cp axes
    on which it is replicated by the plan's ZeRO stage (memory.state_bytes). Gradients are Partial on every axis
    that splits batch or sequence while the weight is replicated: all-reduce once per step (ZeRO 0), the dp/cp
    part a reduce-scatter (once per step for ZeRO-1, every micro-batch for ZeRO-2/3) plus the bf16 weight
    all-gather (once per step; ZeRO-3: forward and backward of every micro-batch).
    """
    n = len(configs)
    t, states = np.zeros(n), np.zeros(n)
    weights = ((kind.weight, kind.params),) if kind.weight else ()
    for dims, params in weights + kind.extra_weights:
        dt, ds = _one_weight(kind, dims, params, configs, x)
        t, states = t + dt, states + ds
    return t, states


def _one_weight(kind: OpKind, dims: tuple[str, ...], params: float, configs: np.ndarray, x: _Ctx):
    p, mesh = x.plan, x.mesh
    g = GRAD_BYTES[p.grad_dtype]
    in_weight, reduce = np.zeros(configs.shape, bool), np.zeros(configs.shape, bool)
    for d, dim in enumerate(kind.dims):
        if dim.name in dims:
            in_weight |= configs == d
        elif dim.name in ("batch", "seq"):  # each rank sees other tokens: the gradient is Partial there
            reduce |= configs == d
    params = params / _prod_sizes(mesh, in_weight)
    zero_able = np.array([p.zero > 0 and a in ("dp", "cp") for a in mesh.names], bool)
    zero_axes = zero_able & ~in_weight  # ZeRO shards the states of a weight replicated over dp / cp
    nz = _prod_sizes(mesh, zero_axes)
    rz, ro = reduce & zero_axes, reduce & ~zero_axes
    grad = params * g
    if p.zero == 0:
        t = mesh.collective("all_reduce", grad, _bits(reduce))
    else:
        reps = x.m if p.zero >= 2 else 1
        gathers = 2 * x.m if p.zero == 3 else 1
        t = (reps * mesh.collective("reduce_scatter", grad, _bits(rz))
             + mesh.collective("all_reduce", grad / _prod_sizes(mesh, rz), _bits(ro))
             + gathers * mesh.collective("all_gather", params * WEIGHT_BYTES, _bits(zero_axes)))
    states = params * (WEIGHT_BYTES / np.where(p.zero >= 3, nz, 1) + g / np.where(p.zero >= 2, nz, 1)
                       + OPTIMIZER_BYTES / np.where(p.zero >= 1, nz, 1))
    return t, states


def _vertex_costs(kind: OpKind, configs: np.ndarray, x: _Ctx) -> tuple[np.ndarray, np.ndarray]:
    """(seconds per step, bytes per device on the first stage) of every configuration of `kind`."""
    c = _Split(kind, configs, x.mesh)
    kernels, comm, kept = _compute(kind, c, x)
    wtime, states = _weight_costs(kind, configs, x)
    seconds = x.m * (kernels + comm) + wtime
    if kind.layer and x.plan.recompute == "full" and kind.name != "norm1":
        kept = 0.0 * kept  # full recomputation keeps only the layer input (norm1's)
    weight = x.layer_weight if kind.layer else 1.0
    return np.broadcast_to(seconds, (len(configs),)).astype(float), weight * states + _kept_scale(kind, x) * kept


def _kept_scale(kind: OpKind, x: _Ctx) -> float:
    """Bytes on the first stage per byte an op keeps for one micro-batch: layers x micro-batch chunks in flight
    (pipeline.in_flight) x the layer's share of the stage; the head's activations live for one micro-batch
    (all of them under GPipe), as in estimate."""
    p = x.plan
    if kind.layer:
        return x.layer_weight * x.chunks / p.vpp
    if kind.name == "embedding":
        return x.chunks / p.vpp
    return float(x.m if p.schedule == "gpipe" else 1)


def _edge_costs(graph: Graph, tables: CostTables, x: _Ctx) -> None:
    """Fill tables.edge / src_class / dst_class: forward and backward redistribution per class pair."""
    n_axes = len(x.mesh.sizes)
    seen: dict[tuple, np.ndarray] = {}
    for e in graph.edges:
        if e.key in tables.edge:
            continue
        src, dst = graph.kinds[graph.vertices[e.src].kind], graph.kinds[graph.vertices[e.dst].kind]
        out = placement_codes(src, tables.configs[src.name], src.out, "out")
        inp = placement_codes(dst, tables.configs[dst.name], dst.ins[e.slot], "in")
        rows, tables.src_class[e.key] = np.unique(_class_ids(out), return_inverse=True)
        cols, tables.dst_class[e.key] = np.unique(_class_ids(inp), return_inverse=True)
        tables.edge_kinds[e.key] = (src.name, dst.name)
        full = x.plan.micro_batch * _dp_size(x.plan) * x.plan.seq_len * src.out_width * ACT_BYTES
        passes = 2.0 if x.plan.recompute == "full" and dst.layer else 1.0
        keeps = dst.family == "linear" and x.plan.recompute != "full"  # GEMMs keep their input for dW
        key = (rows.tobytes(), cols.tobytes(), full, passes, keeps and _kept_scale(dst, x))
        if key not in seen:
            o = np.repeat(_codes_of(rows, n_axes), len(cols), axis=0)  # every (row, col) pair
            i = np.tile(_codes_of(cols, n_axes), (len(rows), 1))
            fwd_dst = np.where(i == _P, _R, i)  # the consumer reads a Replicate input
            bwd_dst = np.where(o == _P, _R, o)  # the gradient of a Partial output is Replicate
            fwd = redistribution_time(x.mesh, o, fwd_dst, full)
            t = x.m * (passes * fwd + redistribution_time(x.mesh, i, bwd_dst, full))
            alt = None
            if keeps:  # keep the producer's shard, all-gather it again in the backward (only gathers: no Partial)
                gathered = (o >= _S) & (i <= _P)
                shrink = _prod_sizes(x.mesh, gathered)
                ok = (shrink > 1) & ~(o == _P).any(axis=1)
                kept = full / _prod_sizes(x.mesh, i >= _S)  # the consumer's local input, bytes
                saved = np.where(ok, kept * (1 - 1 / shrink) * _kept_scale(dst, x), 0.0)
                alt = (np.where(ok, t + x.m * fwd, t), -saved)
                alt = tuple(a.reshape(len(rows), len(cols)) for a in alt) if ok.any() else None
            seen[key] = (t.reshape(len(rows), len(cols)), alt)
        tables.edge[e.key] = seen[key][0]
        if seen[key][1] is not None:
            tables.alt[e.key] = seen[key][1]


def cost_tables(graph: Graph, model: ModelConfig, system: System, plan: Plan) -> CostTables:
    """Vertex and edge cost tables of an operator graph, computed once per kind (layers share them)."""
    mesh = Mesh.of(plan, system)
    split = getattr(plan, "stage_layers", None)
    first = split[0] if split else stage_layers(model.n_layers, plan.pp)[0]
    m = plan.num_microbatches
    chunks = float(np.asarray(in_flight(plan.schedule, plan.pp, plan.vpp, m, 0)))
    x = _Ctx(model, system, plan, mesh, Device(model, system, plan), m, first / model.n_layers, chunks)
    tables = CostTables({}, {}, {}, {}, {}, {}, {}, mesh)
    for name in {v.kind for v in graph.vertices}:
        kind = graph.kinds[name]
        configs = configurations(kind, mesh)
        tables.configs[name] = configs
        tables.time[name], tables.memory[name] = _vertex_costs(kind, configs, x)
    _edge_costs(graph, tables, x)
    return tables


# ---------------------------------------------------------------------------------------------------------
# GENERATESEQ and the dynamic program
# ---------------------------------------------------------------------------------------------------------
def generate_seq(graph: Graph, pinned: Sequence[int] = ()) -> list[int]:
    """PaSE's GENERATESEQ: a vertex order that keeps the dependent set small.

    The dependent set of the processed vertices X is D(X) = {u in X with a neighbour outside X}; the DP table
    is indexed by its configurations. Greedily append the vertex v minimising |D(X + v)| (ties: lowest index, i.e.
    graph order). |D(X + v)| - |D(X)| = [v has unprocessed neighbours] - #{u in D(X): v is u's last unprocessed
    neighbour}; only vertices within two hops of the last one change, so a heap with lazy updates suffices.
    `pinned` vertices count a neighbour outside the graph (they stay in D: the block boundaries of `ChainProblem`).
    """
    nb = graph.neighbours()
    left = [len(s) for s in nb]  # unprocessed neighbours
    for v in pinned:
        left[v] += 1
    done = [False] * len(nb)

    def delta(v: int) -> int:
        return (left[v] > 0) - sum(1 for u in nb[v] if done[u] and left[u] == 1)

    best = {v: delta(v) for v in range(len(nb))}
    heap = [(d, v) for v, d in best.items()]
    heapq.heapify(heap)
    order = []
    while heap:
        d, v = heapq.heappop(heap)
        if done[v] or best[v] != d:
            continue
        order.append(v)
        done[v] = True
        touched = set()
        for w in nb[v]:
            left[w] -= 1
            touched.add(w)
            if done[w]:
                touched |= nb[w]
        for u in touched:
            if not done[u] and (d2 := delta(u)) != best[u]:
                best[u] = d2
                heapq.heappush(heap, (d2, u))
    return order


@dataclass
class _Space:
    """The states of a vertex in the DP table: a representative configuration per state."""

    kind: str
    reps: np.ndarray
    tag: int


@dataclass
class DPStats:
    max_dependent_set: int = 0  # |D| after a step
    max_table_entries: int = 0  # largest table (dependent set plus the vertex being added)


def _edge_parts(graph: Graph, tables: CostTables, assignment, lam: float):
    """Per edge: (seconds, bytes, alternative taken) arrays of a strategy, each edge run the way the DP takes it
    at lam."""
    a = np.asarray(assignment)
    n = len(graph.edges)
    t, mem, alt = np.zeros(n), np.zeros(n), np.zeros(n, bool)
    for key, (ix, src, dst) in graph.edges_by_key().items():
        t[ix], mem[ix], alt[ix] = tables.edge_parts(key, lam, tables.src_class[key][a[src]],
                                                    tables.dst_class[key][a[dst]])
    return t, mem, alt


def _evaluate(graph: Graph, tables: CostTables, by_kind: dict[str, np.ndarray], assignment,
              lam: float = 0.0) -> tuple[float, float]:
    a = np.asarray(assignment)
    t = sum(float(tables.time[k][a[ix]].sum()) for k, ix in by_kind.items())
    mem = sum(float(tables.memory[k][a[ix]].sum()) for k, ix in by_kind.items())
    et, em, _ = _edge_parts(graph, tables, a, lam)
    return t + float(et.sum()), mem + float(em.sum())


class Problem:
    """PaSE's DP over one graph in GENERATESEQ order, prepared for repeated runs (one per lambda): order,
    adjacency and the lambda-independent caches (edge blocks, class compressions) are built once.

    `pinned` vertices are never minimised out (nor compressed): a run then returns the table over them, the
    min-plus map that `ChainProblem` composes.
    """

    def __init__(self, graph: Graph, tables: CostTables, order: list[int] | None = None, pinned: Sequence[int] = ()):
        self.graph, self.tables, self.pinned = graph, tables, tuple(pinned)
        self.order = generate_seq(graph, self.pinned) if order is None else order
        self.kind = [v.kind for v in graph.vertices]
        self.adj: list[list[tuple[int, int, bool]]] = [[] for _ in graph.vertices]  # (edge, other, this is src)
        for i, e in enumerate(graph.edges):
            self.adj[e.src].append((i, e.dst, True))
            self.adj[e.dst].append((i, e.src, False))
        self._spaces: dict[tuple, _Space] = {}
        self._blocks: dict[tuple, np.ndarray] = {}
        self._groups: dict[tuple, tuple[_Space, np.ndarray] | None] = {}
        self._lam: float | None = None  # the lambda the edge blocks were built for
        self.by_kind = {k: np.array([i for i, kk in enumerate(self.kind) if kk == k]) for k in set(self.kind)}
        self.stats = DPStats()

    def _space(self, kind: str, reps: np.ndarray) -> _Space:
        key = (kind, reps.tobytes())
        if key not in self._spaces:
            self._spaces[key] = _Space(kind, reps, len(self._spaces))
        return self._spaces[key]

    def _block(self, e: int, u_is_src: bool, su: _Space, lam: float) -> np.ndarray:
        """Edge e's cost over (states of u, its processed end; every configuration of the vertex being added)."""
        if lam != self._lam:
            self._blocks.clear()
            self._lam = lam
        key = (self.graph.edges[e].key, u_is_src, su.tag)
        if key not in self._blocks:
            ek = self.graph.edges[e].key
            mat, sc, dc = self.tables.edge_objective(ek, lam), self.tables.src_class[ek], self.tables.dst_class[ek]
            self._blocks[key] = mat[np.ix_(sc[su.reps], dc)] if u_is_src else mat[np.ix_(sc, dc[su.reps])].T
        return self._blocks[key]

    def _grouping(self, space: _Space, live: list[tuple[str, bool]]):
        """States of `space` that place every live edge's tensor alike: (new space, (G, width) old-state index
        padded by repeating a member) or None when no two states agree."""
        key = (space.tag, tuple(sorted(set(live))))
        if key not in self._groups:
            t = self.tables
            sig = np.stack([(t.src_class if s else t.dst_class)[ek][space.reps] for ek, s in key[1]], axis=1)
            _, first, inv = np.unique(sig, axis=0, return_index=True, return_inverse=True)
            inv = inv.ravel()
            if len(first) == len(space.reps):
                self._groups[key] = None
            else:
                members = [np.flatnonzero(inv == g) for g in range(len(first))]
                width = max(len(mm) for mm in members)
                idx = np.array([np.pad(mm, (0, width - len(mm)), mode="edge") for mm in members])
                self._groups[key] = (self._space(space.kind, space.reps[idx[:, 0]]), idx)
        return self._groups[key]

    def run(self, lam: float, free: Sequence[int] = ()):
        """The DP proper for time + lam * memory: (final table over the pinned vertices, their order in it,
        traceback records).

        PaSE's recurrence over the frontier (dependent set) D: adding v, T[..., x_v] = T[...] + cost(x_v) + the
        edges from v to processed neighbours; every vertex left without unprocessed neighbours is minimised out
        (argmin recorded); vertices whose remaining edges changed are compressed to their placement classes
        (exact, see the module docstring). `free` vertices cost nothing themselves (a block's input, paid by
        the block before it).
        """
        graph, st = self.graph, self.stats
        unary = {k: self.tables.time[k] + lam * self.tables.memory[k] for k in self.by_kind}
        T = np.zeros(())
        front: list[int] = []
        space: dict[int, _Space] = {}
        left = [len(a) + (v in self.pinned) for v, a in enumerate(self.adj)]
        done = np.zeros(len(self.kind), bool)
        records: list[tuple] = []
        for v in self.order:
            kv = self.kind[v]
            T = T[..., None] + (0.0 * unary[kv] if v in free else unary[kv])
            touched = [v]
            for e, u, v_is_src in self.adj[v]:
                if not done[u]:
                    continue
                blk = self._block(e, not v_is_src, space[u], lam)
                shape = [1] * T.ndim
                shape[front.index(u)], shape[-1] = blk.shape
                T = T + blk.reshape(shape)
                left[u] -= 1
                left[v] -= 1
                touched.append(u)
            front.append(v)
            done[v] = True
            space[v] = self._space(kv, np.arange(len(unary[kv])))
            records.append(("add", v))
            st.max_table_entries = max(st.max_table_entries, T.size)
            for u in [w for w in front if left[w] == 0]:
                ax = front.index(u)
                arg = T.argmin(axis=ax)
                T = np.take_along_axis(T, np.expand_dims(arg, ax), axis=ax).squeeze(ax)
                front.pop(ax)
                records.append(("elim", u, tuple(front), arg))
            for u in dict.fromkeys(touched):
                if left[u] == 0 or u in self.pinned:
                    continue
                live = [(graph.edges[e].key, s) for e, w, s in self.adj[u] if not done[w]]
                grouping = self._grouping(space[u], live)
                if grouping is None:
                    continue
                new, idx = grouping
                ax = front.index(u)
                g = np.take(T, idx, axis=ax)
                j = g.argmin(axis=ax + 1)
                T = np.take_along_axis(g, np.expand_dims(j, ax + 1), axis=ax + 1).squeeze(ax + 1)
                records.append(("group", u, tuple(front), j, idx))
                space[u] = new
            st.max_dependent_set = max(st.max_dependent_set, len(front))
        return T, front, records

    @staticmethod
    def traceback(records: list[tuple], state: dict[int, int], config: list[int]) -> None:
        """Fill `config` (one configuration per vertex) from the records, given the states of the pinned vertices."""
        state = dict(state)
        for rec in reversed(records):
            if rec[0] == "elim":
                _, u, fr, arg = rec
                state[u] = int(arg[tuple(state[w] for w in fr)])
            elif rec[0] == "group":
                _, u, fr, j, idx = rec
                state[u] = int(idx[state[u], j[tuple(state[w] for w in fr)]])
            else:
                config[rec[1]] = state[rec[1]]

    def solve(self, lam: float = 0.0) -> tuple[float, list[int]]:
        """Exact minimum of time + lam * memory (vertex and edge costs), and its argmin (config per vertex)."""
        if self.pinned:
            raise ValueError("a Problem with pinned vertices returns tables (run), not one optimum")
        T, _, records = self.run(lam)
        config = [0] * len(self.kind)
        self.traceback(records, {}, config)
        return float(T), config

    def evaluate(self, assignment: Sequence[int], lam: float = 0.0) -> tuple[float, float]:
        """(seconds per step, bytes per device) of a configuration per vertex (edges run as the DP would at lam)."""
        return _evaluate(self.graph, self.tables, self.by_kind, assignment, lam)


def separators(graph: Graph) -> list[int]:
    """Vertices no edge passes over in graph order (no edge (a, b) with a < v < b): they cut the graph into a
    chain of blocks. In an operator graph: the embedding, every residual1 and residual2, and the head ops."""
    cross = np.zeros(len(graph.vertices) + 1, int)
    for e in graph.edges:
        a, b = sorted((e.src, e.dst))
        cross[a + 1] += 1
        cross[b] -= 1
    return [int(v) for v in np.flatnonzero(np.cumsum(cross)[:-1] == 0)]


class ChainProblem:
    """PaSE's DP organised by the graph's separators s_0 < s_1 < ...: each block (s_i, s_{i+1}] is solved by
    `Problem` with s_i and s_{i+1} pinned, giving the min-plus map M_i[x_i, x_{i+1}] (the block's optimum for
    each pair of boundary configurations); the chain V_{i+1}[y] = min_x V_i[x] + M_i[x, y] then spans the graph.
    Exact (every edge lies inside one block), and identical blocks (layers 1..L-1 of a transformer: the same
    kinds and edge kinds) share one map per run, so a run costs a few blocks rather than n_layers of them.
    """

    def __init__(self, graph: Graph, tables: CostTables):
        self.graph, self.tables = graph, tables
        seps = separators(graph)
        self.blocks: list[tuple[int, int, tuple]] = []
        self.sub: dict[tuple, Problem] = {}
        owner = np.searchsorted(seps, [min(e.src, e.dst) for e in graph.edges], side="right") - 1
        edges_of: dict[int, list[Edge]] = {}
        for e, b in zip(graph.edges, owner):
            edges_of.setdefault(int(b), []).append(e)
        for i, (s, t) in enumerate(itertools.pairwise(seps)):
            verts = graph.vertices[s:t + 1]
            local = [Edge(e.src - s, e.dst - s, e.slot, e.key) for e in edges_of.get(i, [])]
            sig = (tuple(v.kind for v in verts), tuple((e.src, e.dst, e.key) for e in local))
            if sig not in self.sub:
                sub = Graph([Vertex(v.name, v.kind, v.layer) for v in verts], local, graph.kinds)
                self.sub[sig] = Problem(sub, tables, pinned=(0, t - s))
            self.blocks.append((s, t, sig))
        self.first = seps[0]
        self.by_kind = {k: np.array([i for i, v in enumerate(graph.vertices) if v.kind == k])
                        for k in {v.kind for v in graph.vertices}}

    @property
    def stats(self) -> DPStats:
        out = DPStats()
        for p in self.sub.values():
            out.max_dependent_set = max(out.max_dependent_set, p.stats.max_dependent_set)
            out.max_table_entries = max(out.max_table_entries, p.stats.max_table_entries)
        return out

    def solve(self, lam: float = 0.0) -> tuple[float, list[int]]:
        """Exact minimum of time + lam * memory over the whole graph, and its argmin (config per vertex)."""
        maps = {}
        for sig, prob in self.sub.items():
            T, front, records = prob.run(lam, free=(0,))
            maps[sig] = (T if front[0] == 0 else T.T, records)
        k0 = self.graph.vertices[self.first].kind
        V = self.tables.time[k0] + lam * self.tables.memory[k0]
        args = []
        for _, _, sig in self.blocks:
            W = V[:, None] + maps[sig][0]
            arg = W.argmin(axis=0)
            V = W[arg, np.arange(W.shape[1])]
            args.append(arg)
        y = int(np.argmin(V))
        value = float(V[y])
        config = [0] * len(self.graph.vertices)
        for (s, t, sig), arg in zip(reversed(self.blocks), reversed(args)):
            x = int(arg[y])
            local = [0] * (t - s + 1)
            Problem.traceback(maps[sig][1], {0: x, t - s: y}, local)
            config[s:t + 1] = local
            y = x
        return value, config

    def evaluate(self, assignment: Sequence[int], lam: float = 0.0) -> tuple[float, float]:
        return _evaluate(self.graph, self.tables, self.by_kind, assignment, lam)


def dp(graph: Graph, tables: CostTables, lam: float = 0.0, order: list[int] | None = None,
       chain: bool = False) -> tuple[float, list[int]]:
    """Exact minimum of time + lam * memory over all strategies by PaSE's DP (over the whole graph in
    GENERATESEQ order, or block by block with `chain`), and its argmin."""
    prob = ChainProblem(graph, tables) if chain else Problem(graph, tables, order)
    return prob.solve(lam)


def evaluate(graph: Graph, tables: CostTables, assignment: Sequence[int], lam: float = 0.0) -> tuple[float, float]:
    """(seconds per step, bytes per device) of a strategy, one configuration index per vertex; an edge with an
    alternative (`CostTables.alt`) runs the way that is cheaper in time + lam * bytes (at lam = 0: the faster)."""
    by_kind = {k: np.array([i for i, v in enumerate(graph.vertices) if v.kind == k])
               for k in {v.kind for v in graph.vertices}}
    return _evaluate(graph, tables, by_kind, assignment, lam)


def brute_force(graph: Graph, tables: CostTables, lam: float = 0.0, limit: int = 20_000_000) -> tuple[float, list[int]]:
    """Minimum of time + lam * memory by enumerating every strategy (small graphs only), in numpy chunks."""
    kinds = [v.kind for v in graph.vertices]
    sizes = [tables.size(k) for k in kinds]
    total = math.prod(sizes)
    if total > limit:
        raise ValueError(f"{total} strategies exceed the brute-force limit {limit}")
    unary = [tables.time[k] + lam * tables.memory[k] for k in kinds]
    mats = [tables.edge_matrix(e.key, lam) for e in graph.edges]
    strides = np.cumprod([1] + sizes[:-1])
    best, arg = np.inf, None
    chunk = 1 << 18
    for start in range(0, total, chunk):
        idx = np.arange(start, min(total, start + chunk))
        digit = [(idx // s) % k for s, k in zip(strides, sizes)]
        cost = sum(u[d] for u, d in zip(unary, digit))
        for e, mat in zip(graph.edges, mats):
            cost = cost + mat[digit[e.src], digit[e.dst]]
        i = int(np.argmin(cost))
        if cost[i] < best:
            best, arg = float(cost[i]), [int(d[i]) for d in digit]
    return best, arg


# ---------------------------------------------------------------------------------------------------------
# Memory budget: Lagrangian relaxation
# ---------------------------------------------------------------------------------------------------------
@dataclass
class _Point:
    lam: float  # the lambda it was found at; its edges run the way that is cheaper there
    assignment: list[int]
    time: float
    memory: float
    reported_lam: float | None = None


def _fit_budget(prob: Problem | ChainProblem, budget: float, max_runs: int = 64) -> tuple[_Point, bool, int]:
    """The strategy of the smallest lambda >= 0 whose time + lambda * memory optimum fits `budget`.

    lambda = 0 if the time-optimal strategy fits. Otherwise the optimum as a function of lambda is the lower
    envelope of the lines time(x) + lambda * memory(x); walk its breakpoints between the time-optimal point
    (infeasible) and the memory-optimal one (feasible), each run at the lambda where the two current lines cross,
    until no strategy lies below the crossing: that lambda is the breakpoint where the optimum starts to fit.
    Returns (point, budget met, DP runs). When even the memory-optimal strategy exceeds the budget, that one.
    """
    def run(lam: float) -> _Point:
        _, a = prob.solve(lam)
        return _Point(lam, a, *prob.evaluate(a, lam))

    lo = run(0.0)
    if lo.memory <= budget:
        lo.reported_lam = 0.0
        return lo, True, 1
    # Memory first, time only to break ties: the time-optimal strategy's bytes priced at a million of its steps.
    hi = run(1e6 * max(lo.time, 1e-30) / lo.memory)
    runs, lam = 2, 0.0
    if hi.memory > budget:
        return hi, False, runs
    while runs < max_runs:
        lam = max(0.0, (hi.time - lo.time) / (lo.memory - hi.memory))
        cur = run(lam)
        runs += 1
        line = lo.time + lam * lo.memory
        if cur.time + lam * cur.memory >= line - 1e-12 * abs(line):
            break
        if cur.memory <= budget:
            hi = cur
        else:
            lo = cur
    hi.reported_lam = lam
    return hi, True, runs


# ---------------------------------------------------------------------------------------------------------
# Result
# ---------------------------------------------------------------------------------------------------------
class VertexResult(Schema):
    """The configuration the search chose for one operator."""

    name: str
    op: str
    layer: int | None = None
    config: int
    split: dict[str, list[str]] = Field(description="iteration dim -> mesh axes splitting it")
    input: list[str] = Field(description="placement of the (first) input, one per axis dp, cp, tp")
    output: list[str]
    weight: list[str] | None = None
    style: ParallelStyle | None = None
    time_s: float = Field(description="seconds per step of the op: kernels, its own collectives, weight gradients")
    edge_s: float = Field(description="seconds per step redistributing the tensors it reads (forward and backward)")
    memory_bytes: float = Field(description="bytes per device on the first stage (states + kept activations)")
    keeps_input_sharded: bool = Field(False, description="stores its input as the producer's shard and gathers it "
                                                         "again in the backward (Megatron sequence parallelism)")


class Diagnostics(Schema):
    vertices: int
    edges: int
    max_dependent_set: int
    max_table_entries: int
    candidates: dict[str, int] = Field(description="configurations per vertex kind")
    max_candidates: int = Field(description="most configurations of any vertex kind")
    dp_runs: int = Field(description="DP runs of the Lagrangian search")
    order_s: float
    tables_s: float
    dp_s: float
    wall_s: float


class PaseResult(Schema):
    """The strategy PaSE found for one stage mesh, its cost and memory, and how the search went."""

    model: str
    hardware: str
    mesh: dict[str, int] = Field(description="stage mesh sizes dp, cp, tp")
    time_s: float = Field(description="seconds per step: sum of vertex and edge costs over the whole graph")
    memory_bytes: float = Field(description="bytes per device of the first pipeline stage (overhead excluded)")
    memory_budget_bytes: float
    lam: float | None = Field(description="Lagrange multiplier, s per byte; None when the budget cannot be met")
    budget_met: bool
    vertices: list[VertexResult]
    diagnostics: Diagnostics

    def _runs(self) -> list[tuple[VertexResult, tuple[int, int] | None, float]]:
        """Operators with consecutive layers of identical choices merged: (first vertex, (first, last) layer or
        None, seconds per step of all of them with the tensors they read). Embedding, layers in order, head."""
        key = lambda r: (r.split, r.input, r.output, r.weight, r.style)
        open_run: dict[str, list] = {}
        out: list[list] = []
        for r in self.vertices:
            run = open_run.get(r.op) if r.layer is not None else None
            if run is not None and run[1][1] == r.layer - 1 and key(run[0]) == key(r):
                run[1] = (run[1][0], r.layer)
                run[2] += r.time_s + r.edge_s
                continue
            run = [r, None if r.layer is None else (r.layer, r.layer), r.time_s + r.edge_s]
            if r.layer is not None:
                open_run[r.op] = run
            out.append(run)
        rank = {op: i for i, op in enumerate(OPS)}
        out.sort(key=lambda x: (x[1] is None and x[0].op != "embedding", x[1][0] if x[1] else -1, rank.get(x[0].op)))
        return [tuple(x) for x in out]

    def placements(self) -> list[OpPlacement]:
        """Per-operator placements (planfile.OpPlacement), layers with identical choices collapsed."""
        return [OpPlacement(op=r.op, layers=layers, split=r.split, input=r.input, output=r.output, weight=r.weight,
                            style=r.style) for r, layers, _ in self._runs()]

    def summary(self) -> str:
        """One row per operator and run of layers: split, placements (dp, cp, tp; R, P, S(i)), style, seconds per
        step of the run (the ops and the redistribution of what they read)."""
        mesh = " x ".join(f"{a}={n}" for a, n in self.mesh.items())
        fit = "fits" if self.budget_met else "does NOT fit"
        lam = "-" if self.lam is None else f"{self.lam:.3g} s/B"
        lines = [(f"PaSE {self.model} on {self.hardware}, mesh {mesh}: {self.time_s:.4g} s per step (ops + "
                  f"redistribution), {self.memory_bytes / 2**30:.2f} GiB per device, {fit} in "
                  f"{self.memory_budget_bytes / 2**30:.2f} GiB (lambda {lam})")]
        rows = [("op", "layers", "split", "input", "output", "weight", "style", "s/step")]
        short = lambda ps: ",".join(p.replace("Replicate()", "R").replace("Partial()", "P")
                                    .replace("Shard", "S") for p in ps) if ps else "-"
        for r, layers, seconds in self._runs():
            split = " ".join(f"{d}:{'+'.join(a)}" for d, a in r.split.items()) or "replicate"
            lay = "-" if layers is None else f"{layers[0]}-{layers[1]}"
            rows.append((r.op, lay, split, short(r.input), short(r.output), short(r.weight), r.style or "-",
                         f"{seconds:.4g}"))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        d = self.diagnostics
        lines.append(f"search: {d.vertices} vertices, {d.edges} edges, max dependent set {d.max_dependent_set}, "
                     f"max table {d.max_table_entries}, {d.dp_runs} DP runs, {d.wall_s:.3f} s")
        return "\n".join(lines)


def _describe(kind: OpKind, mesh: Mesh, cfg: np.ndarray) -> dict:
    """Split, placements (DTensor words, one per axis dp, cp, tp) and style of one configuration (a (1, axes) row)."""
    split: dict[str, list[str]] = {}
    for a, d in zip(mesh.names, cfg[0]):
        if d >= 0:
            split.setdefault(kind.dims[d].name, []).append(a)

    def full(codes: np.ndarray, is_input: bool = False) -> list[str]:
        per = {a: int(c) for a, c in zip(mesh.names, codes[0])}
        # an input's code 1 is a Replicate whose gradient is Partial
        return [_placement_name(_R if is_input and per.get(a) == _P else per.get(a, _R)) for a in AXES]

    inp = full(placement_codes(kind, cfg, kind.ins[0], "in"), is_input=True)
    if kind.out is None:  # the loss: per-rank partial sums over batch / seq splits, replicated otherwise
        out = full(np.where(np.isin(cfg, [kind.dim_index("batch"), kind.dim_index("seq")]), _P, _R))
    else:
        out = full(placement_codes(kind, cfg, kind.out, "out"))
    weight = full(placement_codes(kind, cfg, kind.weight, "weight")) if kind.weight else None
    return {"split": split, "input": inp, "output": out, "weight": weight,
            "style": _style(kind, split, inp, out, weight)}


def _style(kind: OpKind, split: dict[str, list[str]], inp: list[str], out: list[str], weight: list[str] | None):
    """The torch ParallelStyle the tp-axis placement matches (planfile.OpPlacement.style), if any."""
    t = AXES.index("tp")
    tp_dim = next((d for d, axes in split.items() if "tp" in axes), None)
    if tp_dim is None:
        return None
    if kind.name in ("embedding", "lm_head") and tp_dim == "vocab":
        return "vocab"
    if weight is not None and kind.family in ("linear", "embedding"):
        if weight[t] == "Shard(0)" and inp[t] == "Replicate()" and kind.family == "linear":
            return "colwise"
        if weight[t] == "Shard(1)" and kind.family == "embedding":
            return "colwise"  # torch ColwiseParallel on nn.Embedding shards the embedding dim
        if weight[t] == "Shard(1)" and out[t] == "Partial()":
            return "rowwise"
    if kind.family in ("norm", "residual", "activation") and out[t] == "Shard(1)":
        return "sequence"
    return None


def _result(model, system, plan, graph, tables, prob, point, met, runs, budget, timings) -> PaseResult:
    a = point.assignment
    edge_t, edge_m, alt = _edge_parts(graph, tables, a, point.lam)
    edge_in, saved = np.zeros(len(graph.vertices)), np.zeros(len(graph.vertices))
    regather = np.zeros(len(graph.vertices), bool)
    for e, t, mem, used in zip(graph.edges, edge_t, edge_m, alt):
        edge_in[e.dst] += t
        saved[e.dst] += mem
        regather[e.dst] |= used
    verts, described = [], {}
    for v, vert in enumerate(graph.vertices):
        key = (vert.kind, a[v])  # layers repeat the same few configurations
        if key not in described:
            described[key] = _describe(graph.kinds[vert.kind], tables.mesh, tables.configs[vert.kind][a[v]:a[v] + 1])
        verts.append(VertexResult(name=vert.name, op=vert.kind, layer=vert.layer, config=a[v],
                                  time_s=float(tables.time[vert.kind][a[v]]), edge_s=float(edge_in[v]),
                                  memory_bytes=float(tables.memory[vert.kind][a[v]] + saved[v]),
                                  keeps_input_sharded=bool(regather[v]), **described[key]))
    diag = Diagnostics(vertices=len(graph.vertices), edges=len(graph.edges),
                       max_dependent_set=prob.stats.max_dependent_set,
                       max_table_entries=prob.stats.max_table_entries,
                       candidates={k: tables.size(k) for k in OPS if k in tables.time},
                       max_candidates=max(tables.size(k) for k in tables.time), dp_runs=runs, **timings)
    return PaseResult(model=model.name, hardware=system.name, mesh=dict(tables.mesh.full), time_s=point.time,
                      memory_bytes=point.memory, memory_budget_bytes=budget, lam=point.reported_lam if met else None,
                      budget_met=met, vertices=verts, diagnostics=diag)


def solve(model: ModelConfig | str, system: System | str, plan: Plan, memory_budget: float | None = None) -> PaseResult:
    """PaSE's optimal per-operator sharding of `plan`'s stage mesh (dp, cp, tp) within a memory budget.

    `memory_budget`: bytes per device for model states and activations; default the accelerator's HBM less the
    system's memory overhead. The plan is resolved (InputError on an impossible mesh).
    """
    start = time.perf_counter()
    model, system = load_model(model), load_hardware(system)  # objects pass through; names and paths load
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a perfmodel.Plan, got {type(plan).__name__}")
    plan = resolve(plan, model, system)
    budget = system.accelerator.hbm_bytes - system.memory_overhead_bytes if memory_budget is None else memory_budget
    if not budget > 0 or not math.isfinite(budget):
        raise InputError(f"memory_budget = {memory_budget!r} bytes; valid: a positive finite number of bytes")
    graph = operator_graph(model, plan)
    t0 = time.perf_counter()
    tables = cost_tables(graph, model, system, plan)
    if model.tie_embeddings:
        tables = restrict_tables(tables, tied_configurations(graph, tables))
    t1 = time.perf_counter()
    prob = ChainProblem(graph, tables)  # separators, and GENERATESEQ inside each distinct block
    t2 = time.perf_counter()
    point, met, runs = _fit_budget(prob, budget)
    t3 = time.perf_counter()
    timings = {"tables_s": t1 - t0, "order_s": t2 - t1, "dp_s": t3 - t2, "wall_s": t3 - start}
    return _result(model, system, plan, graph, tables, prob, point, met, runs, budget, timings)


# ---------------------------------------------------------------------------------------------------------
# Reference strategies
# ---------------------------------------------------------------------------------------------------------
def find_config(tables: CostTables, graph: Graph, kind: str, split: dict[str, Sequence[str]]) -> int:
    """Index of the configuration of `kind` that splits each dim over the named axes (size-1 axes ignored)."""
    mesh = tables.mesh
    dims = [d.name for d in graph.kinds[kind].dims]
    want = np.full(len(mesh.names), -1)
    for dim, axes in split.items():
        for a in axes:
            if a in mesh.names:
                want[mesh.names.index(a)] = dims.index(dim)
    hit = np.flatnonzero((tables.configs[kind] == want).all(axis=1))
    if not len(hit):
        raise InputError(f"{kind}: split {dict(split)} is not a valid configuration on mesh {mesh.full}")
    return int(hit[0])


MEGATRON_TP = {"embedding": "vocab", "qkv": "heads", "attention": "heads", "out_proj": "heads", "mlp_in": "ffn",
               "activation": "ffn", "mlp_out": "ffn", "lm_head": "vocab", "loss": "vocab"}


def megatron_assignment(graph: Graph, tables: CostTables, sequence_parallel: bool = True,
                        tp_split: Callable[[str], str | None] | None = None) -> list[int]:
    """Megatron-LM's strategy as a configuration per vertex: dp splits batch, cp the sequence, tp the heads /
    ffn / vocab (Shoeybi et al. 2019) and, with sequence parallelism, the sequence of norms and residuals
    (Korthikanti et al. 2022). `tp_split(kind)` overrides the tp dim per kind (None: replicate)."""
    out = []
    for v in graph.vertices:
        dim = tp_split(v.kind) if tp_split else MEGATRON_TP.get(v.kind, "seq" if sequence_parallel else None)
        split: dict[str, list[str]] = {"batch": ["dp"], "seq": ["cp"]}
        if dim is not None:
            split.setdefault(dim, []).append("tp")
        out.append(find_config(tables, graph, v.kind, split))
    return out
