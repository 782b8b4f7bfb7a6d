"""The model a serving command names (a Hugging Face id, a local checkpoint folder) -> a perfmodel preset, and
the precision the checkpoint's own name or config states.

`spec.model.catalogue.preset_for_hf_id` reads ids as the training configs name them; a served checkpoint's id
often carries a release or quantization suffix besides (`deepseek-ai/DeepSeek-R1-0528`,
`Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8`, `nvidia/Llama-3.3-70B-Instruct-FP4`), which `preset_for` strips one word
at a time from the end before giving up.
"""

from __future__ import annotations

import re

from ...spec.model.catalogue import HF_IDS, preset_for_hf_id

# Trailing words of a checkpoint's name that say when it was released or how it was quantized, not its shape:
# dates (DeepSeek-V3-0324, R1-0528, Qwen3-...-2507), versions after a date (-v2), quantizations
_RELEASE = re.compile(r"\d{4}|v\d+|preview|pt|fp8|fp4|nvfp4|mxfp4|awq|gptq|int4|int8|w4a16|w8a8|dynamic|block|"
                      r"instruct|base|chat|it|hf", re.IGNORECASE)
# What a trailing quantization word makes the GEMMs (ServePlan.precision)
_NAMED = {"fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "w4a16", "awq": "w4a16", "gptq": "w4a16",
          "int4": "w4a16", "w4a16": "w4a16"}
# Checkpoints whose config.json states a quantization their names do not (quantization_config.quant_method):
# deepseek-ai's DeepSeek-V3 / R1 and moonshotai's Kimi-K2 ship block-scaled FP8 weights ("fp8", weight_block_size
# [128, 128]); openai's gpt-oss ships MXFP4 experts ("mxfp4"), which vLLM runs on Hopper as W4A16 (Marlin, docs/
# inference.md "precision")
_CONFIG_QUANT = ((re.compile(r"deepseek-ai/deepseek-(v3|r1)", re.IGNORECASE), "fp8"),
                 (re.compile(r"moonshotai/kimi-k2", re.IGNORECASE), "fp8"),
                 (re.compile(r"openai/gpt-oss-", re.IGNORECASE), "w4a16"))


# An id's last part -> preset, for a checkpoint another organisation republished (nvidia/DeepSeek-R1-FP4)
_BY_NAME = {hf.rpartition("/")[2].lower(): preset for hf, preset in HF_IDS.items()}


def preset_for(model_id: str) -> tuple[str | None, str]:
    """(the preset `model_id` names or None, how it was read: '' or the words set aside)."""
    org, _, name = model_id.rstrip("/").rpartition("/")
    parts, dropped = name.split("-"), []
    while True:
        here = "-".join(parts)
        found = preset_for_hf_id(f"{org}/{here}" if org else here) or _BY_NAME.get(here.lower())
        if found:
            return found, (f"-{'-'.join(dropped)} set aside: a release or quantization of the same shape" if dropped
                           else "")
        if len(parts) < 2 or not _RELEASE.fullmatch(parts[-1]):
            return None, ""
        dropped.insert(0, parts.pop())


def precision_named(model_id: str) -> tuple[str | None, str]:
    """(the GEMM precision a checkpoint's name or known config states, why), or (None, '')."""
    name = model_id.rstrip("/").rpartition("/")[2]
    if re.search(r"-w-[a-z0-9]+-a-[a-z0-9]+$", name, re.IGNORECASE):  # weights and activations apart (AMD Quark)
        return None, ""
    for word in reversed(name.split("-")):
        if word.lower() in _NAMED:
            return _NAMED[word.lower()], f"the checkpoint's name ends in {word}: its weights are stored so"
        if not _RELEASE.fullmatch(word):
            break
    for pattern, precision in _CONFIG_QUANT:
        if pattern.match(model_id):
            return precision, "the checkpoint's config.json quantization_config states it"
    return None, ""
