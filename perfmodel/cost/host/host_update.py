"""An optimizer state kept in host memory and updated there (Plan.optimizer_update host / host_overlapped):
DeepSpeed's ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model Training", USENIX ATC)
and SuperOffload (Lian et al. 2025, arXiv 2509.21271), as deepspeed/runtime/zero/stage3.py and stage_1_and_2.py
and deepspeed/runtime/superoffload/superoffload_stage3.py run them (deepspeedai/DeepSpeed@edaa722).

Where the bytes live, per device, for the share r = Plan.optimizer_offload_ratio of the optimizer's parameter
groups that the host updates (the rest stay on the device, DeepSpeed's partial offload: stage3.py
_create_fp32_partitions puts sub-groups i >= int((1 - ratio) x n) on the CPU; the fraction prices their count):
  host:   the fp32 master and Adam's moments (the optimizer state) and the fp32 gradient partition the update
          reads (initialize_optimizer_states' subgroup_gradient_buffer, pinned), of the host's share; at ZeRO-3 also
          every gradient partition in the gradient dtype (`grad_partitions_flat_buffer` on `self.device`, the CPU
          when offload_optimizer is set);
  device: the bf16 working weights (sharded per the ZeRO stage), the reduce bucket the backward fills before the
          reduction and the copy out (ipg bucket, reduce_bucket_size elements; two at ZeRO-1/2 under overlap_comm),
          and the device's share of the state and of its fp32 gradients; nothing else of the optimizer.
What a step moves and computes (cost.host.host_update_time.host_update_comm: a module of its own because
cost.memory.states reads the placement here, while the seconds need memory.offload and comm.sharded's Comm, which
import cost.memory.states; one module would be an import cycle):
  out: the gradient partitions in the gradient dtype to the pinned buffer and back (partition_grads copies, then
       `.to(device)`), and the host share's fp32 gradients (cast on the device: `grad_buffer.to(fp32)`, then
       copied; SuperOffload's "Superchip-aware casting"), during the backward as each bucket is reduced;
  the update: Adam on the host's CPUs over the host share, HOST_ADAM_BYTES per parameter at HOST_ADAM_EFFICIENCY
       of the host's memory bandwidth (System.host.memory_bandwidth_gbps);
  in:  the updated fp32 partitions to the device's bf16 weights (`_reassign_or_swap_out_partitioned_parameters`:
       fp16_partitioned_groups_flat.copy_(fp32 partition)), after the update.
ZeRO-Offload (host) runs the update in step(), after the backward: exposed whole, with the copies in. SuperOffload
(host_overlapped) starts each sub-group's update as its last gradient arrives (partition_grads ->
superoffload_cpu_optimizer.async_step, its "speculation-then-validation": the global norm and overflow check
validate after), so the update and the copies out hide behind the backward and only what outlasts it shows, with
the copies in; DeepSpeed skips the early start where gradients are clipped (`not self.clip_grad`; the importer
then says host).
"""

from __future__ import annotations

import numpy as np

from ..comm.compression import GRAD_BYTES
from ..layouts import Layouts

FP32_COPY_BYTES = 4.0  # the fp32 gradients out, the fp32 parameters in (cast on the device, SuperOffload)
# DeepSpeed's reduce bucket, elements (runtime/zero/config.py reduce_bucket_size default 5e8); the config's own value
# is not read (deepspeed.keys "bucket")
REDUCE_BUCKET = 5e8


def host_updates(lay: Layouts) -> bool:
    """Whether the plan keeps its optimizer state in host memory and updates it there (Plan.optimizer_update)."""
    return bool(lay.optimizer_offload) and lay.optimizer_update != "device"


def host_share(lay: Layouts) -> float:
    """The share of the optimizer's parameters the host updates (Plan.optimizer_offload_ratio); 0 without a host
    update."""
    return float(lay.optimizer_offload_ratio) if host_updates(lay) else 0.0


def reduce_bucket_bytes(lay: Layouts) -> np.ndarray:
    """The device's gradient bucket under a host update: REDUCE_BUCKET elements in the gradient dtype, two at
    ZeRO-1/2 with overlap_comm (stage_1_and_2.py's ipg_buffer pair), one at ZeRO-3 (stage3.py's ipg bucket)."""
    two = np.isin(np.asarray(lay.zero), (1, 2)) & bool(lay.overlap_dp_comm)
    return REDUCE_BUCKET * GRAD_BYTES[lay.grad_dtype] * np.where(two, 2.0, 1.0)


def host_update_states(states: dict, lay: Layouts, per_param) -> tuple[dict, object]:
    """The device's states and the host's bytes under a host update (the module docstring's placement), from
    `states` (cost.memory.states.state_bytes) and `per_param`, the optimizer's bytes per parameter (its parameters are
    states["optimizer"] / per_param)."""
    r = host_share(lay)
    opt = states["optimizer"]
    grads32 = opt / per_param * FP32_COPY_BYTES  # the update's fp32 gradient partition
    accumulated = np.where(np.asarray(lay.zero) == 3, states["gradients"], 0.0)  # stage 3's pinned partitions
    device = dict(states, gradients=reduce_bucket_bytes(lay) + 0.0 * opt, optimizer=(opt + grads32) * (1 - r))
    return device, (opt + grads32) * r + accumulated
