"""PaSE's vertex order: GENERATESEQ, and the separators that cut an operator graph into a chain of blocks."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from ...cost.pase.graph import Graph


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


def separators(graph: Graph) -> list[int]:
    """Vertices no edge passes over in graph order (no edge (a, b) with a < v < b): they cut the graph into a
    chain of blocks. In an operator graph: the embedding and its output, every residual1 and residual2, and the
    head ops."""
    cross = np.zeros(len(graph.vertices) + 1, int)
    for e in graph.edges:
        a, b = sorted((e.src, e.dst))
        cross[a + 1] += 1
        cross[b] -= 1
    return [int(v) for v in np.flatnonzero(np.cumsum(cross)[:-1] == 0)]


