"""PaSE's cost tables: every configuration of every operator on one plan's stage mesh, priced by the functions
`estimate` prices Megatron-LM's placements with (`cost.compute.operator_table`, `cost.comm.sharded`, `cost.memory.footprint`), so that the
Megatron assignment costs here exactly what `estimate` says per unit (tests/test_pase_agreement.py).

A configuration splits an operator's iteration space over the mesh (dp, cp, tp): each axis splits one dim or
none (`configurations`). Units: seconds per training step, bytes per device.
  - Vertex: m x per micro-batch (its kernels at the plan's shared-host speed-up, the collectives inside it,
    its weights' ZeRO-3 gathers and buffer copies) + per step (its weights' gradient reduction and ZeRO-1/2
    gathers, counted exposed: an upper bound, where `estimate` hides most of them behind the backward; its
    optimizer step, and its state's copies to and from host memory under Plan.optimizer_offload, whose update
    peak is the estimate's, in the constant).
    A layer's exposed host-offload copies are the estimate's, on its first operator, inside its ZeRO-3 window.
  - Edge: m x the redistribution of the tensor it carries (`sharded.edge_cost`), forward and backward. A GEMM
    input may be kept as the producer's shard and gathered again in the backward (`CostTables.alt`).
  - ZeRO-3 gathers overlap the compute of their unit (`sharded.behind`), which is not a sum over operators;
    the tables take the side of the kink on which the plan's Megatron placement lies (`sharded.behind_linear`,
    from the plan's estimate): exact there, a tangent (a lower bound) elsewhere.
  - Memory is that of the stage the plan's estimate finds most loaded: its layers' share of each layer
    operator, its embedding and head operators, activations times the micro-batches in flight on its rank,
    the recompute working set of one layer, cached fp8 weights, and what no placement changes (the system's
    overhead, ZeRO's transient copies) as `CostTables.constant_memory`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ...spec.model.operators import AXES, CODES, DATA_AXES, LAYER_OPS, SHARD, UNIT_OF, edge_unit, tensor_codes
from ...spec.plan.layout import Plan
from ...spec.stack.profile import load_stack
from .graph import Graph
from ..comm.compression import GRAD_BYTES, compression_seconds, layout_wire_bytes
from ..compute.kernels import ACT_BYTES, Device, saved_input_bytes, zero3_copy_op
from ..layouts import Layouts
from ..memory.footprint import head_copy, kept_scale, layer_gemm_params, narrow_cache_bytes, stage_moe_layers
from ..memory.states import device_state_bytes, state_bytes
from ..host.host_update import host_share
from ..host.host_update_time import offloaded_update_seconds
from ..comm.mesh import BIT, Mesh, gathered_axes
from ..compute.moe import (
    ExpertDataGroup, expert_layer_params, moe_gemm_params, moe_kept_bytes, moe_replicated_params, moe_router_params,
)
from ..compute.operator_table import (
    Operator, Split, edge_share, forward_passes, keeps_shard, kept_bytes, kernels, local_params, operators,
    output_bytes, weight_shard,
)
from ..comm.sharded import (
    ZERO_GROUP, behind_linear, moe_comms, edge_cost, gradient_reduction, op_comms, optimizer_seconds, overlap_fraction,
    replicate_sync, zero3_gather,
)
from ..compute.remat_names import names_edge_reruns, names_held, names_keeps
from ..pipeline.stages import Stages, shared_host_speedup
from ..step.evaluate import Step, evaluate


def configurations(op: Operator, sizes: dict[str, int], batch: int, seq: int) -> np.ndarray:
    """Every valid split of `op` on a mesh of `sizes`: (K, axes) array, entry = index of the dim that axis splits,
    -1 for none (and for every axis of size 1).

    Each axis splits at most one dim, a dim may be split over several axes, and the product of the axis sizes
    that split a dim must divide it (the vocabulary may pad). Row 0 leaves the tp axis unsplit, but for a MoE MLP,
    whose tokens tp must split (each rank routes its own: Megatron-Core requires sequence parallelism with tp
    and experts). The executor's
    semantics bound the choice (`spec.model.operators.DATA_AXES`): the dp axis is data parallelism (it splits the batch of
    every op), the cp axis context parallelism (the sequence), and attention's sequence is split by cp only
    (keys and values are gathered over cp; a tp split of it would be a second context parallelism).
    """
    dims = op.spec.dims
    full = dict(op.sizes, batch=batch, seq=seq)
    div = dict(op.divisors, batch=batch, seq=seq)
    allowed = []
    for axis in AXES:
        only = DATA_AXES.get(axis)
        if sizes[axis] == 1:
            allowed.append([-1])
        elif only is not None:
            allowed.append([dims.index(only)] if only in dims else [-1])
        elif op.spec.family == "moe":  # routes its own tokens: tp splits them (Megatron-Core needs sp with tp)
            allowed.append([i for i, n in enumerate(dims) if n in ("batch", "seq")])
        else:
            allowed.append([-1] + [i for i, n in enumerate(dims) if not (op.spec.family == "attention" and n == "seq")])
    rows = []
    for choice in itertools.product(*allowed):
        split = {d: math.prod(sizes[a] for a, c in zip(AXES, choice) if c == i) for i, d in enumerate(dims)}
        if all(split[d] <= full[d] and (d == "vocab" or div[d] % split[d] == 0) for d in dims):
            rows.append(choice)
    return np.array(rows, dtype=int).reshape(len(rows), len(AXES))


def config_split(op: Operator, configs: np.ndarray, sizes: dict[str, int], lay: Layouts) -> Split:
    """The `Split` of every configuration (rows of `configs`)."""
    size = np.array([sizes[a] for a in AXES], float)
    pieces, masks = {}, {}
    for i, d in enumerate(op.spec.dims):
        on = configs == i
        pieces[d] = np.prod(np.where(on, size, 1.0), axis=1)
        masks[d] = (on.astype(np.int64) << np.arange(len(AXES))).sum(axis=1)
    return Split(op, pieces, masks, lay.micro_batch * lay.dp, lay.seq_len)


def class_ids(codes: np.ndarray) -> np.ndarray:
    """One integer per row of placement codes (base CODES over the axes)."""
    return (codes * CODES ** np.arange(codes.shape[1])).sum(axis=1)


def codes_of(ids: np.ndarray, n_axes: int = len(AXES)) -> np.ndarray:
    return (ids[:, None] // CODES ** np.arange(n_axes)) % CODES


@dataclass
class Reference:
    """What the plan's estimate (Megatron-LM's placements) fixes for every configuration: the shared-host
    speed-up, the side of each unit's ZeRO-3 overlap kink, the most loaded stage and what it holds regardless."""

    step: Step
    speedup: float
    zero3: dict[str, tuple[bool, bool, float, bool]]  # unit -> (gather <= fwd, <= bwd, overlap fraction, active)
    states: dict[str, float]  # bytes on the stage per byte of a unit's states (its layers' share of a layer)
    kept: dict[str, float]  # ... per byte a unit keeps for one micro-batch
    working: float  # per byte one layer's recompute rebuilds (one layer in its backward at a time)
    constant_memory: float
    moe_states: float = 0.0  # per byte of a mean layer's routed-expert states (memory.stage_moe_layers / n)
    offload: tuple[float, float] = (0.0, 0.0)  # a layer's exposed host copies per micro-batch, fwd, bwd (cost.memory.offload)

    @classmethod
    def of(cls, model: ModelConfig, system: System, lay: Layouts, step: Step | None = None) -> Reference:
        """From the plan's evaluated step (`step.evaluate` of `lay`, evaluated here if not given)."""
        step = evaluate(model, system, lay) if step is None else step
        st: Stages = step.stages
        k = int(step.memory_kind[0])
        at = lambda x: float(np.ravel(x[k])[0])
        n = model.n_layers
        layers, emb, head = at(st.layers), at(st.embedding), at(st.head)
        scale = kept_scale(lay.schedule, lay.pp, lay.vpp, lay.num_microbatches, at(st.rank))
        scale = {u: float(np.ravel(v)[0]) for u, v in scale.items()}
        # what no placement changes: the stage's transients (but the cached narrow weights, per operator here) and
        # the runtime outside the allocator; PaSE's bytes are the allocated view plus the runtime
        const = float(step.memory["transient"][0] + step.memory["runtime"][0]
                      - layers * narrow_cache_bytes(layer_gemm_params(model, lay), lay)[0])
        zero3 = {u: (bool(h_f[0]), bool(h_b[0]), frac, bool(on[0]))
                 for u, (h_f, h_b, frac, on) in step.units.zero3_overlap.items()}  # one plan: row 0
        return cls(step, float(step.compute_speedup[0]), zero3,
                   {"layer": layers / n, "embedding": float(emb > 0), "head": float(head > 0)},  # MTP: shared
                   {"layer": layers / n * scale["layer"], "embedding": emb * scale["embedding"],
                    "head": head * scale["head"]}, 1.0 / n, const,
                   float(np.ravel(stage_moe_layers(model, st, lay)[k])[0]) / n,
                   tuple(sum(float(step.units.per_plan(getattr(c, d))[0]) for c in step.units.comms
                             if c.part == "offload_comm" and c.unit == "layer") for d in ("fwd", "bwd")))


@dataclass
class CostTables:
    """Costs the DP reads. Vertex kind -> (K,) seconds per step and bytes per device; edge key -> a matrix of
    seconds per step over (producer class, consumer class) with each side's config -> class map. An edge's cost
    depends on a configuration only through the placement of the tensor at its end (its class).

    `alt[key]`, where present, is a second way to run the edge, (seconds, bytes against the plain way): the
    consumer keeps its input as the producer wrote it (sharded) and gathers it again in the backward, as
    Megatron-LM sequence parallelism does for its GEMM inputs (Korthikanti et al. 2022).
    The DP takes the cheaper of the two at its lambda (`edge_objective`). `per_step`: seconds per step of a
    vertex kind that do not repeat per micro-batch (time = m * per micro-batch + per_step).
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
    per_step: dict[str, np.ndarray] = field(default_factory=dict)
    microbatches: int = 1
    constant_memory: float = 0.0  # bytes every strategy holds alike (overhead, ZeRO's transient copies)

    def size(self, kind: str) -> int:
        return len(self.time[kind])

    def edge_objective(self, key: str, lam: float) -> np.ndarray:
        """Seconds + lam * bytes of edge `key` over (producer class, consumer class), the cheaper way."""
        if key not in self.alt:
            return self.edge[key]
        t, mem = self.alt[key]
        return np.minimum(self.edge[key], t + lam * mem)

    def edge_parts(self, key: str, lam: float, row, col, use_alt=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(seconds, bytes, alternative taken) of edge `key` at class pairs (row, col), the way the DP takes it at
        lam (or as `use_alt` says, where the alternative exists)."""
        t0 = self.edge[key][row, col]
        if key not in self.alt:
            return t0, np.zeros_like(t0), np.zeros(np.shape(t0), bool)
        t1, m1 = self.alt[key][0][row, col], self.alt[key][1][row, col]
        use = t1 + lam * m1 < t0 if use_alt is None else np.asarray(use_alt, bool) & (t1 != np.inf)
        return np.where(use, t1, t0), np.where(use, m1, 0.0), use

    def edge_matrix(self, key: str, lam: float = 0.0) -> np.ndarray:
        """Seconds + lam * bytes of edge `key` over (producer config, consumer config)."""
        return self.edge_objective(key, lam)[np.ix_(self.src_class[key], self.dst_class[key])]


@dataclass
class _Ctx:
    """What every cost function reads for one plan."""

    model: ModelConfig
    system: System
    lay: Layouts
    mesh: Mesh
    sizes: dict[str, int]
    dev: Device
    ref: Reference
    ops: dict[str, Operator]
    stored: dict[str, tuple[bool, ...]]  # per weight of each op: held by this op (not a tied copy)
    unit_params: dict[str, float]  # full parameters of each unit's stored weights (one bucket per unit)

    @property
    def recompute(self) -> str:
        return str(self.lay.recompute[0])

    @property
    def f(self) -> float:
        return overlap_fraction(self.system, load_stack(self.lay.stack))


def _zero3_window(x: _Ctx, unit: str, fwd, bwd, ag=0.0, ag_rs=0.0):
    """The ZeRO-3 exposure a piece of `unit` adds: its gathers, against its share of the unit's window."""
    h_f, h_b, frac, on = x.ref.zero3[unit]
    if not on:
        return 0.0
    return behind_linear(ag, fwd, frac, h_f) + behind_linear(ag_rs, bwd, frac, h_b)


def _vertex(op: Operator, configs: np.ndarray, x: _Ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seconds per micro-batch, seconds per step, bytes on the reported stage) of every configuration of `op`."""
    if op.spec.family == "moe":
        return _moe_vertex(op, configs, x)
    lay, ref, rc, mesh = x.lay, x.ref, x.recompute, x.mesh
    s = config_split(op, configs, x.sizes, lay)
    gbytes, zero, shard = GRAD_BYTES[lay.grad_dtype], int(lay.zero[0]), float(lay.zero_shard[0])
    wbytes = layout_wire_bytes(x.model, lay)
    ks = kernels(op, s, x.dev)
    held = [(w, w.params * op.share / weight_shard(op, w, s)) for w, keep in zip(op.weights, x.stored[op.name])
            if keep]  # a mean layer's share of each weight (a MoE model's dense MLP: its dense layers')
    params = local_params(op, s, x.stored[op.name]) + np.zeros(len(configs))
    unit = op.unit
    if ref.zero3[unit][3]:
        ks.append(zero3_copy_op(x.dev, params, gbytes))
    sp = ref.speedup
    attention_s = (sum(k.fwd_s for k in ks) / sp, sum(k.bwd_s for k in ks) / sp)
    comms = op_comms(op, s, mesh, x.model, rc, attention_s, x.f, lay.recompute_saved or ())
    # the layer's exposed offload copies: busy seconds its ZeRO-3 gathers hide behind, as every exposed second the
    # estimate charges the unit is (cost.compute.units.unit_costs)
    off_f, off_b = ref.offload if op.name == LAYER_OPS[0] else (0.0, 0.0)
    wf = attention_s[0] + sum(c.fwd for c in comms) + off_f
    wb = sum(k.bwd_s + k.recompute_s(rc) for k in ks) / sp + sum(c.bwd for c in comms) + off_b
    ag = rs = per_step = 0.0
    reduce = token_axes(op, configs)
    for w, p in held:
        share = w.params * op.share / x.unit_params[unit]
        if ref.zero3[unit][3]:
            a, r = zero3_gather(mesh, p, wbytes, ZERO_GROUP, share)
            ag, rs = ag + a, rs + r
        per_step = per_step + gradient_reduction(mesh, p, reduce, zero, lay.num_microbatches, gbytes, share, wbytes)
        per_step = per_step + replicate_sync(x.system, lay, p, wbytes)  # hybrid sharding's replicas
        per_step = per_step + (optimizer_seconds(x.dev, p, zero, shard, gbytes) * (1 - host_share(lay)) + (
            compression_seconds(x.dev, p, gbytes, lay.grad_compression, shard))) / shared_host_speedup(x.system, lay)
        per_step = per_step + offloaded_update_seconds(x.system, lay, p, shard)
    per_mb = wf + wb + _zero3_window(x, unit, wf, wb, ag, ag + rs)
    st = state_bytes(params, lay)
    memory = device_state_bytes(st, lay) * ref.states[unit]
    b = saved_input_bytes(lay)
    kept = kept_bytes(op, s, x.model, lay.attention, rc, input_bytes=b, saved=lay.recompute_saved or (),
                      offloaded=lay.recompute_offloaded or ())
    memory = memory + kept * ref.kept[unit]
    if op.spec.layer:
        memory = memory + (kept_bytes(op, s, x.model, lay.attention, "none", input_bytes=b) - kept) * ref.working
        if op.gemm:
            gemm = local_params(op, s, x.stored[op.name], gemm_only=True)
            memory = memory + narrow_cache_bytes(gemm, lay) * ref.states[unit]
    shape = (len(configs),)
    return (np.broadcast_to(per_mb, shape).astype(float), np.broadcast_to(per_step, shape).astype(float),
            np.broadcast_to(memory, shape).astype(float))


def token_axes(op: Operator, configs: np.ndarray) -> np.ndarray:
    """Per configuration, the bitmask of the axes that split `op`'s tokens (batch or sequence): where a weight
    kept whole on them has partial-sum gradients."""
    on = np.isin(configs, [op.spec.dims.index(d) for d in ("batch", "seq")])
    return (on.astype(np.int64) << np.arange(len(AXES))).sum(axis=1)


def _moe_vertex(op: Operator, configs: np.ndarray, x: _Ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_vertex` of a MoE model's MoE MLP (`cost.compute.moe`), the same on every configuration (each splits the stage's
    tokens over all its ranks; the experts sit where ep x etp put them): its kernels and dispatch / combine
    (`sharded.moe_comms`) per micro-batch; its weights' ZeRO-3 traffic in the layer's window (router and shared
    experts over the ZeRO group, routed experts over edp); per step their gradient reduction and optimizer
    step; its states, kept tensors and cached narrow weights on the reported stage."""
    lay, ref, rc, model = x.lay, x.ref, x.recompute, x.model
    gbytes, zero, m = GRAD_BYTES[lay.grad_dtype], int(lay.zero[0]), lay.num_microbatches
    wbytes = layout_wire_bytes(model, lay)
    ks = kernels(op, config_split(op, configs, x.sizes, lay), x.dev)
    p_rep, p_exp, experts = moe_replicated_params(model, lay), expert_layer_params(model, lay), ExpertDataGroup(
        x.system, lay, model)
    h_f, h_b, frac, on = ref.zero3["layer"]
    if on:
        ks.append(zero3_copy_op(x.dev, p_rep, gbytes))
    comms = moe_comms(model, x.system, lay, ref.step.moe_window)  # moe_overlap: the estimate's window (a constant)
    sp = ref.speedup
    wf = sum(k.fwd_s for k in ks) / sp + sum(c.fwd for c in comms)
    wb = sum(k.bwd_s + k.recompute_s(rc) for k in ks) / sp + sum(c.bwd for c in comms)
    share = float(moe_replicated_params(model, lay, whole=True)[0]) / x.unit_params["layer"]  # of the layer's call
    ag, rs = (on * t for t in zero3_gather(x.mesh, p_rep, wbytes, ZERO_GROUP, share))
    on_e = zero == 3 and int(lay.edp[0]) > 1 and float(p_exp[0]) > 0
    ag_e, rs_e = (on_e * t for t in zero3_gather(experts, p_exp, wbytes, None))
    exposed = behind_linear(ag + ag_e, wf, frac, h_f) + behind_linear(ag + ag_e + rs + rs_e, wb, frac, h_b)
    per_mb = wf + wb + exposed
    # the router is whole where the tokens are split (a partial sum there); the shared experts split over tp
    router, tp = moe_router_params(model) + np.zeros(len(lay)), BIT["tp"]
    part = router / np.maximum(p_rep, 1e-300)
    reduce = token_axes(op, configs)
    per_step = (gradient_reduction(x.mesh, router, reduce, zero, m, gbytes, share * part, wbytes)
                + gradient_reduction(x.mesh, p_rep - router, reduce & ~tp, zero, m, gbytes, share * (1 - part), wbytes)
                + gradient_reduction(experts, p_exp, ZERO_GROUP, zero, m, gbytes, 1.0, wbytes)
                + replicate_sync(x.system, lay, p_rep, wbytes)
                + ((optimizer_seconds(x.dev, p_rep, zero, lay.zero_shard, gbytes)
                    + optimizer_seconds(x.dev, p_exp, zero, lay.edp, gbytes)) * (1 - host_share(lay))
                   + compression_seconds(x.dev, p_rep, gbytes, lay.grad_compression, lay.zero_shard)
                   + compression_seconds(x.dev, p_exp, gbytes, lay.grad_compression, lay.edp))
                / shared_host_speedup(x.system, lay))
    st, st_e = state_bytes(p_rep, lay), state_bytes(p_exp, lay, lay.edp)
    per_step = (per_step + offloaded_update_seconds(x.system, lay, p_rep, lay.zero_shard)
                + offloaded_update_seconds(x.system, lay, p_exp, lay.edp))
    memory = device_state_bytes(st, lay) * ref.states["layer"] + device_state_bytes(st_e, lay) * ref.moe_states
    kept = moe_kept_bytes(model, lay, rc)
    memory = memory + kept * ref.kept["layer"] + (moe_kept_bytes(model, lay, "none") - kept) * ref.working
    memory = memory + narrow_cache_bytes(moe_gemm_params(model, lay), lay) * ref.states["layer"]
    shape = (len(configs),)
    return tuple(np.broadcast_to(np.ravel(v)[0] if np.ndim(v) else v, shape).astype(float)
                 for v in (per_mb, per_step, memory))


def _edge(x: _Ctx, src: Operator, dst: Operator, out: np.ndarray, inp: np.ndarray):
    """(seconds per micro-batch) of an edge over every (out, in) code pair, the plain way, and the (seconds,
    bytes) of keeping the producer's shard (None where no pair gathers into a GEMM)."""
    lay, ref, mesh = x.lay, x.ref, x.mesh
    unit = edge_unit(src.name, dst.name)
    rerun = names_edge_reruns(src.name, dst.name, lay.recompute_saved or (), x.model.mla is not None)
    full, passes = float(output_bytes(src, lay)[0]), int(forward_passes(unit, x.recompute, rerun))
    w = edge_share(x.model, src.name, dst.name)  # a MoE model's mean layer: the layers that pass the tensor

    def run(keep):
        ec = edge_cost(mesh, out, inp, full, passes, keep, x.f)
        return w * (ec.fwd + ec.bwd + _zero3_window(x, unit, ec.fwd, ec.bwd))

    base = run(False)
    keep = keeps_shard(out, inp, dst)
    if not keep.any():
        return base, None
    size = np.array([x.sizes[a] for a in AXES], float)
    shrink = np.prod(np.where(gathered_axes(out, inp), size, 1.0), axis=1)
    b = saved_input_bytes(lay) if dst.spec.layer else ACT_BYTES  # its quantized copy (kernels.saved_input_bytes)
    kept = full * b / ACT_BYTES / np.prod(np.where(inp >= SHARD, size, 1.0), axis=1)  # the GEMM's input on one device
    rebuilt = dst.spec.layer and (x.recompute == "full" or (x.recompute == "names" and not names_keeps(dst.name,
        names_held(lay.recompute_saved or (), lay.recompute_offloaded or ()))))  # on device only in its backward
    weight = ref.working if rebuilt else ref.kept[UNIT_OF[dst.name]]
    saved = np.where(keep, kept * (1 - 1 / shrink) * weight * dst.share, 0.0)  # the GEMM's own kept input
    return base, (np.where(keep, run(keep), np.inf), -saved)


def _edges(graph: Graph, tables: CostTables, x: _Ctx) -> None:
    """Fill the edge tables: per edge key, the class maps and the per-step matrices over class pairs."""
    m = tables.microbatches
    for e in graph.edges:
        if e.key in tables.edge:
            continue
        src, dst = x.ops[graph.vertices[e.src].kind], x.ops[graph.vertices[e.dst].kind]
        out = tensor_codes(src.spec, tables.configs[src.name], src.spec.out, "out")
        inp = tensor_codes(dst.spec, tables.configs[dst.name], dst.spec.ins[e.slot], "in")
        rows, src_class = np.unique(class_ids(out), return_inverse=True)
        cols, dst_class = np.unique(class_ids(inp), return_inverse=True)
        tables.src_class[e.key], tables.dst_class[e.key] = src_class.ravel(), dst_class.ravel()
        tables.edge_kinds[e.key] = (src.name, dst.name)
        o = np.repeat(codes_of(rows), len(cols), axis=0)  # every (row, col) pair
        i = np.tile(codes_of(cols), (len(rows), 1))
        t, alt = _edge(x, src, dst, o, i)
        shape = (len(rows), len(cols))
        tables.edge[e.key] = m * t.reshape(shape)
        if alt is not None:
            tables.alt[e.key] = (m * alt[0].reshape(shape), alt[1].reshape(shape))


def cost_tables(graph: Graph, model: ModelConfig, system: System, plan: Plan, step: Step | None = None) -> CostTables:
    """Vertex and edge cost tables of an operator graph for a resolved plan, computed once per kind (layers
    share them). `step`: the plan's evaluated step, if the caller has it (`cost.estimate.evaluate_plan`)."""
    lay = Layouts.from_plan(plan)
    sizes = {"dp": plan.dp, "cp": plan.cp, "tp": plan.tp}
    ref = Reference.of(model, system, lay, step)
    ops = operators(model)
    tied = not bool(head_copy(model, plan.pp))  # the LM head is the embedding's own table
    stored = {name: tuple(not (tied and name == "lm_head") for _ in op.weights) for name, op in ops.items()}
    unit_full = {u: sum(w.params * op.share for name, op in ops.items() if op.unit == u
                        for w, keep in zip(op.weights, stored[name]) if keep) for u in ("layer", "embedding", "head")}
    unit_full["layer"] += float(moe_replicated_params(model, lay, whole=True)[0])  # the "moe" vertex's router, shared
    x = _Ctx(model, system, lay, Mesh(system, plan.gpus, plan.dp, plan.cp, plan.tp, plan.dp_replicate), sizes,
             Device(model, system, lay), ref, ops, stored, {u: max(p, 1.0) for u, p in unit_full.items()})
    m = plan.num_microbatches
    tables = CostTables({}, {}, {}, {}, {}, {}, mesh=x.mesh, microbatches=m, constant_memory=ref.constant_memory)
    for name in {v.kind for v in graph.vertices}:
        op = ops[name]
        tables.configs[name] = configurations(op, sizes, plan.micro_batch * plan.dp, plan.seq_len)
        per_mb, per_step, tables.memory[name] = _vertex(op, tables.configs[name], x)
        tables.time[name], tables.per_step[name] = m * per_mb + per_step, per_step
    _edges(graph, tables, x)
    return tables


def restrict_tables(tables: CostTables, keep: dict[str, np.ndarray]) -> CostTables:
    """The same costs over a subset of each kind's configurations (`keep[kind]`: indices; kinds absent keep all)."""
    idx = {k: np.asarray(keep.get(k, range(tables.size(k))), int) for k in tables.time}
    sub = lambda d: {k: v[idx[k]] for k, v in d.items()}
    return CostTables(
        time=sub(tables.time), memory=sub(tables.memory), edge=dict(tables.edge),
        src_class={e: c[idx[tables.edge_kinds[e][0]]] for e, c in tables.src_class.items()},
        dst_class={e: c[idx[tables.edge_kinds[e][1]]] for e, c in tables.dst_class.items()},
        edge_kinds=dict(tables.edge_kinds), configs=sub(tables.configs), mesh=tables.mesh, alt=dict(tables.alt),
        per_step=sub(tables.per_step), microbatches=tables.microbatches,
        constant_memory=tables.constant_memory)
