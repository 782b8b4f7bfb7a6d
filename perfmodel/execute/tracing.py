"""Kineto traces of a plan's steps (`perfmodel execute PLAN --trace DIR`): the executor's side of calibrating from a
trace, so that it both writes the traces a calibration reads and measures the plans it predicts.

The traced steps run after the timed ones, in the same process and on the same model, and are not among the
measured step times: the profiler's own host work (an event per op and kernel, input shapes) slows the steps it
records. One untraced profiler warm-up step comes first (CUPTI's start-up), then TRACED_STEPS recorded ones, each
marked by torch.profiler's `ProfilerStep#N` span, as torch.profiler, torchtitan and Megatron-LM's
`--use-pytorch-profiler` write them. Each rank writes its own gzipped chrome-trace JSON.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

TRACED_STEPS = 2  # recorded steps per plan: two, so that a reader can check one step against the other
PROFILER_WARMUP = 1  # profiled, not recorded: CUPTI and the profiler's first-use costs land here


def trace_path(trace_dir: str | Path, plan_path: str | Path, rank: int) -> Path:
    """Where rank `rank` writes the trace of plan `plan_path`: TRACE_DIR/PLAN_STEM/rank-R.pt.trace.json.gz
    (the `.pt.trace.json` suffix is torch.profiler's tensorboard handler's, which trace viewers look for)."""
    return Path(trace_dir) / Path(plan_path).stem / f"rank-{rank}.pt.trace.json.gz"


def trace_steps(step, device: torch.device, out: Path, metadata: dict) -> list[float]:
    """Run `step(i)` for i = 0 .. PROFILER_WARMUP + TRACED_STEPS - 1 under torch.profiler (CPU ops with their input
    shapes; CUDA kernels and memory copies on a GPU) and write the recorded steps' trace to `out`; returns the
    recorded steps' wall seconds (synchronized on CUDA); the trace's ProfilerStep spans hold them too.
    `metadata` goes into the trace's top level (`add_metadata_json`): the plan, the rank, the world."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    out.parent.mkdir(parents=True, exist_ok=True)
    times = []

    def write(prof) -> None:
        prof.export_chrome_trace(str(out))

    with profile(activities=activities, schedule=schedule(wait=0, warmup=PROFILER_WARMUP, active=TRACED_STEPS),
                 record_shapes=True, on_trace_ready=write) as prof:
        for i in range(PROFILER_WARMUP + TRACED_STEPS):
            if i == PROFILER_WARMUP:  # metadata is kept only while the profiler records
                for key, value in metadata.items():
                    prof.add_metadata_json(f"perfmodel_{key}", json.dumps(value))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            step(i)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
            prof.step()  # the last one ends the recorded window and calls `write`, every step's time known
    return times[PROFILER_WARMUP:]
