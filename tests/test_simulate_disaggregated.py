"""The request-level simulation of disaggregated serving (`serve.simulate_disaggregated`): one request's TTFT and
TPOT by hand (front end, the prefill step, the KV transfer; the decode step at batch 1), queueing for a prefill
pool that bounds the rate against steady state's `infer_disaggregated`, a prefill pool with attention groups, the
serialised KV links, the prefill pool's new fields refused in one line, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from perfmodel import load_hardware, load_model
from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.serve import infer
from perfmodel.serve.disaggregated import kv_transfer, prefill_plan
from perfmodel.serve.host_time import frontend_s
from perfmodel.serve.simulate import simulate
from perfmodel.serve.step_time import step_parts
from perfmodel.spec.serving.schema import ServePlan, load_serving_stack, resolve_serve
from perfmodel.spec.serving.workload import Workload

ROOT = Path(__file__).parents[1]
MODEL, MOE, HW = "llama-3.1-8b", "qwen3-30b-a3b", "dgx-h100"
I, O = 8, 10  # below the step pricer's grid (exact up to 32): each step priced at its own shape


def _stack(tmp_path: Path) -> str:
    """The trtllm profile without its request path (no releases, no layer calls): each step exactly `step_parts`'s
    device time, no front end, no scheduling ahead."""
    data = yaml.safe_load((ROOT / "hardware_specs" / "serving" / "trtllm.yaml").read_text())
    data.update(releases=[], layer_calls=None)
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _step(model: str, plan: ServePlan, stack: str, **kw) -> float:
    m = load_model(model)
    return sum(step_parts(m, load_hardware(HW), plan, load_serving_stack(stack), **kw).values())


def test_one_request_alone_by_hand(tmp_path):
    """One client, three requests of 8 + 10 tokens, one prefill replica and one decode replica of tp 1, on an engine
    without a request path: TTFT = the prefill step of one prompt + the KV transfer, exactly; TPOT = the decode step
    at batch 1 (nine steps at their mean context 13); each request sent when the last ends. With trtllm's release,
    TTFT adds the front end, and its steps their host time."""
    stack = _stack(tmp_path)
    model = load_model(MODEL)
    plan = resolve_serve(ServePlan(tp=1, prefill_dp=1, input_len=I, output_len=O, stack=stack), model)
    sim = simulate(MODEL, HW, plan, Workload(arrival="closed", concurrency=1, requests=3))
    t_p = _step(MODEL, prefill_plan(plan), stack, decode=0, context=0, prefill_seqs=1, prompt=I, logits=1)
    t_kv = kv_transfer(model, load_hardware(HW), plan)[0]
    t_d = _step(MODEL, plan, stack, decode=1, context=I + 1 + (O - 2) / 2, prefill_seqs=0, prompt=0, logits=1)
    assert t_kv > 0
    assert sim.ttft_s.mean == pytest.approx(t_p + t_kv, rel=1e-12)
    assert sim.ttft_s.p99 == pytest.approx(t_p + t_kv, rel=1e-12)
    assert sim.tpot_s.median == pytest.approx(t_d, rel=1e-12)
    assert sim.e2e_s.mean == pytest.approx(t_p + t_kv + (O - 1) * t_d, rel=1e-12)
    assert sim.requests_per_s == pytest.approx(1 / (t_p + t_kv + (O - 1) * t_d), rel=1e-12)
    assert sim.steps == 3 * (1 + (O - 1))  # a prefill step and nine decode steps each
    assert sim.mean_batch == pytest.approx(1.0)
    full = ServePlan(tp=1, prefill_dp=1, input_len=I, output_len=O)  # trtllm's newest release: its front end
    sim = simulate(MODEL, HW, full, Workload(arrival="closed", concurrency=1, requests=3))
    front = frontend_s(load_hardware(HW), full, load_serving_stack("trtllm"), I)
    t_p = _step(MODEL, prefill_plan(resolve_serve(full, model)), "trtllm", decode=0, context=0, prefill_seqs=1,
                prompt=I, logits=1)
    assert front > 0
    assert sim.ttft_s.mean == pytest.approx(front + t_p + t_kv, rel=1e-12)
    # within 1%: the step the engine scheduled ahead of a request's end (a ghost step) may still run when the next
    # request's cache arrives, which then waits for it
    assert sim.tpot_s.median == pytest.approx(_step(MODEL, resolve_serve(full, model), "trtllm", decode=1,
                                                    context=I + 1 + (O - 2) / 2, prefill_seqs=0, prompt=0, logits=1),
                                              rel=0.01)


def test_a_saturated_prefill_pool_queues_and_runs_at_the_steady_rate():
    """Prompts of 4096 tokens and 64 outputs on one prefill and one decode replica of tp 1: the prefill pool bounds
    the rate (two prompts a step, steady state's note says so). 64 clients keep it busy: the first token waits in
    its queue, far longer than a lone request's, and requests/s comes within 15% of steady state's."""
    plan = ServePlan(tp=1, prefill_dp=1, input_len=4096, output_len=64)
    e = infer(MODEL, HW, plan.model_copy(update={"concurrency": 64}))
    assert "bound by the prefill pool" in e.notes[0]
    alone = simulate(MODEL, HW, plan, Workload(concurrency=1, requests=5))
    busy = simulate(MODEL, HW, plan, Workload(concurrency=64, requests=1280))
    assert alone.ttft_s.mean == pytest.approx(e.request_s["frontend"] + _step(
        MODEL, prefill_plan(resolve_serve(plan, load_model(MODEL))), "trtllm", decode=0, context=0, prefill_seqs=1,
        prompt=4096, logits=1) + e.kv_transfer_s, rel=0.05)  # 4096 tokens priced on the pricer's 5% grid
    assert busy.ttft_s.median > 10 * alone.ttft_s.median
    assert busy.requests_per_s == pytest.approx(e.requests_per_s, rel=0.15)
    assert "prefill replica(s)" in busy.notes[0] and "busy: prefill pool 100%" in busy.notes[-1]


def test_open_loops_poisson_and_burst():
    """Poisson arrivals at 0.1 request/s find the pools idle: every TTFT is a lone request's, and a seed repeats the
    run; a burst of 16 queues for the prefill pool (TTFT grows with the position in the queue)."""
    plan = ServePlan(tp=1, prefill_dp=1, input_len=I, output_len=O)
    w = Workload(arrival="poisson", request_rate=0.1, requests=20, seed=3)
    a, b = simulate(MODEL, HW, plan, w), simulate(MODEL, HW, plan, w)
    assert a == b
    lone = simulate(MODEL, HW, plan, Workload(concurrency=1, requests=1))
    assert a.ttft_s.p99 == pytest.approx(lone.ttft_s.mean, rel=1e-9)
    long = plan.model_copy(update={"input_len": 4096})
    burst = simulate(MODEL, HW, long, Workload(arrival="burst", requests=16))
    first = simulate(MODEL, HW, long, Workload(concurrency=1, requests=1)).ttft_s.mean
    # two prompts a step: the last pair waits for seven steps before its own
    assert burst.ttft_s.p99 > 6 * first and burst.ttft_s.median > 3 * first
    assert burst.requests == 16 and burst.e2e_s.mean > burst.ttft_s.mean


def test_prefill_attention_groups_run_the_busiest_groups_prompts():
    """Qwen3-30B-A3B: a prefill replica of 2 attention groups of tp 1 (experts over prefill_ep 2) and one decode
    replica of tp 2. Two prompts at once share one prefill step, whose busiest group attends one of them (its
    attention is a lone prompt's at tp 1); one receiving link: the second cache waits for the first."""
    model, system = load_model(MOE), load_hardware(HW)
    plan = resolve_serve(ServePlan(tp=2, ep=2, prefill_dp=1, prefill_tp=1, prefill_attention_dp=2, prefill_ep=2,
                                   input_len=I, output_len=O), model)
    assert plan.gpus == 4 and plan.prefill_gpus == 2
    pplan = prefill_plan(plan)
    assert (pplan.tp, pplan.attention_dp, pplan.ep, pplan.dp) == (1, 2, 2, 1)
    sim = simulate(model, system, plan, Workload(arrival="burst", requests=2))
    t_p = _step(MOE, pplan, "trtllm", decode=0, context=0, prefill_seqs=2, prompt=I, logits=2)
    t_kv = kv_transfer(model, system, plan)[0]
    front = frontend_s(system, plan, load_serving_stack("trtllm"), I)
    assert sim.ttft_s.mean == pytest.approx(front + t_p + 1.5 * t_kv, rel=1e-12)
    assert sim.ttft_s.median == pytest.approx(front + t_p + 1.5 * t_kv, rel=1e-12)
    stack = load_serving_stack("trtllm")
    group = step_parts(model, system, pplan, stack, decode=0, context=0, prefill_seqs=2, prompt=I, logits=2)
    lone = step_parts(model, system, pplan.model_copy(update={"attention_dp": 1, "ep": 1}), stack, decode=0,
                      context=0, prefill_seqs=1, prompt=I, logits=1)
    assert group["attention"] == pytest.approx(lone["attention"], rel=1e-12)
    e = infer(model, system, plan)  # steady state: each group's token budget, two groups' prompts a step
    assert "attention_dp=2 ep=2" in e.notes[0]
    assert f"{2 * (stack.max_num_tokens // I)} prompt(s) a step" in e.notes[0]


@pytest.mark.parametrize("model, plan, message", [
    (MODEL, dict(tp=1, prefill_dp=1, prefill_attention_dp=2),
     "prefill_attention_dp=2 for llama-3.1-8b, which has no experts"),
    (MODEL, dict(tp=1, prefill_dp=1, prefill_ep=2), "prefill_ep=2 for llama-3.1-8b, which has no experts; valid "
                                                   "prefill_ep: 1"),
    (MOE, dict(tp=4, prefill_dp=1, prefill_ep=3), "prefill_ep=3 does not divide prefill_tp = 4"),
    (MOE, dict(tp=2, prefill_dp=1, prefill_attention_dp=2, prefill_ep=8),
     "prefill_ep=8 does not divide prefill_tp x prefill_attention_dp = 4"),
    (MOE, dict(tp=2, prefill_dp=1, prefill_attention_dp=3, prefill_ep=3), "prefill_ep=3 does not divide the 128 "
                                                                           "experts"),
    (MOE, dict(tp=2, prefill_ep=2), "prefill_ep = 2 without prefill_dp: no prefill pool"),
    (MOE, dict(tp=2, prefill_attention_dp=2), "prefill_attention_dp = 2 without prefill_dp"),
    (MOE, dict(tp=2, prefill_dp=1, prefill_attention_dp=2, gpus=4),
     "gpus = 4 is not tp x pp x dp = 2 x 1 x 1 + prefill_tp x prefill_attention_dp x prefill_dp = 4 = 6"),
])
def test_bad_prefill_pools_are_one_line(model, plan, message):
    m = load_model(model)
    with pytest.raises(InputError) as err:
        resolve_serve(ServePlan(input_len=I, output_len=O, **plan), m)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert "valid" in str(err.value)


def test_cli_simulates_a_disaggregated_plan(capsys):
    """`infer --simulate` with --prefill-dp prints the simulated statistics as an aggregated plan's; the new flags
    reach the plan (JSON)."""
    base = ["infer", "--model", MODEL, "--hardware", HW, "--input-len", str(I), "--output-len", str(O)]
    assert main(base + ["--prefill-dp", "1", "--simulate", "--concurrency", "1", "--requests", "3"]) in (0, None)
    text = capsys.readouterr().out
    sim = simulate(MODEL, HW, ServePlan(tp=1, prefill_dp=1, input_len=I, output_len=O),
                   Workload(concurrency=1, requests=3))
    row = next(line for line in text.splitlines() if line.strip().startswith("TTFT ms"))
    assert float(row.split()[2]) == pytest.approx(1e3 * sim.ttft_s.mean, abs=0.06)
    assert "TPOT ms" in text and "note: disaggregated" in text
    moe = ["infer", "--model", MOE, "--hardware", HW, "--input-len", str(I), "--output-len", str(O), "--tp", "2",
           "--ep", "2", "--prefill-dp", "1", "--prefill-tp", "1", "--prefill-attention-dp", "2", "--prefill-ep", "2",
           "--format", "json"]
    assert main(moe) in (0, None)
    p = json.loads(capsys.readouterr().out)["plan"]
    assert (p["prefill_attention_dp"], p["prefill_ep"], p["gpus"]) == (2, 2, 4)
    assert main(moe[:-6] + ["--prefill-attention-dp", "2", "--prefill-ep", "3"]) == 2
    assert "prefill_ep=3 does not divide prefill_tp x prefill_attention_dp = 2" in capsys.readouterr().err
