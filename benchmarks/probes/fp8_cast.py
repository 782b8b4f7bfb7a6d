"""An fp8 GEMM's activation cast, static against dynamic, on this GPU (`serve.gemm_quant`'s premise).

The parts' GEMM tables time fp8 per-tensor GEMMs with the activation's scale found on the fly (amax, scale, cast);
a served checkpoint casts with its static scale. This times, in CUDA graphs (what the engines replay at decode):

    bf16      torch.mm(x, w^T)                                       one kernel
    gemm      torch._scaled_mm(xq, wq^T) with xq already fp8         the fp8 GEMM alone
    static    x * (1/s) cast to fp8, then the fp8 GEMM               the served path (a cast at a known scale)
    dynamic   amax |x|, s = amax / 448, x / s cast to fp8, the GEMM  the tables' path

at a decode GEMM's shapes (rows 1-8; Llama-3.1-70B's projections at tp 4 and a tiny one, the tables' floor shape).

    python -m benchmarks.probes.fp8_cast --out fp8_cast.json

Each time is the mean over 200 replays of a graph of 20 calls (different weights, so the large ones stream from
HBM); needs a CUDA GPU with fp8 (sm89+).
"""

from __future__ import annotations

import argparse
import json

import torch

SHAPES = [(1, 128, 128), (16, 128, 128), (8, 7168, 8192), (16, 7168, 8192), (16, 2560, 8192), (16, 8192, 2048),
          (64, 7168, 8192)]
CALLS, REPLAYS = 20, 200
FP8 = torch.float8_e4m3fn


def timed(fn) -> float:
    """Microseconds per call of `fn` (which runs CALLS calls) replayed in a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(10):
        g.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(REPLAYS):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (REPLAYS * CALLS)


def shape_times(m: int, n: int, k: int) -> dict:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(CALLS)]
    wq = [w.to(FP8) for w in ws]
    one = torch.ones((), device="cuda", dtype=torch.float32)
    inv = torch.full((), 0.5, device="cuda", dtype=torch.float32)
    xq = x.to(FP8)

    def bf16():
        for w in ws:
            torch.mm(x, w.t())

    def gemm():
        for w in wq:
            torch._scaled_mm(xq, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def static():
        for w in wq:
            q = (x * inv).to(FP8)
            torch._scaled_mm(q, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def dynamic():
        for w in wq:
            s = x.abs().amax().float().clamp(min=1e-12) / 448.0
            q = (x / s).to(FP8)
            torch._scaled_mm(q, w.t(), scale_a=s, scale_b=one, out_dtype=torch.bfloat16)

    out = {"m": m, "n": n, "k": k}
    for name, fn in (("bf16", bf16), ("gemm", gemm), ("static", static), ("dynamic", dynamic)):
        try:
            out[name] = timed(fn)
        except RuntimeError as err:  # e.g. a shape torch._scaled_mm refuses (its operands' multiples of 16)
            out[name], out[f"{name}_error"] = float("nan"), str(err).splitlines()[0][:200]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = [shape_times(*s) for s in SHAPES]
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "calls": CALLS, "replays": REPLAYS,
           "us_per_call": rows}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{out['device']}, torch {out['torch']}: microseconds per call in CUDA graphs")
    print(f"{'m':>4} {'n':>6} {'k':>6} {'bf16':>8} {'gemm':>8} {'static':>8} {'dynamic':>8} {'dyn-static':>10}")
    for r in rows:
        print(f"{r['m']:>4} {r['n']:>6} {r['k']:>6} {r['bf16']:8.2f} {r['gemm']:8.2f} {r['static']:8.2f} "
              f"{r['dynamic']:8.2f} {r['dynamic'] - r['static']:10.2f}")


if __name__ == "__main__":
    main()
