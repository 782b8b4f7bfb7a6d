"""The Megatron-Bridge functions a recipe calls that perfmodel reads without following them (`perfmodel import --from
bridge`): what each sets on the config it is given, from Bridge's source at a pinned commit (cited in every key's
source), so a perf recipe read without its helper modules states what it runs.

- apply_flex_dispatcher_backend(model, backend): the flex dispatcher (training/flex_dispatcher_backend.py);
- _perf_precision(dtype) / get_precision_config(dtype[, fp8 recipe]): a named precision recipe (bridge.names);
- set_deepseek_v3_pipeline_model_parallel_layout(model, layout): the layout it is given;
- set_workload_base_configs(cfg, table entry): a WorkloadBaseConfig's settings (bridge.workload);
- the perf recipes' helpers (perf_recipes/**/common.py at 067f987: _benchmark_common, _apply_gpt_oss_20b_common_
  configs, _with_global_batch_size, ...): the keys they set unconditionally (bridge.bases.json).
"""

from __future__ import annotations

from typing import Any

from . import bases as bridge_bases
from .names import PRECISION_HELPERS, precision_recipe
from .objects import Noted, Obj, Write, member
from .workload import CLASS as WORKLOAD, writes as workload_writes
from ..reading import NotRead

FLEX_CALL = "apply_flex_dispatcher_backend"  # megatron/bridge/training/flex_dispatcher_backend.py
LAYOUT_CALL = "set_deepseek_v3_pipeline_model_parallel_layout"  # recipes/deepseek/h100/deepseek_v3.py:71-84 at 067f987
WORKLOAD_CALL = "set_workload_base_configs"  # scripts/performance/utils/overrides.py:148-175 at c3e43e6
NOT_HANDLED = object()
# why a value is not read (perfmodel.ingest.reading.NotRead)
CALL = "a call this import does not follow"
UNPASSED = "an argument the call does not pass"


def bridge_call(recipe, short: str, args: list, kwargs: dict, where: str) -> Any:
    """The value of a call of one of the Bridge functions above (its writes recorded on `recipe`), or NOT_HANDLED."""
    if short == FLEX_CALL and args and isinstance(args[0], Obj):
        backend = args[1] if len(args) > 1 else kwargs.get("moe_flex_dispatcher_backend", (None, ""))[0]
        if backend in ("deepep", "hybridep"):
            recipe.writes.append(Write(args[0], "moe_token_dispatcher_type", "flex", f"{where} ({FLEX_CALL} with "
                                     f"{backend}; it falls back to alltoall on GPUs its backend does not serve)"))
            args[0].attrs["moe_token_dispatcher_type"] = "flex"
        return None
    if short in PRECISION_HELPERS and args and all(isinstance(a, str) for a in args[:2]):
        named = precision_recipe(*args[:2])
        if named is not None:  # _perf_precision("fp8_cs"): a named recipe, gradients reduced in bf16
            obj = Obj("precision", named, at=where)
            if short == "_perf_precision":
                obj.attrs["grad_reduce_in_fp32"] = False
                recipe.writes.append(Write(obj, "grad_reduce_in_fp32", False, f"{where} (_perf_precision sets it: "
                                         "perf_recipes/_common.py:122 at 067f987)"))
            return obj
    if short == LAYOUT_CALL and args and isinstance(args[0], Obj):
        layout = args[1] if len(args) > 1 else kwargs.get("layout", (None, ""))[0]
        if layout is None and not kwargs.get("mtp_standalone", (False,))[0]:  # the (pp, vp) map's layout
            layout = deepseek_v3_layout(args[0].attrs)
            if layout is not None:
                args[0].attrs["pipeline_model_parallel_layout"] = layout
                recipe.writes.append(Write(args[0], "pipeline_model_parallel_layout", layout, f"{where} ({LAYOUT_CALL}"
                                         f" without a layout: its map's for the pp and vp the config has then, "
                                         f"{DEEPSEEK_LAYOUT_AT})"))
                return None
        if isinstance(layout, (str, list)):
            args[0].attrs["pipeline_model_parallel_layout"] = layout
            recipe.writes.append(Write(args[0], "pipeline_model_parallel_layout", layout, f"{where} ({LAYOUT_CALL} "
                                     "sets the layout it is given: recipes/deepseek/h100/deepseek_v3.py:82-84)"))
            return None
    if short == WORKLOAD_CALL and len(args) == 2 and isinstance(args[0], Obj) and isinstance(args[1], Obj) \
            and args[1].kind == WORKLOAD:
        table, settings = args[1].origin
        for key, v, at in workload_writes(settings):
            section, attr = key.split(".")
            owner = member(args[0], section)
            owner.attrs[attr] = v
            recipe.writes.append(Write(owner, attr, v, f"{where} ({WORKLOAD_CALL}: {at})"))
        recipe.launch.append((f"{table}.num_gpus", *settings["num_gpus"]))
        return args[0]
    return NOT_HANDLED


# recipes/deepseek/h100/deepseek_v3.py:50-69 at 067f987 (_get_deepseek_v3_pipeline_layout): (pp, vp) -> the decoder
# layers of each virtual stage, the embedding on the first, MTP and the loss after the last one's layers
DEEPSEEK_LAYOUT_AT = "recipes/deepseek/h100/deepseek_v3.py:50-69, 71-100 at 067f987"
DEEPSEEK_LAYOUTS = {(4, 1): [16, 16, 16, 13], (8, 1): [8] * 7 + [5], (4, 2): [8] * 7 + [5],
                    (16, 1): [4] * 15 + [1], (8, 2): [4] * 15 + [1], (4, 4): [4] * 15 + [1]}


def deepseek_v3_layout(model: dict) -> str | None:
    """set_deepseek_v3_pipeline_model_parallel_layout(model) with no layout: its map's layout for the model's pp and
    vp as the recipe has set them by then, as Megatron-Core's shorthand ('Etttt|tttt|...|tmL'); None where the map has
    none for them (Bridge raises) or the recipe's pp / vp are not plain numbers."""
    pp, vp = model.get("pipeline_model_parallel_size"), model.get("virtual_pipeline_model_parallel_size") or 1
    mtp = model.get("mtp_num_layers", 1)
    layers = DEEPSEEK_LAYOUTS.get((pp, vp)) if isinstance(pp, int) and isinstance(vp, int) else None
    if layers is None or not isinstance(mtp, int):
        return None
    stages = ["t" * n for n in layers]
    stages[0], stages[-1] = "E" + stages[0], stages[-1] + "m" * mtp + "L"
    return "|".join(stages)


def base_call(name: str, where: str) -> Obj:
    """The config a function not among the files returns (`cfg = llama31_405b_pretrain_config()`): an object whose
    sections the recipe's own assignments fill; where it is a base recipe Bridge's source holds (bridge.bases), its
    settings are there to read (`cfg.dataset.seq_length = cfg.model.seq_length`), and come in as defaults."""
    obj = Obj("call", name, auto=True, at=where)
    for key, (v, _) in sorted((bridge_bases.base(name) or {"keys": {}})["keys"].items()):
        *sections, attr = key.split(".")
        owner = obj
        for section in sections:
            owner = member(owner, section)
        owner.attrs[attr] = Obj("precision", v) if key == "mixed_precision" else v
    return obj


def apply_helper(recipe, name: str, known: dict, args: list, kwargs: dict, where: str) -> Any:
    """The keys a Bridge helper not among the files sets (bridge.bases, cited), on the config it is given; what it
    returns (that config, or the precision recipe it builds)."""
    bound = dict(zip(known["params"], args)) | {k: v for k, (v, _) in kwargs.items()}
    cfg = bound.get(known["params"][known["config"]]) if known["config"] is not None else None
    said = f"{bridge_bases.BASE}{name}() (not among the files; called at {where}): "
    at = f" at {bridge_bases.commit()[:7]}"
    if isinstance(cfg, Obj):
        for key, (v, line) in known["keys"].items():
            *sections, attr = key.split(".")
            owner = cfg
            for section in sections:
                owner = member(owner, section)
            is_arg = isinstance(v, dict) and "$arg" in v  # a value the call's argument gives
            owner.attrs[attr] = bound.get(v["$arg"], NotRead(v["$arg"], UNPASSED)) if is_arg else v
            recipe.writes.append(Write(owner, attr, owner.attrs[attr], said + line + at))
    else:
        recipe.noted.append(Noted(f"{name}(...)", "", where, f"{name} is not among the files and is not given a "
                                "config this import follows: what it sets is not read"))
    made = known["returns"]
    if isinstance(made, dict):
        obj = Obj("precision", made["precision"], at=where)
        for attr, (v, line) in made["keys"].items():
            obj.attrs[attr] = v
            recipe.writes.append(Write(obj, attr, v, said + line + at))
        return obj
    return cfg if made == "config" else None
