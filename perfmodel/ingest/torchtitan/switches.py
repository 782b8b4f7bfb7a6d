"""torchtitan's precision and switches: the float8 / MX / NVFP4 converters and the stored dtypes
(training.dtype, mixed_precision_*), sequence and async tensor parallelism, torch.compile's components, CPU offload,
the chunked loss, and the switches perfmodel does not price. Sources as torchtitan.keys'."""

from __future__ import annotations

from ...errors import InputError
from ...spec.plan.layout import Plan

# converter -> (precision, fp8 recipe); [model] converters names (3cabf56b and 2bfcdd8e, 2025: "float8", "mx", the
# names register_model_converter gives them; 0.2.x: quantize.linear.*), 2026 config classes in model_registry
_CONVERTERS = {"float8": ("fp8", "tensorwise"), "quantize.linear.float8": ("fp8", "tensorwise"),
               "mx": ("fp8", "mxfp8"), "Float8LinearConverter": ("fp8", "tensorwise"),
               "quantize.linear.mx": ("fp8", "mxfp8"),
               "MXFP8LinearConverter": ("fp8", "mxfp8"), "NVFP4LinearConverter": ("fp4", None)}
_EXPERT_CONVERTERS = ("quantize.grouped_mm.float8", "quantize.grouped_mm.mx", "Float8GroupedExpertsConverter",
                      "MXFP8GroupedExpertsConverter", "float8_grouped_mm")


def quantization(get, put, skip, led, keys) -> None:
    """[model] converters: a float8 / MX linear converter runs every linear's GEMMs in fp8 (tensorwise scaling:
    torchao Float8Linear's default recipe; MX: mxfp8 blocks); training.dtype / mixed_precision_* -> the stored
    weights', moments' and gradients' dtypes."""
    converters = get("model.converters") or []
    linear = [c for c in converters if c in _CONVERTERS]
    other = [c for c in converters if c not in _CONVERTERS and c not in _EXPERT_CONVERTERS]
    if other:
        raise InputError(f"[model] converters = {converters}: {', '.join(map(str, other))} is not priced; valid: "
                         f"{', '.join(sorted(set(_CONVERTERS) | set(_EXPERT_CONVERTERS)))}")
    emulate = any(get(f"model.converters.{c}.emulate") is True for c in linear)
    if len({_CONVERTERS[c] for c in linear}) > 1:
        raise InputError(f"[model] converters = {converters}: two linear converters; valid: one")
    if linear and not emulate:
        precision, recipe = _CONVERTERS[linear[0]]
        recipe = _recipe(get, linear[0], recipe)
        put("model.converters", f"{linear[0]}: every linear's GEMMs in {precision}" + (
            f" ({linear[0]!r}: the 2025 name of 0.2.2's quantize.linear.{linear[0]})" if "." not in linear[0]
            and linear[0][0].islower() else "")
            + (" (the experts' grouped GEMMs too)" if len(converters) > 1 else ""), plan__precision=precision,
            **({"plan__fp8_recipe": recipe} if recipe else {}))
    elif linear:
        put("model.converters", "emulate = true: float8 emulated in bf16 (a test mode)", plan__precision="bf16")
    elif converters:
        skip("model.converters", "float8 for the experts' grouped GEMMs alone: perfmodel's precision is every "
             "GEMM's; not priced")
    for e in keys.values():
        if e.key.startswith(("float8.", "quantize.", "mx.", "model.converters.")) and linear and not emulate:
            skip(e.key, "a detail of the float8 recipe (all-gathers stay bf16, filtered modules), not priced")
    dtype = get("training.dtype", "float32")
    param = get("training.mixed_precision_param", "bfloat16")
    if param != "bfloat16" or dtype not in ("float32", "bfloat16"):
        raise InputError(f"training.mixed_precision_param = {param}, training.dtype = {dtype}: fp32 compute is not "
                         "priced; valid: mixed_precision_param = bfloat16, dtype float32 or bfloat16")
    put("training.mixed_precision_param", "bf16 compute (perfmodel's precision: the GEMMs')")
    bf16 = dtype == "bfloat16"
    states = {"plan__weight_dtype": "bf16" if bf16 else "fp32", "plan__moment_dtype": "bf16" if bf16 else "fp32"}
    states = {k: v for k, v in states.items() if k[6:] in Plan.model_fields}
    put("training.dtype", "parameters, gradients and optimizer state in bf16, no fp32 copy" if bf16 else
        "fp32 parameters and optimizer state (mixed precision by fully_shard)", **states,
        **({"plan__grad_dtype": "bf16"} if bf16 else {}))
    if bf16:
        skip("training.mixed_precision_reduce", "no effect with training.dtype = bfloat16")
    else:
        put("training.mixed_precision_reduce", "gradients reduced in fp32", plan__grad_dtype="fp32")
    led.default("training.dtype", "float32", "fp32 weights and moments (JobConfig / TrainingConfig)", **states)
    led.default("training.mixed_precision_reduce", "float32", "gradients reduced in fp32", plan__grad_dtype="fp32")


def _recipe(get, converter: str, default: str | None) -> str | None:
    name = get("quantize.linear.float8.recipe_name", get("float8.recipe_name",
                                                          get(f"model.converters.{converter}.recipe_name")))
    if default != "tensorwise" or name in (None, "tensorwise"):
        return default
    raise InputError(f"float8 recipe_name = {name!r} is not priced (perfmodel's fp8 recipes: tensorwise, blockwise, "
                     "mxfp8); valid: tensorwise")


def switches(get, put, skip, led, tp: int, python: bool, era: dict) -> None:
    """Sequence parallelism (0.2.2: always with tp; 2026: enable_sequence_parallel), async tensor parallelism
    (tp collectives beside the GEMMs: tp_comm_overlap), torch.compile's components, the loss's chunks."""
    if python:
        put("parallelism.enable_sequence_parallel", plan__sequence_parallel=bool(
            get("parallelism.enable_sequence_parallel")) and tp > 1)
        led.default("parallelism.enable_sequence_parallel", True, "ParallelismConfig (torchtitan/config/configs.py:169 "
                    "at b5bcd76c)",
                    plan__sequence_parallel=tp > 1)
    else:
        led.default("sequence parallelism", "with tensor parallelism", "torchtitan 0.2.2 applies it whenever tp > 1",
                    plan__sequence_parallel=tp > 1)
    for key in ("parallelism.enable_async_tensor_parallel", "compile.enable_async_tensor_parallel"):
        if get(key) is not None:
            put(key, "tp collectives pipelined with the GEMMs" if get(key) else "",
                plan__tp_comm_overlap=bool(get(key)))
    enable = bool(get("compile.enable", False))
    parts, era_why = era.get("compile_parts", (["model", "loss"], ""))
    parts = get("compile.components", parts)
    compiled = {frozenset({"model", "loss"}): "model+loss", frozenset({"model"}): "model"}.get(frozenset(parts))
    if not enable:
        put("compile.enable", plan__compile="none")
        skip("compile.components", "compile.enable is false")
    else:
        put("compile.enable", era_why, plan__compile=compiled or "none")
        put("compile.components", "torch.compile of each block and the loss" if compiled == "model+loss" else
            "torch.compile of each block" if compiled else f"{parts}: compiling the loss alone is not priced "
            "(plan.compile: none, model, model+loss); priced eager")
    skip("compile.backend", "inductor is the compiler priced")
    led.default("compile.enable", False, "eager", plan__compile="none")
    offload = get("training.enable_cpu_offload", False)
    if offload:
        raise InputError("training.enable_cpu_offload = true: FSDP2's CPUOffloadPolicy steps Adam on the host's CPUs, "
                         "which perfmodel does not price; valid: false")
    put("training.enable_cpu_offload", plan__optimizer_offload=False)
    chunks = get("loss.num_chunks")
    if chunks is not None:
        put("loss.num_chunks", "ChunkedLossWrapper: the LM head and loss in chunks" if chunks > 1 else
            "the LM head and loss in one piece", plan__loss_chunks=int(chunks))
    for key, why in (("parallelism.disable_loss_parallel", "the loss over tp-sharded logits: priced as the tp "
                      "plan's LM head"), ("parallelism.context_parallel_load_balancer", "cp load balancing: "
                      "priced balanced"), ("parallelism.context_parallel_rotate_method", "cp's KV exchange: "
                      "priced one way"), ("parallelism.enable_fsdp_symm_mem", "FSDP collectives' transport"),
                     ("parallelism.spmd_backend", "the tensor-parallel implementation"),
                     ("training.disable_cuda_graphs", "CUDA graphs are left to the torchtitan stack's default"),
                     ("model.attn_backend", "fused attention either way (SDPA, FlexAttention, varlen)"),
                     ("model.print_after_conversion", "logging")):
        skip(key, why)
