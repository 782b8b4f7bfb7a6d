"""Activation checkpointing (torchtitan's apply_ac): `full` recomputes each transformer block in the backward,
`selective` only the attention core (Korthikanti et al. 2022, Sec. 5: the attention core's activations are the
large, cheap-to-recompute ones), `none` keeps everything. Uses torch's checkpoint_wrapper (non-reentrant)."""

from __future__ import annotations

from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    checkpoint_wrapper,
)

WRAPPED = "_checkpoint_wrapped_module."  # the name prefix checkpoint_wrapper adds


def apply_ac(stage: nn.Module, mode: str) -> None:
    if mode == "none":
        return
    for key, block in list(stage.layers.items()):
        if mode == "full":
            stage.layers[key] = checkpoint_wrapper(block)
        else:
            block.attention.core = checkpoint_wrapper(block.attention.core)


def plain_name(name: str) -> str:
    """A parameter's name without the wrappers' prefixes (the name its initial value is drawn under)."""
    return name.replace(WRAPPED, "")
