"""Schemas of what a calibration measures and fits: the raw file `SPEC.raw.json` written beside the spec.

Times are seconds per call (the median of repeats after warm-up on each rank, then the median over ranks;
every rank's median is kept in `rank_seconds`). Sizes are bytes or element counts as named. This module
imports no torch: the benchmark workers write `Measurements`, the parent process fits and writes `RawFile`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from ...types import Schema
from ...files import read_json_object

VERSION = 1
CommKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"]


class Environment(Schema):
    """Where and with what the benchmarks ran."""

    device_type: Literal["cpu", "cuda"]
    device_name: str = Field(description="CPU model name or torch.cuda.get_device_name()")
    vendor: str
    host: str
    torch_version: str
    nproc: int = Field(description="ranks that ran the benchmarks at the same time")
    threads_per_rank: int | None = Field(description="torch.get_num_threads() on CPU; null on CUDA")
    cores: int | None = Field(None, description="CPUs the ranks could run on (execute.host.usable_cores), CPU only; "
                                                "null on CUDA and in raw files written before it was recorded")
    dtype: str = Field(description="compute dtype of the GEMM/attention/elementwise benchmarks")
    backend: str | None = Field(description="torch.distributed backend of the collectives; null for one rank")
    memory_total_bytes: float = Field(description="CPU: MemTotal of the host; CUDA: device memory torch reports")
    baseline_bytes: float = Field(
        description="CPU: resident memory (VmRSS) of a rank after import torch and process-group setup; "
                    "CUDA: device memory in use but not reserved by torch's allocator (context, NCCL, libraries)")
    started_at: str = Field(description="UTC time the benchmarks started, ISO 8601")


class GemmPoint(Schema):
    """C[m,n] = A[m,k] @ B[k,n] in `dtype`, calibrating the plan precision `precision`."""

    m: int
    n: int
    k: int
    dtype: str
    precision: str = Field(description="plan precision whose matmul_max this point calibrates")
    source: str = Field(description="'table' (a point of the regular grid written as the spec's GEMM table), 'grid' "
                                     "(an irregular shape), or the model/op whose layer GEMM this is, e.g. "
                                     "'gpt2-124m qkv fwd'")
    seconds: float
    rank_seconds: list[float]


class AttentionPoint(Schema):
    """Causal scaled_dot_product_attention on (batch, heads, seq, head_dim) q, k, v: forward + backward (the fit of
    attention_max), or the forward alone (the attention table, `measured_tables.attention_table_text`)."""

    batch: int
    heads: int
    seq: int
    head_dim: int
    dtype: str
    passes: Literal["forward_backward", "forward"] = Field(
        "forward_backward", description="what one call ran (raw files from before the table: forward_backward)")
    seconds: float
    rank_seconds: list[float]


class MemoryPoint(Schema):
    """A kernel the estimate charges by bytes: `stream` points (copy, add over growing sizes) measure bandwidth;
    `layer` points are the calibration models' layer ops (norm, gelu, swiglu, cross_entropy: forward +
    backward; add: one residual add; adam: one step of the executor's fused AdamW,
    `perfmodel.execute.parallel.data.adamw`, over a layer's parameters)."""

    kernel: Literal["copy", "add", "norm", "gelu", "swiglu", "cross_entropy", "adam"]
    purpose: Literal["stream", "layer"]
    elements: int = Field(description="elements of the kernel's output (cross_entropy: logits; adam: parameters)")
    shape: list[int]
    dtype: str
    bytes_moved: float = Field(description="stream points: bytes read and written at `dtype`; layer points: 0")
    seconds: float
    rank_seconds: list[float]


class CommPoint(Schema):
    """One collective (or a ring shift of send/recv) over groups of `group_size` consecutive ranks, all
    `groups` groups at once. `size_bytes` is the cost model's message size: the full (un-sharded) tensor."""

    kind: CommKind
    group_size: int
    groups: int
    size_bytes: int
    dtype: str
    seconds: float
    rank_seconds: list[float]


class OverlapRun(Schema):
    """How much of an all-reduce runs concurrently with compute: every rank at once times a loop of `gemm_calls`
    GEMMs alone (compute_s), an all-reduce of `size_bytes` over all ranks alone (comm_s), and the all-reduce
    started asynchronously, the same loop, then its wait (both_s). One entry per repeat, each the slowest
    rank's time; the repeats interleave the three so that they sample the same load."""

    gemm: tuple[int, int, int] = Field(description="(m, n, k) of each GEMM of the compute loop")
    gemm_calls: int
    dtype: str = Field(description="dtype of the GEMMs and of the all-reduced tensor")
    size_bytes: int = Field(description="bytes of the all-reduced tensor (the full message)")
    group_size: int = Field(description="ranks in the all-reduce (all of them)")
    compute_s: list[float]
    comm_s: list[float]
    both_s: list[float]


class LayerMix(Schema):
    """One training step of one transformer layer of a calibration model on one tp rank (one micro-batch of
    `tokens`, no sequence parallelism) as the estimate costs it: the GEMM shapes of its linears (forward,
    dgrad, wgrad), and its elementwise kernels and AdamW update (shape [parameters]) with how often each
    runs."""

    model: str
    tokens: int
    tp: int
    gemms: list[tuple[int, int, int]]
    elementwise: list[tuple[str, list[int], int]] = Field(description="(kernel, shape, times per layer)")


class Measurements(Schema):
    """Everything the benchmark run measured (written by rank 0 of the workers)."""

    env: Environment
    gemm: list[GemmPoint]
    attention: list[AttentionPoint]
    memory: list[MemoryPoint]
    comm: list[CommPoint]
    layers: list[LayerMix] = Field(default_factory=list, description="layers whose GEMMs and elementwise "
                                                                     "kernels were all measured")
    overlap: OverlapRun | None = Field(None, description="all-reduce beside compute (absent for one rank and in "
                                                         "raw files written before it was measured)")
    bench_s: float = Field(description="wall seconds of the benchmarks on rank 0")


class FitPoint(Schema):
    """One measurement against what the fitted cost-model formula predicts for it."""

    quantity: Literal["gemm", "attention", "memory", "comm", "layer"]
    kind: str = Field(description="gemm: precision; attention: 'sdpa'; memory: kernel; comm: collective kind")
    label: str
    measured_s: float
    predicted_s: float

    @property
    def rel_error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


class Residuals(Schema):
    """Fit quality of one kind of measurement: relative errors predicted / measured - 1."""

    quantity: str
    kind: str
    points: int
    median_abs_error: float
    max_abs_error: float
    bias: float = Field(description="geometric mean of predicted / measured, minus 1 (> 0: the fit predicts slower)")


class KindNetworkFit(Schema):
    """One collective kind fitted on its own points (`NetworkTier.by_kind` in the spec)."""

    latency_s: float = Field(description="per-step latency of this kind")
    bus_bandwidth: float = Field(description="bytes/s this kind's ring formula sees")
    best_bus_bandwidth: float = Field(description="highest bus bandwidth of any single measurement of this kind")
    points: int = Field(description="measurements fitted")
    shared_median_abs_error: float = Field(description="median |predicted / measured - 1| of these points under "
                                                       "the shared fit (what fitting the kind apart removes)")


class NetworkFit(Schema):
    """The innermost tier as the ring formulas of perfmodel.cost.comm.collectives see it: one (latency, bus bandwidth) for
    all kinds, and each kind's own where it could be fitted apart."""

    latency_s: float = Field(description="per-step latency of a ring collective (and of one send)")
    bus_bandwidth: float = Field(description="bytes/s = bandwidth_gbps * collective_efficiency * 1e9")
    best_bus_bandwidth: float = Field(description="highest bus bandwidth of any single measurement, bytes/s "
                                                  "(NCCL-tests convention: ring bytes per device / time)")
    by_kind: dict[CommKind, KindNetworkFit] = Field(default_factory=dict, description="kinds fitted apart")
    fallback: dict[CommKind, str] = Field(default_factory=dict,
                                          description="measured kinds not fitted apart (they use the shared "
                                                      "values), and why")
    by_group: dict[CommKind, dict[str, KindNetworkFit]] = Field(
        default_factory=dict, description="kinds fitted per group size (\"2\", \"4\", ...: `NetworkTier.by_group`), "
                                          "where every group size measured fitted cleanly (calibrate.machine.measured_tables); "
                                          "shared_median_abs_error: under the kind's fit over all group sizes")
    group_fallback: dict[CommKind, str] = Field(default_factory=dict,
                                                description="measured kinds not fitted per group size, and why")


class FitResult(Schema):
    """Fitted efficiency parameters (the meaning of each is the spec field's; see perfmodel.spec.hardware.system)."""

    peak_flops: dict[str, float] = Field(description="the peak each matmul_max is a fraction of, FLOP/s")
    matmul_max: dict[str, float]
    matmul_tile: tuple[int, int]
    compute_units: int
    attention_max: float
    attention_half_seq: float
    peak_bandwidth: float = Field(description="memory bandwidth memory_bandwidth is a fraction of, bytes/s")
    best_stream_bandwidth: float = Field(description="best copy/add bandwidth measured, bytes/s")
    gemm_bandwidth: float = Field(description="bandwidth (estimate's bytes/s) of the GEMM roofline while fitting "
                                              "matmul_max: the streaming bandwidth in the estimate's bytes")
    memory_bandwidth: float
    optimizer_bandwidth: float | None = Field(None, description="fraction of peak_bandwidth the fused AdamW step "
                                                                "reaches (cost.memory.states.adam_step_bytes); None: not measured")
    layer_errors: list[FitPoint] = Field(default_factory=list,
                                         description="whole-layer time (GEMMs + elementwise) measured vs predicted")
    network: NetworkFit | None
    comm_overlap: float | None = Field(None, description="fraction of an all-reduce that ran beside compute "
                                                         "(median over repeats); null where not measured")
    points: list[FitPoint]
    residuals: list[Residuals]


class RawFile(Schema):
    """`SPEC.raw.json`: provenance, every raw timing, the fit and its residuals."""

    version: int = VERSION
    created_at: str
    command: str = Field(description="the perfmodel calibrate command that wrote this file")
    spec_file: str
    system: str = Field(description="name of the system written to spec_file")
    quick: bool
    wall_s: float = Field(description="seconds the whole calibration took (launch, benchmarks, fit)")
    measurements: Measurements
    fit: FitResult


def load_raw(path: str | Path) -> RawFile:
    """Read a raw calibration file (InputError with one line if it is missing or malformed)."""
    path = Path(path)
    data = read_json_object(path, "calibration raw file")
    return RawFile.parse(data, where=f"calibration raw file {path}")
