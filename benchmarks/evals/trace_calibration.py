"""Calibrating from a trace against calibrating from microbenchmarks, on the same measured plans.

    python -m benchmarks.evals.trace_calibration                   # cpu-smoke on 4 CPU processes: runs, traces, compares
    python -m benchmarks.evals.trace_calibration --from DIR        # re-score a finished run (DIR: its --out-dir)
    python -m benchmarks.evals.trace_calibration --from benchmarks/results/validation/cpu-vm-traced \
        --traces benchmarks/results/traces/cpu-smoke-vm      # this project's run of 2026-11-27, committed
    python -m benchmarks.evals.trace_calibration --gpu-results benchmarks/results/validation/gpu-single-h200-traced \
        --traces benchmarks/results/traces/gpu-single-h200 --hardware dgx-h200     # the lent GPU's sweep

One launch runs every plan of the sweep (`perfmodel validate --sweep cpu-smoke --trace`): each plan's timed steps,
then two traced ones. Predicted against the same measurements:
- uncalibrated: the spec a trace gives before any fit (this CPU's best GEMM rate and streaming bandwidth, the
  efficiencies at 1, no host costs; on a GPU the catalogue system);
- microbenchmarks: `perfmodel calibrate --device cpu --quick`, as validate runs it before the sweep;
- trace: `calibrate --from-trace` on the traces of one plan (`--plan`, default dp4), with that plan's measured step
  for its host costs; that plan is left out of its error (held out: the plans it did not see).
Prints MAPE and Spearman of each and writes the table beside the run (trace_calibration.txt). The calibration and
the scores are perfmodel.validate.trace_check's, which `perfmodel validate --sweep NAME --calibrate-from-trace` runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import ROOT

from perfmodel.spec.hardware.system import load_hardware
from perfmodel.validate.trace_check import calibrate_and_score, plans_of, trace_lines


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
    # the same calibration and scores as `perfmodel validate --sweep ... --calibrate-from-trace`
    if a.gpu_results:
        tc = calibrate_and_score(plans, traces, run / "plans", plan, "cuda", base=a.hardware or "dgx-h200")
    else:
        tc = calibrate_and_score(plans, traces, run / "plans", plan, "cpu",
                                 sweep_spec=load_hardware(run / "calibrated.yaml"), sweep_label="microbenchmarks")
    text = "\n".join(trace_lines(tc))
    print(text)
    out = (a.gpu_results if a.gpu_results else run) / "trace_calibration.txt"
    out.write_text(text + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
