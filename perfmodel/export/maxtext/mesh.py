"""MaxText's device mesh for a plan, and the plan settings MaxText 0.2.5 cannot run (`nearest_plan`).

Sources (maxtext==0.2.5 on PyPI): configs/base.yml lines 636 (mesh_axes: diloco, data, stage, fsdp, fsdp_transpose,
context, ..., tensor, tensor_sequence, expert, autoregressive) and 764-799 (ici_* / dcn_* degrees, one -1 each,
shard_optimizer_over_data); configs/types.py (num_target_devices from compile_topology, the pipeline asserts,
"FP8 quantization is not compatible with gradient accumulation", "DCN parallelism requested but only one slice
available"); utils/max_utils.py fill_unspecified_mesh_axes (each ici product = devices per slice, each dcn product
= slices); utils/accelerator_to_spec_map.py (slice names: v4-N and v5p-N count TensorCores, two per chip, which
JAX sees as one megacore device; v5e-N, v6e-N count chips; tpu7x-N counts the devices, two dies per chip);
layers/pipeline.py (the pipeline scans micro-batches forward and differentiates the scan: GPipe's order).

The plan's axes map onto MaxText's mesh axes as:
  tp -> tensor (MaxText also shards the activations' embed axis over it: sequence parallelism);
  cp -> context; pp -> stage; ep -> expert (a batch axis for the dense layers, as the plan folds ep into dp);
  dp / ep -> fsdp for ZeRO-3 (parameters, gradients and optimizer state sharded), else data (replicas), with
  shard_optimizer_over_data for ZeRO-1.
fsdp_transpose, sequence, tensor_sequence, autoregressive and diloco stay 1: no plan setting uses them.
Slices: the fewest equal slices that each fit the system's first (ICI) tier; each axis takes its share of the
slices outermost first (stage, then the data axis, expert, context, tensor: Megatron's device order, which the plan
was priced with), the rest of its degree inside a slice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...errors import InputError
from ...spec.plan.layout import state_dtypes
from ...spec.plan.file import PlanFile
from ...spec.plan.recompute import MAXTEXT_CHECKPOINT_NAMES, MAXTEXT_KV_NAMES, MAXTEXT_OFFLOADED, MAXTEXT_REMAT
from ..plan_facts import plan_change

MAXTEXT = "MaxText 0.2.5"
# accelerator generation -> (accelerator_to_spec_map name prefix, names per device); the slice of N devices is
# f"{prefix}-{N * per}" (v5p-256: 128 chips). Keyed by the part, so a user's own spec of the part gets it too.
TOPOLOGY = {"tpu-v4": ("v4", 2), "tpu-v5e": ("v5e", 1), "tpu-v5p": ("v5p", 2), "tpu-v6e": ("v6e", 1),
            "tpu-v7": ("tpu7x", 1)}
# MaxText remat_policy (base.yml line 447; layers/nnx_decoders.py get_remat_policy) for each plan recompute
REMAT = {"none": "minimal_with_context", "selective": "minimal", "full": "full"}


def remat_keys(p) -> dict:
    """MaxText's remat_policy for the plan's recompute: REMAT, or for names the named policy that saves and
    offloads exactly its tensors (spec.plan.recompute.MAXTEXT_REMAT, MAXTEXT_OFFLOADED), else 'custom' with each
    checkpoint name 'offload', 'device' or 'remat' (and decoder_layer_input 'offload' or 'device')."""
    if p.recompute != "names":
        return {"remat_policy": REMAT[p.recompute]}
    saved, off = list(p.recompute_saved or []), list(p.recompute_offloaded or [])
    named = next((k for k, v in MAXTEXT_REMAT.items() if v == saved and MAXTEXT_OFFLOADED.get(k, []) == off), None)
    if named:
        return {"remat_policy": named}
    held = ("layer_input", *saved)  # the layer input is always kept (names_held)
    place = lambda t: "offload" if t in off else "device" if t in held else "remat"  # noqa: E731
    keys = {n: place(t) for t, names in MAXTEXT_CHECKPOINT_NAMES.items() for n in names}
    if "kv" in held and "qkv" not in held:  # the key and value projections alone (spec.plan.recompute MAXTEXT_KV_NAMES)
        keys.update(dict.fromkeys(MAXTEXT_KV_NAMES, place("kv")))
    return {"remat_policy": "custom", **keys}


@dataclass
class Mesh:
    """MaxText's mesh for a plan: degrees per axis inside a slice (ici) and across slices (dcn)."""

    tpu: bool
    slices: int
    per_slice: int
    ici: dict[str, int]
    dcn: dict[str, int]
    topology: str | None  # compile_topology (accelerator_to_spec_map name) of one slice; None on GPUs
    notes: list[str] = field(default_factory=list)


def is_tpu(pf: PlanFile) -> bool:
    return pf.hardware.accelerator.torch_device == "xla"  # a TPU: JAX / PyTorch-XLA run it


def slices(pf: PlanFile) -> int:
    """The fewest equal slices of the job that each fit one domain of the first (ICI) tier; 1 on GPUs (MaxText
    counts one slice there unless num_slices is set: max_utils.get_num_slices)."""
    gpus, domain = pf.plan.gpus, pf.hardware.tiers[0].domain_size
    if not is_tpu(pf) or domain is None or gpus <= domain:
        return 1
    return next(s for s in range(2, gpus + 1) if gpus % s == 0 and gpus // s <= domain)


def data_axis(pf: PlanFile) -> str:
    return "fsdp" if pf.plan.zero == 3 else "data"


def mesh(pf: PlanFile) -> Mesh:
    """The ici / dcn degrees of every mesh axis the plan uses (others 1), outermost axes across slices first."""
    p = pf.plan
    s = slices(pf)
    r = p.dp_replicate  # hybrid sharding: replicas (data) of fsdp groups, replicas outermost (across slices first)
    order = [("stage", p.pp), ("data", r), ("fsdp", p.dp // r // p.ep)] if r > 1 else [
        ("stage", p.pp), (data_axis(pf), p.dp // p.ep)]
    order += [("expert", p.ep), ("context", p.cp), ("tensor", p.tp)]
    ici = {a: 1 for a in ("data", "fsdp", "stage", "context", "tensor", "expert")}
    dcn = dict(ici)
    left = s
    for axis, degree in order:
        across = math.gcd(degree, left)
        dcn[axis], ici[axis] = across, degree // across
        left //= across
    if left != 1:  # cannot happen while dp, pp, ... multiply to gpus = s x per slice; kept as a guard
        raise InputError(f"plan: gpus = {p.gpus} in {s} slices: the degrees {dict(order)} do not split over them")
    topo, notes = None, []
    if is_tpu(pf):
        prefix, per = TOPOLOGY.get(pf.hardware.accelerator.generation, (None, 1))
        if prefix is None:
            notes.append(f"hardware {pf.hardware.name} ({pf.hardware.accelerator.generation}): no MaxText slice name "
                         "known for it (accelerator_to_spec_map); "
                         "the config is written for a TPU slice of the same size")
        else:
            topo = f"{prefix}-{p.gpus // s * per}"
    else:
        notes.append(f"hardware {pf.hardware.name} is a GPU system: MaxText (hardware: gpu) counts one slice there, "
                     f"so all {p.gpus} devices are ici_* degrees; across nodes MaxText's GPU guides set dcn_* per "
                     "node and num_slices")
    return Mesh(tpu=is_tpu(pf), slices=s, per_slice=p.gpus // s, ici=ici, dcn=dcn, topology=topo, notes=notes)


def _pipeline_changes(pf: PlanFile, up: dict, why: list[str]) -> None:
    """MaxText's pipeline: GPipe's order, even stages (types.py asserts stages x repeats x layers per stage =
    layers), micro-batches a multiple of the stages (types.py: "The number of microbatches ... must be divisible by
    the number of stages")."""
    p, m = pf.plan, pf.model
    if p.pp == 1:
        return
    if p.vpp > 1 or p.schedule != "gpipe":
        if p.vpp > 1:
            plan_change(pf, up, why, "vpp", 1, f"{MAXTEXT}'s circular pipeline (num_pipeline_repeats) runs the "
                        "forwards of all micro-batches then the backward by autodiff of its scan, not the "
                        "interleaved 1F1B schedule perfmodel prices for vpp > 1")
        plan_change(pf, up, why, "schedule", "gpipe", f"{MAXTEXT}'s pipeline (layers/pipeline.py) scans every "
                    "micro-batch forward and differentiates the scan: GPipe's order, not 1F1B")
    pp = p.pp
    if m.n_layers % pp:
        fits = [d for d in range(pp - 1, 0, -1) if m.n_layers % d == 0 and p.gpus % (p.tp * p.cp * d) == 0]
        pp = fits[0]
        plan_change(pf, up, why, "pp", pp, f"{MAXTEXT} gives every stage the same number of layers "
                    f"(configs/types.py asserts stages x layers per stage = {m.n_layers} layers); pp={pp} is the "
                    "nearest that divides them")
    uneven = p.stage_layers is not None and len(set(p.stage_layers)) > 1
    for f in ("first_stage_layers", "last_stage_layers"):
        if getattr(p, f) is not None:
            plan_change(pf, up, why, f, None, f"{MAXTEXT} splits the layers evenly over the stages")
    for f in ("account_for_embedding", "account_for_loss"):
        if getattr(p, f):
            plan_change(pf, up, why, f, False, f"{MAXTEXT} splits the decoder layers evenly over the stages")
    if uneven or (p.stage_layers is not None and pp != p.pp):
        plan_change(pf, up, why, "stage_layers", None, f"{MAXTEXT} splits the layers evenly over the stages")
    dp = p.gpus // (p.tp * p.cp * pp)
    if (p.global_batch // (dp * p.micro_batch)) % pp:
        fit = [d for d in range(p.micro_batch - 1, 0, -1)
               if p.micro_batch % d == 0 and (p.global_batch // (dp * d)) % pp == 0]
        if not fit:
            raise InputError(f"plan: global_batch = {p.global_batch} makes {p.global_batch // (dp * p.micro_batch)} "
                             f"pipeline micro-batches, not a multiple of pp = {pp} as {MAXTEXT} requires "
                             f"(configs/types.py); valid global_batch: multiples of dp*micro_batch*pp = "
                             f"{dp * p.micro_batch * pp}")
        plan_change(pf, up, why, "micro_batch", fit[0], f"{MAXTEXT} needs the pipeline micro-batches a multiple "
                    f"of the {pp} stages (configs/types.py); micro_batch {fit[0]} makes "
                    f"{p.global_batch // (dp * fit[0])}")


def per_device_batch(p) -> float:
    """MaxText's per_device_batch_size for plan `p`: without a pipeline the micro-batch over the devices that hold
    the same sequences (tensor and context axes; accumulated num_microbatches times); with one the whole batch per
    device, which MaxText's pipeline splits into micro-batches."""
    return p.micro_batch * p.dp / p.gpus if p.pp == 1 else p.global_batch / p.gpus


def nearest_plan(pf: PlanFile, version: str) -> tuple[dict, list[str]]:
    """Plan-field updates (for pf.plan.model_copy(update=...)) to the nearest plan MaxText `version` runs ({} when
    it runs pf.plan), and one line per change saying what changed and why."""
    p, up, why = pf.plan, {}, []
    tokens = per_device_batch(p) * p.seq_len
    if p.loss_chunks > 1 and (not tokens.is_integer() or tokens % p.loss_chunks):
        n = max((d for d in range(1, p.loss_chunks) if tokens.is_integer() and tokens % d == 0), default=1)
        plan_change(pf, up, why, "loss_chunks", n, f"{MAXTEXT} tiles per_device_batch_size x max_target_length = "
                    f"{tokens:g} tokens, which num_vocab_tiling must divide (pyconfig validate_vocab_tiling)")
    if p.tp > 1 and not p.sequence_parallel:
        plan_change(pf, up, why, "sequence_parallel", True, f"{MAXTEXT} shards the activations' embed axis over the "
                    "tensor axis between layers (base.yml logical_axis_rules activation_embed -> tensor): "
                    "sequence parallelism")
    if p.dp_replicate > 1 and (p.zero != 3 or p.dp // p.dp_replicate % p.ep):
        plan_change(pf, up, why, "dp_replicate", 1, f"{MAXTEXT}'s replicas of sharded groups are the data axis "
                    "beside fsdp (ZeRO-3), whose dp / dp_replicate ranks must hold the ep experts' ranks"
                    if p.zero == 3 else f"{MAXTEXT}'s ZeRO-1 (shard_optimizer_over_data) shards over the whole "
                    "data axis")
    if p.zero == 2:
        plan_change(pf, up, why, "zero", 1, f"{MAXTEXT} has replicas (data axis), ZeRO-1 (shard_optimizer_over_data)"
                    " and ZeRO-3 (fsdp axis), no ZeRO-2; ZeRO-1 moves the same bytes (gradients reduce-scattered, "
                    "parameters all-gathered)")
    if p.precision in ("fp16", "fp4"):
        new = "bf16" if p.precision == "fp16" else "fp8"
        plan_change(pf, up, why, "precision", new, f"{MAXTEXT}'s training GEMMs are bf16 (dtype bfloat16, no fp16 "
                    "loss scaling) or fp8 (quantization: fp8); " + ("bf16" if new == "bf16" else "fp8 is the "
                    "narrowest"))
    if p.recompute == "full" and (p.recompute_num_layers not in (None, 1) or p.recompute_method != "uniform"):
        plan_change(pf, up, why, "recompute_num_layers", None, f"{MAXTEXT}'s remat_policy full recomputes every "
                    "decoder layer (jax.checkpoint around each scanned layer)")
        if p.recompute_method != "uniform":
            plan_change(pf, up, why, "recompute_method", "uniform", f"{MAXTEXT} has no per-stage block recompute")
    elif p.recompute == "per-op":
        plan_change(pf, up, why, "recompute", "selective", f"{MAXTEXT} has no torch per-op checkpoint policy; "
                    "remat_policy minimal (keeps every projection's output, recomputes attention) is Megatron's "
                    "selective recompute")
    if p.recompute == "selective" and p.recompute_modules not in (None, ["core_attn"]):
        plan_change(pf, up, why, "recompute_modules", None, f"{MAXTEXT}'s remat_policy minimal recomputes the "
                    "attention core (core_attn) and keeps every projection's output")
    if p.grad_compression != "none":
        plan_change(pf, up, why, "grad_compression", "none", f"{MAXTEXT} reduces gradients in their dtype "
                    "(weight_dtype); it has no compressed gradient all-reduce")
    _state_dtype_changes(pf, up, why)
    if pf.model.moe is not None:
        if p.ep > 1 and (p.dp % p.ep):
            ep = math.gcd(p.ep, p.dp)
            plan_change(pf, up, why, "ep", ep, f"{MAXTEXT}'s expert axis is a batch axis of its own beside "
                        f"data/fsdp, so it divides the data-parallel ranks (dp = {p.dp}); ep={ep} is the nearest")
        if p.etp != p.tp:
            plan_change(pf, up, why, "etp", p.tp, f"{MAXTEXT} splits every expert's MLP over the tensor axis "
                        "(base.yml logical_axis_rules mlp -> tensor), as the dense MLP")
        for field_, new in (("moe_dispatcher", "alltoall"), ("moe_overlap", False)):
            if getattr(p, field_) != new:
                plan_change(pf, up, why, field_, new, f"{MAXTEXT} dispatches routed tokens by all-to-all "
                            "(sparse_matmul, megablox) in line with compute")
    _pipeline_changes(pf, up, why)
    if p.optimizer_update != "device":  # maxtext_utils get_abstract_state: the state goes to the device to update
        plan_change(pf, up, why, "optimizer_update", "device", f"{MAXTEXT}'s optimizer_memory_host_offload copies "
                    "the state to the device for the update (no update on the host's CPUs)")
        up["optimizer_offload_ratio"] = 1.0
    pp_now = up.get("pp", p.pp)
    nmb = p.global_batch // ((p.gpus // (p.tp * p.cp * pp_now)) * up.get("micro_batch", p.micro_batch))
    if up.get("precision", p.precision) == "fp8" and pp_now == 1 and nmb > 1:
        plan_change(pf, up, why, "precision", "bf16", f"{MAXTEXT} refuses fp8 quantization with gradient "
                    f"accumulation (configs/types.py); this plan accumulates {nmb} micro-batches")
    return up, why


def _state_dtype_changes(pf: PlanFile, up: dict, why: list[str]) -> None:
    """MaxText stores the parameters in weight_dtype, takes their gradients in it (jax.value_and_grad over the
    parameters), keeps Adam's mu in mu_dtype (weight_dtype when unset) and nu always in weight_dtype (base.yml:
    maxtext@5e6a7caff904 lines 132 and 614-616, "Setting nu_dtype is not yet supported by optax"): the gradients
    and both moments follow the plan's weight_dtype."""
    p = pf.plan
    weight, moment = state_dtypes(p.stack, p.weight_dtype, p.moment_dtype)
    if p.grad_dtype != weight:
        plan_change(pf, up, why, "grad_dtype", weight, f"{MAXTEXT}'s gradients take the parameters' dtype "
                    f"(weight_dtype {weight}; jax.value_and_grad over the parameters)")
    if moment != weight:
        plan_change(pf, up, why, "moment_dtype", weight, f"{MAXTEXT} keeps Adam's nu in weight_dtype ({weight}; "
                    "base.yml: nu_dtype is not settable in optax) and mu beside it; the moments follow the weights")
