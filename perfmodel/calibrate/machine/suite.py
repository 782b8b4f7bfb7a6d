"""What calibration measures: the points of one run (`Suite`, `suite`) and the layer shapes they come from.

The regular GEMM grid written as the spec's own GEMM table (`Suite.table_axes`: every m x n x k of its axes,
spanning the shapes of the models below; `calibrate.machine.measured_tables`), a few irregular shapes, plus the weight
GEMMs of small models (CPU) or gpt2 / llama-3-8b (CUDA) at several token counts and tp degrees (`layer_gemms`, `gemm_shapes`), one layer's training step of each (`layer_mixes`, the mix the
memory-bandwidth fit predicts) and its elementwise kernels (`elementwise_shapes`), attention lengths,
streaming and collective sizes, collective group sizes (`group_sizes`), and how long to time each. The shapes
are the estimate's own (`cost.compute.operator_table`), so that a fitted number means what the estimate uses it for.
Imports no torch: `suite` loads it for the GEMM dtypes only; `bench` times the points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...cost.compute.operator_table import gemm_shapes as op_gemm_shapes
from ...cost.compute.operator_table import layer_families
from ...spec.model.config import ModelConfig
from ...spec.model.catalogue import load_model
from .raw import LayerMix

if TYPE_CHECKING:
    import torch

KiB, MiB = 2**10, 2**20
TABLE = "table"  # GemmPoint.source of the points of the GEMM table's grid

# Small models whose layer GEMMs the CPU calibration measures (the sizes the CPU executor trains):
# a GPT-2-like and a Llama-like block at hidden 256.
CPU_MODELS = [
    ModelConfig(name="tiny-gpt-256", n_layers=1, hidden=256, n_heads=4, ffn_hidden=1024, vocab=4096,
                max_seq_len=1024, mlp="gelu"),
    ModelConfig(name="tiny-llama-256", n_layers=1, hidden=256, n_heads=4, n_kv_heads=2, ffn_hidden=688,
                vocab=4096, max_seq_len=1024, mlp="swiglu", norm="rmsnorm", position="rope"),
]
CUDA_MODELS = ["gpt2-124m", "gpt2-350m", "gpt2-1.5b", "llama-3-8b"]


@dataclass(frozen=True)
class Suite:
    """The points of one calibration run and how long to time each."""

    table_axes: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # m, n, k of the GEMM table's grid
    gemm_grid: list[tuple[int, int, int]]  # irregular shapes beside it (tile and wave quantisation for the fit)
    models: list[ModelConfig]
    tokens: list[int]  # m of the layer GEMMs: tokens of one micro-batch
    tps: list[int]  # tensor-parallel degrees whose layer shards are measured
    lm_head: bool  # also the LM-head GEMM (n = vocab)
    gemm_dtypes: list[tuple[torch.dtype, str]]  # (torch dtype, plan precision it calibrates)
    attn_seqs: list[int]
    attn_heads: int
    attn_head_dim: int
    attn_tokens: int  # batch * seq of one attention call
    mem_elements: list[int]  # sizes of the copy / add streaming benchmarks
    vocab: int  # cross-entropy width: the model's vocabulary, at most this
    comm_sizes: list[int]  # bytes
    target_s: float  # time spent per point (all repeats)
    reps: int
    overlap_gemm: int  # side of the square GEMMs of the overlap benchmark's compute loop
    overlap_s: float  # its compute loop's time at most (it shrinks to the all-reduce's time where that is shorter)
    overlap_bytes: tuple[int, int, int]  # all-reduce message: first probe, smallest, largest
    overlap_reps: int


# Per rank: the weights the CPU GEMM table cycles through (bench.gemm), 32 x a core's 2 MiB L2 on this project's
# host (lscpu: 4 MiB in 2 instances) and about what the serving sweep's models hold a rank (~20-200 MB): each
# call's weight comes from beyond the core's own caches, as a forward's does.
COLD_POOL_BYTES = 64 << 20

def suite(device: str, quick: bool) -> Suite:
    """The points of a run on `device` ("cpu" or "cuda"); `quick`: fewer of them."""
    import torch  # the GEMM dtypes only: the shape functions here stay torch-free

    if device == "cpu":
        # the table: 16 (the host-cost probe's hidden) to 1024 (the CPU models' and sweeps' widths; the vocabulary
        # above it is priced compute-bound, scaled by FLOPs: spec.hardware.kernel_tables); m also at 1 and 4 rows, a served
        # decode step's tokens per rank (a GEMV costs a fraction of a 16-row GEMM on a CPU core)
        axis = (16, 64, 256, 1024) if quick else (16, 64, 256, 512, 1024)
        rect = [] if quick else [(2048, 128, 512), (100, 300, 500), (1000, 1000, 1000)]
        return Suite(
            table_axes=((1, 4, *axis), axis, axis), gemm_grid=rect, models=CPU_MODELS[:1] if quick else CPU_MODELS,
            tokens=[512] if quick else [256, 1024], tps=[1, 2] if quick else [1, 2, 4], lm_head=False,
            gemm_dtypes=[(torch.float32, "bf16")],
            attn_seqs=[64, 128, 256] if quick else [64, 128, 256, 512, 1024], attn_heads=4, attn_head_dim=64,
            attn_tokens=1024 if quick else 2048,
            mem_elements=[2**18, 2**20, 2**22] if quick else [2**16, 2**18, 2**20, 2**22, 2**24], vocab=4096,
            comm_sizes=[4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB] if quick else [4 * KiB * 4**i for i in range(8)],
            target_s=0.075 if quick else 0.25, reps=3 if quick else 5,
            overlap_gemm=256, overlap_s=0.05 if quick else 0.1, overlap_bytes=(4 * MiB, 1 * MiB, 64 * MiB),
            overlap_reps=5 if quick else 9)
    # the table spans CUDA_MODELS' layer GEMMs (`cuda_table_axes`); irregular shapes beside it for the tile fit
    rect = [] if quick else [(3072, 3072, 3072), (6144, 6144, 6144), (2000, 3000, 5000)]
    return Suite(
        table_axes=cuda_table_axes(quick), gemm_grid=rect,
        models=[load_model(n) for n in (CUDA_MODELS[::3] if quick else CUDA_MODELS)],
        tokens=[4096] if quick else [2048, 8192], tps=[1] if quick else [1, 2], lm_head=True,
        gemm_dtypes=[(torch.bfloat16, "bf16")] if quick else [(torch.bfloat16, "bf16"), (torch.float16, "fp16")],
        attn_seqs=[512, 2048, 8192] if quick else [256, 512, 1024, 2048, 4096, 8192], attn_heads=16,
        attn_head_dim=128, attn_tokens=16384,
        mem_elements=[2**22, 2**26] if quick else [2**22, 2**24, 2**26, 2**28], vocab=2**20,
        comm_sizes=[4 * KiB, 256 * KiB, 16 * MiB, 256 * MiB] if quick else [4 * KiB * 4**i for i in range(10)],
        target_s=0.02 if quick else 0.05, reps=3 if quick else 5,
        overlap_gemm=4096, overlap_s=0.05 if quick else 0.1, overlap_bytes=(64 * MiB, 16 * MiB, 1024 * MiB),
        overlap_reps=5 if quick else 9)


def cuda_table_axes(quick: bool) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """m, n, k of the CUDA GEMM table: powers of 2 (quick: of 4) spanning the layer GEMMs of CUDA_MODELS, 384 (a tp
    shard of GPT-2's hidden) to 14336 tokens or features (Llama 3 8B's FFN) and 28672 (its gated FFN input), so m
    from 256 to 16384 and n, k to 32768; the vocabulary beyond is priced compute-bound, scaled by FLOPs (the
    lookup's rule beyond a table: spec.hardware.kernel_tables)."""
    m = (512, 2048, 8192) if quick else tuple(256 * 2**i for i in range(7))
    return m, m + (32768,), m + (32768,)


def layer_gemms(model: ModelConfig, tokens: int, tp: int, lm_head: bool) -> list[tuple[int, int, int, str]]:
    """(m, n, k, label) of one layer's weight GEMMs on one tp rank, forward and backward, as the estimate costs
    them (`cost.compute.operator_table.gemm_shapes`: Megatron-LM's split; the backward of (m, n, k) is (m, k, n) and
    (k, n, m), `cost.compute.kernels.linear_op`)."""
    out = []
    for name, m, n, k in op_gemm_shapes(model, tokens, tp, lm_head):
        tag = f"{model.name} tp{tp} T{tokens} {name}"
        out += [(m, n, k, f"{tag} fwd"), (m, k, n, f"{tag} dgrad"), (k, n, m, f"{tag} wgrad")]
    return [s for s in out if min(s[:3]) > 0]


def table_shapes(s: Suite) -> list[tuple[int, int, int]]:
    """Every (m, n, k) of the GEMM table's grid (`Suite.table_axes`), in order."""
    return [(m, n, k) for m in s.table_axes[0] for n in s.table_axes[1] for k in s.table_axes[2]]


def gemm_shapes(s: Suite) -> list[tuple[int, int, int, str]]:
    """Distinct (m, n, k) of the table grid (labelled TABLE), the irregular shapes ('grid') and the layer GEMMs,
    first label kept."""
    seen, out = set(), []
    cands = [(m, n, k, TABLE) for m, n, k in table_shapes(s)] + [(m, n, k, "grid") for m, n, k in s.gemm_grid]
    for model in s.models:
        for T in s.tokens:
            for tp in s.tps:
                cands += layer_gemms(model, T, tp, s.lm_head)
    for m, n, k, label in cands:
        if (m, n, k) not in seen:
            seen.add((m, n, k))
            out.append((m, n, k, label))
    return out


def layer_param_shapes(model: ModelConfig, tp: int) -> list[tuple[int, ...]]:
    """Parameter tensors of one layer on one tp rank, as the executor builds them (perfmodel.execute.transformer:
    separate q, k, v, output, MLP-in (and gate), MLP-out linears; two norms)."""
    h, f, q, kv = model.hidden, model.ffn_hidden // tp, model.q_dim // tp, model.kv_dim // tp
    qkv_bias = model.linear_bias in ("qkv", "all")
    bias = model.linear_bias == "all"
    gate = model.gated
    shapes = [(q, h), (kv, h), (kv, h), (h, q), (f, h), (h, f)] + [(f, h)] * gate
    if qkv_bias:
        shapes += [(q,), (kv,), (kv,)]
    if bias:
        shapes += [(h,), (f,), (h,)] + [(f,)] * gate
    shapes += [(h,), (h,)] * (2 if model.norm == "layernorm" else 1)  # two norms: weight (and bias)
    return [s for s in shapes if min(s) > 0]


def layer_mixes(s: Suite) -> list[LayerMix]:
    """One layer's training step for each calibration model, token count and tp degree: GEMMs as
    `layer_gemms`; elementwise kernels as the estimate charges a layer without sequence parallelism
    (`cost.compute.operator_table.layer_families`: each norm on T x h, each residual add once in each direction on T x h,
    the activation on T x f/tp); one AdamW step over the layer's parameters on the rank."""
    n = layer_families()
    out = []
    for model in s.models:
        for T in s.tokens:
            for tp in s.tps:
                act = "swiglu" if model.gated else "gelu"
                params = sum(math.prod(p) for p in layer_param_shapes(model, tp))
                out.append(LayerMix(model=model.name, tokens=T, tp=tp,
                                    gemms=[g[:3] for g in layer_gemms(model, T, tp, lm_head=False)],
                                    elementwise=[("norm", [T, model.hidden], n["norm"]),
                                                 (act, [T, model.ffn_hidden // tp], n["activation"]),
                                                 ("add", [T * model.hidden], 2 * n["residual"]),
                                                 ("adam", [params], 1)]))
    return out


def elementwise_shapes(s: Suite) -> list[tuple[str, tuple[int, ...], ModelConfig, int]]:
    """Distinct (kernel, shape) of the layer mixes' elementwise kernels and of cross-entropy over (T, vocab)
    logits, first kept, each with the model and tp degree of its layer (whose parameters the AdamW step takes)."""
    seen, out = set(), []
    for layer in layer_mixes(s):
        model = next(m for m in s.models if m.name == layer.model)
        kernels = [(k, tuple(shape)) for k, shape, _ in layer.elementwise]
        kernels.append(("cross_entropy", (layer.tokens, min(model.vocab, s.vocab))))
        for kernel, shape in kernels:
            if (kernel, shape) not in seen:
                seen.add((kernel, shape))
                out.append((kernel, shape, model, layer.tp))
    return out


def group_sizes(nproc: int) -> list[int]:
    """2, 4, 8, ... up to nproc, and nproc itself."""
    sizes, g = [], 2
    while g <= nproc:
        sizes.append(g)
        g *= 2
    return sizes + ([nproc] if nproc > 1 and nproc not in sizes else [])
