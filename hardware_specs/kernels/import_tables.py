"""Copy the GEMM tables the cost model reads from the shared AIConfigurator data into this folder.

    python hardware_specs/kernels/import_tables.py [--source ../shared/data/kernels]

For each part, `<part>/gemm.csv.gz` keeps the rows of the dtypes a training plan computes in (bf16; per-tensor
fp8; NVFP4 where the part has it) and only the columns the lookup reads (dtype, m, n, k, latency_ms), sorted.
The system, device, framework and version of each table are the same on every row of the source; they are
recorded once, in `sources.csv` here, with the source file's own row count. The licence notice the data carry
is in README.md beside this script. Re-running it rewrites the same bytes (gzip without a timestamp).

It also writes `gemm_power.csv`: the board power measured while GEMMs of at least POWER_MIN_FLOPS run, per part
and dtype (`gemm_power_w` in the accelerator specs), from the shared data's supplementary tables, the only ones
timed with NVML power (B200, GB200, H200): each run long enough for 100 ms power samples to cover it.
"""

from __future__ import annotations

import argparse
import gzip
import io
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
PARTS = ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")  # the shared data's folders
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "fp4"}  # the source's dtype -> the plan's precision
COLUMNS = ["dtype", "m", "n", "k", "latency_ms"]
COMMIT = "095f58a"  # ai-dynamo/aiconfigurator snapshot the shared data were converted from (its README)


def import_part(source: Path, part: str) -> dict:
    """Write `part`'s compact GEMM table; its provenance row."""
    rows = pd.read_csv(source / part / "gemm.csv.gz")
    kept = rows[rows["dtype"].isin(list(DTYPES))].copy()
    kept_index = kept.index
    kept["dtype"] = kept["dtype"].map(DTYPES)
    kept = kept[COLUMNS].sort_values(COLUMNS[:4]).reset_index(drop=True)
    text = kept.to_csv(index=False, float_format="%.6g")
    out = HERE / part / "gemm.csv.gz"
    out.parent.mkdir(exist_ok=True)
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(text.encode())
    one = lambda col: "; ".join(sorted(rows.loc[kept_index, col].astype(str).unique()))
    return {"table": f"{part}/gemm.csv.gz", "source": f"AIConfigurator@{COMMIT}, shared/data/kernels/{part}/gemm.csv.gz",
            "device": one("device"),
            "framework": one("framework"), "framework_version": one("framework_version"),
            "kernel_source": one("kernel_source"), "source_rows": len(rows), "kept_rows": len(kept),
            "dtypes": ", ".join(sorted(kept["dtype"].unique())), "bytes": out.stat().st_size}


POWER_MIN_FLOPS = 1e12  # a layer GEMM of training (the built-in example's qkv is 1.7e11 per micro-batch and
# device, its mlp_in 9.6e11; 8B-70B models at 4-16k tokens per micro-batch run 1e12-1e13): kernels of a millisecond
# or more, where a 100 ms NVML sample sees the GEMM and not the gaps between graph replays


def gemm_power(source: Path) -> pd.DataFrame:
    """Median board power (W) over GEMMs of >= POWER_MIN_FLOPS per part and dtype, from the supplementary table
    with the most such rows for that part and dtype (the tables of one part disagree by framework: B200 bf16 reads
    704 W under TRT-LLM rc15's 42 rows and 982 W under vLLM 0.22's 1,631)."""
    rows = pd.read_csv(source / "supplementary" / "gemm_power_measured.csv.gz")
    rows = rows[(2.0 * rows["m"] * rows["n"] * rows["k"] >= POWER_MIN_FLOPS) & rows["dtype"].isin(list(DTYPES))]
    out = []
    for (part, dtype), g in rows.groupby(["system", "dtype"]):
        by_table = g.groupby(["framework", "framework_version"])
        (fw, ver), best = max(by_table, key=lambda kv: len(kv[1]))
        out.append({"part": part, "dtype": DTYPES[dtype], "power_w": round(float(best["power_w"].median()), 1),
                    "p25_w": round(float(best["power_w"].quantile(0.25)), 1),
                    "p75_w": round(float(best["power_w"].quantile(0.75)), 1),
                    "power_limit_w": round(float(best["power_limit_w"].median()), 1), "gemms": len(best),
                    "device": "; ".join(sorted(best["device"].unique())), "framework": fw, "framework_version": ver,
                    "source": f"AIConfigurator@{COMMIT}, shared/data/kernels/supplementary/gemm_power_measured.csv.gz"})
    return pd.DataFrame(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=HERE.parents[1].parent / "shared" / "data" / "kernels",
                    help="the shared data's kernels folder (default: ../shared/data/kernels from the repository)")
    a = ap.parse_args(argv)
    table = pd.DataFrame([import_part(a.source, part) for part in PARTS])
    buf = io.StringIO()
    table.to_csv(buf, index=False)
    (HERE / "sources.csv").write_text(buf.getvalue())
    print(table.to_string(index=False))
    print(f"{table['bytes'].sum() / 1e6:.2f} MB in {len(table)} tables")
    power = gemm_power(a.source)
    (HERE / "gemm_power.csv").write_text(power.to_csv(index=False))
    print(power[["part", "dtype", "power_w", "p25_w", "p75_w", "power_limit_w", "gemms", "framework",
                 "framework_version"]].to_string(index=False))


if __name__ == "__main__":
    main()
