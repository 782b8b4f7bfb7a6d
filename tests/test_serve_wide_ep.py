"""Wide expert parallelism at decode (serve.wide_ep): the busiest rank's share by hand, the routed
exchanges' bytes against the all-to-all they are priced as, the stack's default and the plan's choice, the
refusal, and the breakdown's line."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

import pytest

from perfmodel import load_hardware, load_model
from perfmodel.cli.main import main
from perfmodel.cost.comm.collectives import group_collective
from perfmodel.errors import InputError
from perfmodel.serve import infer
from perfmodel.serve.wide_ep import (allgather_exchange_s, busiest_share, moe_a2a, moe_exchange_s, routed_exchange_s)
from perfmodel.serve.step_time import tp_allreduce_s, wire_bytes
from perfmodel.spec.serving.schema import ServePlan, load_serving_stack, resolve_serve

DS = "deepseek-v3"


def _plan(**kw):
    return ServePlan(**{"precision": "fp8", "input_len": 1024, "output_len": 1024, **kw})


def test_busiest_share_by_hand():
    # 64 tokens x top 8 = 512 copies over 8 ranks: mean 64, sigma sqrt(512 x 1/8 x 7/8) = sqrt(56)
    z8 = NormalDist().inv_cdf(7.625 / 8.25)  # Blom: the expected maximum of 8 standard normals, 1.434
    assert z8 == pytest.approx(1.4236, abs=0.015)  # the exact value (tables of normal order statistics)
    assert busiest_share(64, 8, 8) == pytest.approx(1 + math.sqrt(56) * z8 / 64)
    # against the binomial counts themselves: 512 copies over 8 ranks, 20,000 draws
    draws = np.random.default_rng(0).multinomial(512, [1 / 8] * 8, size=20_000).max(axis=1).mean() / 64
    assert busiest_share(64, 8, 8) == pytest.approx(draws, rel=0.02)
    draws64 = np.random.default_rng(1).multinomial(4096, [1 / 64] * 64, size=20_000).max(axis=1).mean() / 64
    assert busiest_share(512, 8, 64) == pytest.approx(draws64, rel=0.03)
    assert busiest_share(64, 8, 1) == 1.0 and busiest_share(0, 8, 8) == 1.0
    # the spread shrinks as the step grows: 16x the tokens, a quarter of the excess
    assert busiest_share(1024, 8, 8) - 1 == pytest.approx((busiest_share(64, 8, 8) - 1) / 4)


def test_routed_exchange_bytes():
    """DeepEP's low-latency dispatch sends each rank's tokens' top_k copies in fp8 with a 4-byte scale per 128
    values, the combine returns them in bf16; the alltoall kind is bf16 both ways."""
    ds, system = load_model(DS), load_hardware("dgx-h200")
    p = resolve_serve(_plan(tp=1, attention_dp=8, ep=8), ds)
    T = 256.0
    copies = T / 8 * 8 * ds.hidden  # a rank's 32 tokens, 8 copies each, of 7168 values

    def a2a(size):
        return float(group_collective(system, "all_to_all", size, 8, 1, 8))

    assert routed_exchange_s(ds, system, p, T, "deepep_ll") == pytest.approx(
        a2a(copies * (1 + 4 / 128)) + a2a(copies * 2), rel=1e-12)
    assert routed_exchange_s(ds, system, p, T, "alltoall") == pytest.approx(2 * a2a(copies * 2), rel=1e-12)
    # the all-gather moves every token to every rank, the routed kinds only the copies: at top 8 of 8 ranks
    # fewer bytes, so less time once the bytes dominate the latency
    big = 8192.0
    assert routed_exchange_s(ds, system, p, big, "deepep_ll") < allgather_exchange_s(ds, system, p, big,
                                                                                    wire_bytes(system, p))


def test_stack_default_and_plan_choice():
    ds, system = load_model(DS), load_hardware("dgx-h200")
    for name in ("vllm", "sglang", "trtllm"):
        stack = load_serving_stack(name)
        assert stack.moe_a2a == "allgather" and "moe_a2a" in stack.sources
    assert load_serving_stack("atom").moe_a2a == "alltoall"  # MORI's all-to-all (ROCm/ATOM model_ops/moe.py)
    stack = load_serving_stack("sglang")
    p = resolve_serve(_plan(tp=1, attention_dp=8, ep=8), ds)
    q = resolve_serve(_plan(tp=1, attention_dp=8, ep=8, moe_a2a="deepep_ll"), ds)
    assert (moe_a2a(p, stack), moe_a2a(q, stack)) == ("allgather", "deepep_ll")
    T = 512.0
    w = wire_bytes(system, p)
    assert moe_exchange_s(ds, system, p, stack, T, w) == pytest.approx(allgather_exchange_s(ds, system, p, T, w))
    # the layer's collectives take the plan's exchange on its MoE layers
    own = tp_allreduce_s(ds, system, q, T, None, stack) - ds.moe_layers() / ds.n_layers * routed_exchange_s(
        ds, system, q, T, "deepep_ll")
    assert own == pytest.approx(tp_allreduce_s(ds, system, p, T, None, stack)
                                - ds.moe_layers() / ds.n_layers * allgather_exchange_s(ds, system, p, T, w),
                                abs=1e-12)


def test_refusal_and_note(capsys):
    ds = load_model(DS)
    with pytest.raises(InputError, match=r"moe_a2a = deepep_ll with attention_dp = 1.*valid: attention_dp > 1"):
        resolve_serve(_plan(tp=8, ep=8, moe_a2a="deepep_ll"), ds)
    e = infer(ds, "dgx-h200", _plan(tp=1, attention_dp=8, ep=8, concurrency=64, moe_a2a="deepep_ll", stack="sglang"))
    line = next(n for n in e.notes if n.startswith("expert parallelism"))
    assert f"{busiest_share(64, 8, 8):.2f}x" in line and "deepep_ll" in line
    code = main(["infer", "--model", DS, "--hardware", "dgx-h200", "--tp", "8", "--ep", "8", "--precision", "fp8",
                 "--input-len", "1024", "--output-len", "256", "--moe-a2a", "deepep_ll"])
    err = capsys.readouterr().err
    assert code == 2 and "moe_a2a = deepep_ll with attention_dp = 1" in err and "Traceback" not in err


def test_the_busiest_rank_sets_the_routed_experts(monkeypatch):
    """The routed experts run at the busiest rank's copies: with the share forced to 1 the layer's GEMMs lose
    exactly the MoE layers' share of (experts at T x share - experts at T)."""
    import perfmodel.serve.step_time as st

    ds, system, stack = load_model(DS), load_hardware("dgx-h200"), load_serving_stack("sglang")
    p = resolve_serve(_plan(tp=8, ep=8, precision="bf16"), ds)
    dev = st.device(ds, system, p, stack)
    T = 16.0
    share = busiest_share(T, 8, 8)
    assert share == pytest.approx(1 + math.sqrt(128 * 7 / 64) * NormalDist().inv_cdf(7.625 / 8.25) / 16)
    assert st.moe_table_s(dev, p, T) is None  # no bf16 fused-MoE table at this shape: the grouped GEMMs price it
    e, local = ds.moe, ds.moe.n_experts / 8

    def experts(tokens):  # the busiest rank: its experts reached by its copies, each on its share of them
        busy = max(st.active_experts(local, e.top_k, e.n_experts, tokens), 1.0)
        rows, fe = tokens * e.top_k / 8 / busy, e.expert_ffn_hidden / p.etp
        return st._gemm(dev, rows, busy * 2 * fe, ds.hidden) + st._gemm(dev, rows, busy * ds.hidden, fe)

    skewed = st.layer_gemm_s(dev, p, T)
    monkeypatch.setattr(st, "busiest_share", lambda *a: 1.0)
    assert skewed - st.layer_gemm_s(dev, p, T) == pytest.approx(
        ds.moe_layers() / ds.n_layers * (experts(T * share) - experts(T)), rel=1e-9)
    assert experts(T * share) > 1.2 * experts(T)  # at 16 tokens the busiest rank reads ~1.3x the experts' weights


def test_the_busiest_rank_reads_the_fused_moe_table(monkeypatch):
    """Where the part's fused-MoE table has the shape (DeepSeek-V3's block-scaled fp8 on H200) and the engine runs
    the kernel it timed (TensorRT-LLM's), the routed experts are the table at the busiest rank's tokens: forcing the
    share to 1 takes off exactly the MoE layers' share of table(T x share) - table(T). SGLang runs its own kernel:
    not the table's."""
    import perfmodel.serve.step_time as st

    ds, system = load_model(DS), load_hardware("dgx-h200")
    sg = resolve_serve(_plan(tp=8, ep=8), ds)
    assert st.layer_gemm_s(st.device(ds, system, sg, load_serving_stack("sglang")), sg, 64.0) != pytest.approx(
        st.layer_gemm_s(st.device(ds, system, sg, load_serving_stack("trtllm")), sg, 64.0), rel=1e-6)
    stack = load_serving_stack("trtllm")
    p = resolve_serve(_plan(tp=8, ep=8), ds)
    dev = st.device(ds, system, p, stack)
    T = 64.0
    share = busiest_share(T, 8, 8)
    table = st.moe_table_s(dev, p, T * share) - st.moe_table_s(dev, p, T)
    skewed = st.layer_gemm_s(dev, p, T)
    monkeypatch.setattr(st, "busiest_share", lambda *a: 1.0)
    assert skewed - st.layer_gemm_s(dev, p, T) == pytest.approx(ds.moe_layers() / ds.n_layers * table, rel=1e-9)
    assert table > 0


def test_two_batch_overlap_by_hand():
    """Two half micro-batches: their device parts twice, their collectives hidden behind that compute, the whole
    step's host parts once; refused without attention data parallelism."""
    from perfmodel.serve.step_time import HOST_PARTS, step_parts

    ds, system, stack = load_model(DS), load_hardware("dgx-h200"), load_serving_stack("sglang")
    p = resolve_serve(_plan(tp=1, attention_dp=8, ep=8, moe_a2a="deepep_ll"), ds)
    t = p.model_copy(update={"two_batch_overlap": True})
    sizes = dict(decode=256, context=1536, prefill_seqs=0, prompt=0)
    half = step_parts(ds, system, p, stack, **{**sizes, "decode": 128}, logits=128)
    whole = step_parts(ds, system, p, stack, **sizes, logits=256)
    got = step_parts(ds, system, t, stack, **sizes, logits=256)
    device = ("gemm", "attention", "memory", "lm_head")
    for k in device + ("pp_comm",):
        assert got[k] == pytest.approx(2 * half[k], rel=1e-12)
    assert got["tp_comm"] == pytest.approx(max(0.0, 2 * half["tp_comm"] - sum(2 * half[k] for k in device)))
    for k in HOST_PARTS:
        assert got[k] == whole[k]
    with pytest.raises(InputError, match=r"two_batch_overlap with attention_dp = 1"):
        resolve_serve(_plan(tp=8, ep=8, two_batch_overlap=True), ds)


def test_prefill_pool_without_attention_groups_runs_no_overlap():
    """A disaggregated plan's prefill pool takes the MoE exchange and two-batch overlap only where it has attention
    groups (prefill_attention_dp > 1): a tp-only pool's all-reduces are not hidden behind half batches, and its
    layout is one resolve_serve accepts."""
    from perfmodel.serve.disaggregated import prefill_plan

    ds = load_model(DS)
    kw = dict(tp=1, attention_dp=8, ep=8, concurrency=64, moe_a2a="deepep_ll", prefill_dp=1, prefill_tp=8)
    tbo = resolve_serve(_plan(**kw, two_batch_overlap=True), ds)
    pool = prefill_plan(tbo)
    assert (pool.attention_dp, pool.two_batch_overlap, pool.moe_a2a) == (1, False, None)
    resolve_serve(pool.model_copy(update={"gpus": None}), ds)  # no refusal of the derived layout
    with_tbo, without = (infer(ds, "dgx-h200", _plan(**kw, two_batch_overlap=t)) for t in (True, False))
    assert with_tbo.prefill_s["tp_comm"] > 0
    assert with_tbo.prefill_s == pytest.approx(without.prefill_s, rel=1e-12)
    assert with_tbo.decode_step_s != pytest.approx(without.decode_step_s)  # the decode pool still overlaps
    # a pool with attention groups keeps both
    grouped = prefill_plan(resolve_serve(_plan(**{**kw, "prefill_tp": 4}, prefill_attention_dp=2,
                                               two_batch_overlap=True), ds))
    assert (grouped.attention_dp, grouped.two_batch_overlap, grouped.moe_a2a) == (2, True, "deepep_ll")


def test_two_batch_overlap_draft_priced_once():
    """Under two-batch overlap each half micro-batch runs its share of the speculative draft; the draft's own
    layer is not split again, so the step is the same whether the caller passes the draft's job (the simulation)
    or step_parts makes it (the steady state)."""
    from perfmodel.serve.step_time import draft_job, step_parts

    ds, system, stack = load_model(DS), load_hardware("dgx-h200"), load_serving_stack("sglang")
    p = resolve_serve(_plan(tp=1, attention_dp=8, ep=8, moe_a2a="deepep_ll", two_batch_overlap=True,
                            speculative={"method": "mtp", "draft_tokens": 1}), ds)
    assert p.draft_plan().two_batch_overlap is False
    sizes = dict(decode=64, context=1536, prefill_seqs=0, prompt=0, logits=64)
    made = step_parts(ds, system, p, stack, **sizes)
    passed = step_parts(ds, system, p, stack, **sizes, draft=draft_job(ds, system, p, stack))
    assert passed == pytest.approx(made, rel=1e-12)
    # by hand: twice the draft of one half batch without the overlap
    one = p.model_copy(update={"two_batch_overlap": False})
    half = step_parts(ds, system, one, stack, **{**sizes, "decode": 32, "logits": 32})
    assert made["draft"] == pytest.approx(2 * half["draft"], rel=1e-12)


def test_note_names_the_priced_share():
    """The breakdown's share is the one priced: each half micro-batch's under two-batch overlap."""
    ds = load_model(DS)
    e = infer(ds, "dgx-h200", _plan(tp=1, attention_dp=8, ep=8, concurrency=64, two_batch_overlap=True))
    line = next(n for n in e.notes if n.startswith("expert parallelism"))
    assert f"runs {busiest_share(32, 8, 8):.2f}x" in line and "each 32-token micro-batch of a 64-token step" in line
