"""Megatron-Bridge's year-old perf-config formats, each read as data into the `section.key -> (value, where)` a recipe
gives (`perfmodel import --from bridge`), with the base recipe the format lays its settings over:

- a WorkloadBaseConfig table alone (scripts/performance/configs/<model>/<model>_workload_base_configs.py, 2025-11 to
  2026-07): each instance a config (--name), laid over the recipe its name is built from (utils.py:79-82 at c3e43e6)
  by set_workload_base_configs; its compute dtype is in its name;
- a perf_matrix override YAML (scripts/performance/configs/<model>/<model>_<size>_llm_pretrain.yaml, 2025-09): a
  `ConfigContainer:` section merged over the recipe, then the entry perf_matrix.<gpu>.num_gpus_<n>.<dtype> (its
  `common` block, then the dtype's) applied as utils/helpers.py:123-152 at 8cec56d does; the recipe is the one
  run_script.py:23-26 imports for the file's model, named by the file (setup_experiment.py:53).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from ...errors import InputError
from .layers import Stated
from .names import name_says, precision_recipe
from .workload import instances, listed, writes

HELPERS = "scripts/performance/utils/helpers.py"
# perf_matrix entry word -> (ConfigContainer key, helpers.py line at 8cec56d, the value .get() falls back to; None:
# the recipe's own value stays)
MATRIX = {"mbs": ("train.micro_batch_size", 137, None), "gbs": ("train.global_batch_size", 138, None),
          "seq_length": ("dataset.sequence_length", 139, None),
          "tp": ("model.tensor_model_parallel_size", 141, 1), "pp": ("model.pipeline_model_parallel_size", 142, 1),
          "vp": ("model.virtual_pipeline_model_parallel_size", 143, "None"),
          "cp": ("model.context_parallel_size", 144, 1),
          "ep": ("model.expert_model_parallel_size", 145, 1), "etp": ("model.expert_tensor_parallel_size", 146, "None"),
          "fsdp": ("ddp.use_megatron_fsdp", 148, False), "cuda_graphs": ("model.enable_cuda_graph", 88, False),
          "recompute_num_layers": ("model.recompute_num_layers", 99, None),
          "cpu_offloading_num_layers": ("model.cpu_offloading_num_layers", 105, None)}
NOT_KEYS = {"num_gpus_per_node": "nodes of the launch: the device count is the entry's num_gpus_<n>"}


class Config:
    """One config of such a file: its keys, the recipe it is laid over, the device count it states (key, count,
    where), and the words it states that set no key (key, value, where, why)."""

    def __init__(self, final: dict[str, Stated], base: str | None, gpus: tuple[str, Any, str] | None,
                 notes: list[tuple[str, Any, str, str]], named: str) -> None:
        self.final, self.base, self.gpus, self.notes = final, base, gpus, notes
        self.named = named  # where the base recipe is named


def table_config(tree: ast.Module, file: str, name: str | None) -> Config | None:
    """A WorkloadBaseConfig instance of a table module (None: the module holds none)."""
    found = instances(tree, file)
    if not found:
        return None
    names = listed(tree, found)
    if name is None or name not in found:
        head = "--name is needed" if name is None else f"--name {name}: no such config in {file}"
        raise InputError(f"{head}: {file} defines {len(names)} WorkloadBaseConfig configs; valid: --name one of "
                         f"{', '.join(names)}")
    settings = found[name]
    final: dict[str, Stated] = {}
    for key, v, at in writes(settings):
        final[key] = (v, at)
    says = name_says(name)  # f"{model_recipe_name}_{gpu}_{compute_dtype}".upper() + "_BASE_CONFIG"
    recipe = precision_recipe(says.dtype) if says.dtype else None
    if recipe is not None:  # get_precision_config(compute_dtype) of the perf scripts (precision.py:26-43 at c3e43e6)
        final["mixed_precision"] = (recipe, f"the name {name} ({says.dtype}: scripts/performance/utils/utils.py:79-82, "
                                            "precision.py:26-43 at c3e43e6)")
    notes: list[tuple[str, Any, str, str]] = []
    for field in ("moe_flex_dispatcher_backend", "peft"):
        v, at = settings[field]
        if v is not None:
            notes.append((f"{name}.{field}", v, at, "passed to the base recipe's keywords by the pretrain module, "
                          "which is not among the files"))
    return Config(final, says.recipe, (f"{name}.num_gpus", *settings["num_gpus"]), notes,
                  f"{name} (named as scripts/performance/utils/utils.py:79-82 at c3e43e6 builds it)")


def matrix_config(path: Path, data: dict, name: str | None) -> Config:
    """A perf_matrix YAML's entry `name` (gpu.num_gpus_<n>.dtype)."""
    matrix = data.get("perf_matrix")
    entries = {f"{gpu}.{n}.{dtype}": (block.get("common") or {}, over or {})
               for gpu, by_n in (matrix or {}).items() if isinstance(by_n, dict)
               for n, block in by_n.items() if isinstance(block, dict)
               for dtype, over in block.items() if dtype != "common"}
    if name not in entries:
        head = "--name is needed" if name is None else f"--name {name}: no such perf_matrix entry"
        raise InputError(f"{head}: {path.name} holds {len(entries)} perf_matrix entries; valid: --name one of "
                         f"{', '.join(entries) or 'none'}")
    gpu, n, dtype = name.split(".")
    final: dict[str, Stated] = {}
    notes: list[tuple[str, Any, str, str]] = []
    top = data.get("ConfigContainer") or {k: v for k, v in data.items() if k != "perf_matrix"}
    for section, keys in top.items():
        for key, v in (keys.items() if isinstance(keys, dict) else [("", keys)]):
            final[f"{section}.{key}".rstrip(".")] = (v, f"{path.name} ConfigContainer.{section}")
    common, over = entries[name]
    merged = {**common, **over}
    for word, (key, line, fallback) in MATRIX.items():
        if word not in merged and fallback is None:
            continue
        if key in final:
            notes.append((key, final[key][0], final[key][1], f"replaced by perf_matrix.{name}, which "
                          f"helpers.py:123-152 (8cec56d) applies after the ConfigContainer section"))
        if word in merged:
            final[key] = (merged[word], f"{path.name} perf_matrix.{name} {word}; {HELPERS}:{line} at 8cec56d")
        else:  # .get(word, fallback) replaces the recipe's value
            final[key] = (None if fallback == "None" else fallback,
                          f"{HELPERS}:{line} at 8cec56d (perf_matrix.{name} leaves {word} out)")
    for word, v in merged.items():
        if word not in MATRIX:
            notes.append((f"perf_matrix.{name}.{word}", v, path.name, NOT_KEYS.get(word, "a perf_matrix word "
                          "helpers.py (8cec56d) does not apply")))
    tp = final["model.tensor_model_parallel_size"][0]
    if isinstance(tp, int):
        final["model.sequence_parallel"] = (tp > 1, f"tp > 1 ({HELPERS}:152 at 8cec56d)")
    if isinstance(merged.get("cpu_offloading_num_layers"), int) and merged["cpu_offloading_num_layers"] > 0:
        final["model.cpu_offloading"] = (True, f"{HELPERS}:102-103 at 8cec56d")  # set beside the layers
    if merged.get("recompute_num_layers") is not None:
        final["model.recompute_granularity"] = ("full", f"{HELPERS}:97 at 8cec56d")
    recipe = precision_recipe(dtype)
    if recipe is None:
        raise InputError(f"bridge config: perf_matrix.{name}: compute dtype {dtype!r} is not one Bridge's perf scripts "
                         "build; valid: bf16, fp8_cs, fp8_ds, fp8_mx, fp8_ss (utils/helpers.py:65-81 at 8cec56d)")
    final["mixed_precision"] = (recipe, f"{path.name} perf_matrix.{name} ({dtype}: get_precision_config, "
                                        f"{HELPERS}:65-81 at 8cec56d)")
    count = n.removeprefix("num_gpus_")
    gpus = (f"perf_matrix.{gpu}.{n}", int(count), path.name) if count.isdigit() else None
    words = path.stem.split("_")  # {model_name}_{model_size}_{domain}_{task}
    base = "_".join(words[:-2] + [words[-1], "config"]) if len(words) > 2 else None
    return Config(final, base, gpus, notes, f"{path.name} (named as setup_experiment.py:53 at 8cec56d builds it; "
                                            "run_script.py:23-26 imports each model's pretrain_config)")
