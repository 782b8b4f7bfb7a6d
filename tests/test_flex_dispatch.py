"""The flex dispatcher (DeepEP / HybridEP) at its kernels' published bandwidths, MLA up-projection
recompute priced, and the DeepSeek-V3 recipes of Megatron-Bridge's 26.x containers."""

import math

import pytest

from perfmodel import Plan, estimate, load_hardware, load_model
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.compute.moe import block_hit, flex_dispatch_time
from perfmodel.cost.compute.remat_names import mla_down_share, mla_up_share
from perfmodel.spec.plan.layout import resolve
from perfmodel.spec.stack.release import release_recipe


def _bench_case(system: str, ranks: int):
    """HybridEP's benchmark (4096 tokens, hidden 7168, top-8, 8 local experts per rank) on one domain."""
    base = load_model("deepseek-v3")
    model = base.model_copy(update=dict(moe=base.moe.model_copy(update=dict(n_experts=8 * ranks, top_k=8))))
    plan = Plan(gpus=ranks, tp=1, pp=1, dp=ranks, ep=ranks, micro_batch=1, global_batch=ranks, seq_len=4096,
                moe_dispatcher="flex")
    return model, load_hardware(system), Layouts.from_plan(resolve(plan, model, load_hardware(system)))


def test_flex_dispatch_reproduces_hybridep_kernel_time_on_gb200():
    # GB200, 32 ranks, 32 SMs, kernel only: 642.23 GB/s dispatch, 605.15 GB/s combine of the bytes a rank
    # receives (its own tokens too): 32 x hit x 4096 x 7168 x 2 (DeepEP hybrid-ep docs/README_Hybrid-EP.md)
    model, system, lay = _bench_case("gb200-nvl72", 32)
    hit = 1 - math.comb(248, 8) / math.comb(256, 8)
    assert block_hit(256, 8, 8) == pytest.approx(hit)
    received = 32 * hit * 4096 * 7168 * 2
    assert float(flex_dispatch_time(model, system, lay, "ep_dispatch")[0]) == pytest.approx(received / 642.23e9,
                                                                                         rel=2e-3)
    assert float(flex_dispatch_time(model, system, lay, "ep_combine")[0]) == pytest.approx(received / 605.15e9,
                                                                                        rel=2e-3)


def test_flex_dispatch_without_a_measured_kernel_falls_back_to_nccl_all_to_all():
    # dgx-h100 measures no dispatcher kernels: ep_dispatch prices as the tier's NCCL all-to-all fit
    model, system, lay = _bench_case("dgx-h100", 8)
    a2a = float(flex_dispatch_time(model, system, lay, "all_to_all")[0])
    assert float(flex_dispatch_time(model, system, lay, "ep_dispatch")[0]) == pytest.approx(a2a)
    assert float(flex_dispatch_time(model, system, lay, "ep_combine")[0]) == pytest.approx(a2a)
    tier = system.tiers[0]
    assert tier.fit("ep_dispatch", 8) == tier.fit("all_to_all", 8)


def test_hybridep_is_faster_than_the_nccl_fit_it_replaced_on_nvl72():
    model, system, lay = _bench_case("gb300-nvl72", 32)
    assert float(flex_dispatch_time(model, system, lay, "ep_dispatch")[0]) < 0.7 * float(
        flex_dispatch_time(model, system, lay, "all_to_all")[0])


def test_mla_up_share_is_the_up_projections_share_of_qkv():
    m = load_model("deepseek-v3")
    a, h = m.mla, m.hidden
    down = h * (a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim)
    up = a.q_lora_rank * m.n_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim) + \
        a.kv_lora_rank * m.n_heads * (a.qk_nope_head_dim + a.v_head_dim)
    assert mla_down_share(m) == pytest.approx(down / (down + up), rel=1e-6)
    assert mla_up_share(m) == pytest.approx(up / (down + up), rel=1e-6)


def test_mla_up_proj_recompute_costs_the_up_projections_forward():
    m = load_model("deepseek-v3")
    base = dict(gpus=256, tp=1, pp=8, dp=32, ep=32, micro_batch=1, global_batch=4096, seq_len=4096,
                precision="fp8", recompute="selective", moe_dispatcher="alltoall")
    none = estimate(m, "dgx-b200", Plan(**base, recompute_modules=["mlp"]))
    up = estimate(m, "dgx-b200", Plan(**base, recompute_modules=["mlp", "mla_up_proj"]))
    qkv = [o for o in up.ops if o.name == "qkv"][0]
    assert qkv.recompute_s == pytest.approx(qkv.fwd_s * mla_up_share(m), rel=1e-6)
    assert [o for o in none.ops if o.name == "qkv"][0].recompute_s == 0.0
    assert up.time_s.recompute > none.time_s.recompute


@pytest.mark.parametrize("release,gpu,dispatcher,overlap,modules", [
    ("26.04.01", "B200", "flex", True, ["mla_up_proj", "mlp"]),  # v0.4.2: deepep, EP overlap, pp8 vp2 ep32
    ("26.04.01", "B300", "flex", False, ["mla_up_proj"]),
    ("26.04", "GB200", "flex", False, ["mlp"]),  # v0.4.0 GB200_V1: recompute_modules ['mlp']
    ("26.02.01", "GB200", "flex", False, ["mla_up_proj"]),  # v0.3.1 GB200_FP8_MX_V2
    ("26.04", "B200", "flex", False, ["mla_up_proj"]),
    # v0.5.0 sets no modules under granularity selective: Megatron-Core fills core_attn; 26.08 sets [] itself
    ("26.06", "GB300", "flex", True, ["core_attn"]),
    ("26.08", "GB300", "flex", True, []),
    ("26.06.01", "B300", "flex", True, ["mla_up_proj"]),  # v0.5.1: pp8 vp2 ep8, full-iteration graphs, EP overlap
])
def test_deepseek_v3_recipes_per_container(release, gpu, dispatcher, overlap, modules):
    _, r = release_recipe(f"megatron-bridge@{release}", "deepseek-v3", gpu, "fp8")
    assert (r.moe_dispatcher, r.moe_overlap, r.recompute_modules) == (dispatcher, overlap, modules)


def test_described_rings_reads_describe_back():
    from perfmodel.cost.comm import collectives as C
    system = load_hardware("dgx-b200")
    phases = C.group_phases(system, 32, 1, 256)
    assert C.described_rings(C.describe(phases)) == [("nvlink", 8), ("infiniband", 4)]
    assert C.described_rings("infiniband") == [("infiniband", None)]
