"""The traced job's GEMM efficiency from kernel names and its plan: a trace recorded without shapes
(torch.profiler's default, record_shapes=False), in fp32, fp16 or bf16, still times every GEMM kernel, and the plan
the job ran (`--plan`, or an imported config) says how many FLOPs they did.

- GEMM kernels: by name (trace.reader.GEMM_KERNEL: cuBLAS / cuBLASLt / CUTLASS / nvjet / rocBLAS and hipBLASLt
  Cijk_* ...; convolutions' implicit GEMMs apart), those whose launch lies inside the recorded steps, seconds per step
  of the mean traced rank. A dense model's linear layers run as mm / addmm; the batched GEMMs its trace holds
  (aten::bmm / baddbmm: an unfused attention's QK^T and PV) are the attention core, which the cost model prices as
  attention, so they are left out (`BATCHED_OPS`; kept for a MoE model, whose experts may run as bmm).
- dtype: from the kernel name's tag where it has one (`kernel_dtype`), else the one dtype the tagged GEMM kernels
  share (cuBLAS's splitKreduce, nvjet name none), else the plan's precision.
- FLOPs: the cost model's own count of the plan on the traced rank's pipeline stage (`plan_gemm_work`: its units'
  GEMM kernels, cost.compute.units.unit_ops, forward + backward + the recomputed forward, times the stage's units and
  micro-batches), the same FLOPs whose seconds the estimate prices.
- the job's GEMM efficiency = FLOPs / sum over dtypes of (seconds x peak), one efficiency for every dtype the job
  ran (`job_efficiency`); the spec's matmul_max of the plan's precision is the one at which the estimate's GEMM
  seconds of the traced plan equal the trace's (`matmul_max_reproducing`: tile, wave and roofline terms included, as
  the shape fit's), of a precision no plan prices (fp32, tf32) the job's efficiency itself.
"""

from __future__ import annotations

import math
import re
from typing import get_args

import numpy as np
from scipy.optimize import brentq

from ...errors import InputError
from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ...spec.plan.layout import Plan, Precision, split_of
from .reader import RankTrace
from .summary import JobGemm

# dtype tags of GEMM kernel names, first match wins (bf16 before fp16: 'bf16' holds 'f16'; tf32 before fp32):
# cuBLAS / cuBLASLt (ampere_bf16_s16816gemm_bf16_*, volta_h884gemm_*, volta_sgemm_*, sm90_xmma_gemm_bf16bf16_*,
# sm80_xmma_gemm_f32f32_tf32f32_*), CUTLASS (cutlass_80_tensorop_s1688gemm_*: SM80's TF32 m16n8k8 tensor-op kernel;
# cutlass_80_simt_sgemm_*), DeepSeek's fp8_* and TensorRT-LLM's MxE4m3 kernels
DTYPE_TAGS = (("fp8", re.compile(r"e4m3|e5m2|fp8", re.I)),
              ("bf16", re.compile(r"bf16|bfloat16", re.I)),
              ("fp16", re.compile(r"fp16|f16|hgemm|_h\d{3,5}gemm|half", re.I)),
              ("tf32", re.compile(r"tf32|tensorop_s1688gemm", re.I)),
              ("fp32", re.compile(r"sgemm|f32f32_f32f32", re.I)))
# rocBLAS / hipBLASLt (Tensile) kernels: Cijk_<A>_<B>_<data type code>...; the codes of Tensile's "Precision support"
# (rocm.docs.amd.com/projects/Tensile, Data types): S float, D double, H half, B bfloat16, F8 / B8 float8
TENSILE = re.compile(r"^Cijk_A[a-z]+_B[a-z]+_([A-Z][A-Z0-9]*)_")
TENSILE_CODES = (("F8", "fp8"), ("B8", "fp8"), ("S", "fp32"), ("D", "fp64"), ("H", "fp16"), ("B", "bf16"))
BATCHED_OPS = ("aten::bmm", "aten::baddbmm")
PLAN_PRECISIONS = get_args(Precision)  # the dtypes a plan prices


def kernel_dtype(name: str) -> str | None:
    """The dtype a GEMM kernel's name states (DTYPE_TAGS, TENSILE), None where it states none (nvjet_*, splitK)."""
    code = TENSILE.match(name)
    if code is not None:
        return next((d for c, d in TENSILE_CODES if code.group(1).startswith(c)), None)
    return next((d for d, tag in DTYPE_TAGS if tag.search(name)), None)


def gemm_kernels(t: RankTrace, dense: bool) -> tuple[list[dict], list[dict]]:
    """(the GEMM kernels a rank launched inside its steps, the batched ones left out): kernel_class 'gemm'; with
    `dense`, those launched by aten::bmm / baddbmm are the attention core (module docstring)."""
    inside = [k for k in t.kernels if k["cls"] == "gemm" and t.kernel_in_steps(k)]
    batched = [k for k in inside if dense and k.get("op") in BATCHED_OPS]
    return [k for k in inside if not (dense and k.get("op") in BATCHED_OPS)], batched


def traced_gemm(traces: list[RankTrace], dense: bool, precision: str) -> tuple[dict[int, dict[str, float]], dict]:
    """Per rank, GEMM kernel seconds per step by dtype (untagged kernels: the tagged ones' one dtype, else
    `precision`), and counts {kernels, batched_s} per step of the mean rank."""
    per_rank, kernels, batched_s = {}, 0, 0.0
    for t in traces:
        ks, left = gemm_kernels(t, dense)
        tags = {kernel_dtype(k["name"]) for k in ks} - {None}
        fallback = next(iter(tags)) if len(tags) == 1 else precision
        secs: dict[str, float] = {}
        for k in ks:
            d = kernel_dtype(k["name"]) or fallback
            secs[d] = secs.get(d, 0.0) + (k["t1"] - k["t0"]) / len(t.steps)
        per_rank[t.rank] = secs
        kernels += len(ks) / len(t.steps)
        batched_s += sum(k["t1"] - k["t0"] for k in left) / len(t.steps)
    return per_rank, {"kernels": kernels / len(traces), "batched_s": batched_s / len(traces)}


def traced_memory_s(traces: list[RankTrace]) -> float:
    """Seconds per step of the mean rank in memory-bound kernels (trace.reader.kernel_class) launched inside the steps,
    the optimizer's update (trace.host.OPTIMIZER's operators, priced at optimizer_bandwidth) left out."""
    from .host import OPTIMIZER

    return float(np.mean([sum(k["t1"] - k["t0"] for k in t.kernels if k["cls"] == "memory-bound"
                              and t.kernel_in_steps(k) and not OPTIMIZER.match(k.get("op") or "")) / len(t.steps)
                          for t in traces]))


def plan_gemm_work(model: ModelConfig, system: System, plan: Plan, kind: str = "gemm") -> list[tuple[float, float]]:
    """Per pipeline stage, first to last: (FLOPs, seconds) of the GEMMs (or the kernels of another `kind`: memory,
    the memory-bound ones) one rank of the stage runs per step, as the cost model counts and prices them: each unit's
    kernels (cost.compute.units.unit_ops; Op.fwd_flops / bwd_flops, and the forward again where the plan recomputes it,
    Op.recompute_s's share, on the layers cost.memory.footprint.recomputed_share says) times the stage's units
    (cost.pipeline.stages.Stages.of_split of the plan's split) and micro-batches."""
    from ...cost.layouts import Layouts
    from ...cost.memory.footprint import recomputed_share
    from ...cost.pipeline.stages import UNITS, Stages
    from ...cost.compute.units import unit_ops

    ops = unit_ops(model, system, plan)
    share = float(np.asarray(recomputed_share(model, Layouts.from_plan(plan)))[0])
    per_unit = {}
    for u in UNITS:
        flops = secs = 0.0
        for op in ops[u]:
            if op.kind != kind or not bool(np.asarray(op.active).all()):
                continue
            fwd_s = float(np.asarray(op.fwd_s))
            again = float(np.asarray(op.recompute_s(plan.recompute))) * (share if u == "layer" else 1.0)
            flops += float(np.asarray(op.fwd_flops + op.bwd_flops)) + (again / fwd_s if fwd_s > 0 else 0.0) * float(
                np.asarray(op.fwd_flops))
            secs += fwd_s + float(np.asarray(op.bwd_s)) + again
        per_unit[u] = (flops, secs)
    st = Stages.of_split(split_of(plan, model.n_layers)).with_mtp(model.mtp_layers)
    m = plan.num_microbatches
    return [tuple(m * sum(float(st.count(u)[r, 0]) * per_unit[u][i] for u in UNITS) for i in (0, 1))
            for r in range(plan.pp)]


def stage_of(rank: int, plan: Plan) -> int:
    """The pipeline stage of a global rank in Megatron-LM's order (tp innermost, then cp, dp, pp:
    cost.estimate.memory_ranks)."""
    return min(plan.pp - 1, rank // max(1, plan.gpus // plan.pp))


def job_gemm(traces: list[RankTrace], model: ModelConfig, system: System, plan: Plan, label: str,
             peaks: bool = True) -> JobGemm:
    """The traced job's GEMMs against the plan's FLOPs (module docstring); `peaks`: the base system's peak rates are
    the device's (False: a device the catalogue lacks, whose efficiency the trace cannot give)."""
    world = traces[0].world
    if world != plan.gpus:
        raise InputError(f"{label}: gpus = {plan.gpus}, the trace's job ran on {world} ranks (distributedInfo."
                         "world_size); valid: the plan of the job it traced")
    per_rank, counts = traced_gemm(traces, model.moe is None, plan.precision)
    work = plan_gemm_work(model, system, plan)
    flops = float(np.mean([work[stage_of(t.rank, plan)][0] for t in traces]))
    seconds = {d: float(np.mean([r.get(d, 0.0) for r in per_rank.values()])) for d in
               sorted({d for r in per_rank.values() for d in r})}
    total = sum(seconds.values())
    if total <= 0:
        raise InputError(f"--from-trace with {label}: the trace holds no GEMM kernel inside its steps (names as "
                         "cuBLAS, CUTLASS, nvjet or rocBLAS give them); valid: a trace with CUDA/ROCm kernel activity "
                         "of the job's training steps")
    eff = job_efficiency(flops, seconds, system) if peaks else None
    main = max(seconds, key=seconds.get)
    return JobGemm(plan=label, precision=main, seconds=seconds, kernels=counts["kernels"],
                   batched_s=counts["batched_s"], flops=flops, tflops=flops / total / 1e12, efficiency=eff,
                   stages=sorted({stage_of(t.rank, plan) for t in traces}), memory_s=traced_memory_s(traces))


def job_efficiency(flops: float, seconds: dict[str, float], system: System) -> float:
    """The job's GEMM efficiency: FLOPs / sum over the dtypes it ran of (its GEMM seconds x the dtype's dense peak),
    one fraction of peak for all (one dtype: FLOPs / (seconds x peak)); InputError where the part has no peak for a
    dtype the kernels ran."""
    acc = system.accelerator
    missing = [d for d in seconds if d not in acc.peak_tflops]
    if missing:
        raise InputError(f"--from-trace: the GEMM kernels ran in {', '.join(missing)}, for which {system.name}'s "
                         f"{acc.name} has no peak (it has: {', '.join(acc.peak_tflops)}); valid: --hardware naming a "
                         "spec with that peak")
    return flops / sum(s * acc.peak_flops(d) for d, s in seconds.items())


def matmul_max_reproducing(model: ModelConfig, system: System, plan: Plan, seconds: float, precision: str,
                           stages: list[int]) -> tuple[float, bool]:
    """(matmul_max of `precision`, whether it was capped at 1) at which the cost model's GEMM seconds of the plan
    on the traced ranks' pipeline `stages` (`plan_gemm_work`, their mean) equal `seconds`: a root of log seconds in
    log matmul_max, which the estimate's GEMM time falls with (`system` prices GEMMs by matmul_max: no GEMM table)."""
    def gemm_s(x: float) -> float:
        eff = system.efficiency.model_copy(update={"matmul_max": {**system.efficiency.matmul_max, precision: x}})
        work = plan_gemm_work(model, system.model_copy(update={"efficiency": eff}), plan)
        return float(np.mean([work[s][1] for s in stages]))

    f = lambda lx: math.log(gemm_s(math.exp(lx))) - math.log(seconds)  # noqa: E731
    if f(0.0) > 0:  # the trace ran faster than the cost model allows at the full peak
        return 1.0, True
    lo = math.log(1e-4)
    if f(lo) < 0:
        return 1e-4, False
    return math.exp(brentq(f, lo, 0.0, xtol=1e-6)), False
