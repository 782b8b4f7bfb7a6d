"""DeepSpeed-Chat's training flags as `perfmodel import --from deepspeed` reads them: its step-1 main.py takes no
config JSON but builds one from its flags (applications/DeepSpeed-Chat/training/step1_supervised_finetuning/main.py
and dschat/utils/ds_utils.py get_train_ds_config, deepspeedai/DeepSpeedExamples at 45b4b715). A launch script whose
program states --zero_stage is read as that program; what its flags leave out is main.py's default, cited.
"""

from __future__ import annotations

from ...errors import InputError
from ..ledger import Ledger

_AT = "DeepSpeed-Chat step1 main.py at 45b4b715"
# flag -> (the default, where main.py sets it, the plan field it fills)
CHAT_DEFAULTS = {
    "--per_device_train_batch_size": (16, f"{_AT}:68-73", None),  # the batch facts, read by deepspeed.batch
    "--gradient_accumulation_steps": (1, f"{_AT}:101-107", None),
    "--max_seq_len": (512, f"{_AT}:80-85", "plan__seq_len"),
    "--dtype": ("fp16", f"{_AT}:148-152; ds_utils.py:28-33 enables that section", "plan__precision"),
    "--zero_stage": (0, f"{_AT}:153-158; ds_utils.py:35 zero_optimization.stage", "plan__zero"),
}
# train_batch_size = per_device_train_batch_size x world size x gradient_accumulation_steps (main.py:231-235)
CHAT_FLAGS = ("--zero_stage", "--dtype", "--offload", "--lora_dim", "--only_optimize_lora", "--lora_module_name")
OFFLOAD_WHY = ("get_train_ds_config's offload_optimizer and offload_param device \"cpu\" (ds_utils.py:27-42) with "
               "gradient_clipping 1.0: ZeRO-Offload's update on the host's CPUs after the backward (DeepSpeedCPUAdam); "
               "the parameters' offload (ZeRO-3 only) is not priced, they stay on the device")
LORA_WHY = ("LoRA adapters beside a base that main.py still trains (only --only_optimize_lora freezes it): priced as "
            "full fine-tuning, the adapters' parameters not counted")


def read_chat_flag(led: Ledger, key: str, value, where: str, facts: dict, why: str | None) -> None:
    """One DeepSpeed-Chat flag: --zero_stage marks the program as DeepSpeed-Chat's (facts['chat'])."""
    if key == "--zero_stage":
        facts["chat"] = True
        try:
            stage = int(str(value))
        except ValueError:
            stage = -1
        if stage not in (0, 1, 2, 3):
            raise InputError(f"{where}: --zero_stage = {value}" + (f" (not read: {why})" if why else "") +
                             "; valid: 0, 1, 2 or 3")
        led.set(key, value, where, "get_train_ds_config's zero_optimization.stage", plan__zero=stage)
    elif key == "--dtype":
        if value not in ("fp16", "bf16"):
            raise InputError(f"{where}: --dtype = {value}; valid: fp16, bf16 (main.py's choices)")
        led.set(key, value, where, plan__precision=value)
    elif key == "--offload":  # its fate waits for the stage (chat_offload)
        facts["chat_offload"] = (key, value or "true", where)
    elif key == "--lora_dim":
        led.skip(key, value, where, LORA_WHY if value not in (None, "0") else "0: no LoRA adapters")
    else:
        led.skip(key, value or "true", where, "the LoRA adapters' scope or training: " + LORA_WHY)


def chat_defaults(led: Ledger, facts: dict) -> None:
    """main.py's defaults for the flags a DeepSpeed-Chat script leaves out, and get_train_ds_config's
    overlap_comm."""
    for flag, (value, where, field) in CHAT_DEFAULTS.items():
        if field is None:
            fact = "micro" if "batch_size" in flag else "accumulation"
            facts.setdefault(fact, (flag, value, "", f"{where}: main.py's default"))
        else:
            led.default(flag, value, f"{where}: main.py's default", **{field: value})
    zero = led.get("plan.zero")
    led.default("zero_optimization.overlap_comm", True, "get_train_ds_config sets it (dschat/utils/ds_utils.py:36); "
                "at stage 0 gradients are all-reduced after the backward pass", plan__overlap_dp_comm=zero != 0)


def chat_offload(led: Ledger, facts: dict, built: bool) -> None:
    """--offload's fate once the stage is known: a host update where main.py builds the config (`built`) at ZeRO
    stages 1-3 (DeepSpeed builds no ZeRO optimizer at stage 0, which is what offloads)."""
    if "chat_offload" not in facts:
        return
    key, value, where = facts["chat_offload"]
    if not built:
        led.skip(key, value, where, "the DeepSpeed config passed beside the script states the offload")
    elif led.get("plan.zero", 0) == 0:
        led.skip(key, value, where, "ZeRO stage 0: no ZeRO optimizer to offload (runtime/engine.py "
                                    "_configure_zero_optimizer runs at stages 1-3)")
    else:
        led.set(key, value, where, OFFLOAD_WHY, plan__optimizer_offload=True, plan__optimizer_update="host")
