"""What a command's plan flags (`plan_flags`) give: one plan, read once, for the cost model.

`plan_input(args)` turns the plan flags, a plan file (--plan FILE) or a framework's own config (--config FILE...
--from FRAMEWORK; perfmodel.ingest) into a `PlanInput`, the (model, system, resolved plan, plan file, headroom)
that `perfmodel predict` and `perfmodel forecast` price; with no plan at all predict prices the built-in example
(`spec.example`). `imported_plan` reads a config's files for `perfmodel import` as for --config, `model_and_system`
gives search its model and system as predict reads them, and `save_plan` writes the plan file of a plan the user
described (predict --save-plan, import -o). Every refusal is one line naming the flags.

The path of a command is straight: flags -> this module (which calls down only: the spec and ingest readers, the
output check of `files`, the plan writer) -> the cost model -> the report. Nothing here calls back into a command.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InputError
from ..files import check_output
from ..ingest import FRAMEWORKS
from ..spec import example
from ..spec.hardware.system import DEFAULT_HEADROOM, System, load_hardware
from ..spec.model.catalogue import load_model
from ..spec.model.config import ModelConfig
from ..spec.plan.layout import Plan, resolve
from .plan_flags import GIVEN_FLAGS, LAUNCH_FLAGS, PLAN_FLAGS, PREDICT_INPUTS, VALUE_FLAGS

if TYPE_CHECKING:  # plan files are read only for --plan, configs only for --config
    from ..ingest import Given, Imported
    from ..spec.plan.file import PlanFile
    from ..spec.result import Estimate
    from ..cost.step.evaluate import Step


@dataclass(frozen=True)
class PlanInput:
    """One plan as a command's flags give it, ready for the cost model."""

    model: ModelConfig
    system: System  # with --host, or the spec calibrated from --trace
    plan: Plan  # resolved (spec.plan.layout.resolve)
    plan_file: PlanFile | None  # --plan FILE: the file, whose prediction the estimate is checked against
    headroom: float  # --headroom, or the model's default


def plan_input(a: argparse.Namespace, builtin_example: bool = False) -> PlanInput:
    """The plan `a`'s flags give (`read_plan`); with `builtin_example`, the built-in example where they give none
    (predict with no flags at all). A plan file the command will write (predict --save-plan) is checked before any
    work."""
    if getattr(a, "trace", None) and no_plan_given(a):
        raise InputError("--trace calibrates the spec of a plan you describe; valid: --trace PATH with --model, "
                         "--gpus, --tp, --pp, --micro-batch, --global-batch, --seq-len")
    if builtin_example and no_plan_given(a):  # the output flags as given (--format, --plot, --save-plan)
        a = use_example(a)
    if getattr(a, "save_plan", None):
        check_output(a.save_plan, "--save-plan", ".json")
    model, system, plan, pf = read_plan(a)
    return PlanInput(model, system, plan, pf, headroom_of(a))


def no_plan_given(a: argparse.Namespace) -> bool:
    """Neither --plan nor any plan flag: what `predict` answers with the built-in example."""
    return not a.plan and not getattr(a, "config", None) and not getattr(a, "framework", None) and all(
        getattr(a, k, None) in (None, False) for k in PLAN_FLAGS + GIVEN_FLAGS)


def use_example(a: argparse.Namespace) -> argparse.Namespace:
    """`a` with the built-in example's model, hardware and plan fields (the output flags as given)."""
    for k, v in {"model": example.MODEL, "hardware": example.HARDWARE, **example.PLAN}.items():
        setattr(a, k, v)
    return a


def read_plan(a: argparse.Namespace) -> tuple[ModelConfig, System, Plan, PlanFile | None]:
    """(model, system, resolved plan, the plan file or None) of `--config FILE... --from FRAMEWORK`, of `--plan
    FILE` or of the plan flags; one line naming what is missing or given twice otherwise."""
    if a.plan and getattr(a, "trace", None):
        raise InputError("--trace with --plan: a plan file carries its own spec; valid: --trace with the plan flags "
                         "(perfmodel calibrate --from-trace --output SPEC.yaml writes a spec a plan file can name)")
    if getattr(a, "config", None) or getattr(a, "framework", None) or getattr(a, "name", None):
        return config_plan(a) + (None,)
    stray = [f"--{k.replace('_', '-')}" for k in GIVEN_FLAGS if getattr(a, k, None) is not None]
    if stray:
        raise InputError(f"{stray[0]} gives what a framework config's files leave out; valid: with --config FILE... "
                         "--from FRAMEWORK")
    if a.plan:
        return file_plan(a)
    return flags_plan(a)


def config_plan(a: argparse.Namespace) -> tuple[ModelConfig, System, Plan]:
    """(model, system, resolved plan) of `--config FILE... --from FRAMEWORK` (perfmodel.ingest); one line naming
    what is missing or given besides it."""
    if not (a.config and a.framework):
        given, need = ("--from", "--config FILE...") if a.framework else ("--config", "--from FRAMEWORK")
        if not (a.config or a.framework):
            given, need = "--name", "--config FILE... --from FRAMEWORK"
        raise InputError(f"{given} needs {need}; valid: {a.cmd} --config FILE... --from "
                         f"{'|'.join(FRAMEWORKS)} [--name CONFIG] [--hardware H] [--gpus N]")
    others = [f"--{k.replace('_', '-')}" for k in PLAN_FLAGS if k not in LAUNCH_FLAGS and getattr(a, k) not in
              (None, False)] + (["--plan"] if a.plan else []) + (["--trace"] if getattr(a, "trace", None) else [])
    if others:
        raise InputError(f"{a.cmd} --config takes the plan from the config; drop {', '.join(others)} (or edit the "
                         "config; --hardware and --gpus give what it leaves to its launcher)")
    return imported_plan(a, a.config)[1:]


def imported_plan(a: argparse.Namespace, files) -> tuple[Imported, ModelConfig, System, Plan]:
    """A framework config's `files` read as data (perfmodel.ingest.read_config: --from, --name and what
    --script-args and --vocab-size give), and the (model, system with --host, resolved plan) it runs on --hardware
    x --gpus: predict --config's and import's."""
    from ..ingest import plan_of, read_config

    imp = read_config(files, a.framework, a.name, given_of(a))
    model, system, plan = plan_of(imp, a.hardware, a.gpus)
    return imp, model, system.with_host(getattr(a, "host", None)), plan


def given_of(a: argparse.Namespace) -> Given:
    """The ingest.given.Given of the flags (--script-args, --vocab-size)."""
    from ..ingest import Given

    return Given.of(getattr(a, "script_args", None), getattr(a, "vocab_size", None))


def file_plan(a: argparse.Namespace) -> tuple[ModelConfig, System, Plan, PlanFile]:
    """(model, system with --host, plan, the file) of `--plan FILE`, refused with any plan flag beside it."""
    given = [f"--{'no-' if getattr(a, k) is False else ''}{k.replace('_', '-')}" for k in PLAN_FLAGS
             if getattr(a, k) not in (None, False)
             or (k in ("moe_overlap", "moe_pad_to_capacity") and getattr(a, k) is False)]
    if given:
        raise InputError(f"{a.cmd} --plan takes its inputs from the plan file; drop {', '.join(given)}")
    from ..spec.plan.file import load_plan_file

    pf = load_plan_file(a.plan)
    return pf.model, pf.hardware.with_host(getattr(a, "host", None)), pf.plan, pf


def flags_plan(a: argparse.Namespace) -> tuple[ModelConfig, System, Plan, None]:
    """(model, system, resolved plan, None) of the plan flags; one line naming the flags missing."""
    trace = getattr(a, "trace", None)
    missing = [f"--{k.replace('_', '-')}" for k in PREDICT_INPUTS if getattr(a, k) is None
               and not (trace and k == "hardware")]  # a trace calibrates the spec; --hardware: a GPU trace's base
    if missing:
        raise InputError(f"{a.cmd} needs {', '.join(missing)} (or --plan FILE"
                         f"{', or no flags for the built-in example' if a.cmd == 'predict' else ''})")
    given = {k: getattr(a, k) for k in VALUE_FLAGS if getattr(a, k) is not None}
    if "tp_comm_overlap" in given:
        given["tp_comm_overlap"] = given["tp_comm_overlap"] == "on"
    given["lora"] = lora_of(given)
    if given.get("precision") == "mxfp8":  # shorthand: fp8 scaled per 32-value block
        if given.get("fp8_recipe", "mxfp8") != "mxfp8":
            raise InputError(f"--precision mxfp8 with --fp8-recipe {given['fp8_recipe']}: mxfp8 is fp8 with the mxfp8 "
                             "recipe; valid: --precision fp8 --fp8-recipe RECIPE, or --precision mxfp8 alone")
        given.update(precision="fp8", fp8_recipe="mxfp8")
    if a.moe_overlap is not None:  # unset: the stack's release may set it (spec.plan.moe_rules.apply_release)
        given["moe_overlap"] = a.moe_overlap
    if given.get("moe_capacity_factor") == "none":
        given["moe_capacity_factor"] = None  # given: dropless, whatever the stack's release does
    if a.moe_pad_to_capacity is not None:
        given["moe_pad_to_capacity"] = a.moe_pad_to_capacity
    plan = Plan(**given, sequence_parallel=a.sequence_parallel, overlap_dp_comm=not a.no_overlap_dp_comm,
                account_for_embedding=a.account_for_embedding, account_for_loss=a.account_for_loss,
                optimizer_offload=a.optimizer_offload, moe_dense_dispatch=a.moe_dense_dispatch)
    model, system = model_and_system(a)
    return model, system, resolve(plan, model, system), None


def model_and_system(a: argparse.Namespace) -> tuple[ModelConfig, System]:
    """--model and --hardware (or, with --trace, the spec calibrated from the trace in memory: --hardware is then a
    GPU trace's base; calibrate.trace.from_trace, nothing written), with --host: predict's and search's."""
    model = load_model(a.model)
    trace = getattr(a, "trace", None)
    if trace:
        from ..calibrate.trace.from_trace import calibrate_from_trace

        system = calibrate_from_trace(trace, a.hardware)[0]
    else:
        system = load_hardware(a.hardware)
    return model, system.with_host(getattr(a, "host", None))


def lora_of(given: dict) -> dict | None:
    """Plan.lora from the --lora-* values in `given` (popped from it), or None without --lora-rank."""
    lora = {k: given.pop(f"lora_{k}") for k in ("rank", "modules", "base") if f"lora_{k}" in given}
    if lora and "rank" not in lora:
        raise InputError(f"--lora-{next(iter(lora))} needs --lora-rank R (the adapters' rank, e.g. 16)")
    if "base" in lora:
        lora["base_weights"] = lora.pop("base")
    return lora or None


def headroom_of(a: argparse.Namespace) -> float:
    """--headroom, or the model's default where the command was given none."""
    h = getattr(a, "headroom", None)
    return DEFAULT_HEADROOM if h is None else h


def save_plan(model: ModelConfig, system: System, plan: Plan, evaluated: tuple[Step, Estimate], flag: str, path,
              strict: bool, headroom: float = DEFAULT_HEADROOM) -> str | None:
    """Write the plan file of a plan the user described and the cost model evaluated (`evaluated`:
    cost.estimate.evaluate_plan's) to `path` (predict --save-plan, import -o; `flag` names it). A plan the memory
    model says does not fit is refused with `strict`, nothing written; else written with the line returned, to print
    beside it (cli.report.unfit_plan_file). The file's created_by is the command line."""
    from ..search.plan_writer import plan_file  # PaSE placements: only when a plan file is written
    from ..spec.plan.file import write_plan_file
    from .report import unfit_plan_file

    unfit = unfit_plan_file(evaluated[1], flag, path, strict)
    pf = plan_file(model, system, plan, created_by="perfmodel " + " ".join(sys.argv[1:]), evaluated=evaluated,
                   headroom=headroom)
    write_plan_file(pf, path, flag)
    return unfit
