"""Serving prediction against measurement on this machine: `perfmodel validate --sweep cpu-infer --nproc 4`, run
several times (each calibrating this machine afresh), every run's table and the medians of its prefill and decode
MAPE (the target: both at most 20%, the median of 3 runs). Reported, not asserted.

    python -m benchmarks.evals.serving_validation                  # 3 runs, quick calibration each (~2 min a run)
    python -m benchmarks.evals.serving_validation --runs 5
    python -m benchmarks.evals.serving_validation --hardware SPEC.yaml   # predict every run with one spec

The runs' files (plans, measurements, calibrated specs, logs) go to a temporary folder, named relative to it in
the text; the text goes to benchmarks/results/serving_validation.txt.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import RESULTS

from perfmodel.execute.host import cpu_name
from perfmodel.validate.runner import validate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="validate runs (default 3)")
    ap.add_argument("--hardware", help="spec to predict with (default: each run calibrates this machine)")
    ap.add_argument("--output", type=Path, default=RESULTS / "serving_validation.txt")
    a = ap.parse_args(argv)
    lines, mapes = [f"perfmodel validate --sweep cpu-infer --nproc 4, {a.runs} runs on {os.cpu_count()} cores "
                    f"({cpu_name()})", ""], {"prefill": [], "decode": []}
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="perfmodel-serving-validation-") as tmp:
        os.chdir(tmp)  # the runs' paths print relative to it
        try:
            for i in range(1, a.runs + 1):
                t0 = time.perf_counter()
                res = validate(sweep="cpu-infer", nproc=4, hardware=a.hardware, out_dir=Path(f"run{i}"))
                for q in mapes:
                    mapes[q].append(res.mape_pct[q])
                lines += [f"## run {i} ({time.perf_counter() - t0:.0f} s, calibration included)", res.text(), ""]
                print(lines[-2], flush=True)
        finally:
            os.chdir(here)
    for q, values in mapes.items():
        med = statistics.median(values)
        lines.append(f"{q} time MAPE: median {med:.1f}% of {', '.join(f'{v:.1f}%' for v in values)}; target <= 20%: "
                     f"{'holds' if med <= 20 else 'MISSED'}")
    text = "\n".join(lines)
    a.output.write_text(text + "\n")
    print("\n".join(lines[-2:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
