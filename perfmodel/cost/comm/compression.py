"""Data-parallel gradient compression (`Plan.grad_compression`): what the gradient collectives carry and what the
compression costs in kernels and memory.

  none      gradients travel in their accumulation dtype (`Plan.grad_dtype`)
  bf16      cast to bf16 before the reduction and back after (torch DDP `bf16_compress_hook`, FSDP2
            `MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)`)
  powersgd  rank-r PowerSGD (Vogels et al. 2019, "PowerSGD: Practical low-rank gradient compression for
            distributed optimization", NeurIPS, Algorithm 1; torch DDP `powerSGD_hook`): each m x n gradient
            matrix M (plus its error-feedback residual) is sent as P = M Q (m x r) and Q = M^T P (n x r), both
            all-reduced; torch compresses a matrix only when 2 r (m + n) < m n (PowerSGDState
            min_compression_rate = 2) and all-reduces vectors and small matrices whole.

Only data-parallel gradient collectives are compressed (DDP's buckets, FSDP2's reduce-scatter): the tensor-
parallel all-reduce of sequence-parallel weights and the sync of the embedding's pipeline copies stay in the
accumulation dtype, and with one replica (dp x cp = 1) there is nothing to compress. PowerSGD's three
all-reduces per bucket (whole tensors, then P, then Q) are priced as one collective of their total bytes: their
latency and the launches between them are left out.
"""

from __future__ import annotations

import numpy as np

from ...spec.model.global_attention import layer_shapes
from ...spec.model.config import ModelConfig
from ..compute.kernels import Device

GRAD_BYTES = {"fp32": 4.0, "bf16": 2.0}  # gradient accumulation dtype (Plan.grad_dtype) -> bytes per element
BF16_BYTES = 2.0
MIN_COMPRESSION_RATE = 2.0  # torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.PowerSGDState default
# HBM passes over each compressed element per step, in the gradient dtype (powerSGD_hook, torch 2.13): add the
# residual (read M and e, write M), clone the bucket for the next residual (read, write), P = M Q and
# Q = M^T P (read M twice), decompress M' = P Q^T (write), the new residual e = clone - M' (read both, write
# e): 11. Skinny (rank r) products are memory-bound: 2 r FLOPs per element each against >= 4 bytes.
POWERSGD_PASSES = 11.0
# DDP's bf16_compress_hook per element: cast down (read g, write 2), divide by the group (read 2, write 2),
# copy back (read 2, write g).
BF16_CAST_BYTES = 8.0  # 2 + 2 + 2 + 2: all but the reads and writes of g


def matrix_shapes(model: ModelConfig) -> list[tuple[int, int, int]]:
    """(rows, columns, count) of a dense model's weight matrices as torch holds them (nn.Linear's [out, in],
    the embedding [V, h]); PowerSGD sees exactly these (tp = pp = 1). Latent attention (MLA) is left out:
    its matrices then count as uncompressed, an upper bound on the traffic."""
    h, L = model.hidden, model.n_layers
    out = [(model.vocab, h, 1 if model.tie_embeddings else 2)]
    if model.position == "learned":
        out.append((model.max_seq_len, h, 1))
    if model.mla is None:  # each head shape's layers (Gemma 4's global ones: `spec.model.global_attention`)
        for s, n in layer_shapes(model):
            q, kv = model.n_heads * s.head_dim, s.n_kv_heads * s.head_dim
            out += [(q, h, n), (kv, h, (2 - s.shared_kv) * n), (h, q, n)]
    out += [(model.ffn_hidden, h, L * (2 if model.mlp == "swiglu" else 1)), (h, model.ffn_hidden, L)]
    return out


def powersgd_share(model: ModelConfig, rank: int) -> float:
    """Elements PowerSGD all-reduces per gradient element of the model: r (m + n) for each matrix it
    compresses, m n for the rest, vectors whole (MIN_COMPRESSION_RATE)."""
    total = model.n_params()
    sent = total
    for m, n, count in matrix_shapes(model):
        if MIN_COMPRESSION_RATE * rank * (m + n) < m * n:
            sent -= count * (m * n - rank * (m + n))
    return sent / total


def wire_bytes(model: ModelConfig, g: float, compression: str, rank: int) -> float:
    """Bytes the gradient collectives carry per gradient element of `g` bytes (the accumulation dtype): g,
    bf16's 2, or PowerSGD's factors (in the accumulation dtype, as torch's hook keeps P and Q) over all elements."""
    if compression == "bf16":
        return min(g, BF16_BYTES)
    if compression == "powersgd":
        return g * powersgd_share(model, rank)
    return g


def compression_seconds(dev: Device, params, g: float, compression: str, replicas):
    """Seconds of the compression kernels per step over `params` gradient elements of `g` bytes, memory-bound,
    where there are `replicas` > 1 to reduce over: bf16 moves 2 g + BF16_CAST_BYTES bytes per element (a no-op
    for bf16 gradients); PowerSGD makes POWERSGD_PASSES passes."""
    on = np.asarray(replicas) > 1
    if compression == "bf16" and g > BF16_BYTES:
        return on * dev.memory(params * (2 * g + BF16_CAST_BYTES))
    if compression == "powersgd":
        return on * dev.memory(params * POWERSGD_PASSES * g)
    return 0.0 * params


def error_feedback_bytes(params, g: float, compression: str, replicas):
    """Memory PowerSGD keeps between steps where there are `replicas` > 1: a residual the size of the gradient
    (Vogels et al. 2019, Alg. 1, error feedback); its r-column Q factors are left out (r (m + n) per matrix, under
    1% of it at r <= 8), and so is the clone of the bucket in flight at the end of the backward."""
    return params * g * (compression == "powersgd") * (np.asarray(replicas) > 1)


def layout_wire_bytes(model: ModelConfig, lay) -> float:
    """`wire_bytes` of a plan or Layouts: what its gradient collectives carry per gradient element."""
    return wire_bytes(model, GRAD_BYTES[lay.grad_dtype], lay.grad_compression, lay.powersgd_rank)
