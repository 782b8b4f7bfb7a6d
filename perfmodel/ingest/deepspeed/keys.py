"""A DeepSpeed config JSON's keys as `perfmodel import --from deepspeed` reads them: what each leaf key becomes,
or why it is not priced, and perfmodel's own `_perfmodel_*` keys (what `perfmodel export --to deepspeed` writes).

The keys are DeepSpeed's (deepspeed.ai/docs/config-json; deepspeed/runtime/config.py, runtime/zero/config.py,
runtime/bf16_optimizer.py of releases 0.16.9 and 0.19.8, the versions perfmodel.export.deepspeed writes for).
A leaf key is a dotted path to a value that is not a JSON object ("zero_optimization.offload_optimizer.device").
"""

from __future__ import annotations

import json
import re

from ...errors import InputError
from ...spec.plan.layout import Plan
from ..sources import number

AUTO_WHY = ("\"auto\": the Hugging Face Trainer fills it from its own arguments (its DeepSpeed integration, "
            "transformers.integrations.deepspeed); read from the launch script where it states them, else not priced")
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
# What the Hugging Face Trainer fills an "auto" batch key with where its script passes no flag: TrainingArguments'
# defaults (transformers src/transformers/training_args.py at 00349ae8: per_device_train_batch_size 8,
# gradient_accumulation_steps 1), copied into the JSON by integrations/deepspeed.py trainer_config_process (02348331)
HF_DEFAULTS = {"micro": ("--per_device_train_batch_size", 8, "TrainingArguments.per_device_train_batch_size"),
               "accumulation": ("--gradient_accumulation_steps", 1, "TrainingArguments.gradient_accumulation_steps")}
# a placeholder where a value goes (`"train_batch_size" : CONFIG_BATCH_SIZE,`): a template a script fills by sed
_PLACEHOLDER = re.compile(r":\s*([A-Z][A-Z0-9_]{2,})\s*[,}\n]")

# Leaf keys (or their prefixes, matched at a dot) not priced, by reason; the longest matching prefix wins.
_REASONS = {
    "hyper": "an optimizer or learning-rate-schedule hyperparameter: does not change step time or memory",
    "log": "logging, monitoring or profiling: perfmodel prices the step, not what it reports",
    "ckpt": "checkpoint saving and loading: runs between steps, not priced",
    "scale": "fp16 dynamic loss scaling: one scalar per step, not priced",
    "bucket": ("ZeRO's bucket, prefetch and persistence tuning: perfmodel prices each layer's collectives whole, "
               "overlapped as overlap_comm says; how DeepSpeed cuts them into buckets is not priced"),
    "offload-detail": ("an offload tuning detail (pinned buffers, CPU-Adam core share, NVMe paths): not priced; "
                       "copies are priced at the host link's pinned rate"),
    "zeropp": ("ZeRO++ / MiCS / hierarchical partitioning (quantised or node-local collectives): not priced; the "
               "plan's ZeRO collectives span the whole data-parallel group in the gradient dtype"),
    "zenflow": ("ZenFlow (the important gradients updated on the GPU, the rest on the CPU after the step): not "
                "priced"),
    "check": "a switch of DeepSpeed's own checks: does not change step time or memory",
    "clip": "gradient clipping: one norm over the gradients per step, not priced",
    "data": "data sampling, curriculum or progressive layer drop: changes which tokens a step sees, not priced",
    "model-code": ("a model-code feature (compression, sparse attention, quantised training): perfmodel prices the "
                   "dense model of the launch script"),
    "tools": "a launcher tool (autotuning, elasticity): not a setting of the training step",
    "autocast": ("torch.autocast of the forward's ops: the GEMM precision is bf16 / fp16's (perfmodel prices "
                 "non-GEMM ops in bf16)"),
    "pipe-detail": ("a PipelineModule option (partition method, seeding, checkpoint interval): perfmodel splits the "
                    "layers as evenly as possible (spec.plan.layout.default_stage_layers)"),
    "compile": ("DeepSpeed's \"compile\" section compiles the engine's whole module: not priced (plan.compile is "
                "torchtitan's per-block compile)"),
    "bf16-detail": "a bf16 optimizer detail (when or how the gradients are accumulated): not priced",
    "ulysses": "DeepSpeed-Ulysses' all-to-all dtype: sequence parallelism of that kind is not priced",
    "rlhf": "the hybrid engine (RLHF generation): perfmodel prices the training step",
    "own": "perfmodel's own note (what it predicted, changed or wrote): not a DeepSpeed setting",
    "how": "how to launch the job (pip, command, environment, process groups): not priced",
    "unknown": ("not a DeepSpeed config key perfmodel reads (deepspeed.ai/docs/config-json); no plan field is taken "
                "from it"),
}
_NOT_PRICED = {
    "hyper": ("optimizer.params", "scheduler"),
    "log": ("steps_per_print", "wall_clock_breakdown", "flops_profiler", "tensorboard", "wandb", "csv_monitor",
            "comet", "comms_logger", "memory_breakdown", "dump_state", "timers", "monitor_config"),
    "ckpt": ("checkpoint", "load_universal_checkpoint", "zero_optimization.gather_16bit_weights_on_model_save",
             "zero_optimization.stage3_gather_16bit_weights_on_model_save",
             "zero_optimization.stage3_gather_fp16_weights_on_model_save", "zero_optimization.elastic_checkpoint",
             "zero_optimization.load_from_fp32_weights"),
    "scale": ("fp16.loss_scale", "fp16.loss_scale_window", "fp16.initial_scale_power", "fp16.hysteresis",
              "fp16.min_loss_scale", "fp16.consecutive_hysteresis", "fp16.auto_cast"),
    "bucket": ("zero_optimization.reduce_bucket_size", "zero_optimization.allgather_bucket_size",
               "zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.stage3_param_persistence_threshold",
               "zero_optimization.stage3_model_persistence_threshold", "zero_optimization.stage3_max_live_parameters",
               "zero_optimization.stage3_max_reuse_distance", "zero_optimization.sub_group_size",
               "zero_optimization.allgather_partitions", "zero_optimization.reduce_scatter",
               "zero_optimization.contiguous_gradients", "zero_optimization.round_robin_gradients",
               "zero_optimization.use_multi_rank_bucket_allreduce", "zero_optimization.prefetch_bucket_size",
               "zero_optimization.param_persistence_threshold", "zero_optimization.max_live_parameters",
               "zero_optimization.max_reuse_distance", "zero_optimization.ignore_unused_parameters",
               "zero_optimization.legacy_stage1", "zero_optimization.memory_efficient_linear"),
    "offload-detail": ("zero_optimization.offload_optimizer", "zero_optimization.offload_param", "aio"),
    "zeropp": ("zero_optimization.zero_quantized_weights", "zero_optimization.zero_quantized_gradients",
               "zero_optimization.zero_quantized_nontrainable_weights", "zero_optimization.zero_hpz_partition_size",
               "zero_optimization.mics_shard_size", "zero_optimization.mics_hierarchical_params_gather"),
    "zenflow": ("zero_optimization.zenflow",),
    "check": ("zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "fp16.fp16_master_weights_and_grads"),
    "clip": ("gradient_clipping", "prescale_gradients", "gradient_predivide_factor"),
    "data": ("data_efficiency", "curriculum_learning", "progressive_layer_drop", "data_sampling"),
    "model-code": ("compression_training", "sparse_attention", "quantize_training", "eigenvalue"),
    "tools": ("autotuning", "elasticity"),
    "autocast": ("torch_autocast", "amp"),
    "pipe-detail": ("pipeline.partition", "pipeline.seed_layers", "pipeline.activation_checkpoint_interval",
                    "pipeline.pipe_partitioned", "pipeline.grad_partitioned", "pipeline.use_reentrant"),
    "compile": ("compile",),
    "bf16-detail": ("bf16.immediate_grad_update", "bf16.check_grad_overflow", "bf16.accumulate_grads_via_hooks"),
    "ulysses": ("seq_parallel_communication_data_type",),
    "rlhf": ("hybrid_engine",),
    "own": ("_perfmodel_prediction", "_perfmodel_keys", "_perfmodel_changed"),
    "how": ("_perfmodel_launch.pip", "_perfmodel_launch.command", "_perfmodel_launch.torchrun",
            "_perfmodel_launch.env", "_perfmodel_launch.mpu"),
}
_WHY = {prefix: _REASONS[group] for group, prefixes in _NOT_PRICED.items() for prefix in prefixes}


def whole(key: str, value, src: str, low: int = 0) -> int:
    """A key's whole-number value, or one line naming it."""
    return number(value, f"{src}: {key} = {value!r}", int, low)


def parse_config(text: str, src: str, unread=None) -> dict:
    """A DeepSpeed config JSON's object, or one line: a template with placeholders named as one, a JSON a script
    writes with a value the shell leaves not read (`unread(text)`: why, or None) named with that value."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        holder = _PLACEHOLDER.search(text)
        why = unread(text) if unread else None
        if holder:
            line = text[:holder.start(1)].count("\n") + 1
            raise InputError(f"DeepSpeed config {src}: a template, not a config: {holder.group(1)} (line {line}) "
                             "stands where a value goes; valid: the JSON its launch script fills in (sed), or that "
                             "script") from None
        if why:
            raise InputError(f"DeepSpeed config {src}: not read: {why}; valid: a script that states the value, or "
                             "the JSON it writes passed beside it") from None
        raise InputError(f"DeepSpeed config {src}: malformed JSON at line {err.lineno}, column {err.colno}: "
                         f"{err.msg}") from None
    if not isinstance(data, dict):
        raise InputError(f"DeepSpeed config {src}: expected a JSON object, got {type(data).__name__}")
    return data


def leaves(cfg: dict, prefix: str = "") -> list[tuple[str, object]]:
    """Every leaf key of a JSON object as (dotted path, value), in file order; an empty object is a leaf."""
    out = []
    for k, v in cfg.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        out += leaves(v, path) if isinstance(v, dict) and v else [(path, v)]
    return out


def not_priced_why(key: str) -> str:
    """Why a leaf key is not priced: the reason of its longest listed prefix, else 'unknown'."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        why = _WHY.get(".".join(parts[:n]))
        if why:
            return why
    return _REASONS["unknown"]


# ---- perfmodel's own keys -----------------------------------------------------------------------------------

_SUMMARY = re.compile(r"^(?P<model>\S+) on (?P<hardware>\S+) \((?P<gpus>\d+) x [^)]*\), (?P<layout>[^,]*), "
                      r"micro_batch=(?P<micro_batch>\d+) global_batch=(?P<global_batch>\d+) "
                      r"seq_len=(?P<seq_len>\d+)$")
_NOTE_FIELD = re.compile(r"^([a-z_]+)=([A-Za-z0-9_.+-]+?)(?=[:,; ]|$)")
_SHAPE = re.compile(r"^model (?P<name>\S+) \((?P<shape>[^()]*)\) and seq_len=(?P<seq>\d+):")


def summary_fields(text: str) -> dict | None:
    """`_perfmodel_plan` (perfmodel.export.plan_facts.summary) as {model, hardware, gpus, plan fields}; None when
    it is not that summary."""
    m = _SUMMARY.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    plan = {k: int(v) for k, v in (kv.split("=") for kv in m.group("layout").split()) if k in Plan.model_fields}
    plan |= {k: int(m.group(k)) for k in ("micro_batch", "global_batch", "seq_len")}
    return {"model": m.group("model"), "hardware": m.group("hardware"), "gpus": int(m.group("gpus")), "plan": plan}


def _typed(field: str, text: str):
    """A note's value as written: a bool, an int, a float, else the text."""
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def note_fields(notes) -> dict:
    """The plan fields perfmodel's `_perfmodel_not_expressed` notes state as `field=value` at their head
    (sequence_parallel=True, recompute=full with recompute_method=block, recompute_num_layers=2, precision=fp8,
    attention=flash, ep=8, ...), and the selective recompute's module list. Fields the JSON carries itself are
    read from the JSON; these are the ones the DeepSpeed config cannot carry."""
    out: dict = {}
    for note in notes if isinstance(notes, list) else []:
        if not isinstance(note, str):
            continue
        m = _NOTE_FIELD.match(note)
        if m and m.group(1) in Plan.model_fields and m.group(1) not in ("tp", "pp", "dp", "cp"):
            out[m.group(1)] = _typed(m.group(1), m.group(2))
        for field in ("recompute_method", "recompute_num_layers"):
            f = re.search(rf"\b{field}=(\w+)", note)
            if f and note.startswith("recompute=full"):
                out[field] = _typed(field, f.group(1))
        mods = re.match(r"recompute=selective: .*?\(recompute_modules ([a-z_, ]+);", note)
        if mods:
            out["recompute_modules"] = [x.strip() for x in mods.group(1).split(",")]
    return out


def note_shape(notes) -> tuple[str, dict, int] | None:
    """The model note's (name, shape fields, seq_len): 'model NAME (n_layers=.. hidden=.. ...) and seq_len=N'."""
    for note in notes if isinstance(notes, list) else []:
        m = _SHAPE.match(note) if isinstance(note, str) else None
        if m:
            shape = {k: _typed(k, v) for k, v in (kv.split("=", 1) for kv in m.group("shape").split())}
            return m.group("name"), {k: (None if v == "None" else v) for k, v in shape.items()}, int(m.group("seq"))
    return None
