"""Execute plan files for real with torch.distributed, and measure them (`perfmodel execute`).

`run_plans` checks every plan before anything starts (device type, process count, what the executor can run),
launches one `torchrun` for all of them (execute/worker.py on each rank), and returns their measurements. The
parent process imports no torch unless it must ask whether CUDA is there; the modules that build and train
the model (model, tensor_parallel, parallel.pipeline, parallel.context, parallel.data, checkpointing, train)
run inside the workers.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from ..errors import InputError
from ..files import check_creatable, check_writable, make_parents
from ..spec.measurement import (
    MEMORY_FIELDS,
    Measurement,
    load_measurement,
    measurement_path,
    write_measurement,
)
from ..spec.plan.layout import megatron_rules
from ..spec.plan.file import PLACEMENT_AXES, PlanFile, load_plan_file, megatron_placements, unrunnable_split
from .launch.torchrun import MALLOC_MEMORY, MALLOC_TIMING, RunFailed, allocator_text, launch
from .checkpoint.manifest import make_ready, plan_checkpoints, remove_unfinished, saves

RUNNABLE_PRECISIONS = ("bf16", "fp16")  # fp8 / fp4 GEMMs need libraries (torchao, Transformer Engine) not used here
DEFAULT_TIMEOUT_S = 1800.0
PG_TIMEOUT_S = 120.0  # a collective waiting longer than this on a dead peer fails instead of hanging


def _nnodes(rdzv: list[str] | None) -> int:
    text = " ".join(rdzv or [])
    m = re.search(r"--nnodes[= ](\d+)", text)
    return int(m.group(1)) if m else 1


def device_for(requested: str) -> str:
    """'auto' is cuda where torch sees a GPU, else cpu."""
    if requested not in ("auto", "cpu", "cuda"):
        raise InputError(f"--device = {requested!r}; valid: auto, cpu, cuda")
    if requested == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if requested == "cuda":
        raise InputError("--device cuda: torch sees no CUDA device on this machine; valid here: cpu")
    return "cpu"


def check_runnable(pf: PlanFile, where: str, nproc: int, nnodes: int, device: str) -> None:
    """Refuse, in one line, a plan this machine or this executor cannot run as written."""
    plan = pf.plan
    check_device(pf.hardware, plan.precision, where, nproc, device)
    if plan.gpus != nproc * nnodes:
        raise InputError(f"{where}: plan.gpus = {plan.gpus} processes needed, but --nproc {nproc} x {nnodes} "
                         f"node(s) = {nproc * nnodes} given; valid: --nproc {plan.gpus // nnodes}"
                         if plan.gpus % nnodes == 0 else f"{where}: plan.gpus = {plan.gpus} does not split over "
                         f"{nnodes} nodes")
    bad = [n for n in pf.stage_layers if n % plan.vpp]
    if bad and not megatron_rules(plan):
        raise InputError(f"{where}: stage_layers = {pf.stage_layers} do not split into vpp = {plan.vpp} equal chunks "
                         f"per stage; valid: stage layer counts divisible by {plan.vpp}, or Megatron-LM's "
                         "account_for_embedding / account_for_loss")
    model_unrunnable(pf.model, where)
    if plan.lora is not None and (plan.tp > 1 or pf.model.moe is not None or plan.lora.base_weights != "bf16"):
        why = ("tp > 1: the executor's adapters are not split over tensor parallelism" if plan.tp > 1 else
               "a MoE model: the executor adapts dense models only" if pf.model.moe is not None else
               "base_weights fp8: the executor holds the frozen base in the run's dtype")
        raise InputError(f"{where}: lora = rank {plan.lora.rank} on {plan.lora.modules} with {why}; valid: tp 1, a "
                         "dense model and base_weights bf16, or lora null (the cost model prices it: predict)")
    if plan.dp_replicate > 1 and plan.zero == 1:
        raise InputError(f"{where}: dp_replicate = {plan.dp_replicate} with zero = 1: the executor runs hybrid "
                         "sharding as FSDP2 over a (replicate, shard) mesh, and its ZeRO-1 (ZeroRedundancyOptimizer) "
                         "shards over the whole data-parallel group; valid: zero 2 or 3, or dp_replicate 1")
    if plan.moe_dense_dispatch:
        raise InputError(f"{where}: moe_dense_dispatch = true: the torch executor routes tokens to each expert's "
                         "GEMMs; valid: moe_dense_dispatch false (the cost model prices MaxText's one-hot dispatch: "
                         "predict)")
    if plan.loss_chunks > 1:
        raise InputError(f"{where}: loss_chunks = {plan.loss_chunks}: the torch executor computes the loss in one "
                         "piece; valid: loss_chunks 1 (the cost model prices the tiled loss: predict)")
    if plan.optimizer_offload:
        raise InputError(f"{where}: optimizer_offload = true: the torch executor keeps the optimizer state on the "
                         "device (MaxText's host-resident state is XLA's memory kinds, which torch has no form of); "
                         "valid: optimizer_offload false (the cost model prices it: predict)")
    if plan.recompute == "names":
        raise InputError(f"{where}: recompute = names (saved {plan.recompute_saved}): JAX's save_only_these_names "
                         "policy, which the torch executor does not build; valid: recompute none, selective, full or "
                         "per-op (the cost model prices names: predict)")
    if pf.model.moe is not None:
        moe_unrunnable(pf, where)
    placements = pf.placements or megatron_placements(pf.model, plan)
    for pl in placements:
        why = unrunnable_split(pl)
        if why:
            raise InputError(f"{where}: placements ({pl.op}) {why}")
    if pf.model.tie_embeddings and plan.tp > 1:
        emb = next(p for p in placements if p.op == "embedding").weight
        head = next(p for p in placements if p.op == "lm_head").weight
        tp = PLACEMENT_AXES.index("tp")
        if emb[tp] != head[tp]:
            raise InputError(f"{where}: tied embedding placed {emb[tp]} but lm_head {head[tp]} over tp; valid: the "
                             "same placement for the shared weight")


def check_device(hardware, precision: str, where: str, nproc: int, device: str) -> None:
    """Refuse a plan written for another device type, more processes than this machine's GPUs, or a precision the
    executor does not run on CUDA (training and serving plans alike)."""
    want = hardware.accelerator.torch_device
    if want != device:
        raise InputError(f"{where}: the plan is for {hardware.accelerator.name} ({want}) but this run is on "
                         f"{device}; write the plan for a {device} spec (e.g. perfmodel calibrate --device {device})"
                         f" or run where {want} devices are")
    if device == "cuda":
        import torch

        have = torch.cuda.device_count()
        if nproc > have:
            raise InputError(f"--nproc {nproc} exceeds the {have} CUDA device(s) of this machine; valid: 1..{have}")
        if precision not in RUNNABLE_PRECISIONS:
            raise InputError(f"{where}: precision = {precision} is not run by the executor; valid: "
                             f"{', '.join(RUNNABLE_PRECISIONS)}")


def model_unrunnable(model, where: str) -> None:
    """Refuse model features execute.transformer does not build (rather than train a different model): latent
    attention (MLA), multi-token prediction modules, a sliding window on only some layers."""
    if model.mla is not None:
        raise InputError(f"{where}: model {model.name} uses multi-head latent attention (mla), which the executor "
                         "does not build; valid: a model with grouped-query attention (mla: null)")
    if model.mtp_layers:
        raise InputError(f"{where}: model {model.name} has mtp_layers = {model.mtp_layers}, which the executor does "
                         "not build; valid: mtp_layers = 0")
    if model.windowed_layers not in (0, model.n_layers):
        raise InputError(f"{where}: model {model.name} windows {model.sliding_window_layers} of {model.n_layers} "
                         "layers; the executor windows all or none; valid: sliding_window_layers null or "
                         f"{model.n_layers}")


def moe_unrunnable(pf: PlanFile, where: str) -> None:
    """Refuse what the executor's MoE layers (execute.transformer.MoE, execute.parallel.expert) do not run: experts
    split inside (etp > 1), or tensor parallelism beside them (its placements name no MoE operator)."""
    plan = pf.plan
    if plan.etp > 1:
        raise InputError(f"{where}: etp = {plan.etp} is not run by the executor (each expert's MLP stays whole on "
                         f"its rank); valid: etp = 1, with ep up to dp*cp = {plan.dp * plan.cp}")
    if plan.tp > 1:
        raise InputError(f"{where}: tp = {plan.tp} with the MoE model {pf.model.name} is not run by the executor "
                         "(its MoE layers take no tensor-parallel placements); valid: tp = 1, experts split by ep "
                         "over the dp*cp ranks")


MEMORY_STEPS = 2  # CPU memory phase: the first step allocates gradients and optimizer state, the second is steady


def run_plans(plan_paths: list[Path], nproc: int, *, device: str = "auto", steps: int = 8, warmup: int = 3,
              rounds: int = 1, seed: int = 0, outputs: list[Path] | None = None, rdzv: list[str] | None = None,
              timeout_s: float | None = None, log_dir: Path | None = None, data: Path | None = None,
              echo=None, pg_timeout_s: float = PG_TIMEOUT_S, checkpoint_dir: Path | None = None,
              checkpoint_every: int | None = None, resume: bool = False,
              checkpoint_async: bool = False, memory: bool = True, make_folders: bool = False,
              trace_dir: Path | None = None) -> list[Measurement]:
    """Run every plan file in one torchrun launch, `rounds` times over (interleaved); write and return one
    Measurement per plan (`make_folders`: the outputs' folders may be created, once the run goes ahead).

    Checkpoints (execute/checkpoint/resume.py, execute/checkpoint/manifest.py): with `checkpoint_every` K the timed phase saves each
    plan's full training state after every K steps into checkpoint_dir/PLAN/step-N (async: written from a
    background thread); with `resume` it first loads each plan's newest complete save there (a torn one is
    refused, with a line, for the one before it; none: from step 0) and runs the steps after it.

    On CPU, peak memory comes from an untimed phase of MEMORY_STEPS steps per plan with glibc set to return freed
    blocks at once (execute.launch.torchrun.MALLOC_MEMORY), because that setting slows the steps it measures; the timed phase
    follows in the same launch and the same ranks, the allocator set for timing (execute.launch.torchrun.MALLOC_TIMING;
    the worker switches it with mallopt between the phases). On CUDA one phase does both.
    `memory=False` (for callers that read only step times and losses, such as calibrate's host probe): on CPU the
    timed phase alone, its memory fields as those steps saw them (`timed_memory_only`).
    With `trace_dir`, each plan's first round traces a few steps after its timed ones (not among the step times),
    one Kineto chrome trace per rank in trace_dir/PLAN_STEM/ (execute.tracing).
    """
    if importlib.util.find_spec("torch") is None:
        raise InputError("execute needs PyTorch: pip install 'perfmodel[torch]' (torch==2.13.0)")
    if not plan_paths:
        raise InputError("no plan files given; valid: one or more PLAN.json")
    if nproc < 1:
        raise InputError(f"--nproc = {nproc}; valid: a positive number of processes")
    if steps < 1 or not 0 <= warmup < steps:
        raise InputError(f"--steps {steps} --warmup {warmup}; valid: steps >= 1 and 0 <= warmup < steps")
    if rounds < 1:
        raise InputError(f"--rounds = {rounds}; valid: 1 or more")
    if data is not None and not Path(data).is_file():
        raise InputError(f"--data {str(data)!r} is not a file; valid: a local text file (read as bytes)")
    device = device_for(device)
    nnodes = _nnodes(rdzv)
    plan_paths = [Path(p) for p in plan_paths]
    outputs = [Path(o) for o in outputs] if outputs else [measurement_path(p) for p in plan_paths]
    if len(outputs) != len(plan_paths):
        raise InputError(f"{len(outputs)} outputs for {len(plan_paths)} plans; valid: one output per plan")
    for path, out in zip(plan_paths, outputs):
        pf = load_plan_file(path)
        check_runnable(pf, f"plan file {str(path)!r}", nproc, nnodes, device)
        if data is not None and pf.model.vocab < 256:
            raise InputError(f"--data: the byte tokenizer needs vocab >= 256; {pf.model.name} has {pf.model.vocab}")
        if data is not None and Path(data).stat().st_size < pf.plan.seq_len + 2:  # execute/data.py Batches.step
            raise InputError(f"--data {str(data)!r} holds {Path(data).stat().st_size} bytes; valid: at least seq_len "
                             f"+ 2 = {pf.plan.seq_len + 2} bytes (a sequence, its next token, one start to draw)")
        (check_creatable if make_folders else check_writable)(out, "measurement output")
        if pf.plan.grad_compression == "powersgd" and (checkpoint_every is not None or resume):
            raise InputError(f"plan file {str(path)!r}: --checkpoint-every / --resume with grad_compression = "
                             "powersgd: the PowerSGD hook's residuals and warm-start factors are not saved, so a "
                             "resumed run would not continue the same training; valid: without checkpoint flags, "
                             "or a plan with grad_compression none or bf16")
    if trace_dir is not None:
        check_trace_dir(trace_dir, plan_paths)
    checkpoints = plan_checkpoints(plan_paths, checkpoint_dir, checkpoint_every, resume,
                                   "async" if checkpoint_async else "sync", steps=steps, rounds=rounds,
                                   world_size=nproc * nnodes, seed=seed, data=data)
    say = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    for line in [line for ck in checkpoints if ck for line in ck.pop("say")] + make_ready(checkpoints):
        say(line)
    make_parents(outputs)
    if trace_dir is not None:  # a folder per plan, holding this run's ranks only (an earlier run's extra ranks gone)
        for p in plan_paths:
            for old in (Path(trace_dir) / p.stem).glob("rank-*.pt.trace.json.gz"):
                old.unlink()
    limit = timeout_s or DEFAULT_TIMEOUT_S
    deadline = time.monotonic() + limit
    log_dir = Path(log_dir or outputs[0].parent)
    with tempfile.TemporaryDirectory(prefix="perfmodel-execute-") as tmp:
        def phase(name, outs, measures, **job) -> str:
            """A job file for the worker: every plan, measured for `measures` ("memory", "time" or "both")."""
            saving = measures != "memory"  # the untimed memory phase neither saves nor resumes
            job = {"plans": [{"plan": str(p.resolve()), "output": str(Path(o).resolve()),
                              "checkpoint": ck if saving else None}
                             for p, o, ck in zip(plan_paths, outs, checkpoints)], "seed": seed, "device": device,
                   "pg_timeout_s": pg_timeout_s, "data": str(Path(data).resolve()) if data else None,
                   "measures": measures, **job}
            if measures != "memory" and trace_dir is not None:
                job["trace_dir"] = str(Path(trace_dir).resolve())
            job_path = Path(tmp) / f"{name}.json"
            job_path.write_text(json.dumps(job))
            return str(job_path)

        def run(*jobs: str) -> None:
            """One launch running the job files in turn (execute.worker.main)."""
            if deadline - time.monotonic() <= 0:
                raise RunFailed(f"the run passed its limit of {limit:g} s before its launch")
            launch("perfmodel.execute.worker", list(jobs), nproc, device=device, log_path=log_dir / "execute.log",
                   timeout_s=deadline - time.monotonic(), rdzv=rdzv, echo=echo, limit_s=limit)

        try:
            if device != "cpu":
                run(phase("execute", outputs, "both", steps=steps, warmup=warmup, rounds=rounds))
                return [load_measurement(o) for o in outputs]
            if not memory:
                run(phase("execute", outputs, "time", steps=steps, warmup=warmup, rounds=rounds))
                for out in outputs:
                    write_measurement(timed_memory_only(load_measurement(out)), out)
                return [load_measurement(o) for o in outputs]
            # Beside the outputs, not in this process's temp directory: rank 0 writes them, and on several nodes
            # it may run on another node (a shared file system).
            mem_outs = [o.with_name(f".{o.name}.memory.json") for o in outputs]
            time_outs = [o.with_name(f".{o.name}.timed.json") for o in outputs]
            say(f"peak memory first: {len(plan_paths)} plan(s), {min(MEMORY_STEPS, steps)} untimed steps each")
            try:
                run(phase("execute-memory", mem_outs, "memory", steps=min(MEMORY_STEPS, steps), warmup=0, rounds=1),
                    phase("execute", time_outs, "time", steps=steps, warmup=warmup, rounds=rounds))
                for mem_out, time_out, out in zip(mem_outs, time_outs, outputs):
                    write_measurement(with_memory_of(load_measurement(time_out), load_measurement(mem_out)), out)
            finally:
                for part in mem_outs + time_outs:
                    part.unlink(missing_ok=True)
        except RunFailed as err:
            err.args = (f"{err}; {after_failure(checkpoints)}",)
            raise
    return [load_measurement(o) for o in outputs]


def check_trace_dir(trace_dir: Path, plan_paths: list[Path]) -> None:
    """--trace DIR: a folder that is or can be made, and plans whose file names (one sub-folder each) differ."""
    trace_dir = Path(trace_dir)
    if trace_dir.exists() and not trace_dir.is_dir():
        raise InputError(f"--trace {str(trace_dir)!r} is a file; valid: a folder (made if missing) for the traces")
    check_creatable(trace_dir / "x", "--trace")
    stems = [p.stem for p in plan_paths]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise InputError(f"--trace: two plan files named {twice[0]}.json; each plan's traces go to a folder named "
                         "after its file, so valid: plan files with different names")


def after_failure(checkpoints: list[dict | None]) -> str:
    """Once a launch failed (every rank gone): remove the saves it left unfinished, and say what is left to
    resume from. A measurement is written only by a launch that finished (worker.write, write_atomic)."""
    lines = ["no measurement written"]
    for ck in checkpoints:
        if ck is None:
            continue
        root = Path(ck["root"])
        remove_unfinished(root)
        done = saves(root)
        lines.append(f"{root.name}: resume from {done[0][1].name} with --resume" if done else
                     f"{root.name}: no complete save")
    return "; ".join(lines)


def _memory_noted(m: Measurement, where: str, allocator: str | None = None) -> dict:
    """The memory-method fields of `m` with `where` added to each measured one (those 'not measured' stay as they
    are); `allocator`: the allocator setting the methods name in place of the memory phase's (memory_probe)."""
    said = allocator_text(MALLOC_MEMORY)

    def noted(how: str) -> str:
        return how if how.startswith("not measured") else how.replace(said, allocator or said) + where
    return {"memory_method": noted(m.memory_method),
            "memory_methods": {f: noted(how) for f, how in m.memory_methods.items()}}


def timed_memory_only(timed: Measurement) -> Measurement:
    """A CPU measurement run without the memory phase: its memory fields are what the timed steps saw, with
    glibc keeping freed blocks resident for reuse (execute.launch.torchrun.MALLOC_TIMING), so the resident size barely rises
    and they read low, often 0 for a small model (seen: 0.0 MiB where the memory phase reads 4.2); the methods say
    so. For callers that read only step times."""
    where = ("; in the timed steps (freed blocks kept resident and reused, so it reads low): run without the memory "
             "phase (run_plans(memory=False))")
    return timed.model_copy(update=_memory_noted(
        timed, where, allocator_text(MALLOC_TIMING)))


def with_memory_of(timed: Measurement, memory: Measurement) -> Measurement:
    """The timed phase's measurement with each rank's memory (every field of MEMORY_FIELDS) from the memory
    phase."""
    views = {r.rank: {f: getattr(r, f) for f in MEMORY_FIELDS} for r in memory.ranks}
    ranks = [r.model_copy(update=views[r.rank]) for r in timed.ranks]
    where = (f"; in an untimed phase over {memory.steps} step(s) before the timed one, in the same ranks, the step "
             "times with the allocator set for timing (execute.launch.torchrun.MALLOC_TIMING)")
    return timed.model_copy(update={"ranks": ranks, **_memory_noted(memory, where)})
