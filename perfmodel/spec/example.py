"""The built-in example: the question the tool exists for, asked of one plan. `perfmodel predict` with no flags
runs it (so does the README's first command); it lives here alone, so every command and page that starts from
an example starts from this one (`cli.plan_flags.EXAMPLE` writes it as predict's flags).

Llama 3 70B on 512 H100s (64 DGX H100) at 8,192 tokens and 1,024 sequences per step, with Megatron-LM's layout
for a model of that size: tensor parallelism 8 inside each node with sequence parallelism, 4 pipeline stages,
data parallelism 16 with the optimizer state sharded (ZeRO-1), selective recompute of the attention core.
"""

from __future__ import annotations

from .plan.layout import Plan

MODEL = "llama-3-70b"
HARDWARE = "dgx-h100"
PLAN = {"gpus": 512, "tp": 8, "pp": 4, "micro_batch": 1, "global_batch": 1024, "seq_len": 8192,
        "sequence_parallel": True, "zero": 1, "recompute": "selective"}


def example_plan() -> Plan:
    """The example's plan (unresolved, as a user would write it)."""
    return Plan(**PLAN)
