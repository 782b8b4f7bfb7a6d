"""`perfmodel calibrate --from-trace` on profiler traces as users have them: each trace's outcome.

    python -m benchmarks.evals.real_traces          # prints the table; benchmarks/results/real_traces.txt is its output

The traces: public Kineto traces copied verbatim into tests/fixtures/traces (HolisticTraceAnalysis's and TraceLens's
test data: CUDA and ROCm, with and without recorded shapes, fp32 and bf16; sources and licences in its README), and
this project's own traces of the lent H100 and H200 (benchmarks/results/traces), whose plans are known
(benchmarks/results/validation/*-traced/plans), so the GEMM efficiency by kernel name against the plan's FLOPs
runs on real jobs: as recorded (with shapes, the job's efficiency is a check beside the shape fit) and with their
shapes removed, as torch.profiler's default record_shapes=False would have written them. Per trace: the device,
ranks, whether it holds shapes, the GEMM kernels' dtype; then the outcome (the spec written, or the one line that
refuses it), what it calibrated, and what it lists as not calibrated; last, how far the lent GPUs' specs carry
to the rest of their measured sweeps, from the trace as recorded and with its shapes removed.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

from benchmarks import ROOT

from perfmodel.calibrate.trace.from_trace import calibrate_from_trace
from perfmodel.calibrate.trace.gemm import gemm_kernels, kernel_dtype
from perfmodel.calibrate.trace.job import JobSource
from perfmodel.calibrate.trace.reader import load_traces
from perfmodel.errors import InputError

# relative to the repository root (main() runs there): the printed refusals name the files as a user would
F = Path("tests") / "fixtures" / "traces"
T = Path("benchmarks") / "results" / "traces"
P = Path("benchmarks") / "results" / "validation"
SHAPE_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")

# (label, trace paths, flags): the public corpus first, then the lent GPUs' traces with their plans
CASES = [
    ("hta/nccl_data", [F / "hta" / "nccl_data.json.gz"], {}),
    ("hta/sampled_rank-{0,1}", [F / "hta" / "sampled_rank-0.json.gz", F / "hta" / "sampled_rank-1.json.gz"], {}),
    ("hta/sampled_rank-{0,1} --hardware dgx-a100-40gb", [F / "hta" / "sampled_rank-0.json.gz",
                                                         F / "hta" / "sampled_rank-1.json.gz"],
     {"hardware": "dgx-a100-40gb"}),
    ("hta/mi250_rocm", [F / "hta" / "mi250_rocm.json.gz"], {}),
    ("hta/v100_rank-0", [F / "hta" / "v100_rank-0.json.gz"], {}),
    ("hta/a100_alexnet", [F / "hta" / "a100_alexnet.json.gz"], {}),
    ("tracelens/b200_eager_trace", [F / "tracelens" / "b200_eager_trace.json.gz"], {}),
    ("tracelens/mi210_gpu_only_trace", [F / "tracelens" / "mi210_gpu_only_trace.json.gz"], {}),
]
# The lent GPUs' traced sweeps: label -> (its traces under T, its validation folder under P, the catalogue system);
# the second H200 lease (2026-11-28) was traced after calibrate --from-trace --plan was written: its check is
# out of sample
LEASES = {"h200": ("gpu-single-h200", "gpu-single-h200-traced", "dgx-h200"),
          "h100": ("gpu-single-h100", "gpu-single-h100-traced", "dgx-h100"),
          "h200-2026-11-28": ("gpu-single-h200-2026-11-28", "gpu-single-h200-traced-2026-11-28", "dgx-h200")}
CASES += [(f"{gpu}/{plan} --plan", [T / traces / plan], {"plan": P / sweep / "plans" / f"{plan}.json"})
          for gpu, (traces, sweep, _) in LEASES.items() for plan in ("gpt2-355m-mb8", "llama-1b-mb4")]


def without_shapes(folder: Path, out: Path) -> Path:
    """The trace as record_shapes=False writes it: every operator's input shapes, types and values removed."""
    data = json.loads(gzip.decompress(next(folder.glob("*.json.gz")).read_bytes()))
    for e in data["traceEvents"]:
        for k in SHAPE_KEYS:
            (e.get("args") or {}).pop(k, None)
    out.write_bytes(gzip.compress(json.dumps(data).encode()))
    return out


def facts(paths) -> tuple[str, int, str, str]:
    """(device, ranks, shapes recorded?, GEMM kernels' dtypes by their names)."""
    traces = load_traces(paths)
    shapes = any(o.dims for t in traces for o in t.ops)
    tags = sorted({kernel_dtype(k["name"]) or "untagged" for t in traces for k in gemm_kernels(t, False)[0]})
    return traces[0].device, len(traces), "yes" if shapes else "no", "/".join(tags) or "-"


def outcome(paths, flags) -> list[str]:
    """The outcome lines of one calibration."""
    job = JobSource(plan_path=flags.get("plan"))
    try:
        system, summary, fit = calibrate_from_trace(paths, flags.get("hardware"), job=job, strict=False)
    except InputError as err:
        return [f"  refused: {err}"]
    eff = system.efficiency
    done = [f"matmul_max.{p} {eff.matmul_max[p]:.4g} (GEMMs at their shapes)" for p in fit.matmul_max]
    j = summary.job_gemm
    if j is not None:
        done.append(f"job GEMMs by kernel name: {sum(j.seconds.values()) * 1e3:.2f} ms/step for {j.flops / 1e12:.4g} "
                    f"TFLOP, {j.tflops:.4g} TFLOP/s" + (f" = {j.efficiency:.1%} of peak" if j.efficiency else "")
                    + (f" -> matmul_max.{j.precision} {eff.matmul_max[j.precision]:.4g}"
                       if j.precision not in fit.matmul_max else
                       f" (the shape-fitted spec prices them at {j.estimate_s * 1e3:.2f} ms)"))
    kinds = sorted({r.kind for r in fit.residuals if r.quantity in ("attention", "memory")})
    done += [f"{r}" for r in (["attention_max"] if "sdpa" in kinds else [])]
    how = eff.sources.get("memory_bandwidth", "")
    if any(k != "sdpa" for k in kinds) or "device-to-device copies" in how or "traced job" in how:
        done.append(f"memory_bandwidth {eff.memory_bandwidth:.3g}" + (" (the job's memory-bound kernels)"
                                                                     if "traced job" in how else ""))
    if fit.network is not None:
        done.append(f"network {system.tiers[0].name}: {', '.join(sorted(system.tiers[0].by_kind)) or 'shared'}")
    lines = [f"  spec {system.name}: {'; '.join(done)}"]
    lines += [f"  assumed: {a}" for a in summary.assumed]
    lines += [f"  not calibrated: {m.what} ({m.why})" for m in summary.not_calibrated]
    return lines


def main() -> int:
    import os

    os.chdir(ROOT)
    rows, details = [], []
    with tempfile.TemporaryDirectory() as tmp:
        cases = list(CASES)
        for gpu, (traces, sweep, _) in LEASES.items():
            bare = without_shapes(T / traces / "gpt2-355m-mb8", Path(tmp) / f"{gpu}-gpt2-355m-mb8.json.gz")
            bare = Path(os.path.relpath(bare))  # (the refusals, were there any, name it as written)
            cases.append((f"{gpu}/gpt2-355m-mb8, shapes removed --plan", [bare],
                          {"plan": P / sweep / "plans" / "gpt2-355m-mb8.json"}))
        for label, paths, flags in cases:
            device, ranks, shapes, dtypes = facts(paths)
            lines = outcome(paths, flags)
            rows.append(f"{label:48s} {device:24s} {ranks:5d} {shapes:7s} {dtypes:18s} "
                        f"{'spec' if lines[0].startswith('  spec') else 'refused'}")
            details += [f"{label}:", *lines, ""]
        scores = sweep_scores(tmp)
    print(f"{'trace':48s} {'device':24s} {'ranks':>5s} {'shapes':7s} {'GEMM dtypes':18s} outcome")
    print("\n".join(rows))
    print()
    print("\n".join(details).rstrip())
    print()
    print("\n".join(scores))
    return 0


def sweep_scores(tmp) -> list[str]:
    """How far a spec from gpt2-355m-mb8's trace carries: the lent GPU's measured sweep (its other 13 plans) priced on
    the spec calibrated from the trace as recorded (shapes) and with its shapes removed (--plan: the job's GEMM and
    memory-bound rates), as benchmarks/evals/trace_calibration.py scores them (perfmodel.validate.trace_check.score)."""
    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.validate.trace_check import plans_of, score

    out = ["held out: the rest of each lent GPU's sweep priced on the spec of gpt2-355m-mb8's trace",
           f"{'sweep':34s} {'spec':34s} {'MAPE':>6s} {'median':>8s} {'Spearman':>9s}"]
    for gpu, (traces, sweep, system) in LEASES.items():
        plans = plans_of(P / sweep / "plans")
        plan = P / sweep / "plans" / "gpt2-355m-mb8.json"
        bare = without_shapes(T / traces / "gpt2-355m-mb8", Path(tmp) / f"{gpu}-scored.json.gz")
        specs = {"catalogue (uncalibrated)": load_hardware(system),
                 "trace as recorded": calibrate_from_trace([T / traces / "gpt2-355m-mb8"])[0],
                 "trace, shapes removed, --plan": calibrate_from_trace([bare], job=JobSource(plan_path=plan))[0]}
        for label, spec in specs.items():  # every column scored on the same 13 plans
            _, cols = score({"trace": spec}, plans, "gpt2-355m-mb8")
            c = cols[0]
            out.append(f"{sweep:34s} {label:34s} {c.step_mape_pct:5.1f}% {c.median_error_pct:+7.1f}% "
                       f"{c.spearman:9.3f}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
