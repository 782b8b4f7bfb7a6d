"""What a stage holds at its peak: the step's phases whose transient live sets never coexist, and the whole weight
copies ZeRO makes in each.

A training step's backward frees a node's saved tensors once that node's backward has run (torch: the autograd
engine calls Node::release_variables after apply unless retain_graph, torch/csrc/autograd/engine.cpp
call_function / function.h release_variables; JAX/XLA: a buffer lives from its definition to its last use in the
compiled program's buffer assignment). So on the stage that holds the LM head:
- the head phase holds the head's saved tensors (the final-norm and head inputs, the fp32 logits) and the loss's
  temporaries from the head's forward until the head's backward has run;
- the layer phase holds what one layer's backward rebuilds (its recompute working set) and a MoE layer's dispatch
  buffers, from the last layer's backward on, which starts only after the head's backward (its input gradient
  is the head's output).
Their sum is never live: the stage's peak is the kept activations + states + the larger of the two (`phase_live`).
Measured without a TPU (XLA:TPU ahead-of-time compile for v6e:2x2, jax 0.10.2, libtpu 0.0.52; fp32 parameters
sharded over fsdp, a scan of fully rematerialized layers, fp32 logits, cross entropy; temp bytes per device): logits
alone 4.47 GiB, the rebuilt layer alone 2.85 GiB, both 4.72 GiB (the sum would be 7.13).

`memory.stage_memory` takes the larger phase on a stack whose step is one XLA program (MaxText; the stacks marked
Stack.zero3_per_tensor, XLA's SPMD partitioner). On eager torch stacks it still sums them: their measured peaks
read so (the measured-memory benchmark: with the larger phase alone torchtitan's 18 reserved peaks go from 3.0% to
5.6% MAPE, -4.5% mean, full recompute rows down to -15%; all 49 from 2.4% to 3.4%), which says the eager layer phase
holds more than the recompute working set counted here (the backward's own activation gradients; FSDP's gradient
buffers): until those are counted, the sum stands for them.

Pipelines: a stage's other micro-batches' kept activations coexist with either phase and stay in the kept part
(`memory.kept_scale`). Under 1F1B the last rank runs each micro-batch's forward and its backward back to back
(no warm-up forwards; interleaved: the last chunk's forward k and backward k are the same micro-batch, Megatron-LM
megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving's warm-up count
(pp - rank - 1) * 2 + (vpp - 1) * pp), so one micro-batch's head is live; under GPipe every forward runs first, and
the m - 1 micro-batches waiting for their backward keep their logits through the first one's layer phase
(`memory.stage_memory` keeps those in the kept part).
"""

from __future__ import annotations

import numpy as np

from ...spec.stack.profile import load_stack
from ..comm.compression import GRAD_BYTES
from ..layouts import Layouts
from .states import WEIGHT_BYTES


def phase_live(*phases) -> tuple[np.ndarray, np.ndarray]:
    """(activations, transient) bytes of the phase that holds the most, per plan: `phases` are (activations,
    transient) pairs of live sets that never coexist (the module docstring), so the peak holds one of them."""
    parts = [np.broadcast_arrays(*p, *[q for ph in phases for q in ph]) for p in phases]
    total = np.stack([a + t for a, t, *_ in parts])
    pick = np.argmax(total, axis=0)
    return (np.choose(pick, [a for a, *_ in parts]), np.choose(pick, [t for _, t, *_ in parts]))


def zero_copy_bytes(lay: Layouts, stage_params, largest_unit, shard=None, module=None, following=None):
    """The transient whole copies ZeRO makes of weights sharded over `shard` ranks (default the plan's
    zero_shard; a MoE model's routed experts: edp), never more than the sharding saved (a stage of one or two
    layers): ZeRO-3 gathers the largest unit on the stage twice (current + prefetch) and its gradients once;
    ZeRO-2 its gradients. A stack that gathers module by module under a cap on live parameters
    (Stack.zero3_live_params: DeepSpeed's stage3_max_live_parameters) holds at most that many gathered, and never
    less than the largest module (`module`, parameters), whose gradients are the unit reduced. One that gathers
    tensor by tensor (Stack.zero3_per_tensor: XLA), in a layer: two of its largest tensor `module` and that one's
    gradient (the layer's tensors its backward uses together, the next one in flight); a tensor used alone, the
    embedding or the LM head (`following` given: the layer tensor gathered next): that tensor and the next, bf16,
    its unsharded gradient (the weight-gradient dot's bf16 output, reduce-scattered) in the gathered tensor's
    buffer after its last use. XLA:TPU compile (v6e:2x2, cost.memory.peak's setup, 2048 tokens a device): an 8192 x
    131072 head holds 3.10 GiB of temporaries = the head gathered 2.00 + the fp32 logits 1.00 + 0.10 (no second
    copy, no gradient beside it); two layers of 8192 x 65536 wi and wo (1.0 GiB each gathered), 1024 tokens a
    device: 3.56 GiB, this count 4.0."""
    shard = lay.zero_shard if shard is None else shard
    zero, gbytes = lay.zero, GRAD_BYTES[lay.grad_dtype]
    freed = stage_params * (1 - 1 / shard)
    gathered, unit = np.minimum(2 * largest_unit, freed), np.minimum(largest_unit, freed)
    stack = load_stack(lay.stack)
    live = stack.zero3_live_params
    if live is not None and module is not None:
        gathered = np.minimum(gathered, np.maximum(live, module))
        unit = np.minimum(unit, module)
    if stack.zero3_per_tensor and module is not None:  # XLA: this tensor and the next in flight
        alone = following is not None
        gathered = np.minimum(gathered, module + (following if alone else module))
        unit = 0.0 * unit if alone else np.minimum(unit, module)
    return np.where((zero == 3) & (shard > 1), gathered * WEIGHT_BYTES + unit * gbytes,
                    np.where((zero == 2) & (shard > 1), unit * gbytes, 0.0))
