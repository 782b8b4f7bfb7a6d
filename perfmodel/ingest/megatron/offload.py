"""Megatron-Core's activation offloading and FP8 parameters as Megatron-LM's arguments and Megatron-Bridge's
TransformerConfig / MixedPrecisionConfig keys state them, onto Plan.activation_offload_layers, Plan.offload_modules
(spec.plan.offload_rules) and Plan.fp8_params; shared by megatron.reader and bridge.fates (each passes how to read another key
of the same config).

Sources: NVIDIA/Megatron-LM at 2a75ac1 (the commit Megatron-Bridge 067f987 pins): megatron/core/
model_parallel_config.py:458-483 (cpu_offloading* fields and defaults), megatron/core/transformer/
transformer_config.py:1239-1276 (fine-grained offloading fields), megatron/training/arguments.py:1061-1063 and
1865-1866; Transformer Engine at e7c550c: transformer_engine/pytorch/cpu_offload.py:692-833.
"""

from __future__ import annotations

from typing import Callable

from ...errors import InputError
from ...spec.plan.offload_rules import OFFLOAD_MODULES
from ..ledger import Ledger

MCORE = "megatron/core/model_parallel_config.py"
CPU = ("cpu_offloading", "cpu_offloading_num_layers", "cpu_offloading_activations", "cpu_offloading_weights",
       "cpu_offloading_double_buffering", "cpu_offloading_retain_pinned_cpu_buffers")
FINE = ("fine_grained_activation_offloading", "offload_modules", "min_offloaded_tensor_size",
        "activation_offload_fraction", "delta_offload_bytes_across_pp_ranks", "delay_offload_until_cuda_graph",
        "fine_grained_offloading_max_inflight_offloads")
CPU_WHY = {
    "cpu_offloading_weights": "Transformer Engine ignores it: 'Offloading weights is deprecated. Using offload_weights="
                              "True does not have any effect' (transformer_engine/pytorch/cpu_offload.py:826-833 at "
                              "e7c550c); the weights stay on the device",
    "cpu_offloading_double_buffering": "unused by Transformer Engine's default offload path (cpu_offload.py:698 at "
                                       "e7c550c, 'Deprecated')",
    "cpu_offloading_retain_pinned_cpu_buffers": "keeps the same pinned host buffers from step to step: the host "
                                                "memory priced (the offloaded layers' tensors) is the same",
}
FINE_WHY = {
    "min_offloaded_tensor_size": "tensors under this many elements stay on the device (fine_grained_activation_"
                                 "offload.py:993 at 2a75ac1); not priced: every tensor of the offload_modules' groups "
                                 "is priced as offloaded, so where some are smaller the device memory is understated",
    "activation_offload_fraction": "the share of the eligible groups offloaded, the later ones left on the device "
                                   "(post_warmup_callback); not priced: all are priced as offloaded (1.0, the "
                                   "default), so below 1 the device memory is understated",
    "delta_offload_bytes_across_pp_ranks": "fewer bytes offloaded on later pipeline ranks; not priced: every rank's "
                                           "groups are priced as offloaded (device memory understated there)",
}
TIMING_WHY = ("when the offload copies are issued (CUDA-graph replay, in-flight cap): the same bytes move, priced "
              "per layer beside its compute (cost.memory.offload)")
Get = Callable[[str, object], object]  # another key of the config by its attribute name, or the default given


def offload_fate(attr: str, key: str, v, at: str, led: Ledger, get: Get) -> bool:
    """The fate of one offloading key (`attr`, stated as `key` = `v` at `at`); False where `attr` is none of them.
    `get(attr, default)` reads another of the config's keys (Megatron-LM: --cpu-offloading-num-layers > 0 alone
    turns cpu_offloading on, arguments.py:1865-1866)."""
    if attr in CPU:
        cpu_fate(attr, key, v, at, led, get)
    elif attr in FINE:
        fine_fate(attr, key, v, at, led, get)
    else:
        return False
    return True


def cpu_fate(attr: str, key: str, v, at: str, led: Ledger, get: Get) -> None:
    on = get("cpu_offloading", False) is True
    acts = get("cpu_offloading_activations", True) is not False
    if attr in CPU_WHY:
        led.skip(key, v, at, CPU_WHY[attr])
    elif attr == "cpu_offloading_num_layers":
        n = number(key, v, at)
        if on and acts and n > 0:
            led.set(key, v, at, "the first this many layers hold what they save for the backward in host memory "
                    "(Transformer Engine cpu_offload; cost.memory.act_offload)", plan__activation_offload_layers=n)
        else:
            led.skip(key, v, at, "no layer offloaded: " + ("cpu_offloading_activations is false" if on else
                     f"cpu_offloading is false ({MCORE}:458 default)") if n else "0: no layer offloaded")
    elif v is True or str(v).lower() == "true":
        led.set(key, v, at, "with cpu_offloading_num_layers: the layers offloaded")
    else:
        led.skip(key, v, at, "false: no activation offloaded to host memory" if attr == "cpu_offloading" else
                 "false: the activations stay on the device (cpu_offloading then offloads nothing)")


def fine_fate(attr: str, key: str, v, at: str, led: Ledger, get: Get) -> None:
    on = str(get("fine_grained_activation_offloading", False)).lower() == "true"
    if attr == "offload_modules":
        mods = v.split() if isinstance(v, str) else [str(x) for x in v] if isinstance(v, (list, tuple)) else None
        if mods is None or set(mods) - set(OFFLOAD_MODULES):
            raise InputError(f"{key} = {v} ({at}); valid: a list of {', '.join(OFFLOAD_MODULES)} "
                             "(megatron/core/transformer/transformer_config.py:1910-1919 at 2a75ac1)")
        if on and mods:
            led.set(key, v, at, "what these submodules save for the backward held in host memory (cost.memory.act_offload)",
                    plan__offload_modules=mods)
        else:
            led.skip(key, v, at, "fine_grained_activation_offloading is false: nothing offloaded" if mods else
                     "none: nothing offloaded")
    elif attr == "fine_grained_activation_offloading":
        if str(v).lower() == "true":
            led.set(key, v, at, "with offload_modules: what is offloaded")
        else:
            led.skip(key, v, at, "false: no submodule offloads its activations")
    else:
        led.skip(key, v, at, FINE_WHY.get(attr, TIMING_WHY))


def fp8_param_fate(key: str, v, at: str, led: Ledger, fp8: bool, why: str = "") -> None:
    """--fp8-param-gather / Bridge's mixed_precision.fp8_param_gather (fp8_param): Transformer Engine builds the
    layers under fp8_model_init, their GEMM weights stored in FP8 with no bf16 copy (Plan.fp8_params; cost.memory.footprint
    stored_narrow); takes effect only where the GEMMs run in FP8 (`fp8`)."""
    if str(v).lower() not in ("true", "false"):
        raise InputError(f"{key} = {v} ({at}); valid: true or false")
    on = str(v).lower() == "true"
    if on and not fp8:
        led.skip(key, v, at, "the GEMMs do not run in FP8 here: no FP8 weights to store")
    else:
        led.set(key, v, at, why or ("the GEMM weights stored in FP8, no bf16 copy (Transformer Engine fp8_model_init)"
                                    if on else "the weights stay bf16"), plan__fp8_params=on)


def number(key: str, v, at: str) -> int:
    try:
        n = int(str(v))
    except ValueError:
        n = -1
    if n < 0:
        raise InputError(f"{key} = {v} ({at}); valid: a whole number of layers, 0 or more")
    return n


def mlm_get(opts: dict, attr: str, default):
    """Another Megatron-LM argument by its TransformerConfig attribute: a flag stated is true; cpu_offloading has no
    flag of its own, --cpu-offloading-num-layers > 0 sets it (arguments.py:1865-1866)."""
    if attr == "cpu_offloading":
        n = str(opts.get("--cpu-offloading-num-layers") or 0)
        return n.isdigit() and int(n) > 0
    arg = "--" + attr.replace("_", "-")
    return ("true" if opts[arg] is None else opts[arg]) if arg in opts else default


def fp8_param_gather(v, src: str, opts: dict, led: Ledger) -> None:
    """--fp8-param-gather: Plan.fp8_params with --fp8-format, given the distributed optimizer or Megatron-FSDP it
    needs (arguments.py:1061-1063 refuses it otherwise); torch FSDP2 turns it off (arguments.py:1017-1022)."""
    k = "--fp8-param-gather"
    if "--use-torch-fsdp2" in opts:
        led.skip(k, "true", src, "with --use-torch-fsdp2 Megatron-LM turns it off on Transformer Engine 2.x "
                 "(arguments.py:1017-1022 at 2a75ac1): the weights stay bf16")
        return
    if not {"--use-distributed-optimizer", "--use-megatron-fsdp", "--use-custom-fsdp"} & set(opts):
        raise InputError("Megatron-LM argument --fp8-param-gather without --use-distributed-optimizer or "
                         "--use-megatron-fsdp, which Megatron-LM refuses (arguments.py:1061-1063 at 2a75ac1); valid: "
                         "add one of them, or drop --fp8-param-gather")
    fp8_param_fate(k, "true", src, led, "--fp8-format" in opts)
