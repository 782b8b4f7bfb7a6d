"""Megatron-LM configs in (`perfmodel import --from megatron`): a launch script (`torchrun ... pretrain_gpt.py
--num-layers ...`, its arguments gathered in shell arrays), a plain argument list, or a functional-test
model_config.yaml (tests/functional_tests/test_cases/**: a MODEL_ARGS mapping of `--flag: value`), read as data.

The inverse of perfmodel.export.megatron.script: every argument it writes maps back onto the model or plan field it came
from; what else a file states is named as not priced (megatron.keys) or as unknown. The model is a preset where
the arguments give one's shape exactly, else a ModelConfig named after the file. Stack: megatron-core.
"""

from __future__ import annotations

import re

from pathlib import Path

from ...errors import InputError
from ...spec.plan.layout import Plan
from ..ledger import Imported, Ledger
from .keys import (
    ATTENTION, ENV_WHY, FALSE_WHY, FP8_RECIPE, FSDP_ZERO, GRAPH_IMPL, GRAPHS_EAGER_WHY, HARNESS_WHY, NOT_PRICED_WHY,
    REASONS, UNKNOWN,
)
from .launch import Arg, from_script, hybrid, launch_fates, not_read
from .model import build_model
from .offload import fp8_param_gather, mlm_get, offload_fate
from ..sources import read_yaml

INTS = {"--tensor-model-parallel-size": "plan__tp", "--pipeline-model-parallel-size": "plan__pp",
        "--context-parallel-size": "plan__cp", "--expert-model-parallel-size": "plan__ep",
        "--expert-tensor-parallel-size": "plan__etp", "--micro-batch-size": "plan__micro_batch",
        "--global-batch-size": "plan__global_batch", "--seq-length": "plan__seq_len",
        "--recompute-num-layers": "plan__recompute_num_layers", "--num-virtual-stages-per-pipeline-rank": "plan__vpp",
        "--decoder-first-pipeline-num-layers": "plan__first_stage_layers",
        "--decoder-last-pipeline-num-layers": "plan__last_stage_layers"}
FLAGS = {"--sequence-parallel": {"plan__sequence_parallel": True},
         "--overlap-grad-reduce": {"plan__overlap_dp_comm": True},
         "--tp-comm-overlap": {"plan__tp_comm_overlap": True},
         "--accumulate-allreduce-grads-in-fp32": {"plan__grad_dtype": "fp32"},
         "--grad-reduce-in-bf16": {"plan__grad_dtype": "bf16"},
         "--account-for-embedding-in-pipeline-split": {"plan__account_for_embedding": True},
         "--account-for-loss-in-pipeline-split": {"plan__account_for_loss": True},
         "--moe-pad-expert-input-to-capacity": {"plan__moe_pad_to_capacity": True},
         "--overlap-moe-expert-parallel-comm": {"plan__moe_overlap": True},
         "--moe-router-force-load-balancing": {"plan__expert_imbalance": 1.0},
         "--recompute-activations": {"plan__recompute": "selective"}}
CHOICES = {"--recompute-granularity": ("plan__recompute", {"full": "full", "selective": "selective"}),
           "--recompute-method": ("plan__recompute_method", {"uniform": "uniform", "block": "block"}),
           "--attention-backend": ("plan__attention", ATTENTION),
           "--fp8-recipe": ("plan__fp8_recipe", FP8_RECIPE),
           "--moe-token-dispatcher-type": ("plan__moe_dispatcher", {"allgather": "allgather", "alltoall": "alltoall",
                                                                    "flex": "flex"}),
           "--cuda-graph-impl": ("plan__cuda_graphs", GRAPH_IMPL)}


def from_yaml(path: Path, led: Ledger) -> list[Arg]:
    """MODEL_ARGS of a functional-test model_config.yaml; ENV_VARS and the harness's keys named as not priced."""
    data = read_yaml(path, "Megatron-LM functional-test YAML")
    args = data.get("MODEL_ARGS")
    if not isinstance(args, dict):
        raise InputError(f"Megatron-LM functional-test YAML {str(path)!r}: no MODEL_ARGS mapping (keys: "
                         f"{', '.join(map(str, data)) or 'none'}); valid: a model_config.yaml of "
                         "tests/functional_tests/test_cases")
    out: list[Arg] = []
    for key, value in data.items():
        if key == "MODEL_ARGS":
            for k, v in value.items():
                k = str(k)
                if v is False:
                    led.skip(k, v, path.name, FALSE_WHY)
                elif v is True or v is None:
                    out.append((k, None, path.name))
                else:
                    out.append((k, str(v).lower() if isinstance(v, bool) else str(v), path.name))
        elif key == "ENV_VARS" and isinstance(value, dict):
            for k, v in value.items():
                led.skip(str(k), v, f"{path.name} ENV_VARS", ENV_WHY)
        else:
            led.skip(str(key), value, path.name, HARNESS_WHY)
    return out


def read(paths: list[Path], name: str | None) -> Imported:
    if name is not None:
        raise InputError(f"--name {name}: a Megatron-LM script or argument list describes one run; valid: no --name")
    led = Ledger("megatron")
    launch: list[Arg] = []
    args: list[Arg] = []
    unread: set[str] = set()  # launcher options stated with a value not read (--nnodes $SLURM_NNODES)
    for path in paths:
        if path.suffix in (".yaml", ".yml"):
            args += from_yaml(path, led)
        else:
            got_launch, got, script, prog = from_script(path)
            hybrid(prog, {})
            kept = not_read(got_launch, script, led)
            unread |= {k for k, _, _ in got_launch} - {k for k, _, _ in kept}
            launch += kept
            args += not_read(got, script, led)
    if not args:
        raise InputError(f"{', '.join(map(str, paths))}: no Megatron-LM argument found; valid: pretrain_gpt.py's "
                         "--flag value arguments")
    opts = {k: v for k, v, _ in args}
    hybrid("", opts)
    launch_fates(launch, led, opts, unread)
    model, model_keys = build_model(args, opts, led, paths, {k.key for k in led.keys} | set(opts))
    plan_fates(args, opts, led, model_keys, model.n_layers)
    stage_split(opts, led, model.n_layers)
    plan_defaults(opts, led, model)
    return led.imported(paths, model)


def _int(key: str, value: str | None) -> int:
    try:
        n = int(str(value))
    except ValueError:
        raise InputError(f"Megatron-LM argument {key} = {value!r} is not an integer; valid: a whole number") from None
    if n < 0:
        raise InputError(f"Megatron-LM argument {key} = {value} is negative; valid: 0 or more")
    return n


def plan_fates(args: list[Arg], opts: dict, led: Ledger, model_keys: set[str], n_layers: int) -> None:
    """Every training argument's fate; the model's arguments were recorded by build_model."""
    low = "--fp8-format" in opts or "--fp4-format" in opts
    if "--bf16" in opts and "--fp16" in opts:
        raise InputError("megatron config contradicts itself: --bf16 and --fp16 both set the training precision; "
                         "valid: one of them")
    fsdp = "--use-megatron-fsdp" in opts or "--use-custom-fsdp" in opts
    pa_optimizer = "--use-precision-aware-optimizer" in opts
    for k, v, src in args:
        if k in model_keys:
            continue
        if v is None and k not in FLAGS and k not in INTS and k not in CHOICES:
            v = "true"
        if k in INTS:
            led.set(k, v, src, **{INTS[k]: _int(k, v)})
        elif k in FLAGS and v is None:
            led.set(k, "true", src, **FLAGS[k])
        elif k in CHOICES:
            choice(led, k, k, v, src, f"Megatron-LM argument {k} = {v!r}")
        elif k == "--enable-cuda-graph":  # Megatron-Core's local per-layer graphs (the flag before --cuda-graph-impl)
            led.skip(k, "true" if v is None else v, src, GRAPHS_EAGER_WHY)
        elif k in ("--bf16", "--fp16"):
            if low:
                led.set(k, "true", src, "the other tensors' type; the GEMMs run in FP8/FP4 (--fp8-format/--fp4-format)")
            else:
                led.set(k, "true", src, plan__precision=k[2:])
        elif k == "--fp8-format":
            led.set(k, v, src, f"Transformer Engine FP8 GEMMs ({v})", plan__precision="fp8")
        elif k == "--fp4-format":
            led.set(k, v, src, plan__precision="fp4")
        elif k == "--use-distributed-optimizer":
            if fsdp:
                led.set(k, "true", src, "with Megatron-FSDP the sharding strategy decides the ZeRO stage")
            else:
                led.set(k, "true", src, "optimizer state sharded over data parallel", plan__zero=1)
        elif k in ("--use-megatron-fsdp", "--use-custom-fsdp"):
            strategy = opts.get("--data-parallel-sharding-strategy") or "no_shard"
            led.set(k, "true", src, f"Megatron-FSDP, sharding strategy {strategy}")
        elif k == "--megatron-fsdp-main-grads-dtype":
            fsdp_grads(v, src, fsdp, led)
        elif k == "--data-parallel-sharding-strategy":
            sharding(led, k, v, src, fsdp, f"Megatron-LM argument {k} = {v!r}", "--use-megatron-fsdp")
        elif k == "--overlap-param-gather":
            led.set(k, "true", src, "the weights' all-gather beside the next forward (with the distributed optimizer)",
                    plan__overlap_dp_comm=True)
        elif k == "--cuda-graph-scope":
            if v and "full_iteration" in v.split():
                led.set(k, v, src, plan__cuda_graphs="step")
            else:
                led.skip(k, v, src, REASONS["graphs-detail"])
        elif k == "--recompute-modules":
            led.set(k, v, src, plan__recompute_modules=(v or "").split())
        elif k == "--num-layers-per-virtual-pipeline-stage":
            led.set(k, v, src, plan__vpp=virtual_stages(opts, _int(k, v)))
        elif k == "--pipeline-model-parallel-layout":
            fields, why = layout_fields(v, opts, n_layers)
            led.set(k, v, src, why, **fields)
        elif k == "--step-batch-size-schedule" and "--global-batch-size" in opts:
            led.skip(k, v, src, "beside --global-batch-size, which is priced (Megatron-LM refuses the pair: "
                                "arguments.py:698 at d98e8a64)")
        elif k == "--step-batch-size-schedule":
            led.set(k, v, src, "the schedule's last phase: the batch the run ends on, and most of its steps run",
                    plan__global_batch=schedule_batch(v))
        elif k == "--moe-expert-capacity-factor":
            led.set(k, v, src, plan__moe_capacity_factor=float(v))
        elif k == "--main-grads-dtype" and "--bf16" in opts:
            main_grads(v, src, opts, led)
        elif k in ("--use-precision-aware-optimizer", "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype",
                   "--main-grads-dtype"):
            optimizer_dtype(k, v, src, opts, led, pa_optimizer)
        elif k == "--fp8-param-gather":
            fp8_param_gather(v, src, opts, led)
        elif offload_fate(k[2:].replace("-", "_"), k, v, src, led, lambda a, d: mlm_get(opts, a, d)):
            pass
        elif k in NOT_PRICED_WHY:
            led.skip(k, v, src, NOT_PRICED_WHY[k])
        else:
            led.skip(k, v, src, UNKNOWN)


def choice(led: Ledger, arg: str, key: str, value, src: str, stated: str) -> None:
    """A CHOICES argument (`arg`, stated as `key` = `value`: Megatron-LM's own, or the Bridge field that spells it)
    onto its field; per-layer CUDA graphs (None in the table) named as priced eager; a value outside the table
    refused, `stated` naming it."""
    field, table = CHOICES[arg]
    if value not in table:
        raise InputError(f"{stated} is not one perfmodel prices; valid: {', '.join(table)}")
    if table[value] is None:
        led.skip(key, value, src, GRAPHS_EAGER_WHY)
    else:
        led.set(key, value, src, **{field: table[value]})


def sharding(led: Ledger, key: str, value, src: str, fsdp: bool, stated: str, switch: str) -> None:
    """Megatron-FSDP's data-parallel sharding strategy (--data-parallel-sharding-strategy, Bridge's
    ddp.data_parallel_sharding_strategy) -> plan.zero, where `switch` turns Megatron-FSDP on; refused outside
    FSDP_ZERO, `stated` naming the key and value."""
    if value not in FSDP_ZERO:
        raise InputError(f"{stated}; valid: {', '.join(FSDP_ZERO)}")
    if fsdp:
        led.set(key, value, src, plan__zero=FSDP_ZERO[value])
    else:
        led.skip(key, value, src, f"takes effect only with {switch}")


def fsdp_grads(v, src: str, fsdp: bool, led: Ledger) -> None:
    """--megatron-fsdp-main-grads-dtype: Megatron-FSDP's main gradient buffer (arguments.py:3691 at d98e8a64;
    'auto' keeps the model's own gradient dtype)."""
    k = "--megatron-fsdp-main-grads-dtype"
    if v not in ("fp32", "bf16", "fp16", "auto"):
        raise InputError(f"Megatron-LM argument {k} = {v!r}; valid: fp32, bf16, fp16, auto")
    if not fsdp:
        led.skip(k, v, src, "takes effect only with --use-megatron-fsdp")
    elif v == "auto":
        led.skip(k, v, src, "auto: the model's own gradient dtype, the plan's default")
    else:
        led.set(k, v, src, "a 2-byte type priced as bf16" if v == "fp16" else "",
                plan__grad_dtype="fp32" if v == "fp32" else "bf16")


def main_grads(v, src: str, opts: dict, led: Ledger) -> None:
    """--main-grads-dtype with --bf16, with or without the precision-aware optimizer: unless --grad-reduce-in-bf16
    or --accumulate-allreduce-grads-in-fp32 is stated, fp32 (its default) turns on fp32 gradient accumulation and
    reduction and bf16 leaves them in bf16 (megatron/training/arguments.py:1204-1217 at d98e8a64; stated beside
    --accumulate-allreduce-grads-in-fp32, bf16 is refused there as here, naming both)."""
    if v not in ("fp32", "bf16"):
        raise InputError(f"Megatron-LM argument --main-grads-dtype = {v!r}; valid: fp32, bf16")
    if "--grad-reduce-in-bf16" in opts:
        led.skip("--main-grads-dtype", v, src, "--grad-reduce-in-bf16 keeps the gradients' reduction in bf16")
    else:
        led.set("--main-grads-dtype", v, src, "with --bf16: the gradients' accumulation and reduction",
                plan__grad_dtype=v)


def optimizer_dtype(k: str, v, src: str, opts: dict, led: Ledger, on: bool) -> None:
    """Megatron-Core's precision-aware optimizer (--use-precision-aware-optimizer): --main-params-dtype is the
    master copy (plan.weight_dtype), --exp-avg-dtype / --exp-avg-sq-dtype Adam's moments (plan.moment_dtype)."""
    if k == "--use-precision-aware-optimizer":
        led.set(k, "true", src, "the optimizer keeps its state in the dtypes of --main-params-dtype / --exp-avg-dtype")
        return
    if not on:
        led.skip(k, v, src, "takes effect only with --use-precision-aware-optimizer")
        return
    if k == "--main-grads-dtype":
        led.set(k, v, src, plan__grad_dtype="bf16" if v == "bf16" else "fp32")
        return
    field = "weight_dtype" if k == "--main-params-dtype" else "moment_dtype"
    if field not in Plan.model_fields:
        led.skip(k, v, src, f"this perfmodel's plan has no {field} yet: priced with the stack's default")
        return
    dtype = {"fp32": "fp32", "bf16": "bf16", "fp16": "bf16"}.get(v)
    if dtype is None:
        raise InputError(f"Megatron-LM argument {k} = {v!r} is not priced; valid: fp32, bf16 or fp16")
    led.set(k, v, src, "a 2-byte type priced as bf16" if v == "fp16" else "", **{f"plan__{field}": dtype})


def schedule_batch(schedule: str | None) -> int:
    """The global batch of --step-batch-size-schedule's last phase ('THRESHOLD:BS THRESHOLD:BS ...',
    megatron/core/num_microbatches_calculator.py:91 at d98e8a64)."""
    phases = (schedule or "").split()
    last = phases[-1].rpartition(":")[2] if phases else ""
    if not last.isdigit() or int(last) < 1:
        raise InputError(f"Megatron-LM argument --step-batch-size-schedule = {schedule!r}; valid: 'THRESHOLD:BS ...' "
                         "phases, e.g. '0:384 200B:768'")
    return int(last)


def stage_split(opts: dict, led: Ledger, n_layers: int) -> None:
    """Megatron-LM refuses layers that do not divide evenly over the pipeline stages unless the first / last stage
    or a layout says otherwise (megatron/training/arguments.py:997 at d98e8a64, the embedding and loss counted
    where --account-for-*-in-pipeline-split)."""
    pp = led.get("plan.pp", 1)
    uneven = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
              "--pipeline-model-parallel-layout")
    if pp <= 1 or any(k in opts for k in uneven):
        return
    slots = n_layers + ("--account-for-embedding-in-pipeline-split" in opts) + (
        "--account-for-loss-in-pipeline-split" in opts)
    if slots % pp:
        raise InputError(f"megatron config: {n_layers} layers (--num-layers) do not divide into --pipeline-model-"
                         f"parallel-size {pp} stages, which Megatron-LM refuses (arguments.py:997: 'Number of layers "
                         f"should be divisible by the pipeline-model-parallel size'); valid: a pp that divides "
                         f"{slots}, or --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers")


def virtual_stages(opts: dict, per_chunk: int) -> int:
    """vpp from --num-layers-per-virtual-pipeline-stage: each stage's slots (layers, plus the embedding and loss
    where accounted) over the layers of one chunk (megatron/training/arguments.py)."""
    from ...spec.plan.megatron_split import megatron_slots

    n, pp = _int("--num-layers", opts.get("--num-layers")), _int("--pipeline-model-parallel-size",
                                                                 opts.get("--pipeline-model-parallel-size", "1"))
    slots = megatron_slots(n, "--account-for-embedding-in-pipeline-split" in opts,
                           "--account-for-loss-in-pipeline-split" in opts)
    if per_chunk == 0 or slots % (pp * per_chunk):
        raise InputError(f"--num-layers-per-virtual-pipeline-stage {per_chunk} does not divide the {slots} layers of "
                         f"--pipeline-model-parallel-size {pp} stages evenly; valid: a divisor of {slots // pp}")
    return slots // (pp * per_chunk)


def unrolled(layout: str) -> str:
    """Megatron-Core's layout shorthand written out: commas dropped, '(tt|)*30' and 't*3' repeated, as
    PipelineParallelLayerLayout.parse_str_to_list does (pipeline_parallel_layer_layout.py:281-302 at Megatron-LM
    d98e8a6)."""
    text = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d{1,4})", r"(.)\*(\d{1,4})"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    return text


def layout_fields(layout: str | None, opts: dict, n_layers: int) -> tuple[dict, str]:
    """--pipeline-model-parallel-layout 'Ett|tt|...|ttL' (shorthand unrolled) -> (stage_layers and vpp, how it was
    read): one '|'-separated entry per virtual stage in model order (chunk c of rank r is entry c*pp + r), 't' a
    decoder layer (E, m, L: embedding, multi-token prediction, loss). A stage's chunks split otherwise than
    spec.plan.layout.chunk_layers splits its layers (as even as possible, earlier chunks taking the rest; DeepSeek-V3's
    'Et|(tt|)*30mL' puts 1 and 2 layers on the first stage) are priced as that split, and the reading says so: the
    step prices each stage by its layers (cost.pipeline.schedules), the peak memory counts in-flight chunks as 1/vpp of them."""
    from ...spec.plan.layout import chunk_layers

    pp = _int("--pipeline-model-parallel-size", opts.get("--pipeline-model-parallel-size", "1"))
    entries = unrolled(layout or "").replace(" ", "").split("|")
    if any(set(e) - set("EtmL") for e in entries) or len(entries) % pp:
        raise InputError(f"--pipeline-model-parallel-layout {layout!r}: perfmodel reads entries of E, t, m and L "
                         f"separated by |, a multiple of pp = {pp} of them; valid: e.g. 'Ett|tt|tt|ttL'")
    chunks = [e.count("t") for e in entries]
    vpp = len(entries) // pp
    stages = [sum(chunks[c * pp + r] for c in range(vpp)) for r in range(pp)]
    if sum(chunks) != n_layers:
        raise InputError(f"--pipeline-model-parallel-layout {layout!r} places {sum(chunks)} layers; --num-layers is "
                         f"{n_layers}; valid: a layout with {n_layers} t's")
    if min(stages) < vpp:
        raise InputError(f"--pipeline-model-parallel-layout {layout!r}: stage layers {stages} leave a stage fewer "
                         f"layers than its {vpp} chunks, which perfmodel does not price; valid: a layout whose every "
                         f"stage holds at least {vpp} layers")
    probe = Plan(pp=pp, vpp=vpp, stage_layers=stages, micro_batch=1, global_batch=1, seq_len=1)
    even = chunk_layers(probe, n_layers)
    differ = [r for r in range(pp) if chunks[r::pp] != even[r::pp]]
    why = "" if not differ else (
        "chunks of stage " + ", ".join(f"{r} {chunks[r::pp]} priced as {even[r::pp]}" for r in differ[:3]) +
        (f" and {len(differ) - 3} more" if len(differ) > 3 else "") + ": each stage's layers split evenly over its "
        f"{vpp} chunks, the only split perfmodel prices (the step prices a stage by its layers, the peak memory "
        "counts in-flight chunks as 1/vpp of them)")
    return {"plan__stage_layers": stages, "plan__vpp": vpp}, why


def plan_defaults(opts: dict, led: Ledger, model) -> None:
    """Megatron-LM's defaults for what the arguments leave out, and the checks of what is needed."""
    if "--bf16" not in opts and "--fp16" not in opts:
        raise InputError("megatron config: neither --bf16 nor --fp16: Megatron-LM then trains in fp32, which "
                         "perfmodel does not price; valid: add --bf16 (or --fp16)")
    for key in ("--seq-length", "--micro-batch-size"):
        if key not in opts:
            raise InputError(f"megatron config: {key} is needed (pretrain_gpt.py refuses to run without it); valid: "
                             f"{key} N")
    led.default("stack", "megatron-core", "pretrain_gpt.py runs Megatron-Core", plan__stack="megatron-core")
    led.default("--overlap-grad-reduce", "absent", "Megatron-LM's default: the gradient reduction after the "
                "backward", plan__overlap_dp_comm=False)
    if model.moe is not None:
        led.default("--expert-tensor-parallel-size", "tp", "arguments.py:588: etp defaults to tp",
                    plan__etp=led.get("plan.tp", 1))
        led.default("--moe-token-dispatcher-type", "allgather", "TransformerConfig's default",
                    plan__moe_dispatcher="allgather")
    if led.get("plan.recompute") == "full":
        led.default("--recompute-num-layers", 1, "arguments.py's default", plan__recompute_num_layers=1)
    if not led.has("plan.global_batch"):
        gpus = led.get("launch.gpus")
        if gpus is None:
            raise InputError("megatron config: --global-batch-size is not given and the launch states no device "
                             "count to derive it (micro x dp); valid: add --global-batch-size N")
        ways = led.get("plan.tp", 1) * led.get("plan.pp", 1) * led.get("plan.cp", 1)
        if gpus % ways:
            raise InputError(f"megatron config: {gpus} devices do not divide into tp x pp x cp = {ways}; valid: a "
                             f"multiple of {ways} devices")
        led.default("--global-batch-size", "micro x dp", "arguments.py:703",
                    plan__global_batch=led.get("plan.micro_batch") * gpus // ways)
