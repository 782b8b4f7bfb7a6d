"""How far the datasheet GEMM path is from the measured tables, per part and precision.

    python benchmarks/gemm_tables.py [--models llama-3-8b,llama-3-70b,...] [--tokens 2048,4096,8192,16384]

For the dense layer GEMMs of each model (fused QKV, attention output, MLP in and out, Y[m, n] = X[m, k] W[n, k]^T)
at tensor parallelism 1, 2, 4 and 8 (cost.compute.operator_table.gemm_shapes: weights split as Megatron-LM splits them)
and m tokens per micro-batch on the device, price every forward GEMM twice: by the datasheet path the cost model
takes where a part has no table (`cost.compute.kernel_time.gemm_time` with the system's efficiency and the operand widths
`cost.compute.kernels.Device.datasheet_gemm` passes: peak x matmul_max, tile and wave quantisation, roofline; the microbenchmark rate, without the step's
sustained_fraction, since the tables are microbenchmarks too) and by the part's measured
table (`cost.compute.kernel_lookup.gemm_table_time`). Prints, per system and precision, the ratio table / datasheet over all
shapes (median, 10th and 90th percentile) and the FLOP-weighted ratio (what a step's GEMM time would move by).
A ratio above 1: the measured kernels are slower than the datasheet path says. No fit, no published run.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from perfmodel import load_hardware, load_model
from perfmodel.cost.compute.kernel_time import gemm_time
from perfmodel.cost.compute.kernel_lookup import gemm_table_time
from perfmodel.cost.compute.kernels import ACT_BYTES, GEMM_INPUT_BYTES
from perfmodel.cost.compute.operator_table import gemm_shapes
from perfmodel.spec.hardware.kernel_tables import gemm_grid

SYSTEMS = ("dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72")
MODELS = ("gpt2-1.5b", "llama-3-8b", "llama-3-70b", "llama-3.1-405b", "gpt3-175b")
TOKENS = (2048, 4096, 8192, 16384)


def shapes(model_names, tokens) -> pd.DataFrame:
    """(model, tp, gemm, m, n, k) of every forward layer GEMM (cost.compute.operator_table.gemm_shapes: Megatron-LM's split
    on one tp rank)."""
    rows = [dict(model=name, tp=tp, gemm=op, m=m, n=n, k=k) for name in model_names for tp in (1, 2, 4, 8)
            for t in tokens for op, m, n, k in gemm_shapes(load_model(name), t, tp, lm_head=False)]
    return pd.DataFrame(rows)


def compare(systems, model_names, tokens) -> pd.DataFrame:
    s = shapes(model_names, tokens)
    out = []
    for name in systems:
        system = load_hardware(name)
        a, e = system.accelerator, system.efficiency
        if "gemm" not in a.kernel_tables:
            continue
        for precision in ("bf16", "fp8", "fp4"):
            if precision not in a.peak_tflops or precision not in e.matmul_max:
                continue
            datasheet = gemm_time(s.m, s.n, s.k, a.peak_flops(precision), e.matmul_max[precision], *e.matmul_tile,
                                  a.compute_units, a.hbm_bandwidth * e.memory_bandwidth,
                                  in_bytes=GEMM_INPUT_BYTES[precision], out_bytes=ACT_BYTES)
            table, outside = gemm_table_time(gemm_grid(a.kernel_tables["gemm"], precision), s.m, s.n, s.k)
            ratio = table / datasheet
            flops = 2 * s.m * s.n * s.k
            out.append({"system": name, "precision": precision, "shapes": len(s), "outside grid": int(outside.sum()),
                        "median": np.median(ratio), "p10": np.percentile(ratio, 10), "p90": np.percentile(ratio, 90),
                        "FLOP-weighted": float((table).sum() / (datasheet).sum()),
                        "table TFLOP/s (weighted)": float(flops.sum() / table.sum() / 1e12)})
    return pd.DataFrame(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    a = ap.parse_args(argv)
    table = compare(SYSTEMS, a.models.split(","), [int(t) for t in a.tokens.split(",")])
    print("GEMM time, measured table / datasheet path (ratio > 1: the measured kernels are slower)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
