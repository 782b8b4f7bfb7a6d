"""PaSE's exact dynamic program over an operator graph (Elango 2021, Sec. IV), whole-graph (`Problem`) or block by
block along the graph's separators (`ChainProblem`), and brute force for tests."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...cost.pase.graph import Edge, Graph, Vertex
from ...cost.pase.tables import CostTables
from .order import generate_seq, separators


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


def edge_parts(graph: Graph, tables: CostTables, assignment, lam: float = 0.0, use_alt=None):
    """Per edge: (seconds, bytes, alternative taken) arrays of a strategy, each edge run the way the DP takes it
    at lam, or as `use_alt` (a bool per edge) says where the edge has an alternative."""
    a = np.asarray(assignment)
    n = len(graph.edges)
    t, mem, alt = np.zeros(n), np.zeros(n), np.zeros(n, bool)
    for key, (ix, src, dst) in graph.edges_by_key().items():
        t[ix], mem[ix], alt[ix] = tables.edge_parts(key, lam, tables.src_class[key][a[src]],
                                                    tables.dst_class[key][a[dst]],
                                                    None if use_alt is None else np.asarray(use_alt)[ix])
    return t, mem, alt


def evaluate(graph: Graph, tables: CostTables, assignment, lam: float = 0.0, use_alt=None) -> tuple[float, float]:
    """(seconds per step, bytes per device) of a strategy, one configuration index per vertex; an edge with an
    alternative (`CostTables.alt`) runs the way that is cheaper in time + lam * bytes (at lam = 0: the faster),
    or as `use_alt` says. Bytes include what every strategy holds (`CostTables.constant_memory`)."""
    a = np.asarray(assignment)
    by_kind = graph.by_kind()
    t = sum(float(tables.time[k][a[ix]].sum()) for k, ix in by_kind.items())
    mem = sum(float(tables.memory[k][a[ix]].sum()) for k, ix in by_kind.items())
    et, em, _ = edge_parts(graph, tables, a, lam, use_alt)
    return t + float(et.sum()), mem + float(em.sum()) + tables.constant_memory


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
        unary = {k: self.tables.time[k] + lam * self.tables.memory[k] for k in set(self.kind)}
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
        return float(T) + lam * self.tables.constant_memory, config

    def evaluate(self, assignment: Sequence[int], lam: float = 0.0) -> tuple[float, float]:
        """(seconds per step, bytes per device) of a configuration per vertex (edges run as the DP would at lam)."""
        return evaluate(self.graph, self.tables, assignment, lam)


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
        value = float(V[y]) + lam * self.tables.constant_memory
        config = [0] * len(self.graph.vertices)
        for (s, t, sig), arg in zip(reversed(self.blocks), reversed(args)):
            x = int(arg[y])
            local = [0] * (t - s + 1)
            Problem.traceback(maps[sig][1], {0: x, t - s: y}, local)
            config[s:t + 1] = local
            y = x
        return value, config

    def evaluate(self, assignment: Sequence[int], lam: float = 0.0) -> tuple[float, float]:
        return evaluate(self.graph, self.tables, assignment, lam)


def dp(graph: Graph, tables: CostTables, lam: float = 0.0, order: list[int] | None = None,
       chain: bool = False) -> tuple[float, list[int]]:
    """Exact minimum of time + lam * memory over all strategies by PaSE's DP (over the whole graph in
    GENERATESEQ order, or block by block with `chain`), and its argmin."""
    prob = ChainProblem(graph, tables) if chain else Problem(graph, tables, order)
    return prob.solve(lam)


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
    return best + lam * tables.constant_memory, arg
