"""A part's measured grouped-GEMM slowdown: how much longer a device's local experts take as one grouped GEMM than
one dense GEMM of the same rows (measured by the grouped-GEMM benchmark)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from ...types import Count, Schema


class GroupedGemmSlowdown(Schema):
    """Seconds of a grouped GEMM (g experts' weights, m routed tokens each, one kernel) over those of one dense GEMM
    of the same g*m rows and the same n and k, per training pass, measured at `tokens_per_group` (median over
    expert shapes and 2-32 groups): what the per-group tiles and the grouped kernel cost beyond the dense rate
    (cost.compute.grouped_gemm.grouped_slowdown)."""

    tokens_per_group: list[Count] = Field(description="routed tokens per expert at the measured points, increasing")
    forward: list[Annotated[float, Field(gt=0, le=100)]] = Field(description="Y = X W^T, ratio at each point")
    input_grad: list[Annotated[float, Field(gt=0, le=100)]] = Field(description="dX = dY W, ratio at each point")
    weight_grad: list[Annotated[float, Field(gt=0, le=100)]] = Field(
        description="dW = dY^T X per expert (inner dimension m, where the dense GEMM's is g*m), ratio at each point")

    @model_validator(mode="after")
    def _aligned(self):
        n = len(self.tokens_per_group)
        if n < 2 or sorted(set(self.tokens_per_group)) != self.tokens_per_group:
            raise ValueError(f"tokens_per_group = {self.tokens_per_group}; valid: two or more increasing counts")
        for name in ("forward", "input_grad", "weight_grad"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} ratios for {n} tokens_per_group points; "
                                 "valid: one ratio per point")
        return self
