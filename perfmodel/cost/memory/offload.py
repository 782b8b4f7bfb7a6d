"""Host memory's copies: offloaded activations, and the optimizer state kept there between steps
(Plan.optimizer_offload; `optimizer_copies`, once a step, exposed).

Offloaded activations: the tensors the names policy keeps in host memory (Plan.recompute_offloaded; JAX's
jax.checkpoint_policies.save_and_offload_only_these_names with offload_dst pinned_host, MaxText's 'offload'
checkpoint names) go to the host during the forward and come back for the backward.

XLA issues the copies asynchronously (JAX docs, "Memories and host offloading"): a layer's tensors leave while the
next layer computes, and come back while the later layer's backward runs, so per layer and micro-batch a copy
shows only where it outlasts a layer's compute, max(0, bytes / (bandwidth x efficiency) - compute) each way over
the system's host link (System.host); Megatron-Core's offloading as `layer_copies` says. What the host and the
device hold is cost.memory.act_offload's (the verdict, cost.memory.fit)."""

from __future__ import annotations

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ..layouts import Layouts
from .footprint import layer_activation_bytes, layer_offloaded_bytes
from ..comm.sharded import Comm


def offload_seconds(system: System, nbytes) -> np.ndarray:
    """Seconds to copy `nbytes` one way between a device and its host's memory: bytes / (bandwidth_gbps x 1e9 x
    efficiency) (System.host); 0 where nothing is copied."""
    nbytes = np.asarray(nbytes, float)
    if system.host is None:
        return 0.0 * nbytes
    return nbytes / (system.host.bandwidth_gbps * 1e9 * system.host.efficiency)


def offloads(lay: Layouts) -> bool:
    """Whether the plan holds activations in host memory (the names policy's, Megatron-Core's layers or modules)."""
    return bool(lay.recompute_offloaded or lay.offload_modules or lay.activation_offload_layers)


def offload_comm(model: ModelConfig, system: System, lay: Layouts, fwd, bwd) -> Comm:
    """A layer's offload copies per micro-batch: its offloaded tensors (`layer_offloaded_bytes`) to the host in the
    forward, behind the layer's forward compute `fwd` (seconds, per plan), and back in the backward, behind its
    backward `bwd` (the recomputed forward included); each exposed where it is longer. Megatron-Core's layer-level
    offloading (`layer_copies`) instead copies whole layers on one stream beside the other layers' compute."""
    if lay.activation_offload_layers:
        return layer_copies(model, system, lay, fwd, bwd)
    nbytes = layer_offloaded_bytes(model, lay)
    t = offload_seconds(system, nbytes)
    return Comm("host offload copies", "copy", "host", nbytes=nbytes, seconds=t, calls=2,
                fwd=np.maximum(t - fwd, 0.0), bwd=np.maximum(t - bwd, 0.0), unit="layer", part="offload_comm",
                tier="host", active=nbytes > 0)


def layer_copies(model: ModelConfig, system: System, lay: Layouts, fwd, bwd) -> Comm:
    """Megatron-Core's layer-level offloading (Plan.activation_offload_layers = N of the L layers, pp = 1;
    cost.memory.act_offload): each of the first n = min(N, L - 1) layers' saved tensors (`layer_activation_bytes`, t
    seconds one way) leave on one offload stream from the next layer's forward on and must be gone before layer
    L - N + i's forward; back from layer L - 1 - N + i's backward on, needed at layer i's (Transformer Engine
    cpu_offload.py l.602-647 at e7c550c). With per-layer compute f the stream falls behind only where t > f, the
    last copy latest: n t - (L - 2) f exposed per micro-batch each way (b for the backward), spread over the L
    layers of the mean-layer unit."""
    L = model.n_layers / lay.pp
    n = np.minimum(lay.activation_offload_layers, L - 1)
    nbytes = layer_activation_bytes(model, lay)
    t = offload_seconds(system, nbytes)
    return Comm("host offload copies", "copy", "host", nbytes=nbytes * n / L, seconds=t, calls=2 * n / L,
                fwd=np.maximum(n * t - (L - 2) * fwd, 0.0) / L, bwd=np.maximum(n * t - (L - 2) * bwd, 0.0) / L,
                unit="layer", part="offload_comm", tier="host", active=n > 0)


def optimizer_copy_seconds(system: System, lay: Layouts, nbytes) -> np.ndarray:
    """Seconds per step of the optimizer state's copies (`optimizer_copies`) for `nbytes` of state; 0 where it
    stays on the device (Plan.optimizer_offload false)."""
    return optimizer_copies(system, nbytes, lay.optimizer_offload).exposed


def optimizer_copies(system: System, nbytes, on) -> Comm:
    """The optimizer state's copies per step where it stays in host memory between steps (Plan.optimizer_offload,
    `on` per plan; `nbytes`: the state the device updates, cost.memory.states.state_bytes): to the device before the
    update and back after it (MaxText train.py: device_put to the device shardings before apply_gradients, the new
    state leaving in the step's pinned_host output), offload_seconds each way, both exposed: the update waits on
    the first and the step on the second. XLA could start the first during the backward, but only by holding the
    state on the device there, which is what offloading avoids (cost.memory.states.host_optimizer)."""
    nbytes = np.asarray(nbytes, float) * on
    t = offload_seconds(system, nbytes)
    return Comm("optimizer state host copies", "copy", "host", nbytes=nbytes, seconds=t, calls=2 * on, bwd=2 * t,
                unit="step", part="offload_comm", tier="host", active=nbytes > 0)
