"""Plan files: what `perfmodel search --output` and `perfmodel predict --save-plan` write, and what the executor
and `perfmodel export` read.

A plan file is self-contained: the model config, the full hardware spec, the resolved layout, the per-operator
placements (DTensor vocabulary, one entry per mesh axis in `MESH_AXES` order after pp), the prediction it was
written with, and a schema version. Loading re-checks every field against the others, so a hand-edited file
that no longer agrees with itself is refused with one line instead of being run.

This module imports no part of the cost model (the executor reads plan files without it).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field

from ...errors import InputError
from ...types import Count, Count0, Real, Schema
from ...files import read_json_object
from ..hardware.system import System
from ..hardware.kernel_tables import spec_folder, write_with_tables
from ..model.config import ModelConfig
from .layout import Plan, resolve, split_of
from ..model.operators import AXES, DATA_AXES, DIMS, LAYER_OPS, OPS, SPECS, ParallelStyle, megatron_placement
from ..result import Prediction

VERSION = 1
MESH_AXES = ("pp", *AXES)  # outermost first; the device order of Plan (tp innermost)
PLACEMENT_AXES = AXES  # the per-stage mesh every placement lists, in this order
_PLACEMENT = re.compile(r"^(Replicate\(\)|Partial\(\)|Shard\((\d)\))$")
# The operators, their dims and the data axes' rules live with the operator facts (perfmodel.spec.model.operators).


class OpPlacement(Schema):
    """How one operator (or one operator in a range of layers) is split over the stage mesh (dp, cp, tp).

    Activations are [batch, seq, features] (Shard(0) batch, Shard(1) sequence, Shard(2) features or heads);
    weights are in torch layout ([out, in] for nn.Linear, [vocab, hidden] for nn.Embedding), so colwise is
    Shard(0) and rowwise Shard(1). Partial() marks an output that still needs a sum over that axis.
    """

    op: str = Field(description="operator name: " + ", ".join(OPS))
    layers: tuple[Count0, Count0] | None = Field(None, description="first and last layer (inclusive) for per-layer ops")
    split: dict[str, list[str]] = Field(
        description="iteration-space dimension -> mesh axes that split it, e.g. {'batch': ['dp'], 'heads': ['tp']}")
    input: list[str] = Field(description="placement of the input activation, one per axis of dp, cp, tp")
    output: list[str] = Field(description="placement of the output activation, one per axis of dp, cp, tp")
    weight: list[str] | None = Field(None, description="placement of the weight (None for ops without one)")
    style: ParallelStyle | None = Field(None, description="the torch ParallelStyle this matches, if any")


def unrunnable_split(pl: OpPlacement) -> str | None:
    """Why the executor cannot run this placement's split (None if it can)."""
    for dim, axes in pl.split.items():
        for axis, only in DATA_AXES.items():
            if axis in axes and dim != only:
                return f"splits {dim} over {axis}; valid: only {only} over {axis}"
    if pl.op == "attention" and "tp" in pl.split.get("seq", []):
        return "splits seq over tp; valid: batch or heads over tp (attention's sequence is split by cp)"
    return None


class PlacementCost(Schema):
    """PaSE's cost of the file's placements and of Megatron-LM's on the same mesh (the layout-level prediction
    assumes Megatron's): seconds per step summed over the operator graph, bytes per device of the stage the
    estimate finds most loaded, as the estimate counts them (Megatron's are the estimate's memory of the plan)."""

    time_s: Real = Field(description="PaSE seconds per step of the file's placements")
    memory_bytes: Real = Field(description="PaSE bytes per device (the most loaded stage) of the file's placements")
    megatron_time_s: Real = Field(description="PaSE seconds per step of Megatron-LM's placements")
    megatron_memory_bytes: Real = Field(description="PaSE bytes per device of Megatron-LM's placements (the budget "
                                                     "the file's placements were searched within)")


class PlanFile(Schema):
    """A runnable plan: model, hardware, layout, per-operator placements and the prediction."""

    version: Count = Field(description="schema version; this perfmodel reads version 1")
    model: ModelConfig = Field(description="the full model config (ModelConfig)")
    hardware: System = Field(description="the full hardware spec (System, docs/hardware.md)")
    plan: Plan = Field(description="the resolved layout (Plan): dp and schedule filled in")
    mesh: dict[str, Count] = Field(description="named device mesh sizes, outermost first: pp, dp, cp, tp")
    stage_layers: list[Count] = Field(description="layers on each pipeline stage, first to last")
    placements: list[OpPlacement] = Field(description="per-operator DTensor placements on (dp, cp, tp); empty: "
                                                      "Megatron-LM's (spec.plan.file.megatron_placements)")
    prediction: Prediction = Field(description="what `estimate` predicted when the file was written; `predict --plan` "
                                               "and `export` refuse a file whose prediction this perfmodel does not "
                                               "reproduce")
    placement_cost: PlacementCost | None = Field(None, description="PaSE's seconds and bytes for `placements` "
                                                                   "and for Megatron's placements")
    created_by: str = Field("", description="command or API call that wrote the file")


def mesh_of(plan: Plan) -> dict[str, int]:
    """The named mesh of a resolved plan: {'pp': pp, 'dp': dp, 'cp': cp, 'tp': tp}."""
    return {"pp": plan.pp, "dp": plan.dp, "cp": plan.cp, "tp": plan.tp}


def megatron_placements(model: ModelConfig, plan: Plan) -> list[OpPlacement]:
    """Megatron-LM's placements for a resolved plan (perfmodel.spec.model.operators.megatron_split): dp splits the batch, cp
    the sequence, tp the vocabulary / heads / ffn, and with sequence parallelism the sequence of norms and
    residuals (size-1 axes split nothing). What the executor runs for a plan file without placements, and what
    the layout-level prediction assumes."""
    sizes = {"dp": plan.dp, "cp": plan.cp, "tp": plan.tp}
    out = []
    for op in OPS:
        p = megatron_placement(op, sizes, plan.sequence_parallel)
        out.append(OpPlacement(op=op, layers=(0, model.n_layers - 1) if op in LAYER_OPS else None, split=p.split,
                               input=p.input, output=p.output, weight=p.weight, style=p.style))
    return out


def check(pf: PlanFile) -> PlanFile:
    """Refuse a plan file whose fields disagree with each other (one line naming the field and what is valid)."""
    if pf.version != VERSION:
        raise InputError(f"plan file version = {pf.version} is not supported; valid version: {VERSION} "
                         "(re-create the file with this perfmodel: perfmodel search ... --output FILE)")
    plan = resolve(pf.plan, pf.model, pf.hardware)
    # fields a plan leaves to its stack, absent from files written before they existed: the stack's values
    stacked = {k: getattr(plan, k) for k in ("grad_dtype", "tp_comm_overlap", "fp8_recipe", "cuda_graphs",
                                             "weight_dtype", "moment_dtype")
               if getattr(pf.plan, k) is None and getattr(plan, k) is not None}
    if stacked:
        pf = pf.model_copy(update={"plan": pf.plan.model_copy(update=stacked)})
    if plan.model_dump() != pf.plan.model_dump():
        diff = [k for k, v in plan.model_dump().items() if pf.plan.model_dump()[k] != v]
        raise InputError(f"plan file field plan.{diff[0]} = {getattr(pf.plan, diff[0])!r} is not resolved; "
                         f"valid: {getattr(plan, diff[0])!r}")
    want = mesh_of(plan)
    if list(pf.mesh) != list(want) or pf.mesh != want:
        raise InputError(f"plan file field mesh = {pf.mesh} disagrees with the plan; valid mesh: {want}")
    split = split_of(plan, pf.model.n_layers)
    if pf.stage_layers != split:
        raise InputError(f"plan file field stage_layers = {pf.stage_layers} disagrees with the plan; valid "
                         f"stage_layers: {split} (set plan.stage_layers to change the split)")
    covered: dict[str, list[int]] = {op: [] for op in OPS}
    for i, pl in enumerate(pf.placements):
        where = f"plan file field placements.{i} ({pl.op})"
        if pl.op not in OPS:
            raise InputError(f"{where}: op = {pl.op!r} is not an operator; valid: {', '.join(OPS)}")
        if (pl.layers is None) != (pl.op not in LAYER_OPS):
            raise InputError(f"{where}: layers = {pl.layers} is wrong; per-layer ops give (first, last), others none")
        if pl.layers is not None and not 0 <= pl.layers[0] <= pl.layers[1] < pf.model.n_layers:
            raise InputError(f"{where}: layers = {pl.layers}; valid: 0 <= first <= last < {pf.model.n_layers}")
        if (pl.weight is None) != (SPECS[pl.op].weight is None):
            raise InputError(f"{where}: weight = {pl.weight}; valid: " + (
                "null (the operator has no weight)" if pl.weight is not None else
                f"{len(PLACEMENT_AXES)} entries (one per mesh axis dp, cp, tp) for the operator's weight"))
        for name, ndim in (("input", 3), ("output", 3), ("weight", 2)):
            value = getattr(pl, name)
            if value is None:
                continue
            matches = [_PLACEMENT.match(v) for v in value]
            if len(value) != len(PLACEMENT_AXES) or not all(matches) or any(
                    m.group(2) is not None and int(m.group(2)) >= ndim for m in matches):
                raise InputError(f"{where}: {name} = {value}; valid: {len(PLACEMENT_AXES)} entries (one per mesh "
                                 f"axis dp, cp, tp), each Replicate(), Partial() or Shard(d) with d < {ndim}")
        for dim, axes in pl.split.items():
            if dim not in DIMS:
                raise InputError(f"{where}: split dimension {dim!r} is not known; valid: {', '.join(DIMS)}")
            bad = [a for a in axes if a not in PLACEMENT_AXES]
            if bad:
                raise InputError(f"{where}: split[{dim!r}] names mesh axis {bad[0]!r}; valid: dp, cp, tp")
        covered[pl.op] += list(range(pl.layers[0], pl.layers[1] + 1)) if pl.layers else [-1]
    if pf.placements:  # a file without placements leaves them to the executor's default (Megatron's)
        for op, seen in covered.items():
            want = list(range(pf.model.n_layers)) if op in LAYER_OPS else [-1]
            if sorted(seen) != want:
                what = f"layers 0-{pf.model.n_layers - 1} once each" if op in LAYER_OPS else "one entry"
                raise InputError(f"plan file field placements: op {op} has {len(seen)} entries for {what}; "
                                 f"valid: every operator placed exactly once ({what})")
    return pf


def load_plan_file(path: str | Path) -> PlanFile:
    """Read and check a plan file (JSON)."""
    path = Path(path)
    data = read_json_object(path, "plan file")
    if "version" in data and data["version"] != VERSION:
        raise InputError(f"plan file {str(path)!r}: version = {data.get('version')!r} is not supported; valid "
                         f"version: {VERSION} (re-create it: perfmodel search ... --output FILE)")
    try:
        with spec_folder(path.parent):  # its spec's own kernel tables are named relative to the plan file
            pf = PlanFile(**data)
        return check(pf)
    except InputError as err:
        raise InputError(f"plan file {str(path)!r}: {str(err).removeprefix('plan file ')}") from None


def write_plan_file(pf: PlanFile, path: str | Path, what: str = "--output") -> Path:
    """Write a checked plan file atomically (never half-written); its spec's kernel tables outside the catalogue
    named relative to the file's folder (spec.hardware.kernel_tables.written_name)."""
    check(pf)
    return write_with_tables(pf, path, what)
