"""fp8 scaling recipes (Transformer Engine's): how a plan at precision = fp8 scales its GEMM operands, which decides
the scale bytes it keeps (cost.compute.kernels.FP8_SCALE_BYTES) and which parts can run it."""

from __future__ import annotations

from typing import Literal

from ...errors import InputError
from ..hardware.system import System

Fp8Recipe = Literal["tensorwise", "blockwise", "mxfp8"]


def fp8_recipe_of(precision: str, recipe: str | None, system: System) -> str | None:
    """A plan's fp8 recipe: the one given, else tensorwise (Transformer Engine's default DelayedScaling, Megatron-LM's
    --fp8-recipe delayed); None off fp8. InputError for a recipe without fp8, or mxfp8 before Blackwell
    (Transformer Engine's MXFP8BlockScaling needs sm100 tensor cores)."""
    if precision != "fp8":
        if recipe is not None:
            raise InputError(f"fp8_recipe = {recipe} with precision = {precision}: a recipe scales fp8 GEMMs; valid: "
                             "precision = fp8, or no fp8_recipe")
        return None
    blackwell = system.accelerator.generation_name == "blackwell"
    if recipe == "mxfp8" and not blackwell:
        raise InputError(f"fp8_recipe = mxfp8 on {system.accelerator.name} ({system.accelerator.generation_name}): "
                         "MXFP8's per-32-value scales run on Blackwell tensor cores (Transformer Engine "
                         "MXFP8BlockScaling needs sm100); valid here: tensorwise, blockwise")
    return recipe or "tensorwise"
