"""Offloaded activations: the tensors the names policy keeps in host memory (Plan.recompute_offloaded; JAX's
jax.checkpoint_policies.save_and_offload_only_these_names with offload_dst pinned_host, MaxText's 'offload'
checkpoint names) go to the host during the forward and come back for the backward.

XLA issues the copies asynchronously (JAX docs, "Memories and host offloading"): a layer's tensors leave while the
next layer computes, and come back while the later layer's backward runs, so per layer and micro-batch a copy
shows only where it outlasts a layer's compute, max(0, bytes / (bandwidth x efficiency) - compute) each way over
the system's host link (System.host). What the host and the device hold is cost.memory's
(`layer_offloaded_bytes`; the verdict, cost.memory_fit)."""

from __future__ import annotations

import numpy as np

from ..spec.hardware import System
from ..spec.model import ModelConfig
from .layouts import Layouts
from .memory import layer_offloaded_bytes
from .sharded import Comm


def offload_seconds(system: System, nbytes) -> np.ndarray:
    """Seconds to copy `nbytes` one way between a device and its host's memory: bytes / (bandwidth_gbps x 1e9 x
    efficiency) (System.host); 0 where nothing is copied."""
    nbytes = np.asarray(nbytes, float)
    if system.host is None:
        return 0.0 * nbytes
    return nbytes / (system.host.bandwidth_gbps * 1e9 * system.host.efficiency)


def offload_comm(model: ModelConfig, system: System, lay: Layouts, fwd, bwd) -> Comm:
    """A layer's offload copies per micro-batch: its offloaded tensors (`layer_offloaded_bytes`) to the host in the
    forward, behind the layer's forward compute `fwd` (seconds, per plan), and back in the backward, behind its
    backward `bwd` (the recomputed forward included); each exposed where it is longer."""
    nbytes = layer_offloaded_bytes(model, lay)
    t = offload_seconds(system, nbytes)
    return Comm("host offload copies", "copy", "host", nbytes=nbytes, seconds=t, calls=2,
                fwd=np.maximum(t - fwd, 0.0), bwd=np.maximum(t - bwd, 0.0), unit="layer", part="offload_comm",
                tier="host", active=nbytes > 0)
