"""Whether a plan's memory fits: the device's budget for the reserved view (cost.memory), and the host's memory for
what the plan offloads there (cost.offload)."""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..spec.hardware import DEFAULT_HEADROOM, GiB, System


def memory_budget(system: System, headroom: float = DEFAULT_HEADROOM) -> float:
    """Bytes the reserved view may reach on one device: (capacity - runtime) * (1 - headroom), the runtime being
    the system's memory_overhead_gib (context, NCCL buffers, workspaces outside torch's allocator). InputError
    for a headroom that is not a number >= 0 and < 1."""
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0.0 <= headroom < 1.0:
        raise InputError(f"headroom = {headroom!r}; valid: a share of the memory to keep free, >= 0 and < 1 "
                         f"(default {DEFAULT_HEADROOM})")
    return (system.accelerator.hbm_bytes - system.memory_overhead_bytes) * (1.0 - headroom)


VERDICTS = ("fits", "tight", "does not fit")


def host_limit(system: System) -> float:
    """Bytes of host memory per device that offloaded tensors may fill (System.host; none without a host link)."""
    return system.host.memory_gib * GiB if system.host is not None else 0.0


def memory_verdict(reserved, budget: float, limit: float, host=0.0, host_room: float = 0.0):
    """fits (reserved within the budget: capacity - runtime less the headroom), tight (within capacity - runtime,
    inside the headroom: it runs if fragmentation stays near the priced slack), or does not fit (beyond what the
    allocator can reserve at all, or `host` bytes offloaded beyond the host's `host_room`, `host_limit`). Only
    "does not fit" takes a plan out (a search keeps tight plans and says so): a headroom is a margin for the
    estimate's error, and runs that really ran sit inside it."""
    r = np.asarray(reserved)
    device = np.where(r <= budget, VERDICTS[0], np.where(r <= limit, VERDICTS[1], VERDICTS[2]))
    return np.where(np.asarray(host) > host_room, VERDICTS[2], device)
