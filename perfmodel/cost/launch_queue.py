"""The host that launches the kernels: what it spends per step, and how much of that the device sees.

A GPU runs what its host enqueues. Every operator costs the host's launching thread time whatever its size
(Python, PyTorch's dispatcher and autograd, the CUDA driver), every collective call its process-group set-up, and
the optimizer step a loop over the parameter tensors. Kernel launches are asynchronous: the host returns before
the kernel runs and keeps enqueueing (CUDA C Programming Guide, "Asynchronous Concurrent Execution"; PyTorch's
"CUDA semantics: asynchronous execution"), so between two synchronisations the host runs ahead of the device and
the stream takes the longer of the two. Where kernels are long the host is hidden; where they are short (small
models, micro-batch 1, many layers) the device waits: the step is host-bound.

The rates (seconds per launch, per call, per optimizer tensor) are the stack's (`spec.stack.HostProfile`,
measured on this project's reference host: benchmarks/host_launch.py, host_megatron.py, derived by
benchmarks/host_profiles.py), or those `perfmodel calibrate` measured on the spec's own machine for the
executor's stack (`spec.hardware.HostCosts`). On a CPU device the host thread is the one that computes: there the
seconds add to the step instead of overlapping it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..spec.hardware import System
from ..spec.model import ModelConfig
from ..spec.stack import Stack
from .layouts import Layouts


@dataclass(frozen=True)
class HostRates:
    """Seconds of the launching thread per operator launch, collective call, ZeRO-3 call and optimizer tensor, and
    whether those seconds overlap the device (`serial`: a CPU device, whose ranks compute on the host thread)."""

    op_s: float
    collective_s: float
    zero3_call_s: float
    optimizer_tensor_s: float
    serial: bool
    source: str  # where the rates come from, for the estimate's notes

    @property
    def priced(self) -> bool:
        return self.op_s > 0 or self.collective_s > 0 or self.zero3_call_s > 0 or self.optimizer_tensor_s > 0


NONE = HostRates(0.0, 0.0, 0.0, 0.0, False, "")


def host_rates(system: System, stack: Stack, lay: Layouts) -> HostRates:
    """The host rates of `lay`'s plans (one stack and compile setting per job): the spec's measured ones where
    `perfmodel calibrate` timed this stack on the spec's machine (spec.hardware.HostCosts: per launch and per call,
    fitted on steps that include the optimizer, so no per-tensor rate), else the stack profile's (spec.stack.
    HostProfile, under torch.compile its compiled_op_s); none on a CPU spec without measured ones (the profiles'
    rates were measured on a GPU's host, not on CPU ranks)."""
    serial = system.accelerator.torch_device == "cpu"
    costs = system.host_costs
    if costs is not None and costs.stack == lay.stack:
        return HostRates(costs.kernel_s, costs.collective_s, costs.collective_s, 0.0, serial,
                         f"{system.name}'s measured host costs (perfmodel calibrate)")
    h = stack.host
    if serial or h is None:
        return NONE
    compiled = lay.compile != "none" and h.compiled_op_s is not None
    return HostRates(h.compiled_op_s if compiled else h.op_s, h.collective_s, h.zero3_call_s, h.optimizer_tensor_s,
                     False, f"stack {stack.name} ({'compiled' if compiled else h.dispatch}, {h.reference})")


def launch_seconds(rates: HostRates, launches, calls, zero3_calls=0.0):
    """Host seconds of `launches` operator launches, `calls` collective calls and `zero3_calls` ZeRO-3 gathers and
    reduce-scatters: launches * op_s + calls * collective_s + zero3_calls * zero3_call_s (seconds)."""
    return (rates.op_s * np.asarray(launches, float) + rates.collective_s * np.asarray(calls, float)
            + rates.zero3_call_s * np.asarray(zero3_calls, float))


def parameter_tensors(model: ModelConfig) -> dict[str, float]:
    """Parameter tensors of one layer, the embedding and the head as a PyTorch module holds them (each weight of
    cost.operator_table.operators, plus its bias where it has one; a LayerNorm's scale and shift; a MoE layer's
    router and its two grouped expert weights): what an optimizer step loops over (count). GPT-2 124M: 12 per
    layer, 2 for the embedding (tokens, positions), 2 for the head (final norm; the LM head is the tied table)."""
    from .operator_table import operators  # the table's weights: a tensor each
    from ..spec.operators import UNIT_OF

    out = {"layer": 0.0, "embedding": 0.0, "head": 0.0}
    for name, op in operators(model).items():
        if op.spec.family == "norm":
            n = 2 if model.norm == "layernorm" else 1  # scale (and shift)
        else:
            n = sum(1 + (w.params > w.gemm_params > 0) for w in op.weights)  # a weight, and its bias if any
        if name == "lm_head" and model.tie_embeddings:
            n = 0  # the embedding's table
        out[UNIT_OF[name]] += op.share * n
    if model.moe is not None:
        out["layer"] += 3 * (model.n_layers - model.dense_layers()) / model.n_layers
    return out


def queued(device_f, device_b, host_f, host_b, pipelined, serial):
    """Seconds per micro-batch of a stage whose device works `device_f` / `device_b` seconds in the forward /
    backward while its host spends `host_f` / `host_b` launching them (arrays per plan).

    The host enqueues ahead of the device (the launch queue), so a stretch of work between two synchronisations
    takes the longer of its host and device seconds: max(host, device). Without pipelining nothing synchronises
    between micro-batches (gradient accumulation runs the step's micro-batches back to back), so the stretch is a
    whole micro-batch, max(D_f + D_b, H_f + H_b); in a pipeline each forward and backward ends in a send or receive
    the next one waits on (Megatron-LM synchronises after its batched p2p calls), max(D_f, H_f) + max(D_b, H_b).
    `serial` (a CPU device, the host computing): D + H. The ramp at a synchronisation (the first launch before the
    device starts) is one launch, left out. Seconds."""
    one = np.maximum(device_f + device_b, host_f + host_b)
    two = np.maximum(device_f, host_f) + np.maximum(device_b, host_b)
    overlapped = np.where(pipelined, two, one)
    return np.where(serial, device_f + device_b + host_f + host_b, overlapped)


def waiting(device_f, device_b, host_f, host_b, pipelined, serial):
    """Seconds per micro-batch the device waits on its host: `queued` less the device's own seconds, never below
    0 (arrays per plan or stage). Seconds."""
    return np.maximum(queued(device_f, device_b, host_f, host_b, pipelined, serial) - (device_f + device_b), 0.0)


def step_seconds(pipe, pipe_device, tail_device, host_body, host_tail, pipelined, serial):
    """Seconds of a step from its pipeline (`pipe`: the micro-batches as `queued` takes them, bubble included;
    `pipe_device`: the same with the device's seconds alone), the device's work after the last backward
    (`tail_device`: exposed gradient reduction and the optimizer) and the host's (`host_body`: launching the
    micro-batches; `host_tail`: the optimizer's loop over the parameter tensors and the step's last calls).

    Without pipelining nothing synchronises before the step's end, so the whole step is one stretch: the host's
    lead over the device carries into the update, max(pipe_device + tail_device, host_body + host_tail). In a
    pipeline the last backward waits on its receive: pipe + max(tail_device, host_tail). On a CPU device all of it
    adds: pipe + tail_device + host_tail (`pipe` already holds the micro-batches' host seconds). Seconds."""
    one = np.maximum(pipe_device + tail_device, host_body + host_tail)
    return np.where(serial, pipe + tail_device + host_tail,
                    np.where(pipelined, pipe + np.maximum(tail_device, host_tail), one))


def host_seconds(costs, kernels, calls):
    """Host seconds of `kernels` operator launches and `calls` collective calls at a spec's measured per-launch
    costs (spec.hardware.HostCosts or its serving ones; 0 without them): kernels * kernel_s + calls * collective_s.
    The serving loop's host (serve.step_time) adds them to its step, as eager dispatch the device does not hide."""
    if costs is None:
        return 0.0 * (np.asarray(kernels) + np.asarray(calls))
    return launch_seconds(HostRates(costs.kernel_s, costs.collective_s, 0.0, 0.0, False, ""), kernels, calls)
