"""PaSE's entry point (`solve`): the graph, cost tables and vertex order of one plan's stage, the DP under a
memory budget, and Megatron-LM's assignment for comparison; the method is described in `search.pase`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from ...cost.pase.graph import Edge, Graph, Vertex, operator_graph
from ...cost.comm.mesh import Mesh, redistribution_time
from ...cost.pase.tables import CostTables, class_ids, configurations, cost_tables, restrict_tables
from ...errors import InputError
from ...spec.hardware.system import System, load_hardware
from ...spec.model.config import ModelConfig
from ...spec.model.catalogue import load_model
from ...spec.model.operators import (
    AXES, PARTIAL, SHARD, SPECS, config_of, megatron_split, parse_placement, tensor_codes,
)
from ...spec.plan.layout import Plan, resolve
from .budget import Point, fit_budget
from .program import ChainProblem, DPStats, Problem, brute_force, dp, edge_parts, evaluate
from .order import generate_seq, separators
from .assignment import Diagnostics, PaseResult, VertexResult, result

__all__ = ["solve", "PaseResult", "VertexResult", "Diagnostics", "Graph", "Vertex", "Edge", "CostTables",
           "operator_graph", "cost_tables", "restrict_tables", "configurations", "megatron_assignment",
           "megatron_alternatives", "find_config", "dp", "evaluate", "edge_parts", "brute_force", "generate_seq",
           "separators", "Problem", "ChainProblem", "DPStats", "fit_budget", "Point", "redistribute_time",
           "tied_classes"]


def find_config(tables: CostTables, graph: Graph, kind: str, split: dict[str, Sequence[str]]) -> int:
    """Index of the configuration of `kind` that splits each dim over the named axes (size-1 axes ignored)."""
    mesh = tables.mesh
    want = config_of(SPECS[kind], {d: [a for a in on if int(mesh.size[a]) > 1] for d, on in split.items()})
    hit = np.flatnonzero((tables.configs[kind] == want).all(axis=1))
    if not len(hit):
        full = {a: int(mesh.size[a]) for a in AXES}
        raise InputError(f"{kind}: split {dict(split)} is not a valid configuration on mesh {full}")
    return int(hit[0])


def megatron_assignment(graph: Graph, tables: CostTables, sequence_parallel: bool = True,
                        tp_split: Callable[[str], str | None] | None = None) -> list[int]:
    """Megatron-LM's strategy as a configuration per vertex: dp splits batch, cp the sequence, tp the heads /
    ffn / vocab (Shoeybi et al. 2019) and, with sequence parallelism, the sequence of norms and residuals
    (Korthikanti et al. 2022). `tp_split(kind)` overrides the tp dim per kind (None: replicate)."""
    out = []
    for v in graph.vertices:
        split = megatron_split(v.kind, sequence_parallel)
        if tp_split is not None:
            split = {d: [a for a in on if a != "tp"] for d, on in split.items()}
            if tp_split(v.kind) is not None:
                split.setdefault(tp_split(v.kind), []).append("tp")
        out.append(find_config(tables, graph, v.kind, split))
    return out


def megatron_alternatives(graph: Graph, tables: CostTables) -> np.ndarray:
    """Which edges Megatron-LM runs the second way: every GEMM input it gathers is kept as the shard and gathered
    again in the backward (sequence parallelism). True for every edge whose kind has an alternative; where the
    assignment's classes have none, `CostTables.edge_parts` runs the edge the plain way."""
    return np.array([e.key in tables.alt for e in graph.edges])


def redistribute_time(mesh: Mesh, src: Sequence[str], dst: Sequence[str], full_bytes: float) -> float:
    """`cost.comm.mesh.redistribution_time` for one pair of placements of an activation ([batch, seq, features]) in
    DTensor words, one per axis of (dp, cp, tp); the destination is never Partial()."""
    if len(src) != len(AXES) or len(dst) != len(AXES):
        raise InputError(f"placements {list(src)} -> {list(dst)} need one entry per mesh axis {list(AXES)}")
    try:
        codes = [np.array([[parse_placement(p) for p in side]]) for side in (src, dst)]
    except ValueError as err:
        raise InputError(str(err)) from None
    for side, c in zip((src, dst), codes):
        if (c > SHARD + 2).any():
            raise InputError(f"placement {side[int(np.argmax(c[0]))]!r} shards a dim an activation lacks; valid: "
                             "Shard(0) batch, Shard(1) sequence, Shard(2) features")
    if (codes[1] == PARTIAL).any():
        raise InputError(f"destination {list(dst)} holds Partial(); valid: Replicate() or Shard(i) (a redistribution "
                         "ends in a usable tensor)")
    if isinstance(full_bytes, bool) or not isinstance(full_bytes, (int, float)) or not 0 <= full_bytes < float("inf"):
        raise InputError(f"full_bytes = {full_bytes!r}; valid: a finite number of bytes >= 0")
    return float(redistribution_time(mesh, codes[0], codes[1], full_bytes)[0])


def tied_classes(tables: CostTables) -> list[dict[str, np.ndarray]]:
    """For tied embeddings: per weight placement the embedding and the LM head can share, the configurations of
    each that place the weight so (one restriction of the tables per class, `restrict_tables`)."""
    codes = {k: tensor_codes(SPECS[k], tables.configs[k], SPECS[k].weight, "weight") for k in ("embedding", "lm_head")}
    ids = {k: class_ids(c) for k, c in codes.items()}
    shared = np.intersect1d(ids["embedding"], ids["lm_head"])
    return [{k: np.flatnonzero(ids[k] == c) for k in ids} for c in shared]


def with_incumbent(found: tuple[Point, bool, int], graph: Graph, tables: CostTables, prob, budget: float):
    """`fit_budget`'s answer, improved where that is possible within the budget. The Lagrangian walk reaches only
    strategies on the lower convex hull of (memory, time), and runs every edge with an alternative (keep a
    gathered input, or gather it again) the way that is cheaper at its lambda. So: the same configurations with
    every edge run the faster way, where that still fits; then Megatron-LM's assignment (with or without sequence
    parallelism) as an incumbent, where it fits and is faster (the answer is never slower than Megatron-LM's)."""
    point, met, runs = found
    if met and point.lam > 0:
        t, m = prob.evaluate(point.assignment, 0.0)
        if m <= budget and t < point.time:
            point = Point(0.0, point.assignment, t, m, reported_lam=point.reported_lam)
    for sp in (True, False):
        try:
            a = megatron_assignment(graph, tables, sequence_parallel=sp)
        except InputError:  # not among these tables' configurations (a tied-embedding variant)
            continue
        t, m = prob.evaluate(a, 0.0)
        if m <= budget and (not met or t < point.time):
            point, met = Point(0.0, list(a), t, m, reported_lam=point.reported_lam if met else 0.0), True
    return point, met, runs


def solve(model: ModelConfig | str, system: System | str, plan: Plan, memory_budget: float | None = None,
          tables: CostTables | None = None) -> PaseResult:
    """PaSE's optimal per-operator sharding of `plan`'s stage mesh (dp, cp, tp) within a memory budget.

    `memory_budget`: bytes per device as the estimate counts them; default the accelerator's HBM. The plan is
    resolved (InputError on an impossible mesh). `tables`: the plan's `cost_tables`, if the caller has them.
    """
    start = time.perf_counter()
    model, system = load_model(model), load_hardware(system)  # objects pass through; names and paths load
    plan = Plan(**plan) if isinstance(plan, dict) else plan
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a perfmodel.Plan (or a dict of its fields), got {type(plan).__name__}")
    plan = resolve(plan, model, system)
    budget = system.accelerator.hbm_bytes if memory_budget is None else memory_budget
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget < float("inf"):
        raise InputError(f"memory_budget = {memory_budget!r} bytes; valid: a positive finite number of bytes")
    graph = operator_graph(model.n_layers, model.moe is not None)
    t0 = time.perf_counter()
    tables = cost_tables(graph, model, system, plan) if tables is None else tables
    variants = [restrict_tables(tables, keep) for keep in tied_classes(tables)] if model.tie_embeddings else [tables]
    t1 = time.perf_counter()
    problems = [ChainProblem(graph, t) for t in variants]  # separators, and GENERATESEQ inside each distinct block
    t2 = time.perf_counter()
    found = [(with_incumbent(fit_budget(p, budget), graph, t, p, budget), t, p) for p, t in zip(problems, variants)]
    best = lambda r: (not r[0][1], r[0][0].time if r[0][1] else r[0][0].memory)  # fits, then fastest; or smallest
    (point, met, runs), tables, prob = min(found, key=best)
    runs = sum(r[0][2] for r in found)
    t3 = time.perf_counter()
    timings = {"tables_s": t1 - t0, "order_s": t2 - t1, "dp_s": t3 - t2, "wall_s": t3 - start}
    return result(model, system, graph, tables, prob, point, met, runs, budget, timings)
