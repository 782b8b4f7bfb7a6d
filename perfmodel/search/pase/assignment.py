"""What a PaSE search returns: the configuration of every operator in plan-file words, its cost, and how the search
went."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ...cost.pase.graph import Graph
from ...cost.pase.tables import CostTables
from ...types import Schema
from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ...spec.model.operators import GRAPH_OPS, OPS, SPECS, UNIT_OF, ParallelStyle, describe
from ...spec.plan.file import OpPlacement
from .budget import Point
from .program import ChainProblem, Problem, edge_parts


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
    memory_bytes: float = Field(description="bytes per device on the stage the estimate finds most loaded (states "
                                            "and kept activations)")
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
    time_s: float = Field(description="seconds per step: sum of vertex and edge costs over the whole graph (every "
                                      "stage's operators)")
    memory_bytes: float = Field(description="bytes per device on the stage the estimate finds most loaded, as the "
                                            "estimate counts them (overhead and ZeRO's transient copies included)")
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
        rank = {op: i for i, op in enumerate(GRAPH_OPS)}
        head = lambda r: UNIT_OF[r.op] == "head"
        out.sort(key=lambda x: (head(x[0]), x[1][0] if x[1] else -1, rank[x[0].op]))
        return [tuple(x) for x in out]

    def placements(self) -> list[OpPlacement]:
        """Per-operator placements (spec.plan.file.OpPlacement), layers with identical choices collapsed; the
        embedding's output is where the executor redistributes the embedding's output to what norm1 reads."""
        return [OpPlacement(op=r.op, layers=layers, split=r.split, input=r.input, output=r.output, weight=r.weight,
                            style=r.style) for r, layers, _ in self._runs() if r.op in OPS]

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


def result(model: ModelConfig, system: System, graph: Graph, tables: CostTables, prob: Problem | ChainProblem,
           point: Point, met: bool, runs: int, budget: float, timings: dict[str, float]) -> PaseResult:
    """The PaseResult of a strategy (`point`) the search found."""
    a = point.assignment
    edge_t, edge_m, alt = edge_parts(graph, tables, a, point.lam)
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
            p = describe(SPECS[vert.kind], tables.configs[vert.kind][a[v]])
            described[key] = {"split": p.split, "input": p.input, "output": p.output, "weight": p.weight,
                              "style": p.style}
        verts.append(VertexResult(name=vert.name, op=vert.kind, layer=vert.layer, config=a[v],
                                  time_s=float(tables.time[vert.kind][a[v]]), edge_s=float(edge_in[v]),
                                  memory_bytes=float(tables.memory[vert.kind][a[v]] + saved[v]),
                                  keeps_input_sharded=bool(regather[v]), **described[key]))
    diag = Diagnostics(vertices=len(graph.vertices), edges=len(graph.edges),
                       max_dependent_set=prob.stats.max_dependent_set,
                       max_table_entries=prob.stats.max_table_entries,
                       candidates={k: tables.size(k) for k in GRAPH_OPS if k in tables.time},
                       max_candidates=max(tables.size(k) for k in tables.time), dp_runs=runs, **timings)
    mesh = {a: int(tables.mesh.size[a]) for a in ("dp", "cp", "tp")}
    return PaseResult(model=model.name, hardware=system.name, mesh=mesh, time_s=point.time,
                      memory_bytes=point.memory, memory_budget_bytes=budget, lam=point.reported_lam if met else None,
                      budget_met=met, vertices=verts, diagnostics=diag)
