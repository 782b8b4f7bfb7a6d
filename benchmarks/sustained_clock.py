"""What a GPU sustains of its kernel table's GEMM rate under continuous load (the power limit, then temperature).

    python benchmarks/sustained_clock.py [--seconds 60] [--size 8192] [--hardware SYSTEM] [--out FILE.json]
                                                                                             (a CUDA device)

The kernel tables (hardware_specs/kernels, AIConfigurator's collector) time each GEMM shape in short bursts at
unthrottled clocks. A training step keeps the tensor cores busy, and a part whose power limit binds (Hopper's
700 W) lowers its SM clock within the first second of load; temperature then drifts it a little further. This
loops one bf16 GEMM (size^3) back to back for `--seconds`, times every window of about one second with CUDA
events, and samples the SM clock, power draw and temperature once a second (nvidia-smi, read only: nothing on the
card is set). It prints the first window's rate, the mean of the last quarter of the run and their ratio (the
thermal drift), and with `--hardware` the last quarter over that system's table rate for the same shape: the
measured `efficiency.sustained_fraction` of its spec. Every window goes to `--out`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np


def sample_smi(proc) -> list[dict]:
    """The rows nvidia-smi printed: SM clock (MHz), power draw (W), temperature (C), with its timestamps."""
    out = []
    for line in proc.stdout.read().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            try:
                out.append({"time": parts[0], "sm_mhz": float(parts[1]), "power_w": float(parts[2]),
                            "temp_c": float(parts[3])})
            except ValueError:
                continue
    return out


def table_rate(hardware: str, n: int) -> float | None:
    """TFLOP/s of a bf16 n^3 GEMM in `hardware`'s measured GEMM table (None: the part has no table)."""
    from perfmodel.cost.compute.kernel_lookup import gemm_table_time
    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.spec.hardware.kernel_tables import gemm_grid

    table = load_hardware(hardware).accelerator.kernel_tables.get("gemm")
    if table is None:
        return None
    t = float(np.ravel(gemm_table_time(gemm_grid(table, "bf16"), n, n, n)[0])[0])
    return 2.0 * n ** 3 / t / 1e12


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--hardware", help="a system whose GEMM table the sustained rate is compared with (dgx-h200)")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    table_tflops = table_rate(a.hardware, a.size) if a.hardware else None
    import torch

    if not torch.cuda.is_available():
        print("error: needs a CUDA device", file=sys.stderr)
        return 2
    n = a.size
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * n ** 3
    for _ in range(3):  # cuBLAS heuristics and workspace
        torch.mm(x, w)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.mm(x, w)
    torch.cuda.synchronize()
    per_window = max(1, int(1.0 / max(time.perf_counter() - t0, 1e-4)))  # ~1 s of GEMMs per timed window
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                            "--format=csv,noheader,nounits", "-lms", "1000"], stdout=subprocess.PIPE, text=True)
    windows, start = [], time.perf_counter()
    try:
        while time.perf_counter() - start < a.seconds:
            b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b.record()
            for _ in range(per_window):
                torch.mm(x, w)
            e.record()
            e.synchronize()
            s = b.elapsed_time(e) / 1e3
            windows.append({"t_s": round(time.perf_counter() - start, 3), "seconds": s,
                            "tflops": per_window * flops / s / 1e12})
    finally:
        smi.terminate()
        smi.wait(timeout=10)
    samples = sample_smi(smi)
    first = windows[0]["tflops"]
    tail = windows[-max(1, len(windows) // 4):]
    steady = sum(w_["tflops"] for w_ in tail) / len(tail)
    clocks = [s_["sm_mhz"] for s_ in samples]
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "size": n, "dtype": "bf16",
              "seconds": a.seconds, "gemms_per_window": per_window, "first_window_tflops": first,
              "steady_tflops": steady, "steady_over_first": steady / first, "windows": windows, "smi": samples,
              "sm_mhz_first": clocks[1] if len(clocks) > 1 else None,
              "sm_mhz_last_quarter": (sum(clocks[-max(1, len(clocks) // 4):]) / max(1, len(clocks) // 4)
                                      if clocks else None)}
    print(f"{result['gpu']}: bf16 {n}^3 GEMM back to back for {a.seconds:.0f} s: first window "
          f"{first:.0f} TFLOP/s, last quarter {steady:.0f} TFLOP/s, ratio {steady / first:.3f}")
    if samples:
        q = max(1, len(samples) // 4)
        print(f"  SM clock {samples[1]['sm_mhz'] if len(samples) > 1 else samples[0]['sm_mhz']:.0f} MHz after 1 s, "
              f"{result['sm_mhz_last_quarter']:.0f} MHz over the last quarter; power "
              f"{sum(s_['power_w'] for s_ in samples[-q:]) / q:.0f} W, temperature "
              f"{sum(s_['temp_c'] for s_ in samples[-q:]) / q:.0f} C over the last quarter")
    if table_tflops:
        result.update(hardware=a.hardware, table_tflops=table_tflops, steady_over_table=steady / table_tflops)
        print(f"  {a.hardware}'s table: {table_tflops:.0f} TFLOP/s for the same GEMM; sustained over table "
              f"{steady / table_tflops:.3f} (its efficiency.sustained_fraction)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
