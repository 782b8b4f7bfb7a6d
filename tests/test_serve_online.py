"""Online serving as benchmark tools send it: constant, gamma and staged arrivals, the prefix cache over shared
system prompts, the clock the power limit sustains over a run's work and the fused-MoE grouped kernel; each checked
against a hand computation."""

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
from perfmodel.serve.batching import infer, steady_step
from perfmodel.serve.replica_engine import Replica, StepPricer, gaps, open_arrivals
from perfmodel.serve.simulate import simulate, simulate_requests
from perfmodel.serve.power_mix import add_mix, mix_clock
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


def _hand_mix(m, s, p, parts, tokens, logits):
    """A step's kinds of time by hand (`cost.power` parts): the GEMMs' compute-bound seconds at their best rate and
    the prefill attention compute, the rest of the GEMMs and the element-wise kernels memory-bound."""
    gemm = parts["gemm"] + parts["lm_head"]
    rate = s.accelerator.peak_flops("bf16") * s.efficiency.sustained_fraction * s.efficiency.matmul_max["bf16"]
    compute = min(gemm, step_gemm_flops(m, p, tokens, logits) / rate)
    return compute, {"gemm": compute, "attention": parts.get("prefill_attention", 0.0),
                     "memory_bound": gemm - compute + parts["attention"] - parts.get("prefill_attention", 0.0)
                     + parts["memory"], "tp_comm": parts["tp_comm"], "pp_comm": parts["pp_comm"],
                     "overhead": parts["overhead"]}


def _power_time(mix):
    time = {k: np.asarray(0.0) for k in ("recompute", "optimizer", "cp_comm", "ep_comm", "dp_comm", "zero3_comm",
                                         "offload_comm", "bubble", "host")}
    time.update({k: np.asarray(v) for k, v in mix.items()})
    return time


def test_a_decode_step_keeps_the_full_clock_and_a_long_prefill_alone_does_not():
    m, s, p, st = _h100()
    decode = step_parts(m, s, p, st, decode=64, context=2048, prefill_seqs=0, prompt=0, logits=64)
    assert "clock" not in decode  # memory-bound: reading weights and KV draws less than the limit
    # a prefill priced at its own mix (clock None: the disaggregated simulation, the static batch)
    prefill = step_parts(m, s, p, st, decode=0, context=0, prefill_seqs=1, prompt=8192, logits=1)
    compute, mix = _hand_mix(m, s, p, prefill | {"prefill_attention": prefill["attention"]}, 8192, 1)
    clock = float(step_clock(s.accelerator.power, _power_time(mix), 1.0))
    assert loop_clock(s.accelerator.power) <= clock < 1.0
    assert prefill["clock"] == pytest.approx((compute + prefill["attention"]) * (1 / clock - 1), rel=1e-9)


def test_the_clock_of_a_run_is_its_summed_mix_s():
    m, s, p, st = _h100()
    dm, pm = {}, {}
    decode = step_parts(m, s, p, st, decode=64, context=2048, prefill_seqs=0, prompt=0, logits=64, clock=1.0, mix=dm)
    prefill = step_parts(m, s, p, st, decode=0, context=0, prefill_seqs=1, prompt=8192, logits=1, clock=1.0, mix=pm)
    assert "clock" not in prefill  # priced at the clock given: the tables'
    d_compute, d_hand = _hand_mix(m, s, p, decode, 64, 64)
    p_compute, p_hand = _hand_mix(m, s, p, prefill | {"prefill_attention": prefill["attention"]}, 8192, 1)
    for hand, got in ((d_hand, dm), (p_hand, pm)):
        assert {k: v for k, v in got.items() if v} == pytest.approx({k: v for k, v in hand.items() if v}, rel=1e-9)
    # 40 decode steps and one 8k prefill: the limit sees their sum, not the prefill alone
    run = add_mix(add_mix({}, dm, 40), pm)
    hand = {k: 40 * d_hand[k] + p_hand[k] for k in d_hand}
    want = float(step_clock(s.accelerator.power, _power_time(hand), 1.0))
    own = float(step_clock(s.accelerator.power, _power_time(p_hand), 1.0))
    assert mix_clock(s, run) == pytest.approx(want, rel=1e-9)
    assert own < want  # the decodes' lower draw leaves the prefill more of the limit
    assert mix_clock(s, add_mix({}, dm, 40)) == 1.0  # decode alone: under the limit
    # the run's clock applied to a step: its compute-bound seconds / s
    s_run = 0.93
    slowed = step_parts(m, s, p, st, decode=0, context=0, prefill_seqs=1, prompt=8192, logits=1, clock=s_run)
    assert slowed["clock"] == pytest.approx((p_compute + prefill["attention"]) * (1 / s_run - 1), rel=1e-9)
    assert {k: v for k, v in slowed.items() if k != "clock"} == pytest.approx(prefill, rel=1e-9)


def test_a_decode_only_run_keeps_the_full_clock():
    m, s, p, st = _h100("llama-3.1-8b", 1)
    price = StepPricer(m, s, p, st)
    I, O = np.full(8, 16), np.full(8, 200)
    rep = Replica(price, st, 1e6, I, O, prefilled=True, ghost_steps=False, clocks=[1.0])
    for r in range(8):
        rep.send(r, 0.0)
    first, done = np.full(8, np.nan), np.full(8, np.nan)
    rep.run(first, done)
    assert np.isfinite(done).all() and rep.mixes[0]["memory_bound"] > 0
    assert mix_clock(s, rep.mixes[0]) == 1.0
    # the mix is every step's: its seconds at the tables' clock (no host parts), as busy as the replica was
    mixed = sum(rep.mixes[0].values())
    assert 0 < mixed <= rep.busy_s + 1e-12


def test_a_prefill_bound_run_is_slowed_by_its_sustained_clock_once():
    m, s, p, st = _h100()
    work = {"arrival": "burst", "requests": 16}
    plan = p.model_copy(update={"output_len": 2})
    run = simulate_requests(m, s, plan, work)
    note = [n for n in run.notes if n.startswith("power limit")]
    assert note, run.notes  # prompts of 8k tokens back to back: the replica's mix is over the limit
    low = float(note[0].split(" at ")[1].split()[0])
    bare = s.model_copy(update={"accelerator": s.accelerator.model_copy(update={"power": None})})
    fast = simulate_requests(m, bare, plan, work)
    assert loop_clock(s.accelerator.power) <= low < 1.0
    assert np.mean(run.first - run.arrive) > np.mean(fast.first - fast.arrive)


def test_infer_applies_the_steady_cycle_s_clock_to_ttft_and_tpot():
    m, s, p, st = _h100()
    mix = {}
    cycle = steady_step(m, s, p, st, 8, 1.0, mix)
    clock = mix_clock(s, mix)
    assert clock < 1.0 and "clock" not in cycle
    est = infer(m, s, p.model_copy(update={"concurrency": 8}))
    slowed = steady_step(m, s, p, st, 8, clock)
    assert est.decode_step_s == pytest.approx(slowed, rel=1e-9)
    alone = step_parts(m, s, p, st, decode=0, context=0, prefill_seqs=1, prompt=8192, logits=1, clock=1.0)
    compute = min(alone["gemm"] + alone["lm_head"], step_gemm_flops(m, p, 8192, 1) / (
        s.accelerator.peak_flops("bf16") * s.efficiency.sustained_fraction * s.efficiency.matmul_max["bf16"]))
    assert est.prefill_s["clock"] == pytest.approx((compute + alone["attention"]) * (1 / clock - 1), rel=1e-9)


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
