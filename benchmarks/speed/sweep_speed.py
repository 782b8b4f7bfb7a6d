"""How fast `perfmodel sweep` runs, and whether the engine changes a row: a 2,000-point sweep (4 workloads x 500
systems) on one local worker, two, and a local Ray instance of two CPUs.

    python -m benchmarks.speed.sweep_speed               # 500 systems: the issue's 2,000 searches, three times (~10 min here)
    python -m benchmarks.speed.sweep_speed --systems 40  # the same, smaller

The systems are a DGX H100 on its datasheet with six resources drawn by Latin hypercube (seed 0): FLOP/s x0.5-4,
HBM bandwidth x0.5-4 and capacity 40-288 GiB, NVLink domain 4-72 devices and bandwidth x0.5-4, scale-out bandwidth
x0.5-4 (all log-uniform but the domain). The workloads (benchmarks' own, typical of a planner's questions): Llama 3
8B on 64 GPUs and 70B on 512, GPT-3 175B on 1,024 (training, each the full layout search), and Llama 3 70B served on
8 GPUs at fp8 within a TTFT / TPOT SLO (every serving layout).

Printed: each run's wall seconds (a fresh `perfmodel sweep` process: Python start, the sweep's setup, the workers' and Ray's start and the Parquet writes included), searches per
second, per core, and the scaling efficiency T(1 worker) / (workers x T(n workers)); then whether the three runs'
rows are identical (pandas, exactly: the same floats bit for bit), and how long each workload's search takes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

import yaml

from perfmodel.sweep.schema import Sweep
from perfmodel.sweep.store import load_results


def speed_sweep(systems: int) -> Sweep:
    """The benchmark's sweep (module docstring)."""
    r = lambda lo, hi, **k: {"low": lo, "high": hi, "log": True, **k}  # noqa: E731
    return Sweep.parse({
        "name": f"sweep-speed-{systems}", "systems": ["dgx-h100"],
        "axes": {"flops": r(0.5, 4), "hbm_bandwidth": r(0.5, 4), "hbm_capacity": r(40, 288, of="value"),
                 "scale_up_size": {"low": 4, "high": 72, "of": "value", "integer": True},
                 "scale_up_bandwidth": r(0.5, 4), "scale_out_bandwidth": r(0.5, 4)},
        "sampling": {"method": "lhs", "points": systems, "seed": 0},
        "workloads": [
            {"name": "llama3-8b-64", "train": {"model": "llama-3-8b", "gpus": 64, "global_batch": 512,
                                               "seq_len": 8192}},
            {"name": "llama3-70b-512", "train": {"model": "llama-3-70b", "gpus": 512, "global_batch": 1024,
                                                 "seq_len": 8192}},
            {"name": "gpt3-175b-1024", "train": {"model": "gpt3-175b", "gpus": 1024, "global_batch": 1536,
                                                 "seq_len": 2048}},
            {"name": "llama3-70b-serve", "serve": {"model": "llama-3-70b", "gpus": 8, "input_len": 2048,
                                                   "output_len": 256, "concurrency": 64, "precision": "fp8",
                                                   "ttft_ms": 2000, "tpot_ms": 50}}],
        "chunk_points": 10})


def timed(sweep_file: Path, out: Path, flags: list[str]) -> tuple[float, pd.DataFrame]:
    """`perfmodel sweep` as a fresh process (every engine starts cold, as a user's run does): wall seconds, rows."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "perfmodel", "sweep", str(sweep_file), "--out", str(out), "--quiet",
                    "--format", "json", *flags], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0, load_results(out)[1]


def per_workload(sweep: Sweep, n: int = 5) -> pd.DataFrame:
    """Seconds per search of each workload, in this (warm) process, over the first n points."""
    from perfmodel.sweep.evaluate import rows_of
    from perfmodel.sweep.points import points

    pts = points(sweep)[:n]
    rows = []
    for w in sweep.workloads:
        rows_of(sweep, pts[0], w)  # warm: model tables, kernel grids
        t0 = time.perf_counter()
        for p in pts:
            rows_of(sweep, p, w)
        rows.append({"workload": w.name, "s_per_search": (time.perf_counter() - t0) / len(pts)})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", type=int, default=500)
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray run (Ray not installed)")
    a = ap.parse_args(argv)
    sweep = speed_sweep(a.systems)
    n = sweep.total_points * len(sweep.workloads)
    cores = os.cpu_count()
    print(f"sweep_speed: {sweep.total_points} systems x {len(sweep.workloads)} workloads = {n} searches; "
          f"{cores} cores here; python {sys.version.split()[0]}")
    rows, frames = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.yaml"
        path.write_text(yaml.safe_dump(sweep.model_dump(mode="json", exclude_defaults=True)))
        runs = [("in-process (--workers 1)", 1, ["--workers", "1"]), ("local pool (--workers 2)", 2, ["--workers", "2"])]
        if not a.no_ray:  # no RAY_ADDRESS: a local instance of this machine's cores (ray.init(num_cpus=2) here)
            runs.append((f"ray, local instance (--ray, num_cpus={cores})", cores, ["--ray"]))
        for label, workers, flags in runs:
            secs, df = timed(path, Path(tmp) / f"out{len(frames)}", flags)
            frames[label] = df
            rows.append({"engine": label, "workers": workers, "seconds": secs, "searches_per_s": n / secs,
                         "per_core": n / secs / workers})
    t1 = rows[0]["seconds"]
    for r in rows:
        r["scaling_efficiency"] = t1 / (r["workers"] * r["seconds"])
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    first = next(iter(frames.values()))
    for label, df in frames.items():
        same = df.equals(first) and all(df[c].equals(first[c]) for c in df.columns)
        print(f"rows identical to in-process: {label}: {same} ({len(df)} rows, {int(df['feasible'].sum())} feasible)")
    print("\nseconds per search, warm, in this process:")
    print(per_workload(sweep).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    bad = first[~first["feasible"]].groupby("workload").size()
    print("\ninfeasible rows by workload: " + (", ".join(f"{w} {n}" for w, n in bad.items()) or "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
