"""The MoE cost model (cost.compute.moe) against hand-computed values, and its plan checks."""

import math

import numpy as np
import pytest

from perfmodel import InputError, Plan, estimate, load_hardware, load_model
from perfmodel.cost.comm import collectives as C
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.compute.moe import (
    block_hit,
    dispatch_bytes,
    expert_layer_params,
    expert_tokens,
    moe_kept_bytes,
    moe_replicated_params,
    moe_share,
    tokens_in,
)
from perfmodel.spec.model.config import ModelConfig, MoEConfig
from perfmodel.spec.plan.layout import resolve

TINY = ModelConfig(name="tiny-moe", n_layers=4, hidden=256, n_heads=4, ffn_hidden=512, vocab=1024, max_seq_len=512,
                   mlp="swiglu", norm="rmsnorm", position="rope",
                   moe=MoEConfig(n_experts=8, top_k=2, expert_ffn_hidden=128, n_shared_experts=1,
                                 first_dense_layers=1))


def lay_of(plan: Plan, model=TINY, system="dgx-h100") -> Layouts:
    return Layouts.from_plan(resolve(plan, model, load_hardware(system)))


def test_moe_layer_counts_and_share():
    assert TINY.moe_layers() == 3 and TINY.dense_layers() == 1 and moe_share(TINY) == 0.75
    every_other = TINY.model_copy(update={"moe": TINY.moe.model_copy(update={"first_dense_layers": 0,
                                                                             "layer_freq": 2})})
    assert every_other.moe_layers() == 2  # layers 1 and 3 ((i + 1) % 2 == 0)


def test_parameters_by_hand():
    h, f, fe, E = 256, 512, 128, 8
    attn = h * (256 + 2 * 256) + 256 * h
    expert = 3 * h * fe
    moe = h * E + E * expert + 3 * h * fe  # router, 8 experts, one shared expert of fe
    dense = 3 * h * f
    layers = 1 * (attn + dense + 2 * h) + 3 * (attn + moe + 2 * h)
    total = 1024 * h + layers + h + 1024 * h
    assert TINY.n_params() == total
    active_moe = h * E + 2 * expert + 3 * h * fe
    assert TINY.active_params() == total - 3 * moe + 3 * active_moe


def test_tokens_and_expert_shapes():
    lay = lay_of(Plan(gpus=8, tp=2, ep=4, micro_batch=2, global_batch=8, seq_len=256, sequence_parallel=True))
    # 2 x 256 tokens per micro-batch, / tp 2 with sequence parallelism
    assert tokens_in(lay)[0] == 256
    # per local expert: T k etp ep / E = 256 * 2 * 1 * 4 / 8
    assert expert_tokens(TINY, lay)[0] == 256
    assert dispatch_bytes(TINY, lay)[0] == 256 * 2 * 256 * 2  # T k h bf16
    # routed experts over ep x etp = 4, times the MoE share 3/4; router whole, shared expert over tp
    assert expert_layer_params(TINY, lay)[0] == pytest.approx(8 * 3 * 256 * 128 / 4 * 0.75)
    assert moe_replicated_params(TINY, lay)[0] == pytest.approx((256 * 8 + 3 * 256 * 128 / 2) * 0.75)


def test_kept_bytes_by_hand():
    lay = lay_of(Plan(gpus=4, ep=4, micro_batch=1, global_batch=4, seq_len=128))
    T, h, E, k, fe, fs = 128, 256, 8, 2, 128, 128
    routed = T * k  # balanced: the device's experts see T k copies
    # Megatron-Core (the default stack) weights its experts' activation by the probabilities: no copy for them
    want = T * (2 * h + 4 * E) + routed * 2 * (h + 2 * fe + fe)
    want += T * 2 * (2 * fs + fs) + T * 2 * h
    assert lay.stack == "megatron-core"
    assert moe_kept_bytes(TINY, lay)[0] == pytest.approx(0.75 * want)
    assert moe_kept_bytes(TINY, lay, "full")[0] == 0.0
    # torchtitan scales the routed inputs by the scores: one bf16 copy per routed token kept for their gradient
    titan = lay_of(Plan(gpus=4, ep=4, micro_batch=1, global_batch=4, seq_len=128, stack="torchtitan"))
    assert moe_kept_bytes(TINY, titan)[0] == pytest.approx(0.75 * (want + T * k * 2 * h))


def test_block_hit_against_enumeration():
    from itertools import combinations

    E, k, b = 8, 2, 2
    hits = sum(1 for c in combinations(range(E), k) if any(e < b for e in c))
    assert block_hit(E, k, b) == pytest.approx(hits / math.comb(E, k))
    assert block_hit(E, k, E) == 1.0


def test_all_to_all_one_tier_is_the_ring_formula_and_two_tiers_the_slower_share():
    system = load_hardware("dgx-h100")
    one = C.group_phases(system, 8, 1, 8)
    bw, lat = one[0].ring("all_to_all")
    assert C.all_to_all_time(1e8, one) == pytest.approx(7 * lat + 7 / 8 * 1e8 / bw)
    two = C.group_phases(system, 16, 1, 16)
    (b1, a1), (b2, a2) = two[0].ring("all_to_all"), two[1].ring("all_to_all")
    # 7/16 of the bytes go to node peers over NVLink, 8/16 over InfiniBand; the slower share sets the time
    want = 7 * a1 + 1 * a2 + 1e8 * max(7 / 16 / b1, 8 / 16 / b2)
    assert C.all_to_all_time(1e8, two) == pytest.approx(want)


def test_estimate_charges_dispatch_and_combine():
    plan = Plan(gpus=8, ep=8, micro_batch=1, global_batch=16, seq_len=256, zero=1)
    e = estimate(TINY, "dgx-h100", plan)
    names = {c.name: c for c in e.comms}
    d = names["ep dispatch all-to-all"]
    one = C.all_to_all_time(d.bytes, C.group_phases(load_hardware("dgx-h100"), 8, 1, 8))
    assert d.seconds_per_call == pytest.approx(one)
    m = plan.global_batch // 8  # micro-batches per step
    # forward + backward per MoE layer (3 of 4 layers) per micro-batch, all exposed
    assert d.calls == pytest.approx(2 * 0.75 * TINY.n_layers * m)
    assert e.time_s.ep_comm == pytest.approx(sum(c.exposed_s for c in e.comms if c.group in ("ep", "etp")))
    assert "edp expert gradient reduction" not in names  # ep = 8 = all ranks: edp = 1


def test_ep_one_has_no_dispatch_and_flex_sends_less_across_nodes():
    base = dict(gpus=16, micro_batch=1, global_batch=16, seq_len=256, zero=1)
    e1 = estimate(TINY, "dgx-h100", Plan(ep=1, **base))
    assert e1.time_s.ep_comm == 0.0
    a2a = estimate(TINY, "dgx-h100", Plan(ep=8, **base, moe_dispatcher="alltoall"))
    flex = estimate(TINY, "dgx-h100", Plan(ep=8, **base, moe_dispatcher="flex"))
    assert 0 < flex.time_s.ep_comm <= a2a.time_s.ep_comm


def test_imbalance_slows_the_experts(no_host):
    base = dict(gpus=8, ep=8, micro_batch=1, global_batch=16, seq_len=256)
    fast = estimate(TINY, "dgx-h100", Plan(**base))
    slow = estimate(TINY, "dgx-h100", Plan(**base, expert_imbalance=2.0))
    assert slow.step_time_s > fast.step_time_s


def test_active_flops_not_total():
    qwen = load_model("qwen3-30b-a3b")
    e = estimate(qwen, "dgx-h100", Plan(gpus=8, ep=8, micro_batch=1, global_batch=8, seq_len=4096, zero=1))
    from perfmodel.cost.compute.flops import model_flops_per_token

    # 6 N_active per token, plus attention and the LM head: far below 6 N_total
    per_token = model_flops_per_token(qwen, 4096)
    assert 6 * 3.0e9 < per_token < 6 * 5e9
    assert e.mfu < 1


@pytest.mark.parametrize("fields,needle", [
    (dict(ep=3), "ep=3 does not divide n_experts = 8"),
    (dict(etp=3), "etp=3 does not divide expert_ffn_hidden = 128"),
    (dict(ep=8, etp=2), "ep*etp = 8*2 = 16 does not divide"),
])
def test_refusals_name_field_and_valid_values(fields, needle):
    with pytest.raises(InputError, match="valid"):
        resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=256, **fields), TINY, load_hardware("dgx-h100"))
    try:
        resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=256, **fields), TINY, load_hardware("dgx-h100"))
    except InputError as err:
        assert needle in str(err)


def test_experts_with_tp_need_sequence_parallelism():
    with pytest.raises(InputError, match=r"sequence_parallel = false with tp=2 on the MoE model tiny-moe.*valid: "
                                         r"sequence_parallel = true, or tp = 1"):
        resolve(Plan(gpus=8, tp=2, ep=4, micro_batch=1, global_batch=8, seq_len=256), TINY, load_hardware("dgx-h100"))


def test_dense_model_refuses_ep():
    with pytest.raises(InputError, match="dense model"):
        resolve(Plan(gpus=8, ep=2, micro_batch=1, global_batch=8, seq_len=256), load_model("llama-3-8b"),
                load_hardware("dgx-h100"))


def test_aligned_groups_keep_a_rack_sized_group_on_nvlink():
    system = load_hardware("gb200-nvl72")
    # 32 devices of a 256-device job: aligned by the scheduler, all on NVLink
    assert [p.tier for p in C.group_phases(system, 32, 1, 256)] == ["nvlink"]
    loose = system.model_copy(update={"tiers": [t.model_copy(update={"aligned_groups": False}) for t in system.tiers]})
    assert [p.members for p in C.group_phases(loose, 32, 1, 256)] == [8, 4]  # gcd(32, 72) = 8 together


def test_search_enumerates_expert_layouts():
    from perfmodel.search.space import Job, enumerate_layouts

    lay = enumerate_layouts(TINY, load_hardware("dgx-h100"), Job(gpus=8, global_batch=8, seq_len=256))
    pairs = set(zip(lay.ep.tolist(), lay.etp.tolist()))
    assert (8, 1) in pairs and (4, 2) in pairs and (1, 1) in pairs
    assert np.all((lay.tp * lay.cp * lay.dp) % (lay.ep * lay.etp) == 0)
    assert np.all(TINY.moe.n_experts % lay.ep == 0)


def test_search_result_keeps_the_expert_layout():
    from perfmodel.search.ranking import search

    res = search(TINY, "dgx-h100", 16, 32, 256)
    best = res.plan(0)
    assert (best.ep, best.etp) == (int(res.columns["ep"][0]), int(res.columns["etp"][0]))
    assert res.estimate(0).step_time_s == pytest.approx(float(res.columns["step_time_s"][0]))


def test_a_stage_reduces_its_layers_expert_gradients_over_edp():
    # 4 layers over pp 2: 2 per stage, each the model's mean layer (3 of 4 layers MoE: 0.75 of a MoE layer's
    # experts, cost.compute.moe's averaging); edp = 8 / 4 = 2 ranks
    e = estimate(TINY, "dgx-h100", Plan(gpus=16, pp=2, ep=4, micro_batch=1, global_batch=16, seq_len=256, zero=1))
    red = next(c for c in e.comms if c.name == "edp expert gradient reduction")
    per_moe_layer = 8 * 3 * 256 * 128 / 4  # experts over ep 4
    assert red.bytes == pytest.approx(2 * 0.75 * per_moe_layer * 4)  # fp32 gradients
    assert red.group_size == 2


def test_mtp_modules_run_on_the_last_stage_as_one_layer_and_one_head_more():
    """DeepSeek-V3 Sec. 2.2 / Megatron-Core mtp_num_layers: each module a block and the shared head with its loss,
    on the last pipeline stage. By hand: the last stage's time per micro-batch grows by one layer's and one
    head's unit time; its parameters by one layer's (the head is shared); the first stage is unchanged."""
    from perfmodel.cost.memory.footprint import stage_params, unit_params
    from perfmodel.cost.step.evaluate import evaluate

    mtp = TINY.model_copy(update={"mtp_layers": 1})
    plan = Plan(gpus=16, pp=2, dp=8, ep=8, micro_batch=1, global_batch=32, seq_len=256)
    base, with_mtp = (evaluate(m, load_hardware("dgx-h100"), lay_of(plan, m)) for m in (TINY, mtp))
    unit = {u: float(base.unit_time[u][0]) for u in ("layer", "embedding", "head")}
    per_stage = lambda s: s.stages.seconds({u: float(s.unit_time[u][0]) for u in s.unit_time})[:, 0]
    b, w = per_stage(base), per_stage(with_mtp)
    assert w[0] == pytest.approx(b[0], rel=1e-12)  # first stage
    assert w[2] - b[2] == pytest.approx(sum(unit.values()), rel=1e-9)  # last stage: lookup, block, head
    st = with_mtp.stages
    lay = lay_of(plan, mtp)
    params = stage_params(mtp, lay, st.layers, st.embedding > 0, st.head > 0)[2, 0]
    p = unit_params(mtp, lay)
    # 2 layers + the MTP block, the head and the MTP's copy of the embedding
    assert params == pytest.approx(3 * p["layer"][0] + p["head"][0] + p["embedding"][0], rel=1e-12)
    sync = [c for c in with_mtp.step_comms if c.name == "embedding copies gradient sync"]
    assert sync and float(sync[0].exposed[0]) > 0  # the two copies' gradients are summed each step
    # HFU counts the module's FLOPs, MFU does not: 3 x 2 x (block + 2h x h + LM head) + attention, per token
    tokens = 32 * 256
    block = TINY.matmul_params_per_layer() + 2 * 256 * 256 + 1024 * 256
    attention = 4.0 * 256 * TINY.attention_core_dim  # one layer, 256 keys
    assert with_mtp.model_flops == base.model_flops
    assert float(with_mtp.hardware_flops[0] - base.hardware_flops[0]) == pytest.approx(
        tokens * 3 * (2 * block + attention), rel=1e-12)
    assert estimate(mtp, "dgx-h100", plan).stages[-1].mtp_modules == 1
    assert estimate(mtp, "dgx-h100", plan).step_time_s > estimate(TINY, "dgx-h100", plan).step_time_s


def test_moe_overlap_hides_the_paired_micro_batches_dispatch_behind_a_layers_compute():
    """sharded.moe_comms with moe_overlap: exposed = C - (m - 1)/m (C - behind(C, W, f)). By hand with a window
    longer than C (behind = (1 - f) C): C (1 - (m - 1) f / m); with no window all of C stays; one micro-batch
    has no pair. The estimate charges what moe_comms returns at the layer's compute window."""
    from perfmodel.cost.comm.sharded import moe_comms, overlap_fraction
    from perfmodel.spec.stack.profile import load_stack

    system = load_hardware("dgx-h100")
    plan = Plan(gpus=16, dp=16, ep=8, micro_batch=1, global_batch=64, seq_len=256)
    lay, on = lay_of(plan), lay_of(plan.model_copy(update={"moe_overlap": True}))
    m, f = 4, overlap_fraction(system, load_stack("megatron-core"))
    total = lambda comms: float(sum(c.exposed for c in comms)[0])
    c = total(moe_comms(TINY, system, lay))
    assert c > 0 and total(moe_comms(TINY, system, lay, window=1e9)) == pytest.approx(c)  # off: no change
    assert total(moe_comms(TINY, system, on, window=1e9)) == pytest.approx(c * (1 - (m - 1) * f / m), rel=1e-12)
    assert total(moe_comms(TINY, system, on, window=0.0)) == pytest.approx(c, rel=1e-12)
    one = lay_of(plan.model_copy(update={"moe_overlap": True, "global_batch": 16}))
    assert total(moe_comms(TINY, system, one, window=1e9)) == pytest.approx(total(moe_comms(TINY, system, one)))
    e_on, e_off = (estimate(TINY, system, p) for p in (plan.model_copy(update={"moe_overlap": True}), plan))
    assert e_on.time_s.ep_comm < e_off.time_s.ep_comm and e_on.time_s.gemm == pytest.approx(e_off.time_s.gemm)


@pytest.mark.parametrize("fields, needle", [
    (dict(moe_overlap=True, moe_dispatcher="allgather"), "valid moe_dispatcher with moe_overlap: alltoall, flex"),
])
def test_moe_overlap_refusals(fields, needle):
    plan = Plan(gpus=16, dp=16, ep=8, micro_batch=1, global_batch=64, seq_len=256, **fields)
    with pytest.raises(InputError, match=needle):
        resolve(plan, TINY, load_hardware("dgx-h100"))
    dense = load_model("llama-3-8b")
    with pytest.raises(InputError, match="^moe_overlap=true: llama-3-8b is a dense model .*moe_overlap=false"):
        resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=256, moe_overlap=True), dense,
                load_hardware("dgx-h100"))


@pytest.mark.parametrize("fields, needle", [
    (dict(ep=1), "ep=1, pp=1, vpp=1, recompute=none"),
    (dict(gpus=32, pp=2, global_batch=64), "pp=2, vpp=1"),
    (dict(recompute="full"), "recompute=full"),
])
def test_moe_overlap_needs_a_layout_megatron_overlaps(fields, needle):
    """Megatron-Core's checks (core_r0.14 TransformerConfig): ep > 1, vpp wherever pp > 1, no full recompute; the
    search with moe_overlap enumerates only such layouts."""
    from perfmodel.search.ranking import search

    plan = Plan(**({"gpus": 16, "dp": None, "ep": 8, "micro_batch": 1, "global_batch": 64, "seq_len": 256,
                    "moe_overlap": True} | fields))
    with pytest.raises(InputError, match=f"moe_overlap = true with .*{needle}.*valid"):
        resolve(plan, TINY, load_hardware("dgx-h100"))
    res = search(TINY, "dgx-h100", 16, 64, 256, moe_overlap=True)
    t = res.table
    assert len(t) and (t.ep > 1).all() and ((t.pp == 1) | (t.vpp > 1)).all() and (t.recompute != "full").all()
    with pytest.raises(InputError, match="mtp_layers = 2"):
        search(TINY.model_copy(update={"mtp_layers": 2}), "dgx-h100", 16, 64, 256, moe_overlap=True)


def test_a_capacity_factor_caps_or_pads_each_experts_tokens():
    from perfmodel.cost.compute.moe import routed_load

    base = dict(gpus=4, ep=4, micro_batch=1, global_batch=4, seq_len=128)
    # T = 128 tokens, k = 2, E = 8 experts over ep 4: the mean expert takes T k ep / E = 128 routed copies
    skew = lay_of(Plan(**base, expert_imbalance=2.0))
    assert expert_tokens(TINY, skew)[0] == 256
    capped = lay_of(Plan(**base, expert_imbalance=2.0, moe_capacity_factor=1.25))
    assert routed_load(capped) == 1.25 and expert_tokens(TINY, capped)[0] == 160  # ceil-free: 1.25 x 128
    # padded: every expert runs its full capacity even when routing is balanced, and the all-to-all moves it
    padded = lay_of(Plan(**base, moe_capacity_factor=1.5, moe_pad_to_capacity=True))
    assert expert_tokens(TINY, padded)[0] == 192
    assert dispatch_bytes(TINY, padded)[0] == 128 * 2 * 1.5 * 256 * 2  # T k c h bf16
    # dropping under the mean changes nothing where routing is balanced
    assert expert_tokens(TINY, lay_of(Plan(**base, moe_capacity_factor=1.5)))[0] == 128
    # the step: a capped skew is faster than the dropless one, padding slower than balanced
    m, s = load_model("qwen3-30b-a3b"), load_hardware("dgx-h100")
    big = dict(gpus=8, ep=8, micro_batch=2, global_batch=64, seq_len=4096)
    t = {k: estimate(m, s, resolve(Plan(**big, **kw), m, s)).step_time_s for k, kw in {
        "skew": dict(expert_imbalance=2.0), "capped": dict(expert_imbalance=2.0, moe_capacity_factor=1.25),
        "balanced": {}, "padded": dict(moe_capacity_factor=1.5, moe_pad_to_capacity=True)}.items()}
    assert t["capped"] < t["skew"] and t["padded"] > t["balanced"]


def test_capacity_settings_are_refused_where_they_mean_nothing():
    base = dict(gpus=4, ep=4, micro_batch=1, global_batch=4, seq_len=128)
    with pytest.raises(InputError, match="moe_pad_to_capacity = true without moe_capacity_factor"):
        resolve(Plan(**base, moe_pad_to_capacity=True), TINY, load_hardware("dgx-h100"))
    with pytest.raises(InputError, match="dense model"):
        resolve(Plan(gpus=4, micro_batch=1, global_batch=4, seq_len=128, moe_capacity_factor=1.0),
                load_model("llama-3-8b"), load_hardware("dgx-h100"))
    with pytest.raises(InputError, match="moe_capacity_factor"):
        Plan(**base, moe_capacity_factor=0)


def test_megatron_core_adds_a_biased_experts_fc2_bias_in_a_pass_of_its_own():
    from perfmodel.cost.compute.kernels import Device
    from perfmodel.cost.compute.moe import moe_kernels

    biased = TINY.model_copy(update={"moe": TINY.moe.model_copy(update={"expert_bias": True})})
    plan = dict(gpus=4, ep=4, micro_batch=1, global_batch=4, seq_len=128)
    lay, hw = lay_of(Plan(**plan), biased), load_hardware("dgx-h100")
    dev = Device(biased, hw, lay)
    ops = {o.name: o for o in moe_kernels(biased, dev, lay)}
    # TEGroupedMLP._apply_bias over the T k = 256 routed copies x h = 256 at 12 B each way; permute moves the same
    # elements at 4 B, so the pass costs three permutes
    assert ops["expert_bias_fc2"].fwd_s == pytest.approx(3 * ops["permute"].fwd_s, rel=1e-12)
    assert ops["expert_bias_fc2"].bwd_s == pytest.approx(3 * ops["permute"].bwd_s, rel=1e-12)
    titan = lay_of(Plan(**plan, stack="torchtitan"), biased)
    assert "expert_bias_fc2" not in {o.name for o in moe_kernels(biased, Device(biased, hw, titan), titan)}
    assert "expert_bias_fc1" not in ops  # Megatron-Core adds fc1's in its GEMM (skip_bias_add=False)
    # NeMo AutoModel's DeepEP experts loop over both: fc1's output (g fe = 256 wide) at 8 / 2 B
    auto = lay_of(Plan(**plan, stack="nemo-automodel"), biased)
    a = {o.name: o for o in moe_kernels(biased, Device(biased, hw, auto), auto)}
    assert a["expert_bias_fc1"].fwd_s == pytest.approx(2 * 256 / 256 * ops["permute"].fwd_s, rel=1e-12)  # 8 B / 4 B
    assert a["expert_bias_fc1"].bwd_s == pytest.approx(0.5 * ops["permute"].bwd_s, rel=1e-12)  # 2 B / 4 B
    plain = lay_of(Plan(**plan))
    assert "expert_bias_fc2" not in {o.name for o in moe_kernels(TINY, Device(TINY, hw, plain), plain)}
