"""Serve serving plan files for real with torch.distributed, and measure them (the parent side of
`execute.inference`).

`serve_plans` checks every plan before anything starts (device type, process count, what the executor builds),
launches one `torchrun` for all of them (execute/worker.py on each rank, a job of kind "serve"), and returns
their measurements, each written beside its plan (`spec.serving.files.served_path`). The parent imports no torch
unless it must ask whether CUDA is there.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
import time
from pathlib import Path

from ..errors import InputError
from ..files import check_creatable, check_writable, make_parents
from ..spec.serving.files import ServeMeasurement, load_serve_measurement, load_serve_plan, served_path
from .launch.torchrun import launch
from ..spec.plan.layout import divisors, values_text
from .run_plans import DEFAULT_TIMEOUT_S, PG_TIMEOUT_S, check_device, device_for, model_unrunnable


def check_servable(pf, where: str, nproc: int, device: str) -> None:
    """Refuse, in one line, a serving plan this machine or the executor cannot run as written."""
    plan, model = pf.plan, pf.model
    if plan.attention_dp > 1:
        raise InputError(f"{where}: attention_dp = {plan.attention_dp}: the executor serves tensor- and data-parallel "
                         "replicas of a dense model, not attention data parallelism over MoE layers; valid: "
                         "attention_dp = 1")
    if plan.speculative is not None:
        raise InputError(f"{where}: speculative = {plan.speculative.method}: the executor decodes one token a step, "
                         "with no draft; valid: no speculative decoding")
    if plan.tp * plan.pp * plan.dp != nproc:
        raise InputError(f"{where}: the plan needs tp x pp x dp = {plan.tp * plan.pp * plan.dp} processes, but "
                         f"--nproc is {nproc}; valid: --nproc {plan.tp * plan.pp * plan.dp}")
    if plan.precision == "w4a16":
        raise InputError(f"{where}: precision = w4a16: the executor serves bf16, fp16 or fp8 weights, not 4-bit ones; "
                         "valid: precision bf16, fp16 or fp8")
    check_device(pf.hardware, plan.precision, where, nproc, device)
    if plan.pp > 1 or plan.ep > 1 or plan.disaggregated:
        raise InputError(f"{where}: pp = {plan.pp}, ep = {plan.ep}, prefill_dp = {plan.prefill_dp}: the executor serves "
                         "tensor- and data-parallel replicas that prefill and decode; valid: pp = 1, ep = 1, no "
                         "prefill pool")
    if model.moe is not None:
        raise InputError(f"{where}: {model.name} is a MoE model, which the executor does not serve; valid: a "
                         "dense model")
    if model.n_kv_heads % plan.tp:
        raise InputError(f"{where}: tp = {plan.tp} does not divide the {model.n_kv_heads} kv heads of {model.name} (the "
                         f"executor splits wk and wv by heads); valid tp: {values_text(divisors(model.n_kv_heads))}")
    if plan.concurrency is None or plan.concurrency % plan.dp:
        raise InputError(f"{where}: concurrency = {plan.concurrency}; valid: a static batch that the dp = {plan.dp} "
                         "replicas split evenly")
    if plan.output_len < 2:
        raise InputError(f"{where}: output_len = {plan.output_len}: no decode step to time; valid: output_len >= 2")
    model_unrunnable(model, where)


def serve_plans(plan_paths: list[Path], nproc: int, *, device: str = "auto", rounds: int = 4, warmup: int = 1,
                seed: int = 0, timeout_s: float | None = None, log_dir: Path | None = None,
                echo=None, outputs: list[str | Path] | None = None,
                make_folders: bool = False) -> list[ServeMeasurement]:
    """Serve every plan file in one torchrun launch, `rounds` times each (the first `warmup` left out of the
    medians); write and return one ServeMeasurement per plan, to `outputs` (default: beside it; `make_folders`:
    their folders may be created, once the run goes ahead)."""
    if importlib.util.find_spec("torch") is None:
        raise InputError("serving a plan needs PyTorch: pip install 'perfmodel[torch]' (torch==2.13.0)")
    if not plan_paths:
        raise InputError("no serving plan files given; valid: one or more PLAN.json")
    if rounds < 1 or not 0 <= warmup < rounds:
        raise InputError(f"--rounds {rounds} with {warmup} warm-up; valid: rounds >= 1 and 0 <= warm-up < rounds")
    device = device_for(device)
    plan_paths = [Path(p) for p in plan_paths]
    outputs = [Path(o) for o in outputs] if outputs else [served_path(p) for p in plan_paths]
    for path, out in zip(plan_paths, outputs):
        check_servable(load_serve_plan(path), f"serving plan file {str(path)!r}", nproc, device)
        (check_creatable if make_folders else check_writable)(out, "serving measurement")
    make_parents(outputs)
    limit = timeout_s or DEFAULT_TIMEOUT_S
    log_dir = Path(log_dir or outputs[0].parent)
    with tempfile.TemporaryDirectory(prefix="perfmodel-serve-") as tmp:
        job = {"kind": "serve", "plans": [{"plan": str(p.resolve()), "output": str(o.resolve())}
                                          for p, o in zip(plan_paths, outputs)],
               "seed": seed, "device": device, "pg_timeout_s": PG_TIMEOUT_S, "rounds": rounds, "warmup": warmup}
        job_path = Path(tmp) / "serve.json"
        job_path.write_text(json.dumps(job))
        start = time.monotonic()
        launch("perfmodel.execute.worker", [str(job_path)], nproc, device=device, log_path=log_dir / "serve.log",
               timeout_s=limit - (time.monotonic() - start), echo=echo, limit_s=limit)
    return [load_serve_measurement(o) for o in outputs]
