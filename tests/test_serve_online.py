"""Online serving as benchmark tools send it: constant, gamma and staged arrivals, the prefix cache over shared
system prompts, the step's own clock and the fused-MoE grouped kernel; each checked against a hand computation."""

import contextlib
import io
import json

import numpy as np
import pytest

from perfmodel.cli.main import main
from perfmodel.cost.power import loop_clock, step_clock
from perfmodel.errors import InputError
from perfmodel.serve.host_time import plan_stack
from perfmodel.serve.prefix_cache import PrefixCache, cached_tokens
from perfmodel.serve.replica_engine import gaps, open_arrivals
from perfmodel.serve.simulate import simulate, simulate_requests
from perfmodel.serve.step_time import _gemm, device, grouped_expert_s, step_gemm_flops, step_parts
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.serving.schema import ServePlan, resolve_serve
from perfmodel.spec.serving.workload import Workload


def test_constant_and_staged_arrivals_by_hand():
    w = Workload(arrival="constant", stages=[{"rate": 2.5, "duration_s": 4}, {"rate": 5, "duration_s": 2}])
    assert w.requests == 10 + 10 and w.stage_of() == [(0, 10), (10, 20)]
    t = open_arrivals(w, np.random.default_rng(0))
    # 0, 0.4, ..., 3.6 in the first stage; 4.0, 4.2, ..., 5.8 in the second
    assert t[:10] == pytest.approx(0.4 * np.arange(10))
    assert t[10:] == pytest.approx(4.0 + 0.2 * np.arange(10))


def test_gamma_gaps_have_the_stated_mean_and_spread():
    g = gaps("gamma", 4.0, 200_000, 2.0, np.random.default_rng(1))
    assert g.mean() == pytest.approx(0.25, rel=0.02)
    assert g.std() / g.mean() == pytest.approx(2.0, rel=0.03)  # coefficient of variation
    assert gaps("poisson", 4.0, 200_000, 1.0, np.random.default_rng(1)).mean() == pytest.approx(0.25, rel=0.02)


@pytest.mark.parametrize("bad, field", [(dict(arrival="closed", concurrency=4, stages=[{"rate": 1, "duration_s": 1}]),
                                         "stages"),
                                        (dict(arrival="constant"), "request_rate"),
                                        (dict(arrival="gamma", stages=[]), "stages")])
def test_bad_workloads_name_the_field(bad, field):
    with pytest.raises(InputError, match=field):
        Workload.parse(bad, where="workload")


def test_a_hit_serves_the_shared_prompts_full_blocks():
    assert cached_tokens(100, 547, 16) == 96  # six full blocks of 16
    assert cached_tokens(100, 50, 16) == 48  # at most prompt - 1 tokens: 49 -> three blocks
    assert cached_tokens(100, 547, 1) == 100  # SGLang's token-by-token radix tree
    assert cached_tokens(10, 547, 16) == 0  # no full block


def test_the_cache_holds_computed_prompts_and_evicts_the_least_recent():
    c = PrefixCache(shared=100, block=16)
    assert c.admit(0, 547) == 0  # nobody computed group 0's system prompt yet
    c.computed(0)
    c.computed(1)
    assert c.admit(0, 547) == 96 and c.admit(1, 547) == 96
    c.admit(0, 547)  # group 0 is now the most recent
    c.fit(100)  # room for one system prompt's 96 tokens: group 1 goes
    assert list(c.held) == [0]
    assert c.hit_rate == pytest.approx(3 * 96 / (4 * 547))


def test_simulated_prefix_hits_count_every_group_after_its_first_request():
    """Nine groups sent in turn at one request a second, far apart enough that each prompt is computed before the
    next of its group arrives: every request after the first nine hits 96 of its 547 tokens."""
    plan = dict(tp=1, input_len=547, output_len=8, stack="vllm", stack_version="0.15.1", precision="bf16")
    work = dict(arrival="constant", request_rate=1.0, requests=90,
                prefix={"groups": 9, "shared_len": 100, "users_per_group": 5})
    run = simulate_requests("llama-3.1-8b", "dgx-h100", plan, work)
    assert run.prefix_hit == pytest.approx((90 - 9) * 96 / (90 * 547))
    off = simulate("llama-3.1-8b", "dgx-h100", plan, {**work, "prefix": None})
    on = simulate("llama-3.1-8b", "dgx-h100", plan, work)
    assert on.prefix_hit == pytest.approx(run.prefix_hit) and off.prefix_hit == 0
    assert on.ttft_s.mean < off.ttft_s.mean  # fewer prompt tokens to prefill


def test_stages_are_reported_apart():
    plan = dict(tp=1, input_len=256, output_len=16, stack="vllm", precision="bf16")
    work = dict(arrival="constant", stages=[{"rate": 1, "duration_s": 5}, {"rate": 4, "duration_s": 5}])
    sim = simulate("llama-3.1-8b", "dgx-h100", plan, work)
    assert [s.requests for s in sim.stages] == [5, 20] and sim.requests == 25
    assert sim.ttft_s.p90 >= sim.ttft_s.median


def _h100(model="llama-3.1-70b", tp=4):
    m, s = load_model(model), load_hardware("dgx-h100")
    p = resolve_serve(ServePlan(tp=tp, precision="bf16", input_len=8192, output_len=128, stack="vllm",
                                stack_version="0.15.1"), m)
    return m, s, p, plan_stack(p)


def test_a_decode_step_keeps_the_full_clock_and_a_long_prefill_does_not():
    m, s, p, st = _h100()
    decode = step_parts(m, s, p, st, decode=64, context=2048, prefill_seqs=0, prompt=0, logits=64)
    assert "clock" not in decode  # memory-bound: reading weights and KV draws less than the limit
    prefill = step_parts(m, s, p, st, decode=0, context=0, prefill_seqs=1, prompt=8192, logits=1)
    # the compute-bound seconds, GEMMs at their best rate and the prefill attention, stretched by 1 / s
    gemm = prefill["gemm"] + prefill["lm_head"]
    rate = s.accelerator.peak_flops("bf16") * s.efficiency.sustained_fraction * s.efficiency.matmul_max["bf16"]
    compute = min(gemm, step_gemm_flops(m, p, 8192, 1) / rate)
    attn = prefill["attention"]
    time = {k: np.asarray(0.0) for k in ("recompute", "optimizer", "cp_comm", "ep_comm", "dp_comm", "zero3_comm",
                                         "offload_comm", "bubble", "host")}
    time.update(gemm=np.asarray(compute), attention=np.asarray(attn), tp_comm=np.asarray(prefill["tp_comm"]),
                pp_comm=np.asarray(prefill["pp_comm"]), overhead=np.asarray(prefill["overhead"]),
                memory_bound=np.asarray(gemm - compute + prefill["memory"]))
    clock = float(step_clock(s.accelerator.power, time, 1.0))
    assert loop_clock(s.accelerator.power) <= clock < 1.0
    assert prefill["clock"] == pytest.approx((compute + attn) * (1 / clock - 1), rel=1e-9)


def test_fused_moe_is_one_grouped_gemm_over_the_reached_experts():
    m, s, p, st = _h100("llama-3.1-8b", 1)
    dev = device(m, s, p, st)

    def g(*a):
        return _gemm(dev, *a)

    assert grouped_expert_s(g, 4.0, 2 * 8192, 5120, 10) == pytest.approx(_gemm(dev, 4.0, 10 * 2 * 8192, 5120))
    # one launch over ten experts' weights costs less than ten GEMMs of one expert each
    assert grouped_expert_s(g, 4.0, 2 * 8192, 5120, 10) < 10 * _gemm(dev, 4.0, 2 * 8192, 5120)


def test_cli_runs_stages_with_shared_prompts_and_reports_each_stage():
    """`infer --simulate --stages` in-process: the stages' request counts (rate x seconds), each stage's rows, and
    the same latencies the Python API gives for that workload."""
    args = ["infer", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--input-len", "300", "--output-len", "20",
            "--stack", "vllm", "--simulate", "--arrival", "constant", "--stages", "2@5s;4@5s",
            "--prefix-groups", "3", "--prefix-len", "64", "--format", "json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) == 0
    sim = json.loads(out.getvalue())["simulation"]
    assert [s["requests"] for s in sim["stages"]] == [10, 20]
    api = simulate("llama-3.1-8b", "dgx-h100", dict(input_len=300, output_len=20, stack="vllm"),
                   dict(arrival="constant", stages=[{"rate": 2, "duration_s": 5}, {"rate": 4, "duration_s": 5}],
                        prefix={"groups": 3, "shared_len": 64}))
    assert sim["ttft_s"]["p90"] == pytest.approx(api.ttft_s.p90)
    assert sim["prefix_hit"] == pytest.approx((30 - 3) * 64 / (30 * 300))  # four full blocks of 16, after each first


@pytest.mark.parametrize("flags, words", [(["--stages", "2@x"], "--stages"),
                                          (["--stages", "2@5", "--request-rate", "3"], "exactly one"),
                                          (["--request-rate", "3", "--prefix-groups", "2"], "--prefix-len"),
                                          (["--request-rate", "3", "--prefix-groups", "2", "--prefix-len", "999"],
                                           "--input-len")])
def test_cli_refuses_bad_loads_by_name(flags, words, capsys):
    assert main(["infer", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--input-len", "300", "--output-len",
                 "20", "--simulate", *flags]) == 2
    assert words in capsys.readouterr().err


def test_a_full_cache_preempts_the_newest_and_every_request_still_ends(monkeypatch):
    """A cache of 4,500 tokens (room for 4.5 sequences of 1,000) and 16 clients: vLLM admits by prompt, the outputs
    outgrow the cache, the newest sequences are preempted and recomputed; every request ends after its first
    token, the run takes longer than with room for all, and a cache of ample room preempts none."""
    import perfmodel.serve.simulate as sim_mod

    plan = dict(tp=1, input_len=500, output_len=500, stack="vllm", precision="bf16")
    work = dict(arrival="closed", concurrency=16, requests=32)
    roomy = simulate_requests("llama-3.1-8b", "dgx-h100", plan, work)
    assert roomy.preempted == 0
    real = sim_mod.pool_kv
    monkeypatch.setattr(sim_mod, "pool_kv", lambda *a, **k: (4500, real(*a, **k)[1]))
    tight = simulate_requests("llama-3.1-8b", "dgx-h100", plan, work)
    assert tight.preempted > 0
    assert np.isfinite(tight.done).all() and (tight.done > tight.first).all()
    assert tight.done.max() > roomy.done.max()
