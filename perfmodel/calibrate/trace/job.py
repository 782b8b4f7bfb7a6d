"""The job a GPU trace ran, and what its GEMMs calibrate: `--plan PLAN.json`, or a framework's config
(`--config FILE... --from FRAMEWORK`, read as perfmodel import reads it: perfmodel.ingest.read_config / plan_of), on
the base system, with the trace's ranks as the device count where neither the flags nor the config give one.

The job's GEMM efficiency (calibrate.trace.gemm.job_gemm) sets the spec's matmul_max of the precision the kernels
ran where no GEMM at a recorded shape fitted it (`with_job_matmul`): the plan's own precision at the value that makes
the estimate's GEMM seconds of the traced plan the trace's (calibrate.trace.gemm.matmul_max_reproducing), a precision
no plan prices (fp32, tf32: Plan.precision has none) at the job's efficiency itself. Where no norm, activation or
add at a recorded shape fitted memory_bandwidth, the job's memory-bound kernels against the plan's memory-bound
operators set it the same way (`with_job_memory`), before the GEMMs (whose roofline reads it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import InputError
from ...ingest.given import Given
from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ...spec.plan.layout import Plan, resolve
from .gemm import PLAN_PRECISIONS, matmul_max_reproducing, plan_gemm_work
from .summary import JobGemm


@dataclass
class JobSource:
    """Where the traced job's plan comes from: a plan file, or a config's files in a framework's format."""

    plan_path: str | Path | None = None
    config: list | None = None  # --config FILE...
    framework: str | None = None  # --from
    config_name: str | None = None  # --config-name: the config of a file that defines several
    gpus: int | None = None  # --gpus: the job's devices, where the config leaves them to its launcher
    given: Given | None = None  # --script-args / --vocab-size: what the config's files leave out of themselves

    @property
    def named(self) -> bool:
        """Whether the job is named at all (a plan file or a config)."""
        return self.plan_path is not None or bool(self.config)

    def check(self) -> None:
        """InputError for flags that do not go together."""
        if self.plan_path is not None and self.config:
            raise InputError("--plan and --config both name the traced job; valid: one of them")
        if self.config and self.framework is None:
            raise InputError("--config needs --from FRAMEWORK: the format its files are written in (megatron, bridge, "
                             "torchtitan, maxtext, deepspeed)")
        given = self.given is not None and (self.given.script_args is not None or self.given.vocab_size is not None)
        if not self.config and (self.framework or self.config_name or self.gpus or given):
            raise InputError("--from, --config-name, --gpus, --script-args and --vocab-size describe --config's job; "
                             "valid: with --config FILE...")


def traced_plan(src: JobSource, system: System, world: int) -> tuple[ModelConfig, Plan, str]:
    """(model, resolved plan, a label) of the traced job on `system`: the plan file's, or the imported config's on
    `src.gpus`, the config's own device count, else the trace's ranks (`world`)."""
    if src.plan_path is not None:
        from ...spec.plan.file import load_plan_file

        pf = load_plan_file(src.plan_path)
        try:
            return pf.model, resolve(pf.plan, pf.model, system), Path(src.plan_path).name
        except InputError as err:
            raise InputError(f"--plan {str(src.plan_path)!r} on {system.name}: {err}") from None
    from ...ingest import plan_of, read_config

    imp = read_config(src.config, src.framework, src.config_name, src.given)
    gpus = src.gpus or (None if imp.gpus else world)
    model, _, plan = plan_of(imp, system, gpus)
    return model, plan, f"--config {', '.join(Path(f).name for f in src.config)}"


def with_job_memory(system: System, job: JobGemm, model: ModelConfig, plan: Plan) -> System:
    """`system` with memory_bandwidth at which the estimate's memory-bound seconds of the traced plan (its kernels of
    kind memory: norms, activations, residuals, casts, ...; `plan_gemm_work`) are the trace's memory-bound kernels'
    (the optimizer's left out: calibrate.trace.gemm.traced_memory_s); memory_bound_time is bytes over the
    bandwidth, so one ratio does it. As it was where the trace ran no memory-bound kernel."""
    if job.memory_s <= 0:
        return system
    eff = system.efficiency
    est = float(np.mean([w[1] for i, w in enumerate(plan_gemm_work(model, system, plan, "memory"))
                         if i in job.stages]))
    value = float(f"{min(1.0, eff.memory_bandwidth * est / job.memory_s):.4g}")
    return system.model_copy(update={"efficiency": eff.model_copy(update={"memory_bandwidth": value, "sources": {
        **eff.sources, "memory_bandwidth": f"fitted to the traced job: its memory-bound kernels took "
        f"{job.memory_s * 1e3:.3g} ms per step (the optimizer's update left out) where the cost model's memory-bound "
        f"operators of {job.plan} take {est * 1e3:.3g} ms at {eff.memory_bandwidth:.4g} (cost.compute.kernel_time."
        "memory_bound_time: bytes over bandwidth; calibrate.trace.job)"}})})


def with_job_matmul(system: System, job: JobGemm, model: ModelConfig, plan: Plan,
                    shaped: set[str]) -> tuple[System, JobGemm]:
    """`system` with the matmul_max the job's GEMMs give (module docstring) where no shaped GEMM of that precision
    fitted it, and the job with the calibrated spec's GEMM seconds of its plan (`system` prices GEMMs by
    matmul_max)."""
    prec, total = job.precision, sum(job.seconds.values())
    eff = system.efficiency
    matmul, src = dict(eff.matmul_max), dict(eff.sources)
    what = (f"{job.kernels:.0f} GEMM kernels per step (by name: calibrate.trace.gemm) took {total * 1e3:.3g} ms per "
            f"step of the mean traced rank for the {job.flops / 1e12:.4g} TFLOP the cost model counts in {job.plan} "
            f"(cost.compute.units.unit_ops: forward, backward, recomputed forward): {job.tflops:.4g} TFLOP/s"
            + (f", {job.efficiency:.1%} of the dense peaks" if job.efficiency is not None else ""))
    if prec in shaped:
        pass  # the GEMMs at their recorded shapes fitted it: the job's efficiency is reported beside it
    elif prec == plan.precision and prec in PLAN_PRECISIONS:
        x, capped = matmul_max_reproducing(model, system, plan, total, prec, job.stages)
        matmul[prec] = float(f"{x:.4g}")
        src["matmul_max"] = (f"{prec} fitted to the traced job: {what}; matmul_max is the value at which "
                             "cost.compute.kernel_time.gemm_time of the plan's GEMMs (tile, waves, roofline) takes those seconds"
                             + (" (capped at 1: the trace ran faster than the cost model allows at the peak)"
                                if capped else ""))
    else:
        value = 1.0 if job.efficiency is None else min(1.0, job.efficiency)
        matmul[prec] = float(f"{value:.4g}")
        src["matmul_max"] = (f"{prec}: the traced job's GEMM efficiency, no plan precision prices it ({what})"
                             + ("; 1: its peak is the job's own rate" if job.efficiency is None else ""))
    system = system.model_copy(update={"efficiency": eff.model_copy(update={"matmul_max": matmul, "sources": src})})
    work = plan_gemm_work(model, system, plan)
    return system, job.model_copy(update={"estimate_s": float(np.mean([work[s][1] for s in job.stages]))})
