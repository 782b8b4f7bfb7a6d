"""DeepSpeed in: a config JSON (train_batch_size, zero_optimization, bf16 / fp16, activation_checkpointing, ...)
and the launch script that names the model (`perfmodel import ds.json run.sh --from deepspeed`), the inverse of
perfmodel.export.deepspeed.

The JSON does not define the model: the launch script's arguments do (Megatron-DeepSpeed's --num-layers ...,
or a Hugging Face script's --model_name_or_path naming a preset), or perfmodel's own `_perfmodel_plan` key in a JSON
that perfmodel exported. Every leaf key of the JSON and every argument of the script is accounted for
(perfmodel.ingest.deepspeed_keys, deepspeed_launch). DeepSpeed's batch rule is checked: train_batch_size =
train_micro_batch_size_per_gpu x gradient_accumulation_steps x the data-parallel ranks (runtime/config.py
DeepSpeedConfig._batch_assertion); the ranks are the launch's devices over tp x pp x cp (the mpu Megatron-DeepSpeed
or a PipelineModule gives deepspeed.initialize), or all of them with AutoTP, which passes no mpu.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..spec.hardware import list_systems
from ..spec.model import ModelConfig
from ..spec.model_catalogue import list_models, load_model
from ..spec.plan import Plan
from .deepspeed_keys import AUTO_WHY, BATCH_KEYS, leaves, not_priced_why, note_fields, note_shape, summary_fields
from .deepspeed_launch import command_of, read_launcher, read_program
from .ledger import Imported, Ledger
from .megatron_keys import DROPOUT
from .megatron_model import default_ffn
from .sources import read_json

NO_MODEL = ("the DeepSpeed config JSON does not define the model; valid: add the launch script whose arguments do "
            "(Megatron-DeepSpeed's --num-layers / --hidden-size / --num-attention-heads ..., or a Hugging Face "
            "script's --model_name_or_path naming a perfmodel preset)")
# Megatron-DeepSpeed's model defaults where its script states nothing (megatron/arguments.py at 4efb479d, as
# Megatron-LM's: --position-embedding-type learned_absolute, --normalization LayerNorm, bias on, tied embeddings)
MEGATRON_MODEL = {"mlp": "gelu", "norm": "layernorm", "position": "learned", "tie_embeddings": True,
                  "linear_bias": "all", "dropout": DROPOUT}
OFFLOAD_OPTIMIZER_WHY = ("ZeRO-Offload runs Adam on the host's CPUs (DeepSpeedCPUAdam), which perfmodel does not "
                         "price (plan.optimizer_offload copies the state to the device for the update); the plan "
                         "keeps the optimizer state on the device, so its memory is overstated")
OFFLOAD_PARAM_WHY = ("ZeRO-Infinity's parameter offload (parameters fetched from host memory or NVMe each layer) is "
                     "not priced; the plan keeps the parameter shards on the device")
# the first pass: keys that decide the layout, read before the keys whose meaning depends on it
FIRST = ("_perfmodel_plan", "_perfmodel_launch", "_perfmodel_not_expressed", "pipeline.stages",
         "tensor_parallel.autotp_size", "zero_optimization.stage", "data_types.grad_accum_dtype")


def read(paths: list[Path], name: str | None) -> Imported:
    """The model and plan of one DeepSpeed config JSON and, optionally, its launch script."""
    if name is not None:
        raise InputError(f"--name = {name!r}: a DeepSpeed config JSON defines one configuration; valid: no --name")
    configs = [p for p in paths if p.suffix.lower() == ".json"]
    scripts = [p for p in paths if p.suffix.lower() != ".json"]
    if len(configs) != 1 or len(scripts) > 1:
        raise InputError(f"{len(configs)} JSON file(s) and {len(scripts)} script(s) given; valid: one DeepSpeed "
                         "config JSON and, optionally, one launch script that names the model")
    config = configs[0]
    cfg = read_json(config, "DeepSpeed config")
    led, src, ctx = Ledger("deepspeed"), str(config), {"cfg": cfg, "batch": {}}
    facts: dict = {}
    if scripts:
        launcher, program = command_of(scripts[0], config)
        read_launcher(led, launcher, str(scripts[0]))
        read_program(led, program, str(scripts[0]), facts)
    items = leaves(cfg)
    first = [kv for kv in items if any(kv[0] == k or kv[0].startswith(k + ".") for k in FIRST)]
    for key, value in first + [kv for kv in items if kv not in first]:
        _key(led, key, value, src, ctx)
    model = _model(led, facts, ctx, scripts)
    _batch(led, ctx, facts, src)
    _defaults(led)
    if not led.has("plan.seq_len"):
        raise InputError("plan.seq_len: neither the DeepSpeed config nor the launch script states the sequence "
                         "length; valid: a launch script that does (Megatron-DeepSpeed's --seq-length, a Hugging "
                         "Face script's --max_seq_length / --model_max_length / --block_size)")
    return led.imported([str(p) for p in paths], model)


# ---- one leaf key -------------------------------------------------------------------------------------------

def _key(led: Ledger, key: str, value, src: str, ctx: dict) -> None:
    if value == "auto":
        led.skip(key, value, src, AUTO_WHY)
    elif key in BATCH_KEYS:
        ctx["batch"][key] = value
    elif key in _HANDLERS:
        _HANDLERS[key](led, key, value, src, ctx)
    elif key.startswith("activation_checkpointing."):
        _checkpointing(led, key, value, src, ctx)
    else:
        led.skip(key, value, src, not_priced_why(key))


def _whole(key: str, value, src: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < low:
        raise InputError(f"{src}: {key} = {value!r}; valid: a whole number >= {low}")
    return int(value)


def _flag(key: str, value, src: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{src}: {key} = {value!r}; valid: true or false")
    return value


def _stage(led, key, value, src, ctx):
    v = _whole(key, value, src)
    if v > 3:
        raise InputError(f"{src}: {key} = {v}; valid: 0, 1, 2 or 3")
    led.set(key, value, src, plan__zero=v)


def _overlap(led, key, value, src, ctx):
    on = _flag(key, value, src)
    if led.get("plan.pp", 1) > 1:
        led.set(key, value, src, "DeepSpeed's PipelineEngine reduces gradients once after the last micro-batch "
                "(ReduceGrads), whatever overlap_comm says", plan__overlap_dp_comm=False)
    elif led.get("plan.zero", 0) == 0:
        led.set(key, value, src, "ZeRO stage 0 all-reduces gradients after the backward pass; overlap_comm is for "
                "stages 1-3", plan__overlap_dp_comm=False)
    else:
        led.set(key, value, src, plan__overlap_dp_comm=on)


def _offload(led, key, value, src, ctx):
    if value in (None, "none"):
        led.set(key, value, src, plan__optimizer_offload=False) if "optimizer" in key else \
            led.skip(key, value, src, "none: no offload")
    elif value in ("cpu", "nvme"):
        led.skip(key, value, src, OFFLOAD_OPTIMIZER_WHY if "optimizer" in key else OFFLOAD_PARAM_WHY)
    else:
        raise InputError(f"{src}: {key} = {value!r}; valid: none, cpu, nvme")


def _precision(led, key, value, src, ctx):
    if not _flag(key, value, src):
        led.skip(key, value, src, "false: off")
        return
    kind = key.split(".")[0]
    noted = led.get("plan.precision")
    if kind == "bf16" and noted in ("fp8", "fp4"):
        led.set(key, value, src, f"bf16 weights and activations; the GEMMs run in {noted} (perfmodel's note)")
    else:
        led.set(key, value, src, plan__precision=kind)


def _has(field: str) -> bool:
    return field in Plan.model_fields


def _bf16_state(led, key, value, src, ctx):
    if not _flag(key, value, src):
        led.skip(key, value, src, "false: fp32 (DeepSpeed's default)")
    elif key.endswith("bf16_optimizer_states"):
        fields = {"plan__moment_dtype": "bf16"} if _has("moment_dtype") else {}
        led.set(key, value, src, "" if fields else "Adam's moments in bf16: not in this plan schema", **fields)
    else:
        fields = {"plan__weight_dtype": "bf16"} if _has("weight_dtype") else {}
        led.set(key, value, src, "no fp32 master; gradients in bf16", plan__grad_dtype="bf16", **fields)


def _grad_dtype(led, key, value, src, ctx):
    if value in ("fp32", "bf16"):
        led.set(key, value, src, plan__grad_dtype=value)
    else:
        led.skip(key, value, src, f"{value} gradient accumulation is not priced (the plan prices fp32 or bf16 "
                                  "gradients); the stack's default is priced")


def _comm_dtype(led, key, value, src, ctx):
    grad = led.get("plan.grad_dtype")
    if value not in ("fp32", "bf16"):
        led.skip(key, value, src, f"{value} gradient reduction is not priced (fp32 or bf16)")
    elif grad is None:
        led.set(key, value, src, "gradients reduced in this dtype (no grad_accum_dtype says otherwise)",
                plan__grad_dtype=value)
    elif value == grad:
        led.set(key, value, src, "the gradients' own dtype", plan__grad_compression="none")
    elif value == "bf16":
        led.set(key, value, src, "fp32 gradients reduced in bf16", plan__grad_compression="bf16")
    else:
        led.skip(key, value, src, "bf16 gradients reduced in fp32: the wider reduction is not priced")


def _pipeline(led, key, value, src, ctx):
    led.set(key, value, src, "PipelineModule(num_stages=...)", plan__pp=_whole(key, value, src, 1))


def _autotp(led, key, value, src, ctx):
    n = _whole(key, value, src)
    if n <= 1:
        led.skip(key, value, src, f"{n}: AutoTP off")
        return
    ctx["autotp"] = True
    led.set(key, value, src, "AutoTP training shards the linear layers (not the embedding and LM head by "
            "vocabulary, which the plan's tp does: their memory is understated)", plan__tp=n)


def _optimizer(led, key, value, src, ctx):
    adam = str(value).lower() in ("adam", "adamw", "fusedadam")
    other = "" if adam else f"; {value}'s own update is priced as Adam's"
    led.skip(key, value, src, "the deepspeed stack prices FusedAdam's update" + other)


def _checkpointing(led, key, value, src, ctx):
    """Any key of the activation_checkpointing section: the section configures deepspeed.checkpointing.checkpoint,
    which Megatron-DeepSpeed (--checkpoint-activations) and a PipelineModule wrap whole layers in: recompute full."""
    leaf = key.split(".", 1)[1]
    why = {"partition_activations": "splitting the saved inputs over tp ranks is not priced",
           "cpu_checkpointing": "the saved inputs' copy to host memory is not priced",
           "contiguous_memory_optimization": "its buffer layout is not priced",
           "number_checkpoints": "its buffer count is not priced"}.get(leaf, "a detail of it not priced")
    led.set(key, value, src, f"deepspeed.checkpointing recomputes whole layers; {why}", plan__recompute="full")


def _own_plan(led, key, value, src, ctx):
    got = summary_fields(value)
    if got is None:
        led.skip(key, value, src, "not perfmodel's plan summary: not read")
        return
    fields = {f"plan__{k}": v for k, v in got["plan"].items()}
    if got["hardware"] in list_systems():
        fields["launch__hardware"] = got["hardware"]
    ctx["own_model"] = got["model"]
    led.set(key, value, src, "perfmodel's own summary of the plan it exported", launch__gpus=got["gpus"], **fields)


def _own_launch(led, key, value, src, ctx):
    field = {"_perfmodel_launch.world_size": "launch__gpus", "_perfmodel_launch.pipeline_stages": "plan__pp",
             "_perfmodel_launch.data_parallel_size": "plan__dp"}.get(key)
    if field:
        led.set(key, value, src, **{field: _whole(key, value, src, 1)})
    else:
        led.skip(key, value, src, "the mpu's model-parallel size (tp x cp beside a pipeline): the layout's"
                 if key.endswith("model_parallel_size") else not_priced_why(key))


def _own_notes(led, key, value, src, ctx):
    fields = note_fields(value)
    ctx["notes"] = value
    if fields:
        led.set(key, f"{len(value)} notes", src, "perfmodel's notes on the plan settings the DeepSpeed config cannot "
                "carry", **{f"plan__{k}": v for k, v in fields.items()})
    else:
        shown = f"{len(value)} notes" if isinstance(value, list) else value
        led.skip(key, shown, src, not_priced_why("_perfmodel_keys"))


_HANDLERS = {
    "zero_optimization.stage": _stage, "zero_optimization.overlap_comm": _overlap,
    "zero_optimization.offload_optimizer.device": _offload, "zero_optimization.offload_param.device": _offload,
    "bf16.enabled": _precision, "fp16.enabled": _precision,
    "bf16.bf16_master_weights_and_grads": _bf16_state, "bf16.bf16_optimizer_states": _bf16_state,
    "data_types.grad_accum_dtype": _grad_dtype, "communication_data_type": _comm_dtype,
    "pipeline.stages": _pipeline, "tensor_parallel.autotp_size": _autotp, "optimizer.type": _optimizer,
    "_perfmodel_plan": _own_plan, "_perfmodel_not_expressed": _own_notes,
    **{f"_perfmodel_launch.{k}": _own_launch for k in ("world_size", "pipeline_stages", "data_parallel_size",
                                                       "model_parallel_size")},
}


# ---- the model --------------------------------------------------------------------------------------------------

def _model(led: Ledger, facts: dict, ctx: dict, scripts: list[Path]) -> ModelConfig:
    """The preset a Hugging Face script or perfmodel's summary names, else Megatron-DeepSpeed's shape arguments."""
    shape = led.group("model")
    if "preset" in facts:
        key, value, preset = facts["preset"]
        led.set(key, value, str(scripts[0]), f"the perfmodel preset {preset}")
        return load_model(preset)
    if "own_model" in ctx and not shape:
        name = ctx["own_model"]
        if name in list_models():
            return load_model(name)
        noted = note_shape(ctx.get("notes"))
        if noted is None or noted[0] != name:
            raise InputError(f"_perfmodel_plan names the model {name}, which is not a perfmodel preset and whose "
                             "shape perfmodel's notes do not state; valid: export the plan again with a preset "
                             "model, or add the launch script that defines it")
        return ModelConfig.parse({"name": name, **noted[1]}, where="_perfmodel_not_expressed (the model's shape)")
    if not shape:
        raise InputError(NO_MODEL + ("" if not scripts else f"; {scripts[0]} states no model arguments"))
    missing = [a for a, f in (("--num-layers", "n_layers"), ("--hidden-size", "hidden"),
                              ("--num-attention-heads", "n_heads")) if f not in shape]
    if missing:
        raise InputError(f"{scripts[0]}: the model needs {', '.join(missing)}; valid: the Megatron-DeepSpeed script "
                         "that states the model's shape")
    h = shape["hidden"]
    if "ffn_hidden" not in shape:
        swiglu = shape.get("mlp") == "swiglu"
        ffn = default_ffn(h, swiglu)
        led.default("--ffn-hidden-size", ffn, "Megatron-DeepSpeed's default, " + (
            "int(4 x hidden x 2/3 / 64) x 64 with --swiglu" if swiglu else "4 x hidden"), model__ffn_hidden=ffn)
    for field, v in MEGATRON_MODEL.items():
        led.default(f"model.{field}", v, "Megatron-DeepSpeed's default where the script states none",
                    **{f"model__{field}": v})
    if not led.has("model.max_seq_len") and led.has("plan.seq_len"):
        led.default("--max-position-embeddings", led.get("plan.seq_len"), "the sequence length",
                    model__max_seq_len=led.get("plan.seq_len"))
    shape = led.group("model")
    same = [n for n in list_models() if _same_shape(load_model(n), shape)]
    if "vocab" not in shape:
        if not same:
            raise InputError(f"{scripts[0]}: the vocabulary comes from the tokenizer the script names, whose size it "
                             "does not state, and the shape matches no perfmodel preset; valid: --vocab-size N")
        vocab = load_model(same[0]).vocab
        led.default("vocab", vocab, f"the tokenizer's size is not stated; {same[0]}'s, whose shape this is",
                    model__vocab=vocab)
    name = same[0] if same else f"megatron-deepspeed-{shape['n_layers']}l-{h}h"
    return ModelConfig.parse({"name": name, **led.group("model")}, where=f"{scripts[0]} (the model's arguments)")


def _same_shape(m: ModelConfig, shape: dict) -> bool:
    kv = shape.get("n_kv_heads", shape["n_heads"])
    return (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.ffn_hidden, m.mlp) == (
        shape["n_layers"], shape["hidden"], shape["n_heads"], kv, shape["ffn_hidden"], shape["mlp"])


# ---- the batch ----------------------------------------------------------------------------------------------------

def _batch(led: Ledger, ctx: dict, facts: dict, src: str) -> None:
    """micro_batch and global_batch from DeepSpeed's three batch keys (or the Hugging Face arguments that fill
    "auto" ones, or Megatron-DeepSpeed's), completed and checked as DeepSpeedConfig._set_batch_related_parameters
    and _batch_assertion do: train_batch_size = micro x accumulation x data-parallel ranks."""
    raw = {k: _whole(k, v, src, 1) for k, v in ctx["batch"].items()}
    tb, mb, gas = (raw.get(k) for k in BATCH_KEYS)
    mb = mb or (facts["micro"][1] if "micro" in facts else led.get("plan.micro_batch"))
    gas = gas or (facts["accumulation"][1] if "accumulation" in facts else None)
    if "micro" in facts and mb != facts["micro"][1] or "accumulation" in facts and gas != facts["accumulation"][1]:
        key, v, _ = facts["micro"] if "micro" in facts and mb != facts["micro"][1] else facts["accumulation"]
        raise InputError(f"DeepSpeed config contradicts its launch script: {key} = {v} but the JSON states "
                         f"{stated_of(ctx)}; valid: the same value, or \"auto\" in the JSON")
    autotp = ctx.get("autotp", False)
    tp = led.get("plan.tp", 1)
    div = 1 if autotp else tp * led.get("plan.pp", 1) * led.get("plan.cp", 1)
    if tb is None and led.has("plan.global_batch"):
        tb = led.get("plan.global_batch") * (tp if autotp else 1)
    gpus = led.get("launch.gpus")
    ranks = gpus // div if gpus and gpus % div == 0 else None
    where = (f"the {ranks} data-parallel ranks (the launch's {gpus} devices" +
             (")" if div == 1 else f" over tp x pp x cp = {div})") if ranks else None)
    stated = ", ".join(f"{k} = {v}" for k, v in raw.items())
    if tb and mb and gas is None and ranks is None:
        pass  # global_batch and micro_batch stated: the plan derives the accumulation from dp (--gpus)
    elif tb and mb and gas:
        if ranks and tb != mb * gas * ranks:
            raise InputError(f"DeepSpeed config contradicts its launch: train_batch_size = {tb} but "
                             f"train_micro_batch_size_per_gpu x gradient_accumulation_steps x {where} = {mb} x {gas} x "
                             f"{ranks} = {mb * gas * ranks}; valid: train_batch_size = {mb * gas * ranks}, or the "
                             "three keys agreeing with the device count")
        if tb % (mb * gas):
            raise InputError(f"DeepSpeed config contradicts itself: train_batch_size = {tb} is not "
                             f"train_micro_batch_size_per_gpu x gradient_accumulation_steps = {mb} x {gas} times a "
                             "data-parallel size; valid: a multiple of their product")
        if ranks is None and len(raw) == 3:
            dp = tb // (mb * gas) // (tp if autotp else 1)
            led.set_by["plan.dp"] = stated
            led.default("train_batch_size / (micro x accumulation)", dp, "the data-parallel size the three batch "
                        "keys imply", plan__dp=dp)
    elif ranks is None:
        raise InputError(f"DeepSpeed batch: {stated or 'no batch key'} (with the launch's arguments) leaves "
                         "train_batch_size, train_micro_batch_size_per_gpu or gradient_accumulation_steps to "
                         "DeepSpeed, which derives it from the data-parallel size; valid: state all three, or add a "
                         "launch script that states the device count (deepspeed --num_gpus G [--num_nodes N])")
    elif tb and mb:
        gas = _exact(tb, mb * ranks, "gradient_accumulation_steps", f"train_batch_size {tb} / (micro {mb} x {where})")
    elif tb and gas:
        mb = _exact(tb, gas * ranks, "train_micro_batch_size_per_gpu", f"train_batch_size {tb} / (accumulation "
                    f"{gas} x {where})")
    elif tb:
        gas, mb = 1, _exact(tb, ranks, "train_micro_batch_size_per_gpu", f"train_batch_size {tb} / {where}")
    elif mb:
        gas = gas or 1
        tb = mb * gas * ranks
    else:
        raise InputError("DeepSpeed batch: neither train_batch_size nor train_micro_batch_size_per_gpu is stated; "
                         "valid: either (DeepSpeed requires one)")
    if autotp and tb % tp:
        raise InputError(f"train_batch_size = {tb} is not a multiple of tensor_parallel.autotp_size = {tp} (the "
                         "ranks of an AutoTP group read the same samples); valid: a multiple of it")
    glob = tb // (tp if autotp else 1)
    why = f" / autotp_size {tp}: the ranks of an AutoTP group read the same samples" if autotp else ""
    for fact, field in (("micro", "plan__micro_batch"), ("accumulation", "plan__global_batch")):
        if fact in facts:
            key, v, script = facts[fact]
            led.set(key, v, script, "in place of the JSON's \"auto\"" if _auto(ctx, fact) else "",
                    **{field: mb if fact == "micro" else glob})
    for key, field, v in (("train_micro_batch_size_per_gpu", "plan__micro_batch", mb),
                          ("train_batch_size", "plan__global_batch", glob),
                          ("gradient_accumulation_steps", "plan__global_batch", glob)):
        if key in raw:
            led.set(key, raw[key], src, (f"micro x accumulation x dp = {mb} x {gas} x dp" if key.startswith("grad")
                                         else why if field.endswith("global_batch") else ""), **{field: v})
        else:
            led.default(key, v, "DeepSpeed derives it from the other batch keys and the data-parallel size",
                        **{field: v})


def stated_of(ctx: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in ctx["batch"].items())


def _auto(ctx: dict, fact: str) -> bool:
    key = "train_micro_batch_size_per_gpu" if fact == "micro" else "gradient_accumulation_steps"
    return ctx["cfg"].get(key) == "auto"


def _exact(a: int, b: int, key: str, how: str) -> int:
    if a % b:
        raise InputError(f"DeepSpeed batch: {key} = {how} is not whole; valid: batch keys that divide evenly")
    return a // b


def _defaults(led: Ledger) -> None:
    """What DeepSpeed does where the JSON states nothing."""
    led.default("stack", "deepspeed", "perfmodel's deepspeed stack prices DeepSpeed's engine (perfmodel stacks list)",
                plan__stack="deepspeed")
    led.default("zero_optimization.stage", 0, "ZeRO is off unless the config enables it (runtime/zero/config.py)",
                plan__zero=0)
    zero, pp = led.get("plan.zero"), led.get("plan.pp", 1)
    led.default("zero_optimization.overlap_comm", zero == 3 and pp == 1, "DeepSpeed's default: on at stage 3, off "
                "at stages 1-2 (runtime/zero/config.py overlap_comm_valid); off with a pipeline or at stage 0",
                plan__overlap_dp_comm=zero == 3 and pp == 1)
    if not led.has("plan.precision"):
        raise InputError("neither bf16.enabled nor fp16.enabled is true: DeepSpeed then trains in fp32, which "
                         "perfmodel does not price; valid: \"bf16\": {\"enabled\": true} or \"fp16\": "
                         "{\"enabled\": true}")
