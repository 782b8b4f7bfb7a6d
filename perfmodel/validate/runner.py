"""`perfmodel validate`: run plans for real, predict them with a (calibrated) hardware spec, and compare.

    perfmodel validate --sweep cpu-smoke --nproc 4 --plot cpu-smoke.png
    perfmodel validate strategies/a.json strategies/b.json --nproc 4 --hardware my-cpu.yaml

For a built-in sweep (`perfmodel.validate.sweeps`) the plan files are written into the output directory for the spec
the predictions use; all plans run in one `torchrun` launch (`perfmodel.execute.run_plans.run_plans`); each is predicted
with `estimate(model, spec, plan)`. The result is one table (predicted and measured step time and peak
memory, signed errors; memory view by view: allocated, and reserved, device and between steps where measured),
the step-time and memory MAPE, the Spearman rank correlation of predicted vs measured
step time, a CSV and optionally a scatter plot. This module imports no torch (the executor runs in workers).

The rows, metrics and printed text are `perfmodel.validate.metrics`'s; this module resolves and checks the input,
predicts and runs (`perfmodel.cli.commands.validate` is the subcommand).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from pydantic import Field

from ..errors import InputError
from ..types import Schema
from ..spec.hardware.system import System, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.plan.layout import Plan
from ..spec.stack.profile import EXECUTOR_STACK
from .common import check_out_dir, check_output_in, check_sweep_flags, prediction_spec, write_outputs
from .sweeps import SERVE_SWEEPS, SWEEP_NAMES, get_sweep
from .metrics import EXTRA_VIEWS, GiB, compare, summarize
from .checkpoint_checks import checkpoint_rows
from .trace_check import trace_plan_of

DEVICES = ("auto", "cpu", "cuda")

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


def _entries(plans, sweep_name, nproc, device, hardware):
    """Resolve the inputs: (entries, sweep or None, nproc, device, spec given or None). Loads and checks only."""
    from ..spec.plan.file import load_plan_file

    if plans and sweep_name:
        raise InputError("validate takes plan files or --sweep, not both; valid: perfmodel validate PLAN.json ... "
                         "or perfmodel validate --sweep NAME")
    if not plans and not sweep_name:
        raise InputError(f"validate needs plan files or --sweep NAME; valid sweeps: {', '.join(SWEEP_NAMES)}")
    if device not in DEVICES:
        raise InputError(f"--device = {device!r}; valid: {', '.join(DEVICES)}")
    spec = load_hardware(hardware) if hardware is not None else None
    if sweep_name:
        sw = get_sweep(sweep_name)
        check_sweep_flags(sw, nproc, device)
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
             quick_calibration: bool = True, timeout_s: float | None = None, echo=None,
             checkpoint_every: int | None = None, checkpoint_async: bool = False, trace_dir: Path | None = None,
             calibrate_from_trace: bool = False, trace_plan: str | None = None):
    """Run `plans` (plan files) or the built-in `sweep` on `nproc` processes, predict each, compare.

    Predictions use `hardware` when given. Otherwise a sweep on CPU calibrates this machine first
    (`perfmodel.calibrate.machine.calibration.calibrate(device="cpu", nproc=nproc, quick=quick_calibration)`, written to
    out_dir/calibrated.yaml); on CUDA it uses the catalogue system of the device (by nvidia-smi name), or
    calibrates where none matches; plan files use their own hardware. `steps`/`warmup` default to the sweep's
    (8/3 for plan files), `rounds` the sweep's (1 for plan files): the plans run that many times over,
    interleaved, and each step time is the lowest round's median. Writes out_dir/validation.csv (or `csv`)
    and, with `plot`, a PNG scatter. With `checkpoint_every` K every plan also saves its training state every K
    steps (into out_dir/checkpoints, emptied first: validate's saves are scratch) and the result compares the
    saves' bytes and write times with the forecast's checkpoint model (validate.checkpoint_checks). With
    `trace_dir` every plan also traces a few steps after its timed ones (execute.tracing). With
    `calibrate_from_trace` (a sweep) the plans are traced (into trace_dir, default out_dir/traces), the spec is
    calibrated from the trace of `trace_plan` (default the sweep's Sweep.trace_plan) and every plan is scored on it
    beside the other specs, the traced plan left out (validate.trace_check; result.trace_calibration).
    All input is checked before anything runs or is written (InputError, one line). A serving sweep
    (`sweeps.SERVE_SWEEPS`) is validate.serving_sweep's: its result is a ServeValidation.
    """
    echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    if sweep in SERVE_SWEEPS:  # a serving sweep: prefill and decode (validate.serving_sweep)
        given = [flag for flag, value in (("plan files", plans), ("--steps", steps), ("--trace", trace_dir),
                                          ("--checkpoint-every", checkpoint_every),
                                          ("--checkpoint-async", checkpoint_async),
                                          ("--calibrate-from-trace", calibrate_from_trace),
                                          ("--trace-plan", trace_plan)) if value]
        if given:
            raise InputError(f"{given[0]} with the serving sweep {sweep}, which serves its own plans in rounds; "
                             "valid: --nproc, --hardware, --rounds, --warmup, --device, --plot, --csv, --out-dir")
        from .serving_sweep import validate_serving

        return validate_serving(sweep, nproc=nproc, hardware=hardware, out_dir=out_dir, rounds=rounds, warmup=warmup,
                                device=device, csv=csv, plot=plot, quick_calibration=quick_calibration,
                                timeout_s=timeout_s, echo=echo)
    out_dir = Path(out_dir)
    entries, sw, nproc, device, spec = _entries(plans, sweep, nproc, device, hardware)
    traced = trace_plan_of(sw, calibrate_from_trace, trace_plan, bool(plans))
    if traced is not None and trace_dir is None:
        trace_dir = out_dir / "traces"
    steps = steps if steps is not None else (sw.steps if sw else 8)
    warmup = warmup if warmup is not None else (sw.warmup if sw else 3)
    rounds = rounds if rounds is not None else (sw.rounds if sw else 1)
    if rounds < 1:
        raise InputError(f"--rounds = {rounds}; valid: 1 or more")
    if steps < 1 or warmup < 0 or warmup >= steps:
        raise InputError(f"--steps = {steps}, --warmup = {warmup}; valid: steps >= 1 and 0 <= warmup < steps "
                         "(the median is taken over the steps after warm-up)")
    check_out_dir(out_dir)
    if trace_dir is not None:
        from ..execute.run_plans import check_trace_dir

        check_trace_dir(trace_dir, [])
    if checkpoint_async and checkpoint_every is None:
        raise InputError("--checkpoint-async without --checkpoint-every: nothing is saved; valid: "
                         "--checkpoint-every K --checkpoint-async")
    if checkpoint_every is not None:
        from ..execute.checkpoint.manifest import check_flags

        check_flags(out_dir / "checkpoints", checkpoint_every, False, "async" if checkpoint_async else "sync", steps,
                    rounds)
    csv = check_output_in(csv if csv is not None else out_dir / "validation.csv", "--csv", ".csv", out_dir)
    if plot is not None:
        plot = check_output_in(plot, "--plot", ".png", out_dir)

    # The spec the predictions use.
    spec, source, notes = prediction_spec(spec, hardware, sw is not None, device, nproc, out_dir,
                                          quick_calibration, echo)

    # Predictions first: a spec that cannot predict a plan fails before the run.
    from ..cost.estimate import evaluate_plan

    # The executor is the plain-torch stack: a plan file priced for another stack is predicted as it will run
    other = sorted({e.plan.stack for e in entries} - {EXECUTOR_STACK})
    if other:
        notes.append(f"plans priced for stack(s) {', '.join(other)} are predicted as the executor runs them, on the "
                     f"{EXECUTOR_STACK} stack (hardware_specs/stacks/{EXECUTOR_STACK}.yaml)")
    evaluated = [evaluate_plan(e.model, spec or e.hardware, e.plan.model_copy(update={"stack": EXECUTOR_STACK}))
                 for e in entries]
    predicted = [est for _, est in evaluated]
    # A plan predicted not to fit would stop the whole launch when it runs out of memory: a sweep leaves it out
    # (e.g. gpu-single on a 40 GiB part), plan files are refused.
    big = [(e, est) for e, est in zip(entries, predicted) if not est.fits_in_memory]
    for e, est in big:
        need = (f"{est.memory_bytes.reserved / GiB:.1f} GiB reserved > a budget of {est.memory_budget_bytes / GiB:.1f}"
                " GiB")
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
        evaluated = [evaluated[i] for i in keep]
    if traced is not None and traced not in [e.name for e in entries]:
        raise InputError(f"--trace-plan {traced} is predicted not to fit on {spec.name}, so it does not run; valid: "
                         f"one of {', '.join(e.name for e in entries)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    if sw is not None:
        from ..spec.plan.file import write_plan_file
        from ..search.plan_writer import plan_file

        plan_dir = out_dir / "plans"
        plan_dir.mkdir(exist_ok=True)
        files = [plan_file(e.model, spec, e.plan, created_by=f"perfmodel validate --sweep {sw.name}: {e.name}",
                           evaluated=ev) for e, ev in zip(entries, evaluated)]
        paths = [write_plan_file(pf, plan_dir / f"{e.name}.json", "--out-dir") for pf, e in zip(files, entries)]
    else:
        paths = [Path(e.path) for e in entries]

    from ..execute.run_plans import run_plans

    echo(f"running {len(paths)} plans in one launch on {nproc} {device} process{'es' if nproc > 1 else ''} "
         f"({steps} steps each, {warmup} warm-up{f', {rounds} rounds' if rounds > 1 else ''})")
    ckpt = {}
    if checkpoint_every is not None:
        ckpt = dict(checkpoint_dir=out_dir / "checkpoints", checkpoint_every=checkpoint_every,
                    checkpoint_async=checkpoint_async)
        shutil.rmtree(ckpt["checkpoint_dir"], ignore_errors=True)
    measured = run_plans(paths, nproc, device=device, steps=steps, warmup=warmup, rounds=rounds, log_dir=out_dir,
                         timeout_s=timeout_s, echo=echo, trace_dir=trace_dir, **ckpt)

    # Like with like: the allocated view (what tensors hold, no allocator slack or runtime) against the allocated
    # peak (CUDA max_memory_allocated, CPU resident peak less the resident size before the model was built);
    # reserved and device where measured (CUDA), and what stays allocated between steps.
    rows = [compare(e.name, e.kind, est.step_time_s, est.memory_bytes.allocated, m,
                    {v: getattr(est.memory_bytes, v) for v in EXTRA_VIEWS})
            for e, est, m in zip(entries, predicted, measured)]
    notes.append("memory compared view by view: the predicted allocated view (weights, gradients, optimizer state, "
                 "activations, transients) against the measured allocated peak of the most loaded rank; the "
                 "reserved view (+ allocator fragmentation) and the device view (+ runtime: context, NCCL "
                 "buffers, workspaces) against max_memory_reserved and NVML's device memory where measured (CUDA), "
                 "and between steps against what stays allocated after a step")
    result = summarize(rows, sweep=sw.name if sw else None, device=device, nproc=nproc,
                       hardware=spec.name if spec else "each plan's own spec", hardware_source=source,
                       targets=sw.targets if sw else None, notes=notes, measurements=measured)
    result.checkpoints = checkpoint_rows([e.name for e in entries], [spec or e.hardware for e in entries], measured)
    if traced is not None:
        from .trace_check import TRACE_SPEC, calibrate_and_score

        echo(f"calibrating from the trace of {traced} and predicting the other plans on that spec")
        label = "microbenchmarks" if hardware is None and source.startswith("calibrated") else spec.name
        result.trace_calibration = calibrate_and_score(
            {e.name: (pf, m) for e, pf, m in zip(entries, files, measured)}, trace_dir, out_dir / "plans", traced,
            device, base=hardware if device == "cuda" else None, sweep_spec=spec, sweep_label=label,
            spec_out=out_dir / TRACE_SPEC)
    write_outputs(result, csv, plot, "validation_scatter.validation_figure")
    return result
