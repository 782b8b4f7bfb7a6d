"""The engines' own settings: ATOM's profile against the values its v0.1.5 code states, the
scheduler settings a plan overrides for one run (max_batch, max_num_tokens, chunked_prefill: serve_settings.
plan_stack), EPLB's redundant experts (weights by hand), and the refusals, from the API and the CLI."""

from __future__ import annotations

import json

import pytest

from perfmodel import load_model
from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.serve import infer
from perfmodel.serve.batching import prompt_chunk
from perfmodel.serve.kv_cache import weight_bytes
from perfmodel.serve.host_time import plan_stack
from perfmodel.spec.serving.settings import expert_slots
from perfmodel.spec.serving.schema import SERVING_STACKS, ServePlan, load_serving_stack, resolve_serve

GIB = 2.0**30


def test_atom_profile_holds_the_values_its_code_states():
    """ROCm/ATOM v0.1.5 (b0071c55): arg_utils.py --max-num-seqs 512, --max-num-batched-tokens 16384,
    --gpu-memory-utilization 0.9 of the whole device (model_runner.get_num_blocks), --enable_chunked_prefill on; the
    scheduler runs prompts alone (prefill-first), deferred output schedules ahead, full decode graphs up to 512."""
    assert "atom" in SERVING_STACKS
    s = load_serving_stack("atom")
    assert (s.max_batch, s.max_num_tokens, s.kv_memory_fraction, s.memory_fraction_of) == (512, 16384, 0.9, "total")
    assert s.chunked_prefill and not s.reserves_whole_sequence and s.vocab_parallel_embedding
    r = s.release()
    assert r.since == "0.1.5" and s.release("0.1.6") is r
    assert (r.prefill_graphs, r.compiled, r.decode_graphs, r.decode_graph_max_batch) == ("none", True, "full", 512)
    assert r.async_scheduling and not r.mixed_prefill
    for field in ("kv_memory_fraction", "memory_fraction_of", "max_batch", "max_num_tokens", "chunked_prefill"):
        assert "arg_utils.py" in s.sources[field] or "model_runner.py" in s.sources[field], field
    with pytest.raises(InputError, match="starts at 0.1.5"):
        s.release("0.1.4")


def test_atom_runs_on_an_mi355x_system(capsys):
    assert main(["infer", "--model", "llama-3.1-8b", "--hardware", "mi355x-8", "--stack", "atom", "--input-len",
                 "1000", "--output-len", "1000", "--precision", "fp8"]) == 0
    out = capsys.readouterr().out
    assert "stack=atom" in out
    assert "atom 0.1.5+ defaults (prefill graphs none up to 0 tokens, decode graphs full" in out
    assert "prompts alone" in out


BASE = dict(tp=8, stack="vllm", input_len=8000, output_len=8000)  # Llama 3.1 8B on a DGX H100: KV binds at 365


def test_plan_stack_overrides_only_what_the_plan_sets():
    s = plan_stack(ServePlan(stack="sglang", max_num_tokens=4096, chunked_prefill=False, input_len=1, output_len=1))
    assert (s.max_batch, s.max_num_tokens, s.chunked_prefill) == (4096, 4096, False)
    assert plan_stack(ServePlan(stack="vllm", input_len=1, output_len=1)) == load_serving_stack("vllm")


def test_a_smaller_max_batch_caps_the_steady_batch():
    free = infer("llama-3.1-8b", "dgx-h100", ServePlan(**BASE))
    assert free.batch == 365 and "bound by KV cache" in free.notes[0]
    e = infer("llama-3.1-8b", "dgx-h100", ServePlan(**BASE, max_batch=64))
    assert e.batch == 64 and "max_batch 64" in e.notes[0]
    # the logits buffer is max_batch x vocab / tp in fp32: 960 sequences x 128256 / 8 x 4 B less
    assert free.memory_gib["activations"] - e.memory_gib["activations"] == pytest.approx(
        960 * 128256 / 8 * 4 / GIB, rel=1e-9)


def test_a_smaller_token_budget_caps_the_steady_batch():
    """B (1 + I / O) <= max_num_tokens: 512 / 2 = 256 sequences."""
    e = infer("llama-3.1-8b", "dgx-h100", ServePlan(**BASE, max_num_tokens=512))
    assert e.batch == 256 and "token budget (512 tokens per step)" in e.notes[0]


def test_chunked_prefill_off_prefills_a_prompt_whole():
    """vLLM mixes prompts with decodes: a whole 8000-token prompt beside B decodes within 8192 tokens leaves
    B <= 192; the prompt's chunk is the whole prompt."""
    plan = ServePlan(**BASE, chunked_prefill=False)
    e = infer("llama-3.1-8b", "dgx-h100", plan)
    assert e.batch == 192 and "token budget" in e.notes[0]
    assert prompt_chunk(plan, plan_stack(plan), 300) == 8000
    on = ServePlan(**BASE)
    assert prompt_chunk(on, plan_stack(on), 300) == 8192 - 300  # chunked: the budget the decodes leave


def test_redundant_experts_add_exactly_their_weights():
    """DeepSeek-V3 fp8 at tp 8, ep 8: 32 redundant experts put 4 more experts on each rank, in each of its 58 MoE
    layers, 3 x 7168 x 2048 weights of 1 B each."""
    m = load_model("deepseek-v3")
    plain = ServePlan(tp=8, ep=8, precision="fp8", input_len=1000, output_len=1000)
    more = plain.model_copy(update={"redundant_experts": 32})
    assert expert_slots(m, more) == 288
    assert weight_bytes(m, more) - weight_bytes(m, plain) == pytest.approx(58 * 4 * 3 * 7168 * 2048, rel=1e-12)


def test_sglang_ep48_over_256_plus_32_experts():
    """SGLang with EPLB's redundant experts: 256 experts do not divide over ep 48, 256 + 32 = 288 do (6 a rank);
    the weights rise by 32 / 48 experts of each MoE layer a GPU."""
    m = load_model("deepseek-v3")
    plan = ServePlan(tp=8, attention_dp=6, ep=48, precision="fp8", stack="sglang", input_len=1000, output_len=1000,
                     concurrency=1024, redundant_experts=32)
    with pytest.raises(InputError, match="ep=48 does not divide the 256 experts"):
        resolve_serve(plan.model_copy(update={"redundant_experts": 0}), m)
    e = infer(m, "dgx-h200", plan)
    assert e.plan.gpus == 48 and e.batch == 1024
    extra = 58 * 32 * 3 * 7168 * 2048 / 48
    assert weight_bytes(m, plan) - weight_bytes(m, plan.model_copy(update={"redundant_experts": 0})) == \
        pytest.approx(extra, rel=1e-12)


@pytest.mark.parametrize("model, kw, message", [
    ("llama-3.1-8b", dict(redundant_experts=8),
     "redundant_experts = 8 for llama-3.1-8b, which has no experts; valid: redundant_experts 0"),
    ("deepseek-v3", dict(tp=8, redundant_experts=8), "redundant_experts = 8 at ep = 1"),
    ("deepseek-v3", dict(tp=8, ep=8, redundant_experts=3),
     "256 + 3 = 259 is not a multiple of ep = 8 (each rank holds (experts + redundant) / ep); valid redundant_experts "
     "up to 64: 0, 8, 16, 24, 32, 40, 48, 56, 64"),
    ("llama-3.1-8b", dict(stack="vllm", input_len=10000, chunked_prefill=False),
     "input_len = 10000 exceeds max_num_tokens = 8192 with chunked_prefill off"),
    ("llama-3.1-8b", dict(stack="atom", input_len=3000, max_num_tokens=2048, chunked_prefill=False),
     "valid: max_num_tokens >= 3000, or chunked_prefill on"),
])
def test_refusals(model, kw, message):
    fields = dict(input_len=1000, output_len=1000) | kw
    with pytest.raises(InputError) as err:
        resolve_serve(ServePlan(**fields), load_model(model))
    assert message in str(err.value)


def test_the_flags_reach_the_plan_and_refuse_in_one_line(capsys):
    base = ["infer", "--model", "deepseek-v3", "--hardware", "dgx-h200", "--tp", "8", "--ep", "8", "--precision",
            "fp8", "--input-len", "1000", "--output-len", "1000", "--format", "json"]
    assert main([*base, "--redundant-experts", "32", "--max-batch", "48", "--max-num-tokens", "4096",
                 "--chunked-prefill", "off", "--stack", "sglang"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["redundant_experts"], plan["max_batch"], plan["max_num_tokens"], plan["chunked_prefill"]) == (
        32, 48, 4096, False)
    assert main([*base, "--redundant-experts", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: redundant_experts = 3")
    for flag, bad in (("--redundant-experts", "-1"), ("--max-batch", "0"), ("--max-num-tokens", "x"),
                      ("--chunked-prefill", "maybe")):
        with pytest.raises(SystemExit) as exit_:
            main([*base, flag, bad])
        assert exit_.value.code == 2 and flag in capsys.readouterr().err


def test_simulation_runs_whole_prompts_with_chunked_prefill_off():
    """--chunked-prefill off in the simulation: a prompt is never split, so with a budget of one prompt a closed
    loop of two clients prefills them in two steps, the second prompt's first token one prefill step later."""
    from perfmodel.serve.simulate import simulate

    base = dict(tp=1, precision="fp8", stack="vllm", input_len=1024, output_len=2, max_num_tokens=1536)
    work = dict(arrival="closed", concurrency=2, requests=2, range_ratio=1.0)
    whole = simulate("llama-3.1-8b", "dgx-h100", {**base, "chunked_prefill": False}, work)
    split = simulate("llama-3.1-8b", "dgx-h100", {**base, "chunked_prefill": True}, work)
    # chunked: 1536 tokens take the first prompt and half the second, so both first tokens come later than the
    # first whole prompt's; off: the first prompt alone in its step, then the second
    assert whole.ttft_s.mean < 0.95 * split.ttft_s.mean  # the first prompt no longer shares its step
    assert whole.ttft_s.p99 == pytest.approx(split.ttft_s.p99, rel=0.03)  # the second ends after both either way


def test_prefill_pool_checks_are_the_decode_replicas():
    """One rule refuses both sides' layouts (spec.serving.prefill_pool.check_pool): the prefill pool's field names, and its
    ep holds the redundant experts' slots as the decode replicas' does (256 + 8 slots: ep 8 divides them, 16 not)."""
    ds = load_model("deepseek-v3")
    base = dict(precision="fp8", input_len=1024, output_len=1024, tp=8, ep=8, redundant_experts=8, prefill_dp=1)
    ok = resolve_serve(ServePlan(**base, prefill_tp=8, prefill_ep=8), ds)
    assert ok.prefill_pool == (8, 1, 8) and ok.prefill_gpus == 8
    with pytest.raises(InputError, match=r"redundant_experts = 8: experts \+ redundant = 256 \+ 8 = 264 is not a "
                                         r"multiple of prefill_ep = 16 .*valid redundant_experts up to 64: 0, 16, 32, 48, 64"):
        resolve_serve(ServePlan(**base, prefill_tp=16, prefill_ep=16), ds)
    with pytest.raises(InputError, match=r"^prefill_tp=3 does not divide num_attention_heads = 128; valid prefill_tp"):
        resolve_serve(ServePlan(**base, prefill_tp=3), ds)
    # the default ep of a pool: the largest dividing both the decode ep and its ranks
    assert resolve_serve(ServePlan(**{**base, "redundant_experts": 0}, prefill_tp=4), ds).prefill_pool == (4, 1, 4)
