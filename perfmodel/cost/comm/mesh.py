"""The stage mesh (dp, cp, tp) and what moving tensors over it costs: collectives over groups of its axes, and the
redistribution of a tensor from one placement to another.

One `Mesh` serves one plan (PaSE: every configuration of an operator on that plan's mesh) and many plans at once
(a search: axis sizes are arrays, one entry per plan); `estimate` and PaSE price every collective between and
inside operators through it, so a tensor moved in one is priced the same in the other.
"""

from __future__ import annotations

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.operators import AXES, PARTIAL, SHARD
from .collectives import Phase, collective_time, group_phases

BIT = {a: 1 << i for i, a in enumerate(AXES)}  # a group of axes is a bitmask: bit i is AXES[i]
_B = 1 << 17  # key packing: axis sizes below 131072


def axis_runs(mask: int, sizes: dict[str, int]) -> list[tuple[int, int]]:
    """The (members, stride) rings of the axes in `mask`, innermost first, in Megatron-LM device order (tp
    stride 1, cp stride tp, dp stride tp*cp). Axes adjacent in device order (nothing of size > 1 between them)
    form one ring of their product: dp and cp together are dp*cp devices tp apart (ZeRO's group)."""
    runs: list[tuple[int, int]] = []
    stride = 1
    for axis in reversed(AXES):
        n = int(sizes[axis])
        if mask & BIT[axis] and n > 1:
            if runs and runs[-1][0] * runs[-1][1] == stride:
                runs[-1] = (runs[-1][0] * n, runs[-1][1])
            else:
                runs.append((n, stride))
        stride *= n
    return runs


class Mesh:
    """The stage mesh of one plan (scalar axis sizes) or of many (arrays of equal length), on `system`, in a job of
    `gpus` devices. Groups that span several rings run hierarchically (`comm.collective_time` over the phases of
    each ring, innermost first). Only weights and gradients move over dp, within a ZeRO group: under hybrid
    sharding (`replicate` > 1, Plan.dp_replicate) the inner dp / replicate of it (cost.comm.sharded.replicate_sync)."""

    def __init__(self, system: System, gpus: int, dp, cp, tp, replicate=1):
        self.system, self.gpus = system, gpus
        self.size = {"dp": np.asarray(dp, np.int64), "cp": np.asarray(cp, np.int64), "tp": np.asarray(tp, np.int64)}
        self.group_dp = self.size["dp"] // np.asarray(replicate, np.int64)  # the dp ranks of a ZeRO group
        self._rates: dict[tuple, tuple[float, float]] = {}  # (rings or packed key, kind) -> latency, s/byte
        self._keys: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}  # (mask, kind): latency, s/byte
        self._sizes: tuple | None = None
        self._float_sizes: np.ndarray | None = None

    @classmethod
    def of(cls, system: System, lay) -> Mesh:
        """The stage meshes of the plans of a `Layouts`, their distinct (tp, cp, dp) known from it."""
        mesh = cls(system, lay.gpus, lay.dp, lay.cp, lay.tp, lay.dp_replicate)
        first, inverse = lay.distinct(("tp", "cp", "dp", "dp_replicate"))
        mesh._sizes = ((lay.tp[first], lay.cp[first], lay.dp[first] // lay.dp_replicate[first]), inverse)
        return mesh

    def sizes(self) -> np.ndarray:
        """Axis sizes, AXES order in the last dimension: (3,) for one plan, (plans, 3) for many."""
        if self._float_sizes is None:
            self._float_sizes = np.stack(np.broadcast_arrays(*(self.size[a] for a in AXES)), axis=-1).astype(float)
        return self._float_sizes

    def product(self, sel: np.ndarray) -> np.ndarray:
        """Product of the sizes of the axes selected by the boolean sel[..., axis]."""
        return np.prod(np.where(sel, self.sizes(), 1.0), axis=-1)

    def group_size(self, mask) -> np.ndarray:
        """Devices in the group of the axes in `mask`."""
        return self.product((np.asarray(mask)[..., None] >> np.arange(len(AXES))) & 1 > 0)

    def phases(self, mask: int, i: int = 0) -> list[Phase]:
        """Tier phases of plan i's group of the axes in `mask` (innermost first)."""
        size = dict(self.size, dp=self.group_dp)
        sizes = {a: int(np.ravel(size[a])[i] if size[a].ndim else size[a]) for a in AXES}
        return [ph for n, s in axis_runs(mask, sizes) for ph in group_phases(self.system, n, s, self.gpus)]

    def _key(self, mask, tp, cp, dp) -> np.ndarray:
        """The mask and the sizes its group depends on (its axes' and the strides below them), packed."""
        mask = np.asarray(mask, np.int64)
        cp, dp = np.where(mask & (BIT["dp"] | BIT["cp"]), cp, 0), np.where(mask & BIT["dp"], dp, 0)
        return mask + 8 * (tp + _B * (cp + _B * dp))

    def _rate(self, key: int, kind: str) -> tuple[float, float]:
        """(latency seconds, seconds per byte) of collective `kind` over the group packed in `key`: collective_time
        is affine in the size for a fixed hierarchy (computed once per distinct set of rings)."""
        if (key, kind) in self._rates:
            return self._rates[(key, kind)]
        dp, rest = divmod(key // 8, _B * _B)
        cp, tp = divmod(rest, _B)
        runs = tuple(axis_runs(key % 8, {"dp": max(dp, 1), "cp": max(cp, 1), "tp": tp}))
        if (runs, kind) not in self._rates:
            ph = [p for n, s in runs for p in group_phases(self.system, n, s, self.gpus)]
            at0 = float(collective_time(kind, 0.0, ph))
            big = 2.0**40  # the slope from a large size: from 1 byte it would cancel against the latency
            self._rates[(runs, kind)] = (at0, (float(collective_time(kind, big, ph)) - at0) / big)
        self._rates[(key, kind)] = self._rates[(runs, kind)]
        return self._rates[(key, kind)]

    def collective(self, kind: str, nbytes, mask, latency_share=1.0) -> np.ndarray:
        """Seconds of collective `kind` on `nbytes` (the full tensor over the group, `comm.collective_time`'s
        convention) over each element's group of axes (bitmask; 0: no group, 0 s). `latency_share`: the part of
        the call's latency this tensor pays when it travels in one call with others (a bucket)."""
        mask = np.asarray(mask, np.int64)
        size_shape = np.broadcast_shapes(*(s.shape for s in self.size.values()))
        key_shape = np.broadcast_shapes(mask.shape, size_shape)
        shape = np.broadcast_shapes(np.shape(nbytes), np.shape(latency_share), key_shape)
        if not mask.any():
            return np.zeros(shape)
        if mask.ndim == 0 and size_shape:  # the plans of a search: their distinct meshes, once per group of axes
            if (mask.item(), kind) not in self._keys:
                sizes, inv = self._distinct_sizes()
                keys, k_inv = np.unique(self._key(mask, *sizes), return_inverse=True)
                rates = np.array([self._rate(int(k), kind) for k in keys]).reshape(-1, 2)
                at = k_inv.ravel()[inv]
                self._keys[(mask.item(), kind)] = (rates[at, 0].reshape(key_shape), rates[at, 1].reshape(key_shape))
            lat, per_byte = self._keys[(mask.item(), kind)]
        else:
            key = np.broadcast_to(self._key(mask, self.size["tp"], self.size["cp"], self.group_dp), key_shape)
            keys, inverse = np.unique(key.ravel(), return_inverse=True)
            rates = np.array([self._rate(int(k), kind) for k in keys]).reshape(-1, 2)
            lat, per_byte = (rates[inverse.ravel(), j].reshape(key_shape) for j in (0, 1))
        return np.broadcast_to(latency_share * lat + per_byte * np.asarray(nbytes, float), shape).copy()

    def _distinct_sizes(self) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """The distinct (tp, cp, dp of a ZeRO group) of the plans, and each plan's."""
        if self._sizes is None:
            tp, cp, dp = np.broadcast_arrays(self.size["tp"], self.size["cp"], self.group_dp)
            packed = tp.ravel() + _B * (cp.ravel() + _B * dp.ravel())
            uniq, inv = np.unique(packed, return_inverse=True)
            dp_u, rest = divmod(uniq, _B * _B)
            cp_u, tp_u = divmod(rest, _B)
            self._sizes = ((tp_u, cp_u, dp_u), inv.ravel())
        return self._sizes


def bits(sel: np.ndarray) -> np.ndarray:
    """Bitmask of the axes selected by sel[..., axis]."""
    return (np.asarray(sel).astype(np.int64) << np.arange(sel.shape[-1])).sum(axis=-1)


def gathered_axes(out: np.ndarray, inp: np.ndarray) -> np.ndarray:
    """Axes on which a consumer gathers a producer's shard (Shard -> Replicate, no Partial): where it could keep
    the shard instead (`edge_cost`'s keep_shard)."""
    return (out >= SHARD) & (inp <= PARTIAL) & ~(out == PARTIAL).any(axis=-1, keepdims=True)


# ---------------------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------------------


def redistribution_steps(mesh: Mesh, src: np.ndarray, dst: np.ndarray, full_bytes) -> list[tuple[str, object, object]]:
    """The collectives that turn a tensor of `full_bytes` (un-sharded) from placement codes `src` into `dst`
    ((N, axes) arrays, `spec.model.operators.tensor_codes`; `dst` is never Partial): (kind, bytes per call, group mask).

    In order: local slices (Replicate->Shard, free), one reduce-scatter over the Partial->Shard axes, an
    all-to-all per Shard(i)->Shard(j) axis, one all-reduce over the Partial->Replicate axes, one all-gather over
    the Shard->Replicate axes. Each moves the tensor as sharded over the other axes as it is at that point: an
    axis counts as sharded if it is Shard before or after (shrinking steps first, growing steps last). The
    all-to-all moves (n-1)/n of each rank's local bytes (NCCL's all-to-all bus bandwidth convention).
    """
    one = np.ndim(src) == 1 and np.ndim(dst) == 1  # one placement for every plan: scalar groups
    src, dst = np.atleast_2d(src), np.atleast_2d(dst)
    s_shard, d_shard = src >= SHARD, dst >= SHARD
    partial = src == PARTIAL
    sharded = s_shard | d_shard
    rs, ar = partial & d_shard, partial & ~d_shard
    ag = s_shard & ~d_shard
    a2a = s_shard & d_shard & (src != dst)
    full = np.asarray(full_bytes, float)
    # (kind, the axes it is sharded over as it moves, group): the bytes only for the steps that run
    steps = [("reduce_scatter", sharded & ~rs, bits(rs))]
    steps += [("all_to_all", sharded, np.where(a2a[:, a], 1 << a, 0)) for a in range(src.shape[1])]
    steps += [("all_reduce", sharded, bits(ar)), ("all_gather", d_shard, bits(ag))]
    if one:
        steps = [(kind, over, int(mask[0])) for kind, over, mask in steps]
    return [(kind, full / mesh.product(over), mask) for kind, over, mask in steps if np.any(mask)]


def redistribution_time(mesh: Mesh, src: np.ndarray, dst: np.ndarray, full_bytes) -> np.ndarray:
    """Seconds of `redistribution_steps` (one entry per row of src / dst)."""
    n = max(len(np.atleast_2d(src)), len(np.atleast_2d(dst)))
    t = np.zeros(np.broadcast_shapes((n,), np.shape(mesh.sizes())[:-1], np.shape(full_bytes)))
    for kind, nbytes, mask in redistribution_steps(mesh, src, dst, full_bytes):
        t = t + mesh.collective(kind, nbytes, mask)
    return t
