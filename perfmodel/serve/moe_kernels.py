"""A serving step's routed experts from the part's measured fused-MoE table (`hardware_specs/kernels/<part>/
moe.csv.gz`: TensorRT-LLM's fused MoE forward by model shape, moe_tp x moe_ep slice and tokens; fp8_block: the
block-scaled kernels of DeepSeek-style fp8 checkpoints, CUTLASS on Hopper and DeepGEMM on Blackwell)."""

from __future__ import annotations

from ..cost.compute.kernel_lookup import moe_table_time
from ..cost.compute.kernels import Device
from ..spec.hardware.kernel_tables import moe_curves
from ..spec.serving.schema import ServePlan

MOE_DTYPES = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp4": "fp4"}  # the table's dtypes (fp16: bf16's rate)


def moe_table_s(dev: Device, plan: ServePlan, tokens: float) -> float | None:
    """One MoE layer's routed experts on one GPU from the part's measured fused-MoE table (routing, permutation,
    the gated grouped GEMMs, finalize: TensorRT-LLM's CUTLASS MoE, `cost.compute.kernel_lookup.moe_table_time`) at the
    model's shape and the replica's moe_tp = tp / ep, moe_ep = ep, divided by the device's sustained fraction as the GEMM
    tables are (`cost.compute.kernels.Device.gemm_priced`); None where the part or the shape has no table. fp8 of a model
    whose fp8 weights come in 128 x 128 blocks (`ModelConfig.fp8_weight_blocks`) reads the block-scaled kernel's
    rows (fp8_block), the per-tensor ones where its shape has none."""
    table = dev.system.accelerator.kernel_tables.get("moe")
    if table is None or tokens <= 0 or plan.precision not in MOE_DTYPES:  # no W4A16 curve at these shapes
        return None
    m, e = dev.model, dev.model.moe
    dtypes = (["fp8_block"] if plan.precision == "fp8" and m.fp8_weight_blocks else []) + [MOE_DTYPES[plan.precision]]
    for dtype in dtypes:
        t = moe_table_time(moe_curves(table), (dtype, m.hidden, e.expert_ffn_hidden, e.top_k, e.n_experts, plan.etp,
                                               plan.ep), tokens)
        if t is not None:
            return t / dev.fraction
    return None
