"""`perfmodel whatif`: one job's best plan and step time on several systems, and which single upgrade of one
system buys most (`search.whatif`)."""

from __future__ import annotations

import argparse
import json
import sys

from ...spec.hardware.system import load_hardware
from ...spec.stack.profile import DEFAULT_STACK, STACKS
from ...spec.stack.release import release_lines
from ..argtypes import integer, names, path, stack_name
from ..plan_flags import COMPILES, PRECISIONS


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    wi = sub.add_parser(name, help=help,
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
    wi.add_argument("--stack", type=stack_name(STACKS, release_lines()), default=DEFAULT_STACK, metavar="STACK",
                    help="software stack, or a release: megatron-bridge@26.08 (docs/stacks.md)")
    wi.add_argument("--compile", choices=COMPILES, default="none", help="as predict (torchtitan: memory only)")
    wi.add_argument("--upgrade", type=path("--upgrade", "a system or spec file"), metavar="SYSTEM",
                    help="also try each single upgrade of this system")
    wi.add_argument("--factor", type=float, default=2.0, help="upgrade factor (default 2)")
    wi.add_argument("--format", choices=["table", "json", "csv"], default="table")
    wi.add_argument("--plot", type=path("--plot", "a file ending in .png"), metavar="FILE.png",
                    help="draw the step time per system and the upgrades' speed-ups")
    return wi


def run(a: argparse.Namespace) -> str:
    from ...plots.canvas import check_plot_path
    from ...search.whatif import across_systems, check_factor, upgrades
    from ..report import whatif_table

    if a.plot is not None:
        check_plot_path(a.plot)
    check_factor(a.factor)  # before the searches across systems
    systems = [load_hardware(h) for h in a.hardware] if a.hardware else None
    base = load_hardware(a.upgrade) if a.upgrade else None
    across = across_systems(a.model, systems, a.gpus, a.global_batch, a.seq_len, a.precision, a.stack, a.compile)
    ups = (upgrades(a.model, base, a.gpus, a.global_batch, a.seq_len, a.precision, a.factor, a.stack, a.compile)
           if base else None)
    if a.plot is not None:
        from ...plots.upgrades import whatif_figure

        whatif_figure(across, a.plot, ups)
        print(f"wrote {a.plot}", file=sys.stderr)
    if a.format == "json":
        return json.dumps({"across": [r.model_dump() for r in across.rows],
                           "upgrades": [r.model_dump() for r in ups.rows] if ups else None}, indent=2)
    if a.format == "csv":
        import pandas as pd

        tables = [across.table.assign(kind="system")] + ([ups.table.assign(kind="upgrade")] if ups else [])
        return pd.concat(tables).to_csv(index=False).rstrip("\n")
    return whatif_table(across, ups)
