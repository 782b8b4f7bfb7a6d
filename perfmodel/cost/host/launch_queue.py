"""The host that launches the kernels: what it spends per step, and how much of that the device sees.

A GPU runs what its host enqueues. Every call the stack's code makes costs the host's launching thread time
whatever the kernel's size (Python, PyTorch's dispatcher and autograd, the CUDA driver), every collective call its
process-group set-up, and the optimizer step a loop over the parameter tensors. Kernel launches are asynchronous: the
host returns before the kernel runs and keeps enqueueing (CUDA C Programming Guide, "Asynchronous Concurrent
Execution"; PyTorch's "CUDA semantics: asynchronous execution"), so between two synchronisations the host runs ahead
of the device and the stream takes the longer of the two. Where kernels are long the host is hidden; where they are
short (small models, micro-batch 1, many layers) the device waits: the step is host-bound.

Host seconds are counts x per-call costs: the stack says how many calls of each kind its code makes per operator,
layer, collective and optimizer tensor (spec.stack.profile.HostProfile, counted from its code), the system's host what one
call of each kind costs (spec.host.cpu.HostCPU: public measurements of that host class, or `perfmodel calibrate`
on the user's machine). On a CPU device the host thread is the one that computes: there the seconds (a CPU spec's
measured per-launch costs, spec.hardware.system.HostCosts) add to the step instead of overlapping it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ...spec.hardware.system import System
from ...spec.host.cpu import HostCalls
from ...spec.model.config import ModelConfig
from ...spec.model.operators import GRAPH_OPS, UNIT_OF
from ...spec.stack.profile import NARROW_PRECISIONS, Stack
from ..layouts import Layouts
from ..compute.moe import moe_share
from ..compute.operator_table import layer_share

LAYER_GRAPH_OPS = tuple(op for op in GRAPH_OPS if UNIT_OF[op] == "layer")
# the kinds that launch a kernel of their own: after a synchronisation the device waits up to the first of them
LAUNCHING = ("eager_op", "module_call", "fused_module", "compiled_entry", "graph_replay", "kernel_launch")

# Python-side kinds: what the in-context factors scale (the model code, the engine and the optimizer's Python run
# around them); NCCL calls, compiled regions, graph replays and bare launches are priced at their probes, and a
# ZeRO-3 hook was measured in a step already
PYTHON_KINDS = ("eager_op", "view_op", "autograd_node", "module_call", "fused_module", "list_tensor", "dtensor_op")
# In context, per pass: a step's Python-side calls cost this many times their tight-loop probes (the model code's
# own Python around its forward's calls; the engine's around its nodes; the optimizer's loop). Fitted on this
# project's lent-H100 measurements: the geometric mean of measured / priced host seconds per pass over five tiny
# twins (nanoGPT on three machines, HF GPT-2 Large on two), each priced on its own machine's probed host; each
# twin's step predicted from the other four within 6-28%, mean 20% (the host-twins benchmark).
IN_CONTEXT = {"forward": 1.97, "backward": 1.45, "optimizer": 1.79}
# Costs measured inside the stack's own step (a trace's calls, calibrate.trace.host) are in context already
IN_STEP = {"forward": 1.0, "backward": 1.0, "optimizer": 1.0}


def in_context(calls: HostCalls, factor: float) -> HostCalls:
    """`calls` with the Python-side kinds (PYTHON_KINDS) `factor` times their probes (seconds per call)."""
    return calls.scaled(factor, PYTHON_KINDS)


def call_seconds(counts: dict[str, float], calls: HostCalls) -> float:
    """Host seconds of `counts` calls by kind on a host of per-call costs `calls`: sum of count x seconds per call
    (spec.host.cpu.HostCalls; seconds)."""
    return float(sum(n * calls.cost(kind) for kind, n in counts.items()))


@dataclass(frozen=True)
class HostRates:
    """Host seconds of the launching thread per operator instance and pass (`op_f`, `op_b`; a recomputed forward
    costs op_f again), per layer beside its operators (`layer_f`, `layer_b`; under torch.compile or CUDA graphs the
    whole layer, its operators then making no calls of their own: `layer_ops` false), per micro-batch and pass where
    the whole step is graphed (`micro_batch_f`, `_b`), per collective call, ZeRO-3 call, optimizer tensor and
    optimizer step, and whether those seconds overlap the device (`serial`: a CPU device, whose ranks compute on the
    host thread)."""

    op_f: dict[str, float] = field(default_factory=dict)
    op_b: dict[str, float] = field(default_factory=dict)
    kernel_s: float = 0.0  # a CPU spec's fitted seconds per kernel launch (HostCosts: each kernel of each operator)
    layer_f: float = 0.0
    layer_b: float = 0.0
    layer_ops: bool = True
    micro_batch_f: float = 0.0
    micro_batch_b: float = 0.0
    collective_s: float = 0.0
    zero3_call_s: float = 0.0
    optimizer_tensor_s: float = 0.0
    optimizer_step_s: float = 0.0
    sync_before_optimizer: bool = False  # the step waits for the backward before the update's calls (its .item())
    ramp_f: float = 0.0  # host seconds after a synchronisation before a forward chunk's first kernel
    ramp_b: float = 0.0  # ... before a backward chunk's
    moe_sync_s: float = 0.0  # ... after a MoE layer's dispatch synchronises in the forward (0: it does not)
    pipeline_step_s: float = 0.0  # the pipeline schedule's calls per chunk step beside its sends (priced as calls)
    serial: bool = False
    source: str = ""  # where the rates come from, for the estimate's notes

    @property
    def priced(self) -> bool:
        return any(v > 0 for v in (*self.op_f.values(), *self.op_b.values(), self.kernel_s, self.layer_f, self.layer_b,
                                   self.micro_batch_f, self.micro_batch_b, self.collective_s, self.zero3_call_s,
                                   self.optimizer_tensor_s, self.optimizer_step_s))


NONE = HostRates()


def with_quantizers(p, extra: dict):
    """An operator's calls with `extra` more per fused module call in either pass (a narrow precision's
    quantizers: HostProfile.narrow_fused_module)."""
    def more(c):
        n = c.get("fused_module", 0.0)
        return {**c, **{k: c.get(k, 0.0) + n * v for k, v in extra.items()}} if n else c
    return type(p)(forward=more(p.forward), backward=more(p.backward))


def op_calls(h, model: ModelConfig, precision: str) -> dict:
    """The stack's calls per operator for `model` at `precision`: its profile's `ops`, a Llama-style layer's where the
    model has rotary positions (HostProfile.llama_style), its fused modules' quantizers under fp8/fp4
    (HostProfile.narrow_fused_module)."""
    ops = {**h.ops, **h.llama_style} if model.position == "rope" and h.llama_style else dict(h.ops)
    if precision in NARROW_PRECISIONS and h.narrow_fused_module:
        ops = {op: with_quantizers(p, h.narrow_fused_module) for op, p in ops.items()}
    return ops


def layer_scope(h, compile: str, graphs: str | None):
    """(the layer's own calls, whether its operators make theirs, the launch mode) of a stack's profile under a plan's
    torch.compile and CUDA graphs (`graphs`: the plan's, else the profile's): compiled regions or per-layer graphs
    make the whole layer's calls; a graphed step makes none inside it (one replay per micro-batch and pass)."""
    graphs = graphs or h.graphs
    if compile != "none" and h.compiled_layer is not None:
        return h.compiled_layer, False, "compiled"
    if graphs == "layer":
        return h.graphed_layer, False, "graphed layers"
    if graphs == "step":
        return type(h.layer)(), False, "graphed steps"
    return h.layer, True, h.dispatch


def host_rates(system: System, stack: Stack, lay: Layouts, model: ModelConfig) -> HostRates:
    """The host rates of `lay`'s plans of `model` (one stack, compile setting, precision and host per job). On a CPU
    spec: its measured per-launch costs where `perfmodel calibrate` timed this stack on it (spec.hardware.system.HostCosts:
    one per kernel launch, fitted on steps that include the optimizer; or, where a trace measured its host per call
    kind, HostCosts.by_kind: the stack's counted calls at those costs, IN_STEP), else none. On an accelerator: the stack's
    counts (spec.stack.profile.HostProfile) priced at the system's host (System.host_cpu: call_seconds, the Python-side
    kinds in context: IN_CONTEXT); none where either is missing (a stack of one XLA executable per step, a system
    that names no host)."""
    serial = system.accelerator.torch_device == "cpu"
    costs = system.host_costs
    if serial:
        if costs is None or costs.stack != lay.stack:
            return NONE
        if costs.by_kind and stack.host is not None and system.host_cpu is not None:
            # per-call costs measured in this stack's own step (a trace): its counted calls at them, serial
            return replace(stack_rates(system, stack, lay, model, IN_STEP), serial=True, source=(
                f"stack {stack.name}'s calls at {system.name}'s per-kind host costs measured in its traced step"))
        return HostRates(kernel_s=costs.kernel_s, collective_s=costs.collective_s, zero3_call_s=costs.collective_s,
                         serial=True, source=f"{system.name}'s measured host costs (perfmodel calibrate)")
    if stack.host is None or system.host_cpu is None:
        return NONE
    return stack_rates(system, stack, lay, model, IN_CONTEXT)


def stack_rates(system: System, stack: Stack, lay: Layouts, model: ModelConfig, factors: dict) -> HostRates:
    """The stack's counted calls (spec.stack.profile.HostProfile) priced at the system's host (System.host_cpu), the
    Python-side kinds `factors` times their costs per pass (IN_CONTEXT for tight-loop probes, IN_STEP for costs
    measured inside a step); see host_rates."""
    h, host = stack.host, system.host_cpu
    c = host.calls
    cf, cb, co = (in_context(c, factors[k]) for k in ("forward", "backward", "optimizer"))
    price = lambda counts: call_seconds(counts, cf)  # noqa: E731 - a forward's calls (a recompute's too)
    price_b = lambda counts: call_seconds(counts, cb)  # noqa: E731
    ops = op_calls(h, model, lay.precision)
    op_f = {op: price(p.forward) for op, p in ops.items()}
    op_b = {op: price_b(p.backward) for op, p in ops.items()}
    # after a synchronisation the device waits for the calls up to a layer's first kernel launch
    lead = 0.0
    for op in LAYER_GRAPH_OPS:
        lead += op_f[op]
        if any(k in LAUNCHING for k in ops[op].forward):
            break
    layer, layer_ops, mode = layer_scope(h, lay.compile, lay.cuda_graphs)
    # a layer's first call where its operators make none of their own: a region's entry, a replay
    first = {"compiled": c.compiled_entry_s, "graphed layers": c.graph_replay_s}.get(mode, 0.0)
    mb_f = mb_b = 0.0
    if mode == "graphed steps":  # one replay per micro-batch and pass; nothing else is launched from Python
        op_f, op_b = dict.fromkeys(op_f, 0.0), dict.fromkeys(op_b, 0.0)
        mb_f = mb_b = c.graph_replay_s
    return HostRates(op_f=op_f, op_b=op_b, layer_f=price(layer.forward), layer_b=price_b(layer.backward),
                     layer_ops=layer_ops, micro_batch_f=mb_f + price(h.model.forward),
                     micro_batch_b=mb_b + price_b(h.model.backward),
                     collective_s=call_seconds(h.collective, c), zero3_call_s=price(h.zero3_call),
                     optimizer_tensor_s=call_seconds(h.optimizer_tensor, co),
                     optimizer_step_s=call_seconds(h.optimizer_step, co),
                     sync_before_optimizer=h.sync_before_optimizer,
                     # a graphed step cannot stop for the host: its dispatch runs on device-side counts
                     moe_sync_s=price(h.moe_sync) if lay.moe_dispatcher in h.moe_sync_dispatchers
                     and mode != "graphed steps" else 0.0,
                     pipeline_step_s=price({k: n for k, n in h.pipeline_step.items() if k != "nccl_call"}),
                     ramp_f=price(h.pipeline_step) + (lead if layer_ops else first),
                     ramp_b=price(h.pipeline_step) + (op_b["residual2"] if layer_ops else first),
                     source=f"stack {stack.name}'s calls ({mode}) at host {host.name}'s costs")


def synchronisations(rates: HostRates, pp, v, moe_layers):
    """Where a stage's micro-batch synchronises and what that exposes, per stage and plan: (synced, ramp_f, ramp_b,
    calls). A pipeline's chunk steps (`v` per direction where pp > 1) each end in a synchronisation after which the
    device waits for the schedule's calls and the chunk's first operator's (HostRates.ramp_f / ramp_b); a MoE
    layer whose dispatch synchronises in its forward (`moe_layers` of them, where HostRates.moe_sync_s > 0) exposes
    the calls after it (already counted with the layer's operators and collectives). `calls`: the schedule's own
    calls per direction beside its sends (HostRates.pipeline_step_s), which the host spends whether or not the
    device waits on them. Seconds per micro-batch."""
    pipelined = np.asarray(pp) > 1
    steps = np.where(pipelined, v, 0)
    moe = np.asarray(moe_layers, float) * (rates.moe_sync_s > 0)
    synced = pipelined | (moe > 0)
    return (synced, steps * rates.ramp_f + moe * rates.moe_sync_s, steps * rates.ramp_b,
            steps * rates.pipeline_step_s)


def layer_calls(stack: Stack, model: ModelConfig, compile: str, graphs: str | None = None, precision: str = "bf16"
                ) -> tuple[dict[str, float], dict[str, float]]:
    """A mean layer's calls by kind in its forward and its backward as the stack's profile counts them (the report's
    breakdown; the estimate prices the same counts per operator run, cost.compute.units.unit_host_seconds): its operators'
    (op_calls, at their shares of the layers: operator_table.layer_share) beside its own where they make theirs, else
    the layer's own alone (layer_scope). Counts."""
    h = stack.host
    fwd: dict[str, float] = {}
    bwd: dict[str, float] = {}
    if h is None:
        return fwd, bwd

    def add(out, counts, w=1.0):
        for k, n in counts.items():
            out[k] = out.get(k, 0.0) + w * n

    layer, layer_ops, _ = layer_scope(h, compile, graphs)
    if layer_ops:
        ops = op_calls(h, model, precision)
        for op in LAYER_GRAPH_OPS:
            add(fwd, ops[op].forward, layer_share(model, op)), add(bwd, ops[op].backward, layer_share(model, op))
    add(fwd, layer.forward), add(bwd, layer.backward)
    return fwd, bwd


def launch_seconds(rates: HostRates, calls, zero3_calls=0.0):
    """Host seconds of `calls` collective calls and `zero3_calls` ZeRO-3 gathers and reduce-scatters:
    calls * collective_s + zero3_calls * zero3_call_s (seconds)."""
    return rates.collective_s * np.asarray(calls, float) + rates.zero3_call_s * np.asarray(zero3_calls, float)


def parameter_tensors(model: ModelConfig) -> dict[str, float]:
    """Parameter tensors of one layer, the embedding and the head as a PyTorch module holds them (each weight of
    cost.compute.operator_table.operators, plus its bias where it has one; a LayerNorm's scale and shift; a MoE layer's
    router and its two grouped expert weights): what an optimizer step loops over (count). GPT-2 124M: 12 per
    layer, 2 for the embedding (tokens, positions), 2 for the head (final norm; the LM head is the tied table)."""
    from ..compute.operator_table import operators  # the table's weights: a tensor each
    from ...spec.model.operators import UNIT_OF

    out = {"layer": 0.0, "embedding": 0.0, "head": 0.0}
    for name, op in operators(model).items():
        if op.spec.family == "norm":
            n = 2 if model.norm == "layernorm" else 1  # scale (and shift)
        else:
            n = sum(1 + (w.params > w.gemm_params > 0) for w in op.weights)  # a weight, and its bias if any
        if name == "lm_head" and model.tie_embeddings:
            n = 0  # the embedding's table
        out[UNIT_OF[name]] += op.share * n
    if model.moe is not None:
        out["layer"] += 3 * (model.n_layers - model.dense_layers()) / model.n_layers
    return out


def queued(device_f, device_b, host_f, host_b, pipelined, serial, ramp_f=0.0, ramp_b=0.0):
    """Seconds per micro-batch of a stage whose device works `device_f` / `device_b` seconds in the forward /
    backward while its host spends `host_f` / `host_b` launching them (arrays per plan).

    The host enqueues ahead of the device (the launch queue), so a stretch of work between two synchronisations
    takes the longer of its host and device seconds: max(host, device). Without pipelining nothing synchronises
    between micro-batches (gradient accumulation runs the step's micro-batches back to back), so the stretch is a
    whole micro-batch, max(D_f + D_b, H_f + H_b) (the step's ends: `step_seconds`); in a pipeline each forward and
    backward chunk ends in a send or receive the next one waits on (Megatron-LM synchronises the device after its
    batched p2p calls), and after that synchronisation the device idles until the host has made the schedule's
    calls and the chunk's first operator's (`ramp_f` / `ramp_b`: those seconds summed over the micro-batch's chunk
    steps): max(D_f + ramp_f, H_f) + max(D_b + ramp_b, H_b). `serial` (a CPU device, the host computing): D + H.
    Seconds."""
    one = np.maximum(device_f + device_b, host_f + host_b)
    two = np.maximum(device_f + ramp_f, host_f) + np.maximum(device_b + ramp_b, host_b)
    overlapped = np.where(pipelined, two, one)
    return np.where(serial, device_f + device_b + host_f + host_b, overlapped)


def stage_launches(rates: HostRates, model: ModelConfig, host_f, host_b, send_s, device_f, device_b, pp, v, layers):
    """(launch_f, launch_b, synced, wait) of a stage's micro-batch: the host's seconds launching its forward and
    backward (its operators' `host_f`, `host_b`, half its send/recv calls' `send_s` each, the pipeline schedule's
    calls), where it synchronises (`synchronisations`: pipeline chunk steps, the MoE dispatch of its `layers` x
    the model's MoE share), and what the device waits (`waiting`). Arrays per plan or stage; seconds."""
    moe_layers = np.asarray(layers, float) * moe_share(model)
    synced, ramp_f, ramp_b, schedule = synchronisations(rates, pp, v, moe_layers)
    launch_f, launch_b = host_f + send_s / 2 + schedule, host_b + send_s / 2 + schedule
    return launch_f, launch_b, synced, waiting(device_f, device_b, launch_f, launch_b, synced, rates.serial, ramp_f,
                                               ramp_b)


def waiting(device_f, device_b, host_f, host_b, pipelined, serial, ramp_f=0.0, ramp_b=0.0):
    """Seconds per micro-batch the device waits on its host: `queued` less the device's own seconds, never below
    0 (arrays per plan or stage). Seconds."""
    return np.maximum(queued(device_f, device_b, host_f, host_b, pipelined, serial, ramp_f, ramp_b)
                      - (device_f + device_b), 0.0)


def step_seconds(pipe, pipe_device, tail_device, host_body, host_tail, pipelined, serial, first=None,
                 sync_before_tail=False):
    """Seconds of a step from its pipeline (`pipe`: the micro-batches as `queued` takes them, bubble included;
    `pipe_device`: the same with the device's seconds alone), the device's work after the last backward
    (`tail_device`: exposed gradient reduction and the optimizer) and the host's (`host_body`: launching the
    micro-batches; `host_tail`: the optimizer's loop over the parameter tensors and the step's last calls).

    Without pipelining nothing synchronises before the step's end (the loss's .item()), so the whole step is one
    stretch of a single stream fed by the launch queue. Its time is the longest path through it: the device's
    work alone, the host's alone, or the host up to some launch and the device from there on (a max-plus
    recurrence: device finish_i = max(device finish_i-1, host launch_i) + device_i). Of the split points the
    extremes bind for m alike micro-batches: after the first forward, H_f + (device from the first backward on),
    and after the last forward, (host up to it) + D_b + tail. `first` = (H_f, D_f, H_b, D_b) of one micro-batch
    gives those two; without it, max(device, host). A stack that synchronises before the update
    (`sync_before_tail`: the gradient norm's or the fp16 scaler's .item()) waits for the backward to drain before
    its host launches the update, whose per-tensor Python runs before its fused kernels: tail_device + host_tail
    both add (`host_tail` then holds the update's calls alone; the step's collective calls are the body's). In a
    pipeline the last backward waits on its receive: pipe + max(tail_device, host_tail), or their sum after such a
    sync. On a CPU device all of it adds: pipe + tail_device + host_tail
    (`pipe` already holds the micro-batches' host seconds). Seconds."""
    sync = np.asarray(sync_before_tail, bool)
    tail_host = np.where(sync, 0.0, host_tail)
    body_device = pipe_device + np.where(sync, 0.0, tail_device)
    one = np.maximum(body_device, host_body + tail_host)
    if first is not None:
        h_f, d_f, h_b, d_b = first
        one = np.maximum(one, np.maximum(h_f + body_device - d_f,
                                         host_body - h_b + d_b + np.where(sync, 0.0, tail_device)))
    after = np.where(sync, tail_device + host_tail, np.maximum(tail_device, host_tail))  # the update's end
    return np.where(serial, pipe + tail_device + host_tail,
                    np.where(pipelined, pipe + after, one + np.where(sync, tail_device + host_tail, 0.0)))


def host_seconds(costs, kernels, calls):
    """Host seconds of `kernels` operator launches and `calls` collective calls at a CPU spec's measured
    per-launch costs (spec.hardware.system.HostCosts or its serving ones; 0 without them): kernels * kernel_s + calls *
    collective_s. The executor's serving loop on a CPU (serve.host_time) adds them to its step."""
    if costs is None:
        return 0.0 * (np.asarray(kernels) + np.asarray(calls))
    return costs.kernel_s * np.asarray(kernels, float) + costs.collective_s * np.asarray(calls, float)
