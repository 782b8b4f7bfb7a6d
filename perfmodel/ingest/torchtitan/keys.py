"""torchtitan's keys and what each becomes: the model from [model] name / flavor, the plan from [parallelism],
[training], [activation_checkpoint], [compile] and the float8 converters, the rest named as not priced.

Sources: torchtitan v0.2.2 (73a0e6979dd10b6b1904098eb3c8f62c18ab87ce) torchtitan/config/job_config.py (keys and
defaults), models/llama3/infra/parallelize.py (apply_fsdp: reshard_after_forward "default" = not pp_enabled),
distributed/pipeline_parallel.py (stages per rank, generate_llm_fqn_per_model_part), distributed/
activation_checkpoint.py; torchtitan main b5bcd76c6 (2026) torchtitan/config/configs.py (TrainingConfig after
"fold batch dim", #4121: num_tokens_per_microbatch_per_dp_rank, max_context_length, num_pp_microbatches), trainer.py
(Trainer.Config defaults: SelectiveAC), components/loss.py (ChunkedLossWrapper num_chunks = 8). The inverse of
perfmodel.export.torchtitan.config (the flavor tables both read are spec.model.torchtitan_flavors).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import InputError
from ...spec.model.config import ModelConfig
from ..ledger import Ledger
from ..reading import NotRead
from .flavors import generated_split_parts, model_of, split_point_parts, torchtitan_parts
from .switches import quantization, switches

FAMILIES = ("llama3", "llama4", "deepseek_v3", "qwen3", "gpt_oss")
_NOT_PRICED = {
    "job": "the job's name and output folder", "profiling": "profiling and memory snapshots",
    "profiler": "profiling and memory snapshots", "metrics": "logging and metrics",
    "optimizer": "the optimizer's hyper-parameters (perfmodel prices AdamW's state and update)",
    "lr_scheduler": "the learning-rate schedule", "checkpoint": "checkpoint saving and loading",
    "validation": "validation runs between steps", "validator": "validation runs between steps",
    "comm": "collective timeouts and tracing", "memory_estimation": "torchtitan's own memory estimate",
    "fault_tolerance": "torchft replica groups", "experimental": "custom imports",
    "dataloader": "the data pipeline", "hf_assets_path": "the tokenizer and weights' path",
    "float8": "float8 settings without a float8 converter named in [model] converters",
    "quantize": "quantization settings without their converter named in [model] converters",
    "debug": "seeds and determinism switches", "model.hf_assets_path": "the tokenizer and weights' path",
    "model.tokenizer_path": "the tokenizer's path", "training.max_norm": "gradient clipping's threshold",
    "training.steps": "the number of steps", "training.dataset": "the data set",
    "training.dataset_path": "the data set's path", "training.gc_freq": "Python garbage collection",
    "training.gc_debug": "Python garbage collection", "training.dataloader": "the data pipeline",
    "training.seed": "seeds", "loss": "the loss function", "training.warmup_steps": "the learning-rate warm-up",
    "training.deterministic": "determinism switches", "model.norm_type": "the norm's kind (RMSNorm is priced)",
    "mx": "MX settings without the mx converter named in [model] converters",
    "parallelism.enable_compiled_autograd": "compiled autograd (the backward's graph capture)",
    "model_spec": "a model spec the reader cannot follow",
}
_SCHEDULES = {"1f1b": "1f1b", "interleaved1f1b": "interleaved", "gpipe": "gpipe"}
_SINGLE_STAGE = ("1f1b", "gpipe")
_WHOLE = ("parallelism.expert_tensor_parallel_degree", "parallelism.pipeline_parallel_layers_per_stage",
          "loss.num_chunks")  # int keys read without a default


@dataclass
class Entry:
    """One key as the config states it."""

    key: str
    value: object
    source: str
    written: str | None = None  # the text written, where the value is a reading of it
    unread: bool = False  # a statement the reader cannot follow
    stated: str | None = None  # the key as an older torchtitan spelled it (torchtitan.spellings), where it differs


def apply(entries: list[Entry], led: Ledger, python: bool, custom: dict | None = None,
          era: dict | None = None) -> ModelConfig:
    """Every entry onto the ledger (under the key as written); the model the config trains. `era`: what an older
    TOML's keys meant otherwise (torchtitan.spellings.respell)."""
    era = era or {}
    keys = {e.key: e for e in entries}
    done: set[str] = set()

    def get(key, default=None):
        e = keys.get(key)
        if e is None or isinstance(e.value, NotRead) or e.unread:
            return default
        if (type(default) is int or key in _WHOLE) and type(e.value) is not int:  # JobConfig's int fields
            raise InputError(f"{key} = {e.value!r} is not a whole number; valid: an integer, as torchtitan types it")
        if type(e.value) is int and (type(default) is int or key in _WHOLE):  # degrees, sizes, counts
            least = 0 if key.endswith("_less_layers") else 1
            if e.value < least and not (default == -1 and e.value == -1):
                raise InputError(f"{key} = {e.value}; valid: {'-1 (the rest) or ' if default == -1 else ''}an "
                                 f"integer >= {least}")
        return e.value

    def put(key, why="", **fields):
        if key in keys and key not in done:
            done.add(key)
            e = keys[key]
            led.set(e.stated or key, e.written or e.value, e.source, _renamed(e, why), **fields)

    def skip(key, why):
        if key in keys and key not in done:
            done.add(key)
            e = keys[key]
            led.skip(e.stated or key, e.written or e.value, e.source, _renamed(e, why))

    for old, new in era.get("stale", {}).items():
        skip(old, f"an older spelling of {new}, which the file states too: torchtitan then read {new} alone")
    for e in entries:  # a value computed by Python: named, never guessed
        if e.unread:
            done.add(e.key)
            led.skip(e.key, e.value, e.source, "a statement the reader does not run (it may change the config)")
        elif isinstance(e.value, NotRead):
            skip(e.key, f"computed by Python ({e.value!r}), not read as data")
    model = _model(keys, get, put, led, custom)
    tp = int(get("parallelism.tensor_parallel_degree", 1))
    pp = int(get("parallelism.pipeline_parallel_degree", 1))
    cp = int(get("parallelism.context_parallel_degree", 1))
    put("parallelism.tensor_parallel_degree", plan__tp=tp)
    put("parallelism.pipeline_parallel_degree", plan__pp=pp)
    put("parallelism.context_parallel_degree", plan__cp=cp)
    dp = _data_parallel(get, put, led, pp, tp * pp * cp)
    _experts(model, get, put, skip, led, tp, python)
    _pipeline(model, get, put, skip, led, pp, era)
    _batch(get, put, skip, led, pp, dp, python, era)
    _recompute(model, get, put, skip, led, python)
    quantization(get, put, skip, led, keys)
    switches(get, put, skip, led, tp, python, era)
    led.default("stack", "torchtitan", "the software stack that runs the config", plan__stack="torchtitan")
    for e in entries:
        if e.key in done:
            continue
        parts = e.key.split(".")
        why = next((_NOT_PRICED[".".join(parts[:i])] for i in range(len(parts), 0, -1)
                    if ".".join(parts[:i]) in _NOT_PRICED), None)
        skip(e.key, f"{why}: does not change step time or memory" if why else
             f"not a key perfmodel knows in torchtitan's {'Trainer.Config' if python else 'JobConfig'}")
    return model


def _renamed(e: Entry, why: str) -> str:
    """The ledger's reason, with today's name of a key an older torchtitan spelled otherwise."""
    return why if e.stated is None else f"{why}{'; ' if why else ''}today's {e.key}"


def _model(keys, get, put, led, custom) -> ModelConfig:
    name, flavor = get("model.name", "llama3"), get("model.flavor", "debugmodel")
    model = model_of(str(name), str(flavor), custom)
    put("model.name", why="torchtitan's model family")
    put("model.flavor", why=f"torchtitan's {name} {flavor}", model__name=model.name)
    if "model.name" not in keys:
        led.default("model.name", "llama3", "JobConfig Model.name", model__family="llama3")
    return model


_RESHARD_DEFAULT = ("FSDP2's reshard policy 'default' (torchtitan/config/configs.py:145 at b5bcd76c): resharded after "
                    "forward unless pipelined")


def _data_parallel(get, put, led, pp: int, mp: int) -> int | None:
    """data_parallel_replicate_degree x data_parallel_shard_degree (-1: the devices left) and the resharding
    policy -> dp, dp_replicate and ZeRO: shard degree 1 replicates (ZeRO-0, DDP); otherwise FSDP2 reshards after
    forward always (ZeRO-3) or never (ZeRO-2), "default" = not pp_enabled (apply_fsdp)."""
    r = int(get("parallelism.data_parallel_replicate_degree", 1))
    s = int(get("parallelism.data_parallel_shard_degree", -1))
    reshard = get("parallelism.fsdp_reshard_after_forward", "default")
    if reshard not in ("default", "always", "never"):
        raise InputError(f"parallelism.fsdp_reshard_after_forward = {reshard!r}; valid: default, always, never")
    if s == 1:
        put("parallelism.data_parallel_replicate_degree", "replicated: DDP (torchtitan 0.3.0: fully_shard over a "
            f"({r}, 1) mesh that shards nothing)", plan__dp=r, plan__zero=0)
        put("parallelism.data_parallel_shard_degree", "nothing sharded", launch__gpus=r * mp)
        put("parallelism.fsdp_reshard_after_forward", "no sharded parameters to reshard")
        return r
    zero = 3 if reshard == "always" or (reshard == "default" and pp == 1) else 2
    put("parallelism.data_parallel_replicate_degree", "HSDP: gradients all-reduced over the replicas" if r > 1 else
        "", plan__dp_replicate=r)
    put("parallelism.fsdp_reshard_after_forward", f"{reshard}: parameters resharded after forward "
        + ("(ZeRO-3)" if zero == 3 else "never: kept gathered to the backward (ZeRO-2)")
        + (f" (default: {'' if pp > 1 else 'not '}pipelined)" if reshard == "default" else ""), plan__zero=zero)
    if s == -1:
        put("parallelism.data_parallel_shard_degree", "the devices left: --gpus / (tp x pp x cp x replicate)")
        if not led.has("plan.zero"):
            led.default("parallelism.fsdp_reshard_after_forward", "default", _RESHARD_DEFAULT, plan__zero=zero)
        return None
    if s < 1:
        raise InputError(f"parallelism.data_parallel_shard_degree = {s}; valid: -1 (the devices left) or >= 1")
    put("parallelism.data_parallel_shard_degree", "FSDP2 over dp_replicate x dp_shard ranks", plan__dp=r * s,
        launch__gpus=r * s * mp)
    if not led.has("plan.zero"):
        led.default("parallelism.fsdp_reshard_after_forward", "default", _RESHARD_DEFAULT, plan__zero=zero)
    return r * s


def _experts(model, get, put, skip, led, tp: int, python: bool) -> None:
    """expert_parallel_degree -> ep; 0.2.2's expert_tensor_parallel_degree -> etp (0.3.0 has none: experts whole
    on their rank at ep > 1, split over tp at ep = 1)."""
    ep = int(get("parallelism.expert_parallel_degree", 1))
    if model.moe is None:
        skip("parallelism.expert_parallel_degree", "the model has no experts")
        skip("parallelism.expert_tensor_parallel_degree", "the model has no experts")
        return
    put("parallelism.expert_parallel_degree", plan__ep=ep)
    etp = get("parallelism.expert_tensor_parallel_degree")
    if etp is not None:
        put("parallelism.expert_tensor_parallel_degree", plan__etp=int(etp))
    else:
        led.default("expert tensor parallelism", "tp at ep = 1, else 1", "experts split over tp at ep = 1, whole "
                    "on their ep rank otherwise", plan__etp=tp if ep == 1 else 1)
    backend = get("parallelism.expert_parallel_comm_backend", get("model.moe_comm_backend"))
    for key in ("parallelism.expert_parallel_comm_backend", "model.moe_comm_backend"):
        if backend in ("standard", "deepep", "hybridep"):
            put(key, "all-to-all" if backend == "standard" else "DeepEP / HybridEP dispatch",
                plan__moe_dispatcher="alltoall" if backend == "standard" else "flex")
    if get("debug.moe_force_load_balance") is True:
        put("debug.moe_force_load_balance", "routing forced round-robin", plan__expert_imbalance=1.0)


def _pipeline(model, get, put, skip, led, pp: int, era: dict) -> None:
    keys = ("pipeline_parallel_schedule", "module_fqns_per_model_part", "pipeline_parallel_layers_per_stage",
            "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
            "pipeline_parallel_schedule_csv", "pipeline_parallel_expert_parallel_overlap")
    if pp == 1:
        for k in keys + ("pipeline_parallel_microbatch_size", "num_pp_microbatches", "pipeline_parallel_split_points",
                         "pipeline_parallel_microbatches"):
            skip(f"parallelism.{k}", "pipeline_parallel_degree is 1: no pipeline")
        return
    text = str(get("parallelism.pipeline_parallel_schedule", "1F1B"))
    schedule = _SCHEDULES.get(text.lower())
    if schedule is None:
        raise InputError(f"parallelism.pipeline_parallel_schedule = {text!r} is not priced; valid: 1F1B, "
                         "Interleaved1F1B, GPipe")
    put("parallelism.pipeline_parallel_schedule", plan__schedule=schedule)
    if get("parallelism.pipeline_parallel_schedule_csv"):
        csv = get("parallelism.pipeline_parallel_schedule_csv")
        raise InputError(f"parallelism.pipeline_parallel_schedule_csv = {csv!r}: a schedule from a file is not priced; "
                         "valid: empty, with a named schedule")
    skip("parallelism.pipeline_parallel_schedule_csv", "empty: the named schedule runs")
    skip("parallelism.pipeline_parallel_expert_parallel_overlap", "applies to the DualPipeV schedule only")
    fqns = get("parallelism.module_fqns_per_model_part")
    first = int(get("parallelism.pipeline_parallel_first_stage_less_layers", 1))
    last = int(get("parallelism.pipeline_parallel_last_stage_less_layers", 1))
    n = model.n_layers
    points = get("parallelism.pipeline_parallel_split_points")
    if fqns:
        parts = [sum(1 for m in part if str(m).startswith("layers.")) for part in fqns]
        how = "layers named per part"
        for k in keys[2:5]:
            skip(f"parallelism.{k}", "module_fqns_per_model_part gives the split")
    elif points:
        parts = split_point_parts(list(points), n)
        how = f"parts starting at {', '.join(map(str, points))}"
        for k in keys[2:5]:
            skip(f"parallelism.{k}", "pipeline_parallel_split_points gives the split")
    else:
        per = get("parallelism.pipeline_parallel_layers_per_stage")
        stages = math.ceil((n + first + last) / int(per)) if per else pp * (1 if schedule in _SINGLE_STAGE else 2)
        if era.get("microbatch_count"):  # a file from before 2025-06: the split generated before 2025-07-30
            parts, how = generated_split_parts(stages, n), f"torchtitan's generated split of {n} layers (2025-02)"
        else:
            parts = torchtitan_parts(stages, n, first, last)
            how = f"torchtitan's split of {n} layers + {first} input + {last} output over {stages} parts"
        put("parallelism.pipeline_parallel_layers_per_stage", f"{stages} model parts")
        put("parallelism.pipeline_parallel_first_stage_less_layers", "the embedding's weight in the split")
        put("parallelism.pipeline_parallel_last_stage_less_layers", "the output's weight in the split")
    if len(parts) % pp or sum(parts) != n:
        raise InputError(f"parallelism.module_fqns_per_model_part: {len(parts)} parts holding {sum(parts)} layers; "
                         f"valid: a multiple of pipeline_parallel_degree = {pp} parts holding the model's {n} layers")
    vpp = len(parts) // pp
    if (vpp == 1) != (schedule in _SINGLE_STAGE):
        raise InputError(f"parallelism.pipeline_parallel_schedule = {text} with {vpp} model part(s) per rank; valid: "
                         + ("Interleaved1F1B" if vpp > 1 else "1F1B or GPipe"))
    stage_layers = [sum(parts[r::pp]) for r in range(pp)]
    even = [stage_layers[c % pp] // vpp + (c // pp < stage_layers[c % pp] % vpp) for c in range(pp * vpp)]
    why = f"{how}: parts {parts} (part c*pp + r on rank r)" + ("" if even == parts else
                                                               "; priced with each stage's layers split evenly "
                                                               f"over its {vpp} chunks, {even}")
    put("parallelism.module_fqns_per_model_part", why, plan__vpp=vpp, plan__stage_layers=stage_layers)
    put("parallelism.pipeline_parallel_split_points", why, plan__vpp=vpp, plan__stage_layers=stage_layers)
    if not led.has("plan.vpp"):
        led.default("pipeline split", how, why, plan__vpp=vpp, plan__stage_layers=stage_layers)


def _batch(get, put, skip, led, pp: int, dp: int | None, python: bool, era: dict) -> None:
    """Sequences per micro-batch and per step. 0.2.x: local_batch_size is one dp rank's batch per
    gradient-accumulation step, split into pipeline micro-batches of pipeline_parallel_microbatch_size with pp;
    global_batch_size -1 = local x dp. Before 2025-06 (era microbatch_count): batch_size split into
    pipeline_parallel_microbatches of them (default: one per stage). 2026 (#4121): num_tokens_per_microbatch_per_dp_rank
    tokens per micro-batch of sequences of max_context_length, num_pp_microbatches of them with pp,
    num_tokens_per_train_step -1 = one accumulation step."""
    folded = any(get(f"training.{k}") is not None for k in ("num_tokens_per_microbatch_per_dp_rank",
                                                          "max_context_length", "num_tokens_per_train_step"))
    if python and (folded or get("training.local_batch_size") is None):
        seq = int(get("training.max_context_length", 2048))
        tokens = int(get("training.num_tokens_per_microbatch_per_dp_rank", 16384))
        if tokens % seq:
            raise InputError(f"training.num_tokens_per_microbatch_per_dp_rank = {tokens} is not a whole number of "
                             f"max_context_length = {seq} sequences; valid: a multiple of {seq}")
        micro = tokens // seq
        count = int(get("parallelism.num_pp_microbatches", 1)) if pp > 1 else 1
        per_rank, total = micro * count, int(get("training.num_tokens_per_train_step", -1))
        put("training.max_context_length", plan__seq_len=seq)
        put("training.num_tokens_per_microbatch_per_dp_rank", f"{tokens} / {seq} = {micro} sequences",
            plan__micro_batch=micro)
        put("parallelism.num_pp_microbatches", f"{count} pipeline micro-batches per step")
        glob = total // seq if total != -1 else None
        key = "training.num_tokens_per_train_step"
    else:
        seq = int(get("training.seq_len", 2048))
        local = int(get("training.local_batch_size", 8))
        micro = int(get("parallelism.pipeline_parallel_microbatch_size", 1)) if pp > 1 else local
        if era.get("microbatch_count") and pp > 1:
            count = int(get("parallelism.pipeline_parallel_microbatches", pp * led.get("plan.vpp", 1)))
            if count < 1 or local % count:
                raise InputError(f"training.batch_size = {local} is not split evenly into "
                                 f"pipeline_parallel_microbatches = {count}; valid: a divisor of {local}")
            micro = local // count
            put("parallelism.pipeline_parallel_microbatches", f"{count} micro-batches of {micro}",
                plan__micro_batch=micro)
            if not led.has("plan.micro_batch"):
                led.default("pipeline_parallel_microbatches", count, "one micro-batch per pipeline stage",
                            plan__micro_batch=micro)
        if local % micro:
            raise InputError(f"training.local_batch_size = {local} is not a multiple of "
                             f"parallelism.pipeline_parallel_microbatch_size = {micro}; valid: a multiple of {micro}")
        per_rank, total = local, int(get("training.global_batch_size", -1))
        put("training.seq_len", plan__seq_len=seq)
        put("training.local_batch_size", "one dp rank's batch per accumulation step" + (
            f", {local // micro} pipeline micro-batches" if pp > 1 else ""), **({} if pp > 1 else
                                                                             {"plan__micro_batch": micro}))
        put("parallelism.pipeline_parallel_microbatch_size", plan__micro_batch=micro)
        glob, key = (total if total != -1 else None), "training.global_batch_size"
    if glob is not None:
        put(key, plan__global_batch=glob)
    elif dp is not None:
        put(key, f"-1: {per_rank} x dp {dp}", plan__global_batch=per_rank * dp)
        if not led.has("plan.global_batch"):
            led.default(key, -1, f"one accumulation step: {per_rank} x dp {dp}", plan__global_batch=per_rank * dp)
    else:
        put(key, f"-1: {per_rank} sequences per dp rank x dp (from --gpus)", launch__global_batch_per_dp=per_rank)
        if not led.has("launch.global_batch_per_dp"):
            led.default(key, -1, "one accumulation step: the dp ranks' batches", launch__global_batch_per_dp=per_rank)
    for field, value, key in (("seq_len", seq, "seq_len / max_context_length"), ("micro_batch", micro,
                              "micro-batch size")):
        if not led.has(f"plan.{field}"):
            led.default(key, value, "torchtitan's default", **{f"plan__{field}": value})


def _recompute(model, get, put, skip, led, python: bool) -> None:
    """[activation_checkpoint] mode: none; full (every block); selective with selective_ac_option "op" (per-op:
    perfmodel's per-op) or an integer N (every Nth block checkpointed whole: recompute full by blocks, the
    first chunk / N blocks of each chunk). Unstated: 0.2.2's JobConfig selective "2", 2026's SelectiveAC (per-op)."""
    mode = get("activation_checkpoint.mode", "selective")
    option = str(get("activation_checkpoint.selective_ac_option", "op" if python else "2"))
    if mode == "none":
        put("activation_checkpoint.mode", plan__recompute="none")
        skip("activation_checkpoint.selective_ac_option", "mode is none")
    elif mode == "full":
        put("activation_checkpoint.mode", "every block checkpointed", plan__recompute="full")
        skip("activation_checkpoint.selective_ac_option", "mode is full")
    elif mode == "selective" and (option == "op" or option.isdigit() and int(option) >= 1):
        every = 0 if option == "op" else int(option)
        stages, vpp = led.get("plan.stage_layers") or [model.n_layers], led.get("plan.vpp", 1)
        chunk = stages[0] // vpp
        fields = ({"plan__recompute": "per-op"} if every == 0 else {"plan__recompute": "full"} if every == 1 else
                  {"plan__recompute": "none"} if chunk < every else
                  {"plan__recompute": "full", "plan__recompute_method": "block",
                   "plan__recompute_num_layers": chunk // every})
        why = ("per-op selective AC: saves matmul, attention and reduce-scatter outputs" if every == 0 else
               f"every {every}th block checkpointed whole: {chunk // every} of each {chunk}-layer chunk")
        stated = get("activation_checkpoint.mode") is not None
        put("activation_checkpoint.mode", why, **(fields if stated else {}))
        put("activation_checkpoint.selective_ac_option", why, **({} if stated else fields))
    else:
        raise InputError(f"activation_checkpoint mode = {mode!r}, selective_ac_option = {option!r} is not priced; "
                         "valid: none, full, selective with 'op' or a positive integer")
    if not led.has("plan.recompute"):
        what = "per-op (Trainer.Config's SelectiveAC)" if python else "selective every 2nd block (JobConfig)"
        if python:
            led.default("activation_checkpoint", "SelectiveAC", what, plan__recompute="per-op")
        else:
            chunk = (led.get("plan.stage_layers") or [model.n_layers])[0] // led.get("plan.vpp", 1)
            led.default("activation_checkpoint.mode", "selective, selective_ac_option 2", what, plan__recompute="full",
                        plan__recompute_method="block", plan__recompute_num_layers=max(chunk // 2, 1))
