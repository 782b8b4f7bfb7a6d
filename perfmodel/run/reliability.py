"""Failures and checkpoints of a long training job: the job's mean time between interruptions, the checkpoint
interval that minimises the expected wall time, and that wall time (hence goodput).

The failure model is the one both papers below assume: interruptions arrive as a Poisson process of rate
1 / M (M: the job's mean time between interruptions, seconds); the job computes in segments of tau seconds,
each followed by a checkpoint that blocks it for delta seconds; an interruption loses the work since the last
completed checkpoint and costs R seconds to restart (detect, reschedule, read the checkpoint) before the
segment is run again. Units: seconds throughout (rates per device-hour where the name says so).

A checkpoint holds every parameter's bf16 weight and its fp32 master copy and two Adam moments (14 B per
parameter: BLOOM-176B's 2.3 TB checkpoint, Megatron-Bridge's memory estimator; `cost.memory.footprint` WEIGHT_BYTES +
OPTIMIZER_BYTES), written by all nodes at once to a store (`spec.hardware.system.Storage`, or DEFAULT_STORAGE);
`goodput_at` puts these together for one job size, as `perfmodel forecast` and the search's whole-run objectives
read them.
"""

from __future__ import annotations

import math
from typing import Literal

from ..cost.memory.states import OPTIMIZER_BYTES, WEIGHT_BYTES
from ..errors import InputError
from ..spec.hardware.system import Storage
from ..spec.model.config import ModelConfig

SECONDS_PER_HOUR = 3600.0
# Llama 3 405B: 419 unexpected interruptions in 54 days on 16,384 H100 (Dubey et al. 2024, arXiv 2407.21783,
# Sec. 3.3.4, Table 5) = 1.97e-5 per GPU-hour; BLOOM-176B (1 GPU failure a week on 384 A100: 1.55e-5) and a
# 504-GPU B200 cluster (10 GPU failures in 55 days: 1.5e-5, arXiv 2605.09370) agree.
INTERRUPTION_RATE = 419 / (54 * 24 * 16384)
# Detecting a failure and rescheduling the job before the checkpoint is read: the median automatic retry
# interval of the 504-GPU B200 cluster, 11 min (arXiv 2605.09370); FlashRecovery's 150 s is the best case
# (arXiv 2509.03047), hours where restarts are manual.
RESTART_OVERHEAD_S = 660.0
DEFAULT_STORAGE = Storage(
    write_gbps=250, read_gbps=700, node_gbps=25, devices_per_node=8, write_efficiency=0.16, read_efficiency=0.215,
    staging_gbps=64,
    sources={
        "write_gbps": "504-GPU B200 cluster report (arXiv 2605.09370): the NFS store's 250 GB/s maximum write",
        "read_gbps": "same report: 700 GB/s maximum read",
        "node_gbps": "same report: one 200 Gb/s RoCE link per node = 25 GB/s",
        "devices_per_node": "same report: 63 nodes x 8 B200",
        "write_efficiency": "same report: checkpoint save bursts average 16.0% of the store's write peak (523 "
                            "checkpoint events)",
        "read_efficiency": "same report: restart loads average 21.5% of the read peak",
        "staging_gbps": "NVIDIA H100 datasheet: PCIe Gen5 128 GB/s (both directions) = 64 GB/s device to host"})


def job_mtbf_s(rate_per_device_hour: float, devices: int) -> float:
    """Mean seconds between interruptions of a job on `devices` devices when each device interrupts the job at
    `rate_per_device_hour` (failures of independent parts add: M = 1 / (rate * devices)). Llama 3 405B: 419
    unexpected interruptions in 54 days on 16,384 H100 (Dubey et al. 2024, arXiv 2407.21783, Sec. 3.3.4) give
    1.97e-5 per device-hour and M = 3.1 h."""
    if not rate_per_device_hour > 0 or not math.isfinite(rate_per_device_hour):
        raise InputError(f"interruption rate = {rate_per_device_hour!r} per device-hour; valid: a positive number "
                         "(Llama 3: 1.97e-5)")
    return SECONDS_PER_HOUR / (rate_per_device_hour * devices)


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum checkpoint interval, seconds of compute between checkpoints:
    tau = sqrt(2 delta M) (Young 1974, "A first order approximation to the optimum checkpoint interval", CACM
    17(9), p. 530)."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum checkpoint interval, seconds of compute between checkpoints (Daly 2006, "A
    higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3), Eq. 37):
    tau = sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta for delta < 2M, else M."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


MAX_EXPONENT = 700.0  # e^700 ~ 1e304: Daly's expected time past it is beyond a float (and any schedule)


def expected_wall_s(work_s: float, interval_s: float, delta_s: float, restart_s: float, mtbf_s: float) -> float:
    """Expected wall-clock seconds to finish `work_s` seconds of failure-free compute in segments of
    `interval_s`, each closed by a `delta_s` checkpoint, with restarts of `restart_s` after each interruption
    (Daly 2006, Eq. 20): T = M e^(R/M) (e^((tau + delta)/M) - 1) work / tau. Exact for the model in the module
    docstring when work is a whole number of segments (an interruption during a restart restarts it)."""
    if interval_s <= 0:
        raise InputError(f"checkpoint interval = {interval_s!r} s; valid: a positive number of seconds")
    if (restart_s + interval_s + delta_s) / mtbf_s > MAX_EXPONENT:
        raise InputError(f"a restart of {restart_s:g} s plus a checkpoint segment of {interval_s + delta_s:g} s last "
                         f"{(restart_s + interval_s + delta_s) / mtbf_s:.0f} x the mean time between interruptions "
                         f"({mtbf_s:g} s): the run would essentially never finish; valid: --restart-s, "
                         "--interruption-rate and the checkpoint interval well under that mean time")
    segment = mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((interval_s + delta_s) / mtbf_s)
    return segment * work_s / interval_s


def interval_for_async(interval_s: float, write_s: float) -> float:
    """With asynchronous checkpointing only the copy to host memory blocks (the `delta_s` the formulas take);
    the write to storage runs beside the next segment, which must last at least as long as the write for the
    next checkpoint to start after it: max(interval, write) (torch.distributed.checkpoint.async_save)."""
    return max(interval_s, write_s)


def checkpoint_bytes(model: ModelConfig) -> float:
    """Bytes of one checkpoint of the whole model: bf16 weights, fp32 master weights and two fp32 Adam moments
    per parameter, the MTP modules included (module docstring)."""
    return model.n_params(mtp=True) * (WEIGHT_BYTES + OPTIMIZER_BYTES)


def checkpoint_seconds(nbytes: float, gpus: int, storage: Storage) -> tuple[float, float, float]:
    """(write, read, async blocking) seconds of one checkpoint of `nbytes` written by all of a job's nodes at once:
    the slower of the store's aggregate peak and the nodes' links, at the share of it a burst reaches; the
    blocking copy of an asynchronous checkpoint moves each device's 1 / gpus share to host memory."""
    nodes = math.ceil(gpus / storage.devices_per_node)
    write = nbytes / (min(storage.write_gbps, nodes * storage.node_gbps) * 1e9 * storage.write_efficiency)
    read = nbytes / (min(storage.read_gbps, nodes * storage.node_gbps) * 1e9 * storage.read_efficiency)
    return write, read, nbytes / gpus / (storage.staging_gbps * 1e9)


def waiting_per_compute_s(tau: float, delta: float, restart: float, mtbf: float, goodput: float) -> float:
    """Seconds per compute second that a job waits, under Daly's model (reliability module docstring), in
    checkpoint writes and in restarts, interrupted ones included. A segment is attempted until it completes
    (e^((tau + delta) / M) attempts), e^(delta / M) of them reach the checkpoint and spend min(delta, Exp(M)) in it,
    M (1 - e^(-delta / M)) on average: M expm1(delta / M) per segment, over tau. Each of the wall / M interruptions
    starts a restart that lasts min(R, Exp(M)): wall / compute x (1 - e^(-R / M)). The rest of wall - compute is
    computing work that is lost and done again. To first order: delta / tau + R / (M goodput)."""
    return mtbf * math.expm1(delta / mtbf) / tau - math.expm1(-restart / mtbf) / goodput


def goodput_at(gpus: int, nbytes: float, storage: Storage, rate: float, restart_overhead_s: float,
               mode: Literal["sync", "async"], interval_s: float | None = None) -> dict[str, float]:
    """A job on `gpus` devices with a checkpoint of `nbytes`: its checkpoint times, interruption rate, interval
    (Daly's optimum unless given), goodput = compute / expected wall time (`run.reliability.expected_wall_s`,
    which is linear in the compute, so goodput does not depend on it), and the seconds per compute second that
    the devices wait, blocked by checkpoints or restarting (`waiting_per_compute_s`)."""
    write, read, staging = checkpoint_seconds(nbytes, gpus, storage)
    delta = staging if mode == "async" else write
    mtbf = job_mtbf_s(rate, gpus)
    tau = daly_interval(delta, mtbf) if interval_s is None else interval_s
    tau = interval_for_async(tau, write) if mode == "async" else tau
    restart = restart_overhead_s + read
    goodput = tau / expected_wall_s(tau, tau, delta, restart, mtbf)
    # of the wall time beyond the compute, checkpoints and restarts wait; the rest is lost work computed again
    waiting = waiting_per_compute_s(tau, delta, restart, mtbf, goodput)
    return dict(write_s=write, read_s=read, delta_s=delta, mtbf_s=mtbf, interval_s=tau, restart_s=restart,
                goodput=goodput, waiting_per_compute_s=waiting)
