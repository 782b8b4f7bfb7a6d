"""`perfmodel validate --sweep cpu-infer`: serve plans for real, predict them with the serving cost, and compare.

    perfmodel validate --sweep cpu-infer --nproc 4 [--hardware SPEC] [--plot FILE.png]

For each plan of a serving sweep (`validate.sweeps.SERVE_SWEEPS`) the serving cost prices the executor's static
batch (`serve.batching.static_batch`: the prefill of a replica's prompts at once, and a decode step at their mean
context) with the spec given, or with one calibrated on this machine first (`runner.prediction_spec`, as the
training sweeps do); the plan files go into OUT_DIR/plans, all are served in one launch
(`execute.serve_plans.serve_plans`), each measurement beside its plan. The result prints one line per quantity,
`prefill time: MAPE X% Spearman R` and `decode time: ...`, like the training sweep's step-time line. This module
imports no torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import Field

from ..errors import InputError
from ..types import Schema
from ..spec.hardware.system import load_hardware
from ..spec.hardware.kernel_tables import write_with_tables
from ..spec.serving.files import ServePlanFile
from .common import check_out_dir, check_output_in, check_sweep_flags, prediction_spec, write_outputs
from .scores import error_pct, mape, spearman
from .sweeps import SERVE_SWEEPS

QUANTITIES = {"prefill": "prefill time", "decode": "decode time"}


class ServeRow(Schema):
    plan: str
    kind: str
    layout: str = Field(description="tp x dp, sequences per replica, input and output tokens")
    predicted_prefill_s: float
    measured_prefill_s: float = Field(description="median prefill over the rounds after warm-up")
    prefill_error_pct: float
    predicted_decode_s: float
    measured_decode_s: float = Field(description="median decode step over the rounds after warm-up")
    decode_error_pct: float


class ServeValidation(Schema):
    sweep: str
    device: str
    nproc: int
    hardware: str
    hardware_source: str
    rows: list[ServeRow]
    mape_pct: dict[str, float] = Field(description="prefill, decode -> MAPE, percent")
    spearman: dict[str, float | None] = Field(description="prefill, decode -> rank correlation")
    target_mape_pct: float
    notes: list[str] = Field(default_factory=list)
    csv_path: str | None = None
    plot_path: str | None = None

    @property
    def table(self):
        import pandas as pd

        return pd.DataFrame([r.model_dump() for r in self.rows])

    def text(self) -> str:
        import pandas as pd

        df = self.table
        show = pd.DataFrame({"plan": df["plan"], "layout": df["layout"]})
        for q in QUANTITIES:
            show[f"{q} pred (ms)"] = (df[f"predicted_{q}_s"] * 1e3).map("{:.2f}".format)
            show[f"{q} meas (ms)"] = (df[f"measured_{q}_s"] * 1e3).map("{:.2f}".format)
            show[f"{q} err"] = df[f"{q}_error_pct"].map("{:+.1f}%".format)
        lines = [f"validate sweep {self.sweep}: {len(self.rows)} serving plans on {self.nproc} {self.device} "
                 f"processes; predicted with {self.hardware} ({self.hardware_source})", "", show.to_string(index=False),
                 ""]
        for q, label in QUANTITIES.items():
            rho = self.spearman[q]
            lines.append(f"{label + ':':<13} MAPE {self.mape_pct[q]:.1f}%   Spearman "
                         f"{'n/a' if rho is None else f'{rho:.3f}'} (predicted vs measured, {len(self.rows)} plans)")
        lines.append("targets: " + ", ".join(
            f"{label} MAPE <= {self.target_mape_pct:g}% {'holds' if self.mape_pct[q] <= self.target_mape_pct else 'MISSED'}"
            for q, label in QUANTITIES.items()))
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"wrote {label}: {path}" for label, path in (("csv", self.csv_path), ("plot", self.plot_path)) if path]
        return "\n".join(lines)


def layout_label(pf: ServePlanFile) -> str:
    p = pf.plan
    return f"tp{p.tp} dp{p.dp} b{pf.batch} I{p.input_len} O{p.output_len}"


def validate_serving(sweep: str, *, nproc: int | None, hardware, out_dir: Path, rounds: int | None,
                     warmup: int | None, device: str, csv, plot, quick_calibration: bool, timeout_s: float | None,
                     echo=None) -> ServeValidation:
    """Serve the sweep's plans on `nproc` processes, predict each with the serving cost, compare (module
    docstring). All input is checked before anything runs or is written (InputError, one line)."""
    echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    sw = SERVE_SWEEPS[sweep]
    check_sweep_flags(sw, nproc, device)
    rounds = sw.rounds if rounds is None else rounds
    warmup = min(sw.warmup, rounds - 1) if warmup is None else warmup
    if rounds < 1 or not 0 <= warmup < rounds:
        raise InputError(f"--rounds = {rounds}, --warmup = {warmup}; valid: rounds >= 1 and 0 <= warmup < rounds "
                         f"(a serving sweep's warm-up counts rounds)")
    spec = load_hardware(hardware) if hardware is not None else None
    if spec is not None and spec.accelerator.torch_device != sw.device:
        raise InputError(f"--hardware {hardware}: accelerator {spec.accelerator.name} runs on "
                         f"{spec.accelerator.torch_device}, sweep {sw.name} on {sw.device}; valid: a spec with "
                         f"accelerator.torch_device {sw.device}")
    out_dir = Path(out_dir)
    check_out_dir(out_dir)
    csv = check_output_in(csv if csv is not None else out_dir / "validation.csv", "--csv", ".csv", out_dir)
    if plot is not None:
        plot = check_output_in(plot, "--plot", ".png", out_dir)

    spec, source, notes = prediction_spec(spec, hardware, True, sw.device, sw.nproc, out_dir, quick_calibration,
                                          echo)
    from ..serve.batching import static_batch
    from ..spec.serving.schema import resolve_serve

    files = []
    for e in sw.plans:
        model = sw.model_of(e)
        plan = resolve_serve(e.plan, model)
        files.append(ServePlanFile(created_by=f"perfmodel validate --sweep {sw.name}: {e.name}", model=model,
                                   hardware=spec, plan=plan, predicted=static_batch(model, spec, plan)))
    plan_dir = out_dir / "plans"
    plan_dir.mkdir(parents=True, exist_ok=True)
    paths = [write_with_tables(pf, plan_dir / f"{e.name}.json", "--out-dir") for pf, e in zip(files, sw.plans)]

    from ..execute.serve_plans import serve_plans

    echo(f"serving {len(paths)} plans in one launch on {sw.nproc} {sw.device} processes ({rounds} rounds each, "
         f"{warmup} warm-up)")
    measured = serve_plans(paths, sw.nproc, device=sw.device, rounds=rounds, warmup=warmup, timeout_s=timeout_s,
                           log_dir=out_dir, echo=echo)
    rows = []
    for e, pf, m in zip(sw.plans, files, measured):
        got = {"prefill": m.prefill_time_s, "decode": m.decode_time_s}
        want = {"prefill": pf.predicted.prefill_s, "decode": pf.predicted.decode_s}
        rows.append(ServeRow(plan=e.name, kind=e.kind, layout=layout_label(pf),
                             **{f"predicted_{q}_s": want[q] for q in QUANTITIES},
                             **{f"measured_{q}_s": got[q] for q in QUANTITIES},
                             **{f"{q}_error_pct": error_pct(want[q], got[q]) for q in QUANTITIES}))
    notes += sorted({n for m in measured for n in m.notes})
    notes.append("prefill: one forward over a replica's prompts at once, logits of each prompt's last token; decode: "
                 "the median step of the output tokens after the first, one token per sequence, against the step "
                 "at the mean context (serve.batching.static_batch)")
    result = ServeValidation(
        sweep=sw.name, device=sw.device, nproc=sw.nproc, hardware=spec.name, hardware_source=source, rows=rows,
        mape_pct={q: mape([getattr(r, f"predicted_{q}_s") for r in rows], [getattr(r, f"measured_{q}_s") for r in rows])
                  for q in QUANTITIES},
        spearman={q: spearman([getattr(r, f"predicted_{q}_s") for r in rows],
                              [getattr(r, f"measured_{q}_s") for r in rows]) for q in QUANTITIES},
        target_mape_pct=sw.target_mape_pct, notes=notes)
    write_outputs(result, csv, plot, "serving_validation.serving_validation_figure")
    return result
