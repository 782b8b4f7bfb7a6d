"""Collective and point-to-point communication time on the network tiers a process group spans.

Ring algorithms (NCCL's performance notes, "bus bandwidth"; Thakur et al. 2005): with n members, per-step
latency a and per-device bandwidth B (bytes/s, one direction), for a message of S bytes (the full,
un-sharded tensor):
  all-gather / reduce-scatter:               (n-1) a + (n-1)/n * S / B
  all-to-all (S: what each member sends):     the same on one tier; over several, `all_to_all_time`
  all-reduce (= reduce-scatter + all-gather): 2 (n-1) a + 2 (n-1)/n * S / B
  point-to-point:                             a + S / B
A group that spans several tiers runs hierarchically: the innermost phase over the members that share a
domain moves the whole message, each outer phase moves the shard left after the phases inside it, on its
own tier's bandwidth (a rail-optimised network gives each device its own NIC).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...spec.hardware.system import NetworkTier, System
from ...spec.hardware.network import KIND_FALLBACK


@dataclass(frozen=True)
class Phase:
    """The members of a group that share one tier, and the bandwidth/latency a ring over them sees."""

    tier: str
    members: int
    bandwidth: float  # bytes/s per device, after collective efficiency
    latency: float  # s per ring step
    kinds: tuple = ()  # (kind, bandwidth, latency) for the kinds the tier fits apart (NetworkTier.by_kind)

    def ring(self, kind: str) -> tuple[float, float]:
        """(bandwidth, latency) that collective `kind` sees in this phase."""
        for k, bw, lat in self.kinds:
            if k == kind:
                return bw, lat
        return self.bandwidth, self.latency


def torus_slice_dims(tier: NetworkTier, gpus: int | None) -> list[int]:
    """The slice of `tier`'s torus a job of `gpus` devices runs on, in devices per dimension (innermost first, as
    `torus_dims`): Cloud TPU's slice topologies (Google Cloud TPU docs, TPU v4 / v5p "topologies": 2x2x1, 2x2x2,
    2x2x4, 2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8, ..., and 4x4x12-style multiples; v5e / v6e: 2x2, 2x4, 4x4, 4x8,
    8x8, 8x16, 16x16).

    From one device, the smallest dimension still below the pod's doubles (the last of equals, as the docs write
    them); once every dimension spans `wrap_min_extent` (whole cubes), an odd factor the job still needs goes on
    that dimension whole (192 chips: 4x4x12). The result is the smallest such slice holding the job (96 chips:
    4x4x8). A pod dimension shorter than `wrap_min_extent` (Ironwood's two dies of a chip) is in every slice
    whole. A job of unknown size (None) or of the whole pod or more (multislice) gets the pod.
    """
    pod = list(tier.torus_dims)
    if gpus is None or gpus >= math.prod(pod):
        return pod
    w = tier.wrap_min_extent
    dims = [p if w is not None and p < w else 1 for p in pod]
    while math.prod(dims) < gpus:
        i = min((j for j in range(len(pod)) if dims[j] < pod[j]), key=lambda j: (dims[j], -j))
        need = gpus / math.prod(dims)
        cubes = w is not None and all(d >= min(w, p) for d, p in zip(dims, pod))  # odd sizes: whole cubes only
        odd = cubes and need == int(need) and int(need) % 2 and dims[i] * int(need) <= pod[i]
        dims[i] = dims[i] * int(need) if odd else min(2 * dims[i], pod[i])
    return dims


def torus_slice_wraps(tier: NetworkTier, dims: list[int]) -> list[bool]:
    """Per dimension of slice `dims` (`torus_slice_dims`): whether a wraparound link closes it.

    Google Cloud TPU docs (TPU v4 system architecture; v5p likewise): slices of whole 4x4x4 cubes, joined by
    optical circuit switches, are tori; smaller slices are meshes. v5e / v6e: the wraparound closes a full
    16-chip dimension only, the whole pod. `NetworkTier.wrap_min_extent` holds the extent (4, 16): a slice is a
    torus when each dimension spans at least it or the pod's whole dimension, and then the dimensions of at least
    that extent wrap. Without it only a dimension spanning the pod's whole one wraps (its own wraparound link).
    """
    w = tier.wrap_min_extent
    if w is None:
        return [d == p for d, p in zip(dims, tier.torus_dims)]
    torus = all(d >= w or d == p for d, p in zip(dims, tier.torus_dims))
    return [torus and d >= w for d in dims]


def _torus_ring_links(tier: NetworkTier, stride: int, n: int, gpus: int | None = None) -> int:
    """Links per direction (a count) a ring over n devices `stride` apart can use on a torus tier, in a job of
    `gpus` devices laid out row-major over its slice (`torus_slice_dims`).

    Each slice dimension the group spans adds a ring: over the whole dimension, where a wraparound link closes
    it (`torus_slice_wraps`), both directions carry data (2 links); over part of a dimension, or a whole one of
    a mesh slice, the ring folds back along a line (1 link) (Jouppi et al. 2023, TPU v4, Sec. 2; Google Cloud
    TPU docs, slice topologies).
    """
    dims = torus_slice_dims(tier, gpus)
    links, inner = 0, 1
    for d, wraps in zip(dims, torus_slice_wraps(tier, dims)):
        outer = inner * d
        if d > 1 and stride < outer and stride * n > inner:  # a dimension of one device has no links
            lo, hi = max(stride, inner), min(stride * n, outer)
            links += 2 if wraps and hi // lo >= d else 1
        inner = outer
    return max(links, 1)


def _members_per_domain(domain: int, stride: int, n: int, gpus: int | None, aligned: bool = False) -> int:
    """Members of the worst-placed group that share one domain of `domain` devices.

    A job of no more devices than one domain sits inside it. Otherwise groups tile the devices with their
    stride; a group stays inside a domain only if the domain size is a multiple of its span, otherwise (e.g.
    a 16-wide group in a 72-GPU NVLink domain) some group straddles a boundary and only the aligned part,
    gcd(n, domain/stride), is together. Where the scheduler aligns groups to domains (`aligned`,
    NetworkTier.aligned_groups) a group spanning no more than a domain is inside one.
    """
    if gpus is not None and gpus <= domain:
        return n
    if aligned and stride * n <= domain:
        return n
    if domain % stride:
        return 1
    return math.gcd(n, domain // stride)


def group_phases(system: System, n: int, stride: int, gpus: int | None = None) -> list[Phase]:
    """Split a group of `n` devices, `stride` apart in device order, over the system's tiers, innermost first.

    `gpus` is the job size (None: as many devices as the groups tile). Members sharing a tier-k domain:
    `_members_per_domain`. A torus tier's rings use the links of `_torus_ring_links` (over the job's slice) at its
    per-link bandwidth.
    """
    phases: list[Phase] = []
    covered = 1  # members already grouped by inner tiers
    for tier in system.tiers:
        if covered >= n:
            break
        members_here = n if tier.domain_size is None else _members_per_domain(tier.domain_size, stride, n, gpus,
                                                                                       tier.aligned_groups)
        k = members_here // covered if members_here > covered else 1
        if k > 1:
            links = _torus_ring_links(tier, stride * covered, k, gpus) if tier.topology == "torus" else 1
            phases.append(_phase(tier, k, links))
            covered *= k
    if covered < n:  # the outermost tier is bounded and the group is larger: treat the rest as that tier
        phases.append(_phase(system.tiers[-1], int(np.ceil(n / covered)), 1))
    return phases


def _phase(tier: NetworkTier, members: int, links: int) -> Phase:
    """A ring of `members` on `tier` over `links` links per direction, with the tier's per-kind fits (for a ring of
    that size where the tier measured groups: `NetworkTier.ring`)."""
    rings = {k: tier.ring(k, members) for k in dict.fromkeys([*tier.by_group, *tier.by_kind, *KIND_FALLBACK])}
    kinds = tuple((k, bw * links, lat) for k, (bw, lat) in rings.items())
    return Phase(tier.name, members, tier.bandwidth * tier.collective_efficiency * links, tier.latency, kinds)


def ring_gather_time(size_bytes, n, bandwidth, latency):
    """All-gather / reduce-scatter / all-to-all of an S-byte (full) tensor over a ring of n: (n-1)a + (n-1)/n S/B."""
    n = np.asarray(n, float)
    return (n - 1) * latency + (n - 1) / n * np.asarray(size_bytes, float) / bandwidth


def ring_allreduce_time(size_bytes, n, bandwidth, latency):
    """All-reduce of S bytes over a ring of n: 2(n-1)a + 2(n-1)/n S/B (reduce-scatter then all-gather)."""
    return 2.0 * ring_gather_time(size_bytes, n, bandwidth, latency)


def p2p_time(size_bytes, bandwidth, latency):
    """Point-to-point send of S bytes: a + S/B."""
    return latency + np.asarray(size_bytes, float) / bandwidth


def collective_time(kind: str, size_bytes, phases: list[Phase]):
    """Seconds for collective `kind` on an S-byte tensor over the hierarchical `phases` of a group.

    Phase i moves S / (members of phases inside it); all-reduce is twice the gather form at every level
    (reduce-scatter up the hierarchy, all-gather back down); an all-to-all is `all_to_all_time`. Each phase runs at the bandwidth and latency its
    tier has for `kind` (`Phase.ring`).
    """
    if kind not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        raise ValueError(f"unknown collective {kind}")
    if kind == "all_to_all":
        return all_to_all_time(size_bytes, phases)
    total = np.zeros_like(np.asarray(size_bytes, float))
    inner = 1
    for ph in phases:
        shard = np.asarray(size_bytes, float) / inner
        bw, lat = ph.ring(kind)
        if kind == "all_reduce":
            total = total + ring_allreduce_time(shard, ph.members, bw, lat)
        else:
            total = total + ring_gather_time(shard, ph.members, bw, lat)
        inner *= ph.members
    return total


def all_to_all_time(size_bytes, phases: list[Phase], share=None, kind: str = "all_to_all"):
    """Seconds of an all-to-all in which every member sends S bytes spread evenly over the group (NCCL's
    alltoall: direct sends to every peer, all at once, each over the innermost tier both ends share).

    With phases of m_1, m_2, ... members (innermost first), a member's share for the peers first reached through
    tier k is (m_k - 1) * P_{k-1} / N of S (P_{k-1}: members inside the inner phases, N all of them; `share`
    (P_{k-1}, m_k, N) replaces it, e.g. for a dispatcher that sends a token once per domain). The tiers carry
    their shares concurrently, so the slowest sets the bandwidth term, and each phase costs the latency of its
    ring's m_k - 1 steps, as `collective_time` counts it: sum over k of (m_k - 1) a_k + S * max over k of
    share_k / B_k (affine in S, as `cost.comm.mesh` needs).
    One tier is the ring formula's (n - 1) a + (n - 1)/n S/B. `kind`: whose measured bandwidth each tier lends
    (NCCL's all_to_all, or a MoE dispatcher's kernels: ep_dispatch, ep_combine).
    """
    share = share or (lambda inner, members, n: (members - 1) * inner / n)
    n = math.prod(ph.members for ph in phases)
    latency, per_byte, inner = 0.0, 0.0, 1
    for ph in phases:
        bw, lat = ph.ring(kind)
        latency += (ph.members - 1) * lat
        per_byte = max(per_byte, share(inner, ph.members, n) / bw)
        inner *= ph.members
    return latency + per_byte * np.asarray(size_bytes, float)


def describe(phases: list[Phase]) -> str:
    """e.g. 'nvlink x8 > infiniband x4' (innermost first); 'local' for a group of one."""
    return " > ".join(f"{p.tier} x{p.members}" for p in phases) or "local"


def described_rings(text: str) -> list[tuple[str, int | None]]:
    """`describe`'s text back as (tier, members) per phase; a bare tier name ('infiniband') as (name, None)."""
    parts = [p.rpartition(" x") for p in str(text).split(" > ")]
    return [(t, int(m)) if t and m.isdigit() else (t + x + m, None) for t, x, m in parts]


def p2p_tier(system: System, stride: int, stages: int) -> NetworkTier:
    """The tier that carries the slowest send between adjacent pipeline stages `stride` devices apart.

    The pipeline spans stride * stages devices (the whole job, from device 0). All stages share a domain
    only if that span fits in it; otherwise some boundary crosses to the next tier, and the pipeline runs at
    that boundary's pace.
    """
    span = stride * stages
    for tier in system.tiers:
        if tier.domain_size is None or span <= tier.domain_size:
            return tier
    return system.tiers[-1]


def _by_group(n, stride, *arrays):
    """Distinct (n, stride) pairs of equal-length arrays, and the index of each element's pair."""
    n, stride = np.broadcast_arrays(np.asarray(n, np.int64), np.asarray(stride, np.int64), *arrays)[:2]
    codes, inverse = np.unique(n.ravel() * 2**31 + stride.ravel(), return_inverse=True)
    return np.stack([codes // 2**31, codes % 2**31], axis=1), inverse.ravel(), n.shape


def group_p2p_link(system: System, stride, stages):
    """Per element: (bytes/s after collective efficiency, latency s, tier name) of `p2p_tier(stride, stages)`."""
    keys, inverse, shape = _by_group(stages, stride)
    bw, lat, name = np.zeros(len(inverse)), np.zeros(len(inverse)), np.empty(len(inverse), dtype=object)
    for i, (p, s) in enumerate(keys):
        tier = p2p_tier(system, int(s), int(p))
        sel = inverse == i
        (bw[sel], lat[sel]), name[sel] = tier.ring("p2p"), tier.name
    return bw.reshape(shape), lat.reshape(shape), name.reshape(shape)


def group_collective(system: System, kind: str, size_bytes, n, stride, gpus: int, latency_share=1.0, time=None):
    """Per element: seconds of collective `kind` (`collective_time`, or `time`(bytes, phases)) on `size_bytes`
    over a group of `n` devices `stride` apart in a job of `gpus` (groups outside the stage mesh's axes: the
    expert-parallel and expert-data-parallel groups of MoE parallel folding, `cost.compute.moe`); `latency_share` as
    `cost.comm.mesh.Mesh.collective`'s."""
    time = time or (lambda nbytes, phases: collective_time(kind, nbytes, phases))
    keys, inverse, shape = _by_group(n, stride, np.asarray(size_bytes, float))
    lat, per = np.zeros(len(keys)), np.zeros(len(keys))
    for i, (m, s) in enumerate(keys):
        ph = group_phases(system, int(m), int(s), gpus)
        lat[i] = float(time(0.0, ph))
        per[i] = (float(time(2.0**40, ph)) - lat[i]) / 2.0**40
    out = (latency_share * lat[inverse].reshape(shape)
           + per[inverse].reshape(shape) * np.broadcast_to(np.asarray(size_bytes, float), shape))
    return out
