"""Copy the GEMM, attention and NCCL tables the cost model reads from the shared AIConfigurator data into this folder.

    python hardware_specs/kernels/import_tables.py [--source ../shared/data/kernels]

For each part, `<part>/gemm.csv.gz` keeps the rows of the dtypes a training plan computes in (bf16; per-tensor
fp8; NVFP4 where the part has it) and only the columns the lookup reads (dtype, m, n, k, latency_ms), sorted.
The system, device, framework and version of each table are the same on every row of the source; they are
recorded once, in `sources.csv` here, with the source file's own row count. The licence notice the data carry
is in README.md beside this script. Re-running it rewrites the same bytes (gzip without a timestamp).

It copies each part's NCCL table (`<part>/nccl.csv.gz`: op, GPUs, message bytes, latency; nccl-tests out-of-place
times of fp16 buffers, 512 B to 512 MiB, on 2, 4 and 8 GPUs of one node) and writes `nccl_fits.csv`: per part,
collective and group size, the ring formula's per-step latency and bus bandwidth fitted to the messages of at least
NCCL_MIN_BYTES (`perfmodel.calibrate.machine.fit.fit_network`, the fit `perfmodel calibrate` makes of its own timings),
which the systems' innermost tiers quote as `by_group`.

It copies each part's context-attention table (`<part>/attention.csv.gz`: head_dim, isl, batch, heads,
latency_ms; the forward of causal bf16 attention over isl-token prompts, `import_attention`), which
`spec.hardware.kernel_tables.attention_grid` turns into throughput by head dim, length and parallel work.

It copies each part's MoE table (`<part>/moe.csv.gz`, `import_moe`: TensorRT-LLM's fused MoE forward by model
shape, moe_tp x moe_ep slice and tokens), which prices a serving step's MoE layers (`perfmodel.serve.step_time`).

It copies each part's all-reduce table (`<part>/allreduce.csv.gz`, `import_allreduce`: the serving engines' own
NVLink all-reduce on 2, 4 and 8 GPUs by message bytes), which prices a serving step's tensor-parallel all-reduces.

It copies each part's decode-attention table (`<part>/decode_attention.csv.gz`, `import_decode_attention`: one new
token per sequence over its past KV cache, by KV dtype, head dim, heads on the GPU, batch and past tokens), which
prices a serving step's decode attention.

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


def write_gz(out: Path, text: str) -> None:
    """`text` gzipped into `out`, byte for byte the same on every run (no timestamp, no file name)."""
    out.parent.mkdir(exist_ok=True)
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(text.encode())


def provenance(part: str, table: str, source: str, described: pd.DataFrame, source_rows: int, kept_rows: int,
               dtypes: str) -> dict:
    """One row of sources.csv: the table written, its source file, and the device, framework, version and kernel
    of the rows it was made from (the same on every row of a source)."""
    one = lambda col: "; ".join(sorted(described[col].astype(str).unique()))  # noqa: E731
    return {"table": f"{part}/{table}", "source": f"AIConfigurator@{COMMIT}, shared/data/kernels/{part}/{source}",
            "device": one("device"), "framework": one("framework"), "framework_version": one("framework_version"),
            "kernel_source": one("kernel_source"), "source_rows": source_rows, "kept_rows": kept_rows,
            "dtypes": dtypes, "bytes": (HERE / part / table).stat().st_size}


def import_part(source: Path, part: str) -> dict:
    """Write `part`'s compact GEMM table; its provenance row."""
    rows = pd.read_csv(source / part / "gemm.csv.gz")
    kept = rows[rows["dtype"].isin(list(DTYPES))].copy()
    kept_index = kept.index
    kept["dtype"] = kept["dtype"].map(DTYPES)
    kept = kept[COLUMNS].sort_values(COLUMNS[:4]).reset_index(drop=True)
    text = kept.to_csv(index=False, float_format="%.6g")
    out = HERE / part / "gemm.csv.gz"
    write_gz(out, text)
    return provenance(part, "gemm.csv.gz", "gemm.csv.gz", rows.loc[kept_index], len(rows), len(kept),
                      ", ".join(sorted(kept["dtype"].unique())))


ATTENTION_COLUMNS = ["head_dim", "isl", "batch", "heads", "latency_ms"]
ATTENTION_KERNELS = {"torch_flow": "native", "vllm_flash_attn": "flash-attn-2"}  # collector's kernel -> the
# family the cost model names it by (spec.hardware.system.Accelerator.attention_table_kernel): TRT-LLM's TrtllmAttention
# backend runs its own Hopper/Blackwell FMHA; vLLM's A100 backend runs FlashAttention-2


def import_attention(source: Path, part: str) -> dict:
    """Write `part`'s compact context-attention table: bf16 compute and KV cache, full causal attention (no
    window), the collector's default backend (not TRT-LLM's FlashInfer one); the median latency over the rows
    that differ only in KV heads (GQA: the FLOPs are the query heads') or repeat a key (A100). Its provenance."""
    rows = pd.read_csv(source / part / "attention_context.csv.gz")
    keep = (rows["attn_dtype"] == "bfloat16") & (rows["kv_cache_dtype"] == "bfloat16") \
        & rows["kernel_source"].isin(list(ATTENTION_KERNELS))
    if "window_size_tokens" in rows:
        keep &= rows["window_size_tokens"].fillna(0) == 0
    kept = rows[keep].rename(columns={"isl_tokens": "isl", "batch_size": "batch", "num_q_heads": "heads"})
    table = kept.groupby(ATTENTION_COLUMNS[:4])["latency_ms"].median().reset_index()
    out = HERE / part / "attention.csv.gz"
    write_gz(out, table.to_csv(index=False, float_format="%.6g"))
    return provenance(part, "attention.csv.gz", "attention_context.csv.gz", kept, len(rows), len(table), "bf16")


ATTENTION_LEFT_OUT = {"a100_sxm"}  # vLLM 0.14's FlashAttention-2 forward (varlen, with the paged KV-cache write)
# reaches 175-179 TFLOP/s at head dim 128 on long prompts, below the training kernel's own measurement that
# dgx-a100-80gb's attention_max cites (FlashAttention-2, Dao 2023 Fig. 4: 187-190 TFLOP/s forward AND backward),
# so it would price A100 training attention ~16% slower than FlashAttention-2 measures it; the dev set agrees
# (MosaicML MPT on A100 80GB at 16k-64k tokens: +10-18% slower than measured with it, +3-6% without)


MOE_COLUMNS = ["dtype", "hidden", "inter", "topk", "experts", "tp", "ep", "tokens", "latency_ms"]
# The fused-MoE kernels TensorRT-LLM offers per dtype: its CUTLASS path for all, and for NVFP4 also the TRTLLM-Gen
# "min latency" kernels, which TensorRT-LLM's TRTLLM MoE backend runs on Blackwell and vLLM and SGLang run through
# FlashInfer's trtllm-gen fused MoE (their NVFP4 MoE default there): an engine takes the faster, so the table keeps
# the faster of the two at each shape, slice and token count (2-4x faster at a few hundred tokens on B200)
MOE_KERNELS = ("moe_torch_flow_cutlass", "moe_torch_flow_min_latency", "deepgemm")
# DeepSeek-style fp8 checkpoints (128 x 128 weight blocks, per-token-group activation scales: DeepSeek-V3, Kimi,
# Qwen3 FP8, MiniMax-M2, GLM FP8) run the block-scaled MoE: TensorRT-LLM's CUTLASS on Hopper, DeepGEMM on
# Blackwell (the collector's kernel_source), as vLLM's and SGLang's DeepGEMM / block fp8 paths do; kept as fp8_block
MOE_DTYPES = DTYPES | {"fp8_block": "fp8_block"}
MOE_LEFT_OUT = {"a100_sxm"}  # SGLang's Triton fused MoE, not TensorRT-LLM's kernels that the serving stacks price


def import_moe(source: Path, part: str) -> dict:
    """Write `part`'s compact MoE table: TensorRT-LLM's fused MoE forward (routing, permutation, the gated grouped
    GEMMs, finalize; no communication; MOE_KERNELS) under balanced routing, in the plan precisions (bf16,
    per-tensor fp8, NVFP4) and block-scaled fp8 (fp8_block), by model shape (hidden, per-expert inter size, top-k, experts), the one GPU's moe_tp x
    moe_ep slice and tokens entering the layer; the median over repeated keys of one kernel, the faster kernel
    where two were timed. Its provenance."""
    rows = pd.read_csv(source / part / "moe.csv.gz")
    keep = (rows["distribution"] == "balanced") & rows["kernel_source"].isin(MOE_KERNELS) \
        & rows["moe_dtype"].isin(list(MOE_DTYPES))
    kept = rows[keep].rename(columns={"moe_dtype": "dtype", "hidden_size": "hidden", "inter_size": "inter",
                                      "num_experts": "experts", "moe_tp_size": "tp", "moe_ep_size": "ep",
                                      "num_tokens": "tokens"})
    kept["dtype"] = kept["dtype"].map(MOE_DTYPES)
    table = (kept.groupby(MOE_COLUMNS[:-1] + ["kernel_source"])["latency_ms"].median()
             .groupby(level=list(range(len(MOE_COLUMNS) - 1))).min().reset_index())
    out = HERE / part / "moe.csv.gz"
    write_gz(out, table.to_csv(index=False, float_format="%.6g"))
    return provenance(part, "moe.csv.gz", "moe.csv.gz", kept, len(rows), len(table),
                      ", ".join(sorted(table["dtype"].unique())))


def import_allreduce(source: Path, part: str) -> dict:
    """Write `part`'s compact all-reduce table: the serving engines' own one-/two-shot all-reduce over NVLink (the
    collector's TensorRT-LLM AllReduce with strategy AUTO; on A100 the framework's custom all-reduce), bf16, by
    GPUs and message bytes, latency per call. Its provenance."""
    rows = pd.read_csv(source / part / "custom_allreduce.csv.gz")
    table = rows.rename(columns={"num_gpus": "gpus", "message_bytes": "bytes"})
    table = table.groupby(["gpus", "bytes"])["latency_ms"].median().reset_index()
    out = HERE / part / "allreduce.csv.gz"
    write_gz(out, table.to_csv(index=False, float_format="%.6g"))
    return provenance(part, "allreduce.csv.gz", "custom_allreduce.csv.gz", rows, len(rows), len(table), "bf16")


DECODE_COLUMNS = ["kv_bytes", "head_dim", "q_heads", "kv_heads", "batch", "past", "latency_ms"]
KV_BYTES = {"bfloat16": 2, "fp8": 1}  # the KV cache's bytes per element (fp8 is e4m3)


def import_decode_attention(source: Path, part: str) -> dict:
    """Write `part`'s compact decode-attention table: one new token per sequence attending its past KV cache (the
    collector's generation_attention: TensorRT-LLM's XQA/MMHA kernels with the fused RoPE and KV-cache write; on
    A100 vLLM's FlashAttention-2 with its cache update), full attention (no window), by KV bytes per element, head
    dim, query and kv heads on the GPU, batch and past tokens, latency per layer call. Its provenance."""
    rows = pd.read_csv(source / part / "attention_generation.csv.gz")
    if "window_size_tokens" in rows:
        rows = rows[rows["window_size_tokens"].fillna(0) == 0]
    table = rows.assign(kv_bytes=rows["kv_cache_dtype"].map(KV_BYTES)).rename(columns={
        "num_q_heads": "q_heads", "num_kv_heads": "kv_heads", "batch_size": "batch", "past_kv_tokens": "past"})
    table = table.groupby(DECODE_COLUMNS[:-1])["latency_ms"].median().reset_index()
    out = HERE / part / "decode_attention.csv.gz"
    write_gz(out, table.to_csv(index=False, float_format="%.6g"))
    return provenance(part, "decode_attention.csv.gz", "attention_generation.csv.gz", rows, len(rows), len(table),
                      "; ".join(sorted(rows["kv_cache_dtype"].astype(str).unique())))


POWER_MIN_FLOPS = 1e12  # a layer GEMM of training (the built-in example's qkv is 1.7e11 per micro-batch and
# device, its mlp_in 9.6e11; 8B-70B models at 4-16k tokens per micro-batch run 1e12-1e13): kernels of a millisecond
# or more, where a 100 ms NVML sample sees the GEMM and not the gaps between graph replays


NCCL_MIN_BYTES = 2**20  # training's collectives: tensor-parallel activations (1-500 MB), gradient buckets (10s of
# MB and up); below a MiB NCCL switches protocols (LL, LL128) and the ring's one latency term cannot follow both
NCCL_OPS = {"all_gather": "all_gather", "reduce_scatter": "reduce_scatter", "all_reduce": "all_reduce",
            "alltoall": "all_to_all"}  # nccl-tests' name -> the cost model's collective kind
SYSTEMS = {"a100_sxm": "dgx-a100-80gb", "h100_sxm": "dgx-h100", "h200_sxm": "dgx-h200", "b200_sxm": "dgx-b200",
           "b300_sxm": "dgx-b300", "gb200": "gb200-nvl72", "gb300": "gb300-nvl72"}  # the catalogue's system per part


def import_nccl(source: Path, part: str) -> pd.DataFrame:
    """Write `part`'s compact NCCL table (fp16 buffers: the bytes a bf16 tensor moves); its fits per kind and
    group size on messages of >= NCCL_MIN_BYTES."""
    from perfmodel import load_hardware
    from perfmodel.calibrate.machine.fit import fit_network
    from perfmodel.calibrate.machine.raw import CommPoint

    rows = pd.read_csv(source / part / "nccl.csv.gz")
    kept = rows[rows["dtype"] == "half"][["op", "num_gpus", "message_bytes", "latency_ms"]]
    kept = kept.sort_values(["op", "num_gpus", "message_bytes"]).reset_index(drop=True)
    text = kept.to_csv(index=False, float_format="%.6g")
    with open(HERE / part / "nccl.csv.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9,
                                                                      mtime=0, filename="") as gz:
        gz.write(text.encode())
    system = load_hardware(SYSTEMS[part])
    big = kept[kept["message_bytes"] >= NCCL_MIN_BYTES]
    out = []
    for n, g in big.groupby("num_gpus"):
        points = [CommPoint(kind=NCCL_OPS[r.op], group_size=int(n), groups=1, size_bytes=int(r.message_bytes),
                            dtype="bf16", seconds=float(r.latency_ms) * 1e-3, rank_seconds=[]) for r in g.itertuples()]
        net, fitted = fit_network(points, system, int(kept["num_gpus"].max()))
        for kind, fit in net.by_kind.items():
            errors = [abs(f.predicted_s / f.measured_s - 1) for f, p in zip(fitted, points) if p.kind == kind]
            out.append({"part": part, "system": system.name, "kind": kind, "group_size": int(n),
                        "latency_us": round(fit.latency_s * 1e6, 3), "bus_bandwidth_gbps": round(fit.bus_bandwidth / 1e9, 1),
                        "points": fit.points, "median_abs_error": round(float(pd.Series(errors).median()), 4),
                        "max_abs_error": round(max(errors), 4), "min_bytes": NCCL_MIN_BYTES,
                        "max_bytes": int(g["message_bytes"].max()),
                        "nccl_version": "; ".join(sorted(rows["nccl_version"].astype(str).unique()))})
    return pd.DataFrame(out)


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
    table = pd.DataFrame([import_part(a.source, part) for part in PARTS]
                         + [import_attention(a.source, part) for part in PARTS if part not in ATTENTION_LEFT_OUT]
                         + [import_moe(a.source, part) for part in PARTS if part not in MOE_LEFT_OUT]
                         + [import_allreduce(a.source, part) for part in PARTS]
                         + [import_decode_attention(a.source, part) for part in PARTS])
    buf = io.StringIO()
    table.to_csv(buf, index=False)
    (HERE / "sources.csv").write_text(buf.getvalue())
    print(table.to_string(index=False))
    print(f"{table['bytes'].sum() / 1e6:.2f} MB in {len(table)} tables")
    fits = pd.concat([import_nccl(a.source, part) for part in PARTS], ignore_index=True)
    (HERE / "nccl_fits.csv").write_text(fits.to_csv(index=False))
    print(fits.to_string(index=False))
    power = gemm_power(a.source)
    (HERE / "gemm_power.csv").write_text(power.to_csv(index=False))
    print(power[["part", "dtype", "power_w", "p25_w", "p75_w", "power_limit_w", "gemms", "framework",
                 "framework_version"]].to_string(index=False))


if __name__ == "__main__":
    main()
