"""Attention data parallelism with wide expert parallelism in serving (ServePlan.attention_dp): the layout's
invariants and refusals, weights and batch limits by hand, the step's parts against their components (attention
and projections on a group's share, routed experts on all tokens, the MoE exchange), the NVFP4 MoE table taking
the faster kernel, the simulation, the CLI, the search and the executor's refusal."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from perfmodel import load_hardware, load_model
from perfmodel.cli.main import main
from perfmodel.cost.comm.collectives import group_collective
from perfmodel.errors import InputError
from perfmodel.serve import infer
from perfmodel.serve.kv_cache import replica_batch, weight_bytes
from perfmodel.serve.layout_search import layouts
from perfmodel.serve.simulate import simulate
from perfmodel.serve.wide_ep import allgather_exchange_s
from perfmodel.serve.step_time import (_gemm, allreduce_s, attention_part, device, layer_gemm_s,
                                       step_parts, tp_allreduce_s, wire_bytes)
from perfmodel.spec.serving.schema import ServePlan, load_serving_stack, resolve_serve

KERNELS = Path(__file__).parents[1] / "hardware_specs" / "kernels"
DS = "deepseek-v3"


def _plan(**kw):
    return ServePlan(**{"precision": "fp8", "input_len": 1024, "output_len": 1024, **kw})


def test_layout_invariant_and_refusals():
    ds = load_model(DS)
    p = resolve_serve(_plan(tp=1, attention_dp=8, ep=8), ds)
    assert (p.gpus, p.moe_ranks, p.etp) == (8, 8, 1)
    p = resolve_serve(_plan(tp=2, attention_dp=4, ep=4, dp=2), ds)  # tp x adp = moe_tp x moe_ep = 2 x 4
    assert (p.gpus, p.moe_ranks, p.etp) == (16, 8, 2)
    with pytest.raises(InputError, match=r"ep=16 does not divide tp x attention_dp = 8 .*valid ep: 1, 2, 4, 8"):
        resolve_serve(_plan(tp=1, attention_dp=8, ep=16), ds)
    with pytest.raises(InputError, match=r"gpus = 8 is not tp x attention_dp x pp x dp = 2 x 8 x 1 x 1 = 16"):
        resolve_serve(_plan(gpus=8, tp=2, attention_dp=8, ep=16), ds)
    with pytest.raises(InputError, match=r"attention_dp=2 for llama-3.1-8b, which has no experts"):
        resolve_serve(_plan(attention_dp=2), load_model("llama-3.1-8b"))


def test_weights_split_experts_over_every_rank_and_the_rest_over_tp():
    ds = load_model(DS)
    a, b = _plan(tp=1, attention_dp=8, ep=8), _plan(tp=8, ep=8)
    routed = ds.moe_layers() * ds.moe.n_experts * ds.expert_params()  # all layers' routed experts
    rest = ds.n_layers * ds.params_per_layer() - routed
    ends = (ds.embedding_params() + ds.head_params()) * 2  # bf16, / tp
    assert weight_bytes(ds, a) == pytest.approx(rest + routed / 8 + ends, rel=1e-12)  # fp8: 1 B per weight
    assert weight_bytes(ds, b) == pytest.approx(rest / 8 + routed / 8 + ends / 8, rel=1e-12)


def test_batch_limits_are_per_attention_group():
    ds, stack = load_model(DS), load_serving_stack("sglang")
    one, four = _plan(tp=2, ep=8, attention_dp=4), _plan(tp=2, ep=2)
    cache = 40 * 2**30
    b4, why4 = replica_batch(ds, one, stack, cache)
    b1, _ = replica_batch(ds, four, stack, cache)
    assert b4 == 4 * b1 and why4 in ("KV cache", "the stack's max_batch 1024 per attention group x 4")
    assert replica_batch(ds, _plan(tp=2, ep=8, attention_dp=4, concurrency=64), stack, cache)[0] == 64


def test_step_parts_by_component():
    ds, system, stack = load_model(DS), load_hardware("dgx-h200"), load_serving_stack("sglang")
    a, b = _plan(tp=1, attention_dp=8, ep=8), _plan(tp=8, ep=8)
    da, db = device(ds, system, a, stack), device(ds, system, b, stack)
    T = 512.0

    def attn_side(dev, plan, t):  # the projections, dense MLPs and shared experts on t tokens at plan.tp
        g, tp = 2, plan.tp
        qkv = _gemm(dev, t, ds.qkv_matmul_params() / ds.hidden / tp, ds.hidden) + _gemm(dev, t, ds.hidden,
                                                                                        ds.q_dim / tp)
        dense = _gemm(dev, t, g * ds.ffn_hidden / tp, ds.hidden) + _gemm(dev, t, ds.hidden, ds.ffn_hidden / tp)
        fs = ds.moe.shared_ffn_hidden / tp
        shared = _gemm(dev, t, g * fs, ds.hidden) + _gemm(dev, t, ds.hidden, fs)
        return qkv + (ds.dense_layers() * dense + ds.moe_layers() * shared) / ds.n_layers

    # the same routed experts (ep 8, etp 1, all T tokens) in both; only the attention side differs
    assert layer_gemm_s(da, a, T) - layer_gemm_s(db, b, T) == pytest.approx(
        attn_side(da, a, T / 8) - attn_side(db, b, T), rel=1e-9, abs=1e-12)
    # tp 1: no all-reduce; each MoE layer all-gathers the replica's tokens and reduce-scatters them over 8 GPUs
    size = T * ds.hidden * wire_bytes(system, a)
    gather = sum(float(group_collective(system, k, size, 8, 1, 8)) for k in ("all_gather", "reduce_scatter"))
    assert allgather_exchange_s(ds, system, a, T, wire_bytes(system, a)) == pytest.approx(gather, rel=1e-12)
    assert tp_allreduce_s(ds, system, a, T) == pytest.approx(ds.moe_layers() / ds.n_layers * gather, rel=1e-12)
    assert tp_allreduce_s(ds, system, b, T) == pytest.approx(2 * allreduce_s(ds, system, b, T), rel=1e-12)
    # a decode step of 64 sequences: each group attends 8 of them
    parts = step_parts(ds, system, a, stack, decode=64, context=2048, prefill_seqs=0, prompt=0, logits=64)
    assert parts["attention"] == pytest.approx(attention_part(ds, system, a, stack, 8, 2048, True), rel=1e-12)


def test_a_prompt_lands_whole_in_one_group():
    """One prompt beside a decode batch: the busiest group runs the whole prompt's projections and attention, so
    the step is no shorter than with the prompt spread over the groups."""
    ds, system, stack = load_model(DS), load_hardware("dgx-h200"), load_serving_stack("sglang")
    a = _plan(tp=1, attention_dp=8, ep=8)
    one = step_parts(ds, system, a, stack, decode=64, context=2048, prefill_seqs=1, prompt=4096, logits=65)
    spread = step_parts(ds, system, a, stack, decode=64, context=2048, prefill_seqs=8, prompt=512, logits=72)
    assert one["attention"] > spread["attention"] and one["gemm"] > spread["gemm"]
    assert one["attention"] == pytest.approx(attention_part(ds, system, a, stack, 8, 2048, True)
                                             + attention_part(ds, system, a, stack, 1, 4096, False), rel=1e-12)


def test_dp_attention_pays_off_for_mla_at_high_concurrency():
    """DeepSeek's reason for DP attention: MLA's latent cache is whole on every tp rank, so 8 groups of tp 1 hold
    8x the sequences of one tp-8 group and decode with less weight traffic per token at a large batch."""
    ds = load_model(DS)
    kw = dict(precision="fp8", input_len=1024, output_len=1024, stack="sglang")
    adp = infer(ds, "dgx-h200", ServePlan(tp=1, attention_dp=8, ep=8, **kw))
    tp8 = infer(ds, "dgx-h200", ServePlan(tp=8, ep=8, **kw))
    assert adp.kv_cache_tokens > 4 * tp8.kv_cache_tokens
    assert adp.output_tokens_per_s > tp8.output_tokens_per_s
    assert any("8 attention groups" in n for n in adp.notes)


def test_simulation_pools_the_groups():
    ds = load_model(DS)
    plan = ServePlan(tp=1, attention_dp=8, ep=8, precision="fp8", input_len=1024, output_len=256, stack="sglang")
    s = simulate(ds, "dgx-h200", plan, dict(arrival="closed", concurrency=64, requests=128, range_ratio=1.0))
    assert s.requests == 128 and s.mean_batch > 32 and "x 8 attention groups" in s.notes[0]
    assert s.ttft_s.mean > 0 and s.tpot_s.mean > 0


def test_cli_attention_dp_and_its_refusal(capsys):
    assert main(["infer", "--model", DS, "--hardware", "dgx-h200", "--tp", "1", "--attention-dp", "8", "--ep", "8",
                 "--precision", "fp8", "--input-len", "1024", "--output-len", "256", "--concurrency", "64"]) == 0
    out = capsys.readouterr().out
    assert "tp=1 attention_dp=8 pp=1 dp=1 ep=8" in out and "on 8 x dgx-h200" in out
    assert main(["infer", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--attention-dp", "2",
                 "--input-len", "128", "--output-len", "128"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "attention_dp=2 for llama-3.1-8b, which has no experts" in err


def test_search_offers_wide_expert_parallel_layouts():
    ds = load_model(DS)
    lay = layouts(ds, 16, 8)
    wide = {x for x in lay if x[4] > 1}
    assert (1, 1, 2, 8, 8) in wide and (2, 1, 1, 16, 8) in wide and (8, 1, 1, 16, 2) in wide
    assert all(tp * adp == ep and pp == 1 and tp * adp * dp == 16 for tp, pp, dp, ep, adp in wide)
    dense = load_model("llama-3.1-8b")
    assert all(x[4] == 1 for x in layouts(dense, 16, 8))


def test_nvfp4_moe_table_keeps_the_faster_kernel():
    """B200's NVFP4 rows are the faster of TensorRT-LLM's CUTLASS and min-latency (TRTLLM-Gen) fused MoE: at
    MiniMax-M2.5's shape, moe_tp 4, 32 tokens the shared data time 0.305 ms (CUTLASS) and 0.062 ms (min latency)."""
    rows = {}
    for line in gzip.open(KERNELS / "b200_sxm" / "moe.csv.gz", "rt").read().splitlines()[1:]:
        d, *v = line.split(",")
        if (d, *map(int, v[:7])) == ("fp4", 3072, 1536, 8, 256, 4, 1, 32):
            rows["fp4"] = float(v[7])
    assert rows["fp4"] == pytest.approx(0.062059, rel=1e-4)
    m = load_model(str(Path(__file__).parent / "fixtures" / "hf" / "minimax-m2.5" / "config.json"))
    kw = dict(tp=4, input_len=1024, output_len=1024, concurrency=32, stack="vllm")
    fp4, fp8 = (infer(m, "dgx-b200", ServePlan(precision=p, **kw)) for p in ("fp4", "fp8"))
    assert fp4.decode_step_s["gemm"] < fp8.decode_step_s["gemm"]  # fp4 no slower than fp8, as measured
    assert math.isfinite(fp4.tpot_s)


def test_memory_views_per_gpu_and_disaggregated_decode_pools():
    """What a GPU holds: its group's sequences' cache (never more than its KV budget), a gathered MoE buffer of
    every group's tokens in the activations; a disaggregated decode pool of attention groups holds and receives
    as the aggregated replica does."""
    from perfmodel.serve.kv_cache import activation_bytes

    ds, stack = load_model(DS), load_serving_stack("sglang")
    kw = dict(precision="fp8", input_len=1024, output_len=1024, stack="sglang")
    e = infer(ds, "dgx-h200", ServePlan(tp=1, attention_dp=8, ep=8, **kw))
    assert e.memory_gib["kv_in_use"] <= e.memory_gib["kv_cache"] + 1e-9
    one, eight = (_plan(tp=1, attention_dp=a, ep=8 if a > 1 else 1) for a in (1, 8))
    gathered = 7 * stack.max_num_tokens * (ds.hidden + 2 * ds.moe.expert_ffn_hidden * ds.moe.top_k / 8) * 2 * 2
    assert activation_bytes(ds, eight, stack) - activation_bytes(ds, one, stack) == pytest.approx(gathered, rel=1e-9)
    dis = infer(ds, "dgx-h200", ServePlan(tp=1, attention_dp=8, ep=8, prefill_dp=1, prefill_tp=8, **kw))
    assert dis.kv_cache_tokens == pytest.approx(e.kv_cache_tokens, rel=1e-9)
    assert "decode replica(s) of tp=1 attention_dp=8 pp=1" in dis.notes[0]
