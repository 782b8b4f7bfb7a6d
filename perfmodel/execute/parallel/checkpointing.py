"""Activation checkpointing (torchtitan's apply_ac) of the plan's recompute policy, with torch's own APIs
(torch.utils.checkpoint, non-reentrant, through checkpoint_wrapper), on one pipeline chunk's stage module:

  none       everything kept
  selective  Megatron-Core --recompute-granularity selective of `recompute_modules` (default core_attn; Korthikanti
             et al. 2022, Sec. 5: the attention core's activations are the large, cheap-to-recompute ones), each
             module checkpointed on its own:
               core_attn        the attention core (block.attention.core)
               mlp              a dense layer's MLP (block.mlp)
               layernorm        the two norms (block.norm1, block.norm2)
               moe              a MoE layer's MLP (router, experts, shared experts)
               moe_act          the routed experts' activation (block.mlp.experts.act)
               shared_experts   the shared experts' MLP (block.mlp.shared)
             A module a block does not have is skipped there (mlp on a MoE layer, the MoE ones on a dense layer);
             moe_act and shared_experts are not wrapped again inside a checkpointed moe. mla_up_proj is refused:
             the executor builds no latent attention. Megatron-Core checkpoints layernorm and moe_act "without
             output" (the module's output storage is freed once its consumers have saved it and refilled in the
             backward); torch's checkpoint keeps a checkpointed module's output wherever a later op saves it, so
             here layernorm drops only what the norms keep themselves (statistics, normalised input) and moe_act
             what the activation keeps (SiLU(gate) or GeLU's input copy), not the output the next matmul keeps.
  full       whole blocks (Megatron-LM --recompute-granularity full) per pipeline chunk, by `recompute_method`:
             uniform: groups of `recompute_num_layers` consecutive blocks (default 1), each group one checkpoint
             (only its input kept; the last group may be shorter); block: the first `recompute_num_layers` blocks
             each checkpointed, the rest keep everything.
  per-op     torchtitan's per-op selective checkpointing (activation_checkpoint.mode = "selective",
             selective_ac_option = "op"): each block is checkpointed with a policy
             (torch.utils.checkpoint.create_selective_checkpoint_contexts, torchtitan's _get_custom_policy) that
             saves the outputs of SDPA, of the functional reduce-scatters and aten.max, and of every second matmul
             of the block (the 1st, 3rd, ...: wq, wv, w1, w2 of wq wk wv wo w1 w3 w2), and recomputes the rest.
             torchtitan's bias-free models issue only aten.mm; a linear with a bias (GPT-2) issues aten.addmm, which
             is counted as a matmul here too, as the cost model counts it (cost.compute.operator_table.per_op_kept).

Wrapping keeps the modules (tensor-parallel and expert-parallel hooks, context parallelism's AttentionCore.context)
where they were; only parameter names change: checkpoint_wrapper adds "_checkpoint_wrapped_module." and a uniform
group of several blocks holds them as "layers.<first>._ac_group.<layer>."; `plain_name` takes both away, so each
parameter is initialised (train.initialise) under its model name whatever the policy. Checkpoints keep the
wrapped names (torch's get_state_dict drops the checkpoint_wrapper prefix, not the group), which is enough:
a save is resumed only by the same plan (manifest.Identity)."""

from __future__ import annotations

import re
from collections import defaultdict

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    checkpoint_wrapper,
)
from torch.utils import checkpoint as _checkpoint
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from ...errors import InputError
from ...spec.plan.recompute import DEFAULT_RECOMPUTE_MODULES
from ..transformer import MLP, MoE

WRAPPED = "_checkpoint_wrapped_module."  # the name prefix checkpoint_wrapper adds
GROUP = "_ac_group"  # the ModuleDict of a uniform full-recompute group of several blocks
_GROUPED = re.compile(rf"(^|\.)layers\.\d+\.{GROUP}\.")


class BlockGroup(nn.Module):
    """Consecutive transformer blocks run one after the other: one checkpointed unit of full recompute with
    recompute_method uniform and recompute_num_layers > 1. The blocks sit in a ModuleDict under their own layer
    keys (GROUP), so that `plain_name` finds each parameter's model name."""

    def __init__(self, blocks: dict[str, nn.Module]):
        super().__init__()
        setattr(self, GROUP, nn.ModuleDict(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in getattr(self, GROUP).values():
            x = block(x)
        return x


def _op(namespace, name: str, overload: str = "default"):
    """torch.ops.<namespace>.<name>.<overload>, or None where this torch build has no such operator."""
    packet = getattr(namespace, name, None)
    return getattr(packet, overload, None) if packet is not None else None


def _save_list() -> tuple[set, set]:
    """(ops whose outputs per-op checkpointing saves, the matmuls among them): torchtitan's _save_list (aten.mm,
    the SDPA kernels, the functional reduce-scatter, aten.max), with CPU's flash SDPA and aten.addmm added."""
    aten = torch.ops.aten
    mms = {aten.mm.default, aten.addmm.default}
    sdpa = [_op(aten, n) for n in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                                   "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
                                   "_scaled_dot_product_fused_attention_overrideable")]
    other = [_op(getattr(torch.ops, "_c10d_functional"), "reduce_scatter_tensor"), aten.max.default]
    return {o for o in (*mms, *sdpa, *other) if o is not None}, mms


SAVE, MATMULS = _save_list()
# Profiler markers (torch.profiler.record_function, which FSDP2's hooks put around their work) compute nothing, and
# an FSDP2 unit nested inside a checkpointed block (the routed experts' own fully_shard under expert parallelism)
# enters a different number of them in the recompute than in the forward, which selective checkpointing would
# take for a changed region ("invocation index 2 encountered during backward but not found in storage").
# torch.utils.checkpoint.SAC_IGNORED_OPS (public) is the set of ops it runs without counting or caching them.
_checkpoint.SAC_IGNORED_OPS.update(o for o in (_op(torch.ops.profiler, "_record_function_enter"),
                                               _op(torch.ops.profiler, "_record_function_enter_new"),
                                               _op(torch.ops.profiler, "_record_function_exit", "_RecordFunction"))
                                   if o is not None)


def per_op_policy(meta: dict):
    """torchtitan's _get_custom_policy: MUST_SAVE the outputs of SAVE's ops except every second matmul of the
    block (counted apart in the forward and in the recompute, so both pick the same ones), PREFER_RECOMPUTE the
    rest."""
    def policy(ctx, func, *args, **kwargs):
        key = "recompute_mm_count" if ctx.is_recompute else "forward_mm_count"
        if func in MATMULS:
            meta[key] += 1
        save = func in SAVE and not (func in MATMULS and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def per_op_context():
    """A fresh (forward, recompute) context pair per checkpointed call, with its own matmul counts."""
    return create_selective_checkpoint_contexts(per_op_policy(defaultdict(int)))


def _wrap(parent: nn.Module, attr: str) -> None:
    setattr(parent, attr, checkpoint_wrapper(getattr(parent, attr)))


def _selective(block: nn.Module, modules: list[str]) -> None:
    mlp = block.mlp
    moe = isinstance(mlp, MoE)
    if "core_attn" in modules:
        _wrap(block.attention, "core")
    if "layernorm" in modules:
        _wrap(block, "norm1")
        _wrap(block, "norm2")
    if ("mlp" in modules and isinstance(mlp, MLP)) or ("moe" in modules and moe):
        _wrap(block, "mlp")
        return
    if "moe_act" in modules and moe:
        _wrap(mlp.experts, "act")
    if "shared_experts" in modules and moe and mlp.shared is not None:
        _wrap(mlp, "shared")


def apply_ac(stage: nn.Module, mode: str, modules: list[str] | None = None, num_layers: int | None = None,
             method: str = "uniform") -> None:
    """Checkpoint the blocks of `stage` (one pipeline chunk, before it is materialised) as the plan's recompute
    policy says: Plan.recompute, recompute_modules, recompute_num_layers, recompute_method."""
    if mode == "none":
        return
    keys = list(stage.layers)
    if mode == "selective":
        modules = list(modules or DEFAULT_RECOMPUTE_MODULES)
        if "mla_up_proj" in modules:
            raise InputError("recompute_modules: 'mla_up_proj' recomputes latent attention's up-projections, which "
                             "the executor does not build (execute.transformer: grouped-query attention only); valid "
                             "for it: core_attn, mlp, layernorm, moe, moe_act, shared_experts")
        for key in keys:
            _selective(stage.layers[key], modules)
    elif mode == "per-op":
        for key in keys:
            stage.layers[key] = checkpoint_wrapper(stage.layers[key], context_fn=per_op_context,
                                                   preserve_rng_state=False)  # as torchtitan: no dropout here
    elif mode == "full":
        n = num_layers or 1
        if method == "block":
            for key in keys[:n]:
                stage.layers[key] = checkpoint_wrapper(stage.layers[key])
        elif method == "uniform":
            grouped = {}
            for i in range(0, len(keys), n):
                part = keys[i:i + n]
                unit = (stage.layers[part[0]] if len(part) == 1
                        else BlockGroup({k: stage.layers[k] for k in part}))
                grouped[part[0]] = checkpoint_wrapper(unit)
            stage.layers = nn.ModuleDict(grouped)
        else:
            raise InputError(f"recompute_method = {method!r}; valid: uniform, block")
    else:
        raise InputError(f"recompute = {mode!r}; valid here: none, selective, full, per-op")


def plain_name(name: str) -> str:
    """A parameter's name without the wrappers' prefixes (the name its initial value is drawn under):
    'layers.4._checkpoint_wrapped_module._ac_group.5.mlp.w1.weight' -> 'layers.5.mlp.w1.weight'."""
    return _GROUPED.sub(r"\1layers.", name.replace(WRAPPED, ""))
