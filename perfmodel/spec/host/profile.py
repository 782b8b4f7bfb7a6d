"""A software stack's host profile (`Stack.host`): the calls its host thread makes on the device's behalf, counted by
kind (spec.host.cpu.CALL_KINDS) per operator and pass, per layer, per collective, per optimizer tensor and step
(cost.host.launch_queue prices them). Apart from spec.stack.profile, which re-exports these names, to keep each module small.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from ...types import Schema
from .cpu import CALL_KINDS
from ..model.operators import GRAPH_OPS
from ..stack.release import GraphScope

Dispatch = Literal["eager", "compiled", "graphed", "native"]
CallKind = Literal[CALL_KINDS]
OpName = Literal[GRAPH_OPS]
Calls = dict[CallKind, Annotated[float, Field(ge=0)]]  # calls of each kind (spec.host.cpu.CALL_KINDS)


class PassCalls(Schema):
    """The calls one pass makes, by kind: what the host thread does for an operator's (or a layer's) forward and
    backward. A recomputed forward makes its forward's calls again."""

    forward: Calls = Field(default_factory=dict, description="calls of the forward, by kind")
    backward: Calls = Field(default_factory=dict, description="calls of the backward, by kind (the autograd "
                                                              "engine's nodes and what they launch)")




class HostProfile(Schema):
    """What a stack's host thread does on the device's behalf, as counts of calls by kind (spec.host.cpu.CALL_KINDS):
    per operator of the cost model's table and pass, per layer beside its operators, per collective, per ZeRO-3
    gather, per parameter tensor and per step of the optimizer. Counted from the stack's own code (`counted`): call
    counts do not depend on the GPU. No seconds: the system's host (System.host_cpu) says what each call costs, and
    cost.host.launch_queue multiplies the two."""

    dispatch: Dispatch = Field(
        description="how the model's operators reach the device: eager (Python, the dispatcher and autograd per "
                    "op), compiled (torch.compile: Inductor's fused kernels launched from its wrapper), graphed (CUDA "
                    "graphs replay them), native (C/CUDA launches, no Python)")
    ops: dict[OpName, PassCalls] = Field(description="calls per instance of each operator of the cost model's table "
                                                     "(spec.model.operators.GRAPH_OPS), by pass, eager")
    layer: PassCalls = Field(default_factory=PassCalls, description="a layer's calls beside its operators' (its "
                                                                   "container modules' __call__, hooks), by pass")
    model: PassCalls = Field(default_factory=PassCalls, description="the model's calls per micro-batch beside its "
                                                                   "layers' and operators' (masks, position tables)")
    llama_style: dict[OpName, PassCalls] = Field(
        default_factory=dict, description="the operators a Llama-style layer (rotary positions, a gated MLP, RMSNorm, "
                                          "no biases) counts differently in this stack's code: they replace `ops`' for "
                                          "a model with rotary positions (ModelConfig.position = rope)")
    compiled_layer: PassCalls | None = Field(
        None, description="a layer's calls under torch.compile (a plan's compile = model or model+loss), its "
                          "operators' included: the compiled regions' entries and kernels; null: the stack compiles "
                          "nothing and a compiled plan is priced eager")
    graphs: GraphScope = Field("none", description="what the stack captures in CUDA graphs by default: none, each "
                                                   "layer (graphed_layer's calls replace the layer's), or the whole "
                                                   "step (one replay per micro-batch and pass)")
    graphed_layer: PassCalls | None = Field(None, description="a layer's calls where graphs = layer: its replays and "
                                                              "what runs outside them")
    collective: Calls = Field(description="calls per collective or pipeline send/recv the stack issues")
    zero3_call: Calls = Field(description="calls per ZeRO-3 weight gather or gradient reduce-scatter (FSDP's hooks "
                                          "around the collective included)")
    optimizer_tensor: Calls = Field(description="calls per parameter tensor of the optimizer step (the update, "
                                                "gradient clipping, zero_grad)")
    optimizer_step: Calls = Field(description="calls per step of the optimizer and the train loop, whatever the "
                                              "tensor count (grad-norm reductions, the loss's .item(), zero_grad)")
    narrow_fused_module: Calls = Field(default_factory=dict, description="the calls a fused module makes beside its own "
                                       "under fp8 / fp4 (its quantizers: casts, amax and scale updates), per fused "
                                       "module call of either pass")
    pipeline_step: Calls = Field(default_factory=dict, description="calls the pipeline schedule makes per forward or "
                                 "backward chunk step between the synchronisation that ends the last one and the "
                                 "chunk's first operator (its p2p calls, receive buffers, the user step function): "
                                 "the device waits them out")
    moe_sync_dispatchers: list[str] = Field(
        default_factory=list, description="token dispatchers (Plan.moe_dispatcher) whose MoE layer copies its tokens' "
                                          "per-expert counts to the host and synchronises in its forward (the "
                                          "all-to-all splits, the grouped GEMM's batch sizes)")
    moe_sync: Calls = Field(default_factory=dict, description="the calls after that synchronisation before the "
                                                              "layer's next kernel: the device waits them out")
    sync_before_optimizer: bool = Field(False, description="the step synchronises between the last backward and the "
                                                          "update (the gradient norm's .item() for clipping or "
                                                          "logging, the fp16 loss scaler's inf check): the update's "
                                                          "calls wait for the device to drain")
    counted: str = Field(description="how the counts were counted: the command that counted the stack's own code "
                                     "on CPU, or the code read (file@commit)")

    @model_validator(mode="after")
    def _every_op(self):
        missing = [op for op in GRAPH_OPS if op not in self.ops]
        if missing:
            raise ValueError(f"ops lacks {', '.join(missing)}; valid: calls for every operator of "
                             f"spec.model.operators.GRAPH_OPS ({', '.join(GRAPH_OPS)}), {{}} where it makes none")
        if self.graphs == "layer" and self.graphed_layer is None:
            raise ValueError("graphs = layer needs graphed_layer (the replays per layer and pass)")
        return self
