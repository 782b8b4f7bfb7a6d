"""Calibrating from a trace against calibrating from microbenchmarks, on the same measured plans (issue 64).

    python benchmarks/trace_calibration.py                   # cpu-smoke on 4 CPU processes: runs, traces, compares
    python benchmarks/trace_calibration.py --from DIR        # re-score a finished run (DIR: its --out-dir)
    python benchmarks/trace_calibration.py --from benchmarks/results/validation/cpu-vm-traced \
        --traces benchmarks/results/traces/cpu-smoke-vm      # this project's run of 2026-11-27, committed
    python benchmarks/trace_calibration.py --gpu-results benchmarks/results/validation/gpu-single-h200-traced \
        --traces benchmarks/results/traces/gpu-single-h200 --hardware dgx-h200     # the lent GPU's sweep

One launch runs every plan of the sweep (`perfmodel validate --sweep cpu-smoke --trace`): each plan's timed steps,
then two traced ones. Predicted against the same measurements:
- uncalibrated: the spec a trace gives before any fit (this CPU's best GEMM rate and streaming bandwidth, the
  efficiencies at 1, no host costs; on a GPU the catalogue system);
- microbenchmarks: `perfmodel calibrate --device cpu --quick`, as validate runs it before the sweep;
- trace: `calibrate --from-trace` on the traces of one plan (`--plan`, default dp4), with that plan's measured step
  for its host costs; that plan is left out of its error (held out: the plans it did not see).
Prints MAPE and Spearman of each and writes the table beside the run (trace_calibration.txt).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfmodel.calibrate.calibrated_spec import cpu_template  # noqa: E402
from perfmodel.calibrate.from_trace import calibrate_from_trace, trace_measurements  # noqa: E402
from perfmodel.calibrate.trace_reader import load_traces  # noqa: E402
from perfmodel.cost.estimate import evaluate_plan  # noqa: E402
from perfmodel.spec.hardware import load_hardware  # noqa: E402
from perfmodel.spec.measurement import load_measurement  # noqa: E402
from perfmodel.spec.plan_file import load_plan_file  # noqa: E402
from perfmodel.spec.stack import EXECUTOR_STACK  # noqa: E402


def plans_of(plan_dir: Path) -> dict[str, tuple]:
    """name -> (plan file, measurement) of a validate run's plans folder."""
    out = {}
    for p in sorted(plan_dir.glob("*.json")):
        if p.name.endswith(".measured.json"):
            continue
        m = p.with_name(p.stem + ".measured.json")
        if m.exists():
            out[p.stem] = (load_plan_file(p), load_measurement(m))
    return out


def predict(spec, pf) -> float:
    return evaluate_plan(pf.model, spec, pf.plan.model_copy(update={"stack": EXECUTOR_STACK}))[1].step_time_s


def score(specs: dict, plans: dict, held_out: str) -> list[str]:
    names = sorted(plans)
    rows = [f"{'plan':22s}{'measured':>11s}" + "".join(f"{k:>16s}" for k in specs)]
    errs = {k: {} for k in specs}
    for n in names:
        pf, m = plans[n]
        cells = []
        for k, spec in specs.items():
            e = predict(spec, pf) / m.step_time_s - 1
            errs[k][n] = e
            cells.append(f"{e:+15.1%}" + ("*" if n == held_out and k == "trace" else " "))
        rows.append(f"{n:22s}{m.step_time_s * 1e3:9.1f}ms" + "".join(cells))
    rows.append("")
    for k in specs:
        keep = [n for n in names if not (k == "trace" and n == held_out)]
        e = np.array([errs[k][n] for n in keep])
        meas = [plans[n][1].step_time_s for n in keep]
        pred = [(1 + errs[k][n]) * plans[n][1].step_time_s for n in keep]
        rho = spearmanr(meas, pred).statistic
        rows.append(f"{k:16s} MAPE {np.mean(np.abs(e)):6.1%}  median {np.median(e):+6.1%}  Spearman {rho:.3f}  "
                    f"({len(keep)} plans{', the traced one left out' if k == 'trace' else ''})")
    rows.append(f"* {held_out}: the plan the trace came from (calibrated on, not scored)")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, default=ROOT / "perfmodel-runs" / "trace-calibration")
    ap.add_argument("--from", dest="done", type=Path, help="a finished run's --out-dir: score it again")
    ap.add_argument("--plan", default=None, help="the plan whose trace calibrates (default: dp4 on CPU, "
                                                 "gpt2-355m-mb8 on a GPU sweep)")
    ap.add_argument("--gpu-results", type=Path, help="a GPU sweep's validation folder (plans/ with measurements)")
    ap.add_argument("--traces", type=Path, help="the folder of the run's traces (PLAN/rank-R...; default: DIR/traces)")
    ap.add_argument("--hardware", default=None, help="with --gpu-results: the base system (default: the GPU's)")
    a = ap.parse_args(argv)
    if a.gpu_results:
        run, traces, plan = a.gpu_results, a.traces, a.plan or "gpt2-355m-mb8"
    else:
        run = a.done or a.out_dir
        traces, plan = a.traces or run / "traces", a.plan or "dp4"
        if a.done is None:
            from perfmodel.validate.runner import validate

            validate(sweep="cpu-smoke", nproc=4, out_dir=run, device="cpu", trace_dir=traces)
    plans = plans_of(run / "plans")
    if plan not in plans:
        raise SystemExit(f"--plan {plan}: not among the run's plans ({', '.join(plans)})")
    step_s = plans[plan][1].step_time_s
    trace, summary, fit = calibrate_from_trace([traces / plan], hardware=a.hardware if a.gpu_results else None,
                                               plan_path=run / "plans" / f"{plan}.json", step_s=step_s)
    if a.gpu_results:
        specs = {"uncalibrated": load_hardware(a.hardware or "dgx-h200"), "trace": trace}
    else:
        m = trace_measurements(load_traces([traces / plan]), "trace")
        specs = {"uncalibrated": cpu_template(m, "uncalibrated"), "microbenchmarks": load_hardware(run / "calibrated.yaml"),
                 "trace": trace}
    rows = score(specs, plans, plan)
    rows += ["", f"trace of {plan}: step {summary.step_s * 1e3:.1f} ms traced, {step_s * 1e3:.1f} ms measured; "
             f"fitted matmul_max {trace.efficiency.matmul_max.get('bf16')}, tile {trace.efficiency.matmul_tile}, "
             f"memory_bandwidth {trace.efficiency.memory_bandwidth}, attention_max {trace.efficiency.attention_max}"
             + (f", host kernel_s {trace.host_costs.kernel_s * 1e6:.1f} us, collective_s "
                f"{trace.host_costs.collective_s * 1e6:.1f} us" if trace.host_costs else "")]
    rows += [f"  fit {r.quantity} {r.kind}: {r.points} points, median |err| {r.median_abs_error:.1%}, bias "
             f"{r.bias:+.1%}" for r in fit.residuals]
    text = "\n".join(rows)
    print(text)
    out = (a.gpu_results if a.gpu_results else run) / "trace_calibration.txt"
    out.write_text(text + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
