"""`perfmodel validate`: run plans (or a built-in sweep) for real, predict them, compare (`validate.runner`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...files import RUNS_DIR
from ...validate.runner import DEVICES, validate
from ...validate.sweeps import SWEEP_NAMES
from ..argtypes import integer, path, seconds


def add_parser(subparsers, name: str, help: str) -> argparse.ArgumentParser:
    """Add `validate` to the CLI's subparsers."""
    va = subparsers.add_parser(
        name, help=help,
        description="Run plan files (or a built-in sweep) in one torchrun launch, predict each with the hardware "
                    "spec (calibrated on this machine when none is given on CPU), and print predicted against "
                    f"measured step time and peak memory. Built-in sweeps: {', '.join(SWEEP_NAMES)}.")
    va.add_argument("plans", nargs="*", type=path("plan file"), metavar="PLAN.json",
                    help="plan files, all needing the same process count")
    va.add_argument("--sweep", metavar="NAME", help=f"a built-in sweep: {', '.join(SWEEP_NAMES)}")
    va.add_argument("--nproc", type=integer("--nproc", 1), help="processes; default: what the plans need")
    va.add_argument("--hardware", metavar="SPEC", help="spec the predictions use (preset or YAML); default: a CPU "
                    "sweep calibrates first, a CUDA sweep uses the catalogue system of the GPU, plan files "
                    "their own")
    va.add_argument("--out-dir", type=path("--out-dir"), default=None, metavar="DIR",
                    help="plan files, measurements, logs and the CSV (default: perfmodel-runs/validation/SWEEP or "
                         "perfmodel-runs/validation/plans, a folder .gitignore covers)")
    va.add_argument("--steps", type=integer("--steps", 1), help="steps per plan, warm-up included (default: the "
                                                             "sweep's, 8 for plan files)")
    va.add_argument("--warmup", type=integer("--warmup", 0), help="leading steps left out of the median (default 3)")
    va.add_argument("--rounds", type=integer("--rounds", 1), help="run the plans this many times over, "
                    "interleaved; a plan's step time is its lowest round's median (default: the sweep's, 1 for "
                    "plan files)")
    va.add_argument("--device", choices=DEVICES, default="auto", help="default: the sweep's or the plans' device")
    va.add_argument("--plot", type=path("--plot", "a file ending in .png"), metavar="FILE.png",
                    help="draw predicted against measured (step time, memory)")
    va.add_argument("--csv", type=path("--csv", "a file ending in .csv"), metavar="FILE.csv", help="default: OUT_DIR/validation.csv")
    va.add_argument("--full-calibration", action="store_true", help="calibrate with the full set of "
                                                                    "microbenchmarks instead of the quick one")
    va.add_argument("--timeout", type=seconds("--timeout"), metavar="S", help="wall-clock limit of the run, seconds")
    va.add_argument("--checkpoint-every", type=integer("--checkpoint-every"), metavar="K",
                    help="save every K steps (into OUT_DIR/checkpoints) and compare bytes and write times with the "
                         "forecast's checkpoint model")
    va.add_argument("--checkpoint-async", action="store_true", help="with --checkpoint-every: async saves")
    va.add_argument("--trace", type=path("--trace"), metavar="DIR", help="trace a few steps of every plan after its "
                    "timed ones (torch.profiler, one chrome trace per rank: DIR/PLAN/rank-R.pt.trace.json.gz)")
    va.add_argument("--calibrate-from-trace", action="store_true", help="with --sweep: trace the plans, calibrate "
                    "from one plan's trace (calibrate --from-trace) and predict the others on that spec, scored with "
                    "the traced plan left out beside the sweep's own predictions (traces go to --trace DIR, default "
                    "OUT_DIR/traces; the spec to OUT_DIR/trace-calibrated.yaml)")
    va.add_argument("--trace-plan", metavar="NAME", help="with --calibrate-from-trace: the sweep's plan whose trace "
                    "calibrates (default: dp4 for cpu-smoke, gpt2-355m-mb8 for gpu-single)")
    return va


def run(args) -> str:
    """`perfmodel validate` from parsed arguments: the printed text."""
    out_dir = Path(args.out_dir) if args.out_dir else RUNS_DIR / "validation" / (args.sweep or "plans")
    result = validate([Path(p) for p in args.plans] or None, args.sweep, nproc=args.nproc, hardware=args.hardware,
                      out_dir=out_dir, steps=args.steps, warmup=args.warmup, rounds=args.rounds,
                      device=args.device,
                      plot=args.plot, csv=args.csv,
                      quick_calibration=not args.full_calibration, timeout_s=args.timeout,
                      checkpoint_every=args.checkpoint_every, checkpoint_async=args.checkpoint_async,
                      trace_dir=args.trace, calibrate_from_trace=args.calibrate_from_trace,
                      trace_plan=args.trace_plan)
    return result.text()
