"""`perfmodel validate --sweep NAME --calibrate-from-trace [--trace-plan NAME]`: trace one plan of a sweep,
calibrate from its trace (`calibrate.trace.from_trace.calibrate_from_trace`, as `calibrate --from-trace` does), predict the
sweep's plans on that spec and score it against their measurements with the traced plan left out (the plans the
trace did not see), beside the spec the sweep predicts with and the spec the trace gives before any fit.

The columns, for the same measured steps:
- `uncalibrated`: on a CPU the spec a trace gives before any fit (`calibrated_spec.cpu_template` of the trace's
  measurements: this CPU's best GEMM rate and streaming bandwidth, the efficiencies at 1, no host costs); on a GPU
  the catalogue system the trace calibrates (the given --hardware, else the catalogue's system of the trace's GPU);
- the sweep's own spec where it is another (`microbenchmarks` when validate calibrated this machine, or the given
  --hardware);
- `trace`: the calibrated spec; its MAPE and Spearman leave the traced plan out.
One code path serves CPU and GPU sweeps (the device picks the base as above). The trace-calibration benchmark scores
a finished run with the same functions. This module imports no torch.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ..errors import InputError
from ..types import Schema

TRACE_SPEC = "trace-calibrated.yaml"  # the calibrated spec, written beside the run's plans


class TraceRow(Schema):
    plan: str
    measured_step_s: float
    predicted_step_s: dict[str, float] = Field(description="column -> the spec's predicted step, seconds")
    error_pct: dict[str, float] = Field(description="column -> signed error, percent")


class TraceColumn(Schema):
    label: str = Field(description="uncalibrated, microbenchmarks (or the given spec's name), trace")
    hardware: str = Field(description="the spec's name")
    step_mape_pct: float
    median_error_pct: float
    spearman: float | None
    plans: int = Field(description="plans scored (the trace column leaves the traced plan out)")


class TraceCalibration(Schema):
    """What `validate --calibrate-from-trace` adds to its result."""

    traced_plan: str = Field(description="the plan whose trace calibrated (not scored in the trace column)")
    traces: str = Field(description="the folder of that plan's rank traces")
    spec_path: str | None = Field(None, description="where the calibrated spec was written")
    traced_step_s: float = Field(description="the traced plan's step in its trace (the profiler slows it)")
    measured_step_s: float = Field(description="the traced plan's measured step, which its host costs are fitted to")
    rows: list[TraceRow]
    columns: list[TraceColumn]
    fitted: str = Field(description="the fitted efficiencies and host costs, one line")
    fit: list[str] = Field(default_factory=list, description="each fit's residuals, one line each")
    not_calibrated: list[str] = Field(default_factory=list, description="what the trace could not determine")

    def column(self, label: str) -> TraceColumn:
        return next(c for c in self.columns if c.label == label)


def trace_plan_of(sweep, calibrate: bool, trace_plan: str | None, plans_given: bool) -> str | None:
    """The plan whose trace calibrates: --trace-plan, else the sweep's default (Sweep.trace_plan, else its first);
    None without --calibrate-from-trace. Bad combinations are refused in one line."""
    if trace_plan is not None and not calibrate:
        raise InputError(f"--trace-plan {trace_plan} without --calibrate-from-trace; valid: --calibrate-from-trace "
                         "--trace-plan NAME")
    if not calibrate:
        return None
    if plans_given or sweep is None:
        raise InputError("--calibrate-from-trace takes a built-in sweep, not plan files (it traces one plan of the "
                         "sweep and predicts the others); valid: perfmodel validate --sweep NAME "
                         "--calibrate-from-trace, or calibrate --from-trace with perfmodel predict --trace for your "
                         "own plans")
    names = [e.name for e in sweep.plans]
    plan = trace_plan if trace_plan is not None else (sweep.trace_plan or names[0])
    if plan not in names:
        raise InputError(f"--trace-plan {plan}: no plan of sweep {sweep.name} has that name; valid: {', '.join(names)}")
    if len(names) < 3:
        raise InputError(f"--calibrate-from-trace: sweep {sweep.name} has {len(names)} plans; valid: a sweep of 3 "
                         "or more (one traced, at least two to rank)")
    return plan


def plans_of(plan_dir: Path) -> dict[str, tuple]:
    """name -> (plan file, measurement) of a validate run's plans folder (the plans that were measured)."""
    from ..spec.measurement import load_measurement
    from ..spec.plan.file import load_plan_file

    out = {}
    for p in sorted(Path(plan_dir).glob("*.json")):
        if p.name.endswith(".measured.json"):
            continue
        m = p.with_name(p.stem + ".measured.json")
        if m.exists():
            out[p.stem] = (load_plan_file(p), load_measurement(m))
    return out


def predicted_step(spec, pf) -> float:
    """A plan file's step on `spec`, seconds, as the executor runs it (its stack)."""
    from ..cost.estimate import evaluate_plan
    from ..spec.stack.profile import EXECUTOR_STACK

    return evaluate_plan(pf.model, spec, pf.plan.model_copy(update={"stack": EXECUTOR_STACK}))[1].step_time_s


def trace_specs(traces: Path, plan_path: Path, step_s: float, device: str, base=None):
    """(uncalibrated spec, calibrated spec, summary, fit) from one plan's rank traces (module docstring). `step_s`:
    that plan's measured step (a CPU trace's host costs are fitted to it); `base`: a GPU trace's base system (name
    or spec path; default the catalogue's system of its GPU)."""
    from ..calibrate.trace.from_trace import calibrate_from_trace, trace_measurements
    from ..calibrate.trace.reader import load_traces
    from ..spec.hardware.system import load_hardware

    if device == "cpu":
        from ..calibrate.machine.calibrated_spec import cpu_template

        system, summary, fit = calibrate_from_trace([traces], plan_path=plan_path, step_s=step_s)
        bare = cpu_template(trace_measurements(load_traces([traces]), "trace"), "uncalibrated")
        return bare, system, summary, fit
    system, summary, fit = calibrate_from_trace([traces], hardware=base)
    if base is not None:
        return load_hardware(base), system, summary, fit
    from ..calibrate.machine.calibration import default_base

    t0 = load_traces([traces])[0]
    return default_base(t0.device, t0.device_bytes), system, summary, fit


def score(specs: dict, plans: dict[str, tuple], held_out: str) -> tuple[list[TraceRow], list[TraceColumn]]:
    """Each spec's prediction of each measured plan, and each spec's MAPE, median error and Spearman over the plans
    (the `trace` column without `held_out`)."""
    import numpy as np

    from .scores import error_pct, mape, spearman

    rows = []
    for name in sorted(plans):
        pf, m = plans[name]
        pred = {k: predicted_step(spec, pf) for k, spec in specs.items()}
        rows.append(TraceRow(plan=name, measured_step_s=m.step_time_s, predicted_step_s=pred,
                             error_pct={k: error_pct(p, m.step_time_s) for k, p in pred.items()}))
    columns = []
    for k, spec in specs.items():
        keep = [r for r in rows if not (k == "trace" and r.plan == held_out)]
        pred, meas = [r.predicted_step_s[k] for r in keep], [r.measured_step_s for r in keep]
        columns.append(TraceColumn(label=k, hardware=spec.name, step_mape_pct=mape(pred, meas),
                                   median_error_pct=float(np.median([r.error_pct[k] for r in keep])),
                                   spearman=spearman(pred, meas), plans=len(keep)))
    return rows, columns


def calibrate_and_score(plans: dict[str, tuple], traces: Path, plan_dir: Path, traced: str, device: str, *,
                        base=None, sweep_spec=None, sweep_label: str | None = None,
                        spec_out: Path | None = None) -> TraceCalibration:
    """Calibrate from the traces of plan `traced` (traces/TRACED, its plan file plan_dir/TRACED.json), predict every
    plan of `plans` (name -> (plan file, measurement)) on the uncalibrated spec, `sweep_spec` (column `sweep_label`,
    left out where it is the uncalibrated spec) and the calibrated one, and score them; with `spec_out` the
    calibrated spec is written there."""
    if traced not in plans:
        raise InputError(f"--trace-plan {traced}: not among the measured plans ({', '.join(sorted(plans))})")
    folder = Path(traces) / traced
    if not folder.is_dir():
        raise InputError(f"--calibrate-from-trace: no traces of {traced} in {str(Path(traces))!r}; valid: the "
                         "--trace folder of a run that traced it")
    step_s = plans[traced][1].step_time_s
    bare, system, summary, fit = trace_specs(folder, Path(plan_dir) / f"{traced}.json", step_s, device, base)
    specs = {"uncalibrated": bare}
    if sweep_spec is not None and sweep_spec.model_dump() != bare.model_dump():
        specs[sweep_label or sweep_spec.name] = sweep_spec
    specs["trace"] = system
    rows, columns = score(specs, plans, traced)
    if spec_out is not None:
        from ..calibrate.machine.calibration import spec_yaml
        from ..files import write_atomic

        command = f"perfmodel calibrate --from-trace {folder} --plan {Path(plan_dir) / f'{traced}.json'}"
        write_atomic(spec_out, lambda tmp: Path(tmp).write_text(spec_yaml(system, command, Path(spec_out).parent)),
                     "the calibrated spec")
    eff, host = system.efficiency, system.host_costs
    fitted = (f"matmul_max {eff.matmul_max.get('bf16')}, tile {tuple(eff.matmul_tile)}, memory_bandwidth "
              f"{eff.memory_bandwidth}, attention_max {eff.attention_max}"
              + (f", host kernel_s {host.kernel_s * 1e6:.1f} us, collective_s {host.collective_s * 1e6:.1f} us"
                 if host is not None and host.probes else ""))
    return TraceCalibration(
        traced_plan=traced, traces=str(folder), spec_path=str(spec_out) if spec_out is not None else None,
        traced_step_s=summary.step_s, measured_step_s=step_s, rows=rows, columns=columns, fitted=fitted,
        fit=[f"fit {r.quantity} {r.kind}: {r.points} points, median |err| {r.median_abs_error:.1%}, bias "
             f"{r.bias:+.1%}" for r in fit.residuals],
        not_calibrated=[f"{m.what}: {m.why}" for m in summary.not_calibrated])


def trace_lines(tc: TraceCalibration) -> list[str]:
    """The comparison as validate and the trace-calibration benchmark print it."""
    labels = [c.label for c in tc.columns]
    width = max(16, *(len(k) + 2 for k in labels))
    lines = [f"calibrated from the trace of {tc.traced_plan} ({tc.traces}):", "",
             f"{'plan':22s}{'measured':>11s}" + "".join(f"{k:>{width}s}" for k in labels)]
    for r in tc.rows:
        cells = "".join(f"{r.error_pct[k]:+{width - 1}.1f}%" + ("*" if r.plan == tc.traced_plan and k == "trace"
                                                               else " ") for k in labels)
        lines.append(f"{r.plan:22s}{r.measured_step_s * 1e3:9.1f}ms" + cells)
    lines.append("")
    for c in tc.columns:
        rho = "n/a" if c.spearman is None else f"{c.spearman:.3f}"
        lines.append(f"{c.label:16s} MAPE {c.step_mape_pct:5.1f}%  median {c.median_error_pct:+6.1f}%  Spearman "
                     f"{rho}  ({c.plans} plans{', the traced one left out' if c.label == 'trace' else ''}; "
                     f"{c.hardware})")
    lines.append(f"* {tc.traced_plan}: the plan the trace came from (calibrated on, not scored)")
    lines.append(f"trace of {tc.traced_plan}: step {tc.traced_step_s * 1e3:.1f} ms traced, "
                 f"{tc.measured_step_s * 1e3:.1f} ms measured; fitted {tc.fitted}")
    lines += [f"  {f}" for f in tc.fit]
    lines += [f"  not calibrated: {n}" for n in tc.not_calibrated]
    if tc.spec_path:
        lines.append(f"wrote the calibrated spec: {tc.spec_path}")
    return lines
