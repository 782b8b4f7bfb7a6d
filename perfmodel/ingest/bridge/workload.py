"""Megatron-Bridge's WorkloadBaseConfig tables (scripts/performance/configs/<model>/<model>_workload_base_configs.py,
2025-11 to 2026-07): module-level dataclass instances, one per model / GPU / compute dtype, that Bridge's perf scripts
lay over a base recipe with `set_workload_base_configs(cfg, settings)`. Read as data: `WorkloadBaseConfig(k=v)`,
`replace(OTHER, k=v)` and `NAME = OTHER` (never run).

Sources, NVIDIA-NeMo/Megatron-Bridge at c3e43e6: the dataclass and its defaults scripts/performance/utils/utils.py:
24-62, what set_workload_base_configs writes scripts/performance/utils/overrides.py:65-175.
"""

from __future__ import annotations

import ast
from typing import Any

from ..sources import literal

CLASS = "WorkloadBaseConfig"
UTILS = "scripts/performance/utils/utils.py"
OVERRIDES = "scripts/performance/utils/overrides.py"
AT = "c3e43e6"
# the dataclass's fields -> (default, line of utils.py at c3e43e6)
DEFAULTS: dict[str, tuple[Any, int]] = {
    "num_gpus": (1, 35), "tensor_model_parallel_size": (1, 37), "pipeline_model_parallel_size": (1, 38),
    "context_parallel_size": (1, 39), "virtual_pipeline_model_parallel_size": (None, 40),
    "expert_model_parallel_size": (1, 41), "expert_tensor_parallel_size": (None, 42), "global_batch_size": (1, 44),
    "micro_batch_size": (1, 45), "use_megatron_fsdp": (None, 47), "cuda_graph_impl": (None, 48),
    "cuda_graph_scope": (None, 49), "cpu_offloading_num_layers": (None, 50), "recompute_num_layers": (None, 51),
    "recompute_modules": (None, 52), "moe_flex_dispatcher_backend": (None, 55), "moe_a2a_overlap": (False, 56),
    "peft": (None, 57),
}
# field -> (the ConfigContainer key set_workload_base_configs assigns it to, line of overrides.py at c3e43e6)
ASSIGNED = {"tensor_model_parallel_size": ("model.tensor_model_parallel_size", 150),
            "pipeline_model_parallel_size": ("model.pipeline_model_parallel_size", 151),
            "context_parallel_size": ("model.context_parallel_size", 152),
            "virtual_pipeline_model_parallel_size": ("model.virtual_pipeline_model_parallel_size", 153),
            "expert_model_parallel_size": ("model.expert_model_parallel_size", 154),
            "expert_tensor_parallel_size": ("model.expert_tensor_parallel_size", 155),
            "global_batch_size": ("train.global_batch_size", 157), "micro_batch_size": ("train.micro_batch_size", 158)}


def instances(tree: ast.Module, file: str) -> dict[str, dict[str, tuple[Any, str]]]:
    """The module's WorkloadBaseConfig instances, name -> field -> (value, where): each field the table states
    (its line), the dataclass's default for the rest (cited)."""
    out: dict[str, dict[str, tuple[Any, str]]] = {}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        name, node = stmt.targets[0].id, stmt.value
        if isinstance(node, ast.Name) and node.id in out:  # X_FP8_MX = X_FP8_CS
            out[name] = out[node.id]
            continue
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func).rsplit(".", 1)[-1]
        if func == CLASS and not node.args:
            fields = {k: (v, f"{UTILS}:{line} at {AT} (the dataclass's default)") for k, (v, line) in DEFAULTS.items()}
        elif func == "replace" and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in out:
            fields = dict(out[node.args[0].id])
        else:
            continue
        for kw in node.keywords:
            if kw.arg in DEFAULTS:
                v = literal(kw.value, {})
                fields[kw.arg] = (v, f"{file}:{kw.value.lineno} {name}")
        out[name] = fields
    return out


def listed(tree: ast.Module, found: dict) -> list[str]:
    """The table's configs: its __all__ where it has one (the names Bridge's scripts look up), else every instance."""
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            names = literal(stmt.value, {})
            if isinstance(names, list):
                return [n for n in names if n in found]
    return list(found)


def writes(settings: dict[str, tuple[Any, str]]) -> list[tuple[str, Any, str]]:
    """The ConfigContainer keys set_workload_base_configs(cfg, settings) sets, (key, value, where): the assigned
    fields, sequence_parallel = tp > 1, and the overrides each optional field turns on."""
    out = []
    for field, (key, line) in ASSIGNED.items():
        v, at = settings[field]
        out.append((key, v, f"{at}; {OVERRIDES}:{line} at {AT}"))
    tp, at = settings["tensor_model_parallel_size"]
    if isinstance(tp, int):
        out.append(("model.sequence_parallel", tp > 1, f"{at}; tp > 1 ({UTILS}:59-62, {OVERRIDES}:156 at {AT})"))
    fsdp, at = settings["use_megatron_fsdp"]
    if fsdp:  # _set_megatron_fsdp_overrides
        out += [("ddp.use_megatron_fsdp", True, f"{at}; {OVERRIDES}:70 at {AT}"),
                ("ddp.data_parallel_sharding_strategy", "optim_grads_params", f"{at}; {OVERRIDES}:71 at {AT}")]
    impl, at = settings["cuda_graph_impl"]
    if impl is not None:  # _set_cuda_graph_overrides
        out.append(("model.cuda_graph_impl", impl, f"{at}; {OVERRIDES}:99 at {AT}"))
    scope, at = settings["cuda_graph_scope"]
    if scope is not None:
        out.append(("model.cuda_graph_scope", [scope] if isinstance(scope, str) else scope,
                    f"{at}; {OVERRIDES}:112 at {AT}"))
    a2a, at = settings["moe_a2a_overlap"]
    if a2a:  # _set_moe_a2a_overlap_overrides
        out.append(("comm_overlap.overlap_moe_expert_parallel_comm", True, f"{at}; {OVERRIDES}:141 at {AT}"))
    offload, at = settings["cpu_offloading_num_layers"]
    if offload is not None:  # _set_recompute_overrides: cpu_offloading on, then the layers
        out += [("model.cpu_offloading", True, f"{at}; {OVERRIDES}:125 at {AT}"),
                ("model.cpu_offloading_num_layers", offload, f"{at}; {OVERRIDES}:127 at {AT}")]
    layers, at = settings["recompute_num_layers"]
    if layers is not None:
        out += [("model.recompute_granularity", "full", f"{at}; {OVERRIDES}:129 at {AT}"),
                ("model.recompute_method", "block", f"{at}; {OVERRIDES}:130 at {AT}"),
                ("model.recompute_num_layers", layers, f"{at}; {OVERRIDES}:131 at {AT}")]
    modules, at = settings["recompute_modules"]
    if modules is not None:
        out.append(("model.recompute_modules", modules, f"{at}; {OVERRIDES}:133 at {AT}"))  # granularity: the recipe's
    return out
