"""The network tiers of a system (NVLink domain, scale-out NICs, TPU ICI) as a hardware spec describes them:
bandwidth, latency, collective efficiency, and the per-collective fits measurements give (calibration, or the
measured NCCL tables of hardware_specs/kernels/). `perfmodel.spec.hardware.system.System` holds a list of them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from ...types import Count, Flag, PositiveReal, Real, Schema

# A datasheet number (TFLOP/s, GiB, TB/s, GB/s, W, microseconds, $/hour): positive, and at most 1e9 in its unit,
# far beyond any part, so that it stays finite in SI units (x 1e12, x 2**30) and in what the estimate derives.
DATASHEET_MAX = 1e9
Datasheet = Annotated[PositiveReal, Field(le=DATASHEET_MAX)]
Latency = Annotated[Real, Field(ge=0, le=DATASHEET_MAX)]

CollectiveKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p", "ep_dispatch", "ep_combine"]
# The MoE dispatchers' own kernels (DeepEP / HybridEP: Megatron-Core's flex dispatcher, cost.compute.moe.flex_dispatch_time)
# where a tier measures them apart; a tier that does not prices them as its NCCL all-to-all.
KIND_FALLBACK = {"ep_dispatch": "all_to_all", "ep_combine": "all_to_all"}


class KindFit(Schema):
    """One collective kind's own ring parameters on a tier, where its implementation differs from the others
    (gloo's all-gather and reduce-scatter are not rings; NCCL picks per-collective algorithms)."""

    collective_efficiency: Real = Field(gt=0, le=1, description="achieved bus bandwidth / bandwidth_gbps for this kind")
    latency_us: Latency = Field(description="per-step latency of this kind, microseconds")


class NetworkTier(Schema):
    """One level of the interconnect, innermost first (e.g. NVLink domain, then scale-out NICs).

    `domain_size` devices share this tier and every tier inside it; the outermost tier may leave it null
    (unbounded). Bandwidth is per device, one direction, as collectives see it (NCCL's 'bus bandwidth' is
    `bandwidth_gbps * collective_efficiency`).
    """

    name: str = Field(description="tier name shown in reports (e.g. nvlink, infiniband, ici)")
    domain_size: Count | None = Field(None, description="devices in one domain of this tier; null = all")
    topology: Literal["switch", "torus"] = Field(
        "switch", description="switch: every device of a domain reaches every other at bandwidth_gbps; "
                              "torus: rings use the torus links (cost.comm.collectives._torus_ring_links)")
    torus_dims: list[Count] | None = Field(None, description="torus shape in chips (torus tiers only)")
    wrap_min_extent: Count | None = Field(
        None, description="torus tiers: a job's slice (cost.comm.collectives.torus_slice_dims) is a torus, its dimensions closed "
                          "by wraparound links, only when each of its dimensions spans at least this many devices "
                          "or the pod's whole dimension; smaller slices are meshes (Cloud TPU: 4 on v4/v5p, whole "
                          "4x4x4 cubes; 16 on v5e/v6e, the full pod); null: a slice dimension wraps only where it "
                          "spans the pod's whole dimension")
    aligned_groups: Flag = Field(
        False, description="the scheduler places jobs so that a process group spanning no more than one domain "
                           "stays inside one (Slurm's topology/block plugin with --segment, made for NVL72 "
                           "racks); false: a group may straddle a domain boundary (cost.comm.collectives)")
    bandwidth_gbps: Datasheet = Field(
        description="switch: per-device injection bandwidth; torus: per link, GB/s one direction"
    )
    latency_us: Latency = Field(description="per-step latency of a ring collective on this tier, microseconds")
    collective_efficiency: Real = Field(gt=0, le=1, description="achieved bus bandwidth / bandwidth_gbps")
    by_kind: dict[CollectiveKind, KindFit] = Field(
        default_factory=dict,
        description="per collective kind: efficiency and latency that replace the tier's own for that kind "
                    "(measured by perfmodel calibrate); kinds not listed use collective_efficiency and latency_us")
    by_group: dict[CollectiveKind, dict[str, KindFit]] = Field(
        default_factory=dict,
        description="per collective kind and group size (a quoted integer, \"8\"): efficiency and latency measured "
                    "for groups of that many devices on this tier (NCCL tables, hardware_specs/kernels/nccl_fits.csv, "
                    "or a calibration's own timings); "
                    "a group uses the fit of the largest measured size not above its own (the smallest below them "
                    "all), before by_kind and the tier's own")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")

    @field_validator("by_group")
    @classmethod
    def _group_sizes(cls, by_group):
        for kind, groups in by_group.items():
            for n in groups:
                if not (n.isdigit() and int(n) > 0):
                    raise ValueError(f"by_group.{kind} key {n!r} is not a group size; valid: a positive integer in "
                                     f"quotes, e.g. \"8\"")
        return by_group

    @model_validator(mode="after")
    def _torus(self):
        if self.topology != "torus" and self.torus_dims is not None:
            raise ValueError(f"tier '{self.name}': torus_dims {self.torus_dims} given for topology {self.topology}; "
                             "valid: omit torus_dims, or set topology: torus")
        if self.topology == "torus":
            if not self.torus_dims:
                raise ValueError(f"tier '{self.name}': topology torus needs torus_dims, e.g. [16, 16]")
            prod = 1
            for d in self.torus_dims:
                prod *= d
            if self.domain_size is not None and self.domain_size != prod:
                raise ValueError(f"tier '{self.name}': domain_size {self.domain_size} != product of torus_dims {prod}")
        elif self.wrap_min_extent is not None:
            raise ValueError(f"tier '{self.name}': wrap_min_extent {self.wrap_min_extent} given for topology "
                             f"{self.topology}; valid: omit wrap_min_extent, or set topology: torus")
        return self

    @property
    def bandwidth(self) -> float:
        return self.bandwidth_gbps * 1e9

    @property
    def latency(self) -> float:
        return self.latency_us * 1e-6

    def fit(self, kind: str, members: int | None = None) -> tuple[KindFit | None, str]:
        """The fit collective `kind` uses on this tier in a ring of `members` devices (None: any size), and where it
        comes from: `by_group`'s for the largest measured size not above `members` (the smallest below them all):
        'measured'; else `by_kind`'s: 'calibrated'; else (None, 'datasheet'): the tier's own values."""
        groups = {int(n): fit for n, fit in self.by_group.get(kind, {}).items()}
        if groups and members is not None:
            below = [n for n in groups if n <= members]
            return groups[max(below) if below else min(groups)], "measured"
        if kind in self.by_kind:
            return self.by_kind[kind], "calibrated"
        if kind in KIND_FALLBACK:
            return self.fit(KIND_FALLBACK[kind], members)
        return None, "datasheet"

    def ring(self, kind: str, members: int | None = None) -> tuple[float, float]:
        """(bus bandwidth bytes/s, per-step latency s) that collective `kind` sees on this tier, in a ring of
        `members` devices (None: any size), from `fit`."""
        fit, _ = self.fit(kind, members)
        if fit is None:
            return self.bandwidth * self.collective_efficiency, self.latency
        return self.bandwidth * fit.collective_efficiency, fit.latency_us * 1e-6
