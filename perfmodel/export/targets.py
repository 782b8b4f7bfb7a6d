"""Translate a plan file into the configuration of one version of a training framework: Megatron-LM, torchtitan,
DeepSpeed or MaxText.

Each target module names the framework versions it writes for (`VERSIONS`: version -> the PyPI release whose own
checks accept its output, perfmodel.export.checks), says which plan settings a version cannot express
(`nearest_plan`: the plan-field updates to the nearest plan it can, with a reason each; perfmodel.export.nearest applies
them and re-predicts) and writes the configuration in the format that version reads. What the configuration still
leaves out (model-level facts such as ALiBi, a placement no framework option carries) is stated plainly: comments
for Megatron-LM, torchtitan and MaxText, a "_perfmodel_not_expressed" list for DeepSpeed's JSON. No setting is dropped
silently.

This module reads the plan file only; it imports nothing from the cost model.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputError
from ..spec.plan.file import PlanFile
from . import deepspeed as _deepspeed
from .maxtext import config as _maxtext
from .megatron import script as _megatron
from .torchtitan import config as _torchtitan

TARGETS = ("megatron", "torchtitan", "deepspeed", "maxtext")
_MODULES = {"megatron": _megatron, "torchtitan": _torchtitan, "deepspeed": _deepspeed, "maxtext": _maxtext}


def _module(to: str):
    if to not in _MODULES:
        raise InputError(f"--to = {to!r} is not a known target; valid: {', '.join(TARGETS)}")
    return _MODULES[to]


def versions(to: str) -> dict[str, str]:
    """The versions of `to` perfmodel writes for, newest first: version -> the PyPI release checked."""
    return dict(_module(to).VERSIONS)


def _refuse_lora(pf: PlanFile, to: str) -> None:
    """No target fine-tunes adapters: a LoRA plan exported as full training would be another job."""
    if pf.plan.lora is not None:
        raise InputError(f"plan.lora = rank {pf.plan.lora.rank}: {to}'s training configuration has no LoRA adapters "
                         "(Megatron-LM's pretrain_gpt.py, torchtitan, DeepSpeed and MaxText's base.yml train every "
                         "weight); valid for export: a plan without lora")


def nearest_updates(pf: PlanFile, to: str, version: str) -> tuple[dict, list[str]]:
    """Plan-field updates to the nearest plan `to` at `version` (default its newest) expresses ({} when it expresses
    pf.plan), and why."""
    module = _module(to)
    _refuse_lora(pf, to)
    return module.nearest_plan(pf, version or next(iter(module.VERSIONS)))


def export(pf: PlanFile, to: str, version: str | None = None, changes: Sequence[str] = ()) -> str:
    """The configuration of framework `to` (one of TARGETS) at `version` (default its newest) for plan file `pf`,
    as text ending in a newline; `changes`: how pf's plan differs from the one planned (perfmodel.export.nearest)."""
    module = _module(to)
    _refuse_lora(pf, to)
    version = version or next(iter(module.VERSIONS))
    updates, why = module.nearest_plan(pf, version)
    if updates:
        raise InputError(f"plan: {to} {version} cannot run it as planned ({'; '.join(why)}); "
                         "perfmodel.export.nearest.export_plan (what `perfmodel export` runs) exports the nearest plan it "
                         "can, re-predicted")
    return getattr(module, to)(pf, version, changes)
