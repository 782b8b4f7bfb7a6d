"""A step on a spec calibrated from measured runs: which parts are compute and which communication
(`COMPUTE_TIME`, `COMM_TIME`), and each scaled by its fitted speed (`run_fit_time`, `calibrated`)."""

from __future__ import annotations

from ...spec.hardware.system import System

# The parts of a step that a calibration from measured runs scales (spec.hardware.system.RunFit): time the devices compute
# (or wait on computing neighbours), and exposed communication.
COMPUTE_TIME = ("gemm", "attention", "memory_bound", "recompute", "bubble", "optimizer")
COMM_TIME = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "zero3_comm", "offload_comm")


def run_fit_time(compute, comm, host, compute_speed, network_speed, host_speed=1.0, step_overhead_s=0.0):
    """Step seconds with a calibration from measured runs (calibrate.runs.from_runs): compute / compute_speed + comm /
    network_speed + host / host_speed + step_overhead_s (`compute`, `comm`: the step's COMPUTE_TIME and COMM_TIME
    seconds at the spec's rates; `host`: the seconds the device waits on its host plus the stack's per-step
    overhead). First-order in the speeds: a slower network leaves the exposed communication exposed for longer and
    hides no more of the rest, which the fit does not re-derive."""
    return compute / compute_speed + comm / network_speed + host / host_speed + step_overhead_s


def calibrated(time: dict, system: System, stack: str) -> dict:
    """The TimeBreakdown parts of a step of software stack `stack` on `system`: as evaluated, or, on a spec
    calibrated from measured runs of that stack (`System.run_fit`, `RunFit.applies_to`), each compute part divided
    by its compute_speed, each communication part by its network_speed, the host parts by its host_speed and the
    fitted per-step overhead added (`run_fit_time`, part by part)."""
    fit = system.run_fit
    if fit is None or not fit.applies_to(stack):
        return time
    out = dict(time)
    for k in COMPUTE_TIME:
        out[k] = run_fit_time(time[k], 0.0, 0.0, fit.compute_speed, 1.0)
    for k in COMM_TIME:
        out[k] = run_fit_time(0.0, time[k], 0.0, 1.0, fit.network_speed)
    out["host"] = run_fit_time(0.0, 0.0, time["host"], 1.0, 1.0, fit.host_speed)
    out["overhead"] = run_fit_time(0.0, 0.0, time["overhead"], 1.0, 1.0, fit.host_speed, fit.step_overhead_s)
    out["total"] = sum(out[k] for k in (*COMPUTE_TIME, *COMM_TIME, "host", "overhead"))
    return out
