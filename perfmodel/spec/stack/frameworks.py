"""Which software stack a runs table's `framework` cell names: one mapping, for the benchmarks, `calibrate
--from-runs`, the runs readers and the docs (docs/stacks.md, "Which stack a framework names").

NVIDIA's NeMo names three stacks over its releases, and the cell's version says which:
- NeMo 1.x, the NeMo-Megatron launcher (containers 23.xx-24.xx, `ngc23.09` in MLPerf v3.x-v4.x names, NeMo 1.x
  versions): the `nemo` profile (apex's distributed fused Adam, userbuffers TP overlap, bf16 gradients).
- NeMo 2 (containers 25.01 up to the first Megatron-Bridge one, NeMo 2.x versions, MLPerf v5 and later, or NeMo
  without a version, as on ROCm's NeMo 2 ports): the `nemo2` release line over `megatron-core`, Megatron-Core's own
  DDP and distributed optimizer with NeMo's performance-script defaults.
- Megatron-Bridge's NeMo containers (25.09 and later): the `megatron-bridge` release line.
A container runs its line's release of that version, or the newest one before it (the line's first where it comes
earlier); a cell naming no version runs the line's newest (the bare line name).
"""

from __future__ import annotations

import re

from ...errors import InputError
from .profile import STACKS
from .release import is_release, load_line

# A runs CSV's `framework` text -> stack: the first keyword found wins (NeMo runs on Megatron-Core, so it is
# tested before 'megatron'; Megatron-DeepSpeed is DeepSpeed's engine). NeMo and Megatron-Bridge cells go through
# `nemo_stack` first.
_FRAMEWORK_WORDS = (("maxtext", "maxtext"), ("automodel", "nemo-automodel"), ("torchtitan", "torchtitan"),
                    ("llm.c", "llmc"), ("llmc", "llmc"),
                    ("nanogpt", "nanogpt"), ("nanochat", "nanogpt"), ("modded", "nanogpt"),
                    ("transformers", "hf-transformers"), ("accelerate", "hf-transformers"),
                    ("composer", "composer-fsdp1"),
                    ("llm-foundry", "composer-fsdp1"), ("mosaic", "composer-fsdp1"), ("deepspeed", "deepspeed"),
                    # MangoBoost LLMBoost: "NeMo/Megatron-based" in its own rows' words, a NeMo 2 era product
                    ("llmboost", "nemo2"),
                    ("megatron", "megatron-core"), ("nanotron", "nanotron"), ("perfmodel", "plain-torch"),
                    ("plain", "plain-torch"))

BRIDGE, NEMO2 = "megatron-bridge", "nemo2"
# 'NeMo 26.04.01 container', 'NeMo 24.05', '~NeMo 23.05/23.07', 'ngc23.09_nemo': a container's YY.MM[.PP]
_CONTAINER = re.compile(r"(?:nemo[\s_-]*(?:framework[\s_-]*)?|ngc)(\d\d)\.(\d\d)(?:\.(\d\d))?(?!\d)")
_SEMVER = re.compile(r"nemo[\s_-]*(?:framework[\s_-]*)?v?([12])\.(\d+)")  # 'NeMo 2.5.0rc0', 'NeMo 1.23'
_MLPERF = re.compile(r"mlperf(?:\s*training)?\s*v?(\d)\.\d")


def release_at(line: str, version: tuple[int, ...]) -> str:
    """`line@V`: the line's release V, or the newest one before it, or its first where V comes earlier."""
    names = [r.version for r in load_line(line).releases]
    keys = [tuple(int(x) for x in v.split(".")) for v in names]
    before = [n for n, k in zip(names, keys) if k <= version]
    return f"{line}@{before[-1] if before else names[0]}"


def _container_stack(version: tuple[int, ...]) -> str:
    """The stack a NeMo container YY.MM[.PP] runs (module docstring)."""
    if version[0] < 25:
        return "nemo"
    first_bridge = tuple(int(x) for x in load_line(BRIDGE).releases[0].version.split("."))
    return release_at(BRIDGE if version >= first_bridge else NEMO2, version)


def nemo_stack(low: str) -> str | None:
    """The stack a lower-cased NeMo or Megatron-Bridge framework cell names (module docstring); None for another
    framework."""
    if "nemo" not in low and "bridge" not in low:
        return None
    if (m := _CONTAINER.search(low)) is not None:
        return _container_stack(tuple(int(g) for g in m.groups() if g is not None))
    if "bridge" in low:
        return BRIDGE  # no container named: the line's newest release
    if (m := _SEMVER.search(low)) is not None:  # NeMo 2.2 shipped in container 25.02, 2.3 in 25.04, 2.4 in 25.07
        return "nemo" if m.group(1) == "1" else release_at(NEMO2, {2: (25, 2), 3: (25, 4), 4: (25, 7)}.get(
            int(m.group(2)), (99, 99) if int(m.group(2)) > 4 else (0, 0)))
    if (m := _MLPERF.search(low)) is not None:  # NVIDIA's MLPerf code moved to NeMo 2 for v5.0 (2025)
        return "nemo" if int(m.group(1)) < 5 else NEMO2
    return NEMO2  # NeMo without a version: its current major, NeMo 2


def stack_for_framework(text: str, where: str = "framework") -> str:
    """The stack a runs table's `framework` cell names ('NeMo 24.05 (Megatron-Core)' -> nemo, 'NeMo 26.04
    container (Megatron-Bridge)' -> megatron-bridge@26.04, 'NeMo 2.4.0' -> nemo2@25.07); a stack name is taken
    as it is. InputError naming the cell and the valid names otherwise."""
    low = str(text).strip().lower()
    if low in STACKS or is_release(low):  # a profile, or a release line's name (megatron-bridge@26.04)
        return low
    if "maxtext" in low:
        return "maxtext"
    if "automodel" in low:
        return "nemo-automodel"
    if (stack := nemo_stack(low)) is not None:
        return stack
    for word, stack in _FRAMEWORK_WORDS:
        if word in low:
            return stack
    raise InputError(f"{where} = {text!r} names no known software stack; valid: one of {', '.join(STACKS)}, a "
                     "release (megatron-bridge@26.04), or a framework name containing NeMo (with its container "
                     "or version), Megatron-Bridge, NeMo AutoModel, torchtitan, llm.c, nanoGPT/nanochat/"
                     "modded-nanogpt, transformers/Accelerate, Composer/llm-foundry, DeepSpeed, Megatron or nanotron")
