"""The `perfmodel calibrate` subcommand: flags, and the table printed after a calibration."""

from __future__ import annotations

from typing import TYPE_CHECKING

import argparse
import sys


from pathlib import Path

from ..argtypes import integer, path
from ..plan_flags import add_given_flags
from ..plan_input import given_of
from ...ingest import FRAMEWORKS
from ...errors import InputError
from ...spec.hardware.system import System
from ...calibrate.machine.raw import RawFile

if TYPE_CHECKING:  # pandas is imported where it is used: the CLI loads this module on every command
    import pandas as pd


def add_parser(subparsers, name: str, help: str) -> argparse.ArgumentParser:
    """Add `calibrate` to an argparse subparsers object; returns the new parser."""
    p = subparsers.add_parser(
        name, help=help,
        description="Time GEMMs, causal attention, elementwise kernels, collectives and an all-reduce beside "
                    "compute on this machine (on --nproc processes at once), fit the spec's efficiency "
                    "parameters (collectives: shared, per kind, and per group size where that fits cleanly) with "
                    "the cost model's formulas, and write the spec (SPEC.yaml), the raw measurements "
                    "(SPEC.raw.json) and, in the catalogue's table formats, the GEMM grid it timed "
                    "(SPEC.gemm.csv.gz: the spec's own GEMM table, which prices its GEMMs) and the collective "
                    "timings (SPEC.nccl.csv.gz), all beside each other.")
    p.add_argument("--device", choices=("cpu", "cuda"),
                   help="cpu: fp32, one thread per process, gloo; cuda: bf16, one GPU per process, NCCL "
                        "(required unless --from-runs)")
    p.add_argument("--from-runs", type=path("--from-runs"), metavar="RUNS.csv|LOGDIR",
                   help="fit compute, network and host speed to measured runs instead of "
                        "microbenchmarks: a CSV in the published-runs columns, or Megatron-LM / torchtitan logs "
                        "(needs --hardware; at least 3 runs)")
    p.add_argument("--from-trace", nargs="+", type=path("--from-trace"), metavar="PATH",
                   help="calibrate from profiler traces of one step of your own job instead: Kineto chrome-trace JSON "
                        "(plain or .gz), one file per rank or a folder of them (torch.profiler, torchtitan, "
                        "Megatron-LM --use-pytorch-profiler, perfmodel execute --trace)")
    p.add_argument("--plan", type=path("--plan"), metavar="PLAN.json",
                   help="--from-trace: the plan file the traced job ran (a CPU trace's host costs need it; a GPU "
                        "trace without recorded shapes calibrates its GEMM efficiency from it)")
    p.add_argument("--config", nargs="+", type=path("--config"), metavar="FILE",
                   help="--from-trace: instead of --plan, the framework config the traced job ran (as perfmodel "
                        "import reads it; with --from)")
    p.add_argument("--from", dest="framework", choices=list(FRAMEWORKS),
                   help="--config: the framework its files are written for")
    p.add_argument("--config-name", metavar="CONFIG", help="--config: the config to read where a file defines several")
    p.add_argument("--gpus", type=integer("--gpus"), help="--config: the job's devices where the config leaves them "
                                                          "to its launcher (default: the trace's ranks)")
    add_given_flags(p)  # --config: --script-args, --vocab-size, as import takes them
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="--from-trace: json prints what the trace measured (TraceSummary's fields)")
    p.add_argument("--hardware", metavar="PRESET_OR_SPEC", help="--from-runs: the system the runs ran on; "
                                                                "--from-trace: the base system of a GPU trace "
                                                                "(default: the catalogue system of its GPU)")
    p.add_argument("--step-overhead", action="store_true",
                   help="--from-runs: fit a fixed number of seconds per step too (a slow data loader or logging the "
                        "runs show); without it only speeds are fitted, which carry over to other model sizes")
    p.add_argument("--nproc", type=integer("--nproc"), default=1, help="processes that run the benchmarks at once (default 1)")
    p.add_argument("--base", help="CUDA: catalogue system whose datasheet numbers and outer tiers are kept "
                                  "(default: the one whose accelerator is this GPU)")
    p.add_argument("--name", help="name of the written system (default cpu-HOST-Np, or BASE-calibrated)")
    p.add_argument("--quick", action="store_true", help="fewer shapes, sizes and repeats (CI)")
    p.add_argument("--host-only", action="store_true",
                   help="--device cuda: measure this machine's host alone (seconds per call by kind: eager op, "
                        "autograd node, nn.Linear call, NCCL call, compiled region, CUDA-graph replay, bare launch; "
                        "under two minutes) and write --base's spec with it (System.host_cpu)")
    p.add_argument("--output", type=path("--output"),
                   help="spec file to write (.yaml); the raw file and the measured tables go beside it (required "
                        "except with --from-trace)")
    p.add_argument("--plot", type=path("--plot", "a file ending in .png"), metavar="FILE.png",
                   help="draw every microbenchmark against the fitted prediction")
    return p


def run(args: argparse.Namespace) -> str:
    """Calibrate as the flags say; the text to print (fitted parameters, then fit residuals)."""
    from ...plots.canvas import check_plot_path
    from ...calibrate.machine.calibration import run_calibration

    if args.from_trace is not None:
        return from_trace(args)
    trace_only = [f for f, v in (("--plan", args.plan), ("--config", args.config), ("--from", args.framework),
                                 ("--config-name", args.config_name), ("--gpus", args.gpus),
                                 ("--script-args", args.script_args), ("--vocab-size", args.vocab_size))
                  if v is not None]
    if trace_only or args.format != "text":
        raise InputError(f"{', '.join(trace_only) or '--format'} apply to --from-trace only")
    if args.output is None:
        raise InputError("calibrate needs --output SPEC.yaml: the spec file to write")
    if args.from_runs is not None:
        return from_runs(args)
    if args.device is None:
        raise InputError("calibrate needs --device cpu|cuda (microbenchmarks) or --from-runs RUNS.csv|LOGDIR "
                         "--hardware PRESET_OR_SPEC (measured runs)")
    if args.hardware is not None:
        raise InputError("--hardware applies to --from-runs only; microbenchmarks build the spec from this "
                         "machine (--base picks the CUDA catalogue system)")
    if args.step_overhead:
        raise InputError("--step-overhead applies to --from-runs only (a per-step time fitted to measured runs)")

    if args.host_only:
        return host_only(args)
    if args.plot is not None:
        check_plot_path(args.plot)  # before minutes of benchmarks
    echo = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    system, raw = run_calibration(args.device, args.nproc, args.output, args.base, args.quick, args.name, echo)
    out = report(system, raw)
    if args.plot is not None:
        from ...plots.calibration_fit import calibration_figure

        calibration_figure(raw, args.plot)
        out += f"\nwrote {args.plot}"
    return out


def host_only(args: argparse.Namespace) -> str:
    """`calibrate --device cuda --host-only`: this machine's host per call kind into the base spec."""
    from ...calibrate.machine.calibration import calibrate_host

    if args.device != "cuda":
        raise InputError(f"--host-only measures a GPU's host; device = {args.device!r}; valid: --device cuda (a CPU "
                         "spec's host costs come from the whole calibration)")
    if args.nproc != 1 or args.plot is not None:
        raise InputError("--host-only runs one process and fits nothing to plot; drop --nproc / --plot")
    echo = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    system = calibrate_host(args.output, args.base, args.name, args.quick, echo)
    from ..report import host_table

    return "\n".join([f"{system.name}:", *host_table(system.host_cpu), f"wrote {args.output}"])


def microbenchmark_flags(args: argparse.Namespace) -> list[str]:
    """The microbenchmark calibration's flags given, which --from-runs and --from-trace refuse."""
    return [f for f, v in (("--device", args.device), ("--base", args.base), ("--plot", args.plot)) if v is not None] + (
        ["--quick"] if args.quick else []) + (["--nproc"] if args.nproc != 1 else []) + (
        ["--host-only"] if args.host_only else [])


def from_trace(args: argparse.Namespace) -> str:
    """`calibrate --from-trace`: calibrate from profiler traces, write the spec if asked, print what they measured."""
    from ...files import write_atomic
    from ...calibrate.trace.from_trace import calibrate_from_trace
    from ...calibrate.machine.calibration import check_spec_output, spec_yaml
    from ...calibrate.trace.job import JobSource
    from ...spec.plan.file import load_plan_file

    given = microbenchmark_flags(args) + (["--from-runs"] if args.from_runs is not None else []) + (
        ["--step-overhead"] if args.step_overhead else [])
    if given:
        raise InputError(f"calibrate --from-trace reads traces; drop {', '.join(given)} (flags of the other ways "
                         "to calibrate)")
    out = check_spec_output(args.output) if args.output is not None else None
    job = JobSource(plan_path=args.plan, config=args.config, framework=args.framework,
                    config_name=args.config_name, gpus=args.gpus, given=given_of(args))
    job.check()
    if args.plan is not None:
        load_plan_file(args.plan)  # a bad plan file or config is refused before the traces are read
    if args.config:
        import re

        from ...ingest import read_config

        try:
            read_config(args.config, args.framework, args.config_name, job.given)
        except InputError as err:  # the readers name import's --name, which is --config-name here
            raise InputError(re.sub(r"--name\b", "--config-name", str(err))) from None
    system, summary, fit = calibrate_from_trace(args.from_trace, args.hardware, name=args.name,
                                                require=out is not None, job=job, strict=False)
    command = f"perfmodel calibrate --from-trace {' '.join(args.from_trace)}" + (
        f" --plan {args.plan}" if args.plan else "") + (
        f" --config {' '.join(args.config)} --from {args.framework}" if args.config else "") + (
        f" --hardware {args.hardware}" if args.hardware else "") + (f" --output {args.output}" if args.output else "")
    if out is not None:
        write_atomic(out, lambda tmp: Path(tmp).write_text(spec_yaml(system, command, out.parent)), "output")
    if args.format == "json":
        return summary.model_dump_json(indent=1)
    from ...calibrate.trace.summary import summary_lines

    lines = summary_lines(summary)
    if system is None:
        return "\n".join(lines + ["no spec calibrated (see above)"])
    eff = system.efficiency
    lines += ["", f"calibrated {system.name}: matmul_max {dict(eff.matmul_max)}, tile {list(eff.matmul_tile)}, "
              f"memory_bandwidth {eff.memory_bandwidth:.3g}, attention_max {eff.attention_max:.3g}"]
    if system.host_costs is not None and system.host_costs.probes:
        h = system.host_costs
        lines.append(f"host (the executor's stack): {h.kernel_s * 1e6:.1f} us per launch, {h.collective_s * 1e6:.1f} "
                     "us per collective call")
    lines += [f"  fit {r.quantity} {r.kind}: {r.points} points, median |err| {r.median_abs_error:.1%}"
              for r in fit.residuals]
    lines.append(f"wrote {out}" if out is not None else "no spec written (--output SPEC.yaml writes one)")
    return "\n".join(lines)


def from_runs(args: argparse.Namespace) -> str:
    """`calibrate --from-runs`: fit to measured runs, write the spec atomically, print the fit."""
    from ...files import write_atomic
    from ...spec.hardware.system import load_hardware
    from ...calibrate.machine.calibration import check_name, check_spec_output, spec_yaml
    from ...calibrate.runs.from_runs import calibrate_from_runs, report

    given = microbenchmark_flags(args)
    if given:
        raise InputError(f"calibrate --from-runs fits measured runs; drop {', '.join(given)} (microbenchmark flags)")
    if args.hardware is None:
        raise InputError("calibrate --from-runs needs --hardware PRESET_OR_SPEC: the system the runs ran on "
                         "(perfmodel hardware list)")
    out = check_spec_output(args.output)
    system = load_hardware(args.hardware)
    check_name(args.name, "--name")
    system = system.model_copy(update={"name": args.name or f"{system.name}-runs"})
    command = f"perfmodel calibrate --from-runs {args.from_runs} --hardware {args.hardware} --output {args.output}"
    command += " --step-overhead" if args.step_overhead else ""
    fitted = calibrate_from_runs(args.from_runs, system, command, overhead=args.step_overhead)
    write_atomic(out, lambda tmp: Path(tmp).write_text(spec_yaml(fitted, command, out.parent)), "output")
    return report(fitted) + f"\nwrote {out}"


def parameter_table(system: System, raw: RawFile) -> pd.DataFrame:
    """One row per calibrated field: value and what it was fitted to."""
    import pandas as pd

    fit, m = raw.fit, raw.measurements
    acc, eff = system.accelerator, system.efficiency
    by = {r.kind: r for r in fit.residuals}
    rows = []
    if m.env.device_type == "cpu":
        rows += [("peak_tflops.bf16", f"{acc.peak_tflops['bf16']:.4g}", "best per-rank fp32 GEMM"),
                 ("hbm_bandwidth_tbps", f"{acc.hbm_bandwidth_tbps:.4g}", "best per-rank copy/add")]
    for prec, v in fit.matmul_max.items():
        rows.append((f"matmul_max.{prec}", f"{v:.3f}", f"{by[prec].points} GEMMs"))
    rows.append(("matmul_tile", f"{list(eff.matmul_tile)}", f"{fit.compute_units} compute unit(s)"))
    rows.append(("attention_max", f"{eff.attention_max:.3f}",
                 f"{sum(p.passes == 'forward_backward' for p in m.attention)} SDPA fwd+bwd"))
    rows.append(("attention_half_seq", f"{eff.attention_half_seq:.0f}", ""))
    if acc.attention_backward_rate is not None:
        rows.append(("attention_backward_rate", f"{acc.attention_backward_rate:.3f}",
                     "SDPA bwd / fwd FLOP/s (the attention table's backward)"))
    rows.append(("memory_bandwidth", f"{eff.memory_bandwidth:.3g}",
                 f"{len(m.layers)} layer steps (fwd+bwd+AdamW)" if m.layers else
                 f"{sum(1 for p in fit.points if p.quantity == 'memory')} elementwise fwd+bwd"))
    if eff.optimizer_bandwidth is not None:
        rows.append(("optimizer_bandwidth", f"{eff.optimizer_bandwidth:.3g}", "fused AdamW steps"))
    if fit.network is not None:
        t = system.tiers[0]
        rows += [(f"{t.name}.bandwidth_gbps", f"{t.bandwidth_gbps:.4g}", "best bus bandwidth" if
                  m.env.device_type == "cpu" else "datasheet"),
                 (f"{t.name}.latency_us", f"{t.latency_us:.2f}", f"{len(m.comm)} collectives and sends"),
                 (f"{t.name}.collective_efficiency", f"{t.collective_efficiency:.3f}",
                  f"bus {fit.network.bus_bandwidth / 1e9:.3g} GB/s")]
        for kind, k in t.by_kind.items():
            kf = fit.network.by_kind.get(kind)
            note = f"{kf.points} {kind}, bus {kf.bus_bandwidth / 1e9:.3g} GB/s" if kf else ""
            rows += [(f"{t.name}.by_kind.{kind}", f"eff {k.collective_efficiency:.3f}, {k.latency_us:.2f} us", note)]
        rows += [(f"{t.name}.by_kind.{kind}", "shared", why) for kind, why in fit.network.fallback.items()]
        for kind, groups in t.by_group.items():
            rows.append((f"{t.name}.by_group.{kind}", "; ".join(f"{g}: eff {k.collective_efficiency:.3f}, "
                                                                f"{k.latency_us:.2f} us" for g, k in groups.items()),
                         "per group size"))
        rows += [(f"{t.name}.by_group.{kind}", "by_kind", why) for kind, why in fit.network.group_fallback.items()]
    if acc.kernel_tables.get("gemm"):
        from ...calibrate.machine.measured_tables import table_grid

        rows.append(("kernel_tables.gemm", Path(acc.kernel_tables["gemm"]).name,
                     ", ".join(f"{len(pts)} {prec}" for prec, pts in table_grid(m.gemm).items()) + " GEMMs, its grid"))
    if fit.comm_overlap is not None and m.overlap is not None:
        rows.append(("comm_overlap", f"{eff.comm_overlap:.3g}",
                     f"all-reduce {m.overlap.size_bytes / 2**20:.3g} MiB beside {m.overlap.gemm_calls} GEMMs"))
    if system.host_costs is not None:
        hc = system.host_costs
        rows += [("host_costs.kernel_s", f"{hc.kernel_s:.3g}", f"executor on {len(hc.probes)} probe layouts"),
                 ("host_costs.collective_s", f"{hc.collective_s:.3g}", "")]
    if system.host_costs is not None and system.host_costs.sustain is not None:
        rows.append(("sustained_fraction", f"{eff.sustained_fraction:.3g}", "executor on sustain-probe, end to end"))
    rows.append(("memory_overhead_gib", f"{system.memory_overhead_gib:.3f}", "measured"))
    return pd.DataFrame(rows, columns=["parameter", "value", "fitted to"])


def residual_frame(raw: RawFile) -> pd.DataFrame:
    """Fit quality per kind of measurement: median / max |predicted / measured - 1| and the bias."""
    import pandas as pd

    return pd.DataFrame([dict(what=r.quantity, kind=r.kind, points=r.points,
                              **{"median |err|": f"{r.median_abs_error:.1%}", "max |err|": f"{r.max_abs_error:.1%}",
                                 "bias": f"{r.bias:+.1%}"}) for r in raw.fit.residuals])


def report(system: System, raw: RawFile) -> str:
    from ...calibrate.machine.calibration import raw_path
    from ...calibrate.machine.measured_tables import attention_table_text, table_grid, table_paths

    m = raw.measurements
    have = {"gemm": bool(table_grid(m.gemm)), "nccl": bool(m.comm),  # what calibrate wrote (machine.run_calibration)
            "attention": attention_table_text(m.attention) is not None}
    tables = [p.name for kind, p in table_paths(raw.spec_file).items() if have[kind]] or ["none"]
    head = (f"calibrated {system.name}: {m.env.nproc} x {m.env.device_name}, torch {m.env.torch_version}, "
            f"{raw.wall_s:.0f} s (benchmarks {m.bench_s:.0f} s)\n"
            f"spec: {raw.spec_file}   raw: {raw_path(raw.spec_file).name}   tables: {', '.join(tables)}")
    return "\n".join([head, "", parameter_table(system, raw).to_string(index=False), "",
                      "fit: predicted / measured - 1 (bias: geometric mean)",
                      residual_frame(raw).to_string(index=False)])
