"""The rules a mixture-of-experts plan obeys, beside `spec.plan.layout.resolve`: what a stack's release recipe fills in
(`apply_release`), when Megatron-Core overlaps expert-parallel communication (`moe_overlap_refusal`,
`moe_overlap_applies`), and the checks of ep, etp, token dropping and sequence parallelism against the model and the
stage's ranks (`check_experts`). Plans arrive as the dict `resolve` builds."""

from __future__ import annotations

import numpy as np

from ...errors import InputError, divisors, values_text
from ..hardware.system import System
from ..model.config import ModelConfig
from ..stack.release import CAPACITY_FIELDS, release_defaults, release_fields


def apply_release(p: dict, given: set[str], model: ModelConfig, system: System) -> None:
    """Fill, in place, the MoE fields a plan left unset (not in `given`) from its stack's release recipe
    (spec.stack.release: `--stack megatron-bridge@26.08`): dispatcher, EP overlap (where the layout allows it), CUDA
    graphs, recompute modules, fp8's recipe on Blackwell (mxfp8); and, for every model, what the release's scripts set
    whatever the model (Defaults: gradient dtype, a dense model's TP overlap). Another stack keeps its fields."""
    acc = system.accelerator
    for k, v in release_defaults(p["stack"], model.moe is not None, p["precision"]).items():
        if k not in given and p[k] is None:  # what the release's scripts set for every model, dense ones too
            p[k] = v
    found = release_fields(p["stack"], model.name, acc.name, acc.generation_name, p["precision"],
                           user_capacity=bool(given & set(CAPACITY_FIELDS))) if model.moe else None
    if found is None:
        return
    r, fields = found
    p.update({k: v for k, v in fields.items() if k not in given and v is not None})
    if r.recompute_full and not given & {"recompute", "recompute_modules"}:
        p["recompute"], p["recompute_modules"] = "full", None
    elif r.recompute_modules is not None and not given & {"recompute", "recompute_modules"}:
        p["recompute"], p["recompute_modules"] = ("selective", r.recompute_modules) if r.recompute_modules else \
            ("none", None)
    if "moe_overlap" not in given:
        p["moe_overlap"] = bool(r.moe_overlap and moe_overlap_refusal(model, p["moe_dispatcher"]) is None
                                and moe_overlap_applies(p["ep"], p["pp"], p["vpp"], p["recompute"]))


def moe_overlap_refusal(model: ModelConfig, dispatcher: str) -> str | None:
    """Why a job cannot run with moe_overlap whatever its layout (None: it can): Megatron-Core's
    overlap_moe_expert_parallel_comm checks (megatron/core/transformer/transformer_config.py, core_r0.14) need
    the alltoall or flex dispatcher and at most one MTP module; a dense model has nothing to overlap."""
    if model.moe is None:
        return f"moe_overlap=true: {model.name} is a dense model (no experts); valid: moe_overlap=false"
    if dispatcher == "allgather":
        return ("moe_overlap = true with moe_dispatcher = 'allgather': Megatron-Core overlaps the expert-parallel "
                "communication of the alltoall and flex dispatchers only; valid moe_dispatcher with moe_overlap: "
                "alltoall, flex")
    if model.mtp_layers > 1:
        return (f"moe_overlap = true with mtp_layers = {model.mtp_layers}: Megatron-Core overlaps expert-parallel "
                "communication with at most one multi-token prediction module; valid: moe_overlap = false")
    return None


def moe_overlap_applies(ep, pp, vpp, recompute):
    """Layouts (scalars or arrays) Megatron-Core runs with overlap_moe_expert_parallel_comm (core_r0.14
    TransformerConfig checks): ep > 1, virtual pipelining wherever pp > 1 (its combined 1F1B schedule), no full
    recompute."""
    return (np.asarray(ep) > 1) & ((np.asarray(pp) == 1) | (np.asarray(vpp) > 1)) & (np.asarray(recompute) != "full")


def check_experts(p: dict, model: ModelConfig) -> None:
    """ep and etp against the model's experts and the stage's ranks (Megatron-Core's MoE parallel folding: the
    experts' etp x ep x edp grid covers the same tp x cp x dp ranks as attention)."""
    ep, etp, stage = p["ep"], p["etp"], p["tp"] * p["cp"] * p["dp"]
    if p["moe_pad_to_capacity"] and p["moe_capacity_factor"] is None:
        raise InputError("moe_pad_to_capacity = true without moe_capacity_factor: padding fills each expert to its "
                         "capacity, which the capacity factor sets (Megatron-Core refuses it too); valid: "
                         "moe_capacity_factor > 0 (e.g. 1.0), or moe_pad_to_capacity = false")
    if model.moe is None:
        if ep > 1 or etp > 1:
            raise InputError(f"ep={ep}, etp={etp}: {model.name} is a dense model (no experts); valid: ep=1, etp=1")
        if p["moe_capacity_factor"] is not None:
            raise InputError(f"moe_capacity_factor = {p['moe_capacity_factor']:g}: {model.name} is a dense model (no "
                             "experts to drop tokens at); valid: moe_capacity_factor unset")
        if p["moe_overlap"]:
            raise InputError(moe_overlap_refusal(model, p["moe_dispatcher"]))
        if p.get("moe_dense_dispatch"):
            raise InputError(f"moe_dense_dispatch = true: {model.name} is a dense model (no experts to dispatch "
                             "tokens to); valid: moe_dense_dispatch = false")
        return
    if p["moe_overlap"]:
        job = moe_overlap_refusal(model, p["moe_dispatcher"])
        if job:
            raise InputError(job)
        if not moe_overlap_applies(p["ep"], p["pp"], p["vpp"], p["recompute"]):
            raise InputError(f"moe_overlap = true with ep={p['ep']}, pp={p['pp']}, vpp={p['vpp']}, recompute="
                             f"{p['recompute']}: Megatron-Core overlaps expert-parallel communication only with "
                             "ep > 1, vpp > 1 where pp > 1, and no full recompute (TransformerConfig checks, "
                             "core_r0.14); valid: such a layout, or moe_overlap = false")
    if p["tp"] > 1 and not p["sequence_parallel"]:
        raise InputError(f"sequence_parallel = false with tp={p['tp']} on the MoE model {model.name}: every tp rank "
                         "would route all of its tokens (Megatron-Core refuses MoE with tp and no sequence "
                         "parallelism); valid: sequence_parallel = true, or tp = 1")
    e, f = model.moe.n_experts, model.moe.expert_ffn_hidden
    if e % ep:
        raise InputError(f"ep={ep} does not divide n_experts = {e}; valid ep: "
                         f"{values_text([d for d in divisors(e) if stage % (d * etp) == 0] or divisors(e))}")
    if f % etp:
        raise InputError(f"etp={etp} does not divide expert_ffn_hidden = {f}; valid etp: {values_text(divisors(f))}")
    if stage % (ep * etp):
        raise InputError(f"ep*etp = {ep}*{etp} = {ep * etp} does not divide a pipeline stage's tp*cp*dp = "
                         f"{p['tp']}*{p['cp']}*{p['dp']} = {stage} ranks (MoE parallel folding); valid ep with "
                         f"etp={etp}: {values_text([d for d in divisors(e) if stage % (d * etp) == 0])}")
