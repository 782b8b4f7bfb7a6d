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
  (MaxText's dense dispatch, Plan.moe_dense_dispatch: one-hot einsums on capacity-padded buffers instead of
  permute and unpermute, the experts on those buffers: cost.compute.moe_dense);
  shared      shared experts as a dense tp-split MLP on the (sequence-gathered) tokens.
The backward runs every collective once more (and the recomputed forward under full recompute and names, which
re-runs the whole MoE MLP: JAX's remat keeps none of its tensors unless named, and MaxText's policies name none
of them but mlpwi_0).
A layer of the model's mean is priced: these costs times the share of MoE layers (`moe_share`), beside the
dense MLP's operators times the dense share (`cost.compute.operator_table.layer_share`); the dense-first layers of
DeepSeek-V3 (3 of 61) are spread over the stages rather than placed on the first.
"""

from __future__ import annotations

import math

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ...spec.stack.profile import load_stack
from ..comm import collectives as C
from .kernels import ACT_BYTES, ELEMENTWISE_BYTES, Device, Op, elementwise_op, linear_op, saved_input_bytes
from ..layouts import Layouts
from .moe_dense import dense_dispatch_ops, dense_load

# Bytes moved per element (forward, backward) by the MoE MLP's memory-bound kernels, per element of the tensor named:
MOE_ELEMENTWISE_BYTES = {
    "router": (12, 12),  # per token x expert: fp32 logits read, scores written, top-k reads them; backward alike
    "permute": (4, 4),  # per routed token x hidden: copy into expert order (read, write); backward scatters back
    "unpermute": (6, 8),  # per routed token x hidden: read the expert output and its weight, write the sum;
    # backward reads dy and the expert output (for the weight's gradient), writes dx
    "expert_bias_fc2": (12, 12),  # per routed token x hidden, Megatron-Core TEGroupedMLP._apply_bias (bf16 probs):
    # per expert b * p written, t + b * p read 2 + 2 and written, torch.cat read and written; backward the two
    # products' gradients, g * p and g * b each read, written and summed (to the bias over tokens, to the probability)
    "expert_bias_fc1": (8, 2),  # per routed token x fc1 output, the same loop without probabilities (NeMo AutoModel
    # GroupedExpertsDeepEP): t + b read and written, torch.cat read and written; backward the bias's sum over tokens
}
ROUTER_SCORE_BYTES = 4.0  # fp32 scores per token x expert kept for the router's backward (Megatron-Core router)


def moe_share(model: ModelConfig) -> float:
    """MoE layers over all layers (0 for a dense model): what a mean layer carries of one MoE layer's costs."""
    return model.moe_layers() / model.n_layers


def tokens_in(lay: Layouts) -> np.ndarray:
    """Tokens one device routes per micro-batch: micro_batch * seq / cp, / tp with sequence parallelism."""
    return lay.tokens_per_microbatch / lay.sp_divisor


def routed_load(lay: Layouts) -> float:
    """Tokens the busiest expert runs over the balanced mean T k / E, after the capacity rule (dimensionless).

    Dropless: expert_imbalance. With a capacity factor c each expert keeps at most c times the mean of a device's
    tokens (Megatron-Core moe_utils.get_capacity: ceil(T k / E x c); the rest are dropped, so min(imbalance, c));
    padded to capacity (moe_pad_expert_input_to_capacity) every expert runs exactly c times the mean, and the
    all-to-all moves the padded buffers (token_dispatcher.py MoEAlltoAllTokenDispatcher: num_out_tokens =
    capacity x num_experts)."""
    if lay.moe_capacity_factor is None:
        return lay.expert_imbalance
    if lay.moe_pad_to_capacity:
        return lay.moe_capacity_factor
    return min(lay.expert_imbalance, lay.moe_capacity_factor)


def dense(lay: Layouts) -> bool:
    """Whether the plan runs MaxText's dense dispatch (Plan.moe_dense_dispatch: cost.compute.moe_dense)."""
    return bool(getattr(lay, "moe_dense_dispatch", False))


def moe_load(model: ModelConfig, lay: Layouts) -> float:
    """`routed_load`, or under MaxText's dense dispatch its padded buffers' (`cost.compute.moe_dense.dense_load`)."""
    return dense_load(model, lay) if dense(lay) else routed_load(lay)


def expert_tokens(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Routed tokens per local expert on the busiest device: T k etp ep / n_experts * `moe_load`."""
    m = model.moe
    return tokens_in(lay) * m.top_k * lay.etp * lay.ep / m.n_experts * moe_load(model, lay)


def routed_copies(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Routed token copies the busiest device's E / ep local experts take per micro-batch: expert_tokens x E / ep."""
    return expert_tokens(model, lay) * model.moe.n_experts / lay.ep


def moe_kernels(model: ModelConfig, dev: Device, lay: Layouts) -> list[Op]:
    """The kernels of one MoE layer's MLP on one device per micro-batch (module docstring), unscaled."""
    m, h, g = model.moe, model.hidden, (2 if model.gated else 1)
    T, k = tokens_in(lay), m.top_k
    local = m.n_experts / lay.ep
    M, fe = expert_tokens(model, lay), m.expert_ffn_hidden / lay.etp
    routed = M * local  # token copies the busiest device's experts run
    act, rc = ("swiglu" if model.gated else "gelu"), ("full", "names")  # names re-runs the MoE MLP whole
    ops = linear_op(dev, "router", T, m.n_experts, h, rc, precision="bf16")
    ops.append(elementwise_op(dev, "router_topk", T * m.n_experts, *MOE_ELEMENTWISE_BYTES["router"], rc))
    if dense(lay):  # MaxText's one-hot dispatch and combine einsums instead of the permute copies
        ops += dense_dispatch_ops(model, dev, lay, T, rc)
    else:
        ops.append(elementwise_op(dev, "permute", T * k * h, *MOE_ELEMENTWISE_BYTES["permute"], rc))
    ops += linear_op(dev, "experts_in", M, g * fe, h, rc, groups=local)
    loop = dev.stack.expert_bias_loop if m.expert_bias else []
    if "fc1" in loop:
        ops.append(elementwise_op(dev, "expert_bias_fc1", routed * g * fe, *MOE_ELEMENTWISE_BYTES["expert_bias_fc1"],
                                  rc))
    ops.append(elementwise_op(dev, "expert_" + act, routed * fe, *ELEMENTWISE_BYTES[act], rc))
    ops += linear_op(dev, "experts_out", M, h, fe, rc, groups=local)
    if "fc2" in loop:
        ops.append(elementwise_op(dev, "expert_bias_fc2", routed * h, *MOE_ELEMENTWISE_BYTES["expert_bias_fc2"], rc))
    if not dense(lay):
        ops.append(elementwise_op(dev, "unpermute", T * k * h, *MOE_ELEMENTWISE_BYTES["unpermute"], rc))
    if m.shared_ffn_hidden:
        Ts, fs = lay.tokens_per_microbatch, m.shared_ffn_hidden / lay.tp  # gathered over tp, ffn split by tp
        ops += linear_op(dev, "shared_in", Ts, g * fs, h, rc)
        ops.append(elementwise_op(dev, "shared_" + act, Ts * fs, *ELEMENTWISE_BYTES[act], rc))
        ops += linear_op(dev, "shared_out", Ts, h, fs, rc)
    return ops


def dispatch_bytes(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Bytes one device sends in one dispatch (and receives back in one combine): alltoall, its T k routed
    token copies (bf16; times the load the busiest device receives, `routed_load`: the imbalance, capped or padded
    by a capacity factor); allgather, its T tokens once."""
    per = model.moe.top_k * moe_load(model, lay) if lay.moe_dispatcher != "allgather" else 1.0
    return tokens_in(lay) * per * model.hidden * ACT_BYTES


def block_hit(n_experts: int, top_k: int, block: float) -> float:
    """Probability that a token's top_k experts, drawn uniformly without repeats from n_experts, include one of
    a block of `block` experts: 1 - C(E - b, k) / C(E, k) (balanced routing, as the benchmarks force it)."""
    b = int(round(block))
    if b >= n_experts:
        return 1.0
    return 1.0 - math.comb(n_experts - b, top_k) / math.comb(n_experts, top_k)


def flex_dispatch_time(model: ModelConfig, system: System, lay: Layouts, kind: str = "ep_dispatch") -> np.ndarray:
    """Seconds of one deduplicating dispatch (or combine) per device: DeepEP / HybridEP (Megatron-Core's "flex"
    dispatcher, Zhao et al. 2025, DeepEP) send a token once to every remote domain that holds one of its experts
    and forward it inside the domain, rather than once per expert copy.

    `comm.all_to_all_time` of the device's T h bf16 bytes (times `routed_load`, the busiest device) over the ep
    group's tiers, with the share sent over tier k (m_k members, blocks of P_{k-1} ranks) (m_k - 1)
    `block_hit`(P_{k-1} n_experts / ep) instead of (m_k - 1) P_{k-1} / N: each other block is reached once if
    the token has an expert there (the tokens received from outer tiers and forwarded inward are not counted).
    Each tier's bandwidth is the dispatcher's own kernels' where the system measures them (`kind` ep_dispatch or
    ep_combine in a tier's by_group: HybridEP's published kernel bandwidths, hardware_specs/systems), else its NCCL
    all-to-all's (spec.hardware.network.KIND_FALLBACK)."""
    m = model.moe
    nbytes = tokens_in(lay) * model.hidden * ACT_BYTES * moe_load(model, lay)

    def time(size, phases):
        ep = math.prod(ph.members for ph in phases)
        hit = lambda inner, members, n: (members - 1) * block_hit(m.n_experts, m.top_k, inner * m.n_experts / ep)  # noqa: E731
        return C.all_to_all_time(size, phases, hit, kind)

    return C.group_collective(system, "all_to_all", nbytes, lay.ep, lay.etp, lay.gpus, time=time)


def routed_bytes(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """bf16 bytes of the routed token copies the busiest device's experts run per micro-batch (what etp
    gathers): `expert_tokens` x its n_experts / ep experts x hidden x 2."""
    return routed_copies(model, lay) * model.hidden * ACT_BYTES


class ExpertDataGroup:
    """The edp group of a MoE model's routed experts (edp devices ep * etp apart: MoE parallel folding), priced
    through `comm.group_collective` with `cost.comm.mesh.Mesh.collective`'s signature, so that `cost.comm.sharded`'s
    gradient-reduction and ZeRO formulas serve the experts as they serve the dense weights."""

    def __init__(self, system: System, lay: Layouts, model: ModelConfig):
        self.system, self.lay, self.dense = system, lay, model.moe is None

    def collective(self, kind: str, nbytes, mask=None, latency_share=1.0) -> np.ndarray:
        lay = self.lay
        # no group: a dense model has no routed experts; cost.comm.sharded's axes outside the ZeRO group
        if self.dense or (mask is not None and not np.any(mask)):
            return np.zeros(len(lay))
        return C.group_collective(self.system, kind, nbytes, lay.edp, lay.ep * lay.etp, lay.gpus, latency_share)

    def tiers(self) -> np.ndarray | None:
        """The tiers the edp group spans per plan (None for a dense model, whose expert collectives never run)."""
        if self.dense:
            return None
        return group_tiers(self.system, self.lay.edp, self.lay.ep * self.lay.etp, self.lay.gpus)


def group_tiers(system: System, n, stride, gpus) -> np.ndarray:
    """Per plan, the tiers a group of n devices `stride` apart spans ('nvlink x8 > infiniband x4')."""
    n, stride = (x.astype(np.int64).ravel() for x in np.broadcast_arrays(np.asarray(n), np.asarray(stride)))
    # one description per distinct (n, stride): a search has a handful among its ~10^5 plans
    code, first, inverse = np.unique(n * (int(stride.max(initial=0)) + 1) + stride, return_index=True,
                                     return_inverse=True)
    names = [C.describe(C.group_phases(system, int(n[i]), int(stride[i]), gpus)) for i in first]
    return np.array(names, dtype=object)[inverse.ravel()]


# --- weights -----------------------------------------------------------------------------------------------
def expert_layer_params(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """Routed-expert parameters on one device for a mean layer: n_experts expert MLPs over ep x etp (their
    biases too), times `moe_share`. Their gradients reduce, and ZeRO shards their states, over edp."""
    if model.moe is None:
        return np.zeros(len(lay))
    return model.moe.n_experts * model.expert_params() / (lay.ep * lay.etp) * moe_share(model) + 0.0 * lay.ep


def moe_router_params(model: ModelConfig) -> float:
    """A mean layer's router parameters: one MoE layer's router times `moe_share` (0 for a dense model)."""
    return model.router_params() * moe_share(model) if model.moe is not None else 0.0


def moe_replicated_params(model: ModelConfig, lay: Layouts, whole: bool = False) -> np.ndarray:
    """The MoE MLP's other parameters on one device for a mean layer: the router (whole on every rank) and the
    shared experts (split over tp like a dense MLP; `whole`: unsplit), times `moe_share`. Data-parallel like the
    dense weights."""
    if model.moe is None:
        return np.zeros(len(lay))
    tp = np.ones(len(lay)) if whole else lay.tp
    return moe_router_params(model) + model.shared_expert_params() / tp * moe_share(model)


def moe_gemm_params(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """The GEMM matrices of a mean layer's MoE MLP on one device (fp8/fp4 keep narrow copies of them): routed
    experts over ep x etp and shared experts over tp (the router stays bf16), times `moe_share`."""
    if model.moe is None:
        return np.zeros(len(lay))
    m = model.moe
    routed = m.n_experts * model.mlp_matmul_params(m.expert_ffn_hidden) / (lay.ep * lay.etp)
    shared = model.mlp_matmul_params(m.shared_ffn_hidden or 0) / lay.tp
    return (routed + shared) * moe_share(model)


# --- activations -------------------------------------------------------------------------------------------
def moe_kept_bytes(model: ModelConfig, lay: Layouts, recompute=None) -> np.ndarray:
    """Bytes a mean layer's MoE MLP keeps for its backward per micro-batch on one device (bf16 unless said),
    in the manner of Korthikanti et al. 2022, Sec. 4.1: the router's input (2 h per token) and fp32 scores
    (4 n_experts), each expert GEMM's input (2 h and 2 fe/etp per routed copy) and the activation's (2 g fe/etp),
    the combine's expert outputs (2 h per copy, for the probabilities' gradient; none where the stack weights the
    activation instead, `Stack.moe_probs_in_experts`), and the shared experts' like a dense MLP's; times
    `moe_share`. Full recompute keeps none of it (the layer input only, counted by norm1).
    Selective recompute (Megatron-Core --recompute-modules, lay.recompute_modules) drops: moe everything but
    the router's input (names, which re-runs the whole MoE MLP, none of it: spec.plan.recompute.names_unpriced); moe_act
    the expert activations' outputs (fc2's input, 2 fe/etp per routed copy);
    shared_experts the shared MLP past its input; layernorm the router's input (pre_mlp_layernorm's output).
    Expert GEMM inputs (fc1's and fc2's, routed and shared) at `kernels.saved_input_bytes` per element: their
    quantized copies under fp8/fp4 on a Transformer Engine stack (GroupedLinear, Linear).
    torchtitan's per-op policy saves its MoE's grouped matmuls' outputs, not counted apart: kept as without."""
    if model.moe is None:
        return np.zeros(len(lay))
    m, h, g = model.moe, model.hidden, (2 if model.gated else 1)
    T = tokens_in(lay)
    routed = routed_copies(model, lay)
    fe = m.expert_ffn_hidden / lay.etp
    router_in = T * 2 * h
    b = saved_input_bytes(lay)
    weighted_copies = 0.0 if load_stack(lay.stack).moe_probs_in_experts else T * m.top_k * 2 * h
    if dense(lay):  # MaxText's combine keeps the padded expert outputs (cost.compute.moe_dense)
        weighted_copies = routed * 2 * h
    rest = T * ROUTER_SCORE_BYTES * m.n_experts + routed * (b * h + 2 * g * fe) + weighted_copies
    act_out = routed * b * fe
    shared_in = shared_rest = 0.0
    if m.shared_ffn_hidden:
        fs = m.shared_ffn_hidden / lay.tp
        shared_in, shared_rest = T * b * h, lay.tokens_per_microbatch * (2 * g * fs + b * fs)  # input: the sp shard
    mods = set(lay.recompute_modules or ())
    sel = dict(router_in=router_in * ("layernorm" not in mods), rest=rest * ("moe" not in mods),
               act_out=act_out * (not mods & {"moe", "moe_act"}), shared_in=shared_in * ("moe" not in mods),
               shared_rest=shared_rest * (not mods & {"moe", "shared_experts"}))
    kept = router_in + rest + act_out + shared_in + shared_rest
    rc = np.asarray(lay.recompute if recompute is None else np.broadcast_to(np.asarray(recompute), (len(lay),)))
    kept = np.where(rc == "selective", sum(sel.values()), kept)
    return np.where((rc == "full") | (rc == "names"), 0.0, kept * moe_share(model))


def dispatch_buffer_bytes(model: ModelConfig, lay: Layouts) -> np.ndarray:
    """The dispatcher's transient buffers of the layer running (one at a time): the permuted tokens sent and
    the tokens received, 2 x `dispatch_bytes` (x ep for allgather, which receives every member's), and with
    etp > 1 the gathered copy; 0 for a dense model. MaxText's dense dispatch (cost.compute.moe_dense) writes the padded
    expert inputs with its einsum: only the copy an ep > 1 exchange receives, and etp's."""
    if model.moe is None:
        return np.zeros(len(lay))
    recv = dispatch_bytes(model, lay) * np.where(lay.moe_dispatcher == "allgather", lay.ep, 1)
    gathered = np.where(lay.etp > 1, routed_bytes(model, lay), 0.0)
    if dense(lay):  # the dispatch einsum writes the experts' input (counted with them); ep > 1 reshards it
        return np.where(lay.ep > 1, recv, 0.0) + gathered
    return dispatch_bytes(model, lay) + recv + gathered
