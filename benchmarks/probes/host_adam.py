"""The host-side Adam update's share of host memory bandwidth (cost.host.host_update.HOST_ADAM_EFFICIENCY's source):
times torch.optim.Adam (foreach, fp32, PyTorch's CPU implementation, 'PT-CPU' in the SuperOffload blog) over n
parameters against a STREAM-style triad over the same arrays on this machine's CPU, both as bytes per second:
Adam at 28 B per parameter (read p, g, m, v; write p, m, v: what DeepSpeedCPUAdam's Step_AVX loop moves,
csrc/includes/cpu_adam.h), the triad at 12 B per element (read b, c; write a).

    python -m benchmarks.probes.host_adam [--n 50000000] [--reps 5]
"""

from __future__ import annotations

import argparse
import time

import torch


def best_seconds(fn, reps: int) -> float:
    fn()  # warm: first touch of the pages, Adam's lazy state
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50_000_000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    p = torch.nn.Parameter(torch.randn(a.n))
    p.grad = torch.randn(a.n)
    opt = torch.optim.Adam([p], lr=1e-5, foreach=True)
    adam = best_seconds(opt.step, a.reps)
    x, y, z = torch.empty(a.n), torch.randn(a.n), torch.randn(a.n)
    triad = best_seconds(lambda: torch.add(y, z, alpha=2.0, out=x), a.reps)
    adam_bw, triad_bw = 28 * a.n / adam / 1e9, 12 * a.n / triad / 1e9
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, n = {a.n:.3g}")
    print(f"Adam step {adam * 1e3:.1f} ms = {adam_bw:.2f} GB/s at 28 B/param; triad {triad * 1e3:.1f} ms = "
          f"{triad_bw:.2f} GB/s; Adam / triad = {adam_bw / triad_bw:.3f}")


if __name__ == "__main__":
    main()
