"""Grouped GEMMs of MoE training against one dense GEMM of the same rows, on this GPU.

The cost model prices a device's local experts (g groups of m routed tokens each) as the measured dense GEMM of g*m
rows with the same n and k (`cost.compute.kernel_lookup.gemm_table_time`), floored by the traffic of the g separate weights.
This measures how far a grouped kernel is from that, pass by pass, at the expert shapes of the MoE presets:

    fwd    Y[g*m, n]  = X[g*m, k] W_e[n, k]^T            per expert e on its m rows
    dgrad  dX[g*m, k] = dY[g*m, n] W_e[n, k]             per expert
    wgrad  dW_e[n, k] = dY_e[m, n]^T X_e[m, k]           per expert: K = m, where the dense GEMM's K is g*m

grouped: torch._grouped_mm (CUTLASS grouped GEMM on sm90+, what torchtitan's MoE calls); dense: torch.mm (cuBLAS)
at (g*m, n, k). With fp8 (sm89+) also the forward of torch._scaled_grouped_mm against torch._scaled_mm, rowwise
scales (torchtitan's fp8 rowwise MoE recipe), where this torch has them.

    python -m benchmarks.probes.grouped_gemm --out results.json [--budget-s 150] [--quick]

Each time is the mean of `reps` back-to-back calls between two CUDA events after warm-up (device time of the
kernels; the launches overlap them). Shapes run smallest first, so a run cut by --budget-s loses the largest.
Needs a CUDA GPU; `--quick --device cpu` runs a few small shapes as a check of the script itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


from perfmodel.spec.model.catalogue import load_model

MODELS = ("deepseek-v3", "gpt-oss-120b", "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b")
GROUPS = (1, 2, 4, 8, 16, 32)  # local experts per device: n_experts / ep
TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)  # routed tokens per local expert
MAX_ROWS = 262_144  # g*m: DeepSeek-V3's 4 local experts at ep 64 see ~8k tokens each (mb 1, seq 4096, top 8)


def shapes(quick: bool):
    """(model, projection, n, k, g, m) of each expert GEMM: the gate-and-up projection (n = 2 ffn for a gated MLP,
    k = hidden) and the down projection (n = hidden, k = ffn), for every local-expert count up to n_experts."""
    out = []
    for name in MODELS[:1] if quick else MODELS:
        cfg = load_model(name)
        ffn, hidden = cfg.moe.expert_ffn_hidden, cfg.hidden
        up = (2 if cfg.mlp in ("swiglu", "geglu") else 1) * ffn
        for proj, n, k in (("up", up, hidden), ("down", hidden, ffn)):
            if quick:
                n, k = n // 16, k // 16
            for g in GROUPS[:3] if quick else GROUPS:
                for m in TOKENS[:2] if quick else TOKENS:
                    if g <= cfg.moe.n_experts and g * m <= MAX_ROWS:
                        out.append((name, proj, n, k, g, m))
    return sorted(out, key=lambda s: s[4] * s[5] * s[2] * s[3])


def timer(device: torch.device, reps: int, warmup: int = 2):
    """Mean seconds of fn() over `reps` back-to-back calls (CUDA events; wall clock on CPU)."""
    def run(fn) -> float:
        for _ in range(warmup):
            fn()
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / reps
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps
    return run


def measure(n: int, k: int, g: int, m: int, device: torch.device, reps: int) -> dict:
    """Seconds of the three passes, grouped and dense, bf16 (and the fp8 forward where this torch has it)."""
    bf16 = torch.bfloat16
    x = torch.randn(g * m, k, device=device, dtype=bf16)
    dy = torch.randn(g * m, n, device=device, dtype=bf16)
    w = torch.randn(g, n, k, device=device, dtype=bf16) * k ** -0.5
    offs = torch.arange(1, g + 1, device=device, dtype=torch.int32) * m
    wd = w[0]
    timed, errors = timer(device, reps), {}

    def t(fn):
        try:
            return timed(fn)
        except Exception as err:  # a layout or dtype this torch's kernel refuses: say it, keep the rest
            errors[len(errors)] = str(err).splitlines()[0][:200]
            return None

    row = {
        "grouped_fwd_s": t(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)),
        "grouped_dgrad_s": t(lambda: torch._grouped_mm(dy, w, offs=offs)),
        "grouped_wgrad_s": t(lambda: torch._grouped_mm(dy.t(), x, offs=offs)),
        "dense_fwd_s": t(lambda: x @ wd.t()),
        "dense_dgrad_s": t(lambda: dy @ wd),
        "dense_wgrad_s": t(lambda: dy.t() @ x),
    }
    row.update(fp8_forward(x, w, offs, timed, device))
    return {**row, **({"errors": list(errors.values())} if errors else {})}


def fp8_forward(x, w, offs, t, device) -> dict:
    """The forward in fp8 e4m3 with rowwise scales: grouped (torch._scaled_grouped_mm) and dense (torch._scaled_mm);
    {} on CPU, and the error's first line where this torch or GPU has no such kernel."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
        return {}
    f8 = torch.float8_e4m3fn
    xq = x.to(f8)
    wq = w.to(f8)
    sx = torch.ones(x.shape[0], device=device, dtype=torch.float32)
    out = {}
    try:
        sw = torch.ones(w.shape[0], w.shape[1], device=device, dtype=torch.float32)
        out["grouped_fp8_fwd_s"] = t(lambda: torch._scaled_grouped_mm(
            xq, wq.transpose(-2, -1), sx, sw, offs=offs, out_dtype=torch.bfloat16))
    except Exception as err:  # an older torch, another GPU: say which, keep the bf16 numbers
        out["grouped_fp8_error"] = str(err).splitlines()[0][:200]
    try:
        wdq = wq[0]
        out["dense_fp8_fwd_s"] = t(lambda: torch._scaled_mm(
            xq, wdq.t(), sx[:, None], torch.ones(1, wdq.shape[0], device=device, dtype=torch.float32),
            out_dtype=torch.bfloat16))
    except Exception as err:
        out["dense_fp8_error"] = str(err).splitlines()[0][:200]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON of every measured shape")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop starting new shapes after this many seconds")
    ap.add_argument("--quick", action="store_true", help="a few small shapes (a check of the script)")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here; valid: --device cpu --quick for a check of the script", file=sys.stderr)
        return 2
    t0, rows = time.perf_counter(), []
    todo = shapes(a.quick)
    for name, proj, n, k, g, m in todo:
        if time.perf_counter() - t0 > a.budget_s:
            print(f"budget of {a.budget_s:g} s spent: {len(todo) - len(rows)} largest shapes not measured")
            break
        row = {"model": name, "proj": proj, "n": n, "k": k, "groups": g, "tokens_per_group": m,
               **measure(n, k, g, m, device, a.reps)}
        rows.append(row)
        flops = 2 * g * m * n * k

        def rate(key):
            return f"{flops / row[key] / 1e12:6.1f}" if row.get(key) else "     -"

        print(f"{name:16s} {proj:4s} n={n:5d} k={k:5d} g={g:2d} m={m:5d}  "
              + "  ".join(f"{p} {rate(f'grouped_{p}_s')}/{rate(f'dense_{p}_s')}" for p in ("fwd", "dgrad", "wgrad"))
              + f"  fp8 fwd {rate('grouped_fp8_fwd_s')}/{rate('dense_fp8_fwd_s')}  TFLOP/s grouped/dense"
              + (f"  errors: {row['errors']}" if row.get("errors") else ""), flush=True)
    meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "cuda": torch.version.cuda, "reps": a.reps,
            "method": "mean of reps back-to-back calls between CUDA events after 2 warm-up calls; random bf16 data"}
    a.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {a.out}: {len(rows)} shapes in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
