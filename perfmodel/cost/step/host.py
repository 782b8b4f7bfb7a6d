"""The host's launches, calls and seconds per step on the slowest stage (`host_step`, cost.host.launch_queue)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...spec.model.config import ModelConfig
from ..comm.sharded import Comm
from ..host.launch_queue import launch_seconds, parameter_tensors
from ..layouts import Layouts
from ..pipeline.stages import UNITS, Stages, pick
from .data_parallel import ReducedStage
from .stage import Sends, SlowestStage, UnitSeconds


@dataclass
class HostStep:
    """The host's work per step on the slowest stage (`host_step`)."""

    kernels: np.ndarray  # operator launches (what calibrate's host probe fits to)
    calls: np.ndarray  # collective calls and sends
    body: np.ndarray  # seconds: its micro-batches' launches (and the step's calls where the stack syncs first)
    tail: np.ndarray  # seconds: the step's end, the optimizer loop (and the step's calls otherwise)
    total: np.ndarray


def host_step(model: ModelConfig, lay: Layouts, st: Stages, us: UnitSeconds, sends: Sends, slow: SlowestStage,
              r: ReducedStage, steps: list[Comm]) -> HostStep:
    """The host's launches, calls and seconds per step on the slowest stage (cost.host.launch_queue): its
    micro-batches' launches, the step's collective calls (the host copies of an offloaded state are copies, priced
    with the update), and at the step's end the loop over the stage's parameter tensors (clip, update, zero_grad;
    under LoRA the adapters, A and B per adapted linear) while the device reduces and updates. A stack that
    synchronises before the update has made the step's collective calls in its backward, before it."""
    m, rates = lay.num_microbatches, us.rates
    step_calls = sum(np.asarray(c.calls, float) * np.asarray(c.active, bool) for c in steps if c.part != "offload_comm")
    tensors = parameter_tensors(model)
    tensors_of = pick(st.layers * tensors["layer"] + st.embedding * tensors["embedding"]
                      + st.head * tensors["head"], r.big)
    if lay.lora is not None:
        tensors_of = pick(st.layers, r.big) * 2 * len(lay.lora.targets)
    host_update = rates.optimizer_tensor_s * tensors_of + rates.optimizer_step_s * (tensors_of > 0)
    host_calls_s = launch_seconds(rates, step_calls) + np.zeros(len(lay))
    sync = rates.sync_before_optimizer
    body = m * slow.host_mb + (host_calls_s if sync else 0.0)
    tail = host_update + (0.0 if sync else host_calls_s)
    return HostStep(kernels=sum(us.kernels[u] * slow.held[u] for u in UNITS) * m,
                    calls=(sum(us.calls[u] * slow.held[u] for u in UNITS) + sends.calls) * m + step_calls,
                    body=body, tail=tail, total=body + tail)
