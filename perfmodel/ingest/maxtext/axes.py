"""MaxText's device mesh and batch as plan fields: the inverse of perfmodel.export.maxtext.mesh.mesh and
export.maxtext.config._batch, completed once the device count is known where the config leaves axes to it (-1).

MaxText (maxtext e591f30: configs/types.py, utils/max_utils.py fill_unspecified_mesh_axes): every ici_* product is
the devices of one slice and every dcn_* product the slices; one -1 per kind takes what the others leave. The batch:
global = int(devices x per_device_batch_size) x gradient_accumulation_steps (types.py calculate_global_batch_sizes),
sharded over the data, fsdp, fsdp_transpose and expert axes (base.yml logical_axis_rules activation_batch); with a
pipeline each step's batch runs as num_pipeline_microbatches micro-batches (-1: one per stage; layers/pipeline.py).

The plan: tp = tensor x tensor_sequence, cp = context, pp = pipeline (GPipe's order), ep = expert, dp = data x fsdp
x fsdp_transpose x expert; ZeRO-3 where the fsdp axes shard (their replicas on the data axis: dp_replicate), else
ZeRO-1 with shard_optimizer_over_data, else replicas (export.maxtext.mesh's mapping, inverted).
"""

from __future__ import annotations

import math
from typing import Any

from ...errors import InputError

PLAN_AXES = ("data", "fsdp", "fsdp_transpose", "expert", "tensor", "tensor_sequence", "context", "pipeline")
# axes perfmodel has no degree for: only 1 is read
OTHER_AXES = ("diloco", "sequence", "context_usp_ulysses", "context_autoregressive", "autoregressive")


def fill(degrees: dict[str, int], total: int | None, scope: str) -> dict[str, int] | None:
    """The degrees with MaxText's -1 filled from `total` (the devices of a slice, or the slices); None when a -1
    waits for an unknown total. One -1 at most, and the product must be the total (max_utils
    fill_unspecified_mesh_axes)."""
    free = [a for a, d in degrees.items() if d == -1]
    if len(free) > 1:
        raise InputError(f"{scope}_{free[0]}_parallelism and {scope}_{free[1]}_parallelism are both -1: MaxText "
                         f"fills one {scope} axis with the rest; valid: at most one -1")
    for a, d in degrees.items():
        if not isinstance(d, int) or isinstance(d, bool) or (d < 1 and d != -1):
            raise InputError(f"{scope}_{a}_parallelism = {d!r}: a mesh degree is a positive whole number or -1 (the "
                             "rest); valid: 1, 2, 4, ... or -1")
    known = math.prod(d for d in degrees.values() if d != -1)
    if total is None:
        return None if free else dict(degrees)
    if free:
        if total % known:
            raise InputError(f"{scope}_{free[0]}_parallelism = -1 takes the rest of {total} "
                             f"{'slices' if scope == 'dcn' else 'devices a slice'}, which the other {scope} axes' "
                             f"product {known} does not divide; valid: {scope} degrees whose product divides {total}")
        return {**degrees, free[0]: total // known}
    if known != total:
        raise InputError(f"the {scope}_*_parallelism degrees multiply to {known}, not the {total} "
                         f"{'slices' if scope == 'dcn' else 'devices of a slice'} the launch states; valid: degrees "
                         f"whose product is {total}, or one of them -1")
    return dict(degrees)


def fit_slices(count: int, system) -> int:
    """The fewest equal slices of `count` devices that each fit the system's first tier (a TPU's ICI, a GPU host's
    NVLink), used where a config leaves dcn_data_parallelism -1 and states no slices. On GPUs MaxText's slice is one
    such domain (utils/accelerator_to_spec_map.py: "the slice topology of A3 fixed to a single host"; configs/gpu/a3/
    llama_3.1_405b/128vm.sh runs dcn_fsdp 128 x ici_fsdp 8 on 128 nodes). export.maxtext.mesh.slices writes 1 slice
    on GPUs."""
    domain = system.tiers[0].domain_size
    if domain is None or count <= domain:
        return 1
    return next(s for s in range(2, count + 1) if count % s == 0 and count // s <= domain)


def totals(ici: dict, dcn: dict, count: int | None, slices: int | None, system=None) -> dict[str, int] | None:
    """Each axis's degree, ici x dcn, or None while a -1 waits for the device count."""
    if slices is None and -1 not in dcn.values():
        slices = math.prod(dcn.values())
    if slices is None and count is not None and system is not None:
        slices = fit_slices(count, system)
    d = fill(dcn, slices, "dcn")
    if count is None and slices is not None and -1 not in ici.values():
        count = math.prod(ici.values()) * slices
    if count is not None and slices is not None and count % slices:
        raise InputError(f"{count} devices do not split into {slices} equal slices; valid: a device count that is a "
                         "multiple of the slices")
    i = fill(ici, None if count is None or slices is None else count // slices, "ici")
    if d is None or i is None:
        return None
    return {a: i[a] * d[a] for a in ici}


def plan_fields(t: dict[str, int], batch: dict[str, Any]) -> dict[str, Any]:
    """The plan fields of the mesh degrees `t` and MaxText's batch keys (pdbs, gas, nmb, shard_opt, layers, nlps,
    repeats)."""
    tp, cp, pp, ep = t["tensor"] * t["tensor_sequence"], t["context"], t["pipeline"], t["expert"]
    fsdp, data = t["fsdp"] * t["fsdp_transpose"], t["data"]
    for a in OTHER_AXES:
        if t.get(a, 1) != 1:
            raise InputError(f"ici/dcn_{a}_parallelism = {t[a]}: MaxText's {a} axis is not priced by perfmodel (no "
                             "plan degree splits that way); valid: 1")
    count = math.prod(t.values())
    dp = data * fsdp * ep
    zero = 3 if fsdp > 1 else 1 if batch["shard_opt"] else 0
    out = dict(gpus=count, tp=tp, cp=cp, pp=pp, ep=ep, dp=dp, zero=zero, sequence_parallel=tp > 1,
               dp_replicate=data if fsdp > 1 and data > 1 else 1)
    sequences = count * batch["pdbs"]  # a step's micro-batch over all devices (types.py micro_batch_to_train)
    if pp > 1:
        nmb = pp if batch["nmb"] == -1 else batch["nmb"]
        layers_per = batch["nlps"] * pp
        repeats = batch["layers"] // layers_per if batch["repeats"] == -1 else batch["repeats"]
        if batch["layers"] != layers_per * repeats or repeats < 1:
            raise InputError(f"num_layers_per_pipeline_stage = {batch['nlps']} x {pp} stages does not split the "
                             f"{batch['layers']} decoder layers (MaxText: stages x layers per stage x repeats = "
                             f"layers); valid: num_layers_per_pipeline_stage dividing {batch['layers'] // pp}")
        if repeats > 1:
            raise InputError(f"num_pipeline_repeats = {repeats} ({batch['layers']} layers over {pp} stages of "
                             f"{batch['nlps']}): MaxText's circular pipeline is not priced (perfmodel prices GPipe "
                             "and 1F1B orders); valid: num_layers_per_pipeline_stage = layers / stages")
        out["schedule"] = "gpipe"
        per_rank = sequences / (nmb * dp)
        what = (f"per_device_batch_size = {batch['pdbs']:g} on {count} devices in {nmb} pipeline micro-batches "
                f"over {dp} data-parallel ranks")
    else:
        per_rank = sequences / dp
        what = (f"per_device_batch_size = {batch['pdbs']:g} x {count} devices over {dp} data-parallel ranks "
                f"(tensor x context x pipeline = {tp * cp} devices hold the same sequences)")
    if per_rank < 1 or not float(per_rank).is_integer():
        raise InputError(f"{what} is {per_rank:g} sequences a micro-batch: perfmodel prices whole sequences per "
                         "data-parallel rank; valid: a per_device_batch_size that makes a whole number")
    out["micro_batch"] = int(per_rank)
    out["global_batch"] = int(sequences) * batch["gas"]
    return out


def complete(deferred: dict, count: int, system) -> dict[str, Any]:
    """The plan fields of a config whose mesh waited for the device count (`Imported.deferred`)."""
    t = totals(deferred["ici"], deferred["dcn"], count, deferred.get("slices"), system)
    if t is None:  # cannot happen: with the count every -1 is filled
        raise InputError(f"maxtext mesh: {count} devices leave an axis unfilled")
    fields = plan_fields(t, deferred["batch"])
    if fields["gpus"] != count:
        raise InputError(f"the mesh degrees multiply to {fields['gpus']} devices, not --gpus {count}; valid: --gpus "
                         f"{fields['gpus']}")
    return fields
