"""Megatron-Core's activation offloading to host memory, as a plan states it (the cost is cost.memory.act_offload's):

- layer-level (TransformerConfig.cpu_offloading, cpu_offloading_num_layers; Plan.activation_offload_layers):
  Transformer Engine's cpu_offload context around each layer holds every tensor the first N layers save for their
  backward in host memory between their forward and backward. Megatron-Core allows it only without pipeline
  parallelism and without recompute, and for fewer layers than the model has (megatron/core/transformer/
  transformer_config.py:1765-1780 at NVIDIA/Megatron-LM 2a75ac1, the commit Megatron-Bridge 067f987 pins);
- fine-grained (fine_grained_activation_offloading, offload_modules; Plan.offload_modules): what the named
  submodules save for the backward goes to host memory, layer by layer (megatron/core/pipeline_parallel/
  fine_grained_activation_offload.py at 2a75ac1); not with cpu_offloading, attn_proj only with core_attn, and
  fused_group_mlp not with expert_fc1 / moe_act (transformer_config.py:1905-1962 at 2a75ac1).
"""

from __future__ import annotations

from typing import Literal

from ...errors import InputError

# Megatron-Core's offload_modules (transformer_config.py:1244-1256 at 2a75ac1): each offloads what the submodule
# saves for its backward inside its offload group
OffloadModule = Literal["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act",
                        "fused_group_mlp"]
OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act",
                   "fused_group_mlp")
MOE_MODULES = ("expert_fc1", "moe_act", "fused_group_mlp")
AT = "megatron/core/transformer/transformer_config.py at NVIDIA/Megatron-LM 2a75ac1"


def check_act_offload(p: dict, model) -> None:
    """activation_offload_layers and offload_modules against the plan and the model, as Megatron-Core checks them
    (module docstring); sorts offload_modules and drops an empty list."""
    n, mods = p.get("activation_offload_layers", 0), p.get("offload_modules")
    if n:
        bad = ([f"pp = {p['pp']}"] if p["pp"] > 1 else []) + (
            [f"recompute = {p['recompute']}"] if p["recompute"] != "none" else [])
        if bad:
            raise InputError(f"activation_offload_layers = {n} with {' and '.join(bad)}: Megatron-Core offloads layers "
                             f"only without pipeline parallelism and recompute ({AT}:1772-1780); valid: pp = 1 and "
                             "recompute = none, or activation_offload_layers = 0")
        if n >= model.n_layers:
            raise InputError(f"activation_offload_layers = {n} with {model.n_layers} layers: the last layer is never "
                             f"offloaded ({AT}:1765-1770); valid: 0..{model.n_layers - 1}")
    if not mods:
        p["offload_modules"] = None
        return
    mods = sorted(dict.fromkeys(mods), key=OFFLOAD_MODULES.index)
    if n:
        raise InputError(f"offload_modules = {mods} with activation_offload_layers = {n}: Megatron-Core refuses "
                         f"fine-grained offloading beside cpu_offloading ({AT}:1905-1908); valid: one of them")
    if "attn_proj" in mods and "core_attn" not in mods:
        raise InputError(f"offload_modules = {mods}: attn_proj's input is core_attn's output, which core_attn's "
                         f"backward needs ({AT}:1925-1930); valid: add core_attn, or drop attn_proj")
    if "fused_group_mlp" in mods and {"expert_fc1", "moe_act"} & set(mods):
        raise InputError(f"offload_modules = {mods}: fused_group_mlp offloads the whole grouped MLP ({AT}:1952-1962); "
                         "valid: fused_group_mlp, or expert_fc1 / moe_act")
    if model.moe is None and set(mods) & set(MOE_MODULES):
        raise InputError(f"offload_modules = {mods}: {', '.join(sorted(set(mods) & set(MOE_MODULES)))} offload a MoE "
                         f"layer's experts, which {model.name} has not; valid for it: "
                         f"{', '.join(m for m in OFFLOAD_MODULES if m not in MOE_MODULES)}")
    inside = sorted(set(mods) & set(MOE_MODULES))
    if inside and p["recompute"] == "selective" and "moe" in (p.get("recompute_modules") or ()):
        raise InputError(f"offload_modules = {mods} with recompute_modules moe: the whole MoE MLP is rebuilt, so "
                         f"nothing inside it is kept to offload ({AT}:1931-1941); valid: drop {', '.join(inside)} or moe")
    p["offload_modules"] = mods
