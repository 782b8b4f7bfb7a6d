"""The host update's seconds per step (Plan.optimizer_update host / host_overlapped): its copies over the host link
and DeepSpeed's CPU Adam, overlapped as ZeRO-Offload and SuperOffload overlap them (cost.host.host_update's
docstring, which also says why these seconds are not in that module)."""

from __future__ import annotations

import numpy as np

from ...spec.hardware.system import System
from ..comm.compression import GRAD_BYTES
from .host_update import FP32_COPY_BYTES, host_share, host_updates
from ..layouts import Layouts
from ..memory.offload import offload_seconds, optimizer_copy_seconds
from ..comm.sharded import Comm
from ..memory.states import state_bytes

# Host bytes one parameter's CPU Adam step moves: read the fp32 parameter, gradient and both moments, write the
# parameter and both moments (DeepSpeed csrc/includes/cpu_adam.h Step_AVX: loads grad, param, exp_avg,
# exp_avg_sq; stores param, exp_avg, exp_avg_sq)
HOST_ADAM_BYTES = 28.0
# The share of the host's memory bandwidth DeepSpeedCPUAdam reaches: PyTorch's CPU Adam (torch.optim.Adam, foreach)
# reaches 0.278 of a triad's bytes per second at these 28 B (the host-Adam benchmark, n = 5e7, torch 2.13
# on this project's 2-core x86 helper machine: 2.38 vs 8.56 GB/s), and on a GH200 GraceAdam runs 3x PyTorch's CPU
# Adam and 1.3x DeepSpeed's CPU-Adam (DeepSpeed blogs/deepspeed-superoffload/README.md, "GraceAdam", Figure 5):
# CPU-Adam = 3 / 1.3 = 2.3x PyTorch's, 0.278 x 2.3 = 0.64
HOST_ADAM_EFFICIENCY = 0.64


def host_update_comm(system: System, lay: Layouts, params, grad_params, bwd) -> Comm:
    """The host update's copies and CPU Adam per step (cost.host.host_update's docstring): `params` the optimizer's parameters on
    this device (its partition), `grad_params` those whose gradient partitions it holds, `bwd` the last
    micro-batch's backward seconds the overlapped update hides behind (per plan). Exposed: host (ZeRO-Offload)
    max(0, out - bwd) + adam + in; host_overlapped (SuperOffload) max(0, max(out, adam) - bwd) + in. Zero and
    inactive without a host update."""
    r = host_share(lay)
    g = GRAD_BYTES[lay.grad_dtype]
    p = np.asarray(params, float) * r
    pg = np.asarray(grad_params, float) * (r > 0) * (np.asarray(lay.zero) == 3)  # stage 3's pinned partitions
    out = offload_seconds(system, pg * g + p * FP32_COPY_BYTES)  # each way at the link's rate: out, and ...
    back = offload_seconds(system, pg * g)  # ... the pinned gradient buffer's copy back, in the other direction
    inn = offload_seconds(system, p * FP32_COPY_BYTES)
    adam = p * HOST_ADAM_BYTES / host_bandwidth(system)
    during = np.maximum(out, back)
    hidden = np.maximum(during, adam) if lay.optimizer_update == "host_overlapped" else during
    exposed = np.maximum(hidden - bwd, 0.0) + inn + (0.0 if lay.optimizer_update == "host_overlapped" else adam)
    nbytes = pg * 2 * g + p * 2 * FP32_COPY_BYTES
    return Comm("host optimizer update (CPU Adam) and its copies", "copy", "host", nbytes=nbytes,
                seconds=during + adam + inn, calls=3 * (r > 0), bwd=exposed * (r > 0), unit="step",
                part="offload_comm", tier="host", active=p > 0)


def host_bandwidth(system: System) -> float:
    """Bytes per second the host's CPU Adam streams: System.host.memory_bandwidth_gbps x HOST_ADAM_EFFICIENCY; inf
    where the spec states none (spec.plan.layout.check_host_update refuses such a plan)."""
    bw = None if system.host is None else system.host.memory_bandwidth_gbps
    return np.inf if bw is None else bw * 1e9 * HOST_ADAM_EFFICIENCY


def offloaded_update_seconds(system: System, lay: Layouts, params, shard) -> np.ndarray:
    """Seconds per step an offloaded optimizer state adds for `params` whose state is sharded over `shard` ranks
    (at ZeRO >= 1), where nothing is known to hide it (an operator's table row): the host update's
    (`host_update_comm` with no backward to hide behind), or the copies in and out of a state updated on the
    device (cost.memory.offload.optimizer_copy_seconds)."""
    if host_updates(lay):
        held = np.asarray(params, float) / np.where(np.asarray(lay.zero) >= 1, shard, 1)
        return host_update_comm(system, lay, held, held, 0.0).exposed
    return optimizer_copy_seconds(system, lay, state_bytes(params, lay, shard)["optimizer"])
