"""DeepSpeed in: a config JSON (train_batch_size, zero_optimization, bf16 / fp16, activation_checkpointing, ...)
and the launch script that names the model (`perfmodel import ds.json run.sh --from deepspeed`), the inverse of
perfmodel.export.deepspeed.

The JSON does not define the model: the launch script's arguments do (Megatron-DeepSpeed's --num-layers ...,
or a Hugging Face script's --model_name_or_path naming a preset), or perfmodel's own `_perfmodel_plan` key in a JSON
that perfmodel exported. Every leaf key of the JSON and every argument of the script is accounted for
(perfmodel.ingest.deepspeed.keys, deepspeed.launch). DeepSpeed's batch rule is checked: train_batch_size =
train_micro_batch_size_per_gpu x gradient_accumulation_steps x the data-parallel ranks (runtime/config.py
DeepSpeedConfig._batch_assertion); the ranks are the launch's devices over tp x pp x cp (the mpu Megatron-DeepSpeed
or a PipelineModule gives deepspeed.initialize), or all of them with AutoTP, which passes no mpu.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import InputError
from ...spec.hardware.system import list_systems
from ...spec.model.config import ModelConfig
from ...spec.model.catalogue import list_models, load_model
from ...spec.plan.layout import Plan
from ...spec.model.tokenizers import tokenizer_vocab
from .batch import complete, read_batch
from .chat import chat_defaults, chat_offload
from .keys import (
    AUTO_WHY, BATCH_KEYS, leaves, not_priced_why, note_fields, note_shape, parse_config, summary_fields, whole,
)
from .launch import launch_of, read_launcher, read_program
from ..given import GIVEN, GIVEN_SOURCE, VOCAB_FLAG
from ..ledger import Imported, Ledger
from ..megatron.keys import DROPOUT, NOT_PRICED_WHY
from ..megatron.model import VOCAB_GIVEN, default_ffn, vocabulary
from ..sources import number, read_text

__all__ = ["complete", "read"]

NO_MODEL = ("the DeepSpeed config JSON does not define the model; valid: add the launch script whose arguments do "
            "(Megatron-DeepSpeed's --num-layers / --hidden-size / --num-attention-heads ..., or a Hugging Face "
            "script's --model_name_or_path naming a perfmodel preset)")
# Megatron-DeepSpeed's model defaults where its script states nothing (megatron/arguments.py at 4efb479d, as
# Megatron-LM's: --position-embedding-type learned_absolute, --normalization LayerNorm, bias on, tied embeddings)
MEGATRON_MODEL = {"mlp": "gelu", "norm": "layernorm", "position": "learned", "tie_embeddings": True,
                  "linear_bias": "all", "dropout": DROPOUT}
OFFLOAD_NVME_WHY = ("ZeRO-Infinity's NVMe optimizer offload (the state swapped between NVMe and host buffers) is not "
                    "priced; the plan keeps the optimizer state on the device, so its memory is overstated")
OFFLOAD_PARAM_WHY = ("ZeRO-Infinity's parameter offload (parameters fetched from host memory or NVMe each layer) is "
                     "not priced; the plan keeps the parameter shards on the device")
# the first pass: keys that decide the layout, read before the keys whose meaning depends on it
FIRST = ("_perfmodel_plan", "_perfmodel_launch", "_perfmodel_not_expressed", "pipeline.stages",
         "tensor_parallel.autotp_size", "zero_optimization.stage", "data_types.grad_accum_dtype",
         "zero_optimization.offload_optimizer.device")


def read(paths: list[Path], name: str | None) -> Imported:
    """The model and plan of a DeepSpeed config JSON and, optionally, its launch script; or of a launch script
    alone, with the JSON it writes itself (a heredoc) or the config its program builds from its flags
    (DeepSpeed-Chat)."""
    if name is not None:
        raise InputError(f"--name = {name!r}: a DeepSpeed config defines one configuration; valid: no --name")
    configs = [p for p in paths if p.suffix.lower() == ".json"]
    scripts = [p for p in paths if p.suffix.lower() != ".json"]
    if len(configs) > 1 or len(scripts) > 1 or not paths:
        raise InputError(f"{len(configs)} JSON file(s) and {len(scripts)} script(s) given; valid: a launch script "
                         "(with the DeepSpeed config JSON it passes, where it does not write it itself), or a "
                         "DeepSpeed config JSON alone")
    led, facts = Ledger("deepspeed"), {}
    cfg, src = ({}, None) if not configs else (parse_config(read_text(configs[0], "DeepSpeed config"),
                                                            repr(str(configs[0]))), str(configs[0]))
    if scripts:
        where = str(scripts[0])
        launch = launch_of(scripts[0], configs[0] if configs else None)
        read_launcher(led, launch.launcher, where, launch.unread)
        read_program(led, launch.program, where, facts, launch.unread)
        if launch.written is not None:
            src = f"{where} (the JSON it writes to {launch.named})"
            cfg = parse_config(launch.written, src, launch.unread)
        elif not configs and not facts.get("chat"):
            raise InputError(f"launch script {where!r}: its launch passes no DeepSpeed config (--deepspeed_config / "
                             "--deepspeed FILE) and its program is not one that builds it from its flags "
                             "(DeepSpeed-Chat's --zero_stage); valid: pass the DeepSpeed config JSON beside the script")
    ctx = {"cfg": cfg, "batch": {}}
    items = leaves(cfg)
    first = [kv for kv in items if any(kv[0] == k or kv[0].startswith(k + ".") for k in FIRST)]
    for key, value in first + [kv for kv in items if kv not in first]:
        _key(led, key, value, src, ctx)
    if facts.get("chat") and not cfg:
        chat_defaults(led, facts)
    chat_offload(led, facts, bool(facts.get("chat")) and not cfg)
    model = _model(led, facts, ctx, scripts)
    deferred = read_batch(led, ctx, facts, src or str(scripts[0]))
    _defaults(led, ctx)
    if not led.has("plan.seq_len"):
        raise InputError("plan.seq_len: neither the DeepSpeed config nor the launch script states the sequence "
                         "length; valid: a launch script that does (Megatron-DeepSpeed's --seq-length, a Hugging "
                         "Face script's --max_seq_length / --model_max_length / --block_size)")
    return led.imported([str(p) for p in paths], model, deferred=deferred)


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


def _flag(key: str, value, src: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{src}: {key} = {value!r}; valid: true or false")
    return value


def _stage(led, key, value, src, ctx):
    v = whole(key, value, src)
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
    elif value not in ("cpu", "nvme"):
        raise InputError(f"{src}: {key} = {value!r}; valid: none, cpu, nvme")
    elif "optimizer" not in key:
        led.skip(key, value, src, OFFLOAD_PARAM_WHY)
    elif value == "nvme":
        led.skip(key, value, src, OFFLOAD_NVME_WHY)
    elif led.get("plan.zero", 0) == 0:
        led.skip(key, value, src, "ZeRO stage 0 builds no ZeRO optimizer, which is what offloads (runtime/engine.py "
                                  "_configure_zero_optimizer runs at stages 1-3): the state stays on the device")
    else:
        mode = _update_mode(led, ctx)
        led.set(key, value, src, "the fp32 master, Adam's moments and fp32 gradients in pinned host memory, updated "
                "by DeepSpeedCPUAdam on the host's CPUs (ZeRO-Offload; runtime/zero/stage3.py, stage_1_and_2.py)"
                + (", each parameter group's update starting behind the backward (SuperOffload's "
                   "superoffload_stage3.py partition_grads -> async_step)" if mode == "host_overlapped" else ""),
                plan__optimizer_offload=True, plan__optimizer_update=mode)


def _offload_section(ctx) -> dict:
    zero = ctx["cfg"].get("zero_optimization")
    section = zero.get("offload_optimizer") if isinstance(zero, dict) else None
    return section if isinstance(section, dict) else {}


def _update_mode(led, ctx) -> str:
    """host, or host_overlapped where the section turns SuperOffload on at ZeRO-3 (runtime/zero/offload_config.py
    super_offload: 'Only valid with ZeRO Stage 3') and no gradient clipping stops its early update
    (superoffload_stage3.py partition_grads: `not self.clip_grad`)."""
    clip = ctx["cfg"].get("gradient_clipping", 0)
    clipped = isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip > 0
    on = _offload_section(ctx).get("super_offload") is True and led.get("plan.zero") == 3
    return "host_overlapped" if on and not clipped else "host"


def _host_update(led) -> bool:
    return led.get("plan.optimizer_update", "device") != "device"


def _super_offload(led, key, value, src, ctx):
    if not _flag(key, value, src):
        led.skip(key, value, src, "false: ZeRO-Offload's update after the backward")
    elif led.get("plan.optimizer_update") == "host_overlapped":
        led.set(key, value, src, "read with offload_optimizer.device: plan.optimizer_update = host_overlapped")
    else:
        led.skip(key, value, src, "SuperOffload needs ZeRO-3 and offload_optimizer.device cpu, and gradient_clipping "
                                  "turns its early update off (superoffload_stage3.py): the update is priced after "
                                  "the backward" if _host_update(led) else "no optimizer offload to the CPU: off")


def _ratio(led, key, value, src, ctx):
    r = number(value, f"{src}: {key} = {value!r}", float, 0.0)
    if r > 1:
        raise InputError(f"{src}: {key} = {value!r}; valid: a share in (0, 1]")
    if r == 1:
        led.skip(key, value, src, "1: the whole state offloaded (DeepSpeed's default)")
    elif _host_update(led) and led.get("plan.zero") == 3 and r > 0:
        led.set(key, value, src, "the first (1 - ratio) of the optimizer's sub-groups (whose gradients the backward "
                "gives last) stay on the device, updated there (stage3.py _create_fp32_partitions), priced as that "
                "share of the parameters",
                plan__optimizer_offload_ratio=r)
    else:
        led.skip(key, value, src, "a partial offload is ZeRO-3's with offload_optimizer.device cpu "
                                  "(runtime/zero/offload_config.py): not in effect here")


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
    led.set(key, value, src, "PipelineModule(num_stages=...)", plan__pp=whole(key, value, src, 1))


def _autotp(led, key, value, src, ctx):
    n = whole(key, value, src)
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
        led.set(key, value, src, **{field: whole(key, value, src, 1)})
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
    "zero_optimization.offload_optimizer.super_offload": _super_offload,
    "zero_optimization.offload_optimizer.ratio": _ratio,
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
    _vocab(led, facts, same, shape, str(scripts[0]))
    name = same[0] if same else f"megatron-deepspeed-{shape['n_layers']}l-{h}h"
    return ModelConfig.parse({"name": name, **led.group("model")}, where=f"{scripts[0]} (the model's arguments)")


def _vocab(led: Ledger, facts: dict, same: list[str], shape: dict, where: str) -> None:
    """The vocabulary Megatron-DeepSpeed's tokenizer arguments give, padded as Megatron pads it
    (megatron.model.vocabulary: --vocab-size, or a GPT-2 vocab and merge file); else, for a tokenizer whose size the
    script does not state (a Hugging Face or SentencePiece model path), the preset's whose shape this is."""
    opts = facts.get("tokenizer", {})
    became: dict = {}
    why: dict = {}
    try:
        vocab = vocabulary(opts, became, why)[1] if opts else None
    except InputError:  # a tokenizer file or type Megatron's table does not size: spec.model.tokenizers may
        named = next(((k, got) for k in ("--tokenizer-model", "--tokenizer-type") if opts.get(k) and
                      (got := tokenizer_vocab(str(opts[k])))), None)
        vocab = None
        if named:
            key, (size, source) = named
            vocab = vocabulary({**opts, "--vocab-size": size}, became, why)[1]
            became[key], why[key] = became.pop("--vocab-size"), f"{source}; {why.pop('--vocab-size')}".rstrip("; ")
    for key, value in [*opts.items(), *([(VOCAB_GIVEN, GIVEN.get().vocab_size)] if VOCAB_GIVEN in became else [])]:
        if key in became:
            led.set(key, value, GIVEN_SOURCE if key == VOCAB_GIVEN else where, why.get(key, ""), **became[key])
        elif key != "--tensor-model-parallel-size":
            led.skip(key, value if value is not None else "true", where, NOT_PRICED_WHY.get(key, "a tokenizer file"))
    if vocab is not None:
        return
    if not same:
        tokenizer = ", ".join(str(opts[k]) for k in ("--tokenizer-type", "--tokenizer-model") if opts.get(k))
        raise InputError(f"{where}: {VOCAB_FLAG} is needed: the script does not state the vocabulary: its tokenizer "
                         f"({tokenizer or 'none'}) has the size, which is not read, and the shape "
                         f"({shape['n_layers']} layers, hidden {shape['hidden']}, {shape['n_heads']} heads) is no "
                         f"perfmodel preset's; valid: {VOCAB_FLAG} N, the tokenizer's size (or --vocab-size N among "
                         "the script's arguments)")
    vocab = load_model(same[0]).vocab
    led.default("vocab", vocab, f"the tokenizer's size is not stated; {same[0]}'s, whose shape this is",
                model__vocab=vocab)


def _same_shape(m: ModelConfig, shape: dict) -> bool:
    kv = shape.get("n_kv_heads", shape["n_heads"])
    return (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.ffn_hidden, m.mlp) == (
        shape["n_layers"], shape["hidden"], shape["n_heads"], kv, shape["ffn_hidden"], shape["mlp"])


def _defaults(led: Ledger, ctx: dict) -> None:
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
        auto = [k for k in ("bf16", "fp16") if isinstance(ctx["cfg"].get(k), dict) and
                ctx["cfg"][k].get("enabled") == "auto"]
        why = (f" ({' and '.join(k + '.enabled' for k in auto)} \"auto\": the Hugging Face Trainer's --{auto[0]}, "
               "default False (TrainingArguments), which the script does not pass)") if auto else ""
        raise InputError(f"neither bf16.enabled nor fp16.enabled is true{why}: DeepSpeed then trains in fp32, which "
                         "perfmodel does not price; valid: \"bf16\": {\"enabled\": true} or \"fp16\": "
                         "{\"enabled\": true}, or the script's --bf16 True")
