"""Speculative decoding in serving (ServePlan.speculative: MTP or EAGLE-3 with a stated acceptance), by hand: the
tokens a step emits (Leviathan et al. 2023, Eq. 1), the verify forward's q = k + 1 tokens per sequence, the
draft's layer, weights and KV cache, TPOT = step / tokens per step in steady state, disaggregated and simulated,
and the refusals."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from perfmodel import load_hardware, load_model
from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.serve import infer
from perfmodel.serve.batching import static_batch
from perfmodel.serve.kv_cache import draft_weight_bytes, kv_bytes_per_token, layer_kv_bytes, memory
from perfmodel.serve.simulate import StepPricer, simulate
from perfmodel.serve.step_time import device, draft_job, draft_part, step_parts, token_parts
from perfmodel.spec.serving.schema import ServePlan, SpeculativeConfig, draft_model, load_serving_stack

HF = Path(__file__).parent / "fixtures" / "hf"
MTP3 = dict(method="mtp", draft_tokens=3, acceptance_length=2.7)
DS_JOB = dict(tp=8, ep=8, precision="fp8", input_len=1024, output_len=1024, concurrency=32)


def test_tokens_per_step_from_the_acceptance():
    s = SpeculativeConfig(method="eagle", draft_tokens=3, acceptance_rate=0.8)
    assert s.tokens_per_step == pytest.approx((1 - 0.8**4) / 0.2) == pytest.approx(2.952)  # 1 + a + a^2 + a^3
    assert SpeculativeConfig(method="mtp", draft_tokens=1, acceptance_rate=0.85).tokens_per_step == pytest.approx(1.85)
    assert SpeculativeConfig(**MTP3).tokens_per_step == 2.7
    plan = ServePlan(input_len=100, output_len=101, speculative=MTP3)
    assert plan.decode_queries == 4 and plan.life_steps == pytest.approx(1 + 100 / 2.7)
    plain = ServePlan(input_len=100, output_len=101)
    assert (plain.decode_queries, plain.tokens_per_step, plain.life_steps) == (1, 1.0, 101)


@pytest.mark.parametrize("fields, words", [
    (dict(method="mtp", draft_tokens=1, acceptance_rate=0.5, acceptance_length=1.5), "at most one of them"),
    (dict(method="mtp", draft_tokens=2, acceptance_length=3.5), "acceptance_length = 3.5 exceeds draft_tokens + 1 = 3"),
    (dict(method="mtp", draft_tokens=1, acceptance_rate=1.0), "acceptance_rate = 1.0"),
    (dict(method="medusa", draft_tokens=1, acceptance_rate=0.5), "'mtp' or 'eagle'"),
    (dict(method="mtp", draft_tokens=17, acceptance_rate=0.5), "draft_tokens = 17"),
])
def test_bad_speculative_fields_are_named(fields, words):
    with pytest.raises(InputError, match="speculative") as err:
        ServePlan.parse(dict(input_len=8, output_len=8, speculative=fields), where="plan")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_mtp_needs_the_models_module():
    plan = dict(input_len=64, output_len=64, speculative=dict(method="mtp", draft_tokens=1, acceptance_rate=0.8))
    with pytest.raises(InputError, match="llama-3.1-8b has no multi-token prediction module.*valid: method eagle"):
        infer("llama-3.1-8b", "dgx-h100", plan)


def test_the_draft_layers():
    ds, llama = load_model("deepseek-v3"), load_model("llama-3.1-8b")
    mtp = draft_model(ds, SpeculativeConfig(**MTP3))
    assert mtp.n_layers == 1 and mtp.moe_layers() == 1 and mtp.mla == ds.mla  # DeepSeek's MTP block is a MoE block
    eagle = draft_model(ds, SpeculativeConfig(method="eagle", draft_tokens=2, acceptance_rate=0.7))
    assert eagle.moe is None and eagle.mla is None and eagle.head_dim == 7168 // 128 and eagle.vocab == ds.vocab
    e3 = draft_model(llama, SpeculativeConfig(method="eagle", draft_tokens=2, acceptance_rate=0.7, draft_vocab=32000))
    assert (e3.n_layers, e3.hidden, e3.n_kv_heads, e3.ffn_hidden, e3.vocab) == (1, 4096, 8, 14336, 32000)


def test_draft_weights_and_kv_cache():
    ds = load_model("deepseek-v3")
    one = ServePlan(input_len=8, output_len=8, speculative=dict(MTP3))  # tp 1, bf16
    # the MTP module's parameters (spec.model.config.mtp_params, DeepSeek-V3 Sec. 2.2) but its three norms (counted
    # there, not by the served block) at 2 bytes: eh_proj, attention, the MoE block and its two norms
    assert draft_weight_bytes(ds, one) == pytest.approx(2 * (ds.mtp_params() - 3 * ds.norm_params()), rel=1e-12)
    assert memory(ds, load_hardware("dgx-h200"), one.model_copy(update={"tp": 8, "ep": 8}),
                  load_serving_stack("trtllm"))["weights"] > 0
    plan8 = ServePlan(**DS_JOB, speculative=MTP3)
    plain8 = ServePlan(**DS_JOB)
    # one more layer of MLA latent per token: (512 + 64) fp8 bytes
    assert kv_bytes_per_token(ds, plan8) - kv_bytes_per_token(ds, plain8) == pytest.approx(576.0)
    assert layer_kv_bytes(ds, plain8) == 576.0
    llama = load_model("llama-3.1-8b")
    eagle = ServePlan(tp=2, input_len=8, output_len=8, speculative=dict(method="eagle", draft_tokens=3,
                                                                         acceptance_rate=0.7, draft_vocab=32000))
    h, f = 4096, 14336
    # q, k, v (8 kv heads of 128), o, the gated MLP and two norms, / tp (weight_bytes splits a layer's all)
    layer = (h * h + 2 * h * 1024 + h * h + 3 * h * f + 2 * h) / 2
    assert draft_weight_bytes(llama, eagle) == pytest.approx(2 * (layer + (3 * h * h + 32000 * h) / 2), rel=1e-12)
    assert kv_bytes_per_token(llama, eagle) == pytest.approx(33 * 2 * 4 * 128 * 2)  # 32 layers and the draft's


def test_verify_step_runs_k_plus_one_tokens_per_sequence():
    system, stack = load_hardware("dgx-h100"), load_serving_stack("trtllm")
    llama = load_model("llama-3.1-8b")
    spec = ServePlan(input_len=2048, output_len=256, speculative=dict(method="eagle", draft_tokens=3,
                                                                       acceptance_rate=0.7))
    plain = spec.model_copy(update={"speculative": None})
    b, ctx = 16, 2048 + 128
    s = step_parts(llama, system, spec, stack, decode=b, context=ctx, prefill_seqs=0, prompt=0, logits=b)
    p4 = step_parts(llama, system, plain, stack, decode=4 * b, context=ctx, prefill_seqs=0, prompt=0, logits=4 * b)
    p1 = step_parts(llama, system, plain, stack, decode=b, context=ctx, prefill_seqs=0, prompt=0, logits=b)
    # the GEMMs, element-wise work and LM head see 4 tokens per sequence, as 4 b sequences would
    assert s["gemm"] == pytest.approx(p4["gemm"]) and s["memory"] == pytest.approx(p4["memory"])
    assert s["lm_head"] == pytest.approx(p4["lm_head"])
    # the attention reads each sequence's cache once: memory-bound at 16 x 2k keys, no dearer than one query
    # (with 4 x the FLOPs) and far below 4 b sequences' reads
    assert s["attention"] >= p1["attention"] and s["attention"] < 0.5 * p4["attention"]
    # the draft: three passes of its one layer (priced as a one-layer model, its own step minus the overhead) and
    # EAGLE-3's fusion GEMM once
    dplan, draft = spec.draft_plan(), draft_model(llama, spec.speculative)
    assert dplan.precision == "bf16" and dplan.speculative is None and dplan.pp == 1
    one = step_parts(draft, system, dplan, stack, decode=b, context=ctx, prefill_seqs=0, prompt=0, logits=b)
    dev = device(draft, system, dplan, stack)
    fuse = float(dev.gemm_priced(b, 4096, 3 * 4096, 1, None)[0])
    assert s["draft"] == pytest.approx(3 * (sum(one.values()) - one["overhead"]) + fuse, rel=1e-9)
    # a prompt builds the draft's KV cache: one pass of the layer over its tokens
    job = (llama, system, spec, stack)
    pre = draft_part(job, draft_job(*job), 0, 0.0, 1, 2048)
    alone = step_parts(draft, system, dplan, stack, decode=0, context=0, prefill_seqs=1, prompt=2048, logits=1)
    assert pre == pytest.approx(sum(alone.values()) - alone["overhead"], rel=1e-12)
    assert token_parts(llama, system, spec, stack, 64.0)["gemm"] == pytest.approx(
        token_parts(llama, system, plain, stack, 64.0)["gemm"])


def test_steady_state_tpot_is_the_step_over_tokens_per_step():
    e = infer("deepseek-v3", "dgx-h200", dict(DS_JOB, speculative=MTP3))
    base = infer("deepseek-v3", "dgx-h200", DS_JOB)
    t = sum(e.decode_step_s.values())
    assert e.tpot_s == pytest.approx(t / 2.7, rel=1e-12)
    n = 1 + 1023 / 2.7  # a request's steps: its prefill and 1023 / 2.7 decode steps
    assert e.output_tokens_per_s == pytest.approx(32 * 1024 / (n * t), rel=1e-12)
    assert e.e2e_s == pytest.approx(e.ttft_s + 1023 * e.tpot_s, rel=1e-12)
    assert "draft" in e.decode_step_s and "draft" not in base.decode_step_s
    # four tokens per sequence through the model and a draft of three passes: a dearer step, far fewer of them
    # (and 2.7 times as many of them carry a prompt: the mean step's prompt share, batching.steady_step)
    assert 1.0 < t / sum(base.decode_step_s.values()) < 1.7 and base.tpot_s / e.tpot_s > 1.6
    assert e.memory_gib["weights"] > base.memory_gib["weights"]
    assert "2.70 tokens a step" in e.notes[-1]
    # the token budget: every sequence runs 4 tokens a step, and a request's prompt spreads over its n steps
    from perfmodel.serve.kv_cache import replica_batch

    stack = load_serving_stack("trtllm").model_copy(update={"max_batch": 10**6})
    plan = ServePlan(input_len=1024, output_len=1024, speculative=MTP3)
    b, why = replica_batch(load_model("llama-3.1-8b"), plan, stack, 1e15)
    assert b == math.floor(stack.max_num_tokens / (4 + 1024 / n)) and "token budget" in why


def test_disaggregated_decode_pool_gains_tokens_per_step():
    plan = dict(DS_JOB, dp=1, prefill_dp=1, prefill_tp=8, speculative=MTP3)
    e = infer("deepseek-v3", "dgx-h200", plan)
    assert e.tpot_s == pytest.approx(sum(e.decode_step_s.values()) / 2.7, rel=1e-12)


def test_simulation_steps_gain_the_stated_tokens():
    ds, system, stack = load_model("deepseek-v3"), load_hardware("dgx-h200"), load_serving_stack("trtllm")
    plan = ServePlan(**dict(DS_JOB, concurrency=1, input_len=512, output_len=9,
                            speculative=dict(method="mtp", draft_tokens=1, acceptance_length=2.0)))
    s = simulate(ds, system, plan, dict(arrival="closed", concurrency=1, requests=1))
    # one request: its prefill step samples token 1, then ceil(8 / 2) = 4 decode steps of one sequence, priced in
    # one stride at its mean context (512 + 1 + 1.5 x 2)
    price = StepPricer(ds, system, plan, stack)
    step = price(1, 513 + 3.0, 0, 0.0, 1)
    assert s.tpot_s.mean == pytest.approx(4 * step / 8, rel=1e-9)
    assert s.steps == 5 + 1  # and the step the overlap scheduler ran ahead for the ended sequence (a ghost)
    # 16 clients, a mean gain of 1.85 (acceptance rate 0.85, one draft): about 1.85 x fewer steps than tokens
    many = simulate(ds, system, plan.model_copy(update={"output_len": 257, "concurrency": None, "speculative":
                                                        SpeculativeConfig(method="mtp", draft_tokens=1,
                                                                          acceptance_rate=0.85)}),
                    dict(arrival="closed", concurrency=16, requests=64))
    assert many.steps < 64 * 257 / 1.85 / 16 * 1.2 and many.tpot_s.mean > 0


def test_cli_speculative_flags_and_refusals(capsys):
    args = ["infer", "--model", "deepseek-v3", "--hardware", "dgx-h200", "--tp", "8", "--ep", "8", "--precision",
            "fp8", "--input-len", "1024", "--output-len", "1024", "--concurrency", "32"]
    assert main(args + ["--speculative", "mtp", "--draft-tokens", "3", "--acceptance-length", "2.7"]) == 0
    out = capsys.readouterr().out
    assert "speculative decoding (mtp): 3 draft token(s) a step" in out and "  draft " in out
    for extra, words in ((["--acceptance-rate", "0.8"], "--acceptance-rate describes a speculative draft"),
                         (["--speculative", "eagle"], "needs its acceptance stated: an EAGLE-3 draft's acceptance "
                                                      "is its checkpoint's"),
                         (["--speculative", "mtp", "--acceptance-rate", "0.8", "--acceptance-length", "1.5"],
                          "takes one acceptance"),
                         (["--speculative", "mtp", "--acceptance-rate", "0.8", "--draft-vocab", "32000"],
                          "an MTP module shares the model's head"),
                         (["--speculative", "mtp", "--draft-tokens", "2", "--acceptance-length", "3.5"],
                          "acceptance_length = 3.5 exceeds draft_tokens + 1 = 3")):
        assert main(args + extra) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and "\n" not in err and "Traceback" not in err


def test_search_and_the_executor_with_a_draft():
    from perfmodel.serve.layout_search import rank

    job = dict(precision="fp8", input_len=1024, output_len=1024, concurrency=32, stack="trtllm", speculative=MTP3)
    ranked, _ = rank("deepseek-v3", "dgx-h200", 8, job)
    assert ranked and all(e.plan.speculative.draft_tokens == 3 for e in ranked)
    plan = ServePlan(input_len=64, output_len=64, concurrency=2,
                     speculative=dict(method="eagle", draft_tokens=2, acceptance_rate=0.6))
    with pytest.raises(InputError, match="the executor decodes one token a step"):
        static_batch("llama-3.1-8b", "dgx-h100", plan)
    assert math.isfinite(infer("llama-3.1-8b", "dgx-h100", plan).tpot_s)


def test_an_mtp_draft_without_an_acceptance_takes_the_models_published_figure(capsys):
    """DeepSeek-V3's report (Sec. 5.4.3): 85-90% of second-token drafts accepted; the low end is assumed, named in
    the breakdown, and a stated figure still wins. A config.json of the architecture (model_type deepseek_v3 with
    an MTP module) carries it; Kimi-K2's (no module) does not."""
    plan = dict(input_len=1024, output_len=1024, concurrency=32, tp=8, ep=8, precision="fp8")
    e = infer("deepseek-v3", "dgx-h200", dict(plan, speculative=dict(method="mtp", draft_tokens=1)))
    s = e.plan.speculative
    assert (s.acceptance_rate, s.tokens_per_step) == (0.85, pytest.approx(1.85)) and "2412.19437" in s.assumed
    stated = infer("deepseek-v3", "dgx-h200", dict(plan, speculative=dict(method="mtp", draft_tokens=1,
                                                                             acceptance_rate=0.85)))
    assert e.tpot_s == pytest.approx(stated.tpot_s) and stated.plan.speculative.assumed == ""
    # three chained drafts keep the rate: 1 + a + a^2 + a^3
    three = infer("deepseek-v3", "dgx-h200", dict(plan, speculative=dict(method="mtp", draft_tokens=3)))
    assert three.plan.speculative.tokens_per_step == pytest.approx(1 + 0.85 + 0.85**2 + 0.85**3)
    r1 = load_model(str(HF / "deepseek-v3" / "config.json"))
    assert r1.mtp_acceptance == load_model("deepseek-v3").mtp_acceptance
    assert load_model(str(HF / "kimi-k2" / "config.json")).mtp_acceptance is None
    args = ["infer", "--model", "deepseek-v3", "--hardware", "dgx-h200", "--tp", "8", "--ep", "8", "--precision",
            "fp8", "--input-len", "1024", "--output-len", "1024", "--concurrency", "32", "--speculative", "mtp"]
    assert main(args) == 0
    assert "1.85 tokens a step (acceptance rate 0.85 assumed, none stated: DeepSeek-V3 technical report" in \
        capsys.readouterr().out


def test_an_mtp_model_without_a_published_figure_needs_one():
    glm = load_model(str(HF / "glm-5" / "config.json"))
    assert glm.mtp_layers and glm.mtp_acceptance is None
    with pytest.raises(InputError, match=r"publishes no acceptance for its MTP module \(models that do: deepseek-v3\); "
                                         r"valid: acceptance_rate"):
        infer(glm, "dgx-b200", dict(input_len=1024, output_len=1024, concurrency=32, tp=8, ep=8, precision="fp8",
                                    speculative=dict(method="mtp", draft_tokens=1)))
