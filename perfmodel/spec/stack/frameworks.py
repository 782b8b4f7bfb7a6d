"""Which software stack a runs table's `framework` cell names: one mapping, for the benchmarks, `calibrate
--from-runs`, the runs readers and the docs (docs/stacks.md, "Which stack a framework names").

NVIDIA's NeMo names three stacks over its releases, and the cell's version says which:
- NeMo 1.x, the NeMo-Megatron launcher (containers 23.xx-24.xx, `ngc23.09` in MLPerf v3.x-v4.x names, NeMo 1.x
  versions, "NeMo-Megatron" or "launcher" by name): the `nemo` profile (apex's distributed fused Adam, userbuffers TP
  overlap, bf16 gradients). The 24.09 and 24.12 containers also ship NeMo 2.0 / 2.1: a cell naming NeMo 2.x is NeMo 2.
- NeMo 2 (containers 25.01 up to the first Megatron-Bridge one, NeMo 2.x versions, MLPerf v5 and later, or NeMo
  without a version, as on ROCm's NeMo 2 ports): the `nemo2` release line over `megatron-core`, Megatron-Core's own
  DDP and distributed optimizer with NeMo's performance-script defaults.
- Megatron-Bridge's NeMo containers (25.09 and later), or a Megatron-Bridge tag (v0.2.0): the `megatron-bridge`
  release line.
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
# A container's YY.MM[.PP] after a NeMo or NGC word: 'NeMo 26.04.01 container', 'nvcr.io/nvidia/nemo:25.11.01',
# 'NeMo container 25.09', '~NeMo 23.05/23.07', 'ngc23.09_nemo'; not a NeMo 2.x version ('NeMo 2.5.0rc0')
_CONTAINER = re.compile(r"(?:nemo(?!tron)|ngc)\D{0,24}?(?<![\d.])(\d\d)\.(\d\d)(?:\.(\d\d))?(?![\d])")
_SEMVER = re.compile(r"nemo(?!tron)[\s_:/-]*(?:framework[\s_-]*)?v?([12])\.(\d+)(?![\d])")  # 'NeMo 2.5.0', 'NeMo 1.23'
_BRIDGE = re.compile(r"megatron[\s_-]?bridge")
_BRIDGE_TAG = re.compile(r"bridge\D{0,12}?v?(\d+\.\d+\.\d+(?:rc\d+)?)")  # 'Megatron-Bridge v0.2.0'
_NEMO = re.compile(r"nemo(?!tron)")
_LAUNCHER = re.compile(r"nemo[\s-]megatron|launcher")  # NeMo 1.x's own name, the NeMo-Framework-Launcher
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
    framework. A NeMo 2.x version wins over a container (24.09 and 24.12 ship NeMo 2.0 / 2.1 beside the launcher, so
    a cell naming only those containers is the launcher's); a Bridge tag (v0.2.0) names its release."""
    bridge = _BRIDGE.search(low) is not None
    if _NEMO.search(low) is None and not bridge:
        return None
    semver = _SEMVER.search(low)
    if semver is not None and semver.group(1) == "2":  # NeMo 2.2 shipped in container 25.02, 2.3 in 25.04, 2.4 in 25.07
        minor = int(semver.group(2))
        return release_at(NEMO2, {2: (25, 2), 3: (25, 4), 4: (25, 7)}.get(minor, (99, 99) if minor > 4 else (0, 0)))
    if (m := _CONTAINER.search(low)) is not None:
        return _container_stack(tuple(int(g) for g in m.groups() if g is not None))
    if bridge:
        tag = _BRIDGE_TAG.search(low)
        for r in load_line(BRIDGE).releases if tag else ():
            if r.bridge.lstrip("v") == tag.group(1):
                return f"{BRIDGE}@{r.version}"
        return BRIDGE  # no container or known tag named: the line's newest release
    if semver is not None or _LAUNCHER.search(low) is not None:
        return "nemo"  # NeMo 1.x by version, or the launcher by name
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
