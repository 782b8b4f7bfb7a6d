"""What both validations share (validate.runner: training plans; validate.serving_sweep: serving plans): the output
checks made before anything runs, and the spec the predictions use (given, the catalogue system of this GPU, or
this machine calibrated now). This module imports no torch."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..errors import InputError
from ..files import check_output, check_suffix
from ..spec.hardware.system import System, list_systems, load_hardware

# nvidia-smi device names -> catalogue systems (one device of the system runs the plan).
GPU_SYSTEMS = (("GB300", "gb300-nvl72"), ("GB200", "gb200-nvl72"), ("H200", "dgx-h200"),  # the longer names first
               ("H100 80GB HBM3", "dgx-h100"), ("H100 SXM", "dgx-h100"), ("A100-SXM4-80GB", "dgx-a100-80gb"),
               ("A100-SXM4-40GB", "dgx-a100-40gb"), ("B200", "dgx-b200"), ("B300", "dgx-b300"), ("MI300X", "mi300x-8"))



def check_out_dir(out_dir: Path) -> None:
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


def check_output_in(path: str | Path, what: str, suffix: str, out_dir: Path) -> Path:
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


def prediction_spec(spec: System | None, hardware, sweep: bool, device: str, nproc: int, out_dir: Path,
                    quick: bool, echo) -> tuple[System | None, str, list[str]]:
    """(spec, where it came from, notes): the spec given (`hardware`); else for a sweep on CUDA the catalogue
    system of this GPU, elsewhere this machine calibrated now (`calibrate.machine.calibration.calibrate`, written to
    out_dir/calibrated.yaml); plan files (not a sweep) use their own (None)."""
    gpu = _gpu_name() if device == "cuda" and spec is None and sweep else None
    if spec is not None:
        return spec, str(hardware), []
    if not sweep:
        return None, "each plan file's own spec", []
    if catalogue_system_for(gpu):
        name = catalogue_system_for(gpu)
        return load_hardware(name), f"catalogue system {name}, matching this GPU ({gpu})", []
    from ..calibrate.machine.calibration import calibrate

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "calibrated.yaml"
    echo(f"no --hardware given: calibrating this machine first ({device}, {nproc} processes, "
         f"{'quick' if quick else 'full'}) -> {target}")
    spec = calibrate(device=device, nproc=nproc, output=target, quick=quick, echo=echo)
    return spec, f"calibrated on this machine just now ({'quick' if quick else 'full'}): {target}", [
        f"predictions use a spec calibrated on this machine by this run ({target}); pass --hardware SPEC.yaml to "
        "reuse one"]


def write_outputs(result, csv: Path, plot: Path | None, figure: str) -> None:
    """Write a validation's table to `csv` and, with `plot`, its figure (`figure`: MODULE.FUNCTION of
    perfmodel.plots, imported only then: matplotlib is slow to load); record both paths on `result`."""
    from importlib import import_module

    from ..files import write_atomic

    write_atomic(csv, lambda tmp: result.table.to_csv(tmp, index=False), "--csv")
    result.csv_path = str(csv)
    if plot is not None:
        module, name = figure.rsplit(".", 1)
        getattr(import_module(f"perfmodel.plots.{module}"), name)(result, plot)
        result.plot_path = str(plot)


def check_sweep_flags(sw, nproc: int | None, device: str) -> None:
    """A sweep runs on its own process count and device type: --nproc and --device may only repeat them."""
    if nproc is not None and nproc != sw.nproc:
        raise InputError(f"--nproc = {nproc} does not match sweep {sw.name}, whose plans use {sw.nproc} processes; "
                         f"valid --nproc: {sw.nproc}")
    if device not in ("auto", sw.device):
        raise InputError(f"--device = {device} does not match sweep {sw.name}, which runs on {sw.device}; valid "
                         f"--device: {sw.device}")
