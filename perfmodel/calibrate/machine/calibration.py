"""`perfmodel calibrate`: microbenchmark this machine and write a hardware spec fitted to it.

    from perfmodel.calibrate import calibrate
    system = calibrate(device="cpu", nproc=4, output="cpu-4p.yaml", quick=True)

The CLI subcommand: `add_parser(subparsers)` and `run(args) -> str` (from `command`).

Runs `bench` (in this process for nproc = 1, else on nproc ranks under torchrun through `perfmodel.execute.launch.torchrun`),
fits the spec's efficiency parameters with the cost model's formulas (`fit`) and the collectives per group size
(`measured_tables.fit_groups`), writes the measured tables beside the spec in the catalogue's formats
(`SPEC.gemm.csv.gz`, which the spec names as its own GEMM table, and `SPEC.nccl.csv.gz`: `measured_tables`), builds
the System (`calibrated_spec`) and writes it with the raw measurements beside it (`SPEC.raw.json`, schema
`raw.RawFile`), all atomically. The tables are written before the executor's host costs are measured (the spec
those runs price reads its GEMM table), the spec and the raw file last.
"""

from __future__ import annotations

import datetime
import re
import shutil
import tempfile
import time
from pathlib import Path

from ...errors import InputError
from ...files import check_writable, write_atomic
from ...spec.hardware.system import System, list_systems, load_hardware
from ...spec.hardware.kernel_tables import spec_folder
from .measured_tables import attention_table_text, comm_table_text, fit_groups, gemm_table_text, gzipped, table_paths
from .raw import FitResult, Measurements, RawFile

__all__ = ["calibrate", "run_calibration", "raw_path", "add_parser", "run"]
BENCH_MODULE = "perfmodel.calibrate.machine.bench"
TIMEOUT_S = {True: 600.0, False: 1800.0}  # wall-clock limit of a launched run (quick, full)


def raw_path(output: str | Path) -> Path:
    """Where the raw measurements go: beside the spec, `NAME.raw.json`."""
    p = Path(output)
    return p.with_name(p.name.removesuffix(p.suffix) + ".raw.json")


def command_line(device, nproc, output, base, quick, name) -> str:
    """The canonical `perfmodel calibrate` command for these arguments (cited in the spec's sources), as run from
    the output's folder: `--output` is its file name, so that no machine's path travels with the spec."""
    parts = ["perfmodel calibrate", f"--device {device}", f"--nproc {nproc}"]
    parts += [f"--base {base}"] if base else []
    parts += [f"--name {name}"] if name else []
    parts += ["--quick"] if quick else []
    return " ".join(parts + [f"--output {Path(output).name}"])


def check_name(name, flag: str = "name") -> None:
    """A system name for a written spec: letters, digits, '.', '_' and '-'; InputError otherwise."""
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", str(name)):
        raise InputError(f"{flag} = {name!r}; valid: letters, digits, '.', '_' and '-', e.g. cpu-lab-4p")


def check_spec_output(output) -> Path:
    """The spec file to write: named .yaml/.yml and writable; InputError otherwise."""
    if output is None:
        raise InputError("output is required: the spec file to write, e.g. --output my-machine.yaml")
    out = Path(output)
    if out.suffix not in (".yaml", ".yml"):
        raise InputError(f"output = {str(output)!r}; valid: a file name ending in .yaml or .yml")
    check_writable(out, "output")
    return out


def _check(device, nproc, output, base, quick, name) -> tuple[System | None, Path, Path]:
    """Refuse bad input before any work: one line naming the field, the value and what is valid."""
    if device not in ("cpu", "cuda"):
        raise InputError(f"device = {device!r}; valid: cpu, cuda")
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise InputError(f"nproc = {nproc!r}; valid: an integer >= 1 (processes that run the benchmarks)")
    if not isinstance(quick, bool):
        raise InputError(f"quick = {quick!r}; valid: True or False")
    check_name(name)
    out = check_spec_output(output)
    for extra in [raw_path(out), *table_paths(out).values()]:
        check_writable(extra, "output")
    if device == "cpu":
        if base is not None:
            raise InputError(f"base = {base!r} applies to --device cuda only; a CPU spec is built from "
                             "measurements alone (omit --base)")
        return None, out, raw_path(out)
    import torch  # only a CUDA request needs torch in this process

    if not torch.cuda.is_available():
        raise InputError("device = 'cuda': torch sees no CUDA GPU on this machine; valid: cpu")
    count = torch.cuda.device_count()
    if nproc > count:
        raise InputError(f"nproc = {nproc}: this machine has {count} CUDA GPU(s); valid: 1..{count}")
    if base is None:
        props = torch.cuda.get_device_properties(0)
        return default_base(torch.cuda.get_device_name(0), props.total_memory), out, raw_path(out)
    system = load_hardware(base)
    if system.accelerator.torch_device != "cuda":
        raise InputError(f"base = {base!r} runs on torch device {system.accelerator.torch_device}, not cuda; "
                         f"valid: a CUDA system such as {default_base(torch.cuda.get_device_name(0), 0).name}")
    return system, out, raw_path(out)


def default_base(device_name: str, total_bytes: float) -> System:
    """The catalogue system whose accelerator is this GPU: the longest accelerator family name (H100, H200,
    GB200, ...) found in the device name, then the closest memory size; InputError if none matches."""
    dev = device_name.lower().replace(" ", "")
    best, best_key = [], 0
    for sys_name in list_systems():
        system = load_hardware(sys_name)
        if system.accelerator.torch_device != "cuda":
            continue
        family = system.accelerator.name.split("-")[0].lower()
        if family in dev and len(family) >= best_key:
            if len(family) > best_key:
                best, best_key = [], len(family)
            best.append(system)
    if not best:
        raise InputError(f"no catalogue system has the GPU {device_name!r}; pass --base NAME "
                         f"(known: {', '.join(list_systems())})")
    return min(best, key=lambda s: (abs(s.accelerator.hbm_bytes - total_bytes), s.name))


def _measure(device: str, nproc: int, quick: bool, echo) -> Measurements:
    if nproc == 1:
        from .bench import run_benchmarks  # torch, in this process

        return run_benchmarks(device, quick, echo)
    from ...execute.launch.torchrun import launch

    tmp = Path(tempfile.mkdtemp(prefix="perfmodel-calibrate-"))
    out, log = tmp / "measurements.json", tmp / "calibrate.log"
    launch(BENCH_MODULE, ["--device", device, "--out", str(out)] + (["--quick"] if quick else []), nproc,
           device=device, log_path=log, timeout_s=TIMEOUT_S[quick], echo=echo or (lambda line: None))
    m = Measurements.model_validate_json(out.read_text())
    shutil.rmtree(tmp, ignore_errors=True)  # kept (with the log the error names) if the run failed
    return m


def run_calibration(device: str = "cpu", nproc: int = 1, output: str | Path | None = None, base: str | None = None,
                    quick: bool = False, name: str | None = None, echo=None) -> tuple[System, RawFile]:
    """`calibrate`, also returning the raw file's contents (measurements, fit, residuals)."""
    from .fit import fit_all
    from .calibrated_spec import build_system, cpu_template, default_name

    start = time.monotonic()
    base_system, out, raw_out = _check(device, nproc, output, base, quick, name)
    command = command_line(device, nproc, output, base, quick, name)
    m = _measure(device, nproc, quick, echo)
    if device == "cpu":
        template = cpu_template(m, name or default_name(m, None))
        fit: FitResult = fit_all(m, template)
    else:
        template = base_system
        fit = fit_all(m, template, prefer_tile=tuple(base_system.efficiency.matmul_tile))
    fit = fit_groups(fit, m, template)
    tables = table_paths(out)
    texts = {"gemm": gemm_table_text(m.gemm), "nccl": comm_table_text(m.comm),
             "attention": attention_table_text(m.attention)}
    for kind, text in texts.items():
        if text is not None:  # before the host costs: the runs they time are priced from the GEMM table
            write_atomic(tables[kind], lambda tmp, text=text: Path(tmp).write_bytes(gzipped(text)), "output")
    gemm, attention = (tables[kind] if texts[kind] is not None else None for kind in ("gemm", "attention"))
    system = build_system(template, fit, m, command, raw_out.name, name or default_name(m, base_system), gemm,
                          attention)
    system = measure_host(system, device, nproc, command, quick, echo)
    raw = RawFile(created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  command=command, spec_file=out.name, system=system.name, quick=quick,
                  wall_s=time.monotonic() - start, measurements=m, fit=fit)
    write_atomic(raw_out, lambda tmp: Path(tmp).write_text(raw.model_dump_json(indent=1) + "\n"), "output")
    write_atomic(out, lambda tmp: Path(tmp).write_text(spec_yaml(system, command, out.parent)), "output")
    return system, raw


def measure_host(system: System, device: str, nproc: int, command: str, quick: bool, echo=None) -> System:
    """`system` with this machine's host. On CUDA: the per-call costs by kind of calibrate.host.calls (tens of
    seconds; the stacks' call counts price every stack with them), as System.host_cpu. On a CPU, whose ranks
    compute on their host thread: the executor's per-launch costs fitted end to end on a model too small to
    compute, and the compute a whole step and a served prefill sustain (calibrate.host.costs,
    calibrate.machine.serving_costs)."""
    say = echo or (lambda line: None)
    if device == "cuda":
        from ..host.calls import measure
        from ..host.measured import measured_host

        say("calibrate: this host's seconds per call, by kind (calibrate.host.calls)")
        result = measure("cuda", rounds=2 if quick else 3, echo=echo)
        sources = {**system.sources, "host_cpu": f"measured: `{command}` (calibrate.host.calls; its sources)"}
        return system.model_copy(update={"host_cpu": measured_host(result, f"{system.name}-host", command),
                                         "host_costs": None, "sources": sources})
    from ..host.costs import measure_executor_costs
    from .serving_costs import measure_serving_costs

    say("calibrate: host costs of the executor (a model too small to compute) and the compute a whole step sustains")
    system = measure_executor_costs(system, nproc, device, echo, quick)
    say("calibrate: host costs of the executor's serving loop and the compute a served prefill sustains")
    return measure_serving_costs(system, nproc, device, echo, quick)


def calibrate_host(output: str | Path, base: str | None = None, name: str | None = None, quick: bool = False,
                   echo=None) -> System:
    """`perfmodel calibrate --device cuda --host-only`: the base system (default: the catalogue system of this GPU)
    with this machine's host measured (measure_host), written to `output` in under two minutes; no
    microbenchmarks of the device. Returns the System written."""
    base_system, out, _ = _check("cuda", 1, output, base, quick, name)
    command = command_line("cuda", 1, output, base, quick, name) + " --host-only"
    system = measure_host(base_system, "cuda", 1, command, quick, echo)
    system = system.model_copy(update={"name": name or f"{base_system.name}-host"})
    write_atomic(out, lambda tmp: Path(tmp).write_text(spec_yaml(system, command, out.parent)), "output")
    return system


def calibrate(device: str = "cpu", nproc: int = 1, output: str | Path | None = None, base: str | None = None,
              quick: bool = False, name: str | None = None, echo=None) -> System:
    """Microbenchmark this machine on `nproc` processes and write the fitted hardware spec to `output`.

    device: 'cpu' (fp32, one thread per process; gloo) or 'cuda' (bf16; NCCL). base (CUDA only): the catalogue
    system whose datasheet numbers and outer tiers are kept (default: the one with this GPU). quick: fewer
    points (about a quarter of the time) and 2 rounds of the executor's host probes, not 3. name: the system's name (default cpu-HOST-Np / BASE-calibrated).
    echo(line): progress lines. Returns the System written; the raw measurements go to `raw_path(output)`, the
    measured GEMM, collective and attention tables to `measured_tables.table_paths(output)` (the spec names its GEMM
    and attention tables).
    InputError (one line, nothing written) for bad input; execute.launch.torchrun.RunFailed if a benchmark rank fails.
    """
    return run_calibration(device, nproc, output, base, quick, name, echo)[0]


def spec_yaml(system: System, command: str, folder: str | Path) -> str:
    """The spec file's text for a file in `folder` (its own kernel tables named relative to it)."""
    import yaml

    head = f"# Written by `{command}`; every fitted number cites its measurement in `sources`.\n"
    with spec_folder(folder):
        data = system.model_dump(mode="json")
    return head + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)
