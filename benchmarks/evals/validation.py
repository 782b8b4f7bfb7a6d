"""Prediction against measurement on this machine: `perfmodel validate --sweep cpu-smoke --nproc 4` (or the
one-GPU sweep with --gpu), the table, and whether the validation targets hold (reported, not asserted).

    python -m benchmarks.evals.validation                        # cpu-smoke: 4 CPU processes, quick calibration first
    python -m benchmarks.evals.validation --hardware SPEC.yaml   # predict with a spec calibrated earlier
    python -m benchmarks.evals.validation --gpu                  # gpu-single on one CUDA device (catalogue spec)

Targets: CPU cpu-smoke step-time MAPE <= 20% and Spearman >= 0.8 after calibration; one H100/H200
gpu-single step-time MAPE <= 10% and peak-memory MAPE <= 5%. Results (CSV, plan files, measurements, the
calibrated spec, logs, plot) go to benchmarks/results/validation/<device>-<host>/.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import time
from pathlib import Path

from benchmarks import RESULTS

from perfmodel.execute.host import cpu_shares, cpu_stat
from perfmodel.validate.common import _gpu_name
from perfmodel.validate.runner import validate


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def results_dir(device: str) -> Path:
    """benchmarks/results/validation/<device>-<host>: the device is 'cpu' or the GPU's name."""
    name = "cpu" if device == "cpu" else slug(_gpu_name() or "cuda")
    return RESULTS / "validation" / f"{name}-{slug(socket.gethostname())}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="store_true", help="run gpu-single on one CUDA device instead of cpu-smoke")
    ap.add_argument("--hardware", help="spec to predict with (default: calibrate on CPU, catalogue on GPU)")
    ap.add_argument("--steps", type=int, help="steps per plan (default: the sweep's)")
    ap.add_argument("--full-calibration", action="store_true")
    ap.add_argument("--out-dir", type=Path, help="default: benchmarks/results/validation/<device>-<host>")
    ap.add_argument("--trace", type=Path, metavar="DIR", help="also trace a few steps of every plan after its timed "
                    "ones (perfmodel validate --trace): one Kineto chrome trace per rank in DIR/PLAN/")
    a = ap.parse_args(argv)
    sweep, nproc, device = ("gpu-single", 1, "cuda") if a.gpu else ("cpu-smoke", 4, "cpu")
    out = a.out_dir or results_dir(device)
    out.mkdir(parents=True, exist_ok=True)
    load, stat = os.getloadavg()[0], cpu_stat()
    t0 = time.perf_counter()
    res = validate(sweep=sweep, nproc=nproc, hardware=a.hardware, out_dir=out, steps=a.steps, device=device,
                   plot=out / "validation.png", quick_calibration=not a.full_calibration, trace_dir=a.trace)
    lines = [res.text(), "", *(f"target {t}: {'holds' if ok else 'MISSED'}" for t, ok in res.targets_met().items()),
             f"wall time {time.perf_counter() - t0:.0f} s (calibration included); 1-minute load average before "
             f"the run {load:.2f} on {os.cpu_count()} cores"]
    shares = cpu_shares(stat, cpu_stat())
    if shares:
        lines.append(f"host CPU time during the run: busy {shares['user'] + shares['system']:.0%}, idle "
                     f"{shares['idle']:.0%}, stolen by the hypervisor {shares['steal']:.0%} (/proc/stat)")
    text = "\n".join(lines)
    (out / "validation.txt").write_text(text + "\n")
    print(text)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
