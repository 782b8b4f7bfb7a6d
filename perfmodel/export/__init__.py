"""Translate a plan file into the configuration of a training framework: Megatron-LM, torchtitan or DeepSpeed.

`export(pf, to)` returns text: the framework's configuration for every plan setting it can express, followed by
the settings it cannot, stated plainly (comments for Megatron-LM and torchtitan; a top-level
"_perfmodel_not_expressed" list for DeepSpeed's JSON). No plan setting is dropped silently: a setting is either
carried by a framework option, is that framework's default behaviour (said in a comment where it matters), or is
listed as not expressed together with what was exported instead.

Names follow (from the projects' documentation and source, 2024-2025):
- Megatron-LM core_r0.10-r0.12 `pretrain_gpt.py` arguments (megatron/training/arguments.py); for experts, latent
  attention and multi-token prediction core_r0.12 and later (megatron.MEGATRON_ARGS lists every argument written);
- torchtitan main of mid-2025 TOML job configs (torchtitan/config/job_config.py, train_configs/*.toml):
  training.local_batch_size / global_batch_size, parallelism.module_fqns_per_model_part, model.converters; for
  experts torchtitan 0.2.0's parallelism.expert_parallel_degree / expert_tensor_parallel_degree and its
  deepseek_v3 and qwen3 model flavors;
- DeepSpeed 0.16-0.17 config JSON (deepspeed.ai/docs/config-json; AutoTP training since 0.16.4); DeepSpeed-MoE's
  expert parallelism is set in model code (deepspeed.moe.layer.MoE), so the JSON only notes it.

This module reads the plan file only; it imports nothing from the cost model.
"""

from __future__ import annotations

from ..errors import InputError
from ..planfile import PlanFile
from .deepspeed import deepspeed
from .megatron import megatron
from .torchtitan import torchtitan

TARGETS = ("megatron", "torchtitan", "deepspeed")


def export(pf: PlanFile, to: str) -> str:
    """The configuration of framework `to` (one of TARGETS) for plan file `pf`, as text ending in a newline."""
    writers = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed}
    if to not in writers:
        raise InputError(f"--to = {to!r} is not a known target; valid: {', '.join(TARGETS)}")
    return writers[to](pf)
