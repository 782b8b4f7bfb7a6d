"""A serving step's MoE layers across expert-parallel ranks: how the tokens reach their experts and come back, and
how unevenly they land.

The exchange (`ServePlan.moe_a2a`, default the stack's `ServingStack.moe_a2a`), one per MoE layer:
- allgather: every rank all-gathers the replica's tokens x hidden (bf16) over the tp x attention_dp ranks before
  the experts and reduce-scatters their output after (vLLM's default `--all2all-backend allgather_reducescatter`,
  `AgRsAll2AllManager`; SGLang's DP attention without `--moe-a2a-backend`, dp_gather / dp_scatter; TensorRT-LLM's
  AllGather / ReduceScatter MoE communication). Its bytes grow with the replica's tokens, whatever top_k is.
- deepep_ll: DeepEP's low-latency kernels (deepseek-ai/DeepEP README, "Low-latency kernels with pure RDMA": each
  token sent to each of its top_k experts, not once per rank, fp8 with one fp32 scale per 128 values on dispatch,
  bf16 on combine; SGLang `--moe-a2a-backend deepep --deepep-mode low_latency`, vLLM `deepep_low_latency`).
- alltoall: a direct all-to-all of the routed copies at bf16 both ways (TensorRT-LLM's NVLink one-/two-sided MoE
  all-to-all on NVL72, vLLM's pplx, NCCL alltoall).
The routed kinds are priced as NCCL's all-to-all on the system's tiers (`cost.comm.collectives.all_to_all_time` through
`group_collective`): each rank sends its own tokens' copies, (R - 1) / R of them off the rank.

Load across ranks: a step's routed copies spread over R = ep ranks; with T tokens each picking top_k experts
uniformly (balanced routing, the model's own skew not priced) a rank's share is a binomial count of mean
mu = T k / R and variance T k (1/R)(1 - 1/R), and the step waits for the busiest rank, whose expected load is
about mu + sigma z_R, z_R the expected maximum of R standard normals by Blom's approximation,
Phi^-1((R - 0.375) / (R + 0.25)) (Blom 1958, "Statistical Estimates and Transformed Beta-Variables", eq. 6.10.3;
1.43 at R = 8 against the exact 1.42, 2.34 at R = 64; the asymptote sqrt(2 ln R) overstates it by 20-45% at these
R). `busiest_share` returns that over mu; the grouped GEMMs of the busiest rank run at it.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from ..cost.comm.collectives import group_collective
from ..cost.compute.kernels import ACT_BYTES
from ..spec.model.config import ModelConfig
from ..spec.hardware.system import System
from ..spec.serving.schema import ServePlan, ServingStack

FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128  # DeepEP low-latency dispatch: fp8 values and an fp32 scale per 128
COMBINE_BYTES = ACT_BYTES  # bf16 expert outputs back


def moe_a2a(plan: ServePlan, stack: ServingStack | None) -> str:
    """The exchange a plan runs: the plan's `moe_a2a`, else its stack's default (no stack: the schema's,
    allgather)."""
    return plan.moe_a2a or (stack.moe_a2a if stack is not None else ServingStack.model_fields["moe_a2a"].default)


def active_experts(local: float, top_k: int, n_experts: int, tokens: float) -> float:
    """Expected local experts that receive at least one of `tokens` tokens, each routed to top_k of n_experts
    uniformly (balanced routing): local x (1 - (1 - k / E)^tokens). A decode step of a few tokens reads only those
    experts' weights."""
    return local * (1.0 - (1.0 - top_k / n_experts) ** tokens)


def busiest_share(tokens: float, top_k: int, ranks: int) -> float:
    """Expected load of the busiest of `ranks` expert-parallel ranks over the mean, for `tokens` tokens routed to
    top_k experts each, uniformly (module docstring): 1 + sqrt((1 - 1/R) / (T k / R)) z_R; 1 for one rank or no
    tokens."""
    copies = tokens * top_k
    if ranks <= 1 or copies <= 0:
        return 1.0
    mean = copies / ranks
    sigma = math.sqrt(copies * (1.0 / ranks) * (1.0 - 1.0 / ranks))
    return 1.0 + sigma * expected_max_normal(ranks) / mean


def expected_max_normal(n: int) -> float:
    """Expected maximum of n independent standard normals, Blom's approximation Phi^-1((n - 0.375) / (n + 0.25))
    (module docstring)."""
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def allgather_exchange_s(model: ModelConfig, system: System, plan: ServePlan, tokens: float,
                         wire: float) -> float:
    """One MoE layer's all-gather of the replica's `tokens` x hidden (`wire` bytes each) over its tp x attention_dp
    ranks and reduce-scatter of the experts' output (`cost.comm.collectives.group_collective`: the system's tiers)."""
    if tokens <= 0:
        return 0.0
    size = tokens * model.hidden * wire
    return sum(float(group_collective(system, kind, size, plan.moe_ranks, 1, plan.gpus))
               for kind in ("all_gather", "reduce_scatter"))


def routed_exchange_s(model: ModelConfig, system: System, plan: ServePlan, tokens: float, kind: str) -> float:
    """One MoE layer's dispatch and combine of the routed copies (module docstring): each of the tp x attention_dp
    ranks sends its tokens / R tokens' top_k copies of hidden values (fp8 with scales on DeepEP's low-latency
    dispatch, else bf16) and receives as many back, as two all-to-alls over the ranks' tiers."""
    if tokens <= 0 or model.moe is None:
        return 0.0
    ranks = plan.moe_ranks
    copies = tokens / ranks * model.moe.top_k * model.hidden
    dispatch = copies * (FP8_DISPATCH_BYTES if kind == "deepep_ll" else COMBINE_BYTES)
    return sum(float(group_collective(system, "all_to_all", size, ranks, 1, plan.gpus))
               for size in (dispatch, copies * COMBINE_BYTES))


def moe_exchange_s(model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack | None, tokens: float,
                   wire: float) -> float:
    """One MoE layer's exchange under attention data parallelism, by the plan's `moe_a2a` (module docstring)."""
    kind = moe_a2a(plan, stack)
    if kind == "allgather":
        return allgather_exchange_s(model, system, plan, tokens, wire)
    return routed_exchange_s(model, system, plan, tokens, kind)


def ep_note(model: ModelConfig, plan: ServePlan, stack: ServingStack, tokens: float) -> str | None:
    """The breakdown's line on expert parallelism at a step of `tokens` tokens, or None without it. The share is
    the one the step is priced at: of each micro-batch's tokens (tokens / pp, halved again under two-batch overlap
    where the step runs more than one sequence, as `step_time.step_parts` runs it)."""
    if model.moe is None or (plan.ep == 1 and plan.attention_dp == 1):
        return None
    halves = 2 if plan.two_batch_overlap and tokens > plan.decode_queries else 1
    micro = tokens / plan.pp / halves
    share = busiest_share(micro, model.moe.top_k, plan.ep)
    of = (f"a {tokens:,.0f}-token step" if micro == tokens else
          f"each {micro:,.0f}-token micro-batch of a {tokens:,.0f}-token step")
    text = (f"expert parallelism: the busiest of {plan.ep} ranks runs {share:.2f}x the mean routed copies of {of} "
            "(balanced routing's spread, serve.wide_ep.busiest_share)")
    if plan.attention_dp > 1:
        kind = moe_a2a(plan, stack)
        text += (f"; MoE exchange across the {plan.attention_dp} attention groups: {kind}"
                 + (" (the stack's default)" if plan.moe_a2a is None else ""))
    return text


DEVICE_PARTS = ("gemm", "attention", "memory", "lm_head", "draft")  # what the other micro-batch's exchange hides behind


def two_batch_parts(step, model: ModelConfig, system: System, plan: ServePlan, stack: ServingStack, decode: float,
                    context: float, prefill_seqs: float, prompt: float, logits: float, part, draft,
                    host: tuple[str, ...], clock: float | None = None, mix: dict | None = None) -> dict[str, float]:
    """A step under two-batch overlap (`ServePlan.two_batch_overlap`: SGLang `--enable-two-batch-overlap`, after
    DeepSeek's profile-data repository, deepseek-ai/profile-data README: decode splits the batch in two and
    overlaps one half's dispatch and combine with the other half's attention and experts): the step's sequences as
    two micro-batches of half each (`step`, `step_time.step_parts`, priced without the overlap), their device
    parts twice (the weights read once per half, as the engines run them), their collectives hidden behind that
    compute up to its length (the exposed rest in tp_comm), the host parts of the whole step once. The pipeline's
    fill (one half-layer not overlapped) is not priced. `clock` and `mix` as `step`'s: the mix the halves' kinds of
    time twice, their exposed collectives and the whole step's overhead."""
    one = plan.model_copy(update={"two_batch_overlap": False})
    halves = {} if mix is not None else None
    half = step(model, system, one, stack, decode / 2, context, prefill_seqs / 2, prompt, logits / 2, part=part,
                draft=draft, clock=clock, mix=halves)
    whole = step(model, system, one, stack, decode, context, prefill_seqs, prompt, logits, part=part, draft=draft,
                 clock=clock)
    out = {k: 2.0 * v for k, v in half.items() if k in DEVICE_PARTS}
    out["pp_comm"] = 2.0 * half["pp_comm"]
    out["tp_comm"] = max(0.0, 2.0 * half["tp_comm"] - sum(out[k] for k in DEVICE_PARTS if k in out))
    if "clock" in half:  # the halves' compute at the clock the power limit holds, behind which nothing hides
        out["clock"] = 2.0 * half["clock"]
    if mix is not None:
        for k, v in halves.items():
            mix[k] = mix.get(k, 0.0) + (out["tp_comm"] if k == "tp_comm" else whole["overhead"] if k == "overhead"
                                        else 2.0 * v)
    return out | {k: whole[k] for k in host}
