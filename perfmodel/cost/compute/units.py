"""One layer, the embedding and the head under Megatron-LM's placements, per micro-batch, for every plan of a
search: the kernels of their operators (`cost.compute.operator_table`), the tensors passed between them (`cost.comm.sharded.
edge_cost` over Megatron's placement codes, `perfmodel.spec.model.operators.megatron_split`) and the collectives inside
them (`cost.comm.sharded.op_comms`).

The embedding's unit holds the reduction of its vocab-parallel output and what that output passes to the first
layer, as Megatron-LM's VocabParallelEmbedding does it (`perfmodel.spec.model.operators.edge_unit`); a layer holds what it
reads from the previous layer; the head what it reads from the last layer.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ...spec.plan.finetune import BASE_WEIGHT_BYTES
from ...spec.hardware.system import NARROW_PRECISIONS, System
from ...spec.model.config import ModelConfig
from ...spec.model.operators import (
    OPS, EMBEDDING_EDGES, EMBEDDING_OPS, GRAPH_OPS, HEAD_EDGES, HEAD_OPS, INPUT_EDGES, LAYER_EDGES, MOE_EDGES, UNIT_OF,
    edge_unit,
)
from ...spec.plan.layout import Plan
from ...spec.stack.profile import load_stack
from ..comm.compression import GRAD_BYTES, layout_wire_bytes
from ..host.launch_queue import HostRates, host_rates, launch_seconds
from ..memory.frozen import adapter_params
from .kernels import Device, Op, zero3_copy_op
from ..layouts import PER_DEVICE, Layouts, among, spread
from ..memory.footprint import unit_params
from ..memory.states import WEIGHT_BYTES
from ..comm.mesh import BIT, Mesh
from .moe import ExpertDataGroup, expert_layer_params
from .operator_table import (
    edge_share, forward_passes, keeps_shard, kernels, megatron, megatron_codes, operators, output_bytes,
)
from ..memory.offload import offload_comm, offloads
from .remat_names import names_edge_reruns
from ..comm.sharded import (
    ZERO_GROUP, Comm, behind, edge_cost, moe_comms, op_comms, overlap_fraction, tp_overlap, zero3_gather,
)
from ..pipeline.stages import UNITS, Stages, pipeline_busy, shared_host_speedup

COMPUTE_PARTS = {"gemm": "gemm", "attention": "attention", "memory": "memory_bound"}
COMPUTE_PART_NAMES = (*COMPUTE_PARTS.values(), "recompute")
STAGE_PARTS = ("gemm", "attention", "memory_bound", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm",
               "zero3_comm", "offload_comm", "host", "overhead")

TP_GEMMS = ("qkv", "out_proj", "mlp_in", "mlp_out")  # the GEMMs tensor-parallel collectives feed or follow
UNIT_OPS = {"layer": tuple(n for n in GRAPH_OPS if UNIT_OF[n] == "layer"), "embedding": EMBEDDING_OPS,
            "head": HEAD_OPS}  # a layer's operators in order, its MoE MLP ("moe") among them
UNIT_EDGES = {
    "layer": LAYER_EDGES + MOE_EDGES + tuple(("residual2", dst, slot) for dst, slot in INPUT_EDGES),
    "embedding": EMBEDDING_EDGES + tuple(("embedding_output", dst, slot) for dst, slot in INPUT_EDGES),
    "head": (("residual2", "final_norm", 0),) + HEAD_EDGES,
}
# What a unit costs per device depends on the per-device fields and, through the tied LM head's copy on the last
# stage, on whether the plan is pipelined; ranks that share a host's cores (`System.shared_host`) also on the
# pipeline, whose idle stages lend them cores: then every plan is its own row.
UNIT_KEY = (*PER_DEVICE, "pipelined")
TP_NAMES = {"layer": "tp activations", "embedding": "tp embedding", "head": "tp lm head"}


def op_kernels(model: ModelConfig, system: System, lay: Layouts) -> dict[str, list[Op]]:
    """The kernels of each operator under Megatron-LM's split for every plan, costed once per distinct
    combination of the fields they read.

    A micro-batch's kernels depend on tp, cp, micro_batch and sequence parallelism, for a MoE model on ep and etp
    (its MoE MLP, the "moe" operator: `cost.compute.moe.moe_kernels` times the MoE layers' share), and (through fp8 weight
    casts) on dp and ZeRO (`Layouts.distinct`).
    """
    narrow = lay.precision in NARROW_PRECISIONS  # weight casts: amortised over micro-batches, regathered by ZeRO-3
    experts = ("ep", "etp") if model.moe is not None else ()  # a MoE layer's experts: cost.compute.moe
    first, inverse = lay.distinct(("tp", "cp", "micro_batch", "sequence_parallel") + experts
                                  + (("dp", "zero", "dp_replicate") if narrow else ()))
    sub = lay.take(first)
    dev, ops = Device(model, system, sub), operators(model)
    out = {name: kernels(op, megatron(op, sub), dev) for name, op in ops.items()}
    return {name: spread(k, inverse) for name, k in out.items()}


def unit_ops(model: ModelConfig, system: System, plan: Plan | Layouts,
             kern: dict[str, list[Op]] | None = None) -> dict[str, list[Op]]:
    """The kernels of one layer, the embedding and the head (`op_kernels`, in operator order) of a plan (a
    `Plan`, resolved, or the plans of a `Layouts`)."""
    lay = Layouts.from_plan(plan) if isinstance(plan, Plan) else plan
    kern = op_kernels(model, system, lay) if kern is None else kern
    out = {u: [k for name in names for k in kern[name]] for u, names in UNIT_OPS.items()}
    return {u: spread(ops, 0) for u, ops in out.items()} if isinstance(plan, Plan) else out


def unit_edges(model: ModelConfig, system: System, lay: Layouts) -> dict[str, Comm]:
    """The tensors each unit passes between its operators under Megatron-LM's placements, per micro-batch: one
    `Comm` per unit (its collectives on tp: exposed, but for sequence parallelism's re-gather of GEMM inputs,
    `sharded.edge_cost`), costed once per distinct combination of the fields they read (`Layouts.distinct`), and
    for the plans with and without sequence parallelism apart: each has one placement of every tensor, so its
    collectives are over one group of mesh axes (`cost.comm.mesh.Mesh.collective` prices those once per mesh)."""
    # Megatron's placements move nothing over dp (every operator splits the batch there alike; a tensor's bytes
    # on a device do not depend on dp), so one dp stands for all
    first, inverse = lay.distinct(("tp", "cp", "micro_batch", "sequence_parallel", "recompute"))
    sub = lay.take(first)
    parts: dict[str, list] = {}
    for sp in (False, True):
        rows = np.flatnonzero(sub.sequence_parallel == sp)
        if len(rows):
            for unit, comm in _edges_of(model, system, sub.take(rows), sp).items():
                parts.setdefault(unit, []).append((rows, comm))
    return {unit: spread(_scattered(pieces, len(sub)), inverse) for unit, pieces in parts.items()}


def _edges_of(model: ModelConfig, system: System, lay: Layouts, sp: bool) -> dict[str, Comm]:
    """`unit_edges` for plans that all have sequence parallelism `sp` (one placement code per tensor)."""
    mesh, ops = Mesh.of(system, lay), operators(model)
    f = overlap_fraction(system, load_stack(lay.stack))
    out = {}
    for unit, edges in UNIT_EDGES.items():
        fwd = bwd = 0.0
        rows = []
        for src, dst, slot in edges:
            o, i = megatron_codes(src, dst, slot, sp)
            rerun = names_edge_reruns(src, dst, lay.recompute_saved or (), model.mla is not None)
            passes = forward_passes(edge_unit(src, dst), lay.recompute, rerun)
            ec = edge_cost(mesh, o, i, output_bytes(ops[src], lay), passes, keeps_shard(o, i, ops[dst]), f)
            w = edge_share(model, src, dst)  # a MoE model's dense-MLP tensors pass in the layers that have them
            fwd, bwd = fwd + w * ec.fwd, bwd + w * ec.bwd
            rows = rows + [(k, b, msk, sec, calls * w) for k, b, msk, sec, calls in ec.steps]
        n = len(lay)
        calls = sum(r[4] for r in rows) + np.zeros(n)
        total = sum(r[3] * r[4] for r in rows) + np.zeros(n)
        nbytes = sum(r[1] * r[4] for r in rows) + np.zeros(n)
        kinds = sorted({r[0] for r in rows})
        code = sum((np.broadcast_to(sum(np.asarray(r[4]) for r in rows if r[0] == k) > 0, (n,)) << i)
                   for i, k in enumerate(kinds)) + np.zeros(n, np.int64)
        # (a plain np.unique would import numpy.ma, 20 ms at start-up)
        names = {c: " / ".join(k for i, k in enumerate(kinds) if c >> i & 1) or "none" for c in set(code.tolist())}
        label = np.array([names[c] for c in code.tolist()], dtype=object)
        per = lambda x: np.divide(x, calls, out=np.zeros_like(calls), where=calls > 0)  # noqa: E731
        out[unit] = Comm(TP_NAMES[unit], label, "tp", nbytes=per(nbytes), seconds=per(total), calls=calls,
                         fwd=fwd + np.zeros(n), bwd=bwd + np.zeros(n), unit=unit, part="tp_comm", mask=BIT["tp"],
                         active=calls > 0)
    return out


def _scattered(pieces: list[tuple[np.ndarray, Comm]], n: int) -> Comm:
    """One Comm over n rows from Comms over disjoint subsets of them (`rows`): their per-row fields put in place."""
    rows0, first = pieces[0]
    out = {}
    for field in fields(first):
        x = getattr(first, field.name)
        if isinstance(x, np.ndarray) and x.ndim:
            full = np.empty(n, x.dtype)
            for rows, comm in pieces:
                full[rows] = getattr(comm, field.name)
            out[field.name] = full
        else:
            out[field.name] = x
    return Comm(**out)


def host_counts(ops: list[Op], comms: list[Comm], recompute) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per micro-batch, a unit's operator launches in the forward, in the backward (its recomputed forwards
    included) and its collective calls: what the host dispatches (each op its share of one launch per pass; each
    Comm's calls)."""
    on = lambda x: np.asarray(x, bool).astype(float)  # noqa: E731
    fwd = sum(on(op.active) * op.share for op in ops)
    bwd = sum(on(op.active) * op.share * (1.0 + among(recompute, op.recompute)) for op in ops)
    calls = sum(np.asarray(c.calls, float) * on(c.active) for c in comms)
    return fwd + 0.0, bwd + 0.0, calls + 0.0


def unit_host_seconds(kern: dict[str, list[Op]], unit: str, rates: HostRates, recompute,
                      launched: list[Op] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host seconds per micro-batch launching a unit's forward and its backward (its recomputed forwards
    included): each operator's calls per pass at `rates` (cost.host.launch_queue.HostRates: the stack's counts priced on
    the system's host), counted once per operator run (its kernels' share and activity), and a layer's own calls
    beside them (under torch.compile or CUDA graphs its whole calls), the layer's forward calls again for the share
    of its operators the plan recomputes; where the step is graphed whole, the embedding's unit carries the
    micro-batch's replays. On a CPU spec with fitted per-launch costs: each of the unit's kernels (`launched`: its
    operators' and its ZeRO-3 copies') at kernel_s per pass. (forward, backward, the backward's recomputed
    forward: part of it) seconds."""
    f = b = r = again_ops = ran = 0.0
    if rates.kernel_s:  # a CPU spec's fitted cost per kernel launch, as host_counts counts the launches
        nf, nb, _ = host_counts(list(launched), [], recompute)  # nb - nf: the recomputed forwards' launches
        return rates.kernel_s * nf, rates.kernel_s * nb, rates.kernel_s * (nb - nf)
    for name in UNIT_OPS[unit]:
        ks = kern.get(name) or []
        if not ks:
            continue
        on = np.asarray(ks[0].active, bool).astype(float) * ks[0].share
        again = np.max([np.asarray(among(recompute, k.recompute), float) for k in ks], axis=0)
        if rates.layer_ops or unit != "layer":
            f = f + on * rates.op_f.get(name, 0.0)
            b = b + on * rates.op_b.get(name, 0.0)
            r = r + on * again * rates.op_f.get(name, 0.0)
        again_ops, ran = again_ops + on * again, ran + on
    if unit == "layer":
        again_ops, ran = np.broadcast_arrays(np.asarray(again_ops, float), np.asarray(ran, float))
        share = np.divide(again_ops, ran, out=np.zeros_like(ran), where=ran > 0)
        f, b, r = f + rates.layer_f, b + rates.layer_b, r + share * rates.layer_f
    if unit == "embedding":
        f, b = f + rates.micro_batch_f, b + rates.micro_batch_b
    return f, b + r, r


def unit_parts(ops: list[Op], recompute) -> dict[str, np.ndarray]:
    """Per-micro-batch seconds of a unit's kernels by breakdown part (recomputed forwards in `recompute`)."""
    out = dict.fromkeys(STAGE_PARTS, 0.0)
    for op in ops:
        out[COMPUTE_PARTS[op.kind]] = out[COMPUTE_PARTS[op.kind]] + op.fwd_s + op.bwd_s
        out["recompute"] = out["recompute"] + op.recompute_s(recompute)
    return out


@dataclass
class Units:
    """One layer, the embedding and the head per micro-batch on one device, for the distinct rows of a set of plans
    (`unit_costs`; plan j's row is `index[j]`): their kernels and communication, and the sums a stage is built from.
    Seconds are per micro-batch; parts are TimeBreakdown fields."""

    index: np.ndarray  # each plan's row
    lay: Layouts  # the rows' plans
    ops: dict[str, list[Op]]
    comms: list[Comm]  # per unit per micro-batch
    parts: dict[str, dict[str, np.ndarray]]  # unit -> STAGE_PARTS (compute and exposed communication)
    fwd: dict[str, np.ndarray]  # unit -> the device's busy seconds in the forward (compute + exposed comm)
    bwd: dict[str, np.ndarray]  # ... in the backward (its recomputed forward included)
    kernels: dict[str, np.ndarray]  # unit -> operator launches per micro-batch (forward + backward)
    calls: dict[str, np.ndarray]  # unit -> collective calls per micro-batch
    speedup: np.ndarray  # cost.compute.kernel_time.shared_core_speedup applied to compute (1: no shared host)
    moe_window: np.ndarray  # seconds of a layer's compute per micro-batch that moe_overlap hides its dispatch behind
    zero3_overlap: dict[str, tuple]  # unit -> (gather <= forward, <= backward, fraction that may hide, active)
    rates: HostRates  # the host's seconds per launch, call and optimizer tensor (cost.host.launch_queue)
    host_f: dict[str, np.ndarray]  # unit -> host seconds launching its forward per micro-batch
    host_b: dict[str, np.ndarray]  # ... its backward (recomputed forward included)
    host_r: dict[str, np.ndarray]  # ... of that, the recomputed forward's (what the block method re-runs in part)

    def per_plan(self, x: np.ndarray) -> np.ndarray:
        """A per-row value copied out to every plan."""
        return np.broadcast_to(x, (len(self.lay),))[self.index]


def unit_costs(model: ModelConfig, system: System, lay: Layouts) -> Units:
    """What one layer, the embedding and the head cost per micro-batch on one device, once per distinct row
    (`UNIT_KEY`) of the plans in `lay`: their kernels (`op_kernels`), the tensors between their operators
    (`unit_edges`), a MoE layer's dispatch (`sharded.moe_comms`), the collectives inside operators
    (`sharded.op_comms`), ZeRO-3's weight gathers and gradient reduce-scatters (overlapped with the unit's own
    compute but the embedding's, which opens the forward and closes the backward), and the host's seconds launching
    them (cost.host.launch_queue; how much of it the device waits for is the stage's to say, cost.step)."""
    key = UNIT_KEY if system.shared_host is None else tuple(name for name in UNIT_KEY if name != "pipelined") + (
        "pp", "vpp", "account_for_embedding", "account_for_loss")
    first, index = lay.distinct(key)
    lay = lay.take(first)
    dev, mesh = Device(model, system, lay), Mesh.of(system, lay)
    rc, shard, zero = lay.recompute, lay.zero_shard, lay.zero
    f, overlap = overlap_fraction(system, dev.stack), lay.overlap_dp_comm
    gbytes = GRAD_BYTES[lay.grad_dtype]
    wbytes = layout_wire_bytes(model, lay)  # what the gradient collectives carry per element (cost.comm.compression)
    none = np.zeros(len(lay))

    kern = op_kernels(model, system, lay)
    ops = unit_ops(model, system, lay, kern)
    params = unit_params(model, lay)
    zero3 = (zero == 3) & (shard > 1)
    for u in UNITS:
        ops[u].append(zero3_copy_op(dev, params[u], gbytes, active=zero3))
    parts = {u: unit_parts(ops[u], rc) for u in UNITS}
    # Busy seconds per direction (compute, later + exposed comm): what overlapped collectives hide behind.
    fwd = {u: sum(op.fwd_s for op in ops[u]) + none for u in UNITS}
    bwd = {u: sum(op.bwd_s + op.recompute_s(rc) for op in ops[u]) + none for u in UNITS}
    compute = {u: sum(parts[u][k] for k in COMPUTE_PART_NAMES) for u in UNITS}
    speedup = none + 1.0
    if system.shared_host is not None:  # ranks sharing a host's cores compute faster while pipeline neighbours wait
        speedup = shared_host_speedup(system, lay, pipeline_busy(model, lay, Stages.of(model, lay), compute))
        for u in UNITS:
            for k in COMPUTE_PART_NAMES:
                parts[u][k] = parts[u][k] / speedup
            fwd[u], bwd[u] = fwd[u] / speedup, bwd[u] / speedup
    layer_compute = fwd["layer"], bwd["layer"]  # what moe_overlap hides a dispatch behind, and offload its copies
    moe_window = sum(layer_compute)
    comms: list[Comm] = []

    def charge(c: Comm):
        parts[c.unit][c.part] = parts[c.unit][c.part] + c.exposed
        fwd[c.unit], bwd[c.unit] = fwd[c.unit] + c.fwd, bwd[c.unit] + c.bwd
        comms.append(c)

    # --- the tensors between operators; the collectives inside them -----------------------------------------
    # a layer's tp all-gathers / reduce-scatters beside its GEMMs where the stack (or the plan) overlaps them
    overlap_on = (lay.tp > 1) & lay.sequence_parallel & lay.tp_comm_overlap
    share = (min(1.0, dev.stack.tp_overlap_sms / system.accelerator.compute_units)
             if system.accelerator.torch_device == "cuda" else 0.0)
    gemms = [op for op in ops["layer"] if op.name in TP_GEMMS]  # the column- and row-parallel GEMMs, not QK^T / PV
    for c in unit_edges(model, system, lay).values():
        if c.unit == "layer" and np.any(overlap_on):
            c = tp_overlap(c, [op.fwd_s / speedup for op in gemms],
                           [(op.bwd_s + op.recompute_s(rc)) / speedup for op in gemms], share, overlap_on)
        charge(c)
    # a MoE model's token dispatch and combine (with moe_overlap, beside a layer's compute of another micro-batch)
    for c in moe_comms(model, system, lay, moe_window):
        charge(c)
    if offloads(lay):  # the offloaded tensors to the host and back, beside layer compute (cost.memory.offload)
        charge(offload_comm(model, system, lay, *layer_compute))
    table = operators(model)
    for name in OPS:
        seconds = (sum(k.fwd_s for k in kern[name]) / speedup, sum(k.bwd_s for k in kern[name]) / speedup)
        for c in op_comms(table[name], megatron(table[name], lay), mesh, model, rc, seconds, f,
                          lay.recompute_saved or ()):
            charge(c)

    # --- ZeRO-3: gather a unit's weights before its forward and backward, reduce-scatter its gradients ------
    zero3_overlap = {}
    p_exp, experts = expert_layer_params(model, lay), ExpertDataGroup(system, lay, model)
    part_of = lambda x, total: np.divide(x, total, out=np.zeros_like(total), where=total > 0)  # noqa: E731
    # a LoRA fine-tune gathers its frozen base as stored and reduces the adapters' gradients (spec.plan.finetune)
    train = params if lay.lora is None else dict(layer=adapter_params(model, lay), embedding=0.0, head=0.0)
    stored = WEIGHT_BYTES if lay.lora is None else BASE_WEIGHT_BYTES[lay.lora.base_weights]
    for unit, p in params.items():
        on = zero3 & (p > 0)
        ag, rs = (on * x for x in zero3_gather(mesh, p, wbytes, ZERO_GROUP, weight_bytes=stored, trainable=train[unit]))
        on_rs = on & (np.asarray(train[unit]) > 0)  # a frozen unit (LoRA's embedding, head) reduces nothing
        rs = on_rs * rs
        # a layer's routed experts gather and reduce over their edp group, in the same window as its dense weights
        on_e = (zero == 3) & (lay.edp > 1) & (p_exp > 0) & (unit == "layer")
        ag_e, rs_e = (on_e * x for x in zero3_gather(experts, p_exp, wbytes, None, weight_bytes=stored,
                                                     trainable=p_exp * (lay.lora is None)))
        gathers, both = ag + ag_e, ag + ag_e + rs + rs_e
        # The embedding is first in the forward and last in the backward: nothing to hide behind.
        frac = f if overlap and unit != "embedding" else 0.0
        e_f, e_b = behind(gathers, fwd[unit], frac), behind(both, bwd[unit], frac)
        zero3_overlap[unit] = (gathers <= fwd[unit], both <= bwd[unit], frac, on)
        # the exposed time split by traffic
        charge(Comm("zero3 weight all-gather", "all_gather", "dp", nbytes=p * stored, seconds=ag, calls=2,
                    fwd=e_f * part_of(ag, gathers), bwd=e_b * part_of(ag, both), unit=unit, part="zero3_comm",
                    mask=ZERO_GROUP, active=on))
        charge(Comm("zero3 gradient reduce-scatter", "reduce_scatter", "dp", nbytes=train[unit] * wbytes, seconds=rs, calls=1,
                    bwd=e_b * part_of(rs, both), unit=unit, part="zero3_comm", mask=ZERO_GROUP, active=on_rs))
        if unit == "layer" and model.moe is not None:
            charge(Comm("zero3 expert all-gather (edp)", "all_gather", "edp", nbytes=p_exp * stored,
                        seconds=ag_e, calls=2, fwd=e_f * part_of(ag_e, gathers), bwd=e_b * part_of(ag_e, both),
                        unit=unit, part="zero3_comm", tier=experts.tiers(), active=on_e))
            charge(Comm("zero3 expert reduce-scatter (edp)", "reduce_scatter", "edp",
                        nbytes=p_exp * wbytes * (lay.lora is None),
                        seconds=rs_e, calls=1, bwd=e_b * part_of(rs_e, both), unit=unit, part="zero3_comm",
                        tier=experts.tiers(), active=on_e))

    # --- host: what launching them costs the host thread (cost.host.launch_queue); the stage decides how much is exposed -----
    rates = host_rates(system, dev.stack, lay, model)
    kernels, calls_of, host_f, host_b, host_r = {}, {}, {}, {}, {}
    for u in UNITS:
        mine = [c for c in comms if c.unit == u]
        nf, nb, calls = host_counts(ops[u], [c for c in mine if c.part != "zero3_comm"], rc)
        z3 = host_counts([], [c for c in mine if c.part == "zero3_comm"], rc)[2]
        kernels[u], calls_of[u] = nf + nb, calls + z3
        op_f, op_b, host_r[u] = unit_host_seconds(kern, u, rates, rc, ops[u])
        # collectives split evenly between the directions; ZeRO-3's: a gather before the forward, a gather and a
        # reduce-scatter in the backward
        host_f[u] = op_f + launch_seconds(rates, calls / 2, z3 / 3) + none
        host_b[u] = op_b + launch_seconds(rates, calls / 2, 2 * z3 / 3) + none
    return Units(index=index, lay=lay, ops=ops, comms=comms, parts=parts, fwd=fwd, bwd=bwd, kernels=kernels,
                 calls=calls_of, speedup=speedup, moe_window=moe_window, zero3_overlap=zero3_overlap, rates=rates,
                 host_f=host_f, host_b=host_b, host_r=host_r)
