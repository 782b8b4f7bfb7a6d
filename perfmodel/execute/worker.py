"""The torchrun entry point: `python -m torch.distributed.run ... -m perfmodel.execute.worker JOB.json`.

Runs every plan of the job in turn inside one launch (torch start-up costs seconds per launch), each on a fresh
device mesh, and has rank 0 write each plan's measurement file atomically. A rank that fails prints one
`[perfmodel] rank R failed: ...` line and exits non-zero; torchrun then stops the others (launch.py).
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from ..launch import PREFIX
from ..measurement import Measurement, RankRecord, write_measurement
from ..planfile import load_plan_file
from .data import Batches
from .memory import METHOD, PeakMemory
from .train import Trainer, check_finite, device_name


def say(text: str) -> None:
    print(f"{PREFIX} {text}", flush=True)


def run_plan(job: dict, entry: dict, device: torch.device) -> None:
    rank = dist.get_rank() if dist.is_initialized() else 0
    pf = load_plan_file(entry["plan"])
    memory = PeakMemory(device)
    gc.collect()
    memory.baseline()
    t_start = time.perf_counter()
    trainer = Trainer(pf, device, seed=job["seed"])
    notes = list(trainer.notes)
    if pf.model.dropout > 0:
        notes.append(f"dropout {pf.model.dropout} not run (masks would differ between layouts); the prediction "
                     "includes it")
    batches = Batches(pf.model.vocab, pf.plan.global_batch, pf.plan.seq_len, job["seed"], job.get("data"))
    kill = os.environ.get("PERFMODEL_TEST_KILL")  # "rank:step": a test kills one rank mid-run
    times, shares = [], []
    memory.start()
    for step in range(job["steps"]):
        if kill and kill == f"{rank}:{step}":
            os.kill(os.getpid(), 9)
        tokens = batches.step(step)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        shares.append(trainer.step(tokens))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    memory.stop()
    wall = time.perf_counter() - t_start
    del trainer
    gc.collect()
    peak = memory.peak()
    losses = torch.tensor(shares, dtype=torch.float64)
    record = RankRecord(rank=rank, device=device_name(device), step_times_s=times, peak_memory_bytes=peak)
    records = [None] * (dist.get_world_size() if dist.is_initialized() else 1)
    if dist.is_initialized():
        dist.all_reduce(losses)
        dist.all_gather_object(records, record.model_dump())
    else:
        records = [record.model_dump()]
    for i, v in enumerate(losses.tolist()):
        check_finite(v, i)
    if rank == 0:
        m = Measurement(
            plan_file=str(entry["plan"]), model=pf.model, hardware=pf.hardware, plan=pf.plan, mesh=pf.mesh,
            stage_layers=pf.stage_layers, device_type=device.type, backend=dist.get_backend() if dist.is_initialized() else "none",
            torch_version=torch.__version__, nproc=len(records), steps=job["steps"], warmup=job["warmup"],
            dtype=("bf16" if pf.plan.precision == "bf16" else "fp16") + " autocast" if device.type == "cuda" else "fp32",
            memory_method=METHOD[device.type], ranks=[RankRecord(**r) for r in records], losses=losses.tolist(),
            notes=notes, wall_s=wall, created_at=datetime.datetime.now().isoformat(timespec="seconds"))
        write_measurement(m, entry["output"])
        say(f"{os.path.basename(entry['plan'])}: step {m.step_time_s * 1e3:.1f} ms (median of "
            f"{job['steps'] - job['warmup']}), peak {m.peak_memory_bytes / 2**20:.1f} MiB, "
            f"loss {m.losses[0]:.4f} -> {m.losses[-1]:.4f}")


def main(argv: list[str]) -> int:
    job = json.loads(open(argv[0]).read())
    rank = int(os.environ.get("RANK", "0"))
    try:
        if job["device"] == "cuda":
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
        else:
            torch.set_num_threads(1)
            device = torch.device("cpu")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                    timeout=datetime.timedelta(seconds=job["pg_timeout_s"]),
                                    device_id=device if device.type == "cuda" else None)
        for entry in job["plans"]:
            run_plan(job, entry, device)
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
    except Exception as err:  # one line for the user; the traceback stays in the log
        import traceback

        traceback.print_exc()
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        say(f"rank {rank} failed: {type(err).__name__}: {msg[:300]}")
        sys.stdout.flush()
        os._exit(1)  # no atexit / process-group teardown that could wait on dead peers
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
