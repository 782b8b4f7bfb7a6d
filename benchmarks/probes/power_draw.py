"""Measure one GPU's power while idle, in bf16 GEMMs and in a copy-bound loop (the stand-in for a device that
only communicates), for perfmodel.run.energy's idle and communication shares. Needs a CUDA GPU and nvidia-smi; it
changes no card setting (it only reads power.draw).

    python -m benchmarks.probes.power_draw --out benchmarks/results/power/NAME.json   # about 40 s

Samples nvidia-smi's power.draw every 100 ms in a thread during each phase and prints the median watts, the
board power limit and each phase's share of it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

QUERY = ["nvidia-smi", "--query-gpu=power.draw,power.limit,name", "--format=csv,noheader,nounits", "-i", "0"]


def sample(stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        watts = subprocess.run(QUERY, capture_output=True, text=True, check=True).stdout.split(",")[0]
        out.append(float(watts))
        time.sleep(0.1)


def phase(seconds: float, work) -> list[float]:
    stop, watts = threading.Event(), []
    t = threading.Thread(target=sample, args=(stop, watts))
    t.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        work()
    stop.set()
    t.join()
    return watts[len(watts) // 5:]  # the first fifth: clocks and power still ramping


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=12.0)
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    big = torch.empty(2**28, device=dev, dtype=torch.bfloat16)  # 512 MiB, far beyond L2
    dst = torch.empty_like(big)

    def gemm():
        for _ in range(20):
            x @ x
        torch.cuda.synchronize(dev)

    def copy():
        for _ in range(20):
            dst.copy_(big)
        torch.cuda.synchronize(dev)

    phases = {"idle": phase(a.seconds, lambda: time.sleep(0.05)), "gemm_bf16": phase(a.seconds, gemm),
              "copy": phase(a.seconds, copy)}
    _, limit, name = (s.strip() for s in subprocess.run(QUERY, capture_output=True, text=True).stdout.split(","))
    result = {"device": name, "power_limit_w": float(limit), "torch": torch.__version__,
              "command": "python -m benchmarks.probes.power_draw", "samples_w": phases,
              "median_w": {k: statistics.median(v) for k, v in phases.items()}}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    for k, w in result["median_w"].items():
        print(f"{k:10s} {w:7.1f} W  ({w / float(limit):.0%} of the {float(limit):.0f} W limit)")


if __name__ == "__main__":
    main()
