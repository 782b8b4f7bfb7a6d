"""What a Megatron-Bridge config's name states: the GPU count, the GPU kind and the compute dtype, as Bridge's own
naming rules write them (`perfmodel import --from bridge`).

- perf recipes (src/megatron/bridge/perf_recipes/<model>/<gpu>/*.py at 067f987): `llama31_405b_pretrain_1024gpu_h100_
  bf16_config`, `..._64gpu_gb200_fp8cs_config`; the folder is the GPU kind too;
- WorkloadBaseConfig tables (scripts/performance/utils/utils.py:79-82 at c3e43e6): `f"{model_recipe_name}_{gpu}_
  {compute_dtype}".upper() + "_BASE_CONFIG"`, e.g. DEEPSEEK_V3_PRETRAIN_CONFIG_H100_BF16_BASE_CONFIG;
- perf_matrix YAMLs (scripts/performance/setup_experiment.py:53 at 8cec56d): the file `{model_name}_{model_size}_
  {domain}_{task}.yaml`, its entries perf_matrix.<gpu>.num_gpus_<n>.<compute dtype>.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Bridge's GPU words (perf_recipes/<model>/<gpu>/ folders at 067f987: b200, b300, gb200, gb300, h100, r100, vr200;
# scripts/performance --gpu choices) -> the catalogue's system (perfmodel hardware list). None: no system for it.
GPU_SYSTEMS: dict[str, str | None] = {"h100": "dgx-h100", "h200": "dgx-h200", "b200": "dgx-b200", "b300": "dgx-b300",
                                      "gb200": "gb200-nvl72", "gb300": "gb300-nvl72", "r100": None, "vr200": None}

# A compute dtype (separators dropped) -> the mixed-precision recipe Bridge builds for it: perf_recipes/_common.py:
# 100-121 (_perf_precision) at 067f987, scripts/performance/utils/precision.py:26-43 (get_precision_config) at c3e43e6 and
# utils/helpers.py:65-81 (compute dtype fp8 + fp8 recipe ds / cs / mx / ss) at 8cec56d.
COMPUTE_DTYPES = {"bf16": "bf16_mixed", "fp8cs": "bf16_with_fp8_current_scaling_mixed",
                  "fp8ds": "bf16_with_fp8_delayed_scaling_mixed", "fp8mx": "bf16_with_mxfp8_mixed",
                  "fp8sc": "bf16_with_fp8_subchannel_scaling_mixed", "fp8ss": "bf16_with_fp8_subchannel_scaling_mixed",
                  "nvfp4": "bf16_with_nvfp4_mixed"}
PRECISION_HELPERS = ("_perf_precision", "get_precision_config")  # helper(compute_dtype[, fp8_recipe]) -> recipe

_COUNT = re.compile(r"^(\d+)gpus?$")


@dataclass
class NameSays:
    """What a config's name states (None where it states nothing)."""

    gpus: int | None = None
    gpu: str | None = None  # Bridge's GPU word: h100, gb200, vr200, ...
    dtype: str | None = None  # the compute dtype, separators dropped: bf16, fp8cs, nvfp4, ...
    recipe: str | None = None  # the base recipe the name is built from (WorkloadBaseConfig tables)

    @property
    def system(self) -> str | None:
        return GPU_SYSTEMS.get(self.gpu or "")


def precision_recipe(compute_dtype: str, fp8_recipe: str | None = None) -> str | None:
    """The mixed-precision recipe of a compute dtype ('fp8_cs', 'bf16'; 8cec56d's ('fp8', 'cs')), or None."""
    text = (compute_dtype + (fp8_recipe or "") if compute_dtype == "fp8" else compute_dtype).lower()
    return COMPUTE_DTYPES.get(text.replace("_", "").replace("-", ""))


def name_says(name: str, path: Path | None = None) -> NameSays:
    """The GPU count, GPU kind and compute dtype a recipe function's or table entry's name states; the GPU kind from
    the file's folder (perf_recipes/<model>/<gpu>/) where the name has none."""
    words = name.lower().replace(".", "_").split("_")
    says = NameSays()
    for i, w in enumerate(words):
        if (m := _COUNT.match(w)) and says.gpus is None:
            says.gpus = int(m.group(1))
        elif w in GPU_SYSTEMS and says.gpu is None:
            says.gpu = w
            says.recipe = "_".join(words[:i]) if i and words[i - 1] == "config" else None
        elif says.dtype is None and (w in COMPUTE_DTYPES or w + "".join(words[i + 1:i + 2]) in COMPUTE_DTYPES):
            says.dtype = w if w in COMPUTE_DTYPES else w + words[i + 1]
    if says.gpu is None and path is not None and path.parent.name in GPU_SYSTEMS:
        says.gpu = path.parent.name
    return says
