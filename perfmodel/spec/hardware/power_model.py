"""A device's power as a training step draws it, and the clock its compute sustains under the board limit.

The estimate (cost.power) splits a step into four kinds of time and gives each its draw:
  - compute-bound kernels (tensor-core GEMMs, fused attention) at clock fraction s draw
    idle_w + (compute_w - idle_w) * s**clock_exponent and run at s times their kernel-table rate;
  - memory-bound kernels (norms, activations, the optimizer) draw memory_w and are not slowed by the SM clock;
  - exposed collectives draw comm_w; waits (pipeline bubble, host) draw idle_w.
The limit is enforced on the average over `window_s`, far longer than a kernel, so the step's compute runs at the
largest s <= 1 whose step-average power is within limit_w (s = 1: the unthrottled clock the kernel tables were
timed at). A GEMM looping alone is the case with nothing but compute time.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from ...types import Real, Schema
from .network import Datasheet


class PowerModel(Schema):
    """Board power by what the device runs, the limit on its average and how compute-bound work's draw follows the
    clock (cost.power prices a step with it; run.energy takes a run's energy from it). Watts; `window_s` seconds."""

    limit_w: Datasheet = Field(description="board power limit the firmware holds the average power to, W")
    window_s: Real = Field(gt=0, le=60, description="window the limit averages over, s: phases far shorter than it "
                                                    "share one clock")
    idle_w: Real = Field(ge=0, description="waiting with its context alive and clocks up (bubble, host waits), W")
    memory_w: Real = Field(ge=0, description="memory-bound kernels streaming HBM, at any SM clock, W")
    comm_w: Real = Field(ge=0, description="only collectives running (copy engines, a few SMs, links), W")
    compute_w: Real = Field(gt=0, description="compute-bound kernels at the kernel tables' clock were no limit "
                                              "held (above limit_w where the limit binds), W")
    clock_exponent: Real = Field(3.0, ge=1, le=4, description="compute-bound dynamic power ~ clock**this (f V^2 "
                                                              "with the voltage following the clock: 3)")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")

    @model_validator(mode="after")
    def _order(self):
        if not self.idle_w < self.limit_w:
            raise ValueError(f"idle_w = {self.idle_w:g} W must be below limit_w = {self.limit_w:g} W; valid: a "
                             f"device that waits draws less than its limit")
        for name in ("memory_w", "comm_w"):
            if not self.idle_w <= getattr(self, name) <= self.limit_w:
                raise ValueError(f"{name} = {getattr(self, name):g} W must lie between idle_w = {self.idle_w:g} "
                                 f"and limit_w = {self.limit_w:g} W")
        if self.compute_w < self.idle_w:
            raise ValueError(f"compute_w = {self.compute_w:g} W is below idle_w = {self.idle_w:g} W; valid: "
                             f">= idle_w")
        return self
