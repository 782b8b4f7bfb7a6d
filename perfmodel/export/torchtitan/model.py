"""torchtitan's model families for a plan's model: llama3 for a dense model, deepseek_v3 (latent attention) or qwen3
(grouped-query attention) for one with experts, the flavor nearest the plan's shape, and what of the model's
architecture and expert layout the family cannot follow. The flavors' sizes are spec.model.torchtitan_flavors'."""

from __future__ import annotations

import math

from ...spec.model.torchtitan_flavors import LLAMA3_FLAVORS, MOE_FLAVORS, llama3_shape, moe_shape
from ...spec.plan.file import PlanFile
from ..plan_facts import shape

_PARALLELIZE = {"llama3": "parallelize_llama", "deepseek_v3": "parallelize_deepseekv3", "qwen3": "parallelize_qwen3"}
_FLEX_ATTENTION = {("deepseek_v3", "16B"), ("deepseek_v3", "236B"), ("deepseek_v3", "671B")}  # use_flex_attn=True


def family(pf: PlanFile) -> str:
    """torchtitan's model family for the plan's model: deepseek_v3 with latent attention, qwen3 with experts and
    grouped-query attention, llama3 for a dense model."""
    m = pf.model
    return "deepseek_v3" if m.mla is not None else "qwen3" if m.moe is not None else "llama3"


def _torchtitan_moe_model(pf: PlanFile) -> tuple[str, str, list[str], list[str]]:
    """(model name, flavor, comments, not-expressed notes) for a model with experts or latent attention: torchtitan's
    deepseek_v3 (latent attention) or qwen3 (grouped-query attention) family."""
    m = pf.model
    name = family(pf)
    flavors = MOE_FLAVORS[name]
    notes, comments = [], []
    if m.moe is None:  # latent attention without experts: deepseek_v3 with every layer dense
        flavor = min(flavors, key=lambda f: abs(math.log(flavors[f][0] / m.hidden)))
        notes.append(f"model {m.name} has latent attention but no experts: torchtitan's deepseek_v3 has experts from "
                     f"layer n_dense_layers on; exported as deepseek_v3 {flavor}; set n_dense_layers = n_layers = "
                     f"{m.n_layers} in a flavor with this shape ({shape(pf)})")
        return name, flavor, comments, notes
    want = moe_shape(pf.model)
    exact = [f for f, s in flavors.items() if s == want]
    keys = ("dim", "n_layers", "n_heads", "n_kv_heads", "dense ffn", "num_experts", "top_k", "moe_inter_dim",
            "num_shared_experts", "n_dense_layers", "score_func",
            "latent attention" if m.mla is not None else "head_dim")
    if exact:
        flavor = exact[0]
        comments.append(f"[model] {name} flavor {flavor} has this plan's shape: {shape(pf)}")
    else:
        flavor = min(flavors, key=lambda f: abs(math.log(flavors[f][0] / m.hidden)))
        have = flavors[flavor]
        diff = ", ".join(f"{k} {h} (plan {w})" for k, h, w in zip(keys, have, want) if h != w)
        comments.append(f"[model] {name} flavor {flavor} is approximate (the nearest {name} flavor; it differs in "
                        f"{diff}); the plan's shape is: {shape(pf)}")
        notes.append(f"model shape of {m.name} ({', '.join(f'{k}={w}' for k, w in zip(keys, want))}): torchtitan has "
                     f"no such {name} flavor; exported as {name} {flavor}; add a flavor with these sizes to "
                     f"torchtitan/models/{name}/__init__.py (its MoEArgs: num_experts, num_shared_experts, top_k, "
                     "score_func)")
    e = m.moe
    if e.layer_freq > 1:
        notes.append(f"layer_freq={e.layer_freq}: torchtitan's {name} makes every layer from n_dense_layers on a MoE "
                     "layer; interleaving dense and MoE layers is torchtitan's llama4 (interleave_moe_layer_step), "
                     f"not {name}; exported with every layer a MoE layer")
    if name == "qwen3" and e.first_dense_layers:
        notes.append(f"first_dense_layers={e.first_dense_layers}: torchtitan's qwen3 has no leading dense layers "
                     "(every layer is a MoE layer when moe_enabled); exported with every layer a MoE layer")
    if e.router_bias or e.expert_bias:
        notes.append(f"router_bias={e.router_bias}, expert_bias={e.expert_bias}: torchtitan's MoE (torchtitan/"
                     "models/moe) has no router or expert biases; exported without them")
    if m.mtp_layers:
        notes.append(f"mtp_layers={m.mtp_layers}: torchtitan's {name} has no multi-token prediction; exported "
                     "without it")
    return name, flavor, comments, notes


def titan_model(pf: PlanFile, version: str) -> tuple[str, str, list[str], list[str]]:
    """(model name, flavor, comments, not-expressed notes): torchtitan's llama3 model family for a dense model,
    deepseek_v3 or qwen3 for one with experts or latent attention. For a dense model without an exact flavor,
    0.3.0 takes the plan's own sizes (a flavor built on the nearest one, `custom_shape`); 0.2.2 names a flavor
    only (its [model] table has no sizes), so the nearest flavor is exported and said."""
    m = pf.model
    if family(pf) != "llama3":
        name, flavor, comments, notes = _torchtitan_moe_model(pf)
        notes += _architecture_notes(pf, name)
        return name, flavor, comments, notes
    exact = llama3_flavor(pf)
    notes = []
    flavor = exact or min(LLAMA3_FLAVORS, key=lambda f: abs(math.log(LLAMA3_FLAVORS[f][0] / m.hidden)))
    if exact:
        comments = [f"flavor {flavor} has this plan's shape: {shape(pf)}"]
    elif version == "0.3.0":
        comments = [f"model: the plan's own sizes on llama3 flavor {flavor}'s layout (registered as flavor "
                    f"\"perfmodel\"): {shape(pf)}"]
    else:
        dim, nl, nh, nkv, ffn = LLAMA3_FLAVORS[flavor]
        comments = [(f"flavor {flavor} is approximate (the nearest llama3 flavor: dim={dim} n_layers={nl} "
                    f"n_heads={nh} n_kv_heads={nkv} ffn={ffn}); the plan's shape is: {shape(pf)}")]
        notes.append(f"model shape of {m.name} (n_layers={m.n_layers} hidden={m.hidden} n_heads={m.n_heads} "
                     f"n_kv_heads={m.n_kv_heads} ffn_hidden={m.ffn_hidden}): torchtitan {version} has no such "
                     f"flavor and its TOML names a flavor only; exported as llama3 {flavor}; add a flavor with "
                     "these sizes to torchtitan/models/llama3 (torchtitan 0.3.0's Python config takes them)")
    if m.head_dim * m.n_heads != m.hidden and not (version == "0.3.0" and not exact):
        notes.append(f"head_dim = {m.head_dim} != hidden / n_heads: torchtitan's llama3 derives head_dim = "
                     "dim / n_heads")
    notes += _architecture_notes(pf, "llama3")
    if m.vocab != 128256:
        comments.append(f"vocab = {m.vocab}: torchtitan takes vocab_size from the tokenizer; use one with "
                        f"{m.vocab} tokens")
    return "llama3", flavor, comments, notes


def llama3_flavor(pf: PlanFile) -> str | None:
    """The llama3 flavor with exactly the plan's dense shape, if any."""
    dims = llama3_shape(pf.model)
    return next((f for f, s in LLAMA3_FLAVORS.items() if s == dims), None)


def flavor_layers(name: str, flavor: str) -> int:
    """n_layers of torchtitan's flavor."""
    return (LLAMA3_FLAVORS if name == "llama3" else MOE_FLAVORS[name])[flavor][1]


def _architecture_notes(pf: PlanFile, name: str) -> list[str]:
    """What torchtitan's model `name` (llama3, deepseek_v3, qwen3: SwiGLU, RMSNorm, RoPE, no biases, no dropout,
    full attention) cannot follow of the model's architecture."""
    m = pf.model
    notes = []
    untied = f"{name}'s MoE flavors untie" if name == "qwen3" else f"{name} unties"
    for bad, what in ((m.mlp != "swiglu", f"mlp={m.mlp} ({name} is SwiGLU)"),
                      (m.norm != "rmsnorm", f"norm={m.norm} ({name} uses RMSNorm)"),
                      (m.position != "rope", f"position={m.position} ({name} uses RoPE)"),
                      (m.tie_embeddings, f"tie_embeddings=True ({untied} embedding and output)"),
                      (m.linear_bias != "none", f"linear_bias={m.linear_bias} ({name} has no biases)"),
                      (m.dropout > 0, f"dropout={m.dropout} (torchtitan's {name} has no dropout)"),
                      (m.sliding_window is not None, f"sliding_window={m.sliding_window} ({name} attends fully)"),
                      (m.global_attention is not None, f"global_attention={m.global_attention} ({name} has one "
                                                       "head shape)")):
        if bad:
            notes.append(f"{what}: not expressible in torchtitan's {name} model; exported as {name}'s architecture")
    return notes



def expert_notes(pf: PlanFile, name: str, flavor: str, shard: int, version: str) -> tuple[list[str], list[str]]:
    """(comments, not-expressed notes) for ep / etp and the routing (nearest_plan set etp, the dispatcher and
    moe_overlap to what the version runs), against torchtitan/distributed/
    parallel_dims.py: 0.2.2, with ep > 1 etp is 1 or tp and ep takes its ranks from data_parallel_shard_degree
    x cp, with etp = 1 from tp too; 0.3.0 has no etp (experts whole on their ep rank) and ep always borrows
    from dp_shard x cp x tp."""
    p = pf.plan
    comments, notes = [], []
    ep, tp, cp = p.ep, p.tp, p.cp
    etp = 1 if version == "0.3.0" and ep > 1 else p.etp  # nearest_plan left etp = tp at ep = 1, else 1 or tp
    if ep > 1:
        borrowed = cp if etp == tp else cp * tp
        over = shard * borrowed
        what = "data_parallel_shard_degree x cp" if etp == tp else "data_parallel_shard_degree x cp x tp"
        if ep % borrowed or over % ep:
            notes.append(f"ep={ep} with etp={etp}: torchtitan takes the expert-parallel ranks from {what} = {over} "
                         f"and needs ep a multiple of {borrowed} dividing {over}; exported as planned, which "
                         "torchtitan refuses")
        else:
            comments.append(f"expert_parallel_degree {ep}: the experts split over {ep} of the {what} = {over} "
                            f"ranks, expert data parallelism (FSDP) over the other {over // ep}; "
                            + ("the experts are tensor-parallel like the rest (etp = tp)" if etp == tp and tp > 1
                               else "each expert whole on its rank (etp = 1)"))
    if p.moe_capacity_factor is not None:
        notes.append(f"moe_capacity_factor={p.moe_capacity_factor:g}: torchtitan's MoE is dropless (every routed token "
                     "runs; no capacity key); not expressed, so expect the planned drops not to happen")
    if p.expert_imbalance == 1.0:
        notes.append("expert_imbalance=1.0: the plan prices perfectly balanced routing; torchtitan's routers balance "
                     "by a per-expert bias (load_balance_coeff), not exactly; debug.moe_force_load_balance = true "
                     "forces it round-robin for debugging only, so it is not set")
    else:
        comments.append(f"expert_imbalance = {p.expert_imbalance}: the plan prices the busiest expert at "
                        f"{p.expert_imbalance} x the mean tokens; the run's routing decides it (no torchtitan key)")
    if version == "0.3.0":
        return comments, notes
    if p.cp > 1 and (name, flavor) in _FLEX_ATTENTION:
        notes.append(f"cp={p.cp}: torchtitan's {name} {flavor} attends with FlexAttention (use_flex_attn), which has "
                     "no context parallelism in torchtitan 0.2.2 ('CP support for FlexAttention is still in "
                     "progress'); use a flavor with use_flex_attn = False")
    return comments, notes


