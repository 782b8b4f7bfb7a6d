"""Activation recomputation policies as frameworks name them: the plan's `recompute` mode and its details
(Megatron-Core's module list, Megatron-LM's number and method of fully recomputed layers), checked against the
model. What each policy keeps is `cost.compute.operator_table.kept_bytes` / `cost.memory.footprint.layer_activations`."""

from __future__ import annotations

from typing import Literal

from ...errors import InputError, divisors, values_text
from ..model.config import ModelConfig

Recompute = Literal["none", "selective", "full", "per-op", "names"]
# Megatron-Core's --recompute-modules (TransformerConfig.recompute_modules): the submodules whose outputs are
# rebuilt in the backward under --recompute-granularity selective
RecomputeModule = Literal["core_attn", "mlp", "moe_act", "moe", "layernorm", "mla_up_proj", "shared_experts"]
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe_act", "moe", "layernorm", "mla_up_proj", "shared_experts")
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)  # Megatron-Core's default, Korthikanti et al. 2022's selective
# recompute = names (JAX's jax.checkpoint_policies.save_only_these_names, which MaxText's remat_policy builds on):
# the layer tensors kept for the backward besides the layer's input; everything else is rebuilt. qkv: the q/k/v
# projections' outputs; kv: the key and value projections' alone, the queries rebuilt (MaxText's key_proj and
# value_proj kept, query_proj not); attention: the attention core's output (MaxText's "context"); out_proj,
# mlp_in: those GEMMs' outputs (cost.compute.remat_names)
SavedTensor = Literal["qkv", "kv", "attention", "out_proj", "mlp_in"]
SAVED_TENSORS = ("qkv", "kv", "attention", "out_proj", "mlp_in")
# ... and those kept in host memory rather than the device's (JAX save_and_offload_only_these_names, MaxText's
# 'offload' checkpoint names): the layer input or saved tensors (cost.memory.offload)
OffloadTensor = Literal["layer_input", "qkv", "kv", "attention", "out_proj", "mlp_in"]
OFFLOAD_TENSORS = ("layer_input", *SAVED_TENSORS)
# MaxText's named remat policies (MaxText 0.2.5 src/maxtext/layers/nnx_decoders.py, get_remat_policy) as the
# tensors they save.
# Their checkpoint names: query_proj/key_proj/value_proj/qkv_proj -> qkv, context -> attention, out_proj,
# mlpwi(_0/_1) -> mlp_in. mlpwo's output feeds only the residual add, whose backward needs nothing, so saving it
# keeps nothing (save_dot_except_mlpwi = save_dot_except_mlp here); 'full' saves nothing but the layer input.
MAXTEXT_REMAT = {"minimal_with_context": ["qkv", "attention", "out_proj", "mlp_in"],
                 "minimal": ["qkv", "out_proj", "mlp_in"], "save_dot_with_context_except_mlp": ["qkv", "attention",
                                                                                               "out_proj"],
                 "save_dot_except_mlp": ["qkv", "out_proj"], "save_dot_except_mlpwi": ["qkv", "out_proj"],
                 "save_qkv_proj": ["qkv"], "save_out_proj": ["out_proj"], "full": [],
                 "minimal_flash": ["qkv", "attention", "out_proj", "mlp_in"],  # minimal_with_context's old name
                 "qkv_proj_offloaded": ["qkv"], "minimal_offloaded": ["qkv", "out_proj", "mlp_in"]}
# The names' tensors as MaxText 0.2.5's checkpoint names (base.yml's keys for remat_policy custom: 'device',
# 'offload' or 'remat' each); mlpwo's output is never kept (its only reader is the residual add)
MAXTEXT_CHECKPOINT_NAMES = {"layer_input": ("decoder_layer_input",),
                            "qkv": ("query_proj", "key_proj", "value_proj", "kv_proj", "qkv_proj"),
                            "attention": ("context",), "out_proj": ("out_proj",),
                            "mlp_in": ("mlpwi", "mlpwi_0", "mlpwi_1")}
# kv: the key and value names alone, what a custom policy that keeps them without query_proj keeps (ingest and
# export.maxtext.mesh read and write "qkv" as these with query_proj remat)
MAXTEXT_KV_NAMES = ("key_proj", "value_proj", "kv_proj")
# The named policies that offload (save_and_offload_only_these_names, offload_dst pinned_host): every tensor they
# keep sits in host memory
MAXTEXT_OFFLOADED = {"qkv_proj_offloaded": ["qkv"], "minimal_offloaded": ["qkv", "out_proj", "mlp_in"]}


def names_unpriced(model: ModelConfig, saved=()) -> str | None:
    """What in `model` the names policy does not price (cost.compute.remat_names: softmax-attention layers, latent
    attention's included; a MoE MLP re-run whole, cost.compute.moe), or None. MaxText tags the experts' first GEMM outputs
    mlpwi_0 as well as moe_mlpwi_0 (layers/moe.py), so saving mlp_in on a MoE model keeps part of the experts'
    tensors: not priced."""
    return ("experts (MoE) with mlp_in saved" if model.moe and "mlp_in" in saved else
            "linear attention" if model.linear_attention else None)


def check_names_model(model: ModelConfig, saved=()) -> None:
    """Refuse recompute = names for a model whose layers it does not price (`names_unpriced`)."""
    what = names_unpriced(model, saved)
    if what:
        raise InputError(f"recompute = names with {model.name}, a model with {what}: the names policy is priced "
                         "for softmax-attention layers, MoE ones with the experts re-run whole; valid: recompute "
                         "none, selective, full or per-op" + (", or recompute_saved without mlp_in"
                                                             if model.moe and not model.linear_attention else ""))


def check_recompute(p: dict, model: ModelConfig) -> None:
    """The recompute policy's details against its mode and the model (and the tiled loss's chunks against the
    tokens they split); fills recompute_modules' default."""
    tokens, n = p["micro_batch"] * p["seq_len"] // p["cp"], p["loss_chunks"]
    if tokens % n:
        raise InputError(f"loss_chunks = {n} does not divide the {tokens} tokens of a micro-batch on a context-"
                         f"parallel rank (micro_batch x seq_len / cp); valid: {values_text(divisors(tokens))}")
    rc, mods, n = p["recompute"], p["recompute_modules"], p["recompute_num_layers"]
    saved = p.get("recompute_saved")
    if saved is not None and rc != "names":
        raise InputError(f"recompute_saved = {saved} with recompute = {rc}: the saved tensors are the names policy's "
                         "(JAX save_only_these_names); valid: recompute = names, or no recompute_saved")
    if rc == "names":
        p["recompute_saved"] = sorted(dict.fromkeys(saved or ()), key=SAVED_TENSORS.index)
        check_names_model(model, p["recompute_saved"])
    check_offloaded(p)
    if mods is not None and rc != "selective":
        raise InputError(f"recompute_modules = {mods} with recompute = {rc}: the module list is Megatron-Core's "
                         "--recompute-modules of selective recompute; valid: recompute = selective, or no "
                         "recompute_modules")
    if (n is not None or p["recompute_method"] != "uniform") and rc != "full":
        raise InputError(f"recompute_num_layers = {n}, recompute_method = {p['recompute_method']} with recompute = "
                         f"{rc}: they say which layers full recompute rebuilds; valid: recompute = full, or "
                         "neither set")
    if n is not None and n > model.n_layers:
        raise InputError(f"recompute_num_layers = {n} exceeds n_layers = {model.n_layers}; valid: 1..{model.n_layers}")
    if rc == "selective":
        mods = list(dict.fromkeys(mods or DEFAULT_RECOMPUTE_MODULES))
        need = {"moe_act": model.moe, "moe": model.moe, "mla_up_proj": model.mla,
                "shared_experts": model.moe and model.moe.shared_ffn_hidden}
        for m in mods:
            if m in need and not need[m]:
                what = "latent attention (MLA)" if m == "mla_up_proj" else (
                    "shared experts" if m == "shared_experts" else "experts")
                valid = [k for k in RECOMPUTE_MODULES if k not in need or need[k]]
                raise InputError(f"recompute_modules: {m!r} needs a model with {what}, which {model.name} has not; "
                                 f"valid for it: {', '.join(valid)}")
        p["recompute_modules"] = sorted(mods, key=RECOMPUTE_MODULES.index)


def check_offloaded(p: dict) -> None:
    """The tensors offloaded to host memory (recompute_offloaded) against the names policy's: the layer input or
    tensors it saves; sorts them and drops an empty list."""
    off = p.get("recompute_offloaded")
    if not off:
        p["recompute_offloaded"] = None
        return
    if p["recompute"] != "names":
        raise InputError(f"recompute_offloaded = {off} with recompute = {p['recompute']}: offloading is JAX's "
                         "save_and_offload_only_these_names; valid: recompute = names, or no recompute_offloaded")
    held = ("layer_input", *p["recompute_saved"])
    for t in off:
        if t not in held:
            raise InputError(f"recompute_offloaded: {t!r} is not kept under recompute_saved = {p['recompute_saved']}"
                             f" (an offloaded tensor is a kept one, held in host memory); valid: "
                             f"{', '.join(held)}, or add {t!r} to recompute_saved")
    p["recompute_offloaded"] = sorted(dict.fromkeys(off), key=OFFLOAD_TENSORS.index)


def check_host(p: dict, system) -> None:
    """A plan that offloads (activations or the optimizer state) needs its system's host link (System.host)."""
    for field in ("recompute_offloaded", "optimizer_offload", "activation_offload_layers", "offload_modules"):
        if p.get(field) and system.host is None:
            raise InputError(f"{field} = {'true' if p[field] is True else p[field]} on {system.name}, whose spec gives no host link (System.host: "
                             f"bandwidth and host memory per device); valid: no {field}, or a system spec with a "
                             "host section (e.g. dgx-h100, tpu-v6e)")
