"""Every key of a Megatron-Bridge config's final `section.key -> (value, where)` given its fate in the ledger
(`perfmodel import --from bridge`): the keys Megatron-Core's TransformerConfig / DDP / optimizer fields and Bridge's
own sections state, mapped as perfmodel.ingest.megatron.reader maps the Megatron-LM arguments that spell them (its tables
and defaults), or named as not priced with the reason.
"""

from __future__ import annotations

from ...errors import InputError
from ...spec.model.config import ModelConfig
from .bases import BASE
from .keys import PRECISIONS, SHAPE, dtype_of, key_why
from .layers import Stated
from .names import COMPUTE_DTYPES
from .peft import FP8_PARAMS, peft_fate
from .recipe import Obj
from ..ledger import Ledger
from ..megatron.reader import CHOICES, FLAGS, INTS, choice, layout_fields, optimizer_dtype, sharding, unrolled
from ..megatron.keys import ATTENTION, FP8_RECIPE, GRAPHS_EAGER_WHY
from ..megatron.offload import fp8_param_fate, offload_fate
from ..reading import NotRead
from ..sources import number


def value_text(v) -> str:
    if isinstance(v, Obj):
        return f"{v.kind}({v.origin!r})" if v.origin else f"{v.kind}(...)"
    return "None" if v is None else str(v).lower() if isinstance(v, bool) else str(v)



def fates(final: dict[str, Stated], led: Ledger, model: ModelConfig, named_dtype: str | None = None) -> None:
    """Each final key's fate; the model's shape keys were recorded by model_of. `named_dtype`: the compute dtype the
    config's name states (bridge.names), for a precision a helper not among the files builds."""
    opts = {"--pipeline-model-parallel-size": str(final.get("model.pipeline_model_parallel_size", (1,))[0] or 1)}
    precision_fields = precision_subkeys(final, led)
    pa = final.get("optimizer.use_precision_aware_optimizer", (False,))[0] is True
    fsdp = final.get("ddp.use_megatron_fsdp", (False,))[0] is True
    grad_stated = "ddp.grad_reduce_in_fp32" in final or "mixed_precision.grad_reduce_in_fp32" in final
    ctx = (opts, precision_fields, pa, fsdp, grad_stated, named_dtype)
    # the config's own keys first, then what a base recipe or helper not among the files sets (bridge.bases): a
    # default yields to a key the config states for the same field
    for key, (v, at) in sorted(final.items(), key=lambda kv: str(kv[1][1]).startswith(BASE)):
        try:
            fate(key, v, at, final, led, model, ctx)
        except InputError as err:
            if not str(at).startswith(BASE) or "contradicts itself" not in str(err):
                raise
            led.skip(key, value_text(v), at, "Bridge's default, which the config's own keys override: "
                     + str(err).split(": ", 1)[1].split("; valid")[0])


def fate(key: str, v, at: str, final: dict[str, Stated], led: Ledger, model: ModelConfig, ctx: tuple) -> None:
    """One key's fate (fates' loop body)."""
    opts, precision_fields, pa, fsdp, grad_stated, named_dtype = ctx
    section, _, attr = key.partition(".")
    arg = "--" + attr.replace("_", "-")
    if key == "model" or (section == "model" and attr in SHAPE) or section == "mixed_precision" and attr:
        return
    if peft_fate(key, v, at, final, led):
        return
    if key == "optimizer" and str(v.origin if isinstance(v, Obj) else v).startswith(LAYER_WISE):
        led.set(key, value_text(v), at, LAYER_WISE_WHY, plan__zero=1)
        return
    if isinstance(v, Obj) and v.auto and "." in key and not any(k.startswith(key + ".") for k in final):
        led.skip(key, value_text(v), at, f"a value computed by {str(v.origin).split('[')[0]}(), a function not among "
                 "the files: not read")
        return
    if isinstance(v, Obj) and key != "mixed_precision":
        led.set(key, value_text(v), at, "a config section: its keywords are listed with their own fates")
        return
    text = value_text(v)
    if key == "mixed_precision":
        name = v.origin if isinstance(v, Obj) and v.kind != "MixedPrecisionConfig" else v
        if isinstance(v, Obj) and v.kind == "MixedPrecisionConfig":
            led.set(key, value_text(v), at, "a precision config: its keywords are listed with their own fates")
            led.default("mixed_precision.grad_reduce_in_fp32", True, "MixedPrecisionConfig's default "
                        "(mixed_precision.py:47 at 067f987)", plan__grad_dtype="fp32")
            return
        if name not in PRECISIONS and named_dtype in COMPUTE_DTYPES and isinstance(v, Obj) and v.auto:
            recipe = COMPUTE_DTYPES[named_dtype]
            led.set(key, text, at, f"made by {v.origin}(), which is not among the files: the precision the "
                    f"config's name states ({named_dtype}: {recipe})",
                    **{f: x for f, x in PRECISIONS[recipe].items() if f not in precision_fields})
            return
        if name not in PRECISIONS:
            raise InputError(f"bridge config: mixed_precision = {text} ({at}) is not a precision recipe perfmodel "
                             f"prices; valid: {', '.join(PRECISIONS)}")
        implied = PRECISIONS[name] | {"plan__grad_dtype": "bf16" if name.startswith("fp16") else "fp32"} | (
            {"plan__fp8_params": True} if str(name).replace("-", "_") in FP8_PARAMS else {})
        line = FP8_PARAMS.get(str(name).replace("-", "_"))
        led.set(key, name, at, "with it grad_reduce_in_fp32, which MixedPrecisionConfig.setup copies onto the DDP "
                "config" + (f"; and fp8_param_gather = True (mixed_precision.py:{line} at 067f987): the GEMM weights "
                            "stored in FP8" if line else ""), **{f: x for f, x in implied.items() if f not in precision_fields})
    elif v is None and not (section == "model" and attr == "recompute_granularity"):
        led.skip(key, text, at, "None: the framework's default holds")
    elif key == "env_vars" and "expandable_segments:True" in text:  # a dict literal, read or not
        led.skip(key, text, at, EXPANDABLE_WHY)
    elif isinstance(v, NotRead) and not attr.endswith("dtype") and attr != "attention_backend":
        led.skip(key, text, at, "a value the recipe computes or imports from Bridge (a name, or a call this import does not follow): not read")
    elif attr in SPLIT and v and opts["--pipeline-model-parallel-size"] == "1":
        led.skip(key, text, at, "a pipeline split setting, and the config runs no pipeline (pp = 1): Megatron-Core "
                 "uses it only with pipeline parallelism")
    elif key == "model.cuda_graph_impl" and "full_iteration" in listed(final.get("model.cuda_graph_scope", (None,))[0]):
        led.set(key, text, at, "with cuda_graph_scope full_iteration Megatron-Core graphs the whole step, whatever the "
                "implementation (perf_recipes/_common.py:76-77 at 067f987): the scope prices it")
    elif section == "model" and offload_fate(attr, key, v, at, led, lambda a, d: final.get(f"model.{a}", (d,))[0]):
        pass
    elif section == "model":
        model_key(key, attr, arg, v, at, led, opts, model)
    elif key in ("dataset.seq_length", "dataset.sequence_length") and isinstance(v, int):
        runs, said = final.get("model.seq_length", (v, ""))
        if isinstance(runs, int) and runs != v and (at.startswith(BASE) or said.startswith(BASE)):  # not given
            led.skip(key, text, at, f"the model runs at model.seq_length = {runs}: Bridge's perf scripts rebuild the "
                     "dataset at it (scripts/performance/utils/overrides.py:524, run_recipe.py:99 at 067f987)")
        else:
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


# Bridge's Muon helper (recipes/utils/optimizer_utils.py:20-97 at 067f987) returns OptimizerConfig(optimizer="dist_muon"),
# which Megatron-Core builds as "muon" under its layer-wise distributed optimizer whatever ddp.use_distributed_optimizer
# says (Kimi K2's base sets it False: recipes/kimi/h100/kimi_k2.py:74-76)
LAYER_WISE = "distributed_muon_with_cosine_annealing"
LAYER_WISE_WHY = ("OptimizerConfig(optimizer='dist_muon'): Megatron-Core maps dist_* to the optimizer under "
                  "LayerWiseDistributedOptimizer (megatron/core/optimizer/__init__.py:744-754 at 2a75ac12, Bridge's "
                  "Megatron-LM), which keeps each data-parallel rank's share of the whole parameters' fp32 main copies "
                  "and optimizer state (layer_wise_optimizer.py:167-181): state sharded over data parallel as ZeRO-1; "
                  "Muon keeps one momentum per matrix where Adam keeps two, not priced (Adam's state is)")


# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in a recipe's env_vars (287 perf recipe functions at 067f987)
EXPANDABLE_WHY = ("environment variables of the run, among them PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: "
                  "not priced: the fragmentation perfmodel adds is the stack profile's allocator_slack, measured with "
                  "torch's default allocator (Stack.expandable_segments false), so the reserved memory is overstated "
                  "by up to that term")


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
        elif attr in ("fp8_param_gather", "fp8_param") and isinstance(v, bool):  # kept equal (mixed_precision.py:77-87)
            fp8_param_fate(f"mixed_precision.{attr}", value_text(v), at, led, True)  # plan.resolve checks precision
            set_fields.add("plan.fp8_params")
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
        layout = unrolled(v) if isinstance(v, str) else "|".join("".join({"embedding": "E", "decoder": "t", "mtp": "m",
                                                                 "loss": "L"}.get(x, "?") for x in stage)
                                                       for stage in v)
        try:
            fields, why = layout_fields(layout, opts, model.n_layers)
        except InputError as err:  # name the layout as the config writes it
            raise InputError(str(err).replace(repr(layout), repr(v) if isinstance(v, str) else repr(layout))) from None
        led.set(key, layout, at, why, **fields)
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
        scopes = listed(v)
        if "full_iteration" in scopes:
            led.set(key, text, at, plan__cuda_graphs="step")
        else:
            led.skip(key, text, at, key_why("model", attr, arg))
    elif attr == "moe_expert_capacity_factor":
        led.set(key, text, at, plan__moe_capacity_factor=float(whole(key, v, at, float)))
    elif arg in INTS:
        led.set(key, text, at, **{INTS[arg]: whole(key, v, at)})
    elif arg == "--enable-cuda-graph":  # Megatron-Core's local per-layer graphs
        led.skip(key, text, at, GRAPHS_EAGER_WHY if v else "false: Megatron-Core's default holds")
    elif arg in CHOICES:
        choice(led, arg, key, v, at, f"bridge config: {key} = {text} ({at})")
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


SPLIT = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
         "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")  # a pipeline's stage split


def listed(v) -> list:
    """A value Bridge takes as one item or a list (cuda_graph_scope = "attn" or ["attn", "mlp"])."""
    return v if isinstance(v, list) else [] if v is None else [v]


def whole(key: str, v, at: str, kind=int):
    """A count (or, with kind=float, a number) the key needs, or one line naming it."""
    return number(v, f"bridge config: {key} = {value_text(v)} ({at})", kind)


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
            opt = final.get("optimizer", (None,))[0]
            layer_wise = str(opt.origin if isinstance(opt, Obj) else opt).startswith(LAYER_WISE)
            led.skip(key, text, at, "with Megatron-FSDP the sharding strategy decides the ZeRO stage" if v else
                     "false: the optimizer's own layer-wise sharding holds (key optimizer)" if layer_wise else
                     "false: optimizer state replicated (ZeRO 0)")
    elif attr == "use_megatron_fsdp":
        led.set(key, text, at, "Megatron-FSDP" if v else "no Megatron-FSDP")
    elif attr == "data_parallel_sharding_strategy":
        sharding(led, key, v, at, fsdp, f"bridge config: {key} = {v!r} ({at})", "ddp.use_megatron_fsdp")
    elif attr == "grad_reduce_in_fp32":
        led.skip(key, text, at, "replaced by the precision config's own grad_reduce_in_fp32, which "
                 "MixedPrecisionConfig.setup copies onto the DDP config (mixed_precision.py:113-135 at 067f987)")
    else:
        led.skip(key, text, at, key_why("ddp", attr, "--" + attr.replace("_", "-")))


