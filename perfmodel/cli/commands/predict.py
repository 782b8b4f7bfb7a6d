"""`perfmodel predict`: one training step of a plan from the plan flags, a plan file, or (no flags) the built-in
example (`spec.example`)."""

from __future__ import annotations

import argparse
import sys

from ...errors import InputError
from ...spec.stack.profile import STACKS
from ...spec.stack.release import release_lines
from ..argtypes import path, stack_name
from ..plan_flags import EXAMPLE, add_plan_flags
from ..plan_input import plan_input, save_plan


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description="Predict one training step. With no flags, runs the built-in "
                                                     "example: " + " ".join(EXAMPLE))
    p.add_argument("--save-plan", type=path("--save-plan"), metavar="FILE",
                   help="also write the plan as a plan file (JSON) to FILE")
    p.add_argument("--strict", action="store_true", help="with --save-plan: refuse (exit 2, nothing written) a plan "
                                                         "the memory model says does not fit; without it the plan is "
                                                         "written with its verdict")
    add_plan_flags(p)
    p.add_argument("--versus", type=stack_name(STACKS, release_lines()), metavar="STACK",
                   help="also price the same flags under another stack or release (megatron-bridge@25.11) and show "
                        "what changed, setting by setting and part by part")
    p.add_argument("--trace", nargs="+", type=path("--trace"), metavar="PATH",
                   help="price on a spec calibrated in memory from profiler traces of your own step (as calibrate "
                        "--from-trace: Kineto JSON, one per rank, or a folder); --hardware is then a GPU trace's base")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--plot", type=path("--plot", "a file ending in .png"), metavar="FILE.png",
                   help="draw the time and memory breakdowns and the pipeline schedule")
    return p


def run(a: argparse.Namespace) -> str:
    from ...plots.canvas import check_plot_path
    from ..report import estimate_table

    if a.plot is not None:
        check_plot_path(a.plot)
    if a.versus and (a.plan or a.format == "json" or a.plot is not None):
        raise InputError(f"--versus {a.versus} prices the plan flags again under another stack and prints a table; "
                         "valid: plan flags (not --plan) with --format table and no --plot")
    if a.versus:  # the second plan resolves first: a refusal writes nothing (--save-plan)
        try:
            versus = plan_input(argparse.Namespace(**{**vars(a), "stack": a.versus, "save_plan": None}))
        except InputError as err:
            raise InputError(f"--versus {a.versus}: {err}") from None
    out = estimate_from_args(a)
    if a.versus:
        from ...cost.estimate import evaluate_plan
        from ..report import versus_table

        other = evaluate_plan(versus.model, versus.system, versus.plan, versus.headroom)[1]
        return estimate_table(out) + "\n\n" + versus_table(out, other)
    if a.plot is not None:
        from ...plots.prediction import estimate_figure

        estimate_figure(out, a.plot)
        print(f"wrote {a.plot}", file=sys.stderr)
    return out.model_dump_json(indent=2) if a.format == "json" else estimate_table(out)


def estimate_from_args(a):
    """The estimate of the plan predict's flags (or --plan FILE, or --config; no plan at all: the built-in example)
    give (`cli.plan_input`), written as a plan file with --save-plan. The CLI and the planner page
    (perfmodel.app.actions) both predict through it."""
    from ...cost.estimate import check_prediction, evaluate_plan

    p = plan_input(a, builtin_example=True)
    if p.plan_file is not None:  # its prediction checked, the file written again as it is
        est = check_prediction(p.model, p.system, p.plan, p.plan_file.prediction, f"plan file {a.plan!r}")
        if a.save_plan:
            from ...spec.plan.file import write_plan_file

            write_plan_file(p.plan_file, a.save_plan, "--save-plan")
        return est
    step, est = evaluate_plan(p.model, p.system, p.plan, p.headroom)
    if a.save_plan:
        unfit = save_plan(p.model, p.system, est.plan, (step, est), "--save-plan", a.save_plan,
                          getattr(a, "strict", False), p.headroom)
        if unfit:
            print(unfit, file=sys.stderr)
    return est
