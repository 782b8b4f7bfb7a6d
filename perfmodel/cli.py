"""Command line: parse, call the Python API, format. No modelling here.

Bad input of any kind ends with one line on stderr naming the field, the value and what is valid, and exit
code 2.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import signal
import sys

from .argtypes import RDZV_BACKENDS, counts, integer, names, nodes, number, seconds, word
from .argtypes import path as pathname
from .cost.memory import DEFAULT_HEADROOM
from .errors import InputError
from .files import check_output
from .hardware import hardware_json_schema, list_systems, load_hardware
from .launch import RunFailed, RunInterrupted, on_signals
from .models import list_models, load_model
from .plan_args import DISPATCHERS, PLAN_FLAGS, PRECISIONS, add_compression_flags, add_plan_flags, plan_from_args
from .planfile import load_plan_file, write_plan_file
from .report import model_row
from .plots.common import check_plot_path
from .stack import DEFAULT_STACK, STACKS

# Each command imports what it needs when it runs (pandas, matplotlib, the exporters): `perfmodel search` is timed
# whole-process (benchmarks/search_speed.py) and needs none of them.


# `perfmodel predict` with no flags: the question the tool exists for.
EXAMPLE = ["--model", "llama-3-70b", "--hardware", "dgx-h100", "--gpus", "512", "--tp", "8", "--pp", "4",
           "--micro-batch", "1", "--global-batch", "1024", "--seq-len", "8192", "--sequence-parallel",
           "--zero", "1", "--recompute", "selective"]
# Commands whose parser and runner live with their code (add_parser(subparsers), run(args) -> str).
COMMAND_MODULES = {"calibrate": "perfmodel.calibrate.command", "validate": "perfmodel.validate",
                   "forecast": "perfmodel.forecast_command"}


DISK_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # writing an output failed for want of room: one line


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints usage + message by default)
        print(f"error: {self.prog}: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="perfmodel", description="Predict LLM training step time and memory on GPU/TPU clusters.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    pr = sub.add_parser("predict", help="predict one training step of a plan (no flags: a built-in example)",
                        description="Predict one training step. With no flags, runs the built-in example: "
                                    + " ".join(EXAMPLE))
    pr.add_argument("--save-plan", type=pathname("--save-plan"), metavar="FILE",
                    help="also write the plan as a plan file (JSON) to FILE")
    add_plan_flags(pr)
    pr.add_argument("--format", choices=["table", "json"], default="table")
    pr.add_argument("--plot", type=pathname("--plot", "a file ending in .png"), metavar="FILE.png",
                    help="draw the time and memory breakdowns and the pipeline schedule")

    se = sub.add_parser("search", help="rank every layout of a job; write the best as a plan file",
                        description="Enumerate every valid layout (tp, pp, cp, dp, vpp, micro-batch, recompute, "
                                    "sequence parallel, ZeRO) for each GPU count, drop those that do not fit in "
                                    "memory, and rank the rest by predicted step time (or GPU-hours per step).")
    se.add_argument("--model", required=True, help="preset name or path (as predict)")
    se.add_argument("--hardware", required=True, help="preset name or path (as predict)")
    se.add_argument("--gpus", type=counts("--gpus"), required=True, help="GPU count, or several: 256,512,1024")
    se.add_argument("--global-batch", type=integer("--global-batch"), required=True, help="sequences per step")
    se.add_argument("--seq-len", type=integer("--seq-len"), required=True)
    se.add_argument("--precision", choices=PRECISIONS, default="bf16")
    se.add_argument("--attention", choices=["flash", "unfused"], default="flash")
    se.add_argument("--grad-dtype", choices=["fp32", "bf16"], default="fp32")
    add_compression_flags(se)
    se.add_argument("--stack", choices=STACKS, default=DEFAULT_STACK, help="software stack (docs/stacks.md)")
    se.add_argument("--expert-imbalance", type=float, default=1.0, help="as predict (default 1: balanced)")
    se.add_argument("--moe-dispatcher", choices=DISPATCHERS, default="alltoall", help="as predict")
    se.add_argument("--moe-overlap", action="store_true", help="as predict")
    se.add_argument("--objective", choices=["time", "cost", "train-time", "train-cost", "energy"], default="time",
                    help="step time, GPU-hours per step (cost), either over goodput (interruptions, checkpoints), "
                         "or facility kWh per step with the same counted (energy)")
    se.add_argument("--only", action="append", default=[], metavar="FIELD=V1,V2",
                    help="search only these values of a plan field (tp, pp, cp, vpp, ep, etp, micro_batch, "
                         "recompute, sequence_parallel, zero); repeatable")
    se.add_argument("--headroom", type=number("--headroom", 0.0, 0.99), metavar="FRACTION",
                    help=f"share of the allocator's room (capacity - runtime) a plan must leave free to count as "
                         f"fitting (default {DEFAULT_HEADROOM}: the estimate's error on measured peaks, "
                         "docs/memory.md)")
    se.add_argument("--top", type=integer("--top", 0), default=10, help="rows to show (0: every feasible plan)")
    se.add_argument("--format", choices=["table", "json", "csv"], default="table")
    se.add_argument("--output", type=pathname("--output"), metavar="FILE",
                    help="write the best plan as a plan file, e.g. strategies/NAME.json")
    se.add_argument("--plot", type=pathname("--plot", "a file ending in .png"), metavar="FILE.png", help="draw step time against GPUs, the Pareto "
                    "front, a tp x pp heat map and the best plans' time breakdown")

    wi = sub.add_parser("whatif", help="one job's best plan and step time across hardware; which upgrade buys most",
                        description="Search the job's best plan on each system (default: the whole catalogue) "
                                    "and, with --upgrade SYSTEM, on that system with one resource multiplied by "
                                    "--factor at a time (FLOP/s, HBM bandwidth, HBM capacity, scale-up domain size "
                                    "and bandwidth, scale-out bandwidth).")
    wi.add_argument("--model", required=True, help="preset name or path (as predict)")
    wi.add_argument("--gpus", type=integer("--gpus"), required=True, help="devices (the same on every system)")
    wi.add_argument("--global-batch", type=integer("--global-batch"), required=True, help="sequences per step")
    wi.add_argument("--seq-len", type=integer("--seq-len"), required=True)
    wi.add_argument("--hardware", type=names("--hardware"), help="systems to compare, comma-separated names or spec "
                    "paths (default: all of perfmodel hardware list)")
    wi.add_argument("--precision", choices=PRECISIONS, default="bf16")
    wi.add_argument("--stack", choices=STACKS, default=DEFAULT_STACK, help="software stack (docs/stacks.md)")
    wi.add_argument("--upgrade", type=pathname("--upgrade", "a system or spec file"), metavar="SYSTEM",
                    help="also try each single upgrade of this system")
    wi.add_argument("--factor", type=float, default=2.0, help="upgrade factor (default 2)")
    wi.add_argument("--format", choices=["table", "json", "csv"], default="table")
    wi.add_argument("--plot", type=pathname("--plot", "a file ending in .png"), metavar="FILE.png",
                    help="draw the step time per system and the upgrades' speed-ups")

    ex = sub.add_parser("export", help="print a plan file as Megatron-LM arguments, a torchtitan or a DeepSpeed config")
    ex.add_argument("plan", type=pathname("plan file"), help="plan file (JSON)")
    ex.add_argument("--to", required=True, help="megatron | torchtitan | deepspeed")
    ex.add_argument("--version", help="framework version to write for (default its newest; docs/plans.md lists "
                                      "them: megatron core_r0.16 | core_r0.12, torchtitan 0.3.0 | 0.2.2, deepspeed)")
    ex.add_argument("--check", action="store_true", help="also run the framework's own config checks on the export "
                                                         "(downloads that release from PyPI once; no GPU)")

    xe = sub.add_parser("execute", help="run plan files with torch.distributed (torchrun) and measure them")
    xe.add_argument("plans", nargs="+", type=pathname("plan file"), metavar="PLAN.json", help="plan files; all run in "
                    "one timed launch (CPU: peak memory in a second, untimed one)")
    xe.add_argument("--nproc", type=integer("--nproc"), required=True, help="processes per node (GPUs or CPU ranks)")
    xe.add_argument("--device", default="auto", help="auto (cuda if present) | cpu | cuda")
    xe.add_argument("--steps", type=integer("--steps"), default=8, help="training steps per plan (default 8)")
    xe.add_argument("--warmup", type=integer("--warmup", 0), default=3, help="leading steps left out of the median (default 3)")
    xe.add_argument("--rounds", type=integer("--rounds"), default=1,
                    help="run the plans this many times over, interleaved (round 1 runs every plan, then round 2 "
                         "...); the step time is the lowest round's median (default 1)")
    xe.add_argument("--seed", type=integer("--seed", 0, 2**32 - 1), default=0,
                    help="seed of initial weights and synthetic data (0 to 2**32 - 1)")
    xe.add_argument("--data", type=pathname("--data"), metavar="FILE",
                    help="train on a local text file (byte tokens) instead of random tokens")
    xe.add_argument("--output", type=pathname("--output"), metavar="FILE",
                    help="measurement file (one plan only; default PLAN.measured.json)")
    xe.add_argument("--timeout", type=seconds("--timeout"), default=None, help="wall-clock limit in seconds")
    xe.add_argument("--plot", type=pathname("--plot", "a file ending in .png"), metavar="FILE.png",
                    help="draw every measured step against the prediction")
    xe.add_argument("--checkpoint-every", type=integer("--checkpoint-every"), metavar="K",
                    help="save the full training state (torch.distributed.checkpoint) after every K steps into "
                         "--checkpoint-dir/PLAN/step-N")
    xe.add_argument("--checkpoint-dir", type=pathname("--checkpoint-dir"), metavar="DIR",
                    help="checkpoints go to DIR/PLAN (one sub-directory per plan file name)")
    xe.add_argument("--resume", action="store_true", help="continue each plan from its newest complete save in "
                    "--checkpoint-dir (a torn one is refused for the one before it; none: from step 0)")
    xe.add_argument("--checkpoint-async", action="store_true", help="write saves from a background thread "
                    "(dcp.async_save): training waits only for the copy to host memory")
    torchrun = "passed to torchrun (multi-node)"
    xe.add_argument("--nnodes", type=nodes, help=f"{torchrun}: nodes, N or MIN:MAX")
    xe.add_argument("--node-rank", type=integer("--node-rank", 0), help=f"{torchrun}: this node, 0 to nnodes - 1")
    xe.add_argument("--rdzv-backend", choices=RDZV_BACKENDS, help=torchrun)
    xe.add_argument("--rdzv-endpoint", type=word("--rdzv-endpoint", "node0:29400"), help=f"{torchrun}: HOST[:PORT]")
    xe.add_argument("--rdzv-id", type=word("--rdzv-id", "job42"), help=torchrun)
    xe.add_argument("--master-addr", type=word("--master-addr", "node0"), help=torchrun)
    xe.add_argument("--master-port", type=integer("--master-port", 1, 65535), help=f"{torchrun}: 1 to 65535")
    for mod in COMMAND_MODULES.values():
        importlib.import_module(mod).add_parser(sub)

    hw = sub.add_parser("hardware", help="list or show hardware presets, or print the spec JSON schema")
    hws = hw.add_subparsers(dest="action", required=True, parser_class=_Parser)
    hws.add_parser("list")
    hws.add_parser("show").add_argument("name")
    hws.add_parser("schema")

    md = sub.add_parser("models", help="list or show model presets")
    mds = md.add_subparsers(dest="action", required=True, parser_class=_Parser)
    mds.add_parser("list")
    mds.add_parser("show").add_argument("name")
    return ap


def _predict(a) -> str:
    from .report import estimate_table

    if a.plot is not None:
        check_plot_path(a.plot)
    out = estimate_from_args(a)
    if a.plot is not None:
        from .plots.estimate import estimate_figure

        estimate_figure(out, a.plot)
        print(f"wrote {a.plot}", file=sys.stderr)
    return out.model_dump_json(indent=2) if a.format == "json" else estimate_table(out)


def estimate_from_args(a):
    """The estimate of the plan predict's flags (or --plan FILE) give, written as a plan file with --save-plan."""
    from .cost.estimate import check_prediction, evaluate_plan

    if a.save_plan:
        check_output(a.save_plan, "--save-plan", ".json")
    model, system, plan, pf = plan_from_args(a)
    if pf is not None:
        est = check_prediction(model, system, plan, pf.prediction, f"plan file {a.plan!r}")
        if a.save_plan:
            write_plan_file(pf, a.save_plan, "--save-plan")
        return est
    step, est = evaluate_plan(model, system, plan, headroom_of(a))
    if a.save_plan:
        from .search.planfiles import (
            plan_file,  # PaSE placements: only when a plan file is written
        )

        if not est.fits_in_memory:
            raise InputError(f"--save-plan {a.save_plan}: not written, the plan does not fit in memory (reserves "
                             f"{est.memory_bytes.reserved / 2**30:.1f} GiB > {est.memory_budget_bytes / 2**30:.1f} "
                             f"GiB budget on ranks {est.memory_rank}, the {est.memory_stage} stage); plan files are "
                             "meant to run")
        pf = plan_file(model, system, est.plan, created_by="perfmodel " + " ".join(sys.argv[1:]),
                       evaluated=(step, est), headroom=headroom_of(a))
        write_plan_file(pf, a.save_plan, "--save-plan")
    return est


def _space(only: list[str]):
    from .search.space import Space

    fields = {}
    for item in only:
        name, _, values = item.partition("=")
        name = name.strip().replace("-", "_")
        if name not in Space.model_fields or not values:
            raise InputError(f"--only {item!r}: expected FIELD=V1,V2 with FIELD one of {', '.join(Space.model_fields)}")
        parsed = []
        for v in values.split(","):
            v = v.strip()
            if name == "recompute":
                parsed.append(v)
            elif name == "sequence_parallel":
                if v.lower() not in ("true", "false", "on", "off", "1", "0"):
                    raise InputError(f"--only {item!r}: sequence_parallel values are true or false, got {v!r}")
                parsed.append(v.lower() in ("true", "on", "1"))
            else:
                try:
                    parsed.append(int(v))
                except ValueError:
                    raise InputError(f"--only {item!r}: {name} values are integers, got {v!r}") from None
        fields[name] = fields.get(name, []) + [v for v in parsed if v not in fields.get(name, [])]
    try:
        return Space(**fields)
    except InputError as err:  # e.g. Space.tp.0 = 0: name the flag and the value given
        raise InputError(f"--only {' '.join(only)!r}: {err}") from None


def headroom_of(a) -> float:
    """--headroom, or the model's default where the command was given none."""
    h = getattr(a, "headroom", None)
    return DEFAULT_HEADROOM if h is None else h


def _search(a) -> str:
    from .search.layouts import search

    if a.output:
        check_output(a.output, "--output", ".json")
    if a.plot is not None:
        check_plot_path(a.plot)
    result = search(load_model(a.model), load_hardware(a.hardware), a.gpus, a.global_batch, a.seq_len,
                    precision=a.precision, objective=a.objective, space=_space(a.only), attention=a.attention,
                    grad_dtype=a.grad_dtype, grad_compression=a.grad_compression, powersgd_rank=a.powersgd_rank,
                    stack=a.stack, expert_imbalance=a.expert_imbalance,
                    moe_dispatcher=a.moe_dispatcher, moe_overlap=a.moe_overlap, headroom=headroom_of(a))
    extra = []
    if a.output:
        from .search.planfiles import plan_file

        pf = plan_file(result.model, result.system, result.plan(0), balance=True,
                       created_by="perfmodel " + " ".join(sys.argv[1:]), headroom=headroom_of(a))
        write_plan_file(pf, a.output)
        extra.append(f"wrote the best plan to {a.output}")
    if a.plot is not None:
        from .plots.search import search_figure

        search_figure(result, a.plot)
        extra.append(f"wrote {a.plot}")
    if a.format == "json":
        pareto = result.pareto().to_dict("records") if len(a.gpus) > 1 else None
        out = json.dumps({"summary": {"enumerated": result.enumerated, "feasible": result.feasible,
                                      "seconds": result.seconds, "per_gpu_count": result.count_rows},
                          "plans": result.records(a.top), "pareto": pareto},
                         indent=2, default=lambda x: x.item())
    else:
        rows = result.table if a.top == 0 else result.table.head(a.top)
        if a.format == "csv":
            print(result.summary(), file=sys.stderr)
            out = rows.to_csv(index=False).rstrip("\n")
        else:
            from .report import search_table

            out = search_table(result, rows, a.top)
    for line in extra:
        print(line, file=sys.stderr)
    return out


def _whatif(a) -> str:
    from .report import whatif_table
    from .whatif import across_systems, check_factor, upgrades

    if a.plot is not None:
        check_plot_path(a.plot)
    check_factor(a.factor)  # before the searches across systems
    systems = [load_hardware(h) for h in a.hardware] if a.hardware else None
    base = load_hardware(a.upgrade) if a.upgrade else None
    across = across_systems(a.model, systems, a.gpus, a.global_batch, a.seq_len, a.precision, a.stack)
    ups = upgrades(a.model, base, a.gpus, a.global_batch, a.seq_len, a.precision, a.factor, a.stack) if base else None
    if a.plot is not None:
        from .plots.whatif import whatif_figure

        whatif_figure(across, a.plot, ups)
        print(f"wrote {a.plot}", file=sys.stderr)
    if a.format == "json":
        return json.dumps({"across": [r.model_dump() for r in across.rows],
                           "upgrades": [r.model_dump() for r in ups.rows] if ups else None}, indent=2)
    if a.format == "csv":
        tables = [across.table.assign(kind="system")] + ([ups.table.assign(kind="upgrade")] if ups else [])
        import pandas as pd

        return pd.concat(tables).to_csv(index=False).rstrip("\n")
    return whatif_table(across, ups)


def _execute(a) -> str:
    from .execute import run_plans

    rdzv = [f"{f}={getattr(a, f[2:].replace('-', '_'))}" for f in ("--nnodes", "--node-rank", "--rdzv-backend",
            "--rdzv-endpoint", "--rdzv-id", "--master-addr", "--master-port") if getattr(a, f[2:].replace("-", "_"))]
    if a.plot is not None:
        check_plot_path(a.plot)
    if a.output and len(a.plans) > 1:
        raise InputError(f"--output names one file but {len(a.plans)} plans were given; valid: --output with one "
                         "plan, or none (each plan's measurement goes beside it)")
    ms = run_plans(a.plans, a.nproc, device=a.device, steps=a.steps, warmup=a.warmup, rounds=a.rounds,
                   seed=a.seed,
                   outputs=[a.output] if a.output else None, rdzv=rdzv or None, timeout_s=a.timeout, data=a.data,
                   checkpoint_dir=a.checkpoint_dir, checkpoint_every=a.checkpoint_every, resume=a.resume,
                   checkpoint_async=a.checkpoint_async)
    preds = [load_plan_file(path).prediction.step_time_s for path in a.plans]
    rows = [f"{'plan':<40}{'predicted':>12}{'measured':>12}{'error':>8}{'peak memory':>14}  loss first -> last"]
    for path, m, pred in zip(a.plans, ms, preds):
        err = f"{(pred - m.step_time_s) / m.step_time_s:+.0%}" if pred > 0 else "-"
        rows.append(f"{path[-40:]:<40}{pred * 1e3:>10.1f}ms{m.step_time_s * 1e3:>10.1f}ms{err:>8}"
                    f"{m.peak_memory_bytes / 2**20:>10.1f} MiB  {m.losses[0]:.4f} -> {m.losses[-1]:.4f}")
        rows += [f"  checkpoints: {m.checkpoint.summary()} in {m.checkpoint.directory}"] if m.checkpoint else []
        rows += [f"  note: {n}" for n in m.notes]
    if a.plot is not None:
        from .plots.common import unique_labels
        from .plots.measurement import steps_figure

        steps_figure(dict(zip(unique_labels(a.plans), zip(ms, preds))), a.plot)
        rows.append(f"wrote {a.plot}")
    return "\n".join(rows)


def _check_nodes(a) -> None:
    """execute's torchrun flags together: --node-rank names one of the --nnodes nodes."""
    nodes = int(a.nnodes.split(":")[-1]) if a.nnodes else 1
    if a.node_rank is not None and a.node_rank >= nodes:
        raise InputError(f"--node-rank {a.node_rank} with --nnodes {a.nnodes or 1}; valid: --node-rank 0 to "
                         f"{nodes - 1}")


def run(argv: list[str]) -> str:
    a = build_parser().parse_args(argv)
    if a.cmd == "predict" and not a.plan and all(getattr(a, k) in (None, False) for k in PLAN_FLAGS):
        # no inputs: the built-in example, with the output flags given (--format, --plot, --save-plan)
        a = build_parser().parse_args([*argv, *EXAMPLE])
    if a.cmd == "predict":
        return _predict(a)
    if a.cmd == "search":
        return _search(a)
    if a.cmd == "execute":
        _check_nodes(a)
        return _execute(a)
    if a.cmd == "whatif":
        return _whatif(a)
    if a.cmd in COMMAND_MODULES:
        return importlib.import_module(COMMAND_MODULES[a.cmd]).run(a)
    if a.cmd == "export":
        from .exporting import export_command

        return export_command(a.plan, a.to, a.version, a.check)
    if a.cmd == "hardware":
        from .report import hardware_row, hardware_table

        if a.action == "list":
            return "\n".join(hardware_row(name, load_hardware(name)) for name in list_systems())
        if a.action == "schema":
            return json.dumps(hardware_json_schema(), indent=2)
        return hardware_table(load_hardware(a.name))
    if a.action == "list":
        rows = []
        for name in list_models():
            rows.append(model_row(name, load_model(name)))
        return "\n".join(rows)
    from .report import model_table

    return model_table(load_model(a.name))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        with on_signals():  # SIGTERM / SIGHUP end a command as Ctrl-C does: ranks stopped, nothing half-written
            out = run(argv)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunInterrupted as err:  # Ctrl-C or SIGTERM during a launch: every rank stopped
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except RunFailed as err:  # a launched run failed or passed its limit: one line, the log has the rest
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:  # outside a launch; files are written atomically (files.write_atomic)
        signum = getattr(err, "signum", signal.SIGINT)
        print(f"error: interrupted by {signal.Signals(signum).name}; nothing was left half-written", file=sys.stderr)
        return 128 + signum
    except OSError as err:
        if err.errno not in DISK_ERRNOS:
            raise
        print(f"error: {err.strerror} writing {err.filename or 'an output'}; nothing was left half-written "
              f"(free space, or raise the limit, and run again)", file=sys.stderr)
        return 1
    try:
        print(out)
    except BrokenPipeError:  # e.g. `perfmodel predict | head`
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
