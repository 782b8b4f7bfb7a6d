"""One layer, the embedding and the head under Megatron-LM's placements, per micro-batch, for every plan of a
search: the kernels of their operators (`cost.operators`), the tensors passed between them (`cost.sharded.
edge_cost` over Megatron's placement codes, `perfmodel.operators.megatron_split`) and the collectives inside
them (`cost.sharded.op_comms`).

The embedding's unit holds the reduction of its vocab-parallel output and what that output passes to the first
layer, as Megatron-LM's VocabParallelEmbedding does it (`perfmodel.operators.edge_unit`); a layer holds what it
reads from the previous layer; the head what it reads from the last layer.
"""

from __future__ import annotations

import numpy as np

from ..hardware import System
from ..models import ModelConfig
from ..operators import (
    EMBEDDING_EDGES,
    EMBEDDING_OPS,
    GRAPH_OPS,
    HEAD_EDGES,
    HEAD_OPS,
    INPUT_EDGES,
    LAYER_EDGES,
    LAYER_OPS,
    MOE_EDGES,
    UNIT_OF,
    edge_unit,
)
from ..plan import Plan
from ..stack import load_stack
from .kernels import Device, Op
from .layouts import Layouts, spread
from .mesh import BIT, Mesh
from .operators import (
    edge_share,
    forward_passes,
    keeps_shard,
    kernels,
    megatron,
    megatron_codes,
    operators,
    output_bytes,
)
from .sharded import Comm, edge_cost, overlap_fraction

UNIT_OPS = {"layer": tuple(n for n in GRAPH_OPS if UNIT_OF[n] == "layer"), "embedding": EMBEDDING_OPS,
            "head": HEAD_OPS}  # a layer's operators in order, its MoE MLP ("moe") among them
UNIT_EDGES = {
    "layer": LAYER_EDGES + MOE_EDGES + tuple(("residual2", dst, slot) for dst, slot in INPUT_EDGES),
    "embedding": EMBEDDING_EDGES + tuple(("embedding_output", dst, slot) for dst, slot in INPUT_EDGES),
    "head": (("residual2", "final_norm", 0),) + HEAD_EDGES,
}
TP_NAMES = {"layer": "tp activations", "embedding": "tp embedding", "head": "tp lm head"}


def op_kernels(model: ModelConfig, system: System, lay: Layouts) -> dict[str, list[Op]]:
    """The kernels of each operator under Megatron-LM's split for every plan, costed once per distinct
    combination of the fields they read.

    A micro-batch's kernels depend on tp, cp, micro_batch and sequence parallelism, for a MoE model on ep and etp
    (its MoE MLP, the "moe" operator: `cost.moe.moe_kernels` times the MoE layers' share), and (through fp8 weight
    casts) on dp and ZeRO (`Layouts.distinct`).
    """
    narrow = lay.precision in ("fp8", "fp4")  # weight casts: amortised over micro-batches, regathered by ZeRO-3
    experts = ("ep", "etp") if model.moe is not None else ()  # a MoE layer's experts: cost.moe
    first, inverse = lay.distinct(("tp", "cp", "micro_batch", "sequence_parallel") + experts
                                  + (("dp", "zero") if narrow else ()))
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
    `sharded.edge_cost`), costed once per distinct combination of the fields they read (`Layouts.distinct`)."""
    # Megatron's placements move nothing over dp (every operator splits the batch there alike; a tensor's bytes
    # on a device do not depend on dp), so one dp stands for all
    first, inverse = lay.distinct(("tp", "cp", "micro_batch", "sequence_parallel", "recompute"))
    sub = lay.take(first)
    mesh, ops = Mesh.of(system, sub), operators(model)
    f, sp = overlap_fraction(system, load_stack(lay.stack)), sub.sequence_parallel[:, None]
    out = {}
    for unit, edges in UNIT_EDGES.items():
        fwd = bwd = 0.0
        rows = []
        for src, dst, slot in edges:
            (o0, i0), (o1, i1) = (megatron_codes(src, dst, slot, v) for v in (False, True))
            o, i = np.where(sp, o1, o0), np.where(sp, i1, i0)
            passes = forward_passes(edge_unit(src, dst), sub.recompute)
            ec = edge_cost(mesh, o, i, output_bytes(ops[src], sub), passes, keeps_shard(o, i, ops[dst]), f)
            w = edge_share(model, src, dst)  # a MoE model's dense-MLP tensors pass in the layers that have them
            fwd, bwd = fwd + w * ec.fwd, bwd + w * ec.bwd
            rows = rows + [(k, b, msk, sec, calls * w) for k, b, msk, sec, calls in ec.steps]
        n = len(sub)
        calls = sum(r[4] for r in rows) + np.zeros(n)
        total = sum(r[3] * r[4] for r in rows) + np.zeros(n)
        nbytes = sum(r[1] * r[4] for r in rows) + np.zeros(n)
        kinds = sorted({r[0] for r in rows})
        code = sum((np.broadcast_to(sum(np.asarray(r[4]) for r in rows if r[0] == k) > 0, (n,)) << i)
                   for i, k in enumerate(kinds)) + np.zeros(n, np.int64)
        names = {c: " / ".join(k for i, k in enumerate(kinds) if c >> i & 1) or "none" for c in np.unique(code)}
        label = np.array([names[c] for c in code.tolist()], dtype=object)
        per = lambda x: np.divide(x, calls, out=np.zeros_like(calls), where=calls > 0)
        comm = Comm(TP_NAMES[unit], label, "tp", nbytes=per(nbytes), seconds=per(total), calls=calls,
                    fwd=fwd + np.zeros(n), bwd=bwd + np.zeros(n), unit=unit, part="tp_comm", mask=BIT["tp"],
                    active=calls > 0)
        out[unit] = spread(comm, inverse)
    return out
