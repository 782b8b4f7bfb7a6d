"""The power model's measured draws (spec.hardware.power_model.PowerModel idle_w, memory_w) from AIConfigurator's GEMM power runs.

    python benchmarks/power_constants.py [--csv ../shared/data/kernels/supplementary/gemm_power_measured.csv.gz]

NVIDIA AIConfigurator's collector (ai-dynamo/aiconfigurator@095f58a, collector/helper.py::benchmark_with_power) timed
every GEMM shape of its grid on H200, B200 and GB200 with the mean NVML board power over the timed window beside the
latency (../shared/data/kernels/README.md, "supplementary/gemm_power_measured.csv.gz"). Two kinds of its rows
stand for two of the model's kinds of time:
  - wait (idle_w): GEMMs of at most 512^3 that finish in under 5 us, replayed back to back: the device runs almost
    nothing, its clocks up and its context alive, as between a step's kernels while it waits;
  - memory (memory_w): GEMMs of at most 16 rows against weights of at least 4096 x 4096: they stream the weights
    from HBM (memory-bound), the draw of a bandwidth-bound kernel.
Prints, per device and dtype (vLLM 0.22.0's runs: the one framework that ran every device), the median and the
interquartile range of each, the rows behind it and the achieved HBM rate of the memory-bound ones.

Then the B200's GEMM loop (the clock a compute-bound loop keeps, `cost.power.loop_clock`): SimuMax timed Transformer
Engine's GEMMs back to back on one B200 node for its simulator (MooreThreads/SimuMax@4dcaae51
configs/system/b200_bf16_ceperm.json, `accurate_efficient_factor` of `matmul`, each a fraction of 2,250 TFLOP/s;
verbatim in benchmarks/data/simumax/); over this project's B200 kernel table's rate for the same shape (timed by
AIConfigurator's collector in short bursts), the median over its GEMMs of >= 1e12 FLOPs inside the table's grid.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

CSV = Path(__file__).resolve().parents[2] / "shared/data/kernels/supplementary/gemm_power_measured.csv.gz"
WAIT_MAX_SIDE, WAIT_MAX_US = 512, 5.0
MEMORY_MAX_ROWS, MEMORY_MIN_WEIGHTS = 16, 4096 * 4096


def kinds(df: pd.DataFrame) -> pd.DataFrame:
    """The wait and memory rows' draws per device and dtype (module docstring)."""
    df = df[df["framework"] == "vllm"]
    wait = df[(df[["m", "n", "k"]].max(axis=1) <= WAIT_MAX_SIDE) & (df["latency_ms"] * 1e3 < WAIT_MAX_US)]
    mem = df[(df["m"] <= MEMORY_MAX_ROWS) & (df["n"] * df["k"] >= MEMORY_MIN_WEIGHTS)]
    mem = mem.assign(tbps=2.0 * (mem["m"] * mem["k"] + mem["n"] * mem["k"] + mem["m"] * mem["n"])
                     / (mem["latency_ms"] * 1e-3) / 1e12)
    rows = []
    for (device, dtype), g in df.groupby(["device", "dtype"]):
        w, m = wait[(wait["device"] == device) & (wait["dtype"] == dtype)], mem[(mem["device"] == device)
                                                                                 & (mem["dtype"] == dtype)]
        rows.append({"device": device, "dtype": dtype, "limit_w": g["power_limit_w"].iloc[0],
                     "wait_w": w["power_w"].median(), "wait_p25": w["power_w"].quantile(0.25),
                     "wait_p75": w["power_w"].quantile(0.75), "wait_rows": len(w),
                     "memory_w": m["power_w"].median(), "memory_p25": m["power_w"].quantile(0.25),
                     "memory_p75": m["power_w"].quantile(0.75), "memory_rows": len(m),
                     "memory_tbps": m["tbps"].median()})
    return pd.DataFrame(rows)


SIMUMAX = Path(__file__).resolve().parent / "data/simumax/b200_bf16_ceperm.json"
LOOP_MIN_FLOPS = 1e12


def b200_loop(path: Path = SIMUMAX) -> pd.Series:
    """SimuMax's measured B200 GEMM rates over this project's B200 table at the same shapes (module docstring)."""
    import json
    import re

    from perfmodel.cost.compute.kernel_lookup import gemm_table_time
    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.spec.hardware.kernel_tables import gemm_grid

    op = json.loads(path.read_text())["accelerator"]["op"]["matmul"]
    grid = gemm_grid(load_hardware("dgx-b200").accelerator.kernel_tables["gemm"], "bf16")
    ratios = []
    for key, eff in op["accurate_efficient_factor"].items():
        g = dict(re.findall(r"(\w+)=(\w+)", key))
        b, m, k, n = (int(g[x]) for x in ("b", "m", "k", "n"))
        flops = 2.0 * b * m * n * k
        t, outside = gemm_table_time(grid, m, n, k, b)
        if flops < LOOP_MIN_FLOPS or bool(np.ravel(outside)[0]):
            continue
        ratios.append(eff * op["tflops"] / (flops / float(np.ravel(t)[0]) / 1e12))
    return pd.Series(ratios)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    a = ap.parse_args(argv)
    pd.set_option("display.width", 200)
    print(kinds(pd.read_csv(a.csv)).to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    r = b200_loop()
    print(f"\nB200 GEMM loop: SimuMax's back-to-back rates over the table's, {len(r)} GEMMs of >= 1e12 FLOPs in the "
          f"grid: median {r.median():.3f} (p25-p75 {r.quantile(0.25):.3f}-{r.quantile(0.75):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
