"""A mixture-of-experts layer's MLP on one device, per micro-batch: router, token dispatch and combine, the
experts' grouped GEMMs, shared experts, their weights and what they keep for the backward.

Layout: Megatron-Core's MoE parallel folding (Liu et al. 2025, "MoE Parallel Folding", arXiv 2504.14960,
Sec. 3): attention runs on the stage's tp x cp x dp ranks, the experts on the same ranks regrouped as
etp x ep x edp (etp innermost, then ep), so an ep group is `ep` devices `etp` apart and an edp group `edp`
devices `ep * etp` apart.

Per MoE layer and micro-batch, a device routes the T tokens it holds after attention (micro_batch * seq / cp,
/ tp with sequence parallelism: Megatron-Core requires it with tp and experts):
  router      GEMM T x n_experts x h (bf16), then scores and top-k (memory-bound, fp32 per token x expert);
  permute     copy the T k routed token copies into expert order;
  dispatch    all-to-all of T k h bf16 over the ep group (Megatron's alltoall dispatcher), all-gather of the
              T h tokens over it (allgather), or each token once per domain holding one of its experts (flex:
              DeepEP / HybridEP, `flex_dispatch_time`); with etp > 1 an all-gather over etp after it;
  experts     grouped GEMMs over the device's n_experts / ep experts, each on M = T k etp ep / n_experts routed
              tokens (balanced routing; times `expert_imbalance` on the busiest device, which sets the pace
              of the all-to-all that follows), the activation between them;
  combine     the reverse collectives, then the weighted sum of each token's k outputs (unpermute);
  shared      shared experts as a dense tp-split MLP on the (sequence-gathered) tokens.
The backward runs every collective once more (and the recomputed forward under full recompute).
A layer of the model's mean is priced: these costs times the share of MoE layers (`moe_share`), beside the
dense MLP's operators times the dense share (`cost.operators.layer_share`); the dense-first layers of
DeepSeek-V3 (3 of 61) are spread over the stages rather than placed on the first.
"""

from __future__ import annotations

import math

import numpy as np

from ..hardware import System
from ..models import ModelConfig
from . import comm as C
from .kernels import ACT_BYTES, ELEMENTWISE_BYTES, Device, Op, elementwise_op, linear_op
from .layouts import Layouts
from .operators import forward_passes

ROUTER_SCORE_BYTES = 4.0  # fp32 scores per token x expert kept for the router's backward (Megatron-Core router)


def moe_share(model: ModelConfig) -> float:
    """MoE layers over all layers (0 for a dense model): what a mean layer carries of one MoE layer's costs."""
    return model.moe_layers() / model.n_layers


def tokens_in(lay: Layouts) -> np.ndarray:
    """Tokens one device routes per micro-batch: micro_batch * seq / cp, / tp with sequence parallelism."""
    return lay.tokens_per_microbatch / lay.sp_divisor


def expert_tokens(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Routed tokens per local expert on the busiest device: T k etp ep / n_experts * expert_imbalance."""
    m = model.moe
    return tokens_in(lay) * m.top_k * lay.etp * lay.ep / m.n_experts * lay.expert_imbalance


def moe_kernels(model: ModelConfig, dev: Device, lay: Layouts) -> list[Op]:
    """The kernels of one MoE layer's MLP on one device per micro-batch (module docstring), unscaled."""
    m, h, g = model.moe, model.hidden, (2 if model.gated else 1)
    T, k = tokens_in(lay), m.top_k
    local = m.n_experts / lay.ep
    M, fe = expert_tokens(model, lay), m.expert_ffn_hidden / lay.etp
    routed = M * local  # token copies the busiest device's experts run
    act = "swiglu" if model.gated else "gelu"
    ops = linear_op(dev, "router", T, m.n_experts, h, precision="bf16")
    ops.append(elementwise_op(dev, "router_topk", T * m.n_experts, *ELEMENTWISE_BYTES["router"]))
    ops.append(elementwise_op(dev, "permute", T * k * h, *ELEMENTWISE_BYTES["permute"]))
    ops += linear_op(dev, "experts_in", M, g * fe, h, groups=local)
    ops.append(elementwise_op(dev, "expert_" + act, routed * fe, *ELEMENTWISE_BYTES[act]))
    ops += linear_op(dev, "experts_out", M, h, fe, groups=local)
    ops.append(elementwise_op(dev, "unpermute", T * k * h, *ELEMENTWISE_BYTES["unpermute"]))
    if m.shared_ffn_hidden:
        Ts, fs = lay.tokens_per_microbatch, m.shared_ffn_hidden / lay.tp  # gathered over tp, ffn split by tp
        ops += linear_op(dev, "shared_in", Ts, g * fs, h)
        ops.append(elementwise_op(dev, "shared_" + act, Ts * fs, *ELEMENTWISE_BYTES[act]))
        ops += linear_op(dev, "shared_out", Ts, h, fs)
    return ops


def scaled(op: Op, w: float) -> Op:
    """`op` counted `w` times (a mean layer's share of it)."""
    return Op(op.name, op.kind, op.fwd_s * w, op.bwd_s * w, op.fwd_flops * w, op.bwd_flops * w, op.recompute,
              op.formula + (f" x {w:.3g}" if w != 1 else ""), op.active)


def moe_ops(model: ModelConfig, system: System, lay: Layouts) -> list[Op]:
    """A mean layer's MoE kernels per micro-batch for every plan: `moe_kernels` x `moe_share`, costed once per
    distinct combination of the fields they read (none for a dense model)."""
    if model.moe is None:
        return []
    from .units import spread

    narrow = lay.precision in ("fp8", "fp4")
    names = ("tp", "cp", "ep", "etp", "micro_batch", "sequence_parallel") + (("dp", "zero") if narrow else ())
    first, inverse = lay.distinct(names)
    sub = lay.take(first)
    w = moe_share(model)
    return [spread(scaled(op, w), inverse) for op in moe_kernels(model, Device(model, system, sub), sub)]


def dispatch_bytes(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Bytes one device sends in one dispatch (and receives back in one combine): alltoall, its T k routed
    token copies (bf16; times the imbalance the busiest device receives); allgather, its T tokens once."""
    per = model.moe.top_k * lay.expert_imbalance if lay.moe_dispatcher != "allgather" else 1.0
    return tokens_in(lay) * per * model.hidden * ACT_BYTES


def block_hit(n_experts: int, top_k: int, block: float) -> float:
    """Probability that a token's top_k experts, drawn uniformly without repeats from n_experts, include one of
    a block of `block` experts: 1 - C(E - b, k) / C(E, k) (balanced routing, as the benchmarks force it)."""
    b = int(round(block))
    if b >= n_experts:
        return 1.0
    return 1.0 - math.comb(n_experts - b, top_k) / math.comb(n_experts, top_k)


def flex_dispatch_time(model: ModelConfig, system: System, lay: Layouts) -> np.ndarray:
    """Seconds of one deduplicating dispatch (or combine) per device: DeepEP / HybridEP (Megatron-Core's "flex"
    dispatcher, Zhao et al. 2025, DeepEP) send a token once to every remote domain that holds one of its experts
    and forward it inside the domain, rather than once per expert copy.

    Over the ep group's tiers (`comm.group_phases`, innermost first, m_j members of blocks of P_{j-1} ranks), a
    device sends T h bf16 bytes times (m_j - 1) `block_hit`(P_{j-1} n_experts / ep) over tier j (the tokens
    received from outer tiers and forwarded inward are not counted); the tiers run concurrently:
    sum_j (m_j - 1) a_j + max_j bytes_j / B_j, the busiest device's share times expert_imbalance."""
    m = model.moe
    per_token = model.hidden * ACT_BYTES * lay.expert_imbalance
    ep, etp = np.broadcast_arrays(np.asarray(lay.ep), np.asarray(lay.etp))
    lat, slope = np.zeros(len(ep)), np.zeros(len(ep))
    for e, t in set(zip(ep.tolist(), etp.tolist())):
        latency, worst, inner = 0.0, 0.0, 1
        for ph in C.group_phases(system, e, t, lay.gpus):
            bw, a = ph.ring("all_to_all")
            latency += (ph.members - 1) * a
            worst = max(worst, (ph.members - 1) * block_hit(m.n_experts, m.top_k, inner * m.n_experts / e) / bw)
            inner *= ph.members
        sel = (ep == e) & (etp == t)
        lat[sel], slope[sel] = latency, worst
    return lat + slope * tokens_in(lay) * per_token


def moe_comms(model: ModelConfig, system: System, lay: Layouts) -> list[Comm]:
    """The collectives of a mean layer's MoE MLP per micro-batch (exposed: Megatron-Core runs them on the
    compute stream unless --overlap-moe-expert-parallel-comm), scaled by `moe_share`.

    alltoall: dispatch and combine are all-to-alls over the ep group, S = `dispatch_bytes` each
    (`comm.all_to_all_time`); allgather: an all-gather of every member's tokens and a reduce-scatter of the
    outputs over it (S = ep x `dispatch_bytes`, `comm.collective_time`). With etp > 1 the routed tokens are
    all-gathered over the etp group after the dispatch and reduce-scattered before the combine. Each runs once
    in the forward, once in the backward, and again in a recomputed forward."""
    if model.moe is None:
        return []
    from .sharded import Comm  # sharded -> memory -> this module: import at use

    w = moe_share(model)
    passes = forward_passes("layer", lay.recompute)
    out = []
    s = dispatch_bytes(model, lay)
    if lay.moe_dispatcher == "alltoall":
        one = C.group_collective(system, "all_to_all", s, lay.ep, lay.etp, lay.gpus)
        pairs = (("ep dispatch all-to-all", "all_to_all", s, one), ("ep combine all-to-all", "all_to_all", s, one))
    elif lay.moe_dispatcher == "flex":
        one = flex_dispatch_time(model, system, lay)
        s = tokens_in(lay) * model.hidden * ACT_BYTES
        pairs = (("ep dispatch (flex)", "all_to_all", s, one), ("ep combine (flex)", "all_to_all", s, one))
    else:
        ag = C.group_collective(system, "all_gather", s * lay.ep, lay.ep, lay.etp, lay.gpus)
        rs = C.group_collective(system, "reduce_scatter", s * lay.ep, lay.ep, lay.etp, lay.gpus)
        pairs = (("ep dispatch all-gather", "all_gather", s * lay.ep, ag),
                 ("ep combine reduce-scatter", "reduce_scatter", s * lay.ep, rs))
    on = lay.ep > 1
    for name, kind, nbytes, t in pairs:
        out.append(Comm(name, kind, "ep", nbytes=nbytes, seconds=t, calls=w * (passes + 1) * on, fwd=w * t * on,
                        bwd=w * t * passes * on, unit="layer", part="ep_comm", tier=group_tiers(system, lay.ep, lay.etp,
                                                                                            lay.gpus), active=on))
    # etp: the routed token copies this device's experts see, gathered over etp (and reduce-scattered back)
    routed = expert_tokens(model, lay) * model.moe.n_experts / lay.ep * model.hidden * ACT_BYTES
    on = lay.etp > 1
    for name, kind in (("etp token all-gather", "all_gather"), ("etp output reduce-scatter", "reduce_scatter")):
        t = C.group_collective(system, kind, routed, lay.etp, 1, lay.gpus)
        out.append(Comm(name, kind, "etp", nbytes=routed, seconds=t, calls=w * (passes + 1) * on, fwd=w * t * on,
                        bwd=w * t * passes * on, unit="layer", part="ep_comm", tier=group_tiers(system, lay.etp, 1,
                                                                                             lay.gpus), active=on))
    return out


def group_tiers(system: System, n, stride, gpus) -> np.ndarray:
    """Per plan, the tiers a group of n devices `stride` apart spans ('nvlink x8 > infiniband x4')."""
    n, stride = np.broadcast_arrays(np.asarray(n), np.asarray(stride))
    names = {}
    for a, b in set(zip(n.tolist(), stride.tolist())):
        names[(a, b)] = C.describe(C.group_phases(system, int(a), int(b), gpus))
    return np.array([names[(a, b)] for a, b in zip(n.tolist(), stride.tolist())], dtype=object)


# --- weights -----------------------------------------------------------------------------------------------
def expert_layer_params(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Routed-expert parameters on one device for a mean layer: n_experts expert MLPs over ep x etp (their
    biases too), times `moe_share`. Their gradients reduce, and ZeRO shards their states, over edp."""
    if model.moe is None:
        return np.zeros(len(lay))
    return model.moe.n_experts * model.expert_params() / (lay.ep * lay.etp) * moe_share(model) + 0.0 * lay.ep


def moe_replicated_params(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """The MoE MLP's other parameters on one device for a mean layer: the router (whole on every rank) and the
    shared experts (split over tp like a dense MLP), times `moe_share`. Data-parallel like the dense weights."""
    if model.moe is None:
        return np.zeros(len(lay))
    return (model.router_params() + model.shared_expert_params() / lay.tp) * moe_share(model)


def moe_gemm_params(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """The GEMM matrices of a mean layer's MoE MLP on one device (fp8/fp4 keep narrow copies of them): routed
    experts over ep x etp and shared experts over tp (the router stays bf16), times `moe_share`."""
    if model.moe is None:
        return np.zeros(len(lay))
    m, mats, h = model.moe, model.mlp_matrices, model.hidden
    routed = m.n_experts * mats * h * m.expert_ffn_hidden / (lay.ep * lay.etp)
    shared = mats * h * (m.shared_ffn_hidden or 0) / lay.tp
    return (routed + shared) * moe_share(model)


# --- activations -------------------------------------------------------------------------------------------
def moe_kept_bytes(model: ModelConfig, lay: Layouts, recompute=None) -> np.ndarray:
    """Bytes a mean layer's MoE MLP keeps for its backward per micro-batch on one device (bf16 unless said),
    in the manner of Korthikanti et al. 2022, Sec. 4.1: the router's input (2 h per token) and fp32 scores
    (4 n_experts), each expert GEMM's input (2 h and 2 fe/etp per routed copy) and the activation's (2 g fe/etp),
    the combine's expert outputs (2 h per copy, for the weights' gradient), and the shared experts' like a dense
    MLP's; times `moe_share`. Full recompute keeps none of it (the layer input only, counted by norm1)."""
    if model.moe is None:
        return np.zeros(len(lay))
    m, h, g = model.moe, model.hidden, (2 if model.gated else 1)
    T = tokens_in(lay)
    routed = expert_tokens(model, lay) * m.n_experts / lay.ep
    fe = m.expert_ffn_hidden / lay.etp
    kept = T * (2 * h + ROUTER_SCORE_BYTES * m.n_experts) + routed * 2 * (h + g * fe + fe) + T * m.top_k * 2 * h
    if m.shared_ffn_hidden:
        fs = m.shared_ffn_hidden / lay.tp
        kept = kept + lay.tokens_per_microbatch * 2 * (g * fs + fs) + T * 2 * h  # input kept as the sp shard
    rc = lay.recompute if recompute is None else np.broadcast_to(np.asarray(recompute), (len(lay),))
    return np.where(np.asarray(rc) == "full", 0.0, kept * moe_share(model))


def dispatch_buffer_bytes(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """The dispatcher's transient buffers of the layer running (one at a time): the permuted tokens sent and
    the tokens received, 2 x `dispatch_bytes` (x ep for allgather, which receives every member's), and with
    etp > 1 the gathered copy; 0 for a dense model."""
    if model.moe is None:
        return np.zeros(len(lay))
    recv = dispatch_bytes(model, lay) * np.where(lay.moe_dispatcher == "allgather", lay.ep, 1)
    gathered = np.where(lay.etp > 1, expert_tokens(model, lay) * model.moe.n_experts / lay.ep * model.hidden
                        * ACT_BYTES, 0.0)
    return dispatch_bytes(model, lay) + recv + gathered
