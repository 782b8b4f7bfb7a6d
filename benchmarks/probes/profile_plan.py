"""Where a plan's step goes on the device: the executor's own training step under torch.profiler, kernels
grouped by what they compute, against the cost model's breakdown of the same plan.

    python -m benchmarks.probes.profile_plan PLAN.json [PLAN.json ...] [--steps 6] [--out FILE.json]

One process, no process group (single-device plans). For each plan: the measured step (median of the profiled
steps, synchronised), the device's busy time (sum of kernel times), and the top kernels by device time, grouped
into GEMMs, attention, element-wise, optimizer and other by their names; then the estimate's parts (cost.step). This
is how the device side of the cost model is checked against what the GPU really runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict


def group_of(name: str) -> str:
    """A kernel's group by its name (cuBLAS / CUTLASS GEMMs, flash / cuDNN attention, the optimizer's
    multi-tensor kernels, element-wise and reductions)."""
    n = name.lower()
    if any(k in n for k in ("flash", "fmha", "attention", "sdpa", "cudnn_gen")):
        return "attention"
    if any(k in n for k in ("gemm", "cutlass", "sm90_xmma", "sm80_xmma", "cublas", "wgmma", "matmul", "gemv")):
        return "gemm"
    if any(k in n for k in ("multi_tensor", "adam", "foreach")):
        return "optimizer"
    if any(k in n for k in ("nll", "log_softmax", "softmax", "cross_entropy")):
        return "loss/softmax"
    if any(k in n for k in ("elementwise", "vectorized", "reduce", "layer_norm", "norm", "gelu", "copy", "fill",
                            "index", "embedding", "cat", "where", "triton")):
        return "element-wise"
    return "other"


def profile(path: str, steps: int, device) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile

    from perfmodel.cost.estimate import estimate
    from perfmodel.execute.data import Batches
    from perfmodel.execute.train import Trainer
    from perfmodel.spec.hardware.kernel_tables import spec_folder
    from perfmodel.spec.plan.file import load_plan_file

    pf = load_plan_file(path)
    trainer = Trainer(pf, device, seed=0)
    batches = Batches(pf.model.vocab, pf.plan.global_batch, pf.plan.seq_len, 0, None)
    for s in range(3):  # warm-up: allocator, cuBLAS heuristics, autotuning
        trainer.step(batches.step(s))
    torch.cuda.synchronize(device)
    walls = []
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for s in range(steps):
            t0 = time.perf_counter()
            trainer.step(batches.step(3 + s))
            torch.cuda.synchronize(device)
            walls.append(time.perf_counter() - t0)
    kernels = defaultdict(lambda: [0.0, 0])
    for evt in prof.events():
        if evt.device_type.name == "CUDA" and evt.name and not evt.name.startswith("Memcpy"):
            k = kernels[evt.name]
            k[0] += evt.device_time / 1e6 / steps  # us -> s per step
            k[1] += 1 / steps
    groups = defaultdict(float)
    for name, (t, _) in kernels.items():
        groups[group_of(name)] += t
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:25]
    with spec_folder(os.path.dirname(os.path.abspath(path))):
        e = estimate(pf.model, pf.hardware, pf.plan)
    parts = {k: v for k, v in e.time_s.model_dump().items() if isinstance(v, float) and v}
    return {"plan": os.path.basename(path), "step_s": statistics.median(walls), "busy_s": sum(groups.values()),
            "kernels_per_step": sum(c for _, c in kernels.values()), "groups_s": dict(groups),
            "top": [{"name": n[:140], "s": t, "calls": c, "group": group_of(n)} for n, (t, c) in top],
            "predicted_s": e.step_time_s, "predicted_parts_s": parts}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", help="write the results as JSON")
    a = ap.parse_args(argv)
    import torch

    device = torch.device("cuda", 0)
    out = {"environment": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(device)}, "plans": []}
    for path in a.plans:
        r = profile(path, a.steps, device)
        out["plans"].append(r)
        print(f"\n{r['plan']}: step {r['step_s'] * 1e3:.1f} ms, device busy {r['busy_s'] * 1e3:.1f} ms, "
              f"{r['kernels_per_step']:.0f} kernels; predicted {r['predicted_s'] * 1e3:.1f} ms")
        print("  measured by group (ms): " + ", ".join(f"{g} {t * 1e3:.1f}" for g, t in sorted(r["groups_s"].items())))
        print("  predicted parts (ms):   " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in r["predicted_parts_s"].items()
                                                    if k != "total"))
        for k in r["top"][:15]:
            print(f"    {k['s'] * 1e3:8.2f} ms {k['calls']:6.0f}x  {k['group']:13s} {k['name']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
