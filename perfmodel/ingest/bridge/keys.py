"""Megatron-Bridge's vocabulary as `perfmodel import --from bridge` reads it: the models its recipes name (HF ids and
ModelProvider classes) with the perfmodel preset of each, its named mixed-precision recipes, the provider fields that
change the model's shape, and why each other section is not priced.

Sources: NVIDIA-NeMo/Megatron-Bridge at 067f987 (src/megatron/bridge/training/mixed_precision.py, the recipes under
src/megatron/bridge/recipes/) and v0.1.0rc4 (the provider classes of src/megatron/bridge/models/).
"""

from __future__ import annotations

from ..megatron.keys import NOT_PRICED_WHY, REASONS

# ModelProvider classes (megatron.bridge.models) -> preset
PROVIDER_PRESETS = {
    "Llama3ModelProvider8B": "llama-3-8b", "Llama3ModelProvider70B": "llama-3-70b",
    "Llama31ModelProvider8B": "llama-3.1-8b", "Llama31ModelProvider70B": "llama-3.1-70b",
    "Llama31ModelProvider405B": "llama-3.1-405b", "Llama2ModelProvider7B": "llama-2-7b",
    "Llama2ModelProvider13B": "llama-2-13b", "Llama2ModelProvider70B": "llama-2-70b",
    "Qwen3MoEModelProvider30B_A3B": "qwen3-30b-a3b", "Qwen3MoEModelProvider235B_A22B": "qwen3-235b-a22b",
    "DeepSeekV3ModelProvider": "deepseek-v3", "DeepSeekV3Provider": "deepseek-v3",
    "MoonlightModelProvider16B": "moonlight-16b-a3b", "GPTOSSProvider20B": "gpt-oss-20b",
    "GPTOSSProvider120B": "gpt-oss-120b",
}

# mixed_precision recipes (mixed_precision.py at 067f987: each @register'd function's fp8 / fp8_recipe / fp4)
_FP8 = {"delayed_scaling": "tensorwise", "current_scaling": "tensorwise", "subchannel_scaling": "blockwise"}
PRECISIONS: dict[str, dict] = {"bf16_mixed": {"plan__precision": "bf16"}, "fp16_mixed": {"plan__precision": "fp16"}}
for _base in ("bf16", "fp16"):
    for _kind, _recipe in _FP8.items():
        PRECISIONS[f"{_base}_with_fp8_{_kind}_mixed"] = {"plan__precision": "fp8", "plan__fp8_recipe": _recipe}
    PRECISIONS[f"{_base}_with_mxfp8_mixed"] = {"plan__precision": "fp8", "plan__fp8_recipe": "mxfp8"}
for _name in ("nemotron_h_bf16_with_fp8_current_scaling_mixed", "nanov2_bf16_with_fp8_current_scaling_mixed"):
    PRECISIONS[_name] = {"plan__precision": "fp8", "plan__fp8_recipe": "tensorwise"}
for _name in ("bf16_with_nvfp4_mixed", "nemotron_3_super_bf16_with_nvfp4_mixed"):
    PRECISIONS[_name] = {"plan__precision": "fp4"}
PRECISIONS |= {k.replace("_", "-"): v for k, v in list(PRECISIONS.items())}  # register() adds hyphenated names

# provider fields that change the preset's shape -> (ModelConfig field, MoEConfig field or None)
SHAPE = {"num_layers": ("n_layers", None), "hidden_size": ("hidden", None), "ffn_hidden_size": ("ffn_hidden", None),
         "num_attention_heads": ("n_heads", None), "num_query_groups": ("n_kv_heads", None),
         "kv_channels": ("head_dim", None), "mtp_num_layers": ("mtp_layers", None), "vocab_size": ("vocab", None),
         "num_moe_experts": ("moe", "n_experts"), "moe_router_topk": ("moe", "top_k"),
         "moe_ffn_hidden_size": ("moe", "expert_ffn_hidden")}

SECTION_WHY = {
    "dataset": REASONS["data"], "tokenizer": REASONS["data"] + " (the preset's vocabulary is priced)",
    "optimizer": REASONS["optimizer"], "scheduler": REASONS["optimizer"], "logger": REASONS["logging"],
    "profiling": REASONS["logging"], "checkpoint": REASONS["checkpoint"], "validation": REASONS["eval"],
    "rng": "a random seed: same shapes, same cost", "dist": REASONS["runtime"], "ft": REASONS["runtime"],
    "straggler": REASONS["runtime"], "nvrx_straggler": REASONS["runtime"], "inprocess_restart": REASONS["runtime"],
    "rerun_state_machine": REASONS["runtime"], "env_vars": "environment variables of the run: not priced",
    "mixed_precision": "a precision detail: perfmodel prices the GEMMs' precision and FP8 recipe alone",
    "model": "a model-provider setting perfmodel does not read: the preset gives the model",
    "train": "a training-loop setting: does not change the priced step",
    "comm_overlap": "a communication-overlap tuning detail: perfmodel prices tp_comm_overlap and the MoE overlap "
                    "alone",
    "ddp": REASONS["runtime"],
}
# Bridge keys whose Megatron-LM argument is spelled differently
RENAMED = {"average_in_collective": "--ddp-average-in-collective", "cuda_graph_scope": "--cuda-graph-warmup-steps"}
ARG_SECTIONS = ("model", "train", "ddp", "comm_overlap", "checkpoint", "logger")  # whose keys Megatron-LM spells


def key_why(section: str, attr: str, arg: str) -> str:
    """Why a key is not priced: Megatron-LM's reason for the argument it spells, else its section's."""
    arg = RENAMED.get(attr, arg)
    why = NOT_PRICED_WHY.get(arg) if section in ARG_SECTIONS else None
    return why or SECTION_WHY.get(section) or f"a {section} setting perfmodel does not read; it may change what runs"


def dtype_of(v) -> str:
    """torch.float32 / torch.bfloat16 / torch.float16 (as the recipe spells them) -> fp32 / bf16 / fp16."""
    text = str(v).rsplit(".", 1)[-1]
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "fp32": "fp32", "bf16": "bf16",
            "fp16": "fp16"}.get(text, text)
