"""The operator graph of a training step: one vertex per operator (every layer's own), one edge per tensor passed
between two (`perfmodel.spec.model.operators` names them and their edges). PaSE (`search.pase`) assigns each vertex a
configuration; `cost.pase.tables` prices vertices and edges under every configuration."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...spec.model.operators import (
    EMBEDDING_EDGES, EMBEDDING_OPS, HEAD_EDGES, HEAD_OPS, INPUT_EDGES, LAYER_EDGES, LAYER_OPS, MOE_EDGES, SPECS,
    OpSpec,
)


@dataclass(frozen=True)
class Vertex:
    name: str
    kind: str  # the operator (perfmodel.spec.model.operators.OPS), or any label for a graph built by hand
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
    """Vertices, edges, and the operator specs of the kinds (empty for graphs built by hand with their own costs)."""

    vertices: list[Vertex]
    edges: list[Edge]
    kinds: dict[str, OpSpec] = field(default_factory=dict)
    _by_key: dict | None = field(default=None, repr=False)
    _by_kind: dict | None = field(default=None, repr=False)

    def edges_by_key(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Edge key -> (edge indices, producers, consumers): what vectorised evaluation gathers at once."""
        if self._by_key is None:
            groups: dict[str, list[int]] = {}
            for i, e in enumerate(self.edges):
                groups.setdefault(e.key, []).append(i)
            self._by_key = {k: (np.array(ix), np.array([self.edges[i].src for i in ix]),
                                np.array([self.edges[i].dst for i in ix])) for k, ix in groups.items()}
        return self._by_key

    def by_kind(self) -> dict[str, np.ndarray]:
        """Vertex kind -> indices of its vertices."""
        if self._by_kind is None:
            out: dict[str, list[int]] = {}
            for i, v in enumerate(self.vertices):
                out.setdefault(v.kind, []).append(i)
            self._by_kind = {k: np.array(ix) for k, ix in out.items()}
        return self._by_kind

    def neighbours(self) -> list[set[int]]:
        nb: list[set[int]] = [set() for _ in self.vertices]
        for e in self.edges:
            nb[e.src].add(e.dst)
            nb[e.dst].add(e.src)
        return nb


def edge_key(src: str, dst: str, slot: int) -> str:
    return f"{src}->{dst}:{slot}"


def operator_graph(n_layers: int, moe: bool = False) -> Graph:
    """Embedding and its output, n_layers x (norm1 ... residual2), final norm, LM head, loss, with the residual
    edges; with `moe`, each layer's MoE MLP ("moe", from norm2 to residual2) beside the dense MLP's chain (the
    model's mean layer: `cost.compute.operator_table.layer_share` weighs each)."""
    vertices: list[Vertex] = []
    edges: list[Edge] = []

    def add(kind: str, layer: int | None = None) -> int:
        vertices.append(Vertex(kind if layer is None else f"{kind}.{layer}", kind, layer))
        return len(vertices) - 1

    def link(src: int, dst: int, slot: int = 0):
        edges.append(Edge(src, dst, slot, edge_key(vertices[src].kind, vertices[dst].kind, slot)))

    ids = {k: add(k) for k in EMBEDDING_OPS}
    for a, b, slot in EMBEDDING_EDGES:
        link(ids[a], ids[b], slot)
    x = ids["embedding_output"]
    for layer in range(n_layers):
        ids = {k: add(k, layer) for k in LAYER_OPS + (("moe",) if moe else ())}
        for dst, slot in INPUT_EDGES:
            link(x, ids[dst], slot)
        for a, b, slot in LAYER_EDGES + (MOE_EDGES if moe else ()):
            link(ids[a], ids[b], slot)
        x = ids["residual2"]
    ids = {k: add(k) for k in HEAD_OPS}
    link(x, ids["final_norm"])
    for a, b, slot in HEAD_EDGES:
        link(ids[a], ids[b], slot)
    return Graph(vertices, edges, {k: SPECS[k] for k in SPECS})
