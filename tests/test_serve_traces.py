"""Serving simulations driven by request traces (Mooncake, Azure, BurstGPT), warm-ups left out as vllm bench serve
leaves them, and lengths spread around the nominal ones as vllm bench serve draws them: the readers on the real
samples of tests/fixtures/traces/requests (SOURCES.md), the simulation on small hand-made traces whose answer is
computed here by hand."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.serve.host_time import frontend_s, plan_stack
from perfmodel.serve.prefix_cache import BlockPrefixCache, PrefixCache
from perfmodel.serve.replica_engine import draw_lengths, open_arrivals
from perfmodel.serve.simulate import StepPricer, simulate, simulate_requests
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.serving.schema import ServePlan, resolve_serve
from perfmodel.spec.serving.traces import TraceSource, read_trace
from perfmodel.spec.serving.workload import Workload

SAMPLES = Path(__file__).parent / "fixtures" / "traces" / "requests"
MOONCAKE = SAMPLES / "mooncake_conversation_trace.jsonl"
AZURE_CODE, AZURE_CONV = SAMPLES / "AzureLLMInferenceTrace_code.csv", SAMPLES / "AzureLLMInferenceTrace_conv.csv"
BURSTGPT = SAMPLES / "BurstGPT_1.csv"
PLAN = {"tp": 1, "input_len": 1000, "output_len": 8, "stack": "vllm", "stack_version": "0.15.1",
        "precision": "bf16"}
# vLLM 0.12 schedules each step after the last (no asynchronous scheduling, so no step run ahead for a sequence
# that has ended): where a warm-up ends, the engine is idle
SYNC = {**PLAN, "stack_version": "0.12.0"}
MODEL, HW = "llama-3.1-8b", "dgx-h100"


# ------------------------------------------------------------------------------------------ the real samples
def test_mooncake_sample_read_as_published():
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    t = read_trace(str(MOONCAKE))
    assert t.format == "mooncake" and len(t) == 300 and t.rows == 300 and not t.dropped
    # timestamps in ms: 0 first, 102000 last (SOURCES.md)
    assert t.arrive[0] == 0.0 and t.arrive[-1] == pytest.approx(102.0)
    assert t.input_len.mean() == pytest.approx(sum(r["input_length"] for r in rows) / 300)
    assert t.input_len.mean() == pytest.approx(14233.24, abs=0.01)
    assert t.output_len.mean() == pytest.approx(376.93, abs=0.01)
    assert t.block_tokens == 512
    assert [c[0] for c in t.blocks] == [0] * 300  # every prompt starts with the same system block
    assert t.blocks[0] == tuple(range(14))  # 6758 tokens: 13 full blocks of 512 and a 102-token one
    assert all(len(c) == -(-n // 512) for c, n in zip(t.blocks, t.input_len))


@pytest.mark.parametrize("path, start, end, span, mean_in, mean_out", [
    (AZURE_CODE, "2023-11-16 18:17:03.9799600", "2023-11-16 18:20:40.8181990", 216.838239, 2091.76, 23.75),
    (AZURE_CONV, "2023-11-16 18:15:46.6805900", "2023-11-16 18:17:10.7096920", 84.029102, 900.00, 256.23)])
def test_azure_samples_read_as_published(path, start, end, span, mean_in, mean_out):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))  # CRLF line ends, as the dataset publishes them
    assert (rows[0]["TIMESTAMP"], rows[-1]["TIMESTAMP"]) == (start, end)
    t = read_trace(TraceSource(path=str(path)))
    assert t.format == "azure" and len(t) == 300 and not t.dropped
    assert t.arrive[0] == 0.0 and t.arrive[-1] == pytest.approx(span, abs=1e-6)
    assert t.input_len.mean() == pytest.approx(sum(int(r["ContextTokens"]) for r in rows) / 300)
    assert (t.input_len.mean(), t.output_len.mean()) == (pytest.approx(mean_in, abs=0.01),
                                                         pytest.approx(mean_out, abs=0.01))
    assert t.blocks is None


def test_burstgpt_sample_drops_its_failures():
    with open(BURSTGPT, newline="") as f:
        rows = list(csv.DictReader(f))
    ok = [r for r in rows if int(r["Response tokens"]) > 0]
    assert len(rows) == 300 and len(ok) == 289  # eleven rows of 0, 0, 0: failed requests
    t = read_trace(str(BURSTGPT))
    assert t.format == "burstgpt" and len(t) == 289 and t.rows == 300
    assert t.dropped == {"failed (0 response tokens)": 11}
    # seconds: the first row at 5 s, the last at 35541 s, taken from the first
    assert t.arrive[0] == 0.0 and t.arrive[-1] == pytest.approx(35541 - 5)
    assert t.input_len.mean() == pytest.approx(sum(int(r["Request tokens"]) for r in ok) / 289)
    assert (t.input_len.mean(), t.output_len.mean()) == (pytest.approx(589.53, abs=0.01),
                                                         pytest.approx(285.41, abs=0.01))


def test_speed_and_window():
    t = read_trace(TraceSource(path=str(BURSTGPT), speed=10, start=1, limit=3))
    # rows 2-4 kept: 45, 118, 185 s -> 0, 7.3, 14.0 s at ten times the speed
    assert t.arrive.tolist() == pytest.approx([0.0, 7.3, 14.0])
    assert t.input_len.tolist() == [1087, 417, 1360] and t.output_len.tolist() == [230, 276, 647]


def test_the_2024_week_long_azure_timestamps(tmp_path):
    p = tmp_path / "AzureLLMInferenceTrace_conv_1week.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,4808,10\n"
                 "2024-05-10 00:00:00.017335+00:00,3180,8\n")
    t = read_trace(str(p))
    assert t.format == "azure" and t.arrive.tolist() == pytest.approx([0.0, 0.007405])


def test_burstgpt_release_3_columns_are_read_by_name(tmp_path):
    """BurstGPT_3.csv puts Session ID and Elapsed time after Timestamp (README.md, Data Schema): read by name."""
    p = tmp_path / "BurstGPT_3.csv"
    p.write_text("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "10,a1,1.5,ChatGPT,100,50,150,Conversation log\n12,,2.0,GPT-4,200,0,200,API log\n"
                 "20,,3.1,ChatGPT,300,40,340,API log\n")
    t = read_trace(str(p))
    assert t.format == "burstgpt" and t.input_len.tolist() == [100, 300] and t.arrive.tolist() == [0.0, 10.0]
    assert t.dropped == {"failed (0 response tokens)": 1}


@pytest.mark.parametrize("text, name, words", [
    ("Timestamp,Model,Request tokens,Total tokens\n5,ChatGPT,472,490\n", "bad.csv",
     ["line 1", "no known trace's columns"]),
    ("Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,472,18\n9,ChatGPT,abc,3\n", "bad.csv",
     ["line 3", "Request tokens = 'abc'", "whole number of tokens"]),
    ("Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,472,18\n4,ChatGPT,47,3\n", "bad.csv",
     ["line 3", "Timestamp = '4'", "line 2", "sort the trace"]),
    ("Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,-2,18\n", "bad.csv",
     ["line 2", "Request tokens = '-2'"]),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n", "bad.csv", ["line 2", "TIMESTAMP = 'yesterday'"]),
    ("Timestamp,Model,Request tokens,Response tokens\n", "bad.csv", ["no request"]),
    ("", "bad.csv", ["empty file"]),
    ("Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,4,1\n6,ChatGPT,4,1,7,8\n", "bad.csv",
     ["not a CSV table", "line 3"]),
    ('{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 5, "input_length": 10}\n',
     "bad.jsonl", ["line 2", "no output_length"]),
    ('{"timestamp": 0, "input_length": 10, "output_length": 2}\nnot json\n', "bad.jsonl", ["line 2", "no JSON"]),
    ('{"timestamp": 0, "input_length": 10.5, "output_length": 2}\n', "bad.jsonl", ["line 1", "input_length = 10.5"]),
    ('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": ["a"]}\n', "bad.jsonl",
     ["line 1", "hash_ids"]),
    ('{"timestamp": 0, "input_length": 0, "output_length": 0}\n', "bad.jsonl", ["no request to send"])])
def test_bad_files_are_one_line_naming_file_line_field_value(tmp_path, text, name, words):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(InputError) as err:
        read_trace(str(p))
    msg = str(err.value)
    assert "\n" not in msg and str(p) in msg and "valid" in msg
    for w in words:
        assert w in msg, msg


def test_a_named_format_needs_its_columns():
    with pytest.raises(InputError, match="no column 'TIMESTAMP'"):
        read_trace(TraceSource(path=str(BURSTGPT), format="azure"))
    with pytest.raises(InputError, match="no such file"):
        read_trace("/nonexistent/trace.jsonl")


# ------------------------------------------------------------------------------------------ the prefix cache
def test_block_hits_are_the_leading_blocks_held_in_engine_blocks():
    chains = [(0, 1, 2), (0, 1, 7), (0, 5), (9,)]
    prompts = [1100, 1500, 600, 700]
    c = BlockPrefixCache(chains, prompts, size=512, block=16)
    assert c.admit(0, 1100) == 0
    c.progress(0, 600)  # block 0 computed, block 1 not yet
    assert list(c.held) == [0] and c.held_tokens == 512
    c.progress(0, 1100)  # the rest: block 1 and the last 76 tokens (block 2)
    assert dict(c.held) == {0: 512, 1: 512, 2: 76}
    assert c.admit(1, 1500) == 1024  # blocks 0 and 1, then 7 is not held
    assert c.admit(0, 1100) == 1088  # all 1100 matched, at most 1099: 68 blocks of 16
    assert c.admit(2, 600) == 512  # block 0 only
    assert c.admit(3, 700) == 0
    # use order now 1, 2, 0 (the last admit touched block 0): 1100 held > 600 evicts block 1, then > 500 block 2
    c.fit(600)
    assert list(c.held) == [2, 0] and c.held_tokens == 588
    c.fit(512)
    assert list(c.held) == [0] and c.held_tokens == 512
    assert c.hit_rate == pytest.approx((1024 + 1088 + 512) / (1100 + 1500 + 1100 + 600 + 700))


def test_the_group_cache_progress_is_its_computed():
    c = PrefixCache(shared=100, block=16)
    c.progress(0, 99)
    assert not c.held
    c.progress(0, 100)
    assert dict(c.held) == {0: 96}


# ------------------------------------------------------------------------------------------ the simulation
def _write(tmp_path, rows) -> str:
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def _pricing(plan: dict):
    model, system = load_model(MODEL), load_hardware(HW)
    p = resolve_serve(ServePlan(**plan), model)
    stack = plan_stack(p)
    return system, p, stack, StepPricer(model, system, p, stack)


def test_spaced_requests_each_run_alone(tmp_path):
    """Three requests 100 s apart, none sharing a block: each reaches an idle engine after its front end and
    prefills alone in one step (1000 or 2000 tokens, under vLLM's 8192-token budget): TTFT = front end + that
    step, at the full clock (the GPU idle between them, their power averaged with the idle seconds is under the
    limit: `power_mix.mix_clock`)."""
    path = _write(tmp_path, [{"timestamp": 0, "input_length": 1000, "output_length": 4, "hash_ids": [1, 2]},
                             {"timestamp": 100_000, "input_length": 2000, "output_length": 4,
                              "hash_ids": [3, 4, 5, 6]},
                             {"timestamp": 200_000, "input_length": 1000, "output_length": 4, "hash_ids": [7, 8]}])
    run = simulate_requests(MODEL, HW, PLAN, {"arrival": "trace", "trace": {"path": path}})
    system, p, stack, price = _pricing(PLAN)
    ttft = [frontend_s(system, p, stack, float(n)) + price(0, 0.0, 1, float(n), 1, 1.0) for n in (1000, 2000, 1000)]
    assert run.arrive.tolist() == [0.0, 100.0, 200.0]
    assert (run.first - run.arrive).tolist() == pytest.approx(ttft, rel=1e-12)
    assert run.input_len.tolist() == [1000, 2000, 1000] and run.output_len.tolist() == [4, 4, 4]
    assert run.prefix_hit == 0.0
    sim = simulate(MODEL, HW, PLAN, {"arrival": "trace", "trace": {"path": path, "speed": 2.0}})
    assert sim.requests == 3 and sim.ttft_s.mean == pytest.approx(np.mean(ttft), rel=1e-12)


def test_warm_ups_run_first_and_leave_the_first_prompt_cached(tmp_path):
    """vllm bench serve's warm-ups: copies of the first request, ended before the measured run. Here two warm-ups of
    a 1100-token prompt (blocks 0, 1 and a 76-token 2) leave it cached: the measured copy of it hits all its tokens
    but the last (1099 -> 68 blocks of 16 = 1088) and prefills 12; the second request (blocks 0, 1, 7) hits 1024
    either way. Each request alone (vLLM 0.12: the engine idle once the warm-ups end): TTFT = front end + the
    prefill of its tokens not cached, at the full clock (the engine idle between them)."""
    path = _write(tmp_path, [{"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [0, 1, 2]},
                             {"timestamp": 100_000, "input_length": 1500, "output_length": 4,
                              "hash_ids": [0, 1, 7]}])
    system, p, stack, price = _pricing(SYNC)

    def ttft(n: int, cached: int) -> float:
        return frontend_s(system, p, stack, float(n)) + price(0, 0.0, 1, float(n - cached), 1, 1.0)

    cold = simulate_requests(MODEL, HW, SYNC, {"arrival": "trace", "trace": {"path": path}})
    warm = simulate_requests(MODEL, HW, SYNC, {"arrival": "trace", "trace": {"path": path}, "warmup_requests": 2})
    assert (cold.first - cold.arrive).tolist() == pytest.approx([ttft(1100, 0), ttft(1500, 1024)], rel=1e-12)
    assert (warm.first - warm.arrive).tolist() == pytest.approx([ttft(1100, 1088), ttft(1500, 1024)], rel=1e-12)
    assert cold.prefix_hit == pytest.approx(1024 / 2600) and warm.prefix_hit == pytest.approx((1088 + 1024) / 2600)
    # the measured run: two requests, sent from the end of the warm-ups on, its steps alone
    assert len(warm.arrive) == 2 and warm.arrive[0] > 0 and warm.arrive[1] - warm.arrive[0] == pytest.approx(100.0)
    assert warm.steps == cold.steps
    assert any("2 warm-up request(s)" in n for n in warm.notes)
    sim = simulate(MODEL, HW, SYNC, {"arrival": "trace", "trace": {"path": path}, "warmup_requests": 2})
    assert sim.requests == 2
    assert sim.ttft_s.mean == pytest.approx((ttft(1100, 1088) + ttft(1500, 1024)) / 2, rel=1e-12)


def test_warm_ups_of_a_closed_loop_leave_the_statistics_alone():
    """One client, no prefix: the warm-ups end before the first measured request, which then meets the idle engine
    each request of the run without them met: the same latencies, steps and count, every send shifted."""
    work = {"arrival": "closed", "concurrency": 1, "requests": 3}
    cold = simulate_requests(MODEL, HW, SYNC, work)
    warm = simulate_requests(MODEL, HW, SYNC, {**work, "warmup_requests": 2})
    shift = warm.arrive[0]
    assert shift > 0 and (warm.arrive - shift).tolist() == pytest.approx(cold.arrive.tolist(), abs=1e-9)
    assert (warm.done - warm.arrive).tolist() == pytest.approx((cold.done - cold.arrive).tolist(), rel=1e-9)
    assert warm.steps == cold.steps and len(warm.done) == 3
    s = simulate(MODEL, HW, SYNC, {**work, "warmup_requests": 2})
    assert s.requests == 3 and s.e2e_s.mean == pytest.approx(float(np.mean(cold.done - cold.arrive)), rel=1e-9)


def test_requests_over_max_model_len_are_left_out(tmp_path):
    path = _write(tmp_path, [{"timestamp": 0, "input_length": 900, "output_length": 100},
                             {"timestamp": 1000, "input_length": 1000, "output_length": 100},
                             {"timestamp": 2000, "input_length": 500, "output_length": 24}])
    sim = simulate("gpt2-124m", HW, {"tp": 1, "input_len": 512, "output_len": 16, "stack": "vllm"},
                   {"arrival": "trace", "trace": {"path": path}})
    assert sim.requests == 2  # 1000 + 100 > gpt2's 1024 positions
    assert any("1 of the trace's requests over max_model_len = 1,024" in n for n in sim.notes)


def test_trace_workloads_refuse_a_second_load():
    with pytest.raises(InputError, match="request_rate with arrival = trace"):
        Workload(arrival="trace", trace={"path": str(BURSTGPT)}, request_rate=2.0)
    with pytest.raises(InputError, match="valid: arrival = trace"):
        Workload(arrival="poisson", request_rate=1.0, trace={"path": str(BURSTGPT)})
    with pytest.raises(InputError, match="aggregated deployment"):
        simulate(MODEL, HW, {**PLAN, "prefill_dp": 1}, {"arrival": "trace", "trace": {"path": str(BURSTGPT)}})
    w = Workload(arrival="trace", trace={"path": str(AZURE_CONV), "limit": 5})
    # 18:15:46.6805900, 18:15:50.9951690, 18:15:51.2224670, 18:15:51.3910170, 18:15:52.5732450
    assert open_arrivals(w, np.random.default_rng(0)).tolist() == pytest.approx([0.0, 4.314579, 4.541877, 4.710427,
                                                                                 5.892655])


# ------------------------------------------------------------------------------------------ lengths as vLLM draws
def test_around_lengths_span_both_sides_of_the_nominal():
    x = draw_lengths(1000, 200_000, 0.2, np.random.default_rng(3), "around")
    assert x.min() == 800 and x.max() == 1200  # floor(1000 x 0.8), ceil(1000 x 1.2), both ends drawn
    assert x.mean() == pytest.approx(1000, abs=1.0)  # 401 values, uniform: mean 1000, sd 116 / sqrt(n) = 0.26
    y = draw_lengths(3, 100_000, 0.5, np.random.default_rng(3), "around")
    assert set(y.tolist()) == {1, 2, 3, 4, 5}  # [floor(1.5), ceil(4.5)]
    assert draw_lengths(1000, 5, 0.0, np.random.default_rng(3), "around").tolist() == [1000] * 5
    below = draw_lengths(1000, 200_000, 0.2, np.random.default_rng(3))
    assert below.min() == 200 and below.max() == 1000 and below.mean() == pytest.approx(600, abs=2.0)


def test_spread_validation():
    with pytest.raises(InputError, match="length_spread = around"):
        Workload(arrival="burst", length_spread="around", range_ratio=1.0)
    with pytest.raises(InputError, match="length_spread = below"):
        Workload(arrival="burst", range_ratio=0.0)
    assert Workload(arrival="burst", length_spread="around", range_ratio=0.0).range_ratio == 0.0
    with pytest.raises(InputError, match="length_spread"):
        Workload(arrival="burst", length_spread="sideways")


def test_simulated_around_lengths_reach_above_the_nominal():
    run = simulate_requests(MODEL, HW, PLAN, {"arrival": "burst", "requests": 40, "length_spread": "around",
                                              "range_ratio": 0.5})
    assert run.input_len.min() >= 500 and run.input_len.max() <= 1500 and run.input_len.max() > 1000
    assert run.output_len.min() >= 4 and run.output_len.max() <= 12


# ------------------------------------------------------------------------------------------ the CLI
def test_cli_replays_a_trace_at_its_mean_lengths(capsys):
    rc = main(["infer", "--model", MODEL, "--hardware", HW, "--stack", "vllm", "--simulate", "--trace",
               str(AZURE_CONV), "--trace-requests", "20", "--warmup-requests", "1"])
    out = capsys.readouterr().out
    with open(AZURE_CONV, newline="") as f:
        rows = list(csv.DictReader(f))[:20]
    # the means of the 20 requests sent, rounded half up
    mean_in = int(sum(int(r["ContextTokens"]) for r in rows) / 20 + 0.5)
    mean_out = int(sum(int(r["GeneratedTokens"]) for r in rows) / 20 + 0.5)
    assert rc == 0
    assert f"requests of {mean_in} prompt + {mean_out} output tokens" in out
    assert "Simulated requests: 20, trace" in out and "after 1 warm-up request(s)" in out
    assert "the trace's own lengths" in out


@pytest.mark.parametrize("flags, words", [(["--trace-speed", "2"], "add --trace"),
                                          (["--trace", str(BURSTGPT)], "add --simulate"),
                                          (["--simulate", "--trace", str(BURSTGPT), "--request-rate", "2"],
                                           "one load"),
                                          (["--simulate", "--request-rate", "2", "--length-spread", "around",
                                            "--range-ratio", "1"], "0 <= range_ratio < 1")])
def test_cli_refusals(capsys, flags, words):
    rc = main(["infer", "--model", MODEL, "--hardware", HW, "--input-len", "100", "--output-len", "10", *flags])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and len(err.strip().splitlines()) == 1
