"""GEMMs whose leading dimension is not a multiple of 16 bytes, and eager (unfused) attention, as PyTorch runs them.

    python -m benchmarks.probes.gemm_alignment [--out FILE.json]      (a CUDA device)

(1) A linear layer's three GEMMs (forward y = x W^T, input gradient dy W, weight gradient dy^T x) in bf16 for
    an LM head of vocabulary 50257 (GPT-2's, not a multiple of 8) and 50304 (padded, as nanoGPT and llm.c do):
    cuBLAS has no 16-byte-aligned kernel for the first and falls back to alignment-1 kernels (on Hopper the
    sm75-era `cutlass_75_tensorop_bf16_s1688gemm_*_align1`, no wgmma). TFLOP/s per orientation: the rates the
    accelerator spec's `unaligned_matmul_tflops` cites.
(2) Causal attention on [B, H, T, D] bf16 as nanoGPT's model.py ran it before PyTorch's SDPA (q k^T / sqrt(D),
    masked_fill, softmax in fp32 under autocast, dropout 0, @ v), forward and backward, against SDPA: the bytes
    per score element an eager attention moves, for cost.compute.kernels' unfused attention.
Each time is the median of CUDA-event timings after warm-up.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys


def timed(fn, reps=20, warm=5) -> float:
    import torch

    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return statistics.median(out)


def linear_gemms(m: int, n: int, k: int) -> dict:
    import torch

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * m * n * k
    t = {"forward": timed(lambda: x @ w.t()), "input_grad": timed(lambda: dy @ w),
         "weight_grad": timed(lambda: dy.t() @ x)}
    return {"m": m, "n": n, "k": k, **{f"{o}_tflops": flops / s / 1e12 for o, s in t.items()}}


def attention(b: int, h: int, t: int, d: int) -> dict:
    import torch
    import torch.nn.functional as F

    q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.tril(torch.ones(t, t, device="cuda", dtype=torch.bool)).view(1, 1, t, t)
    g = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)

    def eager():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            att = att.masked_fill(~mask, float("-inf"))
            att = F.softmax(att, dim=-1)  # autocast runs softmax in fp32
            y = att @ v
        y.backward(g)

    def sdpa():
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.backward(g)

    def eager_fwd():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            att = att.masked_fill(~mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            return att @ v

    return {"b": b, "h": h, "t": t, "d": d, "scores": b * h * t * t, "eager_fwd_bwd_s": timed(eager),
            "eager_fwd_s": timed(eager_fwd), "sdpa_fwd_bwd_s": timed(sdpa)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    import torch

    env = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    gemms = [linear_gemms(m, n, k) for m in (8192, 16384) for n in (50257, 50304) for k in (768, 1024)]
    gemms += [linear_gemms(8192, n, k) for n, k in ((3072, 769), (3071, 768), (4096, 4096))]
    att = [attention(8, 12, 1024, 64), attention(8, 16, 1024, 64), attention(4, 12, 2048, 64)]
    print(env)
    print(f"{'m':>6} {'n':>6} {'k':>5}  fwd TF/s  dX TF/s  dW TF/s")
    for r in gemms:
        print(f"{r['m']:6d} {r['n']:6d} {r['k']:5d}  {r['forward_tflops']:8.1f} {r['input_grad_tflops']:8.1f} "
              f"{r['weight_grad_tflops']:8.1f}")
    print(f"{'b':>3} {'h':>3} {'t':>5} {'d':>3}  eager fwd+bwd ms  eager fwd ms  sdpa fwd+bwd ms  eager B/score")
    for r in att:
        bw = 3.0e12  # about what a device-to-device copy moves on the lent H100 (KINDS.md), bytes/s
        print(f"{r['b']:3d} {r['h']:3d} {r['t']:5d} {r['d']:3d}  {r['eager_fwd_bwd_s'] * 1e3:16.2f} "
              f"{r['eager_fwd_s'] * 1e3:12.2f} {r['sdpa_fwd_bwd_s'] * 1e3:16.2f} "
              f"{r['eager_fwd_bwd_s'] * bw / r['scores']:13.1f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"environment": env, "gemms": gemms, "attention": att}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
