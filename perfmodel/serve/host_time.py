"""Host time on serving's request path, priced by the system's host (`spec.host.cpu.HostCPU`, `System.host_cpu`).

A serving profile says what its engine calls (`spec.serving.schema.ServingStack`: the calls of a layer outside CUDA graphs,
`LayerCalls`; by release, `EngineRelease`: which steps its graphs replay, whether it schedules ahead, its front
end); the host says what each call costs (`HostCalls`). Four terms:

- launches: a step's forward is launched op by op where no graph replays it, layers x calls per layer x seconds per
  call (`launch_host_s`); the device runs what the host enqueues, so the step takes the longer of the two
  (`exposed_launch_s`);
- the step's scheduling, input preparation, sampling and output processing (`schedule_s`): exposed where the
  engine schedules synchronously, hidden under the step where it schedules the next one while the device runs;
- the host work of admitting prompt tokens into a step (`prefill_step_s`), before its launch, which scheduling
  ahead does not hide;
- the front end per request (`frontend_s`): HTTP, template, tokenising, handing over, and streaming the token back.

Seconds measured on another host are scaled by host speed: measured x measuring host's speed / target's speed.
A system without a host (`System.host_cpu` None) is priced on the DGX H100's host class (REFERENCE_HOST), with a
note. The executor's own serving loop (plain-torch) lists no releases and no layer calls: its host time is the
spec's measured host costs (`host_s`, `perfmodel calibrate`), eager dispatch the device does not hide.
"""

from __future__ import annotations


from ..cost.host.launch_queue import call_seconds, host_seconds, layer_calls
from ..cost.compute.moe import moe_share
from ..spec.hardware.system import System
from ..spec.host.cpu import REFERENCE_HOST, HostCPU, reference_host
from ..spec.model.config import ModelConfig
from ..spec.model.operators import LAYER_OPS
from ..spec.serving.settings import with_settings
from ..spec.serving.schema import EngineRelease, ServePlan, ServingStack, load_serving_stack
from ..spec.stack.profile import load_stack



def measured_serving(system: System, stack: ServingStack):
    """The spec's measured serving host costs for this stack (`HostCosts.serving`, perfmodel calibrate), or None."""
    costs = system.host_costs
    return costs.serving if costs is not None and costs.stack == stack.name else None


# Operators the host launches per layer and outside the layers in one forward (the plan file's operators,
# spec.plan.file.LAYER_OPS: norms, qkv, attention, projections, activation, residuals; then embedding, final norm,
# LM head and the sampling), and collective calls (two all-reduces per layer, the embedding's and the logits')
MODEL_OPS = ("embedding", "final_norm", "lm_head", "sample")


def host_s(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, decode: float,
           decode_keys: float = 0.0) -> float:
    """Host seconds of one step whose `decode` decoding sequences attend `decode_keys` keys in all
    where the spec measured per-launch costs for this stack (`HostCosts.serving`, else `HostCosts`: perfmodel
    calibrate; eager dispatch the device does not hide, the executor's case): launches x kernel_s + collective
    calls x collective_s (`cost.host.launch_queue.host_seconds`) + the decode attention's (sequence, local head) pairs x
    attention_s + their keys x attention_key_s (`launches`); 0 otherwise (the engines: `launch_host_s`)."""
    costs = system.host_costs
    if costs is None or costs.stack != stack.name:
        return 0.0
    kernels, calls, pairs, keys = launches(model, plan, stack, decode, decode_keys)
    s = measured_serving(system, stack)
    if s is None:  # training's costs: no attention terms
        return float(host_seconds(costs, kernels, calls))
    return float(host_seconds(s, kernels, calls)) + s.attention_s * pairs + s.attention_key_s * keys


def launches(model: ModelConfig, plan: ServePlan, stack: ServingStack, decode: float = 0.0,
             decode_keys: float = 0.0) -> tuple[int, int, float, float]:
    """(operator launches, collective calls, decode attention's (sequence, local head) pairs, the keys those pairs
    read) of one forward step through all layers on a tp rank (the executor serves no pipeline) with `decode` decoding sequences attending `decode_keys` keys together
    (MODEL_OPS). A CPU attention kernel works through a call one (sequence, head) block at a time, each with its
    own set-up, and one query's pass over its keys is a vector loop, not the blocked GEMMs its FLOPs are priced at
    (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp); a prefill's attention is priced by its FLOPs from the
    measured attention table."""
    calls = 0 if plan.tp == 1 else 2 * model.n_layers + 1 + stack.vocab_parallel_embedding
    heads = model.n_layers * model.n_heads / plan.tp
    return model.n_layers * len(LAYER_OPS) + len(MODEL_OPS), calls, heads * decode, heads * decode_keys


def overhead_part(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, decode: float,
                  context: float) -> float:
    """The stack's per-step host seconds and the measured host costs of `decode` sequences per micro-batch."""
    return stack.step_overhead_s + host_s(model, system, plan, stack, decode, decode * context)


def host_of(system: System) -> HostCPU:
    """The host that launches the system's kernels: `System.host_cpu`, else the DGX H100's (REFERENCE_HOST)."""
    return system.host_cpu if system.host_cpu is not None else reference_host()


def host_note(system: System) -> str | None:
    """A note where the system names no host and the request path is priced on the reference host."""
    if system.host_cpu is not None:
        return None
    return (f"{system.name} names no host (System.host_cpu): its request path is priced on the DGX H100's host "
            f"({REFERENCE_HOST})")


def plan_stack(plan: ServePlan) -> ServingStack:
    """The serving stack `plan` runs: its profile with the plan's own max_batch, max_num_tokens and chunked_prefill
    where it sets them (`spec.serving.settings.with_settings`)."""
    return with_settings(load_serving_stack(plan.stack), plan)


def release_of(stack: ServingStack, plan: ServePlan) -> EngineRelease | None:
    """The stack's release the plan runs (`ServingStack.release` of plan.stack_version), or None."""
    return stack.release(plan.stack_version)


def measured_host_s(seconds: float, measured_speed: float, system: System) -> float:
    """`seconds` measured on a host of speed `measured_speed` (`HostCPU.speed`), on the system's host: seconds x
    measured_speed / its speed (both relative to the DGX H100's eager op, spec.host.cpu)."""
    return seconds * measured_speed / host_of(system).speed


def frontend_s(system: System, plan: ServePlan, stack: ServingStack, prompt: float) -> float:
    """Seconds of one request's front end (`FrontEnd`: fixed + per prompt token, measured on another host and
    scaled to this one, `measured_host_s`); 0 without a release."""
    rel = release_of(stack, plan)
    if rel is None:
        return 0.0
    f = rel.frontend
    return measured_host_s(f.request_s + f.token_s * prompt, f.host_speed, system)


def step_graphs(model: ModelConfig, plan: ServePlan, release: EngineRelease, tokens: float, decode_only: bool) -> str:
    """How the engine runs a step of `tokens` tokens (a decode-only one, a token per sequence, or one that carries
    prompt tokens) on a rank: 'full' (one graph replay), 'piecewise' (replays with attention launched between
    them), 'compiled' (torch.compile'd code, no graph) or 'eager' (op by op). Prefill graphs hold steps of at most
    graph_max_tokens tokens, and are off for the layouts and models `graphs_off_for` names; decode graphs hold
    batches of at most decode_graph_max_batch tokens."""
    fallback = "compiled" if release.compiled else "eager"
    if decode_only:
        return release.decode_graphs if release.decode_graphs != "none" and (
            tokens <= release.decode_graph_max_batch) else fallback
    off = {"expert_parallel": plan.ep > 1, "attention_dp": plan.attention_dp > 1,
           "linear_attention": model.linear_attention is not None, "latent_attention": model.mla is not None}
    if release.prefill_graphs == "none" or tokens > release.graph_max_tokens or any(
            off[k] for k in release.graphs_off_for):
        return fallback
    return release.prefill_graphs


def launch_host_s(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, tokens: float,
                  decode_only: bool) -> float:
    """Host seconds to launch one step's forward on a rank (`step_graphs`): a full graph, one replay; else every
    layer's calls (`LayerCalls`: piecewise, the replays and attention between them; compiled, Inductor's launches
    and, in a MoE layer, the experts' custom op calls; eager, a dense layer's calls and a MoE layer's added ones;
    tensor-parallel collectives outside graphs) x the host's seconds per call (`cost.host.launch_queue.call_seconds`), and the eager ops
    outside the layers (MODEL_OPS). A pipeline stage launches its own layers, pp micro-batches a step: n_layers in
    all. A stack without releases runs eager (perfmodel's executor), priced so where the spec has no measured host
    costs (`host_s` prices the same launches from those). 0 without layer calls."""
    rel, lc = release_of(stack, plan), stack.layer_calls
    if lc is None or tokens <= 0 or (rel is None and system.host_costs is not None):
        return 0.0
    host = host_of(system)
    mode = step_graphs(model, plan, rel, tokens, decode_only) if rel is not None else "eager"
    if mode == "full":
        return host.calls.graph_replay_s
    moe = moe_share(model)
    collectives = lc.collectives * host.calls.nccl_call_s if plan.tp > 1 else 0.0
    eager = (call_seconds(layer_calls(load_stack(lc.from_profile), model, "none")[0], host.calls)
             if lc.from_profile else call_seconds(lc.eager, host.calls) + moe * call_seconds(lc.moe, host.calls))
    per_layer = {"piecewise": call_seconds(lc.outside_graphs, host.calls),
                 "compiled": call_seconds(lc.compiled, host.calls) + moe * call_seconds(lc.moe, host.calls) + collectives,
                 "eager": eager + collectives}[mode]
    outside = 0.0 if mode == "piecewise" else len(MODEL_OPS) * host.calls.eager_op_s
    return model.n_layers * per_layer + outside


def exposed_launch_s(host: float, device: float) -> float:
    """Seconds a step's launches add to its device time: the host enqueues ahead of the device, so the step takes
    the longer of the two (CUDA C Programming Guide, "Asynchronous Concurrent Execution"; as `cost.host.launch_queue.
    queued` for a training step without synchronisation): max(0, host - device)."""
    return max(0.0, host - device)


def schedule_s(system: System, plan: ServePlan, stack: ServingStack, seqs: float, busy: float,
               prompts: bool, extra_host: float = 0.0) -> float:
    """Host seconds a step of `seqs` running sequences adds beside its forward (whose device and launches take
    `busy` seconds): scheduling, inputs, sampling and outputs, step_host_s + step_host_seq_s x seqs (and
    `extra_host` seconds on this host of other per-step work: a KV connector's, `kv_offload`), all of it
    where the engine schedules synchronously, what exceeds `busy` where it schedules the next step during this one;
    and, where the step admits prompt tokens (`prompts`), prefill_step_s, which scheduling ahead does not hide
    (vLLM's async scheduling "has no effect on the prefill stage", vllm-project/vllm PR #27914). Measured on the
    front end's host and scaled to this one (`measured_host_s`); 0 without a release."""
    rel = release_of(stack, plan)
    if rel is None:
        return 0.0
    step = measured_host_s(rel.step_host_s + rel.step_host_seq_s * seqs, rel.frontend.host_speed, system) + extra_host
    admit = measured_host_s(rel.prefill_step_s, rel.frontend.host_speed, system) if prompts else 0.0
    return admit + (max(0.0, step - busy) if rel.async_scheduling else step)


def arrival_wait_steps(stack: ServingStack, plan: ServePlan) -> float:
    """Steps a request that reaches a busy replica waits on average before its first step starts: the rest of the
    step in flight, half a step for an arrival at a random moment (the mean residual of equal steps), and where the
    engine schedules ahead the step already scheduled without it, one more (vLLM's async scheduling, SGLang's and
    TensorRT-LLM's overlap schedulers: the host prepares step n + 1 while the device runs step n)."""
    rel = release_of(stack, plan)
    return 0.0 if rel is None else 0.5 + float(rel.async_scheduling)
