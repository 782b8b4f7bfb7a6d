"""Hardware what-if: one job's best plan and step time on several systems, and which single upgrade of one
system (FLOP/s, HBM bandwidth or capacity, scale-up domain size or bandwidth, scale-out bandwidth) buys most.

Every system is searched afresh (`search.ranking.search`): a faster network or more memory changes the best
layout, and comparing hardware at a fixed layout would understate what it buys.
"""

from __future__ import annotations

import math

import pandas as pd
from pydantic import Field, ValidationError

from ..errors import InputError
from ..types import Schema
from ..spec.hardware.system import System, list_systems, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.model.catalogue import load_model
from ..spec.stack.profile import DEFAULT_STACK, check_compile
from ..spec.plan.layout import layout_label
from ..spec.result import Estimate, TimeBreakdown

# TimeBreakdown parts grouped by what bounds them: the roofline's two sides, the network, idle stages.
BOUND = {
    "compute": ("gemm", "attention", "recompute"),
    "memory": ("memory_bound", "optimizer"),
    "network": ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "zero3_comm", "offload_comm"),
    "bubble": ("bubble",),
    "host": ("host", "overhead"),
}


def bound_shares(t: TimeBreakdown) -> dict[str, float]:
    """Share of the step (0..1) that compute-bound kernels, memory-bound kernels, exposed communication, the
    pipeline bubble and the host's own time take; they sum to 1. Recompute counts as compute (its GEMMs dominate)."""
    return {k: sum(getattr(t, p) for p in parts) / t.total for k, parts in BOUND.items()}


class WhatIfRow(Schema):
    """One system (or one upgraded variant) with the best plan the search found for the job."""

    system: str
    accelerator: str
    gpus: int
    layout: str | None = Field(None, description="best plan's layout (spec.plan.layout.layout_label); null: no plan fits")
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    memory_gib: float | None = None
    compute_share: float | None = None
    memory_share: float | None = None
    network_share: float | None = None
    bubble_share: float | None = None
    host_share: float | None = None
    speedup: float | None = Field(None, description="upgrades: baseline step time / this step time")
    note: str = ""


class WhatIf(Schema):
    """Rows in the order asked for; `estimates` holds each row's best plan (where one fits)."""

    model: str
    gpus: int
    global_batch: int
    seq_len: int
    precision: str
    rows: list[WhatIfRow]
    estimates: dict[str, Estimate]

    @property
    def table(self) -> pd.DataFrame:
        return pd.DataFrame([r.model_dump() for r in self.rows])


def _best(model: ModelConfig, system: System, gpus: int, global_batch: int, seq_len: int, precision: str,
          label: str, stack: str = DEFAULT_STACK, compile: str = "none") -> tuple[WhatIfRow, Estimate | None]:
    from .ranking import search

    base = dict(system=label, accelerator=system.accelerator.name, gpus=gpus)
    try:
        result = search(model, system, gpus, global_batch, seq_len, precision=precision, stack=stack, compile=compile)
    except InputError as err:  # more devices than the system has, a precision it lacks, nothing fits
        return WhatIfRow(**base, note=str(err)), None
    e = result.estimate(0)
    shares = bound_shares(e.time_s)
    return WhatIfRow(**base, layout=layout_label(e.plan), step_time_s=e.step_time_s, tokens_per_s=e.tokens_per_s,
                     mfu=e.mfu, memory_gib=e.memory_bytes.reserved / 2**30,
                     **{f"{k}_share": v for k, v in shares.items()}), e


def _check_some_fit(w: WhatIf) -> WhatIf:
    """Refuse a job no system could run (bad job input, not a hardware answer), naming each system's reason."""
    if not w.estimates:
        raise InputError("no system has a plan for this job: " + "; ".join(f"{r.system}: {r.note}" for r in w.rows))
    return w


def _compare(model: ModelConfig, specs: dict[str, System], gpus: int, global_batch: int, seq_len: int,
             precision: str, stack: str = DEFAULT_STACK, compile: str = "none") -> WhatIf:
    """The job's best plan on each system of `specs` (label -> System), in order; refused if none has one."""
    rows, ests = [], {}
    for label, spec in specs.items():
        row, e = _best(model, spec, gpus, global_batch, seq_len, precision, label, stack, compile)
        rows.append(row)
        if e is not None:
            ests[label] = e
    return _check_some_fit(WhatIf(model=model.name, gpus=gpus, global_batch=global_batch, seq_len=seq_len,
                                  precision=precision, rows=rows, estimates=ests))


def check_factor(factor: float) -> float:
    """Refuse an upgrade factor that is not a finite number > 0."""
    if not (math.isfinite(factor) and factor > 0):
        raise InputError(f"--factor {factor:g} must be a finite number > 0 (e.g. 2 for twice the resource)")
    return factor


def across_systems(model: ModelConfig | str, systems: list[str | System] | None, gpus: int, global_batch: int,
                   seq_len: int, precision: str = "bf16", stack: str = DEFAULT_STACK, compile: str = "none") -> WhatIf:
    """The job's best plan on each system (default: the whole catalogue), in the order given, run by `stack`
    (with `compile`: Plan.compile)."""
    model, _ = load_model(model), check_compile(stack, compile)
    specs = {s.name: s for s in (load_hardware(x) for x in (systems or list_systems()))}  # duplicates dropped
    return _compare(model, specs, gpus, global_batch, seq_len, precision, stack, compile)


def upgraded(system: System, upgrade: str, factor: float) -> System:
    """`system` with one resource multiplied by `factor` (a hypothetical part; sources say so).

    flops: every dtype's peak; hbm_bandwidth; hbm_capacity; scale_up_size: the innermost tier's domain size
    (rounded to a whole number of devices; outer tiers' sizes grow to stay multiples); scale_up_bandwidth: the
    innermost tier's bandwidth; scale_out_bandwidth: the outermost tier's bandwidth.
    """
    check_factor(factor)
    d = system.model_dump()
    acc, tiers = d["accelerator"], d["tiers"]
    note = f"hypothetical: {upgrade} x {factor:g} of {system.name}"
    if upgrade == "flops":
        acc["peak_tflops"] = {k: v * factor for k, v in acc["peak_tflops"].items()}
    elif upgrade == "hbm_bandwidth":
        acc["hbm_bandwidth_tbps"] *= factor
    elif upgrade == "hbm_capacity":
        acc["hbm_capacity_gib"] *= factor
    elif upgrade in UPGRADES and upgrade not in upgrades_of(system):
        raise InputError(f"upgrade {upgrade}: {system.name} has one network tier ({tiers[0]['name']}); valid "
                         f"upgrades: {', '.join(upgrades_of(system))}")
    elif upgrade in UPGRADES:
        if upgrade == "scale_up_size":
            size = max(1, round(tiers[0]["domain_size"] * factor))
            tiers[0]["domain_size"] = size
            for t in tiers[1:]:
                if t["domain_size"] is not None:
                    t["domain_size"] = math.ceil(t["domain_size"] / size) * size
        else:
            tiers[0 if upgrade == "scale_up_bandwidth" else -1]["bandwidth_gbps"] *= factor
    else:
        raise InputError(f"upgrade = {upgrade!r} is not known; valid: {', '.join(UPGRADES)}")
    d["name"], d["description"] = f"{system.name} {upgrade} x{factor:g}", note
    d["sources"] = dict(d.get("sources") or {}, whatif=note)
    acc["name"] = f"{acc['name']} ({upgrade} x{factor:g})"
    try:
        return System.model_validate(d)
    except ValidationError as err:  # e.g. a capacity below the system's fixed memory overhead
        reason = err.errors()[0]["msg"].removeprefix("Value error, ")
        raise InputError(f"factor = {factor:g}: {upgrade} x{factor:g} of {system.name} is not a valid system: "
                         f"{reason}") from None


UPGRADES = ("flops", "hbm_bandwidth", "hbm_capacity", "scale_up_size", "scale_up_bandwidth", "scale_out_bandwidth")


def upgrades_of(system: System) -> tuple[str, ...]:
    """The upgrades `system` can take: the scale-up / scale-out ones need a second network tier."""
    return UPGRADES if len(system.tiers) > 1 else tuple(u for u in UPGRADES if not u.startswith("scale"))


def upgrades(model: ModelConfig | str, system: System | str, gpus: int, global_batch: int, seq_len: int,
             precision: str = "bf16", factor: float = 2.0, stack: str = DEFAULT_STACK, compile: str = "none") -> WhatIf:
    """The job on `system` and on each single-resource upgrade of it (`upgraded`), each with its own best plan;
    `speedup` is the baseline's step time over the upgrade's."""
    model, system, _ = load_model(model), load_hardware(system), check_compile(stack, compile)
    specs = {system.name: system} | {f"{u} x{factor:g}": upgraded(system, u, factor)  # all refused before a search
                                     for u in upgrades_of(system)}
    w = _compare(model, specs, gpus, global_batch, seq_len, precision, stack, compile)
    base = w.rows[0].step_time_s
    for r in w.rows:
        r.speedup = base / r.step_time_s if base and r.step_time_s else None
    return w
