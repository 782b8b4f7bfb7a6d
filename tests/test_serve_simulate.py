"""The request-level serving simulation (`serve.simulate`): latencies of small workloads checked step by step
against the step-time model (`serve.step_time.step_parts`) by hand, the scheduler's limits (tokens per step,
sequences per step), and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from perfmodel import load_hardware, load_model
from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.serve import infer
from perfmodel.serve.simulate import simulate
from perfmodel.serve.step_time import step_parts
from perfmodel.spec.serving.schema import ServePlan, load_serving_stack, resolve_serve
from perfmodel.spec.serving.workload import Workload

ROOT = Path(__file__).parents[1]
MODEL, HW = "llama-3.1-8b", "dgx-h100"
I, O = 8, 10  # sizes below the step pricer's grid (exact up to 32), so each step is priced at its own shape


def _step(plan: ServePlan, stack, **kw) -> float:
    model = load_model(MODEL)
    return sum(step_parts(model, load_hardware(HW), resolve_serve(plan, model), load_serving_stack(stack),
                          **kw).values())


def _stack(tmp_path: Path, **fields) -> str:
    """The trtllm profile without its request path (no releases, no layer calls: the engine's mechanics alone, each
    step exactly `step_parts`'s device time) with `fields` changed, as a file."""
    data = yaml.safe_load((ROOT / "hardware_specs" / "serving" / "trtllm.yaml").read_text())
    data.update(releases=[], layer_calls=None, **fields)
    path = tmp_path / f"stack{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_one_client_closed_loop_by_hand(tmp_path):
    """One client, three requests of 8 + 10 tokens, on an engine without a request path (tests/test_serving_host.py
    prices that): each is prefilled alone (its first token), then decoded nine steps at batch 1; the decode steps
    between two events are priced at their mean context, 9 + (9 - 1) / 2 = 13. TTFT = the prefill step, TPOT = the
    decode step, end-to-end = TTFT + 9 TPOT, each next request sent when the last one ends."""
    stack = _stack(tmp_path)
    plan = ServePlan(tp=1, input_len=I, output_len=O, stack=stack)
    sim = simulate(MODEL, HW, plan, Workload(arrival="closed", concurrency=1, requests=3))
    prefill = _step(plan, stack, decode=0, context=0, prefill_seqs=1, prompt=I, logits=1)
    decode = _step(plan, stack, decode=1, context=I + 1 + (O - 2) / 2, prefill_seqs=0, prompt=0, logits=1)
    assert sim.ttft_s.mean == pytest.approx(prefill, rel=1e-12)
    assert sim.ttft_s.p99 == pytest.approx(prefill, rel=1e-12)
    assert sim.tpot_s.median == pytest.approx(decode, rel=1e-12)
    assert sim.e2e_s.mean == pytest.approx(prefill + (O - 1) * decode, rel=1e-12)
    assert sim.requests_per_s == pytest.approx(1 / (prefill + (O - 1) * decode), rel=1e-12)
    assert sim.output_tokens_per_s == pytest.approx(O / (prefill + (O - 1) * decode), rel=1e-12)
    assert sim.steps == 3 * (1 + (O - 1))


def test_burst_queues_behind_the_token_budget(tmp_path):
    """Three one-token requests at once with a token budget of one prompt per step: step k prefills request k, so
    TTFT is k prefill steps (mean 2, p99 close to 3); twice the budget prefills two prompts in the first step."""
    stack = _stack(tmp_path, max_num_tokens=I)
    plan = ServePlan(tp=1, input_len=I, output_len=1, stack=stack)
    sim = simulate(MODEL, HW, plan, Workload(arrival="burst", requests=3))
    one = _step(plan, stack, decode=0, context=0, prefill_seqs=1, prompt=I, logits=1)
    assert sim.ttft_s.mean == pytest.approx(2 * one, rel=1e-12)
    assert sim.ttft_s.median == pytest.approx(2 * one, rel=1e-12)
    assert sim.e2e_s.mean == pytest.approx(sim.ttft_s.mean, rel=1e-12)  # one output token: done at the prefill
    wide = _stack(tmp_path, max_num_tokens=2 * I)
    plan2 = ServePlan(tp=1, input_len=I, output_len=1, stack=wide)
    two = _step(plan2, wide, decode=0, context=0, prefill_seqs=2, prompt=I, logits=2)
    sim2 = simulate(MODEL, HW, plan2, Workload(arrival="burst", requests=3))
    assert sim2.ttft_s.mean == pytest.approx((2 * two + (two + one)) / 3, rel=1e-12)


def test_max_batch_one_serves_requests_in_turn(tmp_path):
    """A stack that runs one sequence at a time: the second of two simultaneous requests waits for the first to
    end (its prefill and O - 1 decode steps), then is prefilled itself."""
    stack = _stack(tmp_path, max_batch=1)
    plan = ServePlan(tp=1, input_len=I, output_len=O, stack=stack)
    sim = simulate(MODEL, HW, plan, Workload(arrival="burst", requests=2))
    prefill = _step(plan, stack, decode=0, context=0, prefill_seqs=1, prompt=I, logits=1)
    decode = _step(plan, stack, decode=1, context=I + 1 + (O - 2) / 2, prefill_seqs=0, prompt=0, logits=1)
    first, second = prefill, prefill + (O - 1) * decode + prefill
    assert sim.ttft_s.mean == pytest.approx((first + second) / 2, rel=1e-12)


def test_poisson_is_seeded_and_light_load_meets_the_idle_prefill(tmp_path):
    """Poisson arrivals: the same seed gives the same run; at 0.1 request/s on a 8B model every request finds the
    replica idle, so each TTFT is one prompt's prefill alone (lengths fixed); with the engine's request path, its
    front end and that prefill."""
    stack = _stack(tmp_path)
    plan = ServePlan(tp=1, input_len=I, output_len=O, stack=stack)
    w = Workload(arrival="poisson", request_rate=0.1, requests=20, seed=3)
    a, b = simulate(MODEL, HW, plan, w), simulate(MODEL, HW, plan, w)
    assert a == b
    prefill = _step(plan, stack, decode=0, context=0, prefill_seqs=1, prompt=I, logits=1)
    assert a.ttft_s.p99 == pytest.approx(prefill, rel=1e-12)
    full = ServePlan(tp=1, input_len=I, output_len=O)  # trtllm's newest release
    e = infer(MODEL, HW, full.model_copy(update={"concurrency": 1}))
    sim = simulate(MODEL, HW, full, w)
    assert sim.ttft_s.p99 == pytest.approx(e.request_s["frontend"] + _step(
        full, "trtllm", decode=0, context=0, prefill_seqs=1, prompt=I, logits=1), rel=1e-12)


def test_bad_workloads_are_refused():
    with pytest.raises(InputError, match="concurrency"):
        Workload(arrival="closed")
    with pytest.raises(InputError, match="request_rate"):
        Workload(arrival="poisson")
    with pytest.raises(InputError, match="range_ratio"):
        Workload(arrival="burst", range_ratio=1.5)
    with pytest.raises(InputError, match="output_len = 1 with a prefill pool"):  # disaggregated: the decode pool idle
        simulate(MODEL, HW, ServePlan(tp=1, dp=1, prefill_dp=1, input_len=I, output_len=1),
                 Workload(arrival="burst", requests=2))
    with pytest.raises(InputError, match="dp = 2"):
        simulate(MODEL, HW, ServePlan(tp=1, dp=2, input_len=I, output_len=O), Workload(concurrency=1, requests=2))


@pytest.mark.parametrize("args, says", [
    (["--request-rate", "3"], "add --simulate"),
    (["--simulate"], "exactly one of the three"),
    (["--simulate", "--concurrency", "4", "--request-rate", "2"], "exactly one of the three"),
    (["--simulate", "--request-rate", "0"], "--request-rate"),
])
def test_cli_flags_refused_with_exit_2(args, says, capsys):
    base = ["infer", "--model", MODEL, "--hardware", HW, "--input-len", "8", "--output-len", "10"]
    try:
        code = main(base + args)
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    assert code == 2
    assert says in capsys.readouterr().err


def test_cli_prints_the_simulated_latencies(capsys):
    out = main(["infer", "--model", MODEL, "--hardware", HW, "--input-len", "8", "--output-len", "10", "--simulate",
                "--concurrency", "1", "--requests", "3"])
    text = capsys.readouterr().out
    assert out in (0, None)
    sim = simulate(MODEL, HW, ServePlan(tp=1, input_len=I, output_len=O), Workload(concurrency=1, requests=3))
    row = next(line for line in text.splitlines() if line.strip().startswith("TTFT ms"))
    assert float(row.split()[2]) == pytest.approx(1e3 * sim.ttft_s.mean, abs=0.06)
