"""Ring collectives, tier placement of process groups, and pipeline schedules, checked by hand."""

from __future__ import annotations

import pytest

from perfmodel.spec.stack.profile import load_stack

from perfmodel import Plan, estimate, load_hardware, load_model
from perfmodel.cost.comm import collectives as C
from perfmodel.cost.pipeline.schedules import bubble_fraction, in_flight, pipeline_time, stage_layers
from perfmodel.spec.model.config import ModelConfig

# the device side of the model: hand-worked pipeline formulas without the host (tests/conftest.py no_host)
pytestmark = pytest.mark.usefixtures("no_host")

_DGX = load_hardware("dgx-h100")
# the ring formulas on the tier's own efficiency and latency: dgx-h100 without its measured per-group NCCL fits
# (those are checked in tests/test_nccl_tables.py)
H100 = _DGX.on_datasheet(gemms=False)
# ... at the tables' clock: the formulas at a fixed clock (the power model's clock moves with the step's mix: a
# pipeline's bubble or an exposed collective lowers its mean power: tests/test_power.py)
H100 = H100.model_copy(update={"accelerator": H100.accelerator.model_copy(update={"power": None})})
NVL_BW = 450e9 * 0.80  # dgx-h100 nvlink: 450 GB/s per direction x collective efficiency 0.80
NVL_LAT = 3.4e-6
IB_BW = 50e9 * 0.90  # 400 Gb/s NDR per GPU x 0.90
IB_LAT = 14e-6


# ---------------------------------------------------------------------------------------------------------
# Ring formulas
# ---------------------------------------------------------------------------------------------------------
def test_ring_allreduce_hand_numbers():
    # S = 1 GB, n = 8, B = 100 GB/s, a = 5 us: 2*7/8*1e9/1e11 + 14*5e-6 = 0.0175 + 0.00007
    assert C.ring_allreduce_time(1e9, 8, 100e9, 5e-6) == pytest.approx(0.01757, rel=1e-12)
    # n = 2: 2*1/2*S/B + 2a
    assert C.ring_allreduce_time(4e8, 2, 200e9, 10e-6) == pytest.approx(0.002 + 20e-6, rel=1e-12)


def test_ring_allgather_hand_numbers():
    # (n-1)/n S/B + (n-1) a = 7/8 * 0.01 + 7 * 5e-6 = 0.00875 + 0.000035
    assert C.ring_gather_time(1e9, 8, 100e9, 5e-6) == pytest.approx(0.008785, rel=1e-12)
    # n = 1: nothing moves, no steps
    assert C.ring_gather_time(1e9, 1, 100e9, 5e-6) == 0.0
    assert C.ring_allreduce_time(1e9, 1, 100e9, 5e-6) == 0.0


def test_allreduce_is_reduce_scatter_plus_all_gather():
    ph = [C.Phase("x", 16, 45e9, 14e-6)]
    ar = C.collective_time("all_reduce", 3e8, ph)
    rs = C.collective_time("reduce_scatter", 3e8, ph)
    ag = C.collective_time("all_gather", 3e8, ph)
    assert ar == pytest.approx(rs + ag, rel=1e-12)
    assert ag == pytest.approx(15 / 16 * 3e8 / 45e9 + 15 * 14e-6, rel=1e-12)


def test_p2p_time():
    assert C.p2p_time(1e8, 45e9, 14e-6) == pytest.approx(14e-6 + 1e8 / 45e9, rel=1e-12)


def test_per_kind_ring_replaces_the_tier_values_for_that_kind_only():
    # nvlink tier of dgx-h100 with its own all-gather fit: 0.5 efficiency, 10 us per step
    from perfmodel.spec.hardware.system import KindFit

    nvl = H100.tiers[0].model_copy(update={"by_kind": {"all_gather": KindFit(collective_efficiency=0.5,
                                                                             latency_us=10.0)}})
    sys = H100.model_copy(update={"tiers": [nvl] + H100.tiers[1:]})
    ph = C.group_phases(sys, 8, 1)
    S = 1e9
    assert C.collective_time("all_gather", S, ph) == pytest.approx(7 / 8 * S / (450e9 * 0.5) + 7 * 10e-6, rel=1e-12)
    # reduce-scatter and all-reduce keep the tier's own efficiency and latency
    assert C.collective_time("reduce_scatter", S, ph) == pytest.approx(7 / 8 * S / NVL_BW + 7 * NVL_LAT, rel=1e-12)
    assert C.collective_time("all_reduce", S, ph) == pytest.approx(2 * (7 / 8 * S / NVL_BW + 7 * NVL_LAT), rel=1e-12)


def test_sp_replicated_params_hand_count():
    from perfmodel.cost.memory.footprint import sp_replicated_params

    # GPT-2 124M: LayerNorm scale+shift 2 x 768 per norm, two norms and two row-parallel biases (768) per layer
    gpt2 = load_model("gpt2-124m")
    assert sp_replicated_params(gpt2, 12, True) == 12 * (2 * 1536 + 2 * 768) + 1536
    assert sp_replicated_params(gpt2, 6, False) == 6 * 4608
    # Llama-3 8B: RMSNorm scale only (4096), no biases
    llama = load_model("llama-3-8b")
    assert sp_replicated_params(llama, 32, True) == 32 * 2 * 4096 + 4096


def test_comm_overlap_scales_the_hidden_share():
    """dp4 ZeRO-0 on dgx-h100: the gradient all-reduce's exposed time is (1-f) g + f x (what full overlap leaves)."""
    model = load_model("llama-3-8b")
    plan = Plan(gpus=4, dp=4, micro_batch=1, global_batch=4, seq_len=2048)
    full = estimate(model, H100, plan)
    row = lambda est: next(c for c in est.comms if c.name == "dp gradient reduction")
    g, hidden = row(full).total_s, row(full).exposed_s
    assert hidden < g  # the schedule hides some of it
    for f in (0.0, 0.25):
        sys = H100.model_copy(update={"efficiency": H100.efficiency.model_copy(update={"comm_overlap": f})})
        est = estimate(model, sys, plan)
        assert row(est).exposed_s == pytest.approx((1 - f) * g + f * hidden, rel=1e-12)
        assert est.step_time_s == pytest.approx(full.step_time_s + (1 - f) * (g - hidden), rel=1e-12)


def test_unknown_collective_raises():
    with pytest.raises(ValueError):
        C.collective_time("broadcast", 1.0, [])


# ---------------------------------------------------------------------------------------------------------
# Group placement on tiers (dgx-h100: nvlink domain 8, then infiniband)
# ---------------------------------------------------------------------------------------------------------
def test_tp8_group_is_one_nvlink_phase():
    ph = C.group_phases(H100, 8, 1)
    assert len(ph) == 1
    assert (ph[0].tier, ph[0].members) == ("nvlink", 8)
    assert ph[0].bandwidth == pytest.approx(NVL_BW)
    assert ph[0].latency == pytest.approx(NVL_LAT)
    assert C.describe(ph) == "nvlink x8"


def test_tp4_group_is_one_nvlink_phase_of_4():
    ph = C.group_phases(H100, 4, 1)
    assert [(p.tier, p.members) for p in ph] == [("nvlink", 4)]


def test_dp16_at_stride8_is_one_infiniband_phase():
    ph = C.group_phases(H100, 16, 8)
    assert len(ph) == 1
    assert (ph[0].tier, ph[0].members) == ("infiniband", 16)
    assert ph[0].bandwidth == pytest.approx(IB_BW)
    assert ph[0].latency == pytest.approx(IB_LAT)


def test_dp2_at_stride4_stays_in_the_node():
    # devices 0 and 4 share a node
    ph = C.group_phases(H100, 2, 4)
    assert [(p.tier, p.members) for p in ph] == [("nvlink", 2)]


def test_group_of_32_at_stride1_is_nvlink8_then_infiniband4():
    ph = C.group_phases(H100, 32, 1)
    assert [(p.tier, p.members) for p in ph] == [("nvlink", 8), ("infiniband", 4)]
    assert C.describe(ph) == "nvlink x8 > infiniband x4"
    S = 1e9
    # Hierarchical all-reduce: reduce-scatter + all-gather in the node on S, all-reduce of S/8 across nodes.
    #   nvlink: 2*7*3.4e-6 = 4.76e-5;  2*7/8*1e9/360e9 = 4.861111e-3
    #   ib:     2*3*14e-6  = 8.4e-5;    2*3/4*1.25e8/45e9 = 4.166667e-3
    hand = 4.76e-5 + 1.75e9 / 360e9 + 8.4e-5 + 1.5 * 1.25e8 / 45e9
    assert hand == pytest.approx(0.0091593778, rel=1e-8)
    assert C.collective_time("all_reduce", S, ph) == pytest.approx(hand, rel=1e-12)
    # All-gather: half of it.
    assert C.collective_time("all_gather", S, ph) == pytest.approx(hand / 2, rel=1e-12)


def test_group_of_one_is_local():
    assert C.group_phases(H100, 1, 1) == []
    assert C.describe([]) == "local"


def test_p2p_tier_choice():
    # All stages inside one 8-GPU node only if stride * stages fits and tiles the node.
    assert C.p2p_tier(H100, 1, 8).name == "nvlink"
    assert C.p2p_tier(H100, 2, 4).name == "nvlink"
    assert C.p2p_tier(H100, 2, 8).name == "infiniband"  # 16 devices: stage 3 -> 4 crosses nodes
    assert C.p2p_tier(H100, 4, 4).name == "infiniband"  # stage 1 -> 2 is device 4 -> 8
    assert C.p2p_tier(H100, 8, 2).name == "infiniband"
    assert C.p2p_tier(H100, 3, 2).name == "nvlink"  # a 6-GPU job sits in one node
    assert C.p2p_tier(H100, 3, 3).name == "infiniband"  # 9 GPUs: some pair straddles nodes
    gb = load_hardware("gb200-nvl72")
    assert C.p2p_tier(gb, 8, 9).name == "nvlink"  # 72 = 8 * 9
    assert C.p2p_tier(gb, 8, 18).name == "infiniband"


def test_groups_that_straddle_a_domain_split_at_its_boundary():
    aligned = load_hardware("gb200-nvl72")
    # the spec's scheduler keeps a group that fits in a rack inside one (Slurm topology/block --segment) ...
    assert [(p.tier, p.members) for p in C.group_phases(aligned, 16, 1)] == [("nvlink", 16)]
    assert [(p.tier, p.members) for p in C.group_phases(aligned, 16, 4, gpus=144)] == [("nvlink", 16)]
    # ... a scheduler without it may split any group
    gb = aligned.model_copy(update={"tiers": [t.model_copy(update={"aligned_groups": False}) for t in aligned.tiers]})
    # 72 % 16 != 0: the group on devices 64..79 has 8 in each rack
    assert [(p.tier, p.members) for p in C.group_phases(gb, 16, 1)] == [("nvlink", 8), ("infiniband", 2)]
    assert [(p.tier, p.members) for p in C.group_phases(gb, 24, 1)] == [("nvlink", 24)]
    assert [(p.tier, p.members) for p in C.group_phases(gb, 96, 1)] == [("nvlink", 24), ("infiniband", 4)]
    # ... unless the whole job fits in one domain: 64 GPUs of an NVL72 rack, dp=16 at stride 4
    assert [(p.tier, p.members) for p in C.group_phases(gb, 16, 4, gpus=64)] == [("nvlink", 16)]
    assert [(p.tier, p.members) for p in C.group_phases(gb, 16, 4, gpus=144)] == [("nvlink", 2), ("infiniband", 8)]
    h100 = load_hardware("dgx-h100")
    assert [(p.tier, p.members) for p in C.group_phases(h100, 3, 2, gpus=6)] == [("nvlink", 3)]


def test_torus_group_bandwidth_counts_spanned_dimensions():
    # tpu-v4: one torus tier 16x16x16, 50 GB/s per link, efficiency 0.85. A ring uses both directions of
    # each spanned dimension: 2 * dims * 50 GB/s * 0.85.
    tpu = load_hardware("tpu-v4")
    link = 50e9 * 0.85
    ph = C.group_phases(tpu, 16, 1)  # one row: 1 dimension
    assert [(p.tier, p.members) for p in ph] == [("ici", 16)]
    assert ph[0].bandwidth == pytest.approx(2 * 1 * link)
    ph = C.group_phases(tpu, 256, 1)  # a 16x16 plane: 2 dimensions
    assert ph[0].members == 256 and ph[0].bandwidth == pytest.approx(2 * 2 * link)
    ph = C.group_phases(tpu, 16, 16)  # a column (stride 16): 1 dimension
    assert ph[0].members == 16 and ph[0].bandwidth == pytest.approx(2 * 1 * link)
    ph = C.group_phases(tpu, 4096, 1)  # the whole pod: 3 dimensions
    assert ph[0].bandwidth == pytest.approx(2 * 3 * link)


def test_estimate_tp_comm_uses_nvlink_allreduce():
    # tp=8, no SP, no recompute: 2 all-reduces per layer forward and 2 backward of b*s*h*2 bytes on nvlink x8.
    m = load_model("gpt3-1.3b")
    s, b, h, l = 2048, 1, 2048, 24
    est = estimate(m, H100, Plan(gpus=8, tp=8, micro_batch=b, global_batch=4, seq_len=s))
    S = b * s * h * 2
    ar = 2 * 7 / 8 * S / NVL_BW + 2 * 7 * NVL_LAT
    tp = next(c for c in est.comms if c.group == "tp")
    assert tp.tiers == "nvlink x8" and tp.collective == "all_reduce"
    assert tp.seconds_per_call == pytest.approx(ar, rel=1e-9)
    assert tp.calls == pytest.approx(4 * l * 4)  # 4 per layer x 24 layers x 4 micro-batches


# ---------------------------------------------------------------------------------------------------------
# Pipeline
# ---------------------------------------------------------------------------------------------------------
def test_stage_layers_hand_cases():
    assert stage_layers(126, 16) == (7, 8, 7)  # Llama 3 405B (Dubey et al. 2024, Sec. 3.3.2)
    assert stage_layers(32, 4) == (8, 8, 8)
    assert stage_layers(32, 1) == (32, 32, 32)
    assert stage_layers(96, 8) == (12, 12, 12)


@pytest.mark.parametrize("n,p", [(126, 16), (32, 4), (80, 3), (24, 5), (35, 4), (7, 7), (10, 2), (11, 2)])
def test_stage_layers_cover_all_layers_evenly(n, p):
    first, middle, last = stage_layers(n, p)
    assert max(first, middle, last) - min(first, middle, last) <= 1
    assert max(first, middle, last) == -(-n // p)  # the largest stage has ceil(n/p) layers
    if p > 2:
        # middle stages hold first..last extras: total = first + last + (p-2) middles with at most 1 difference
        q, r = divmod(n, p)
        assert first + last + (p - 2) * q + min(r, p - 2) == n
    elif p == 2:
        assert first + last == n


def test_in_flight_1f1b_and_gpipe():
    p, m = 4, 8
    assert [int(in_flight("1f1b", p, 1, m, r)) for r in range(p)] == [4, 3, 2, 1]
    assert [int(in_flight("1f1b", p, 1, 2, r)) for r in range(p)] == [2, 2, 2, 1]  # capped at m
    assert all(float(in_flight("gpipe", p, 1, m, r)) == 8 for r in range(p))


@pytest.mark.parametrize("p,v,m", [(4, 2, 8), (8, 4, 16), (16, 2, 32), (2, 3, 4)])
def test_in_flight_interleaved(p, v, m):
    # Megatron warm-up count, rank r: 2(p - r - 1) + (v - 1)p + 1 chunks; rank 0: 2(p-1) + (v-1)p + 1,
    # = p v (1 + (p-1)/(p v)) (Korthikanti et al. 2022, Sec. 4.2.3).
    r0 = 2 * (p - 1) + (v - 1) * p + 1
    assert r0 == p * v + p - 1
    assert int(in_flight("interleaved", p, v, m, 0)) == min(r0, m * v)
    assert int(in_flight("interleaved", p, v, m, p - 1)) == (v - 1) * p + 1
    assert int(in_flight("interleaved", 4, 2, 1, 0)) == 2  # capped at m*v


@pytest.mark.parametrize("p,v,m", [(4, 1, 8), (8, 1, 64), (4, 2, 8), (16, 4, 32), (2, 1, 1)])
def test_pipeline_time_equal_stages_bubble(p, v, m):
    t = 0.37
    total = float(pipeline_time(m, t, t, p, v))
    assert total == pytest.approx(m * t + (p - 1) / v * t, rel=1e-12)
    bubble = total - m * t
    assert bubble / (m * t) == pytest.approx((p - 1) / (v * m), rel=1e-12)
    assert float(bubble_fraction(m, p, v)) == pytest.approx((p - 1) / (v * m), rel=1e-12)
    if v == 1:
        assert total == pytest.approx((m + p - 1) * t)  # GPipe / 1F1B: (m + p - 1) t


def balanced_model(vocab=256) -> ModelConfig:
    """32 big layers, tiny vocab, rotary positions, no dropout: first/last stages are nearly equal to middle."""
    return ModelConfig(name="balanced", n_layers=32, hidden=8192, n_heads=64, ffn_hidden=4 * 8192, vocab=vocab,
                       max_seq_len=4096, mlp="gelu", norm="rmsnorm", position="rope", tie_embeddings=False,
                       linear_bias="none", dropout=0.0)


def _bubble_ratio(est):
    t = est.time_s
    return t.bubble / (t.total - t.bubble - t.dp_comm - t.optimizer)


def _nvl_gather(S):  # ring all-gather / reduce-scatter over nvlink x8 (hand formula, checked above)
    return 7 / 8 * S / NVL_BW + 7 * NVL_LAT


@pytest.mark.parametrize("model", ["balanced", "llama-3-8b"])
@pytest.mark.parametrize("pp,vpp,gb", [(4, 1, 32), (4, 2, 32), (8, 1, 16), (8, 2, 64), (2, 1, 8)])
def test_estimate_bubble_fraction(model, pp, vpp, gb):
    """bubble / (step - bubble - dp_comm - optimizer) against (p-1)/(v m).

    The estimate's pipeline is m * t_max + (p-1)/v * t_mean, so the ratio is (p-1)/(v m) * t_mean/t_max.
    With 32 layers split evenly, first = mid + emb and last = mid + head (each stage also pays the same p2p),
    so t_mean = mid + (emb + head)/p. When the last stage is the slowest (t_max = mid + head):
        (p-1)/(v m) * (1 - head (1 - 1/p) / t_max)  <=  ratio  <=  (p-1)/(v m).
    head = its ops (from the estimate's op list) + its tp collectives with SP: all-gather of the LM-head input
    and reduce-scatter of its gradient (2 x T h 2 bytes) and 3 fp32 all-reduces of T values in the
    vocab-parallel cross-entropy, and the exposed share of its input's re-gather in the backward; emb = its ops + reduce-scatter after the lookup and all-gather in backward.
    """
    mdl = balanced_model() if model == "balanced" else load_model(model)
    plan = Plan(gpus=8 * pp, tp=8, pp=pp, vpp=vpp, micro_batch=1, global_batch=gb, seq_len=4096,
                sequence_parallel=True)
    est = estimate(mdl, H100, plan)
    m = est.num_microbatches
    assert m == gb
    assert est.stage_layers == [32 // pp] * pp
    ideal = (pp - 1) / (vpp * m)
    ratio = _bubble_ratio(est)
    t_max = (est.time_s.total - est.time_s.bubble - est.time_s.dp_comm - est.time_s.optimizer) / m
    assert est.bottleneck_stage == "last"

    T, h = 4096, mdl.hidden
    # + the backward's re-gather of the head's input (sequence parallelism), hidden but for the SMs NCCL holds
    regather = load_stack(est.plan.stack).overlap_share(H100.accelerator)
    head_tp = (2 + regather) * _nvl_gather(T * h * 2) + 3 * 2 * _nvl_gather(T * 4)
    head = sum(o.fwd_s + o.bwd_s + o.recompute_s for o in est.ops if o.where == "head") + head_tp
    lower = ideal * (1 - (head / t_max) * (1 - 1 / pp))
    assert lower * (1 - 1e-9) <= ratio <= ideal * (1 + 1e-9)

    # Exactly: rebuild t_mean from the stage times and compare with pipeline_time.
    from perfmodel.cost.compute.units import unit_ops
    emb = sum(float(o.fwd_s + o.bwd_s) for o in unit_ops(mdl, H100, est.plan)["embedding"]) + 2 * _nvl_gather(T * h * 2)
    t_mid = t_max - head
    t_mean = t_mid + (emb + head) / pp
    assert est.time_s.bubble == pytest.approx(float(pipeline_time(m, t_max, t_mean, pp, vpp)) - m * t_max, rel=1e-9)

    if model == "balanced":
        # vocab 256: head and embedding cost about their tp collectives, ~2-3% of a 4-layer stage and
        # ~1% of an 8-layer one; the ratio is the ideal one within that.
        assert ratio == pytest.approx(ideal, rel=0.01 if 32 // pp >= 8 else 0.03)


@pytest.mark.parametrize("pp,vpp", [(4, 1), (4, 2)])
def test_estimate_bubble_time_independent_of_microbatch_count(pp, vpp):
    # Bubble seconds are (p-1)/v * t_mean, independent of m; the steady part scales with m.
    mdl = balanced_model()
    ests = [estimate(mdl, H100, Plan(gpus=8 * pp, tp=8, pp=pp, vpp=vpp, micro_batch=1, global_batch=gb,
                                     seq_len=4096, sequence_parallel=True)) for gb in (16, 64)]
    assert ests[0].time_s.bubble == pytest.approx(ests[1].time_s.bubble, rel=1e-9)
    steady = [e.time_s.total - e.time_s.bubble - e.time_s.dp_comm - e.time_s.optimizer for e in ests]
    assert steady[1] == pytest.approx(4 * steady[0], rel=1e-9)


def test_estimate_interleaving_divides_bubble_by_vpp():
    mdl = balanced_model()
    e1 = estimate(mdl, H100, Plan(gpus=32, tp=8, pp=4, micro_batch=1, global_batch=32, seq_len=4096,
                                  sequence_parallel=True))
    e2 = estimate(mdl, H100, Plan(gpus=32, tp=8, pp=4, vpp=2, micro_batch=1, global_batch=32, seq_len=4096,
                                  sequence_parallel=True))
    # Same stage compute; interleaving doubles the p2p sends per micro-batch (2v sends of b*s*h*2/t bytes).
    s_pp = 4096 * 8192 * 2 / 8
    one = IB_LAT + s_pp / IB_BW  # stride tp*cp*dp = 8: next stage is in another node
    assert one == pytest.approx(next(c for c in e1.comms if c.group == "pp").seconds_per_call, rel=1e-9)
    d_tmax = 2 * one  # per micro-batch: 2 v one with v = 2 vs v = 1
    steady1 = e1.time_s.total - e1.time_s.bubble - e1.time_s.dp_comm - e1.time_s.optimizer
    steady2 = e2.time_s.total - e2.time_s.bubble - e2.time_s.dp_comm - e2.time_s.optimizer
    assert steady2 - steady1 == pytest.approx(32 * d_tmax, rel=1e-6)
    t_mean1 = e1.time_s.bubble / 3
    assert e2.time_s.bubble == pytest.approx((t_mean1 + d_tmax) * 3 / 2, rel=1e-9)


def test_estimate_pipeline_memory_in_flight_1f1b():
    # 1F1B, first stage holds p micro-batches of its layers' activations (Narayanan et al. 2021).
    from perfmodel.cost.memory.footprint import embedding_activation_bytes, layer_activation_bytes
    mdl = balanced_model()
    plan = Plan(gpus=32, tp=8, pp=4, micro_batch=1, global_batch=32, seq_len=4096, sequence_parallel=True)
    est = estimate(mdl, H100, plan)
    rp = est.plan
    assert est.memory_stage == "first"
    expect = layer_activation_bytes(mdl, rp) * 8 * 4 + embedding_activation_bytes(mdl, rp) * 4
    assert est.memory_bytes.activations == pytest.approx(expect, rel=1e-12)
    # No dropout, flash, SP (all /t), MHA, GeLU f = 4h: per token, norms/QKV/MLP inputs 8h, Q K V and attention
    # output 8h, GeLU input and output 4f, fp32 log-sum-exp 4a.
    h, f, a, s, t = 8192, 4 * 8192, 64, 4096, 8
    per_layer = s * (8 * h + 8 * h + 4 * f + 4 * a) / t
    assert layer_activation_bytes(mdl, rp) == pytest.approx(per_layer, rel=1e-12)


def test_optimizer_runs_at_optimizer_bandwidth():
    """The Adam step streams adam_step_bytes per parameter at optimizer_bandwidth (memory_bandwidth when null)."""
    from perfmodel.cost.memory.states import adam_step_bytes, grad_buffer_bytes, master_copy_bytes
    from perfmodel.spec.stack.profile import load_stack

    model = load_model("llama-3-8b")
    plan = Plan(gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=2048)
    base = estimate(model, H100, plan)
    params = model.n_params() / 8  # tp8 splits every weight matrix; the rest is small
    eff = H100.efficiency
    assert eff.optimizer_bandwidth is None
    bw = 3.35e12 * eff.memory_bandwidth
    adam = params * adam_step_bytes(4) / bw
    # Megatron-LM's own passes of the step (megatron-core's step_passes, dp 1: no prescale) at the memory bandwidth
    other = params * (master_copy_bytes("fp32") + grad_buffer_bytes(4, load_stack("megatron-core").step_passes, False)) / bw
    assert base.time_s.optimizer == pytest.approx(adam + other, rel=0.01)
    half = H100.model_copy(update={"efficiency": eff.model_copy(update={"optimizer_bandwidth": eff.memory_bandwidth / 2})})
    est = estimate(model, half, plan)
    assert est.time_s.optimizer - base.time_s.optimizer == pytest.approx(adam, rel=0.01)  # the Adam kernel's alone
    assert est.step_time_s - base.step_time_s == pytest.approx(est.time_s.optimizer - base.time_s.optimizer, rel=1e-12)


def test_sequence_parallel_gathers_gemm_inputs_again_beside_the_input_gradient():
    """Megatron-LM's sequence parallelism keeps the inputs of qkv, mlp_in and the LM head as the sequence shard
    and gathers them again in the backward, overlapped with the input-gradient GEMM: (1 - f) of each gather is
    exposed (cost.comm.sharded.edge_cost); the memory is that of the shard whatever f."""
    model = load_model("llama-3-8b")
    plan = Plan(gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=4096, sequence_parallel=True)
    ag = float(C.collective_time("all_gather", 4096 * model.hidden * 2, C.group_phases(H100, 8, 1, 8)))
    row = lambda est, name: next(c for c in est.comms if c.name.startswith(name))
    overlapped = estimate(model, H100, plan)
    m = overlapped.num_microbatches
    assert row(overlapped, "tp activations").calls == 32 * m * 10  # 4 forward, 4 backward, 2 gathered again
    # the stack's NCCL blocks leave 1 - share of the SMs: f x (1 - share) hides (cost.comm.sharded.overlap_fraction),
    # so against comm_overlap 1 a gather exposes (1 - f)(1 - share) more
    share = load_stack(plan.stack).overlap_share(H100.accelerator)
    for f in (0.0, 0.5):
        sys = H100.model_copy(update={"efficiency": H100.efficiency.model_copy(update={"comm_overlap": f})})
        est = estimate(model, sys, plan)
        layers = row(est, "tp activations").exposed_s - row(overlapped, "tp activations").exposed_s
        assert layers == pytest.approx((1 - f) * (1 - share) * 2 * ag * 32 * m, rel=1e-9)
        head = row(est, "tp lm head").exposed_s - row(overlapped, "tp lm head").exposed_s
        assert head == pytest.approx((1 - f) * (1 - share) * ag * m, rel=1e-9)
        assert est.memory_bytes.reserved == overlapped.memory_bytes.reserved
