"""The `perfmodel` command: parse, call the Python API, format. No modelling here.

One module per command (`COMMANDS`: `commands/<command>.py` with `add_parser(subparsers, name, help)` and
`run(args) -> str`). Only the module of the command being run is imported, so `perfmodel --help` and
`perfmodel search` load neither pandas, matplotlib nor torch (the search-speed benchmark times `perfmodel search`
as a whole process). Bad input of any kind ends with one line on stderr naming the field, the value and what is
valid, and exit code 2.
"""

from __future__ import annotations

import errno
import functools
import importlib
import signal
import sys

from ..errors import InputError, RunFailed, RunInterrupted, on_signals
from .argtypes import Parser

# command -> (its module in perfmodel.cli (relative), the line `perfmodel --help` lists it with), in that order
COMMANDS = {
    "predict": ("commands.predict", "predict one training step of a plan (no flags: a built-in example)"),
    "search": ("commands.search", "rank every layout of a job; write the best as a plan file"),
    "infer": ("commands.infer", "serve a model: TTFT, TPOT, throughput, KV cache (one layout, or --search)"),
    "whatif": ("commands.whatif", "one job's best plan and step time across hardware; which upgrade buys most"),
    "import": ("commands.import_config", "read a Megatron-LM, Megatron-Bridge, torchtitan, MaxText or DeepSpeed config: its "
                                 "plan, what every key became, its prediction (-o: the plan file)"),
    "export": ("commands.export", "print a plan file as Megatron-LM arguments, a torchtitan or a DeepSpeed config"),
    "execute": ("commands.execute", "run plan files with torch.distributed (torchrun) and measure them"),
    "calibrate": ("commands.calibrate", "microbenchmark this machine and write a hardware spec fitted to it"),
    "validate": ("commands.validate", "run plans for real, predict them, and compare (table, MAPE, Spearman, CSV, "
                                     "plot)"),
    "forecast": ("commands.forecast", "the whole run of a plan: days, device-hours, dollars, checkpoints, "
                                     "interruptions and goodput"),
    "sweep": ("commands.sweep", "design-space sweep: many systems x workloads, each point's best plans, on every "
                               "core or a Ray cluster; report: Pareto front and sensitivities"),
    "app": ("perfmodel.app.command", "serve the planner page in a browser (pip install -e \".[app]\")"),
    "hardware": ("commands.catalogue", "list or show hardware presets, or print the spec JSON schema"),
    "models": ("commands.catalogue", "list or show model presets"),
    "stacks": ("commands.catalogue", "list or show software stacks and their releases (megatron-bridge@26.08)"),
}
DISK_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # writing an output failed for want of room: one line


def command_module(name: str):
    """The module of command `name`: a module of this package, or one named in full (`perfmodel app`'s lives in
    perfmodel.app, the front end above the CLI that builds its forms from these parsers: named, not imported)."""
    module = COMMANDS[name][0]
    return importlib.import_module(module if module.startswith("perfmodel.") else f"{__package__}.{module}")


@functools.lru_cache(maxsize=None)
def build_parser(command: str | None = "all") -> Parser:
    """The parser: every command's flags ("all"), or only `command`'s (the others listed by name and help line).
    Built once per process and command: parsing leaves a parser as it was, and building one costs ~10 ms (most of
    a refused command's time, and of a test that calls `main` thousands of times)."""
    ap = Parser(prog="perfmodel", description="Predict LLM training and serving time and memory on GPU/TPU "
                "clusters: search layouts, import and export framework configs, run, calibrate, sweep designs.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    for name, (_, help) in COMMANDS.items():
        if command in ("all", name):
            command_module(name).add_parser(sub, name, help)
        else:
            sub.add_parser(name, help=help)
    return ap


def run(argv: list[str]) -> str:
    command = argv[0] if argv and argv[0] in COMMANDS else None
    a = build_parser(command).parse_args(argv)
    return command_module(a.cmd).run(a)


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
