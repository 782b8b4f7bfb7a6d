"""MaxText's dense MoE dispatch (`Plan.moe_dense_dispatch`, MaxText's sparse_matmul: false): RoutedMoE.dense_matmul
and generate_masks in MaxText src/maxtext/layers/moe.py at e591f30cbbf217ed67ef71263ec0538239f9c3b8.

With capacity_factor > 0 each sequence of S tokens reaches the experts through one-hot masks [B, S, E, C] of a
capacity of C tokens per expert and sequence (`dense_capacity`): the dispatch einsum "BSM,BSEC -> EBCM" gathers the
tokens into E x C padded rows, the experts run "EBCM,EMH -> EBCH" (wi_0, wi_1) and "EBCH,EHM -> EBCM" (wo) on those
rows whatever the routing, and the combine einsum "EBCM,BSEC -> BSM" weights and sums them back. With
capacity_factor <= 0 (base.yml's default, -1: no dropping) there are no masks: every expert runs every token
("BSM,EMH -> BSEH", "BSEH,EHM -> BSEM") and the weighted sum "BSEM,BSE -> BSM" keeps each token's top k.

`cost.compute.moe` prices the experts' GEMMs on `dense_load` times the balanced rows, the exchange on the padded buffers,
and these einsums in place of its permute and unpermute (`dense_dispatch_ops`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...spec.model.config import ModelConfig
from .kernels import Device, Op, elementwise_op, linear_op

# MaxText src/maxtext/configs/base.yml at e591f30: "capacity_factor: -1.0 # a factor to decide expert capacity for
# token dropping, and no dropping by default"; the factor a plan without moe_capacity_factor runs
MAXTEXT_CAPACITY_FACTOR = -1.0


def capacity_factor(factor: float | None) -> float:
    """The capacity factor MaxText runs: the plan's moe_capacity_factor, or unset base.yml's (-1: no capacity)."""
    return MAXTEXT_CAPACITY_FACTOR if factor is None else factor


def dense_capacity(model: ModelConfig, seq_len: int, factor: float | None) -> int:
    """C, the tokens each expert takes from one sequence of `seq_len` tokens: int(max(ceil(S k / E) x cf, cf))
    (MaxText moe.py generate_masks, tokens_per_batch = seq_len x num_experts_per_tok), cf = `capacity_factor`;
    with cf <= 0 every expert runs every token: C = S."""
    cf, m = capacity_factor(factor), model.moe
    if cf <= 0:
        return seq_len
    return int(max(math.ceil(seq_len * m.top_k / m.n_experts) * cf, cf))


def dense_load(model: ModelConfig, lay) -> float:
    """Rows each expert runs over the balanced mean S k / E of a sequence: E C / (S k) (dimensionless; E / k where
    every expert runs every token). What `cost.compute.moe.routed_load` is for the grouped GEMMs: the padded buffers are
    this size whatever the routing."""
    m = model.moe
    return m.n_experts * dense_capacity(model, lay.seq_len, lay.moe_capacity_factor) / (lay.seq_len * m.top_k)


def dense_dispatch_ops(model: ModelConfig, dev: Device, lay, tokens, rc) -> list[Op]:
    """The einsums of MaxText's dense dispatch on one device per micro-batch, for its `tokens` (T: T / S
    sequences), in place of the permute and unpermute copies (module docstring; h = hidden, E experts).

    With a capacity C (`dense_capacity`): dispatch, a GEMM per sequence of E C rows x h over its S tokens, 2 T E C h
    FLOPs, whose backward is the input's gradient alone (the mask is integer one-hots); combine, the same shape
    with both gradients (its mask carries the router weights). The masks [T, E, C] are elementwise functions of
    each token's slot per expert (one_hot of the [T, E] positions, times the router weights): XLA fuses them into
    the einsums as operand producers, so they add neither a memory pass nor a buffer. Without a capacity: the
    weighted sum over every expert's output, 2 T E h FLOPs, memory-bound (the [T, E, h] bf16 outputs read,
    forward and backward)."""
    m, h, S = model.moe, model.hidden, lay.seq_len
    E, C = m.n_experts, dense_capacity(model, S, lay.moe_capacity_factor)  # C = S without a capacity
    if capacity_factor(lay.moe_capacity_factor) <= 0:
        return [elementwise_op(dev, "moe_weight_sum", tokens * E * h, 2, 4, rc)]
    rows = E * C * tokens / S  # the padded rows of the device's T / S sequences
    dispatch = [replace(o, bwd_s=o.bwd_s / 2, bwd_flops=o.bwd_flops / 2)
                for o in linear_op(dev, "moe_dispatch", rows, h, S, rc, precision="bf16")]
    return [*dispatch, *linear_op(dev, "moe_combine", rows, h, S, rc, precision="bf16")]
