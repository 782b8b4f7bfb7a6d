"""`perfmodel search`: rank every layout of a job (`search.ranking.search`); write the best as a plan file."""

from __future__ import annotations

import argparse
import json
import sys

from ...errors import InputError
from ...files import check_output
from ...search.ranking import OBJECTIVES, search
from ...search.space import Space
from ...spec.hardware.system import DEFAULT_HEADROOM
from ...spec.plan.recompute import OFFLOAD_TENSORS, SAVED_TENSORS
from ...spec.stack.profile import DEFAULT_STACK, STACKS
from ...spec.stack.release import release_lines
from ..argtypes import capacity_factor, counts, integer, number, path, stack_name
from ..plan_flags import (
    COMPILES, DISPATCHERS, PRECISIONS, add_compression_flags, add_lora_flags, add_state_dtype_flags, module_list,
)
from ..plan_input import headroom_of, lora_of, model_and_system


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    se = sub.add_parser(name, help=help,
                        description="Enumerate every valid layout (tp, pp, cp, dp, vpp, micro-batch, recompute, "
                                    "sequence parallel, ZeRO) for each GPU count, drop those that do not fit in "
                                    "memory, and rank the rest by predicted step time (or GPU-hours per step).")
    se.add_argument("--model", required=True, help="preset name or path (as predict)")
    se.add_argument("--hardware", required=True, help="preset name or path (as predict)")
    se.add_argument("--host", help="price the host as this one (as predict: perfmodel hardware hosts)")
    se.add_argument("--gpus", type=counts("--gpus"), required=True, help="GPU count, or several: 256,512,1024")
    se.add_argument("--global-batch", type=integer("--global-batch"), required=True, help="sequences per step")
    se.add_argument("--seq-len", type=integer("--seq-len"), required=True)
    se.add_argument("--precision", choices=PRECISIONS, default="bf16")
    se.add_argument("--attention", choices=["flash", "unfused"], default="flash")
    se.add_argument("--grad-dtype", choices=["fp32", "bf16"], help="default: the stack's")
    add_state_dtype_flags(se)
    add_compression_flags(se)
    add_lora_flags(se)
    se.add_argument("--stack", type=stack_name(STACKS, release_lines()), default=DEFAULT_STACK, metavar="STACK",
                    help="software stack, or a release: megatron-bridge@26.08 (docs/stacks.md)")
    se.add_argument("--compile", choices=COMPILES, default="none", help="as predict (torchtitan: memory only)")
    se.add_argument("--recompute-saved", type=module_list("--recompute-saved", SAVED_TENSORS, "saved tensor"),
                    metavar="T1,T2", help="as predict, for the layouts of recompute names (--only recompute=names)")
    se.add_argument("--recompute-offloaded", type=module_list("--recompute-offloaded", OFFLOAD_TENSORS,
                                                              "kept tensor"), metavar="T1,T2",
                    help="as predict, for the layouts of recompute names")
    se.add_argument("--loss-chunks", type=integer("--loss-chunks"), default=1, metavar="N",
                    help="as predict (MaxText num_vocab_tiling); layouts whose micro-batch it does not split are "
                         "skipped")
    se.add_argument("--optimizer-offload", action="store_true", help="as predict, for every layout")
    se.add_argument("--expert-imbalance", type=float, default=1.0, help="as predict (default 1: balanced)")
    se.add_argument("--moe-capacity-factor", type=capacity_factor("--moe-capacity-factor"), metavar="C",
                    help="as predict (none: dropless; default dropless, or the release's recipe)")
    se.add_argument("--moe-pad-to-capacity", action=argparse.BooleanOptionalAction, default=None, help="as predict")
    se.add_argument("--moe-dispatcher", choices=DISPATCHERS, help="as predict (default alltoall, or the release's recipe)")
    se.add_argument("--moe-overlap", action="store_true", help="as predict")
    se.add_argument("--objective", choices=list(OBJECTIVES), default="time",
                    help="step time, GPU-hours per step (cost), either over goodput (interruptions, checkpoints), "
                         "or facility kWh per step with the same counted (energy)")
    se.add_argument("--only", action="append", default=[], metavar="FIELD=V1,V2",
                    help="search only these values of a plan field (tp, pp, cp, vpp, ep, etp, micro_batch, "
                         "recompute, sequence_parallel, zero, dp_replicate: hybrid sharding's replicas, 1 unless "
                         "given; remat_policy: MaxText's named remat policies, each searched as recompute names with "
                         "its tensors); repeatable")
    se.add_argument("--headroom", type=number("--headroom", 0.0, 0.99), metavar="FRACTION",
                    help=f"share of the allocator's room (capacity - runtime) a plan must leave free to count as "
                         f"fitting (default {DEFAULT_HEADROOM}: the estimate's error on measured peaks, "
                         "docs/memory.md)")
    se.add_argument("--top", type=integer("--top", 0), default=10, help="rows to show (0: every feasible plan)")
    se.add_argument("--format", choices=["table", "json", "csv"], default="table")
    se.add_argument("--output", type=path("--output"), metavar="FILE",
                    help="write the best plan as a plan file, e.g. strategies/NAME.json")
    se.add_argument("--plot", type=path("--plot", "a file ending in .png"), metavar="FILE.png", help="draw step time "
                    "against GPUs, the Pareto front, a tp x pp heat map and the best plans' time breakdown")
    return se


def space_of(only: list[str]):
    """The `--only FIELD=V1,V2` limits as a `search.space.Space`."""
    fields = {}
    for item in only:
        name, _, values = item.partition("=")
        name = name.strip().replace("-", "_")
        if name not in Space.model_fields or not values:
            raise InputError(f"--only {item!r}: expected FIELD=V1,V2 with FIELD one of {', '.join(Space.model_fields)}")
        parsed = []
        for v in values.split(","):
            v = v.strip()
            if name in ("recompute", "remat_policy"):
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


def run(a: argparse.Namespace) -> str:
    from ...plots.canvas import check_plot_path

    if a.output:
        check_output(a.output, "--output", ".json")
    if a.plot is not None:
        check_plot_path(a.plot)
    result = search(*model_and_system(a), a.gpus, a.global_batch, a.seq_len,
                    precision=a.precision, objective=a.objective, space=space_of(a.only), attention=a.attention,
                    grad_dtype=a.grad_dtype, weight_dtype=a.weight_dtype,
                    moment_dtype=a.moment_dtype, grad_compression=a.grad_compression, powersgd_rank=a.powersgd_rank,
                    stack=a.stack, compile=a.compile, expert_imbalance=a.expert_imbalance,
                    moe_dispatcher=a.moe_dispatcher, moe_overlap=a.moe_overlap, headroom=headroom_of(a),
                    moe_capacity_factor=a.moe_capacity_factor, moe_pad_to_capacity=a.moe_pad_to_capacity,
                    recompute_saved=a.recompute_saved, recompute_offloaded=a.recompute_offloaded,
                    loss_chunks=a.loss_chunks, optimizer_offload=a.optimizer_offload,
                    lora=lora_of({k: v for k, v in vars(a).items() if k.startswith("lora_") and v is not None}))
    extra = []
    if a.output:
        from ...search.plan_writer import plan_file
        from ...spec.plan.file import write_plan_file

        pf = plan_file(result.model, result.system, result.plan(0), balance=True,
                       created_by="perfmodel " + " ".join(sys.argv[1:]), headroom=headroom_of(a))
        write_plan_file(pf, a.output)
        extra.append(f"wrote the best plan to {a.output}")
    if a.plot is not None:
        from ...plots.search_results import search_figure

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
            from ..report import search_table

            out = search_table(result, rows, a.top)
    for line in extra:
        print(line, file=sys.stderr)
    return out
