"""Which software stack a runs table's `framework` cell names (spec.stack.profile's profiles, or a release line)."""

from __future__ import annotations

from ...errors import InputError
from .profile import STACKS
from .release import is_release


# A runs CSV's `framework` text -> stack: the first keyword found wins (NeMo runs on Megatron-Core, so it is
# tested before 'megatron'; Megatron-DeepSpeed is DeepSpeed's engine).
_FRAMEWORK_WORDS = (("maxtext", "maxtext"), ("automodel", "nemo-automodel"), ("nemo", "nemo"), ("torchtitan", "torchtitan"),
                    ("llm.c", "llmc"), ("llmc", "llmc"),
                    ("nanogpt", "nanogpt"), ("nanochat", "nanogpt"), ("modded", "nanogpt"),
                    ("transformers", "hf-transformers"), ("accelerate", "hf-transformers"),
                    ("composer", "composer-fsdp1"),
                    ("llm-foundry", "composer-fsdp1"), ("mosaic", "composer-fsdp1"), ("deepspeed", "deepspeed"),
                    ("megatron", "megatron-core"), ("nanotron", "nanotron"), ("perfmodel", "plain-torch"),
                    ("plain", "plain-torch"))


def stack_for_framework(text: str, where: str = "framework") -> str:
    """The stack a runs table's `framework` cell names ('NeMo 24.05 (Megatron-Core)' -> nemo); a stack name is
    taken as it is. InputError naming the cell and the valid names otherwise."""
    low = str(text).strip().lower()
    if low in STACKS or is_release(low):  # a profile, or a release line's name (megatron-bridge@26.04)
        return low
    for word, stack in _FRAMEWORK_WORDS:
        if word in low:
            return stack
    raise InputError(f"{where} = {text!r} names no known software stack; valid: one of {', '.join(STACKS)}, or "
                     "a framework name containing NeMo (AutoModel), torchtitan, llm.c, nanoGPT/nanochat/modded-nanogpt, "
                     "transformers/Accelerate, Composer/llm-foundry, DeepSpeed, Megatron or nanotron")
