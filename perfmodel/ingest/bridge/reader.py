"""Megatron-Bridge configs in (`perfmodel import --from bridge`): a recipe module (src/megatron/bridge/recipes/**, a
function that builds a ConfigContainer; a perf recipe, src/megatron/bridge/perf_recipes/<model>/<gpu>/*.py) read as
data, the helper modules it calls that the user also passes (recipes/common.py), then the YAML override files
Bridge's scripts take (`--config-file`: model:/train:/... sections) and Hydra-style `section.key=value` override
words, each a later layer. The year-old perf formats (a WorkloadBaseConfig table, a perf_matrix YAML) are read by
bridge.formats into the same keys.

A config that starts from a base recipe the user does not pass (`cfg = llama31_405b_pretrain_config()`) gets the
base's settings it does not override as defaults cited to Bridge's source (bridge.bases), and its model as the
preset the base's name names. What the config's name states (its GPU count and kind, its compute dtype) is read
where nothing else states it (bridge.names).

The recipe's keys are Megatron-Core's TransformerConfig / DDP / optimizer fields, which Megatron-LM's arguments
spell with dashes: they are mapped as perfmodel.ingest.megatron.reader maps those arguments (bridge.fates).
The model is the preset of the HF id (`AutoBridge.from_hf_pretrained`) or the provider class the recipe names.
Stack: megatron-bridge (a recipe file does not say its release).
"""

from __future__ import annotations

import ast
from pathlib import Path

from ...errors import InputError
from ...spec.model.config import ModelConfig
from ...spec.model.catalogue import HF_IDS, load_model, preset_for_hf_id, preset_for_name
from . import bases as bridge_bases
from .bases import BASE
from .fates import fates, value_text
from .formats import Config, matrix_config, table_config
from .keys import PROVIDER_PRESETS, SHAPE
from .layers import Stated, word_layer, yaml_layer
from .names import name_says
from .recipe import Module, Obj, Recipe, Write, flatten, run
from .workload import CLASS, instances
from ..ledger import Imported, Ledger
from ..reading import NotRead
from ..sources import functions, literal, module_names, parse_python, read_yaml

def annotated(tree: ast.Module) -> dict:
    """Module-level `NAME: int = 131072` constants (module_names reads the unannotated ones)."""
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            v = literal(stmt.value, out)
            if not isinstance(v, NotRead):
                out[stmt.target.id] = v
    return out


def recipes_of(mods: list[Module]) -> list[str]:
    """The recipe functions of the modules: public functions that return a ConfigContainer."""
    out = []
    for m in mods:
        for name, fn in m.functions.items():
            ret = ast.unparse(fn.returns) if fn.returns is not None else ""
            if not name.startswith("_") and (ret == "ConfigContainer" or (not ret and name.endswith("_config"))):
                out.append(name)
    return out


def tables(tree: ast.Module, file: str) -> dict:
    """A module's WorkloadBaseConfig instances as config objects, for a pretrain module that reads them by name."""
    return {name: Obj(CLASS, (name, fields), {k: v for k, (v, _) in fields.items()})
            for name, fields in instances(tree, file).items()}


def read(paths: list[Path], name: str | None) -> Imported:
    mods, layers, matrix = [], [], None
    for p in paths:
        if p.suffix == ".py":
            tree = parse_python(p, "Megatron-Bridge recipe module")
            names = module_names(tree) | annotated(tree) | tables(tree, p.name)
            mods.append(Module(p.name, tree, names, functions(tree)))
        elif p.suffix in (".yaml", ".yml") and "perf_matrix" in (data := read_yaml(p, "Megatron-Bridge YAML")):
            matrix = (p, data)
        elif p.suffix in (".yaml", ".yml"):
            layers.append(yaml_layer(p))
        else:
            layers.append(word_layer(p))
    led = Ledger("bridge")
    cfg = config_of(mods, matrix, name, paths)
    if isinstance(cfg, Config):
        final, base, at, home = dict(cfg.final), cfg.base, cfg.named, paths[0]
        for key, v, where, why in cfg.notes:
            led.skip(key, value_text(v), where, why)
        launched = [cfg.gpus] if cfg.gpus else []
    else:
        name, recipe = cfg
        root = run(recipe, name)
        if not isinstance(root, Obj):
            raise InputError(f"Megatron-Bridge recipe {name}: returns {root!r}, not a ConfigContainer this import can "
                             "follow; valid: a recipe that builds and returns its ConfigContainer")
        final = stated(recipe, root, led)
        base, at = (root.origin, root.at) if root.auto else (None, "")
        home = next(p for p, m in zip([p for p in paths if p.suffix == ".py"], mods) if name in m.functions)
        launched = recipe.launch
    overlay(final, layers, led)
    if base:
        final = {k: (v, f"{BASE}{base}() (not among the files): {where} at {bridge_bases.commit()[:7]}")
                 for k, (v, where) in bridge_bases.inherited(base, set(final)).items()} | final
    says = name_says(name or "", home)
    model = model_of(final, led, paths, base, at)
    fates(final, led, model, says.dtype)
    launch(led, name or "", says, launched)
    defaults(final, led, model, base)
    for fate in led.keys:  # what a base recipe or helper not among the files sets: Bridge's defaults, cited
        if fate.source.startswith(BASE) and fate.fate == "mapped":
            fate.fate, fate.why = "default", fate.source + (f"; {fate.why}" if fate.why else "")
            fate.source = "bridge's default"
    return led.imported(paths, model, name)


def config_of(mods: list[Module], matrix, name: str | None, paths: list[Path]) -> Config | tuple[str, Recipe]:
    """The config the files hold: a perf_matrix entry, a WorkloadBaseConfig table's instance, or a recipe function
    (its name and the modules' reader); one line naming --name where there are several."""
    if matrix is not None and not mods:
        return matrix_config(*matrix, name)
    if not mods:
        raise InputError(f"{', '.join(map(str, paths))}: no recipe module (.py); valid: a Megatron-Bridge recipe "
                         "module, then its YAML or key=value overrides (or a perf_matrix YAML)")
    names = recipes_of(mods)
    if not names:
        for m in mods:
            if (cfg := table_config(m.tree, m.file, name)) is not None:
                return cfg
        raise InputError(f"{', '.join(m.file for m in mods)}: no recipe (a public function returning a "
                         "ConfigContainer) and no WorkloadBaseConfig table; valid: a Megatron-Bridge recipe module "
                         "such as recipes/llama/llama3.py")
    if name is None and len(names) != 1:
        raise InputError(f"--name is needed: {', '.join(m.file for m in mods)} define{'s' if len(mods) == 1 else ''} "
                         f"{len(names)} recipes; valid: --name one of {', '.join(names) or 'none'}")
    name = name or names[0]
    if name not in names:
        raise InputError(f"--name {name}: no such recipe in {', '.join(m.file for m in mods)}; valid: "
                         f"{', '.join(names) or 'none (no function returns a ConfigContainer)'}")
    fn = next(m.functions[name] for m in mods if name in m.functions)
    required = [a.arg for a in (fn.args.posonlyargs + fn.args.args)[:len(fn.args.args) + len(fn.args.posonlyargs)
                                                                     - len(fn.args.defaults)]]
    if required:
        raise InputError(f"--name {name} takes {', '.join(required)}, which the recipe leaves to its caller (no "
                         f"default); valid: a recipe whose parameters all have defaults")
    return name, Recipe(mods)


# ---- layers --------------------------------------------------------------------------------------------------

def stated(recipe: Recipe, root: Obj, led: Ledger) -> dict[str, Stated]:
    """The recipe's `section.key -> (value, where)`: its last assignment of each key. Replaced assignments, and
    writes to objects the returned config does not hold, are named as not priced."""
    paths = flatten(root)
    final: dict[str, Stated] = {}
    last: dict[str, Write] = {}
    for w in recipe.writes:
        if id(w.obj) not in paths:
            led.skip(w.attr, value_text(w.value), w.where, "sets an object the returned config does not hold")
            continue
        key = f"{paths[id(w.obj)]}.{w.attr}".lstrip(".")
        if key in last:
            led.skip(key, value_text(last[key].value), last[key].where, f"replaced by {key} = "
                     f"{value_text(w.value)} at {w.where}")
        last[key] = w
    for key, w in last.items():
        final[key] = (w.value, w.where)
    for n in recipe.noted:
        led.skip(n.key, value_text(n.value), n.where, n.why)
    for key, v, where in recipe.passed:
        led.set(key, value_text(v), where, "read by the helper in a branch, a path or the model it builds: the keys "
                "it set are listed")
    return final


def overlay(final: dict[str, Stated], layers: list[dict[str, Stated]], led: Ledger) -> None:
    """Each override layer's keys over `final` (in place); what they replace is named as not priced."""
    for layer in layers:
        for key, (v, where) in layer.items():
            if key in final and not isinstance(final[key][0], Obj):
                led.skip(key, value_text(final[key][0]), final[key][1], f"replaced by {where}: {key} = "
                         f"{value_text(v)}")
            if isinstance(final.get(key, (None,))[0], Obj) and not isinstance(v, dict):
                for sub in [k for k in final if k.startswith(key + ".")]:  # the whole section replaced
                    led.skip(sub, value_text(final[sub][0]), final[sub][1], f"replaced with its section by {where}: "
                             f"{key} = {value_text(v)}")
                    del final[sub]
                final[key] = (Obj("precision", v) if key == "mixed_precision" else v, where)
            else:
                final[key] = (v, where)



# ---- the model -----------------------------------------------------------------------------------------------

def model_of(final: dict[str, Stated], led: Ledger, paths: list[Path], base: str | None = None,
             at: str = "") -> ModelConfig:
    """The preset the config's model names (or, where it starts from a base recipe not among the files, the preset
    the base's name names), its shape fields updated where the config sets them."""
    got, where = final.get("model", (None, ""))
    if (not isinstance(got, Obj) or got.auto or got.origin is None) and base is not None:
        model = load_model(base_preset(base))
        led.set("model", f"{base}()", at or "the config's name", f"the base recipe {base}() is not among the files; "
                f"its model read as the preset {model.name} by the function's name", model__name=model.name)
        return shaped(model, final, led, paths)
    if not isinstance(got, Obj) or got.auto or got.origin is None:
        raise InputError(f"Megatron-Bridge recipe: cfg.model is {value_text(got)}, not a model this import knows "
                         "(AutoBridge.from_hf_pretrained(ID) or a ModelProvider class); valid: a recipe that names "
                         "its model")
    table = HF_IDS if got.kind == "AutoBridge" else PROVIDER_PRESETS
    preset = preset_for_hf_id(str(got.origin)) if got.kind == "AutoBridge" else table.get(str(got.origin))
    if preset is None:
        raise InputError(f"Megatron-Bridge recipe: the model {got.origin!r} has no perfmodel preset; valid: a model "
                         "of perfmodel models list (its Hugging Face id, or a ModelProvider class perfmodel knows)")
    led.set("model", value_text(got), where, model__name=preset)
    return shaped(load_model(preset), final, led, paths)


def base_preset(base: str) -> str:
    """The preset a base recipe's name names (llama31_405b_pretrain_config -> llama-3.1-405b), else the one the HF id
    it loads names (bridge.bases); one line naming the module to pass where neither does."""
    preset = preset_for_name(base, "bridge")
    known = bridge_bases.base(base)
    if preset is None and known and known["model"] and known["model"][0] == "AutoBridge":
        preset = preset_for_hf_id(known["model"][1])
    if preset is None and known and known["model"]:
        raise InputError(f"Megatron-Bridge recipe: model: the base recipe {base}() is not among the files, and neither "
                         f"its name nor the model it builds ({known['model'][1]}, {known['defined'].split(' ')[0]} at "
                         f"{bridge_bases.commit()[:7]}) is a perfmodel preset; valid: a recipe whose model perfmodel "
                         "models list holds")
    if preset is None:
        raise InputError(f"Megatron-Bridge recipe: model: the base recipe {base}() is not among the files and its name "
                         f"names no perfmodel preset; valid: pass the module that defines {base}")
    return preset


def shaped(model: ModelConfig, final: dict[str, Stated], led: Ledger, paths: list[Path]) -> ModelConfig:
    """The preset with the shape fields the config sets (num_layers, hidden_size, ...)."""
    update: dict = {}
    for key, (v, at) in final.items():
        attr = key[6:] if key.startswith("model.") else None
        v = 0 if attr == "mtp_num_layers" and v is None else v  # None disables multi-token prediction
        if attr in SHAPE and v is not None and not isinstance(v, (NotRead, Obj)):
            field, moe_field = SHAPE[attr]
            if moe_field and model.moe is None or v == (getattr(model.moe, moe_field) if moe_field else
                                                        getattr(model, field)):
                if v is not None and not (moe_field and model.moe is None):
                    led.set(key, v, at, f"the preset's {field}{'.' + moe_field if moe_field else ''} already")
                continue
            if moe_field:
                update["moe"] = (update.get("moe") or model.moe).model_copy(update={moe_field: v})
            else:
                update[field] = v
            led.set(key, v, at, **{f"model__{field}{'.' + moe_field if moe_field else ''}": v})
    if update:
        model = model.model_copy(update=update | {"name": f"{model.name} ({paths[0].name})"})
    return model


def launch(led: Ledger, name: str, says, launched: list[tuple[str, object, str]]) -> None:
    """The device count and system a config states: a WorkloadBaseConfig's num_gpus or a perf_matrix entry's
    num_gpus_<n>, else its name's (..._1024gpu_h100_...); a GPU kind the catalogue lacks is named, not guessed."""
    for key, count, where in launched:
        if isinstance(count, int) and count > 0:
            led.set(key, count, where, "the device count the config states", launch__gpus=count)
    if says.gpus and not led.has("launch.gpus"):
        led.set(name, f"{says.gpus}gpu", "the config's name", "the device count Bridge's perf recipes name",
                launch__gpus=says.gpus)
    if says.system:
        led.set(name, says.gpu, "the config's name", "the GPU Bridge's perf configs name", launch__hardware=says.system)
    elif says.gpu:
        led.skip(name, says.gpu, "the config's name", f"{says.gpu}: perfmodel's catalogue has no {says.gpu.upper()} "
                 "system (perfmodel hardware list); --hardware names the system to price it on")


def defaults(final: dict[str, Stated], led: Ledger, model: ModelConfig, base: str | None) -> None:
    """Bridge's and Megatron-Core's defaults for what the layers leave out; one line for what is needed."""
    led.default("stack", "megatron-bridge", "the recipe does not say its release: the newest", plan__stack="megatron-bridge")
    if "mixed_precision" not in final and not any(k.startswith("mixed_precision.") for k in final):
        if base is None:
            raise InputError("bridge config: no mixed_precision: ConfigContainer then trains in fp32, which perfmodel "
                             "does not price; valid: mixed_precision=bf16_mixed (or another recipe)")
        led.default("mixed_precision", "bf16_mixed", f"{base}() (a base recipe not among the files) is taken to set "
                    "it, as recipes/common.py's _pretrain_common does at 067f987; pass its module to read it",
                    plan__precision="bf16")
    for key, flag in (("model.seq_length", "seq_len"), ("train.micro_batch_size", "micro_batch"),
                      ("train.global_batch_size", "global_batch")):
        if not led.has(f"plan.{flag}"):
            hint = f" (the config starts from {base}(), not among the files: pass its module)" if base else ""
            raise InputError(f"bridge config: {key} is not stated{hint}; valid: add {key}=N as an override")
    led.default("ddp.overlap_grad_reduce", "false", "DistributedDataParallelConfig's default",
                plan__overlap_dp_comm=False)
    if model.moe is not None:
        led.default("model.expert_tensor_parallel_size", "tp", "Megatron-Core: etp defaults to tp",
                    plan__etp=led.get("plan.tp", 1))
        led.default("model.moe_token_dispatcher_type", "allgather", "TransformerConfig's default",
                    plan__moe_dispatcher="allgather")
    if led.get("plan.recompute") == "full":
        led.default("model.recompute_num_layers", 1, "TransformerConfig's default", plan__recompute_num_layers=1)
