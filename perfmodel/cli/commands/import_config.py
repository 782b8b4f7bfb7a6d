"""`perfmodel import FILE... --from FRAMEWORK [--hardware H] [--gpus N] [--name CONFIG] [-o PLAN.json] [--explain]`:
a framework's own config read as data (perfmodel.ingest), the plan it runs, every key accounted for, its prediction,
and with -o the plan file. `perfmodel predict --config FILE... --from FRAMEWORK` prices it in one step."""

from __future__ import annotations

import argparse
import sys

from ...files import check_output
from ...ingest import FRAMEWORKS
from ..argtypes import integer, path
from ..plan_flags import add_given_flags
from ..plan_input import imported_plan, save_plan

_DEFAULTS = {"dp": None, "gpus": None}  # fields every plan states: printed whatever their value


def add_config_flags(p: argparse.ArgumentParser, required: bool) -> None:
    """The flags that name a config: the files, --from and --name (import's, and predict --config's)."""
    if required:
        p.add_argument("files", nargs="+", metavar="FILE", help="the config's files, in the order the framework "
                                                                "layers them (MaxText: base.yml, the model's YAML, "
                                                                "then the recipe's overrides)")
    p.add_argument("--from", dest="framework", choices=list(FRAMEWORKS), required=required,
                   help="; ".join(f"{k}: {v}" for k, (_, v) in FRAMEWORKS.items()))
    p.add_argument("--name", metavar="CONFIG", help="the config to read where a file defines several (a recipe "
                                                    "module's functions, a registry's entries); without it they are "
                                                    "listed")


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description="Read a training framework's own config files (never run "
                                                    "them) and print the plan they describe, what every key became, "
                                                    "and its prediction; -o writes the plan file.")
    add_config_flags(p, required=True)
    add_given_flags(p)
    p.add_argument("--hardware", help="the system it runs on, where the config does not name it (preset or spec YAML)")
    p.add_argument("--gpus", type=integer("--gpus"), help="devices in the job, where the config leaves them to "
                                                          "the launcher")
    p.add_argument("--output", "-o", type=path("--output", "a file ending in .json"), metavar="PLAN.json",
                   help="write the plan file (what predict --plan, export and execute read)")
    p.add_argument("--strict", action="store_true", help="with -o: refuse (exit 2, nothing written) a plan the memory "
                                                         "model says does not fit; without it the plan is written "
                                                         "with its verdict, as the config may well run")
    p.add_argument("--explain", action="store_true", help="list every key and what it became")
    p.add_argument("--format", choices=["table", "json"], default="table")
    return p


def run(a: argparse.Namespace) -> str:
    from ...cost.estimate import evaluate_plan

    if a.output:
        check_output(a.output, "--output", ".json")
    imp, model, system, plan = imported_plan(a, a.files)
    step, est = evaluate_plan(model, system, plan)
    if a.output:
        unfit = save_plan(model, system, plan, (step, est), "--output", a.output, a.strict)
        print(f"wrote {a.output}" + (f"\n{unfit}" if unfit else ""), file=sys.stderr)
    if a.format == "json":
        import json

        return json.dumps({"import": imp.model_dump(mode="json"), "plan": plan.model_dump(mode="json"),
                           "hardware": system.name, "prediction": est.model_dump(mode="json")}, indent=2)
    from ...ingest import launch_notes

    return import_report(imp, plan, est, a.explain, launch_notes(imp, a.hardware, a.gpus) + imp.given_unused)


def plan_text(plan) -> str:
    """The resolved plan's fields that differ from Plan's defaults (and the mesh), as `field=value` words."""
    from ...spec.plan.layout import Plan

    defaults = {k: f.default for k, f in Plan.model_fields.items()}
    words = []
    for k, v in plan.model_dump().items():
        if k in _DEFAULTS or (v is not None and v != defaults.get(k)) or k in ("tp", "pp", "micro_batch"):
            words.append(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}")
    return " ".join(words)


SHOWN_KEYS = 12  # keys named per reason without --explain (MaxText's base.yml alone names ~650 it does not price)


def reasons(keys) -> list[str]:
    """The not-priced keys grouped by their reason, one line each: 'reason: key, key, ... (N keys)'."""
    groups: dict[str, list[str]] = {}
    for k in keys:
        groups.setdefault(k.why, []).append(k.key)
    out = []
    for why, names in groups.items():
        more = len(names) - SHOWN_KEYS
        named = ", ".join(names[:SHOWN_KEYS]) + (f" and {more} more (--explain lists each)" if more > 0 else "")
        out.append(f"{why}: {named}")
    return out


def import_report(imp, plan, est, explain: bool, notes: list[str] = ()) -> str:
    """What `perfmodel import` prints: the model and plan read, every key not priced (and with --explain every key),
    and the prediction."""
    m = imp.model
    counts = {f: sum(k.fate == f for k in imp.keys) for f in ("mapped", "not priced", "default")}
    lines = [f"{imp.framework} config {', '.join(imp.files)}{f' ({imp.name})' if imp.name else ''}",
             f"  model: {m.name} (n_layers={m.n_layers} hidden={m.hidden} n_heads={m.n_heads} vocab={m.vocab}"
             f"{' moe' if m.moe else ''}{' mla' if m.mla else ''})",
             f"  plan on {est.hardware} x {est.gpus}: {plan_text(plan)}",
             *(f"  {n}" for n in notes),
             f"  keys: {counts['mapped']} mapped, {counts['not priced']} not priced, {counts['default']} fields from "
             f"{imp.framework}'s defaults" + ("" if explain else " (--explain lists what each became)")]
    if explain:
        lines += ["  every key:", *(f"    {k.line()}" for k in imp.keys)]
    elif imp.not_priced():
        lines += ["  not priced (one line per reason):", *(f"    {line}" for line in reasons(imp.not_priced()))]
    lines.append(f"  predicted: step {est.step_time_s:.4g} s, {est.tokens_per_s:.4g} tokens/s, MFU {est.mfu:.1%}, "
                 f"memory {est.memory_bytes.reserved / 2**30:.1f} of {est.memory_capacity_bytes / 2**30:.1f} GiB "
                 f"({est.memory_verdict}); perfmodel predict --config ... prints the full breakdown")
    return "\n".join(lines)
