"""Failures and checkpoints of a long training job: the job's mean time between interruptions, the checkpoint
interval that minimises the expected wall time, and that wall time (hence goodput).

The failure model is the one both papers below assume: interruptions arrive as a Poisson process of rate
1 / M (M: the job's mean time between interruptions, seconds); the job computes in segments of tau seconds,
each followed by a checkpoint that blocks it for delta seconds; an interruption loses the work since the last
completed checkpoint and costs R seconds to restart (detect, reschedule, read the checkpoint) before the
segment is run again. Units: seconds throughout (rates per device-hour where the name says so).
"""

from __future__ import annotations

import math

from ..errors import InputError

SECONDS_PER_HOUR = 3600.0


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
