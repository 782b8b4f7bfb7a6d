"""What each tab of the page runs: the CLI command's own parse and functions, answered as JSON-ready dicts.

predict: `cli.commands.predict.estimate_from_args` (the estimate `perfmodel predict` prints), with its table as the
CLI prints it, the pipeline schedule (`plots.gantt.timeline`) and the fit verdict; search, infer and forecast:
the command's `run` with `--format json`; export: a plan file the predict flags write (as `predict --save-plan`)
through `cli.commands.export`'s functions, and the framework check's verdict as data.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..errors import InputError
from . import forms



def predict(args: list[str]) -> dict:
    """`perfmodel predict ARGS` (no ARGS: the built-in example) as data: the estimate's JSON, the CLI's table,
    the schedule blocks and the memory verdict."""
    from ..cli.commands.predict import estimate_from_args
    from ..cli.report import estimate_table, memory_verdict
    from ..plots.gantt import timeline

    est = estimate_from_args(forms.parse("predict", args))
    blocks = timeline(est)
    return {"estimate": json.loads(est.model_dump_json()), "table": estimate_table(est),
            "verdict": memory_verdict(est), "schedule": blocks.to_dict("list")}


def command_json(command: str, args: list[str]) -> dict:
    """`perfmodel COMMAND ARGS --format json`, parsed (search, infer, forecast)."""
    from ..cli.main import command_module

    a = forms.parse(command, [*args, "--format", "json"])
    return json.loads(command_module(command).run(a))


def export(args: list[str], to: str, version: str | None, check: bool) -> dict:
    """The plan of predict's `args` exported for `to` at `version` (default its newest): the text, a file name,
    and with `check` the framework release's own verdict (`export.checks.releases.run_check`)."""
    from ..cli.commands.predict import estimate_from_args
    from ..export.nearest import export_plan
    from ..export.targets import TARGETS, versions
    from ..spec.plan.file import load_plan_file

    if to not in TARGETS:  # before the plan is written (export_plan says the same)
        raise InputError(f"--to = {to!r} is not a known target; valid: {', '.join(TARGETS)}")
    known = versions(to)
    version = version or next(iter(known))
    with tempfile.TemporaryDirectory(prefix="perfmodel-app-") as tmp:
        plan = Path(tmp) / "plan.json"
        a = forms.parse("predict", args)
        a.save_plan = str(plan)  # as `predict --save-plan` writes it
        estimate_from_args(a)
        pf = load_plan_file(plan)
    text = export_plan(pf, to, version).rstrip("\n") + "\n"  # refuses an unknown version
    suffix = {"megatron": ".sh", "torchtitan": ".toml", "deepspeed": ".json"}[to]
    out = {"target": to, "version": version, "versions": list(known), "text": text,
           "filename": f"{pf.model.name}_{pf.plan.gpus}x{pf.hardware.name}_{to}-{version}{suffix}"}
    if check:
        from ..export.checks.releases import run_check

        r = run_check(to, version, known[version], text)
        out["check"] = {"accepted": bool(r.accepted), "error": r.error, "distribution": r.distribution,
                        "checks": list(r.checks)}
    return out
