"""HybridEP's published dispatch and combine bandwidths as the systems' `ep_dispatch` / `ep_combine` fits, and
the flex dispatcher's price against them.

    python -m benchmarks.evals.flex_dispatch            # the table: published, fitted, and cost.compute.moe's time for each point
    python -m benchmarks.evals.flex_dispatch --yaml     # the by_group entries hardware_specs/systems carry

Source: deepseek-ai/DeepEP branch hybrid-ep @94a9f8f, docs/README_Hybrid-EP.md "Performance Results" (4096 tokens,
hidden 7168, top-8, uniform random routing, 8 local experts per rank, bf16 dispatch; "Kernel Only" columns: Megatron-
Core fuses the copy out of HybridEP's buffer into its permute, Megatron-LM docs/discussions/deepseek-v3-gb200-
optimization Sec. 2.5, which cost.compute.moe prices apart). Their "algorithm bandwidth" is the bytes a rank receives, its own
tokens included (tests/test_hybrid_ep.py: dispatched_hidden.numel() * 2), over the kernel's time. cost.compute.moe.
flex_dispatch_time sends (m - 1) block_hit(8) of a rank's T h 2 bytes over the tier; one message size is published,
so the fit is all bandwidth (latency 0: a dispatch kernel runs no ring steps, and training's 4096-8192 tokens per
micro-batch sit at the measured size): eff = (m - 1) / m x algbw / B, which reproduces the published time.
Nothing is fitted to a training run.
"""

from __future__ import annotations

import argparse

import pandas as pd

from perfmodel.cost.compute.moe import block_hit

TOKENS, HIDDEN, TOP_K, LOCAL = 4096, 7168, 8, 8
# (system, ranks, SMs, dispatch GB/s, combine GB/s): "Kernel Only", bf16 dispatch
PUBLISHED = [
    ("gb200-nvl72", 8, 32, 764.03, 737.13), ("gb200-nvl72", 16, 32, 706.95, 666.26),
    ("gb200-nvl72", 24, 32, 665.97, 639.80), ("gb200-nvl72", 32, 32, 642.23, 605.15),
    ("gb200-nvl72", 36, 32, 632.31, 596.99),
    ("dgx-b200", 8, 16, 734.95, 673.84),
]
LINK_GBPS = 900.0  # NVLink 5, each direction (the systems' nvlink bandwidth_gbps)


def hit(ranks: int) -> float:
    """Chance that a token's top-8 of the 8 x ranks experts include one of a rank's 8 (cost.compute.moe.block_hit)."""
    return block_hit(LOCAL * ranks, TOP_K, LOCAL)


def fitted(ranks: int, gbps: float) -> float:
    """The tier efficiency that makes cost.compute.moe's flex time, (m - 1) hit S / (eff B), equal the published kernel time
    m hit S / algbw at latency 0: (m - 1) / m x algbw / B."""
    return (ranks - 1) / ranks * gbps / LINK_GBPS


def table() -> pd.DataFrame:
    rows = []
    for system, ranks, sms, disp, comb in PUBLISHED:
        rows.append(dict(system=system, ranks=ranks, sms=sms, hit=round(hit(ranks), 4), dispatch_gbps=disp,
                         combine_gbps=comb, latency_us=0.0, ep_dispatch_eff=round(fitted(ranks, disp), 4),
                         ep_combine_eff=round(fitted(ranks, comb), 4)))
    return pd.DataFrame(rows)


def model_check(df: pd.DataFrame) -> pd.DataFrame:
    """cost.compute.moe.flex_dispatch_time on the catalogue's systems at each published point, against the published time."""
    from perfmodel.cost.layouts import Layouts
    from perfmodel.cost.compute.moe import flex_dispatch_time
    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.spec.model.catalogue import load_model
    from perfmodel.spec.plan.layout import Plan
    out = []
    for r in df.itertuples():
        system = load_hardware(r.system)
        base = load_model("deepseek-v3")
        model = base.model_copy(update=dict(hidden=HIDDEN, moe=base.moe.model_copy(update=dict(
            n_experts=LOCAL * r.ranks, top_k=TOP_K))))
        plan = Plan(gpus=r.ranks, tp=1, pp=1, dp=r.ranks, ep=r.ranks, micro_batch=1, global_batch=r.ranks,
                    seq_len=TOKENS, moe_dispatcher="flex")
        lay = Layouts.from_plan(plan)
        s = TOKENS * HIDDEN * 2 * r.ranks * r.hit
        for kind, gbps in (("ep_dispatch", r.dispatch_gbps), ("ep_combine", r.combine_gbps)):
            t = float(flex_dispatch_time(model, system, lay, kind)[0])
            nccl = float(flex_dispatch_time(model, system, lay, "all_to_all")[0])  # the all-to-all price the flex dispatcher replaced
            out.append(dict(system=r.system, ranks=r.ranks, kind=kind, published_ms=round(s / (gbps * 1e9) * 1e3, 3),
                            priced_ms=round(t * 1e3, 3), error_pct=round(100 * (t / (s / (gbps * 1e9)) - 1), 1),
                            nccl_all_to_all_ms=round(nccl * 1e3, 3),
                            nccl_error_pct=round(100 * (nccl / (s / (gbps * 1e9)) - 1), 1)))
    return pd.DataFrame(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--yaml", action="store_true", help="print the by_group entries for hardware_specs/systems")
    a = ap.parse_args(argv)
    df = table()
    if a.yaml:
        for system, g in df.groupby("system"):
            print(f"# {system}")
            for kind in ("ep_dispatch", "ep_combine"):
                print(f"      {kind}:")
                for r in g.itertuples():
                    print(f'        "{r.ranks}": {{collective_efficiency: {getattr(r, kind + "_eff")}, '
                          f'latency_us: {r.latency_us}}}')
        return 0
    pd.set_option("display.width", 200)
    print("HybridEP published kernel bandwidths (DeepEP hybrid-ep @94a9f8f) and the fitted tier efficiencies")
    print(df.to_string(index=False))
    print("\ncost.moe.flex_dispatch_time on the catalogue systems at the published points (bf16, 4096 tokens)")
    print(model_check(df).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
