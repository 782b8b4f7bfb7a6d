"""Host costs of the executor's stack, as a hardware spec carries them (`System.host_costs`): seconds per operator
launch and per collective call that eager dispatch adds to a step, for training and for the serving loop, and
the probes they were measured on (perfmodel calibrate: calibrate.host.costs, calibrate.machine.serving_costs)."""

from __future__ import annotations

from pydantic import Field

from ...types import Count, PositiveReal, Real, Schema


class HostProbe(Schema):
    """One layout of the host-cost probe: a model too small to compute run by the executor, and the estimate."""

    name: str = Field(description="the probe's layout")
    measured_s: PositiveReal = Field(description="measured seconds per step")
    predicted_s: PositiveReal = Field(description="the spec's estimate without host costs, seconds per step")
    kernels: Real = Field(ge=0, description="operator launches per step on the slowest stage (forward, backward, "
                                             "recomputed forward; cost.compute.units.host_counts)")
    calls: Real = Field(ge=0, description="collective calls and sends per step on the slowest stage")
    pairs: Real = Field(0.0, ge=0, description="attention (sequence, local head) pairs per step (serving probes: "
                                               "calibrate.machine.serving_costs)")
    keys: Real = Field(0.0, ge=0, description="keys those pairs read in a decode step (serving probes)")


class SustainProbe(Schema):
    """The end-to-end step behind a CPU spec's sustained_fraction (calibrate.host.costs): a model that computes, run by the
    executor, against the estimate at the microbenchmark rates."""

    model: str = Field(description="the probe model (calibrate.host.costs.SUSTAIN_MODEL)")
    tokens_per_rank: Count = Field(description="tokens each rank trains per step")
    measured_s: PositiveReal = Field(description="measured seconds per step (lowest round's median)")
    predicted_s: PositiveReal = Field(description="the estimate with host costs at sustained fraction 1, seconds")
    compute_s: Real = Field(ge=0, description="of that, GEMM and attention seconds (F); the spec's "
                                               "sustained_fraction is F / (measured - (predicted - F)), clipped")


class ServingHostCosts(Schema):
    """The same host costs for the executor's serving loop (execute.inference: forwards without autograd), and the
    share of the microbenchmarked rates its prefill keeps (a CPU), measured by perfmodel calibrate's serving
    probes (calibrate.machine.serving_costs); the serving cost charges them to the executor's serving stack
    (serve.step_time)."""

    kernel_s: Real = Field(ge=0, description="seconds per operator launch")
    collective_s: Real = Field(ge=0, description="seconds per collective call")
    attention_s: Real = Field(0.0, ge=0, description="seconds per (sequence, local head) pair of an attention "
                                                     "call (a CPU kernel's per-block set-up)")
    attention_key_s: Real = Field(0.0, ge=0, description="seconds per key a decoding (sequence, local head) pair "
                                                         "reads beyond its priced FLOPs (a CPU kernel's vector loop)")
    sustained_fraction: PositiveReal | None = Field(None, le=1, description="the fraction of the GEMM and "
                                                                            "attention rates a served prefill "
                                                                            "keeps (CPU); null: the spec's own")
    probes: list[HostProbe] = Field(description="prefill and decode steps of the host probes, and the estimate")
    sustain: SustainProbe | None = Field(None, description="the prefill the fraction was measured on")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")


class HostCosts(Schema):
    """Host seconds per operator launch and per collective call that a stack's eager dispatch adds to every step
    (autograd, DTensor redistribution, collective set-up), measured by perfmodel calibrate for the executor's
    stack; the estimate charges them to each plan of that stack (cost.host.launch_queue.host_rates, over the stack
    profile's own)."""

    stack: str = Field(description="the stack the costs were measured for (the executor: plain-torch)")
    kernel_s: Real = Field(ge=0, description="seconds per operator launch")
    collective_s: Real = Field(ge=0, description="seconds per collective call or send")
    probes: list[HostProbe] = Field(description="the measurements the two costs were fitted to")
    by_kind: bool = Field(False, description="a CPU spec whose host (System.host_cpu) holds per-call costs by kind "
                                             "measured in the stack's own step (a trace: calibrate.trace.host): "
                                             "the estimate prices the stack profile's counted calls at them, as on "
                                             "an accelerator but serial and without the in-context factors, "
                                             "instead of kernel_s per launch")
    sustain: SustainProbe | None = Field(None, description="on a CPU, the step the spec's sustained_fraction was "
                                                           "measured on (null: not measured)")
    serving: ServingHostCosts | None = Field(None, description="the serving loop's own (null: not measured; the "
                                                               "training costs stand)")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")
