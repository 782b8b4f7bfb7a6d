"""Megatron-Bridge configs in (`perfmodel import --from bridge`): a recipe module (src/megatron/bridge/recipes/**, a
function that builds a ConfigContainer) read as data, the helper modules it calls that the user also passes
(recipes/common.py), then the YAML override files Bridge's scripts take (`--config-file`: model:/train:/... sections)
and Hydra-style `section.key=value` override words, each a later layer.

The recipe's keys are Megatron-Core's TransformerConfig / DDP / optimizer fields, which Megatron-LM's arguments
spell with dashes: they are mapped as perfmodel.ingest.megatron_in maps those arguments (its tables and defaults).
The model is the preset of the HF id (`AutoBridge.from_hf_pretrained`) or the provider class the recipe names.
Stack: megatron-bridge (a recipe file does not say its release).
"""

from __future__ import annotations

import ast
from pathlib import Path

from ..errors import InputError
from ..spec.model import ModelConfig
from ..spec.model_catalogue import HF_IDS, load_model, preset_for_hf_id
from .bridge_keys import PRECISIONS, PROVIDER_PRESETS, SHAPE, dtype_of, key_why
from .bridge_layers import Stated, word_layer, yaml_layer
from .bridge_recipe import Module, Obj, Recipe, Write, flatten, run
from .ledger import Imported, Ledger
from .megatron_in import CHOICES, FLAGS, INTS, layout_fields, optimizer_dtype
from .megatron_keys import ATTENTION, FP8_RECIPE, FSDP_ZERO
from .sources import Unevaluated, functions, literal, module_names, parse_python


def annotated(tree: ast.Module) -> dict:
    """Module-level `NAME: int = 131072` constants (module_names reads the unannotated ones)."""
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            v = literal(stmt.value, out)
            if not isinstance(v, Unevaluated):
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


def read(paths: list[Path], name: str | None) -> Imported:
    mods, layers = [], []
    for p in paths:
        if p.suffix == ".py":
            tree = parse_python(p, "Megatron-Bridge recipe module")
            mods.append(Module(p.name, tree, module_names(tree) | annotated(tree), functions(tree)))
        elif p.suffix in (".yaml", ".yml"):
            layers.append(yaml_layer(p))
        else:
            layers.append(word_layer(p))
    if not mods:
        raise InputError(f"{', '.join(map(str, paths))}: no recipe module (.py); valid: a Megatron-Bridge recipe "
                         "module, then its YAML or key=value overrides")
    names = recipes_of(mods)
    if not names:
        raise InputError(f"{', '.join(m.file for m in mods)}: no recipe (a public function returning a "
                         "ConfigContainer); valid: a Megatron-Bridge recipe module such as recipes/llama/llama3.py")
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
    recipe = Recipe(mods)
    root = run(recipe, name)
    if not isinstance(root, Obj):
        raise InputError(f"Megatron-Bridge recipe {name}: returns {root!r}, not a ConfigContainer this import can "
                         "follow; valid: a recipe that builds and returns its ConfigContainer")
    led = Ledger("bridge")
    final = layered(recipe, root, layers, led)
    model = model_of(final, led, paths)
    fates(final, led, model)
    defaults(final, led, model, root)
    return led.imported(paths, model, name)


# ---- layers --------------------------------------------------------------------------------------------------

def layered(recipe: Recipe, root: Obj, layers: list[dict[str, Stated]], led: Ledger) -> dict[str, Stated]:
    """The final `section.key -> (value, where)`: the recipe's last assignment of each key, then each layer's.
    Replaced assignments, and writes to objects the returned config does not hold, are named as not priced."""
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
    return final


def value_text(v) -> str:
    if isinstance(v, Obj):
        return f"{v.kind}({v.origin!r})" if v.origin else f"{v.kind}(...)"
    return "None" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


# ---- the model -----------------------------------------------------------------------------------------------

def model_of(final: dict[str, Stated], led: Ledger, paths: list[Path]) -> ModelConfig:
    """The preset the recipe's model names, its shape fields updated where the recipe sets them."""
    got, where = final.get("model", (None, ""))
    if not isinstance(got, Obj) or got.auto or got.origin is None:
        raise InputError(f"Megatron-Bridge recipe: cfg.model is {value_text(got)}, not a model this import knows "
                         "(AutoBridge.from_hf_pretrained(ID) or a ModelProvider class); valid: a recipe that names "
                         "its model")
    table = HF_IDS if got.kind == "AutoBridge" else PROVIDER_PRESETS
    preset = preset_for_hf_id(str(got.origin)) if got.kind == "AutoBridge" else table.get(str(got.origin))
    if preset is None:
        raise InputError(f"Megatron-Bridge recipe: the model {got.origin!r} has no perfmodel preset; valid: "
                         f"{', '.join(sorted(table))} (perfmodel models list)")
    model = load_model(preset)
    led.set("model", value_text(got), where, model__name=preset)
    update: dict = {}
    for key, (v, at) in final.items():
        attr = key[6:] if key.startswith("model.") else None
        v = 0 if attr == "mtp_num_layers" and v is None else v  # None disables multi-token prediction
        if attr in SHAPE and v is not None and not isinstance(v, (Unevaluated, Obj)):
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


# ---- every key's fate ----------------------------------------------------------------------------------------

def fates(final: dict[str, Stated], led: Ledger, model: ModelConfig) -> None:
    """Each final key's fate; the model's shape keys were recorded by model_of."""
    opts = {"--pipeline-model-parallel-size": str(final.get("model.pipeline_model_parallel_size", (1,))[0] or 1)}
    precision_fields = precision_subkeys(final, led)
    pa = final.get("optimizer.use_precision_aware_optimizer", (False,))[0] is True
    fsdp = final.get("ddp.use_megatron_fsdp", (False,))[0] is True
    grad_stated = "ddp.grad_reduce_in_fp32" in final or "mixed_precision.grad_reduce_in_fp32" in final
    for key, (v, at) in final.items():
        section, _, attr = key.partition(".")
        arg = "--" + attr.replace("_", "-")
        if key == "model" or (section == "model" and attr in SHAPE) or section == "mixed_precision" and attr:
            continue
        if key == "peft" and v is not None:
            raise InputError(f"bridge config: peft = {value_text(v)} ({at}): parameter-efficient fine-tuning is not "
                             "priced (perfmodel prices full training); valid: a pretrain or sft recipe")
        if isinstance(v, Obj) and key != "mixed_precision":
            led.set(key, value_text(v), at, "a config section: its keywords are listed with their own fates")
            continue
        text = value_text(v)
        if key == "mixed_precision":
            name = v.origin if isinstance(v, Obj) and v.kind != "MixedPrecisionConfig" else v
            if isinstance(v, Obj) and v.kind == "MixedPrecisionConfig":
                led.set(key, value_text(v), at, "a precision config: its keywords are listed with their own fates")
                led.default("mixed_precision.grad_reduce_in_fp32", True, "MixedPrecisionConfig's default "
                            "(mixed_precision.py:47 at 067f987)", plan__grad_dtype="fp32")
                continue
            if name not in PRECISIONS:
                raise InputError(f"bridge config: mixed_precision = {text} ({at}) is not a precision recipe perfmodel "
                                 f"prices; valid: {', '.join(PRECISIONS)}")
            implied = PRECISIONS[name] | {"plan__grad_dtype": "bf16" if name.startswith("fp16") else "fp32"}
            led.set(key, name, at, "with it grad_reduce_in_fp32, which MixedPrecisionConfig.setup copies onto the DDP "
                    "config", **{f: x for f, x in implied.items() if f not in precision_fields})
        elif v is None and not (section == "model" and attr == "recompute_granularity"):
            led.skip(key, text, at, "None: the framework's default holds")
        elif isinstance(v, Unevaluated) and not attr.endswith("dtype") and attr != "attention_backend":
            led.skip(key, text, at, "a value the recipe computes or imports from Bridge (a name, or a call this import does not follow): not read")
        elif section == "model":
            model_key(key, attr, arg, v, at, led, opts, model)
        elif key in ("dataset.seq_length", "dataset.sequence_length") and isinstance(v, int):
            led.set(key, text, at, "Bridge requires model.seq_length to equal it", plan__seq_len=v)
        elif section == "train" and arg in INTS:
            led.set(key, text, at, **{INTS[arg]: whole(key, v, at)})
        elif section == "ddp":
            ddp_key(key, attr, v, at, led, fsdp, final)
        elif section == "optimizer" and attr in ("use_precision_aware_optimizer", "main_params_dtype",
                                                 "exp_avg_dtype", "exp_avg_sq_dtype", "main_grads_dtype"):
            if attr == "use_precision_aware_optimizer" and v is not True:
                led.skip(key, text, at, "false: the optimizer keeps fp32 state (the stack's default)")
            elif attr == "main_grads_dtype" and grad_stated:
                led.skip(key, text, at, "the optimizer's copy of the gradients: plan.grad_dtype prices the gradient "
                         "buffer and its reduction, which ddp / mixed_precision.grad_reduce_in_fp32 set")
            else:
                n = len(led.keys)
                optimizer_dtype("--" + attr.replace("_", "-"), dtype_of(v), at, {}, led, pa)
                for fate in led.keys[n:]:  # recorded under the Megatron-LM argument: show the Bridge key
                    fate.key = key
                led.set_by |= {f: k.replace(k.split(" = ")[0], key) for f, k in led.set_by.items()
                               if k.startswith("--" + attr.replace("_", "-") + " ")}
        elif section == "comm_overlap" and attr in ("tp_comm_overlap", "overlap_moe_expert_parallel_comm"):
            field = "plan__tp_comm_overlap" if attr == "tp_comm_overlap" else "plan__moe_overlap"
            led.set(key, text, at, **{field: bool(v)})
        else:
            led.skip(key, text, at, key_why(section, attr, arg))


def precision_subkeys(final: dict[str, Stated], led: Ledger) -> set[str]:
    """mixed_precision.<key> (a MixedPrecisionConfig's keywords, or attributes set on a named recipe): the plan
    fields they set, which the recipe's name then leaves alone."""
    sub = {k[16:]: x for k, x in final.items() if k.startswith("mixed_precision.")}
    set_fields: set[str] = set()
    low = any(sub.get(k, (None,))[0] for k in ("fp8", "fp4"))
    for attr, (v, at) in sub.items():
        if attr in ("bf16", "fp16") and v is True and not low:
            led.set(f"mixed_precision.{attr}", v, at, plan__precision=attr)
            set_fields.add("plan.precision")
        elif attr in ("fp8", "fp4") and v:
            led.set(f"mixed_precision.{attr}", v, at, f"Transformer Engine {attr.upper()} GEMMs ({v})",
                    plan__precision=attr)
            set_fields.add("plan.precision")
        elif attr == "fp8_recipe" and sub.get("fp8", (None,))[0]:
            if v not in FP8_RECIPE:
                raise InputError(f"bridge config: mixed_precision.fp8_recipe = {v!r} ({at}); valid: "
                                 f"{', '.join(FP8_RECIPE)}")
            led.set(f"mixed_precision.{attr}", v, at, plan__fp8_recipe=FP8_RECIPE[v])
            set_fields.add("plan.fp8_recipe")
        elif attr == "grad_reduce_in_fp32" and isinstance(v, bool):
            led.set(f"mixed_precision.{attr}", v, at, "MixedPrecisionConfig.setup copies it onto the DDP config",
                    plan__grad_dtype="fp32" if v else "bf16")
            set_fields.add("plan.grad_dtype")
        else:
            led.skip(f"mixed_precision.{attr}", value_text(v), at, key_why("mixed_precision", attr, ""))
    return {f.replace(".", "__") for f in set_fields}


def model_key(key, attr, arg, v, at, led: Ledger, opts: dict, model: ModelConfig) -> None:
    text = value_text(v)
    if attr == "seq_length":
        led.set(key, text, at, plan__seq_len=whole(key, v, at))
    elif attr == "virtual_pipeline_model_parallel_size":
        led.set(key, text, at, plan__vpp=whole(key, v, at))
    elif attr in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"):
        led.set(key, text, at, **{f"plan__{attr.split('_')[3]}_stage_layers": whole(key, v, at)})
    elif attr == "pipeline_model_parallel_layout":
        if not isinstance(v, str) and not (isinstance(v, list) and all(isinstance(x, list) for x in v)):
            raise InputError(f"bridge config: {key} = {text} ({at}); valid: a layout string ('Ett|tt|ttL') or a "
                             "list of stages, each a list of 'embedding' / 'decoder' / 'mtp' / 'loss'")
        layout = v if isinstance(v, str) else "|".join("".join({"embedding": "E", "decoder": "t", "mtp": "m",
                                                                 "loss": "L"}.get(x, "?") for x in stage)
                                                       for stage in v)
        led.set(key, layout, at, **layout_fields(layout, opts, model.n_layers))
    elif attr == "recompute_granularity" and v is None:
        led.set(key, text, at, "no activation recompute", plan__recompute="none")
    elif attr == "recompute_modules":
        led.set(key, text, at, plan__recompute_modules=v.split() if isinstance(v, str) else [str(x) for x in v]
                if isinstance(v, (str, list)) else whole(key, "a list", at))
    elif attr == "attention_backend":
        backend = str(v).rsplit(".", 1)[-1]
        if backend not in ATTENTION:
            raise InputError(f"bridge config: {key} = {text} ({at}); valid: AttnBackend.{', AttnBackend.'.join(ATTENTION)}")
        led.set(key, text, at, plan__attention=ATTENTION[backend])
    elif attr == "cuda_graph_scope":
        scopes = v if isinstance(v, list) else [v]
        if "full_iteration" in scopes:
            led.set(key, text, at, plan__cuda_graphs="step")
        else:
            led.skip(key, text, at, key_why("model", attr, arg))
    elif attr == "moe_expert_capacity_factor":
        led.set(key, text, at, plan__moe_capacity_factor=float(whole(key, v, at, float)))
    elif arg in INTS:
        led.set(key, text, at, **{INTS[arg]: whole(key, v, at)})
    elif arg in CHOICES:
        field, table = CHOICES[arg]
        if v not in table:
            raise InputError(f"bridge config: {key} = {text} ({at}) is not one perfmodel prices; valid: "
                             f"{', '.join(table)}")
        led.set(key, text, at, **{field: table[v]})
    elif arg in FLAGS and isinstance(v, bool):
        fields = FLAGS[arg]
        if v:
            led.set(key, text, at, **fields)
        elif all(x is True for x in fields.values()):
            led.set(key, text, at, **{f: False for f in fields})
        else:
            led.skip(key, text, at, "false: Megatron-Core's default holds")
    else:
        led.skip(key, text, at, key_why("model", attr, arg))


def whole(key: str, v, at: str, kind=int):
    """A count (or, with kind=float, a number) the key needs, or one line naming it."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and v != int(v)) or v < 0:
        raise InputError(f"bridge config: {key} = {value_text(v)} ({at}) is not a"
                         f"{' whole' if kind is int else ''} number; valid: a {'count' if kind is int else 'number'} "
                         "of 0 or more")
    return kind(v)


def ddp_key(key, attr, v, at, led: Ledger, fsdp: bool, final: dict) -> None:
    text = value_text(v)
    if attr in ("overlap_grad_reduce", "overlap_param_gather") and isinstance(v, bool):
        if v or attr == "overlap_grad_reduce":
            led.set(key, text, at, plan__overlap_dp_comm=v)
        else:
            led.skip(key, text, at, "false: the weights' all-gather before the forward (the overlap is "
                     "ddp.overlap_grad_reduce's)")
    elif attr == "use_distributed_optimizer" and isinstance(v, bool):
        if v and not fsdp:
            led.set(key, text, at, "optimizer state sharded over data parallel", plan__zero=1)
        else:
            led.skip(key, text, at, "with Megatron-FSDP the sharding strategy decides the ZeRO stage" if v else
                     "false: optimizer state replicated (ZeRO 0)")
    elif attr == "use_megatron_fsdp":
        led.set(key, text, at, "Megatron-FSDP" if v else "no Megatron-FSDP")
    elif attr == "data_parallel_sharding_strategy":
        if v not in FSDP_ZERO:
            raise InputError(f"bridge config: {key} = {v!r} ({at}); valid: {', '.join(FSDP_ZERO)}")
        if fsdp:
            led.set(key, text, at, plan__zero=FSDP_ZERO[v])
        else:
            led.skip(key, text, at, "takes effect only with ddp.use_megatron_fsdp")
    elif attr == "grad_reduce_in_fp32":
        led.skip(key, text, at, "replaced by the precision config's own grad_reduce_in_fp32, which "
                 "MixedPrecisionConfig.setup copies onto the DDP config (mixed_precision.py:113-135 at 067f987)")
    else:
        led.skip(key, text, at, key_why("ddp", attr, "--" + attr.replace("_", "-")))


def defaults(final: dict[str, Stated], led: Ledger, model: ModelConfig, root: Obj) -> None:
    """Bridge's and Megatron-Core's defaults for what the layers leave out; one line for what is needed."""
    led.default("stack", "megatron-bridge", "the recipe does not say its release: the newest", plan__stack="megatron-bridge")
    if "mixed_precision" not in final and not any(k.startswith("mixed_precision.") for k in final):
        if not root.auto:
            raise InputError("bridge config: no mixed_precision: ConfigContainer then trains in fp32, which perfmodel "
                             "does not price; valid: mixed_precision=bf16_mixed (or another recipe)")
        led.default("mixed_precision", "bf16_mixed", f"{root.origin}() (recipes/common.py at 067f987) sets it; pass "
                    "common.py to read its settings", plan__precision="bf16")
    for key, flag in (("model.seq_length", "seq_len"), ("train.micro_batch_size", "micro_batch"),
                      ("train.global_batch_size", "global_batch")):
        if not led.has(f"plan.{flag}"):
            hint = f" (the recipe starts from {root.origin}(): pass its module)" if root.auto else ""
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
