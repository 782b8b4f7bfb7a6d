"""The torchrun entry point: `python -m torch.distributed.run ... -m perfmodel.execute.worker JOB.json [JOB.json]`.

Runs each job in turn (on CPU: the untimed memory phase, then the timed one), and every plan of a job in turn,
inside one launch (torch start-up costs seconds per launch), each on a fresh
device mesh, `rounds` times over (round 1 runs every plan, then round 2 ...), and has rank 0 write every plan's
measurement file atomically once the last round is done (a run that fails on the way writes none). A rank that fails prints one
`[perfmodel] rank R failed during PLACE: CAUSE` line and exits non-zero; torchrun then stops the others
(launch.py). Every rank also reports where it is (`[perfmodel-at] R PLACE`: a step, a save, the measurement
write), so that the parent names the place of a rank killed from outside too.

Steps are counted from 1 in these places, as saves count them (step-0004 holds steps 1-4).

Fault injection for tests (faults.py reads it): PERFMODEL_TEST_FAULT="KIND:RANK:POINT[,...]" makes rank RANK
fail at POINT ("step3": the start of step 3; "save4": the start of the save after step 4; "commit4": that save's
shards written, before its commit; "write": before the measurement is written) in every phase that gets there
(on CPU the untimed memory phase runs steps 1-2 and writes; saves are made in the timed phase only). KIND:
kill (SIGKILL), stop (SIGSTOP), raise (an exception), oom (an address-space limit the step then passes), fsize
(a file-size limit the next write passes).
"""

from __future__ import annotations

import datetime
import faulthandler
import gc
import json
import os
import signal
import statistics
import sys
import time

import torch
import torch.distributed as dist

from ..files import relative_ref
from ..spec.measurement import (
    MEMORY_FIELDS,
    Measurement,
    RankRecord,
    job_step_times,
    write_measurement,
)
from ..spec.plan.file import load_plan_file
from . import faults
from .launch.agent import FORKED_VAR
from .data import Batches
from .launch.torchrun import AT, MALLOC_MEMORY, MALLOC_TIMING, PREFIX, describe, set_allocator
from .memory_probe import METHOD, PeakMemory
from .tracing import TRACED_STEPS, trace_path, trace_steps
from .train import Trainer, check_finite, device_name


def preload() -> None:
    """Import what every rank would otherwise import on first use, once, in the agent before it forks the ranks
    (execute/launch/agent.py calls it): torch._dynamo, which torch's own decorators import at a rank's first random fill
    (about 2 CPU-s a rank on a 2-core host), FSDP2, pipelining, ZeRO-1's optimizer and DCP."""
    import torch._dynamo
    import torch.distributed.checkpoint
    import torch.distributed.fsdp
    import torch.distributed.optim
    import torch.distributed.pipelining


def plan_departures(plan, dp_kind: str) -> list[str]:
    """Plan fields the executor does not run as written, each as a note for the measurement."""
    out = []
    if plan.attention == "unfused":
        out.append("attention ran as torch's fused scaled_dot_product_attention; the prediction is for unfused "
                   "attention (attention=unfused)")
    if plan.grad_dtype == "bf16":
        out.append("gradients kept in the weights' dtype (fp32); the prediction counts bf16 gradients "
                   "(grad_dtype=bf16)")
    if not plan.overlap_dp_comm and dp_kind == "ddp":
        out.append("DDP overlapped the gradient all-reduce with the backward; the prediction does not "
                   "(overlap_dp_comm=false)")
    if plan.ep > 1 and plan.grad_compression != "none":
        out.append(f"the routed experts' gradients were reduced uncompressed; the prediction counts them "
                   f"{plan.grad_compression} (grad_compression)")
    if plan.ep > 1 and plan.moe_dispatcher != "alltoall":
        out.append(f"routed tokens were dispatched by all-to-all; the prediction is for the {plan.moe_dispatcher} "
                   f"dispatcher (moe_dispatcher={plan.moe_dispatcher})")
    if plan.ep > 1 and plan.moe_overlap:
        out.append("each micro-batch's all-to-alls ran in line with its own compute; the prediction hides them "
                   "behind another micro-batch's (moe_overlap=true)")
    if plan.ep > 1 and plan.expert_imbalance != 1.0:
        out.append(f"routing was what the router chose; the prediction assumes the busiest expert gets "
                   f"{plan.expert_imbalance:g} x the mean (expert_imbalance)")
    if plan.cuda_graphs in ("layer", "step"):
        out.append(f"the step ran eager, each kernel launched from Python; the prediction prices CUDA graph replays "
                   f"(cuda_graphs={plan.cuda_graphs})")
    if plan.overlap_dp_comm and dp_kind == "allreduce":
        out.append("the gradients were averaged in one all-reduce after the backward, not overlapped with it as "
                   "the prediction assumes (overlap_dp_comm=true)")
    return out


def say(text: str) -> None:
    _line(f"{PREFIX} {text}")


def _line(text: str) -> None:
    """One write per line: the ranks share torchrun's stdout, and print's separate write of the newline lets
    another rank's line in between."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


PLACE = ["start-up"]  # where this rank is, for its failure line


def at(place: str, point: str | None = None) -> None:
    """Report where this rank is (to the parent, which names it if the rank dies there), and meet a test fault
    planned for `point` (faults.py)."""
    PLACE[0] = place
    _line(f"{AT} {int(os.environ.get('RANK', '0'))} {place}")
    if point is not None:
        faults.meet(point)


def failure_cause(err: BaseException) -> str:
    """One line for an exception: the cause its text shows (execute.launch.torchrun.describe: out of memory, disk full, a timed-out
    collective ...), else its type and first line. A failed checkpoint names the rank whose write failed."""
    from torch.distributed.checkpoint.api import CheckpointException

    prefix = ""
    if isinstance(err, CheckpointException) and err.failures:
        rank, (inner, _) = min(err.failures.items())
        prefix, err = f"the checkpoint failed on rank {rank}: ", inner
    text, chained = str(err), err.__cause__ or err.__context__
    while chained is not None:
        text += "\n" + str(chained)
        chained = chained.__cause__ or chained.__context__
    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    return prefix + (describe(f"{type(err).__name__}: {text}") or f"{type(err).__name__}: {first[:300]}")


def checkpointer_for(entry: dict, trainer: Trainer, group):
    """The plan's Checkpointer (execute/checkpoint/resume.py) when the job asks for saves or a resume, else None. It reports
    its saves as places (`at`): "save4" as the save after step 4 starts, "commit4" once its shards are written."""
    ck = entry.get("checkpoint")
    if not ck:
        return None
    from .checkpoint.resume import Checkpointer

    name = os.path.basename(entry["plan"])

    def mark(point: str) -> None:
        step = point.removeprefix("save").removeprefix("commit")
        at(f"the save after step {step} of {name}" if point.startswith("save") else
           f"the commit of the save after step {step} of {name}", point)

    return Checkpointer(trainer, ck["root"], ck["every"], ck["mode"], group, ck["identity"], entry["plan"], mark)


def run_plan(job: dict, entry: dict, device: torch.device, group=None, trace: bool = False) -> dict:
    """Build, train and time one plan on this rank; returns what this rank measured (a RankRecord's fields,
    the losses and notes). With a checkpoint to resume (entry["checkpoint"]["resume"], chosen and checked by the
    parent) it loads it and runs the steps after it; the earlier steps' losses and times come from the save.
    With `trace` (and job["trace_dir"]) a few more steps run under torch.profiler after the timed ones, outside
    the measurement (execute.tracing)."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    pf, name = load_plan_file(entry["plan"]), os.path.basename(entry["plan"])
    at(f"building {name}")
    memory = PeakMemory(device)
    gc.collect()
    memory.baseline()
    t_start = time.perf_counter()
    trainer = Trainer(pf, device, seed=job["seed"])
    notes = list(trainer.notes)
    if pf.model.dropout > 0:
        notes.append(f"dropout {pf.model.dropout} not run (masks would differ between layouts); the prediction "
                     "includes it")
    notes += plan_departures(pf.plan, trainer.dp_kind)
    batches = Batches(pf.model.vocab, pf.plan.global_batch, pf.plan.seq_len, job["seed"], job.get("data"))
    times, shares, first = [], [], 0
    saver = checkpointer_for(entry, trainer, group)
    if saver is not None:
        notes += entry["checkpoint"]["notes"]
        resume = entry["checkpoint"]["resume"]
        if resume:
            at(f"loading {resume['dir']} for {name}")
            shares, times = saver.load(resume["dir"], resume["step"], [resume["save"]])
            first = resume["step"]
            notes.append(f"resumed from {resume['dir']}: steps 0-{first - 1} ran in an earlier launch (their losses "
                         f"and step times are that launch's, read from the checkpoint); step {first} was the first "
                         "of a new process, cold as a warm-up step is")
    memory.start()
    for step in range(first, job["steps"]):
        at(f"step {step + 1} of {name}", f"step{step + 1}")  # counted from 1, as saves are (step-0004: 4 done)
        tokens = batches.step(step)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        shares.append(trainer.step(tokens))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        memory.after_step()  # what stays allocated between steps (untimed)
        if saver is not None:
            saver.after_step(step + 1, shares, times)
    if saver is not None:
        at(f"the last save of {name}")
        saver.flush()
    memory.stop()
    wall = time.perf_counter() - t_start
    if trace and job.get("trace_dir"):
        notes.append(traced(job, entry, device, trainer, batches, rank))
    checkpoint = None if saver is None else {**saver.record(), "resumed_from_step": first or None}
    del trainer, saver
    gc.collect()
    return {"record": RankRecord(rank=rank, device=device_name(device), step_times_s=times,
                                 **memory.record()).model_dump(),
            "shares": shares, "notes": notes, "wall": wall, "checkpoint": checkpoint,
            "memory_methods": memory.methods}


def traced(job: dict, entry: dict, device: torch.device, trainer: Trainer, batches: Batches, rank: int) -> str:
    """Trace steps after the timed ones (execute.tracing) into the job's trace folder; the measurement's note."""
    name = os.path.basename(entry["plan"])
    out = trace_path(job["trace_dir"], entry["plan"], rank)

    def step(i: int) -> None:
        at(f"traced step {i + 1} of {name}")
        trainer.step(batches.step(job["steps"] + i))

    world = dist.get_world_size() if dist.is_initialized() else 1
    trace_steps(step, device, out, {"plan": name, "rank": rank, "world_size": world, "device": device_name(device)})
    return (f"{TRACED_STEPS} more steps traced after the timed ones (not among the step times), one trace per rank: "
            f"{relative_ref(out.parent, entry['output'])}")  # relative to the measurement: no machine's folders


def gather(run: dict) -> tuple[list[dict], list[float]]:
    """Every rank's record (on every rank) and the step losses (this rank's shares summed over ranks)."""
    losses = torch.tensor(run["shares"], dtype=torch.float64)
    records = [run["record"]]
    if dist.is_initialized():
        records = [None] * dist.get_world_size()
        dist.all_reduce(losses)
        dist.all_gather_object(records, run["record"])
    for i, v in enumerate(losses.tolist()):
        check_finite(v, i)
    return records, losses.tolist()


def _largest(values: list) -> float | None:
    """The largest of a rank's values of one memory field over the rounds; None where no round measured it."""
    values = [v for v in values if v is not None]
    return max(values) if values else None


def write(job: dict, entry: dict, device: torch.device, runs: list[tuple[list[dict], list[float], dict]]) -> None:
    """Rank 0: one measurement from the plan's rounds (step times of every round; the first round's losses,
    the largest of every memory field)."""
    pf = load_plan_file(entry["plan"])
    at(f"writing the measurement of {os.path.basename(entry['plan'])}", "write")
    (records, losses, first), rounds = runs[0], len(runs)
    ranks = [RankRecord(rank=r["rank"], device=r["device"],
                        step_times_s=[t for recs, _, _ in runs for t in recs[i]["step_times_s"]],
                        **{f: _largest([recs[i][f] for recs, _, _ in runs]) for f in MEMORY_FIELDS})
             for i, r in enumerate(records)]
    m = Measurement(
        plan_file=relative_ref(entry["plan"], entry["output"]), model=pf.model, hardware=pf.hardware, plan=pf.plan, mesh=pf.mesh,
        stage_layers=pf.stage_layers, device_type=device.type,
        backend=dist.get_backend() if dist.is_initialized() else "none", torch_version=torch.__version__,
        nproc=len(records), steps=job["steps"], warmup=job["warmup"], rounds=rounds,
        dtype=("bf16" if pf.plan.precision == "bf16" else "fp16") + " autocast" if device.type == "cuda" else "fp32",
        memory_method=METHOD[device.type], memory_methods=first["memory_methods"], ranks=ranks, losses=losses,
        notes=first["notes"], wall_s=first["wall"],
        checkpoint=first.get("checkpoint"), created_at=datetime.datetime.now().isoformat(timespec="seconds"))
    write_measurement(m, entry["output"])
    name, peak = os.path.basename(entry["plan"]), f"peak {m.peak_memory_bytes / 2**20:.1f} MiB"
    views = [f"{v} {m.memory_view(v) / 2**20:.1f} MiB" for v in ("reserved", "device")
             if m.memory_view(v) is not None]
    peak += f" ({', '.join(views)})" if views else ""
    purpose = job.get("measures", "both")  # "memory", "time" or "both" (execute.run_plans.run_plans)
    if purpose == "memory":
        say(f"{name}: {peak}")
        return
    say(f"{name}: step {m.step_time_s * 1e3:.1f} ms (median of {job['steps'] - job['warmup']}"
        f"{f', lowest of {rounds} rounds' if rounds > 1 else ''}){', ' + peak if purpose == 'both' else ''}, "
        f"loss {m.losses[0]:.4f} -> {m.losses[-1]:.4f}"
        f"{', ' + m.checkpoint.summary() if m.checkpoint else ''}")


def run_job(job: dict, device: torch.device, rank: int) -> None:
    """Every plan of `job`, `rounds` times over; rank 0 writes the measurements."""
    if device.type == "cpu":
        set_allocator(MALLOC_MEMORY if job.get("measures") == "memory" else MALLOC_TIMING)
    group = None  # DCP's own gloo group (execute/checkpoint/resume.py), made by every rank at the same point
    if dist.is_initialized() and any(e.get("checkpoint") for e in job["plans"]):
        group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=job["pg_timeout_s"]))
    runs = {i: [] for i in range(len(job["plans"]))}
    for r in range(job.get("rounds", 1)):  # rounds interleave the plans: slow drifts of load hit them all
        if r and rank == 0:
            say(f"round {r + 1} of {job['rounds']}")
        for i, entry in enumerate(job["plans"]):
            run = run_plan(job, entry, device, group, trace=r == 0)
            at(f"gathering the results of {os.path.basename(entry['plan'])}")
            runs[i].append((*gather(run), run))
            if rank == 0 and job.get("rounds", 1) > 1:
                slowest = job_step_times([rec["step_times_s"] for rec in runs[i][-1][0]])[job["warmup"]:]
                say(f"{os.path.basename(entry['plan'])}: round {r + 1}: step "
                    f"{statistics.median(slowest) * 1e3:.1f} ms")
    if rank == 0:
        for i, entry in enumerate(job["plans"]):
            write(job, entry, device, runs[i])


START_UP_DUMP_SHARE = 0.75


def watch_start_up(pg_timeout_s: float) -> None:
    """A rank that has not joined its process group after START_UP_DUMP_SHARE of the group's timeout writes every
    thread's Python stack to its log (faulthandler) and goes on, so that the rank the others time out waiting for
    says where it stood (CI, 2026-11-27: rank 3 of 4 never joined in 120 s and said nothing). main cancels it once
    joined."""
    faulthandler.dump_traceback_later(START_UP_DUMP_SHARE * pg_timeout_s, exit=False)


def main(argv: list[str]) -> int:
    """Run the job files `argv` in turn in this launch (on CPU: the memory phase, then the timed one)."""
    jobs = [json.loads(open(path).read()) for path in argv]
    job = jobs[0]
    rank = int(os.environ.get("RANK", "0"))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the file-size limit fails (EFBIG), not the rank
    try:
        if job["device"] == "cuda":
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
        else:
            torch.set_num_threads(1)
            device = torch.device("cpu")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            watch_start_up(job["pg_timeout_s"])
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                    timeout=datetime.timedelta(seconds=job["pg_timeout_s"]),
                                    device_id=device if device.type == "cuda" else None)
            faulthandler.cancel_dump_traceback_later()
        for job in jobs:
            if job.get("kind") == "serve":  # serving plans (execute.inference)
                from .inference import serve_job

                if device.type == "cpu":
                    set_allocator(MALLOC_TIMING)
                serve_job(job, device, rank, at, say)
            else:
                run_job(job, device, rank)
        if dist.is_initialized():
            dist.barrier()
            if dist.get_backend() == "gloo":
                # gloo's teardown aborts a rank now and then ("terminate called without an active exception"):
                # seen after all-to-alls and after DCP's extra group under FSDP; everything is written, so
                # every gloo run leaves without it
                sys.stdout.flush()
                sys.stderr.flush()
                if os.environ.get(FORKED_VAR):  # a forked rank returns to the fork context, which also skips it
                    return 0
                os._exit(0)
            dist.destroy_process_group()
    except BaseException as err:  # one line for the user; the traceback stays in the log
        faults.lift_memory_limit()  # out of memory under an address-space limit: room to report it
        import traceback

        traceback.print_exc()
        say(f"rank {rank} failed during {PLACE[0]}: {failure_cause(err)}")
        sys.stdout.flush()
        os._exit(1)  # no atexit / process-group teardown that could wait on dead peers
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
