"""The operators of a decoder-only transformer's training step, by the names every part of perfmodel uses.

For each operator: its iteration-space dimensions, the dimensions of the tensors it reads and writes (activations
[batch, seq, features], weights in torch layout [out, in]), and the one definition of Megatron-LM's split of it
over the stage mesh (dp splits the batch, cp the sequence, tp the vocabulary, heads or ffn; Shoeybi et al.
2019, Sec. 3; with sequence parallelism tp also splits the sequence of norms and residuals, Korthikanti et al.
2022, Sec. 4.2.2). A split maps each dimension to the mesh axes that divide it; `tensor_codes` turns a split
into DTensor placements of a tensor (Shard(i) where an axis splits the tensor's dimension i, Partial() where an
output lacks a split dimension (it was contracted), Replicate() otherwise).

Facts only, no sizes or costs: the plan-file schema, the executor and the exporters read it without the cost
model; `cost.compute.operator_table` adds sizes and costs, PaSE (`search.pase`) searches other splits of the same operators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

DIMS = ("batch", "seq", "hidden", "heads", "ffn", "vocab")
AXES = ("dp", "cp", "tp")  # the stage mesh, outermost first; tp innermost in device order (Megatron-LM)
# What the executor runs on the data axes: dp is data parallelism (it splits only the batch), cp context
# parallelism (only the sequence); attention's sequence is split by cp alone (keys and values gathered over
# cp). PaSE searches within these rules, and the executor refuses placements outside them.
DATA_AXES = {"dp": "batch", "cp": "seq"}
ParallelStyle = Literal["colwise", "rowwise", "sequence", "vocab"]

# Placement codes per mesh axis: Replicate, Partial (an input: Replicate in the forward whose gradient is
# Partial), then Shard(i) = SHARD + i.
REPLICATE, PARTIAL, SHARD = 0, 1, 2
CODES = 5  # codes per axis: R, P, Shard(0..2)


@dataclass(frozen=True)
class OpSpec:
    """One operator: iteration-space dims, the dims of its output, inputs and weight, and its family.

    A split of a dim a tensor lacks makes that tensor Partial (an output: the dim was contracted) or Replicate
    (an input or weight; an input's gradient, and a weight's, is then Partial).
    """

    name: str
    family: Literal["embedding", "embedding_output", "norm", "linear", "attention", "residual", "activation", "loss",
                    "moe"]
    dims: tuple[str, ...]
    out: tuple[str, ...] | None  # None: the loss (a scalar)
    ins: tuple[tuple[str, ...], ...]
    weight: tuple[str, ...] | None = None
    layer: bool = False  # one per transformer layer (else once per model)

    def dim_index(self, name: str) -> int:
        return self.dims.index(name)


_BSH = ("batch", "seq", "hidden")
_NORM = {"family": "norm", "dims": _BSH, "out": _BSH, "ins": (_BSH,), "weight": ("hidden",)}
_RES = {"family": "residual", "dims": _BSH, "out": _BSH, "ins": (_BSH, _BSH), "layer": True}
SPECS: dict[str, OpSpec] = {s.name: s for s in (
    OpSpec("embedding", "embedding", ("batch", "seq", "hidden", "vocab"), _BSH, (("batch", "seq"),),
           ("vocab", "hidden")),
    # The embedding's output as the first layer reads it: a vocab-split lookup is a partial sum, reduced once
    # here for both readers (norm1 and the skip connection); the learned position add and dropout run on it.
    OpSpec("embedding_output", "embedding_output", _BSH, _BSH, (_BSH,)),
    OpSpec("norm1", layer=True, **_NORM),
    OpSpec("qkv", "linear", ("batch", "seq", "heads", "hidden"), ("batch", "seq", "heads"), (_BSH,),
           ("heads", "hidden"), True),
    OpSpec("attention", "attention", ("batch", "seq", "heads"), ("batch", "seq", "heads"),
           (("batch", "seq", "heads"),), None, True),
    OpSpec("out_proj", "linear", ("batch", "seq", "hidden", "heads"), _BSH, (("batch", "seq", "heads"),),
           ("hidden", "heads"), True),
    OpSpec("residual1", **_RES),
    OpSpec("norm2", layer=True, **_NORM),
    OpSpec("mlp_in", "linear", ("batch", "seq", "ffn", "hidden"), ("batch", "seq", "ffn"), (_BSH,),
           ("ffn", "hidden"), True),
    OpSpec("activation", "activation", ("batch", "seq", "ffn"), ("batch", "seq", "ffn"), (("batch", "seq", "ffn"),),
           None, True),
    OpSpec("mlp_out", "linear", ("batch", "seq", "hidden", "ffn"), _BSH, (("batch", "seq", "ffn"),),
           ("hidden", "ffn"), True),
    # A MoE layer's MLP as one vertex: the router, dispatch, experts and combine (`cost.compute.moe`). It reads and
    # writes the layer's hidden states split by tokens alone: its experts are placed by the plan's ep x etp over
    # the stage's ranks (Megatron-Core MoE parallel folding), not by the (dp, cp, tp) mesh.
    OpSpec("moe", "moe", _BSH, _BSH, (_BSH,), None, True),
    OpSpec("residual2", **_RES),
    OpSpec("final_norm", **_NORM),
    OpSpec("lm_head", "linear", ("batch", "seq", "vocab", "hidden"), ("batch", "seq", "vocab"), (_BSH,),
           ("vocab", "hidden")),
    OpSpec("loss", "loss", ("batch", "seq", "vocab"), None, (("batch", "seq", "vocab"),)),
)}
GRAPH_OPS = tuple(SPECS)  # every vertex of the operator graph
# what plan files place (the executor's modules); a MoE layer's experts are placed by the plan's ep and etp
OPS = tuple(n for n in GRAPH_OPS if n not in ("embedding_output", "moe"))
LAYER_OPS = tuple(n for n in OPS if SPECS[n].layer)
EMBEDDING_OPS = ("embedding", "embedding_output")
HEAD_OPS = ("final_norm", "lm_head", "loss")
UNIT_OF = {op: "layer" if SPECS[op].layer else "embedding" if op in EMBEDDING_OPS else "head" for op in GRAPH_OPS}

# The tensors passed between operators, (producer, consumer, consumer's input slot). Inside a layer the chain
# norm1 -> ... -> residual2, and residual1 into residual2's skip input (slot 1). The layer's input x (the
# embedding's output, or the previous layer's residual2) feeds norm1 and residual1's skip input; the last
# layer's output feeds the final norm. No producer that feeds two consumers writes a partial sum, so every
# tensor is redistributed pair by pair (PaSE's edge model) without paying one reduction twice.
EMBEDDING_EDGES = (("embedding", "embedding_output", 0),)
LAYER_EDGES = tuple((a, b, 0) for a, b in zip(LAYER_OPS, LAYER_OPS[1:])) + (("residual1", "residual2", 1),)
INPUT_EDGES = (("norm1", 0), ("residual1", 1))
HEAD_EDGES = (("final_norm", "lm_head", 0), ("lm_head", "loss", 0))
# A MoE layer's MLP beside the dense MLP's chain (a model's mean layer carries both at their shares).
MOE_EDGES = (("norm2", "moe", 0), ("moe", "residual2", 0))


def edge_unit(src: str, dst: str) -> str:
    """The unit a tensor passed from `src` to `dst` belongs to: the consumer's, except what the embedding's
    output passes to the first layer, which the embedding's unit holds (Megatron-LM's VocabParallelEmbedding)."""
    return "embedding" if UNIT_OF[src] == "embedding" else UNIT_OF[dst]

# Megatron-LM's tensor-parallel split: the dim tp divides in each operator. The others (norms, residuals) keep
# their rows whole on every tp rank, or with sequence parallelism split the sequence over tp.
MEGATRON_TP = {"embedding": "vocab", "qkv": "heads", "attention": "heads", "out_proj": "heads", "mlp_in": "ffn",
               "activation": "ffn", "mlp_out": "ffn", "lm_head": "vocab", "loss": "vocab"}


def megatron_dim(op: str, sequence_parallel: bool) -> str | None:
    """The dim Megatron-LM splits over tp in `op`: MEGATRON_TP, else the sequence with sequence parallelism."""
    return MEGATRON_TP.get(op, "seq" if sequence_parallel else None)


def megatron_split(op: str, sequence_parallel: bool) -> dict[str, list[str]]:
    """Megatron-LM's split of `op` over all of AXES (an axis of size 1 splits nothing, whatever it is given)."""
    split: dict[str, list[str]] = {"batch": ["dp"], "seq": ["cp"]}
    dim = megatron_dim(op, sequence_parallel)
    if dim is not None:
        split.setdefault(dim, []).append("tp")
    return split


def config_of(spec: OpSpec, split: dict[str, list[str]], axes=AXES) -> np.ndarray:
    """A split as a configuration row: per axis of `axes`, the index of the dim it splits in spec.dims (-1: none)."""
    row = np.full(len(axes), -1)
    for dim, on in split.items():
        for a in on:
            if a in axes:
                row[axes.index(a)] = spec.dim_index(dim)
    return row


def tensor_codes(spec: OpSpec, configs: np.ndarray, tensor: tuple[str, ...], role: str) -> np.ndarray:
    """Per configuration (rows of `configs`, (K, axes)) and axis, the placement code of a tensor with dims
    `tensor` in role out | in | weight: Shard(position) where the axis splits a dim the tensor has; where it
    splits one the tensor lacks, an output is Partial (contracted), an input PARTIAL (Replicate, gradient
    Partial), a weight Replicate (gradient Partial, reduced per step)."""
    configs = np.atleast_2d(configs)
    codes = np.zeros(configs.shape, dtype=int)
    for d, dim in enumerate(spec.dims):
        if dim in tensor:
            code = SHARD + tensor.index(dim)
        else:
            code = REPLICATE if role == "weight" else PARTIAL
        codes[configs == d] = code
    return codes


def placement_word(code: int, is_input: bool = False) -> str:
    """DTensor words of a code; an input's PARTIAL is a Replicate() whose gradient is partial."""
    if code == REPLICATE or (code == PARTIAL and is_input):
        return "Replicate()"
    return "Partial()" if code == PARTIAL else f"Shard({code - SHARD})"


def parse_placement(word: str) -> int:
    """'Replicate()', 'Partial()', 'Shard(i)' -> code (ValueError otherwise)."""
    if word == "Replicate()":
        return REPLICATE
    if word == "Partial()":
        return PARTIAL
    if word.startswith("Shard(") and word.endswith(")") and word[6:-1].isdigit():
        return SHARD + int(word[6:-1])
    raise ValueError(f"placement {word!r} is not valid; valid: Replicate(), Partial(), Shard(i)")


@dataclass(frozen=True)
class Placement:
    """A configuration of one operator in plan-file words: split, placements on (dp, cp, tp), style."""

    split: dict[str, list[str]]
    input: list[str]
    output: list[str]
    weight: list[str] | None
    style: ParallelStyle | None


def describe(spec: OpSpec, config: np.ndarray, axes=AXES) -> Placement:
    """The split, placements (one word per axis of AXES; axes not in `axes` Replicate()) and style of one
    configuration row over `axes`."""
    config = np.asarray(config).reshape(1, -1)
    split: dict[str, list[str]] = {}
    for a, d in zip(axes, config[0]):
        if d >= 0:
            split.setdefault(spec.dims[d], []).append(a)

    def words(codes: np.ndarray, is_input: bool = False) -> list[str]:
        per = dict(zip(axes, codes[0].tolist()))
        return [placement_word(per.get(a, REPLICATE), is_input) for a in AXES]

    inp = words(tensor_codes(spec, config, spec.ins[0], "in"), is_input=True)
    if spec.out is None:  # the loss: per-rank partial sums over batch / seq splits, replicated otherwise
        data = [spec.dim_index("batch"), spec.dim_index("seq")]
        out = words(np.where(np.isin(config, data), PARTIAL, REPLICATE))
    else:
        out = words(tensor_codes(spec, config, spec.out, "out"))
    weight = words(tensor_codes(spec, config, spec.weight, "weight")) if spec.weight else None
    return Placement(split, inp, out, weight, style(spec, split, inp, out, weight))


def style(spec: OpSpec, split: dict[str, list[str]], inp: list[str], out: list[str],
          weight: list[str] | None) -> ParallelStyle | None:
    """The torch ParallelStyle the tp-axis placement matches, if any: vocab (embedding / LM head split by the
    vocabulary), colwise (weight Shard(0), input replicated), rowwise (weight Shard(1), output Partial),
    sequence (a norm, residual or activation whose output is split by the sequence)."""
    t = AXES.index("tp")
    tp_dim = next((d for d, on in split.items() if "tp" in on), None)
    if tp_dim is None:
        return None
    if spec.name in ("embedding", "lm_head") and tp_dim == "vocab":
        return "vocab"
    if weight is not None and spec.family in ("linear", "embedding"):
        if weight[t] == "Shard(0)" and inp[t] == "Replicate()" and spec.family == "linear":
            return "colwise"
        if weight[t] == "Shard(1)" and spec.family == "embedding":
            return "colwise"  # torch ColwiseParallel on nn.Embedding shards the embedding dim
        if weight[t] == "Shard(1)" and out[t] == "Partial()":
            return "rowwise"
    if spec.family in ("norm", "residual", "activation") and out[t] == "Shard(1)":
        return "sequence"
    return None


def megatron_placement(op: str, sizes: dict[str, int], sequence_parallel: bool) -> Placement:
    """Megatron-LM's placement of `op` on a stage mesh of `sizes` (dp, cp, tp): axes of size 1 split nothing."""
    spec = SPECS[op]
    split = {d: [a for a in on if sizes[a] > 1] for d, on in megatron_split(op, sequence_parallel).items()}
    return describe(spec, config_of(spec, {d: on for d, on in split.items() if on}))
