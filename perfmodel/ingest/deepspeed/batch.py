"""DeepSpeed's batch as `perfmodel import --from deepspeed` reads it: micro_batch and global_batch from the JSON's
three batch keys, the launch script's arguments that fill "auto" ones (a Hugging Face Trainer's), Megatron-DeepSpeed's
--micro-batch-size / --global-batch-size, or DeepSpeed-Chat's flags, completed and checked as DeepSpeed does
(runtime/config.py DeepSpeedConfig._set_batch_related_parameters and _batch_assertion): train_batch_size =
train_micro_batch_size_per_gpu x gradient_accumulation_steps x the data-parallel ranks. Where the ranks wait for the
device count (--gpus), the global batch is completed by `complete` once it is known.
"""

from __future__ import annotations

from ...errors import InputError
from .keys import BATCH_KEYS, HF_DEFAULTS, whole
from ..ledger import Ledger

# megatron/training.py:1253-1258 at deepspeedai/Megatron-DeepSpeed 4efb479d: every step sets DeepSpeed's train batch
# to dp x --micro-batch-size x the micro-batches of --global-batch-size (engine.set_train_batch_size)
MEGATRON_BATCH_WHY = ("Megatron-DeepSpeed replaces it every step with dp x micro x the micro-batches of "
                      "--global-batch-size (megatron/training.py:1253-1258 set_train_batch_size)")


def read_batch(led: Ledger, ctx: dict, facts: dict, src: str) -> dict:
    """Set plan.micro_batch and plan.global_batch (or return what waits for the device count: `complete`'s input)."""
    raw = {k: whole(k, v, src, 1) for k, v in ctx["batch"].items()}
    tb, mb, gas = (raw.get(k) for k in BATCH_KEYS)
    _hf_defaults(led, ctx, facts)
    mb = mb or (facts["micro"][1] if "micro" in facts else led.get("plan.micro_batch"))
    gas = gas or (facts["accumulation"][1] if "accumulation" in facts else None)
    if "micro" in facts and mb != facts["micro"][1] or "accumulation" in facts and gas != facts["accumulation"][1]:
        key, v, _ = facts["micro"] if "micro" in facts and mb != facts["micro"][1] else facts["accumulation"]
        raise InputError(f"DeepSpeed config contradicts its launch script: {key} = {v} but the JSON states "
                         f"{stated_of(ctx)}; valid: the same value, or \"auto\" in the JSON")
    autotp = ctx.get("autotp", False)
    tp = led.get("plan.tp", 1)
    div = 1 if autotp else tp * led.get("plan.pp", 1) * led.get("plan.cp", 1)
    gpus = led.get("launch.gpus")
    ranks = gpus // div if gpus and gpus % div == 0 else None
    where = (f"the {ranks} data-parallel ranks (the launch's {gpus} devices" +
             (")" if div == 1 else f" over tp x pp x cp = {div})") if ranks else None)
    stated = ", ".join(f"{k} = {v}" for k, v in raw.items())
    if ranks is None and len(raw) == 3 and tb % (mb * gas) == 0:
        dp = tb // (mb * gas) // (tp if autotp else 1)
        led.set_by["plan.dp"] = stated
        led.default("train_batch_size / (micro x accumulation)", dp, "the data-parallel size the three batch keys "
                    "imply (DeepSpeed's _batch_assertion)", plan__dp=dp)
        led.default("train_batch_size / (micro x accumulation) x tp x pp x cp", dp * div, "the devices the three "
                    "batch keys imply with the layout", launch__gpus=dp * div)
    if facts.get("megatron") and led.has("plan.global_batch"):
        return _megatron(led, raw, mb, ranks, where, src)
    if tb is None and led.has("plan.global_batch"):
        tb = led.get("plan.global_batch") * (tp if autotp else 1)
    deferred: dict = {}
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
    elif ranks is None and mb and not tb:
        deferred = {"micro": mb, "accumulation": gas or 1, "div": div, "autotp": tp if autotp else 1}
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
    if autotp and tb and tb % tp:
        raise InputError(f"train_batch_size = {tb} is not a multiple of tensor_parallel.autotp_size = {tp} (the "
                         "ranks of an AutoTP group read the same samples); valid: a multiple of it")
    glob = tb // (tp if autotp else 1) if tb else None
    why = f" / autotp_size {tp}: the ranks of an AutoTP group read the same samples" if autotp else ""
    later = "completed with the device count: micro x accumulation x the data-parallel ranks"
    for fact, field in (("micro", "plan__micro_batch"), ("accumulation", "plan__global_batch")):
        if fact in facts:
            key, v, script, *default = facts[fact]
            fields = {field: mb if fact == "micro" else glob} if (fact == "micro" or glob) else {}
            if default and fields:
                led.default(key, v, default[0] + (", in place of the JSON's \"auto\"" if _auto(ctx, fact) else ""),
                            **fields)
            elif not default:
                led.set(key, v, script, "in place of the JSON's \"auto\"" if _auto(ctx, fact) else
                        ("" if fields else later), **fields)
    for key, field, v in (("train_micro_batch_size_per_gpu", "plan__micro_batch", mb),
                          ("train_batch_size", "plan__global_batch", glob),
                          ("gradient_accumulation_steps", "plan__global_batch", glob)):
        if key in raw:
            led.set(key, raw[key], src, (f"micro x accumulation x dp = {mb} x {gas} x dp" if key.startswith("grad")
                                         else why if field.endswith("global_batch") else ""), **{field: v})
        elif v is not None:
            led.default(key, v, "DeepSpeed derives it from the other batch keys and the data-parallel size",
                        **{field: v})
    return deferred


def _megatron(led: Ledger, raw: dict, mb: int | None, ranks: int | None, where: str | None, src: str) -> dict:
    """Megatron-DeepSpeed's own --global-batch-size decides the step's batch; the JSON's train_batch_size and
    gradient_accumulation_steps only have to pass DeepSpeed's start-up check (a whole accumulation)."""
    glob = led.get("plan.global_batch")
    for key in BATCH_KEYS:
        if key not in raw:
            continue
        v = raw[key]
        if key == "train_micro_batch_size_per_gpu":
            led.set(key, v, src, plan__micro_batch=v)
        elif key == "train_batch_size" and v == glob:
            led.set(key, v, src, plan__global_batch=v)
        elif key == "train_batch_size" and ranks and mb and v % (mb * ranks):
            raise InputError(f"DeepSpeed config contradicts its launch: train_batch_size = {v} is not "
                             f"train_micro_batch_size_per_gpu {mb} x {where} times a whole accumulation, which "
                             f"DeepSpeed checks at start-up; valid: a multiple of {mb * ranks}")
        else:
            led.skip(key, v, src, MEGATRON_BATCH_WHY)
    return {}


def _hf_defaults(led: Ledger, ctx: dict, facts: dict) -> None:
    """The Hugging Face Trainer's own defaults for an "auto" batch key its script leaves out (transformers fills
    "auto" from TrainingArguments: integrations/deepspeed.py trainer_config_process)."""
    for fact, key in (("micro", "train_micro_batch_size_per_gpu"), ("accumulation", "gradient_accumulation_steps")):
        if _auto(ctx, fact) and fact not in facts:
            flag, value, why = HF_DEFAULTS[fact]
            facts[fact] = (flag, value, "", f"the Hugging Face Trainer's default ({why})")


def complete(deferred: dict, gpus: int, system) -> dict:
    """The global batch of a config whose data-parallel ranks waited for the device count: micro x accumulation x
    ranks (DeepSpeed's train_batch_size; over the AutoTP size where the ranks of a group read the same samples)."""
    if gpus % deferred["div"]:
        return {}  # the plan's resolve names the layout that does not divide the devices
    ranks = gpus // deferred["div"]
    return {"global_batch": deferred["micro"] * deferred["accumulation"] * ranks // deferred["autotp"]}


def stated_of(ctx: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in ctx["batch"].items())


def _auto(ctx: dict, fact: str) -> bool:
    key = "train_micro_batch_size_per_gpu" if fact == "micro" else "gradient_accumulation_steps"
    return ctx["cfg"].get(key) == "auto"


def _exact(a: int, b: int, key: str, how: str) -> int:
    if a % b:
        raise InputError(f"DeepSpeed batch: {key} = {how} is not whole; valid: batch keys that divide evenly")
    return a // b
