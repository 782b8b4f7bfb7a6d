"""Tensor (and sequence) parallelism from a plan file's per-operator placements, on the `tp` mesh axis.

`Placed` is a torch `ParallelStyle` that takes an operator's placements literally: its weights are distributed
as the plan says (`distribute_tensor`), each input is redistributed to the plan's input placement, and the
output to the plan's output placement (`DTensor.redistribute`, which issues the all-gather, reduce-scatter or
all-reduce the change needs). Activations travel between operators as DTensors, so whatever an operator emits,
the next one receives with its true placement. For Megatron's placements this is what `ColwiseParallel`,
`RowwiseParallel` and `SequenceParallel` do (the same DTensor ops and collectives); for placements no stock
style names (a batch split over tp, a replicated MLP, a hidden-split embedding) it is the same mechanism.

Placement words follow the plan file: activations [batch, seq, features], weights [out, in]. An input written
`Partial()` is replicated in the forward with a partial gradient (DTensor's replicate), so it becomes
`Replicate()` here. The attention core computes on local tensors (no DTensor rule for the CPU attention
kernels); its tp split is over batch or heads (the search does not split attention's sequence over tp).
Only the tp axis is applied here: dp splits the batch and cp the sequence (parallel.data.py,
parallel.context.py), which `check_placements` (execute/__init__.py) verified before launch.
"""

from __future__ import annotations

import re

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import (
    DTensor,
    Partial,
    Placement,
    Replicate,
    Shard,
    distribute_module,
    distribute_tensor,
)
from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module

from ...spec.plan.file import LAYER_OPS, PLACEMENT_AXES, OpPlacement

TP = PLACEMENT_AXES.index("tp")


def placement(word: str) -> Placement:
    """'Shard(1)' -> Shard(1), 'Replicate()' -> Replicate(), 'Partial()' -> Partial()."""
    m = re.fullmatch(r"Shard\((\d)\)", word)
    return Shard(int(m.group(1))) if m else Partial() if word == "Partial()" else Replicate()


def forward_input(word: str) -> Placement:
    """An input's forward placement: Partial() in a plan's input means replicated (its gradient is partial)."""
    p = placement(word)
    return Replicate() if isinstance(p, Partial) else p


def as_dtensor(x: torch.Tensor, mesh: DeviceMesh, where: Placement) -> DTensor:
    """A tensor that arrives without placement (token ids, a pipeline stage's input) as a DTensor."""
    return x if isinstance(x, DTensor) else DTensor.from_local(x, mesh, [where], run_check=False)


class Placed(ParallelStyle):
    """Distribute a module's weights and route its activations exactly as one OpPlacement says (tp axis).

    `local=True` runs the module's forward on local tensors (the attention core) and re-wraps its output.
    """

    def __init__(self, op: OpPlacement, local: bool = False, arrives: Placement = Replicate(),
                 route_input: bool = True):
        super().__init__()
        self.input = forward_input(op.input[TP])
        self.output = placement(op.output[TP])
        self.weight = placement(op.weight[TP]) if op.weight else Replicate()
        self.local, self.arrives, self.route_input = local, arrives, route_input

    def _param_placement(self, module: nn.Module, p: nn.Parameter) -> Placement:
        if p.dim() == 2:
            return self.weight
        if isinstance(module, nn.Linear):  # a bias follows the weight's output dim
            return Shard(0) if self.weight == Shard(0) else Replicate()
        return self.weight  # norm scale / shift over hidden

    def _partition(self, name: str, module: nn.Module, mesh: DeviceMesh) -> None:
        for pname, p in list(module.named_parameters(recurse=False)):
            where = self._param_placement(module, p)
            module.register_parameter(pname, nn.Parameter(distribute_tensor(p, mesh, [where], src_data_rank=None)))

    def _in(self, module, inputs, mesh):
        out = []
        for x in inputs:
            if isinstance(x, torch.Tensor):
                x = as_dtensor(x, mesh, self.arrives)
                moved = x.placements[0] != self.input
                if moved:  # its backward reduces the gradient to the producer's placement (e.g. reduce-scatter)
                    x = x.redistribute(mesh, [self.input])
                if self.local:
                    x = x.to_local()
                elif isinstance(self.input, Replicate) and self.route_input and not moved:
                    # The gradient this op returns for a replicated input is a partial sum (each rank saw
                    # its shard of the op); reduce it here, at the op's boundary, as the stock styles do (their
                    # from_local), rather than letting it reach a producer that cannot take partial gradients
                    # (a vocabulary-parallel embedding).
                    x = DTensor.from_local(x.to_local(), mesh, [Replicate()], run_check=False)
            out.append(x)
        return tuple(out)

    def _out(self, module, output, mesh):
        if self.local:
            return DTensor.from_local(output, mesh, [self.output], run_check=False)
        if output.placements[0] != self.output and not isinstance(self.output, Partial):
            output = output.redistribute(mesh, [self.output])
        return output

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        return distribute_module(module, device_mesh, self._partition, self._in, self._out)


class PlacedInput(Placed):
    """The input routing of an op that several modules carry (qkv: wq, wk, wv; mlp_in: w1, w3), done once on
    their parent, as torchtitan's PrepareModuleInput does for attention and feed-forward: one all-gather (and
    one reduce-scatter of the summed gradient), as the plan's single operator has, not one per module."""

    def _partition(self, name: str, module: nn.Module, mesh: DeviceMesh) -> None:
        pass  # the modules below hold the weights and distribute them

    def _out(self, module, output, mesh):
        return output


class PlacedEmbedding(Placed):
    """The token table takes the plan's weight placement; the learned position table is split like the
    hidden dim of the token table (or replicated), so that the two add without a redistribution.

    A vocabulary-split lookup leaves a partial sum whose mask lives only until the module returns (DTensor's
    MaskPartial), so the sum is reduced here, straight to the placement its consumer takes (`then`), as
    torch's RowwiseParallel does for embeddings."""

    def __init__(self, op: OpPlacement, then: Placement):
        super().__init__(op)
        self.then = then

    def _out(self, module, output, mesh):
        if isinstance(output.placements[0], Partial):
            return output.redistribute(mesh, [self.then])
        return super()._out(module, output, mesh)

    def _partition(self, name: str, module: nn.Module, mesh: DeviceMesh) -> None:
        if not isinstance(module, nn.Embedding):
            return
        where = self.weight if name.endswith("tok") else (Shard(1) if self.weight == Shard(1) else Replicate())
        p = module.weight
        module.register_parameter("weight", nn.Parameter(distribute_tensor(p, mesh, [where], src_data_rank=None)))


# The module(s) of one block or of the model that carry each operator; where several carry one, the parent
# whose input is the op's input (PlacedInput).
LAYER_MODULES = {"norm1": ["norm1"], "qkv": ["attention.wq", "attention.wk", "attention.wv"],
                 "attention": ["attention.core"], "out_proj": ["attention.wo"], "residual1": ["residual1"],
                 "norm2": ["norm2"], "mlp_in": ["mlp.w1", "mlp.w3"], "activation": ["mlp.act"],
                 "mlp_out": ["mlp.w2"], "residual2": ["residual2"]}
SHARED_INPUT = {"qkv": "attention", "mlp_in": "mlp"}
MODEL_MODULES = {"embedding": "embedding", "final_norm": "final_norm", "lm_head": "lm_head"}


def placements_by_layer(placements: list[OpPlacement]) -> tuple[dict[str, OpPlacement], dict[int, dict[str, OpPlacement]]]:
    """Model-level ops by name, and per-layer ops by layer index."""
    model, layers = {}, {}
    for pl in placements:
        if pl.layers is None:
            model[pl.op] = pl
        else:
            for i in range(pl.layers[0], pl.layers[1] + 1):
                layers.setdefault(i, {})[pl.op] = pl
    return model, layers


def stage_input_placement(placements: list[OpPlacement], first_layer: int) -> Placement:
    """Placement (tp) of the hidden states that enter layer `first_layer`: the previous op's output."""
    model, layers = placements_by_layer(placements)
    prev = model["embedding"] if first_layer == 0 else layers[first_layer - 1]["residual2"]
    return placement(prev.output[TP])


def apply_tp(stage: nn.Module, mesh: DeviceMesh, placements: list[OpPlacement]) -> None:
    """Apply every operator's placement to the modules a pipeline stage holds (torchtitan's apply_tp, driven
    by the plan instead of a fixed pattern)."""
    model_ops, layer_ops = placements_by_layer(placements)
    plan: dict[str, ParallelStyle] = {}
    if stage.embedding is not None:
        first = layer_ops[0]["norm1"] if 0 in layer_ops else model_ops["final_norm"]
        plan["embedding"] = PlacedEmbedding(model_ops["embedding"], then=forward_input(first.input[TP]))
    parents: dict[str, ParallelStyle] = {}  # applied after the modules below them hold DTensor weights
    for key in stage.layers:
        ops = layer_ops[int(key)]
        for op in LAYER_OPS:
            subs = [s for s in LAYER_MODULES[op] if not (s == "mlp.w3" and stage.layers[key].mlp.w3 is None)]
            shared = len(subs) > 1
            for sub in subs:
                plan[f"layers.{key}.{sub}"] = Placed(ops[op], local=op == "attention", route_input=not shared)
            if shared:
                parents[f"layers.{key}.{SHARED_INPUT[op]}"] = PlacedInput(ops[op])
    if stage.final_norm is not None:
        plan["final_norm"] = Placed(model_ops["final_norm"])
    if stage.lm_head is not None:
        plan["lm_head"] = Placed(model_ops["lm_head"])
    parallelize_module(stage, mesh, plan | parents)


def reduce_partial_gradients(params: list[nn.Parameter], mesh: DeviceMesh) -> None:
    """Sum the gradients the tp ranks hold as partial sums (weights kept whole while each rank sees part of the
    sequence: norms and row-parallel biases under sequence parallelism) in one flat all-reduce after the last
    micro-batch, as Megatron-LM does once per step (Korthikanti et al. 2022, Sec. 4.2.2). Left to DTensor, each
    would be reduced where the optimizer first reads it, once per read."""
    from .data import flat_all_reduce

    todo = [p for p in params if isinstance(p.grad, DTensor) and p.grad.device_mesh == mesh
            and any(isinstance(x, Partial) and x.reduce_op == "sum" for x in p.grad.placements)]
    if not todo:
        return
    sums = flat_all_reduce([p.grad.to_local() for p in todo], mesh)
    for p, total in zip(todo, sums):
        where = [Replicate() if isinstance(x, Partial) else x for x in p.grad.placements]
        p.grad = DTensor.from_local(total, mesh, where, run_check=False)


def loss_input(placements: list[OpPlacement]) -> tuple[Placement, Placement]:
    """(placement of the logits the LM head emits, placement the loss op takes them in), tp axis."""
    model_ops, _ = placements_by_layer(placements)
    return placement(model_ops["lm_head"].output[TP]), forward_input(model_ops["loss"].input[TP])
