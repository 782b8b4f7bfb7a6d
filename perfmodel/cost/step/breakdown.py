"""The step's TimeBreakdown parts, summing to the step (`step_breakdown`)."""

from __future__ import annotations

import numpy as np

from ..compute.units import STAGE_PARTS
from ..host.launch_queue import HostRates, step_seconds
from ..layouts import Layouts
from ..pipeline.stages import pick
from .host import HostStep
from .stage import SlowestStage, device_bubble


def clean(part, total):
    """A difference of step parts with its rounding noise (below 1e-9 of the step) set to 0."""
    return np.where(np.abs(part) < 1e-9 * np.abs(total), 0.0, part)


def step_breakdown(lay: Layouts, slow: SlowestStage, dp_exposed, t_opt, t_copy, host: HostStep,
                   rates: HostRates) -> dict[str, np.ndarray]:
    """The step's TimeBreakdown parts. The step (cost.host.launch_queue.step_seconds): the pipeline at the device's
    and its host's seconds, then the exposed data-parallel collectives, the optimizer and the offloaded state's
    copies at the device against the host's end of step. Its parts sum to it: the slowest stage's parts m times,
    the pipeline's bubble at the device's seconds (`device_bubble`), and what the device waits on the host."""
    m, none = lay.num_microbatches, np.zeros(len(lay))
    bubble = device_bubble(lay, slow.device_mb, slow.mean_device, slow.bottleneck)
    t_pipe_device = m * pick(slow.device_mb, slow.bottleneck) + bubble
    body = step_seconds(slow.pipeline, t_pipe_device, dp_exposed + t_opt + t_copy, host.body, host.tail,
                        slow.synced, rates.serial, slow.first, rates.sync_before_optimizer)
    time = {k: slow.part[k] * m for k in STAGE_PARTS}
    time.update(dp_comm=dp_exposed + none, bubble=bubble, optimizer=t_opt + none,
                host=clean(body - t_pipe_device - dp_exposed - t_opt - t_copy, body),
                offload_comm=time["offload_comm"] + t_copy, overhead=time["overhead"], total=body)
    return time
