"""`perfmodel validate`: run plans for real, predict them with a (calibrated) hardware spec, and compare.

    perfmodel validate --sweep cpu-smoke --nproc 4 --plot cpu-smoke.png
    perfmodel validate strategies/a.json strategies/b.json --nproc 4 --hardware my-cpu.yaml

For a built-in sweep (`perfmodel.sweeps`) the plan files are written into the output directory for the spec
the predictions use; all plans run in one `torchrun` launch (`perfmodel.execute.run_plans`); each is predicted
with `estimate(model, spec, plan)`. The result is one table (predicted and measured step time and peak
memory, signed errors), the step-time and memory MAPE, the Spearman rank correlation of predicted vs measured
step time, a CSV and optionally a scatter plot. This module imports no torch (the executor runs in workers).

Errors are signed: (predicted - measured) / measured, percent; MAPE is the mean of their magnitudes.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from pydantic import Field

from .argtypes import integer, seconds
from .errors import InputError, Schema
from .files import check_output, check_suffix, write_atomic
from .hardware import System, list_systems, load_hardware
from .measurement import Measurement
from .models import ModelConfig
from .plan import Plan, layout_label
from .sweeps import SWEEPS, Targets, get_sweep

GiB = 2**30
DEVICES = ("auto", "cpu", "cuda")
NOISY_SPREAD = 2.0  # slowest / fastest measured step beyond which a run was disturbed (TORCH_NOTES: 1.2-1.5 quiet)

CPU_MEMORY_CAVEAT = (
    "memory on CPU is reported, not targeted: the cost model counts bf16 mixed-precision training (2-byte "
    "weights and activations, fp32 master weights and Adam moments), the CPU executor trains in fp32 (4-byte "
    "weights, gradients and activations; 8 bytes of Adam moments) and measures resident memory (method below)")

# nvidia-smi device names -> catalogue systems (one device of the system runs the plan).
GPU_SYSTEMS = (("H200", "dgx-h200"), ("H100 80GB HBM3", "dgx-h100"), ("H100 SXM", "dgx-h100"),
               ("A100-SXM4-80GB", "dgx-a100-80gb"), ("A100-SXM4-40GB", "dgx-a100-40gb"), ("B200", "dgx-b200"),
               ("MI300X", "mi300x-8"))


# ---------------------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------------------
def error_pct(predicted: float, measured: float) -> float:
    """Signed relative error of a prediction, percent: 100 (predicted - measured) / measured."""
    return 100.0 * (predicted - measured) / measured


def mape(predicted, measured) -> float:
    """Mean absolute percentage error, percent: 100/n sum |p - m| / m (m > 0)."""
    import pandas as pd

    p, m = pd.Series(predicted, dtype=float).to_numpy(), pd.Series(measured, dtype=float).to_numpy()
    if len(p) != len(m) or len(p) == 0:
        raise ValueError(f"mape needs two equal, non-empty lists; got {len(p)} and {len(m)} values")
    return float(100.0 * (abs(p - m) / m).mean())


def spearman(predicted, measured) -> float | None:
    """Spearman rank correlation of predicted vs measured (scipy.stats.spearmanr; ties get average ranks).
    None where undefined: fewer than 2 points, or a constant list."""
    from scipy.stats import spearmanr

    if len(predicted) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on constant input and returns nan
        rho = spearmanr(predicted, measured).statistic
    return None if rho is None or math.isnan(rho) else float(rho)


# ---------------------------------------------------------------------------------------------------------
# Result
# ---------------------------------------------------------------------------------------------------------
class ValidationRow(Schema):
    """One plan: prediction against measurement."""

    plan: str = Field(description="plan name (sweep entry, or plan file stem)")
    kind: str = Field(description="what the plan exercises")
    layout: str
    predicted_step_s: float
    measured_step_s: float = Field(description="job step time (slowest rank per step): the median after warm-up "
                                               "of each round, the lowest of those (Measurement.step_time_s)")
    step_spread: float = Field(description="slowest / fastest job step after warm-up in the round kept: how steady "
                                           "the run was "
                                           "(1.2-1.5 on a quiet CPU machine; more: other load on the machine)")
    step_error_pct: float
    predicted_memory_gib: float = Field(description="cost model's peak bytes on the most loaded device less the "
                                                    "spec's fixed memory_overhead (not measured), GiB")
    measured_memory_gib: float = Field(description="peak memory of the most loaded rank, GiB")
    memory_error_pct: float
    final_loss: float | None = None


COLUMNS = list(ValidationRow.model_fields)


class ValidationResult(Schema):
    """What `validate` returns: rows, metrics, and where the outputs went. `table` is the rows as a DataFrame."""

    sweep: str | None
    device: str
    nproc: int
    hardware: str = Field(description="spec the predictions used (name), or 'each plan's own'")
    hardware_source: str = Field(description="where it came from: a path, the catalogue, or calibration")
    rows: list[ValidationRow]
    step_mape_pct: float
    memory_mape_pct: float
    spearman: float | None = Field(description="rank correlation of predicted vs measured step time")
    targets: Targets | None = None
    notes: list[str] = Field(default_factory=list)
    csv_path: str | None = None
    plot_path: str | None = None

    @property
    def table(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([r.model_dump() for r in self.rows], columns=COLUMNS)

    def targets_met(self) -> dict[str, bool]:
        """Each target of the sweep and whether it holds (empty without targets)."""
        t, out = self.targets, {}
        if t is None:
            return out
        out[f"step-time MAPE <= {t.step_mape_pct:g}%"] = self.step_mape_pct <= t.step_mape_pct
        if t.spearman is not None:
            out[f"Spearman >= {t.spearman:g}"] = self.spearman is not None and self.spearman >= t.spearman
        if t.memory_mape_pct is not None:
            out[f"memory MAPE <= {t.memory_mape_pct:g}%"] = self.memory_mape_pct <= t.memory_mape_pct
        return out

    def text(self) -> str:
        """The table, the metrics and the notes, as `perfmodel validate` prints them."""
        what = f"sweep {self.sweep}" if self.sweep else "plan files"
        lines = [f"validate {what}: {len(self.rows)} plans on {self.nproc} {self.device} process"
                 f"{'es' if self.nproc > 1 else ''}; predicted with {self.hardware} ({self.hardware_source})", ""]
        import pandas as pd

        df = self.table
        show = pd.DataFrame({
            "plan": df["plan"], "layout": df["layout"],
            "step pred (s)": df["predicted_step_s"].map("{:.4f}".format),
            "step meas (s)": df["measured_step_s"].map("{:.4f}".format),
            "step err": df["step_error_pct"].map("{:+.1f}%".format),
            "spread": df["step_spread"].map("{:.2f}".format),
            "mem pred (GiB)": df["predicted_memory_gib"].map("{:.3f}".format),
            "mem meas (GiB)": df["measured_memory_gib"].map("{:.3f}".format),
            "mem err": df["memory_error_pct"].map("{:+.1f}%".format),
        })
        lines.append(show.to_string(index=False))
        lines.append("")
        rho = "n/a" if self.spearman is None else f"{self.spearman:.3f}"
        lines.append(f"step time:   MAPE {self.step_mape_pct:.1f}%   Spearman {rho} (predicted vs measured, "
                     f"{len(self.rows)} plans)")
        lines.append(f"peak memory: MAPE {self.memory_mape_pct:.1f}%"
                     + ("   (CPU: not a target, see note)" if self.device == "cpu" else ""))
        met = self.targets_met()
        if met:
            lines.append("targets: " + ", ".join(f"{k} {'holds' if ok else 'MISSED'}" for k, ok in met.items()))
        lines += [f"note: {n}" for n in self.notes]
        for label, path in (("csv", self.csv_path), ("plot", self.plot_path)):
            if path:
                lines.append(f"wrote {label}: {path}")
        return "\n".join(lines)


def compare(name: str, kind: str, predicted_step_s: float, predicted_memory_bytes: float,
            m: Measurement) -> ValidationRow:
    """One row: a prediction (seconds, bytes) against a measurement (median step, peak of the most loaded rank)."""
    ms, mm = m.step_time_s, m.peak_memory_bytes
    measured = m.kept_round()
    return ValidationRow(plan=name, kind=kind, layout=layout_label(m.plan), predicted_step_s=predicted_step_s,
                         measured_step_s=ms, step_spread=max(measured) / min(measured),
                         step_error_pct=error_pct(predicted_step_s, ms),
                         predicted_memory_gib=predicted_memory_bytes / GiB, measured_memory_gib=mm / GiB,
                         memory_error_pct=error_pct(predicted_memory_bytes, mm),
                         final_loss=m.losses[-1] if m.losses else None)


def summarize(rows: list[ValidationRow], *, sweep: str | None, device: str, nproc: int, hardware: str,
              hardware_source: str, targets: Targets | None = None, notes: list[str] | None = None,
              measurements: list[Measurement] | None = None) -> ValidationResult:
    """Metrics over the rows, and the notes a reader needs (CPU memory caveat, how memory was measured, and
    where the runs departed from their plans)."""
    if not rows:
        raise InputError("validate: no plans to compare; give plan files or a sweep with plans")
    import pandas as pd

    df = pd.DataFrame([r.model_dump() for r in rows])
    notes = list(notes or [])
    noisy = [r.plan for r in rows if r.step_spread > NOISY_SPREAD]
    if noisy:
        notes.append(f"steps varied more than {NOISY_SPREAD:g}x after warm-up in {', '.join(noisy)}: other load on "
                     "the machine is likely; re-run on a quiet machine before trusting those medians")
    if device == "cpu":
        notes.append(CPU_MEMORY_CAVEAT)
    if measurements:
        methods = sorted({m.memory_method for m in measurements})
        notes.append("peak memory measured by: " + "; ".join(methods))
        departures: dict[str, list[str]] = {}
        for row, m in zip(rows, measurements):
            for n in m.notes:
                departures.setdefault(n, []).append(row.plan)
        for n, plans in departures.items():
            notes.append(f"executor ({', '.join(plans) if len(plans) < len(rows) else 'every plan'}): {n}")
    return ValidationResult(sweep=sweep, device=device, nproc=nproc, hardware=hardware,
                            hardware_source=hardware_source, rows=rows,
                            step_mape_pct=mape(df["predicted_step_s"], df["measured_step_s"]),
                            memory_mape_pct=mape(df["predicted_memory_gib"], df["measured_memory_gib"]),
                            spearman=spearman(df["predicted_step_s"].tolist(), df["measured_step_s"].tolist()),
                            targets=targets, notes=notes)


# ---------------------------------------------------------------------------------------------------------
# Input checks (before anything runs or is written)
# ---------------------------------------------------------------------------------------------------------
class _Entry(Schema):
    name: str
    kind: str
    model: ModelConfig
    plan: Plan
    hardware: System | None = Field(None, description="a plan file's own spec (None for sweep entries)")
    path: str | None = None


def _check_dir(out_dir: Path) -> None:
    """The output directory exists and is writable, or can be created (its nearest existing parent is)."""
    if out_dir.exists():
        if not out_dir.is_dir():
            raise InputError(f"--out-dir {str(out_dir)!r} is a file; valid: a directory (it is created if missing)")
        if not os.access(out_dir, os.W_OK):
            raise InputError(f"--out-dir {str(out_dir)!r} is not writable")
        return
    parent = out_dir.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise InputError(f"--out-dir {str(out_dir)!r} cannot be created: {str(parent)!r} is not a writable directory")


def _check_output(path: str | Path, what: str, suffix: str, out_dir: Path) -> Path:
    if Path(path).absolute().parent == out_dir.absolute() and not out_dir.exists():
        check_suffix(path, what, suffix)
        return Path(path)  # goes into the output directory, checked (and created) with it
    return check_output(path, what, suffix)


def _gpu_name() -> str | None:
    """The first CUDA device's name from nvidia-smi (no torch in this process), or None."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    names = out.stdout.strip().splitlines()
    return names[0].strip() if out.returncode == 0 and names else None


def catalogue_system_for(gpu_name: str | None) -> str | None:
    """The catalogue system whose accelerator is this CUDA device (by nvidia-smi name), or None."""
    if not gpu_name:
        return None
    for key, system in GPU_SYSTEMS:
        if key.lower() in gpu_name.lower() and system in list_systems():
            return system
    return None


def _entries(plans, sweep_name, nproc, device, hardware):
    """Resolve the inputs: (entries, sweep or None, nproc, device, spec given or None). Loads and checks only."""
    from .planfile import load_plan_file

    if plans and sweep_name:
        raise InputError("validate takes plan files or --sweep, not both; valid: perfmodel validate PLAN.json ... "
                         "or perfmodel validate --sweep NAME")
    if not plans and not sweep_name:
        raise InputError(f"validate needs plan files or --sweep NAME; valid sweeps: {', '.join(SWEEPS)}")
    if device not in DEVICES:
        raise InputError(f"--device = {device!r}; valid: {', '.join(DEVICES)}")
    spec = load_hardware(hardware) if hardware is not None else None
    if sweep_name:
        sw = get_sweep(sweep_name)
        if nproc is not None and nproc != sw.nproc:
            raise InputError(f"--nproc = {nproc} does not match sweep {sw.name}, whose plans use {sw.nproc} "
                             f"processes; valid --nproc: {sw.nproc}")
        if device not in ("auto", sw.device):
            raise InputError(f"--device = {device} does not match sweep {sw.name}, which runs on {sw.device}; "
                             f"valid --device: {sw.device}")
        entries = [_Entry(name=e.name, kind=e.kind, model=sw.model_of(e), plan=e.plan) for e in sw.plans]
        nproc, device = sw.nproc, sw.device
    else:
        sw = None
        entries = []
        for p in plans:
            pf = load_plan_file(p)
            entries.append(_Entry(name=Path(p).name.removesuffix(".json"), kind=pf.created_by or "plan file",
                                  model=pf.model, plan=pf.plan, hardware=pf.hardware, path=str(p)))
        needs = sorted({e.plan.gpus for e in entries})
        if len(needs) > 1:
            raise InputError(f"plan files need {' and '.join(map(str, needs))} processes; validate runs them in one "
                             "launch, so all must need the same number (plan.gpus)")
        if nproc is not None and nproc != needs[0]:
            raise InputError(f"--nproc = {nproc} but the plan files need {needs[0]} processes (plan.gpus); "
                             f"valid --nproc: {needs[0]}")
        nproc = needs[0]
        kinds = sorted({e.hardware.accelerator.torch_device for e in entries})
        if len(kinds) > 1:
            raise InputError(f"plan files are for different device types ({', '.join(kinds)}); validate runs them "
                             "in one launch on one device type")
        if device == "auto":
            device = kinds[0]
        elif device != kinds[0]:
            raise InputError(f"--device = {device} but the plan files are for {kinds[0]} parts "
                             f"(hardware.accelerator.torch_device); valid --device: {kinds[0]}")
    if device not in ("cpu", "cuda"):
        raise InputError(f"device {device!r} cannot run plans here; valid: cpu, cuda")
    if spec is not None and spec.accelerator.torch_device != device:
        raise InputError(f"--hardware {hardware}: accelerator {spec.accelerator.name} runs on "
                         f"{spec.accelerator.torch_device}, the plans on {device}; valid: a spec with "
                         f"accelerator.torch_device {device} (e.g. perfmodel calibrate --device {device} --output "
                         "SPEC.yaml)")
    return entries, sw, nproc, device, spec


# ---------------------------------------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------------------------------------
def validate(plans: list[Path] | None = None, sweep: str | None = None, *, nproc: int | None = None,
             hardware: str | Path | None = None, out_dir: Path = Path("validation"), steps: int | None = None,
             warmup: int | None = None, rounds: int | None = None, device: str = "auto",
             plot: str | Path | None = None, csv: str | Path | None = None,
             quick_calibration: bool = True, timeout_s: float | None = None, echo=None) -> ValidationResult:
    """Run `plans` (plan files) or the built-in `sweep` on `nproc` processes, predict each, compare.

    Predictions use `hardware` when given. Otherwise a sweep on CPU calibrates this machine first
    (`perfmodel.calibrate.calibrate(device="cpu", nproc=nproc, quick=quick_calibration)`, written to
    out_dir/calibrated.yaml); on CUDA it uses the catalogue system of the device (by nvidia-smi name), or
    calibrates where none matches; plan files use their own hardware. `steps`/`warmup` default to the sweep's
    (8/3 for plan files), `rounds` the sweep's (1 for plan files): the plans run that many times over,
    interleaved, and each step time is the lowest round's median. Writes out_dir/validation.csv (or `csv`)
    and, with `plot`, a PNG scatter.
    All input is checked before anything runs or is written (InputError, one line).
    """
    echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    out_dir = Path(out_dir)
    entries, sw, nproc, device, spec = _entries(plans, sweep, nproc, device, hardware)
    steps = steps if steps is not None else (sw.steps if sw else 8)
    warmup = warmup if warmup is not None else (sw.warmup if sw else 3)
    rounds = rounds if rounds is not None else (sw.rounds if sw else 1)
    if rounds < 1:
        raise InputError(f"--rounds = {rounds}; valid: 1 or more")
    if steps < 1 or warmup < 0 or warmup >= steps:
        raise InputError(f"--steps = {steps}, --warmup = {warmup}; valid: steps >= 1 and 0 <= warmup < steps "
                         "(the median is taken over the steps after warm-up)")
    _check_dir(out_dir)
    csv = _check_output(csv if csv is not None else out_dir / "validation.csv", "--csv", ".csv", out_dir)
    if plot is not None:
        plot = _check_output(plot, "--plot", ".png", out_dir)

    # The spec the predictions use.
    notes = []
    gpu = _gpu_name() if device == "cuda" and spec is None and sw is not None else None
    if spec is not None:
        source = str(hardware)
    elif sw is None:
        source = "each plan file's own spec"
    elif catalogue_system_for(gpu):
        name = catalogue_system_for(gpu)
        spec, source = load_hardware(name), f"catalogue system {name}, matching this GPU ({gpu})"
    else:
        from .calibrate import calibrate

        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / "calibrated.yaml"
        echo(f"no --hardware given: calibrating this machine first ({device}, {nproc} processes, "
             f"{'quick' if quick_calibration else 'full'}) -> {target}")
        spec = calibrate(device=device, nproc=nproc, output=target, quick=quick_calibration, echo=echo)
        source = f"calibrated on this machine just now ({'quick' if quick_calibration else 'full'}): {target}"
        notes.append(f"predictions use a spec calibrated on this machine by this run ({target}); pass "
                     "--hardware SPEC.yaml to reuse one")

    # Predictions first: a spec that cannot predict a plan fails before the run.
    from .cost.estimate import estimate

    predicted = [estimate(e.model, spec or e.hardware, e.plan) for e in entries]
    # A plan predicted not to fit would stop the whole launch when it runs out of memory: a sweep leaves it out
    # (e.g. gpu-single on a 40 GiB part), plan files are refused.
    big = [(e, est) for e, est in zip(entries, predicted) if not est.fits_in_memory]
    for e, est in big:
        need = f"{est.memory_bytes.total / GiB:.1f} GiB > {est.memory_capacity_bytes / GiB:.1f} GiB"
        if sw is None:
            raise InputError(f"plan file {e.path!r} is predicted not to fit in memory on {(spec or e.hardware).name} "
                             f"({need}); validate runs plans that fit (one out-of-memory rank stops the launch)")
        notes.append(f"{e.name} left out: predicted not to fit on {spec.name} ({need})")
    if big:
        keep = [i for i, est in enumerate(predicted) if est.fits_in_memory]
        if not keep:
            raise InputError(f"no plan of sweep {sw.name} is predicted to fit in memory on {spec.name}; valid: a "
                             "spec with more device memory")
        entries, predicted = [entries[i] for i in keep], [predicted[i] for i in keep]
    out_dir.mkdir(parents=True, exist_ok=True)
    if sw is not None:
        from .planfile import write_plan_file
        from .search.planfiles import plan_file

        plan_dir = out_dir / "plans"
        plan_dir.mkdir(exist_ok=True)
        files = [plan_file(e.model, spec, e.plan, created_by=f"perfmodel validate --sweep {sw.name}: {e.name}")
                 for e in entries]
        paths = [write_plan_file(pf, plan_dir / f"{e.name}.json", "--out-dir") for pf, e in zip(files, entries)]
    else:
        paths = [Path(e.path) for e in entries]

    from .execute import run_plans

    echo(f"running {len(paths)} plans in one timed launch on {nproc} {device} process{'es' if nproc > 1 else ''} "
         f"({steps} steps each, {warmup} warm-up{f', {rounds} rounds' if rounds > 1 else ''})")
    measured = run_plans(paths, nproc, device=device, steps=steps, warmup=warmup, rounds=rounds, log_dir=out_dir,
                         timeout_s=timeout_s, echo=echo)

    # Both measurement methods (CUDA max_memory_allocated, CPU resident peak less the resident size before the
    # model was built) leave out the runtime the spec's memory_overhead stands for: compare without it.
    overheads = [(spec or e.hardware).memory_overhead_bytes for e in entries]
    rows = [compare(e.name, e.kind, est.step_time_s, est.memory_bytes.total - ov, m)
            for e, est, m, ov in zip(entries, predicted, measured, overheads)]
    if any(overheads):
        gib = sorted({f"{ov / GiB:.3g}" for ov in overheads})
        notes.append(f"predicted memory leaves out the spec's fixed per-device memory_overhead ({', '.join(gib)} "
                     "GiB: runtime, context, communication buffers), which the measurement excludes (set-up "
                     "is not counted)")
    result = summarize(rows, sweep=sw.name if sw else None, device=device, nproc=nproc,
                       hardware=spec.name if spec else "each plan's own spec", hardware_source=source,
                       targets=sw.targets if sw else None, notes=notes, measurements=measured)
    write_atomic(csv, lambda tmp: result.table.to_csv(tmp, index=False), "--csv")
    result.csv_path = str(csv)
    if plot is not None:
        from .plots.validation import validation_figure

        validation_figure(result, plot)
        result.plot_path = str(plot)
    return result


# ---------------------------------------------------------------------------------------------------------
# CLI (wired into perfmodel/cli.py)
# ---------------------------------------------------------------------------------------------------------
def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add `validate` to the CLI's subparsers."""
    va = subparsers.add_parser(
        "validate", help="run plans for real, predict them, and compare (table, MAPE, Spearman, CSV, plot)",
        description="Run plan files (or a built-in sweep) in one torchrun launch, predict each with the hardware "
                    "spec (calibrated on this machine when none is given on CPU), and print predicted against "
                    f"measured step time and peak memory. Built-in sweeps: {', '.join(SWEEPS)}.")
    va.add_argument("plans", nargs="*", metavar="PLAN.json", help="plan files, all needing the same process count")
    va.add_argument("--sweep", metavar="NAME", help=f"a built-in sweep: {', '.join(SWEEPS)}")
    va.add_argument("--nproc", type=integer("--nproc", 1), help="processes; default: what the plans need")
    va.add_argument("--hardware", metavar="SPEC", help="spec the predictions use (preset or YAML); default: a CPU "
                    "sweep calibrates first, a CUDA sweep uses the catalogue system of the GPU, plan files "
                    "their own")
    va.add_argument("--out-dir", default=None, metavar="DIR",
                    help="plan files, measurements, logs and the CSV (default: validation/SWEEP or validation/plans)")
    va.add_argument("--steps", type=integer("--steps", 1), help="steps per plan, warm-up included (default: the "
                                                             "sweep's, 8 for plan files)")
    va.add_argument("--warmup", type=integer("--warmup", 0), help="leading steps left out of the median (default 3)")
    va.add_argument("--rounds", type=integer("--rounds", 1), help="run the plans this many times over, "
                    "interleaved; a plan's step time is its lowest round's median (default: the sweep's, 1 for "
                    "plan files)")
    va.add_argument("--device", choices=DEVICES, default="auto", help="default: the sweep's or the plans' device")
    va.add_argument("--plot", metavar="FILE.png", help="draw predicted against measured (step time, memory)")
    va.add_argument("--csv", metavar="FILE.csv", help="default: OUT_DIR/validation.csv")
    va.add_argument("--full-calibration", action="store_true", help="calibrate with the full set of "
                                                                    "microbenchmarks instead of the quick one")
    va.add_argument("--timeout", type=seconds("--timeout"), metavar="S", help="wall-clock limit of the run, seconds")
    return va


def run(args) -> str:
    """`perfmodel validate` from parsed arguments: the printed text."""
    out_dir = Path(args.out_dir) if args.out_dir else Path("validation") / (args.sweep or "plans")
    result = validate([Path(p) for p in args.plans] or None, args.sweep, nproc=args.nproc, hardware=args.hardware,
                      out_dir=out_dir, steps=args.steps, warmup=args.warmup, rounds=args.rounds,
                      device=args.device,
                      plot=args.plot, csv=args.csv,
                      quick_calibration=not args.full_calibration, timeout_s=args.timeout)
    return result.text()
