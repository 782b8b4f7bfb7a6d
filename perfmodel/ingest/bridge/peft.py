"""A Megatron-Bridge recipe's parameter-efficient fine-tuning (`cfg.peft`) read as Plan.lora (spec.plan.finetune).

Bridge builds it two ways: `cfg.peft = LoRA(dim=..., target_modules=[...])`, or a fine-tuning base recipe called with
`peft_scheme="lora"` (`llama3_70b_peft_config(peft_scheme="lora")`, which passes it to
recipes/utils/dataset_utils.py:48 default_peft_config: "lora" -> LoRA(**kwargs), "dora" -> DoRA, None / "none" -> full
fine-tuning, at 067f987). Its fields' defaults are LoRA's own (peft/lora.py:143-147 at 067f987): target_modules
["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"], dim 32, alpha 32.
"""

from __future__ import annotations

from ...errors import InputError
from .objects import Obj
from ..ledger import Ledger

LORA_AT = "src/megatron/bridge/peft/lora.py:143-147 at 067f987"
DEFAULT_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
DEFAULT_DIM = 32
ATTENTION = {"linear_qkv", "linear_proj"}  # spec.plan.finetune TARGETS["attention"]: qkv and out_proj
SCHEMES = {"lora": "LoRA", "dora": "DoRA"}  # default_peft_config's peft_scheme words -> the class it builds
# The precision recipes that store the parameters in FP8 (cfg.fp8_param_gather = True, which MixedPrecisionConfig
# keeps equal to fp8_param: src/megatron/bridge/training/mixed_precision.py at 067f987, the line each sets it): a
# LoRA's frozen base is then held in fp8 (Plan.lora.base_weights, spec.plan.finetune)
FP8_PARAMS = {"bf16_with_fp8_delayed_scaling_mixed": 231, "fp16_with_fp8_delayed_scaling_mixed": 250,
              "bf16_with_mxfp8_mixed": 264, "fp16_with_mxfp8_mixed": 279, "bf16_with_fp8_current_scaling_mixed": 302,
              "nemotron_h_bf16_with_fp8_current_scaling_mixed": 324,
              "nanov2_bf16_with_fp8_current_scaling_mixed": 346, "fp16_with_fp8_current_scaling_mixed": 368}


def scheme_object(scheme) -> Obj | None:
    """The PEFT object `peft_scheme=` builds (default_peft_config), or None for full fine-tuning / not a word."""
    kind = SCHEMES.get(str(scheme).lower()) if isinstance(scheme, str) else None
    return Obj(kind, f"peft_scheme={scheme}") if kind else None


def modules_of(targets, at: str) -> tuple[str, str]:
    """Plan.lora.modules for Bridge's target_modules, and what the pricing adds where they are a subset of it."""
    names = set(targets) if isinstance(targets, (list, tuple)) else None
    if not names or not names <= set(DEFAULT_TARGETS):
        raise InputError(f"bridge config: peft.target_modules = {targets} ({at}): perfmodel prices adapters on whole "
                         f"linear kinds; valid: a list of {', '.join(DEFAULT_TARGETS)}")
    modules = "attention" if names <= ATTENTION else "all"
    extra = sorted((ATTENTION if modules == "attention" else set(DEFAULT_TARGETS)) - names)
    note = f"; priced with adapters on {', '.join(extra)} too (r x (in + out) parameters a layer more)" if extra else ""
    return modules, note


def fp8_params(final: dict) -> str | None:
    """Where the config's parameters are stated FP8 (mixed_precision.fp8_param_gather / fp8_param, else its named
    precision recipe's default), or None."""
    for key in ("mixed_precision.fp8_param_gather", "mixed_precision.fp8_param"):
        v, at = final.get(key, (None, ""))
        if isinstance(v, bool):
            return f"{key} = {str(v).lower()} ({at})" if v else None
    recipe = final.get("mixed_precision", (None, ""))[0]
    name = recipe.origin if isinstance(recipe, Obj) else recipe
    line = FP8_PARAMS.get(str(name).replace("-", "_"))
    return f"{name}: fp8_param_gather = True (src/megatron/bridge/training/mixed_precision.py:{line} at 067f987)" \
        if line else None


def peft_fate(key: str, v, at: str, final: dict, led: Ledger) -> bool:
    """The fate of `peft` and its keys (True when `key` is one of them): a LoRA sets Plan.lora at its dim and target
    modules; DoRA and anything else is refused in one line."""
    section, _, attr = key.partition(".")
    if section != "peft" or v is None:
        return False
    if key == "peft":
        if not (isinstance(v, Obj) and v.kind == "LoRA"):
            kind = v.kind if isinstance(v, Obj) else v
            raise InputError(f"bridge config: peft = {kind} ({at}): perfmodel prices LoRA adapters only (spec."
                             "finetune); valid: LoRA, or None for full training")
        dim = final.get("peft.dim", (DEFAULT_DIM, LORA_AT))[0]
        targets = final.get("peft.target_modules", (list(DEFAULT_TARGETS), LORA_AT))
        if not isinstance(dim, int) or dim < 1:
            raise InputError(f"bridge config: peft.dim = {dim} ({at}): valid: a positive whole rank")
        modules, note = modules_of(targets[0], targets[1])
        narrow = fp8_params(final)
        note += f"; the frozen base held in fp8: {narrow}" if narrow else ""
        led.set(key, f"LoRA({v.origin})" if v.origin else "LoRA(...)", at,
                f"LoRA of rank {dim} on {modules} (dim, target_modules: the config's, else LoRA's defaults, "
                f"{LORA_AT}){note}",
                plan__lora={"rank": dim, "modules": modules, "base_weights": "fp8" if narrow else "bf16"})
    elif attr in ("dim", "target_modules"):
        led.set(key, str(v), at, "read with peft: plan.lora's rank / modules")
    else:  # alpha, dropout, dropout_position, ...: the adapter's training, not its size
        led.skip(key, str(v), at, "a LoRA training detail (scale, dropout): the adapters' cost is their rank and "
                 "targets")
    return True
