"""The clock a step's compute sustains under the board power limit, and the power and energy of its phases.

A step's parts (spec.result.TimeBreakdown) fall in four kinds of time, each with its draw (spec.hardware.power_model.PowerModel):
  compute: GEMMs, fused attention and the compute share of the recomputed forward, at clock fraction s drawing
           P_c(s) = idle + (compute - idle) * s**alpha and lasting T_c / s (the tables' rates scale with the clock);
  memory:  memory-bound kernels and the optimizer (and the recomputed forward's memory-bound share), at memory_w,
           not slowed by the SM clock;
  comm:    exposed collectives and copies, at comm_w;
  wait:    the pipeline bubble and the host waits, at idle_w.
The limit holds the average over a window far longer than a kernel, and a step interleaves its kernels within
it, so the compute runs at the largest s <= 1 with
    (P_c(s) T_c / s + memory_w T_m + comm_w T_x + idle_w T_w(s)) / (T_c / s + T_m + T_x + T_w(s)) <= limit_w.
The bubble lasts as long as the stages' work (it is (pp - 1) of their micro-batch passes), so it stretches with
their compute (cost.step then re-derives it from the clocked stages, `clocked_units`); a slower device fills the
host waits, and a host-bound step keeps the host's length however fast its device (`refill_host`). For a GEMM looping alone (T_c only) this is
s = ((limit - idle) / (compute - idle))**(1 / alpha): the measured loop is the constant's own check.
The dynamic-power law P ~ f V^2 with the voltage following the clock is the CMOS switching power (e.g. Rabaey,
Digital Integrated Circuits, 2nd ed., Sec. 5.5), so alpha = 3 within the clock range the voltage still scales.
Units: watts, seconds, joules; s is a fraction of the kernel tables' clock.
"""

from __future__ import annotations

import numpy as np

from ..spec.hardware.power_model import PowerModel

COMPUTE_PARTS = ("gemm", "attention")
MEMORY_PARTS = ("memory_bound", "optimizer")
COMM_PARTS = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "zero3_comm", "offload_comm")
WAIT_PARTS = ("bubble", "host", "overhead")
PIPELINED_PARTS = ("gemm", "attention", "memory_bound", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm")
MIN_CLOCK = 0.05  # the bisection's floor; any limit above idle is met above it for a step of real parts
BISECTIONS = 30  # 2**-30 of the bracket: far below any printed digit


def recompute_compute_share(time: dict):
    """Share of the recomputed forward that is compute-bound: the step's own (gemm + attention) over (gemm +
    attention + memory_bound), the forward it re-runs having the same mix (1 where the step has none)."""
    c = sum(np.asarray(time[k], float) for k in COMPUTE_PARTS)
    total = c + np.asarray(time["memory_bound"], float)
    return np.divide(c, total, out=np.ones_like(total), where=total > 0)


def phase_seconds(time: dict) -> dict:
    """Seconds of compute, memory, comm and wait in a step's TimeBreakdown parts (module docstring)."""
    share = recompute_compute_share(time)
    rc = np.asarray(time["recompute"], float)
    return {"compute": sum(np.asarray(time[k], float) for k in COMPUTE_PARTS) + share * rc,
            "memory": sum(np.asarray(time[k], float) for k in MEMORY_PARTS) + (1 - share) * rc,
            "comm": sum(np.asarray(time[k], float) for k in COMM_PARTS),
            "wait": sum(np.asarray(time[k], float) for k in WAIT_PARTS)}


def recompute_at(recompute, share, s):
    """Seconds of a recomputed forward at `s` times the clock it was priced at: its compute `share` / s."""
    return recompute * (share / s + 1 - share)


def refill_host(time: dict, priced: dict, host_s=None) -> dict:
    """`time` (parts changed from `priced`) with its host wait re-derived: where the device got slower it fills the
    wait (not below 0); where it got faster the wait stays, or, on a host-bound step (`host_s`, the host's own seconds
    per step, at least the device's: cost.host.launch_queue), grows by as much, the step keeping the host's length. The
    total their sum."""
    device = lambda t: np.asarray(t["total"], float) - np.asarray(t["host"], float)  # noqa: E731
    out = dict(time)
    now, then = device(time), device(priced)
    host = np.maximum(np.asarray(priced["host"], float) - np.maximum(now - then, 0.0), 0.0)
    if host_s is not None:
        host = np.where((np.asarray(host_s, float) >= then) & (now < then), host + then - now, host)
    out["host"] = host
    out["total"] = now + host
    return out


def at_clock(time: dict, s) -> dict:
    """The TimeBreakdown parts with the compute at `s` times the clock they were priced at: compute parts / s,
    the bubble stretched as its stage's seconds, the host wait re-derived (`refill_host`), the total their sum
    (module docstring)."""
    s = np.asarray(s, float)
    share = recompute_compute_share(time)
    out = dict(time)
    for k in COMPUTE_PARTS:
        out[k] = np.asarray(time[k], float) / s
    out["recompute"] = recompute_at(np.asarray(time["recompute"], float), share, s)
    stage = sum(np.asarray(time[k], float) for k in PIPELINED_PARTS)
    stage_s = sum(np.asarray(out[k], float) for k in PIPELINED_PARTS)
    out["bubble"] = np.asarray(time["bubble"], float) * np.divide(stage_s, stage, out=np.ones_like(stage_s),
                                                                  where=stage > 0)
    out["total"] = np.asarray(time["total"], float) + sum(
        np.asarray(out[k], float) - np.asarray(time[k], float) for k in (*COMPUTE_PARTS, "recompute", "bubble"))
    return refill_host(out, time)


def clocked_units(parts: dict, fwd: dict, share, s) -> tuple[dict, dict, dict]:
    """Each unit's seconds per micro-batch at clock fraction s, as `at_clock` takes the step's: (all, forward,
    recomputed), its gemm and attention parts / s and the compute `share` of its recompute / s; the forward
    stretched as the unit's passes other than the recompute (so the stages and the pipeline trace to the breakdown).
    `parts`: unit -> its part -> seconds (cost.compute.units); `fwd`: unit -> forward seconds."""
    s = np.asarray(s, float)
    total, forward, recompute = {}, {}, {}
    for u, p in parts.items():
        base, rc = sum(p.values()), p["recompute"]
        recompute[u] = recompute_at(rc, share, s)
        total[u] = base - rc + sum(p[k] for k in COMPUTE_PARTS) * (1 / s - 1) + recompute[u]
        rest = base - rc
        forward[u] = fwd[u] * np.divide(total[u] - recompute[u], rest, out=np.ones_like(total[u] * 1.0),
                                        where=rest > 0)
    return total, forward, recompute


def compute_watts(power: PowerModel, s):
    """Draw of compute-bound kernels at clock fraction s: idle + (compute - idle) * s**alpha, W."""
    return power.idle_w + (power.compute_w - power.idle_w) * np.asarray(s, float) ** power.clock_exponent


def phase_watts(power: PowerModel, s) -> dict:
    """Draw of each kind of time at clock fraction s, W."""
    return {"compute": compute_watts(power, s), "memory": power.memory_w, "comm": power.comm_w, "wait": power.idle_w}


def step_energy_j(power: PowerModel, time: dict, s):
    """Energy of one step on one device, J: sum over kinds of time of draw x seconds (`time` at clock s)."""
    sec, watts = phase_seconds(time), phase_watts(power, s)
    return sum(watts[k] * sec[k] for k in sec)


def average_watts(power: PowerModel, time: dict, s):
    """Mean draw of one device over a step, W: step_energy_j / total (`time` at clock s)."""
    total = np.asarray(time["total"], float)
    return np.divide(step_energy_j(power, time, s), total, out=np.full_like(total, power.idle_w), where=total > 0)


def step_clock(power: PowerModel, time: dict, priced: float = 1.0):
    """The clock fraction (<= 1) a step's compute sustains under the limit, per plan: `time` priced at clock
    `priced` (cost.compute.kernels.Device prices at the loop's), the largest s whose step, its compute at s
    (`at_clock(time, s / priced)`), averages within limit_w (bisection: the average rises with s). The kinds of
    time at s are `at_clock`'s, summed once here (the search evaluates many plans at once)."""
    sec = phase_seconds(time)
    c, fixed = sec["compute"], sec["memory"] + sec["comm"]
    stage = sum(np.asarray(time[k], float) for k in PIPELINED_PARTS)
    bubble, host = np.asarray(time["bubble"], float), np.asarray(time["host"], float)
    rest = sec["wait"] - bubble - host  # the waits the clock leaves alone (overhead)

    def mean_watts(s):  # at_clock's kinds of time at s: compute / (s / priced), the bubble stretched, host refilled
        added = c * (priced / s - 1.0)
        b = bubble * np.divide(stage + added, stage, out=np.ones_like(stage), where=stage > 0)
        wait = b + rest + np.maximum(host - np.maximum(added + b - bubble, 0.0), 0.0)
        watts = phase_watts(power, s)
        return (watts["compute"] * (c + added) + watts["memory"] * sec["memory"] + watts["comm"] * sec["comm"]
                + watts["wait"] * wait) / np.maximum(c + added + fixed + wait, 1e-300)

    ok = mean_watts(1.0) <= power.limit_w
    if np.ndim(ok) == 0 and ok:  # one step within the limit at full clock: nothing to bisect
        return np.ones_like(c)
    if np.ndim(ok) and ok.any():  # bisect only the plans over the limit at full clock (the same values, elementwise)
        out, over = np.ones(np.shape(ok)), ~ok
        if over.any():
            part = {k: np.broadcast_to(np.asarray(v, float), np.shape(ok))[over] for k, v in time.items()}
            out[over] = step_clock(power, part, priced)
        return out
    lo, hi = np.full_like(c, MIN_CLOCK), np.ones_like(c)
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        over = mean_watts(mid) > power.limit_w
        hi, lo = np.where(over, mid, hi), np.where(over, lo, mid)
    return np.where(ok, 1.0, lo)


def priced_clock(power: PowerModel | None) -> float:
    """The clock the kernels are priced at (cost.compute.kernels.Device.fraction): a compute-bound loop's under the limit
    where the part has a power model, the tables' (1) where it has none."""
    return 1.0 if power is None else loop_clock(power)


def loop_clock(power: PowerModel) -> float:
    """The clock fraction of a compute-bound kernel looping alone: ((limit - idle) / (compute - idle))**(1/alpha),
    at most 1 (the case with compute time alone)."""
    if power.compute_w <= power.limit_w:
        return 1.0
    return float(((power.limit_w - power.idle_w) / (power.compute_w - power.idle_w)) ** (1 / power.clock_exponent))
