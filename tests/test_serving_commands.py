"""perfmodel infer --server-cmd / --bench-cmd / --bench-file (perfmodel.ingest.serving): server and benchmark
command lines read as data, every flag's fate, values checked by hand, the fixtures copied from public recipes
(tests/fixtures/serving_commands/SOURCES.md), and the refusals in one line with exit 2."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.ingest.serving import (
    read_bench,
    read_bench_file,
    read_inference_perf,
    read_server,
)
from perfmodel.ingest.serving.words import command_words, is_flag

FIXTURES = Path(__file__).parent / "fixtures" / "serving_commands"


def fates(read) -> dict[str, str]:
    return {k.key: k.fate for k in read.keys}


# ------------------------------------------------------------------------------------------------ servers
def test_vllm_serve_by_hand():
    r = read_server("vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4 --max-num-seqs 128 "
                    "--max-num-batched-tokens 2048 --gpu-memory-utilization 0.9")
    assert r.fields == {"stack": "vllm", "model": "llama-3.1-70b", "tp": 4, "max_batch": 128, "max_num_tokens": 2048,
                        "mem_fraction": 0.9, "kv_dtype": "bf16"}
    assert r.set_by["tp"] == "-tp = 4" and fates(r)["--kv-cache-dtype"] == "default"


def test_the_shell_and_argparse_spellings():
    """Continuations, --flag=value, env prefixes, a JSON value in quotes, switches and --no- negations,
    underscores for dashes, the api_server module."""
    r = read_server('VLLM_USE_V1=1 python -m vllm.entrypoints.openai.api_server \\\n  --model meta-llama/Llama-3.1-8B '
                    '\\\n  --tensor_parallel_size=2 --pipeline-parallel-size 2 --no-enable-chunked-prefill '
                    '--speculative-config \'{"method":"eagle3","num_speculative_tokens":3}\' --enable-prefix-caching '
                    '--kv-cache-dtype fp8_e4m3 --dtype half --port 8000 --frobnicate 7')
    assert r.fields == {"stack": "vllm", "model": "llama-3.1-8b", "tp": 2, "pp": 2, "precision": "fp16",
                        "kv_dtype": "fp8", "chunked_prefill": "off", "speculative": "eagle", "draft_tokens": 3}
    f = {k.key: k for k in r.keys}
    assert f["VLLM_USE_V1"].fate == "not priced" and f["--port"].fate == "not priced"
    assert "FlexibleArgumentParser" in f["--tensor_parallel_size"].why
    assert f["--frobnicate"].why == "not a flag this reader knows" and f["--frobnicate"].value == "7"
    assert f["--enable-prefix-caching"].fate == "not priced" and "prefix-cache switch" in f["--enable-prefix-caching"].why
    twice = read_server("vllm serve m -tp 2 --max-num-seqs 8 -tp 4 &")  # argparse keeps the last; & backgrounds it
    assert twice.fields["tp"] == 4 and "argparse keeps the last" in twice.keys[2].why


def test_vllm_data_parallel_of_dense_and_moe_models():
    """A dense model's --data-parallel-size is replicas; a MoE model's is attention data parallelism with the
    experts over dp x tp GPUs (vLLM's data_parallel_deployment)."""
    dense = read_server("vllm serve meta-llama/Llama-3.1-8B-Instruct -dp 4 -tp 2")
    assert (dense.fields["tp"], dense.fields["dp"]) == (2, 4) and "attention_dp" not in dense.fields
    moe = read_server("vllm serve Qwen/Qwen3-30B-A3B -dp 4 -tp 2 --enable-expert-parallel")
    assert (moe.fields["tp"], moe.fields["attention_dp"], moe.fields["dp"], moe.fields["ep"]) == (2, 4, 1, 8)
    tp_ep = read_server("vllm serve Qwen/Qwen3-30B-A3B -tp 4 --enable-expert-parallel")
    assert tp_ep.fields["ep"] == 4 and "attention_dp" not in tp_ep.fields


def test_sglang_dp_attention_and_settings():
    """--tp 16 --dp 2 --enable-dp-attention: 2 groups of 8 (SGLang's DeepSeek docs); --chunked-prefill-size -1:
    chunked prefill off; EAGLE on a model with MTP layers is its MTP module."""
    r = read_server("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 16 --dp 2 "
                    "--enable-dp-attention --ep-size 16 --mem-fraction-static 0.8 --max-running-requests 256 "
                    "--chunked-prefill-size -1 --speculative-algorithm EAGLE --speculative-num-draft-tokens 4 "
                    "--moe-a2a-backend deepep --enable-two-batch-overlap --kv-cache-dtype fp8_e4m3")
    assert r.fields == {"stack": "sglang", "model": "deepseek-v3", "tp": 8, "attention_dp": 2, "dp": 1, "ep": 16,
                        "precision": "fp8", "kv_dtype": "fp8", "mem_fraction": 0.8, "max_batch": 256,
                        "chunked_prefill": "off", "speculative": "mtp", "draft_tokens": 3, "moe_a2a": "deepep_ll",
                        "two_batch_overlap": True}
    plain = read_server("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 2 --dp 4 "
                        "--chunked-prefill-size 4096")
    assert (plain.fields["tp"], plain.fields["dp"], plain.fields["max_num_tokens"]) == (2, 4, 4096)


def test_checkpoint_names_and_quantization():
    r = read_server("vllm serve nvidia/Llama-3.3-70B-Instruct-FP4 -tp 1")
    assert (r.fields["model"], r.fields["precision"]) == ("llama-3.3-70b", "fp4")
    q = read_server("vllm serve meta-llama/Llama-3.1-8B-Instruct --quantization fp8 --dtype bfloat16")
    assert q.fields["precision"] == "fp8" and fates(q)["--dtype"] == "not priced"
    offload = read_server("vllm serve meta-llama/Llama-3.1-8B-Instruct --kv-offloading-size 64")
    assert offload.fields["kv_offload_gb"] == 64.0  # GiB of host memory (ServePlan.kv_offload_gb)
    unknown = read_server("vllm serve baidu/ERNIE-4.5-21B-A3B-PT")
    assert "model" not in unknown.fields and "give --model" in unknown.keys[1].why


# ---------------------------------------------------------------------------------------------- benchmarks
def test_vllm_bench_by_hand():
    """--burstiness 4: gamma gaps of shape 4, CV 1 / sqrt(4) = 0.5 (vllm/benchmarks/serve.py get_request)."""
    r = read_bench("vllm bench serve --model m --request-rate 8 --burstiness 4 --num-prompts 500 --seed 3 "
                   "--random-input-len 1000 --random-output-len 200")
    assert r.fields == {"simulate": True, "request_rate": 8.0, "arrival": "gamma", "burstiness_cv": 0.5,
                        "requests": 500, "seed": 3, "input_len": 1000, "output_len": 200, "range_ratio": 0.0,
                        "length_spread": "around"}
    assert fates(r)["--random-range-ratio"] == "default"
    constant = read_bench("vllm bench serve --request-rate 2 --burstiness inf")
    assert constant.fields["arrival"] == "constant" and "burstiness_cv" not in constant.fields
    closed = read_bench("vllm bench serve --max-concurrency 64 --random-input-len 128")
    assert (closed.fields["concurrency"], closed.fields["requests"], closed.fields["output_len"]) == (64, 1000, 128)
    burst = read_bench("vllm bench serve")
    assert math.isinf(burst.fields["request_rate"]) and burst.fields["input_len"] == 1024


def test_vllm_range_ratio_around_the_length():
    """vLLM's r = 0.5 on 1024 draws in [512, 1536] (around the length, Workload.length_spread around); a fixed prefix
    of 100 tokens before every prompt is one group of 100 shared tokens."""
    r = read_bench("vllm bench serve --request-rate 4 --random-input-len 1024 --random-output-len 128 "
                   "--random-range-ratio 0.5 --random-prefix-len 100")
    assert (r.fields["input_len"], r.fields["output_len"], r.fields["range_ratio"]) == (1124, 128, 0.5)
    assert (r.fields["length_spread"], r.fields["prefix_groups"], r.fields["prefix_len"]) == ("around", 1, 100)
    assert "[512, 1536]" in {k.key: k for k in r.keys}["--random-range-ratio"].why
    sglang = read_bench("python -m sglang.bench_serving --dataset-name random --random-range-ratio 0.5")
    assert sglang.fields["range_ratio"] == 0.5 and "length_spread" not in sglang.fields  # below, [L r, L]


def test_sglang_bench_datasets():
    """generated-shared-prefix's defaults: 64 groups x 16 prompts of a 2048-token system prompt and a 128-token
    question, 256 out (bench_serving.py); --num-prompts does not apply to it."""
    g = read_bench("python3 -m sglang.bench_serving --backend sglang --dataset-name generated-shared-prefix "
                   "--num-prompts 50 --request-rate 4")
    assert g.fields == {"simulate": True, "request_rate": 4.0, "arrival": "poisson", "requests": 1024,
                        "prefix_groups": 64, "prefix_len": 2048, "input_len": 2176, "output_len": 256}
    assert fates(g)["--num-prompts"] == "not priced"
    # the groups given and --num-prompts left at its default (1000): 16 x 32 requests, no contradiction
    own = read_bench("python -m sglang.bench_serving --dataset-name generated-shared-prefix --gsp-num-groups 16 "
                     "--gsp-prompts-per-group 32 --request-rate 8")
    assert own.fields["requests"] == 512 and "--num-prompts" not in fates(own)
    zero = read_bench("python -m sglang.bench_serving --dataset-name random --random-input-len 100 "
                      "--random-output-len 50")
    assert zero.fields["range_ratio"] == pytest.approx(1 / 100)  # 0: lengths from 1 token up
    share = read_bench("python -m sglang.bench_serving --num-prompts 10")  # sharegpt: lengths not read
    assert "input_len" not in share.fields and "sharegpt" in share.notes[0]


def test_inference_perf_configs():
    r = read_inference_perf({"load": {"type": "poisson", "stages": [{"rate": 2.5, "duration": 600},
                                                                    {"rate": 6, "duration": 600}]},
                             "data": {"type": "shared_prefix", "shared_prefix": {
                                 "num_groups": 4, "num_prompts_per_group": 8, "system_prompt_len": 1000,
                                 "question_len": 200, "output_len": 300}}})
    assert r.fields == {"simulate": True, "arrival": "poisson", "stages": "2.5@600;6@600", "prefix_groups": 4,
                        "prefix_len": 1000, "input_len": 1200, "output_len": 300}
    c = read_inference_perf({"load": {"type": "concurrent", "stages": [{"num_requests": 100,
                                                                        "concurrency_level": 8}]},
                             "data": {"type": "random", "input_distribution": {"mean": 512},
                                      "output_distribution": {"mean": 64, "max": 128}}})
    assert (c.fields["concurrency"], c.fields["requests"], c.fields["input_len"], c.fields["output_len"]) == (
        8, 100, 512, 64)
    assert fates(c)["data.output_distribution.max"] == "not priced"


# ------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("text, words", [
    ("tgi-launcher --model-id x", ["tgi-launcher", "valid: vllm serve MODEL"]),
    ("vllm serve m --speculative-config '{\"method\": eagle}'", ["--speculative-config", "not JSON",
                                                                 "valid: a JSON object"]),
    ("vllm serve m -tp four", ["-tp", "'four'", "a whole number >= 1"]),
    ("vllm serve m --gpu-memory-utilization 1.5", ["--gpu-memory-utilization", "'1.5'", "<= 1"]),
    ("vllm serve m --kv-cache-dtype fp4_e2m1", ["--kv-cache-dtype", "fp4_e2m1", "valid: auto"]),
    ("vllm serve nvidia/Llama-3.3-70B-Instruct-FP4 --quantization fp8", ["contradicts itself", "precision",
                                                                          "--quantization = fp8"]),
    ("python -m sglang.launch_server --model-path m --tp 8 --dp 3 --enable-dp-attention", ["--enable-dp-attention",
                                                                                          "dp size dividing 8"]),
    ("vllm serve a\nvllm serve b", ["2 commands", "valid: one command"]),
    ("vllm serve 'unclosed", ["cannot split", "quotes closed"]),
])
def test_bad_servers_are_refused_in_one_line(text, words):
    with pytest.raises(InputError) as err:
        read_server(text)
    assert "\n" not in str(err.value) and all(w in str(err.value) for w in words), str(err.value)


@pytest.mark.parametrize("text, words", [
    ("python bench.py --x 1", ["not a benchmark", "valid: vllm bench serve"]),
    ("vllm bench serve --request-rate 0", ["--request-rate", "'0'", "> 0"]),
    ("vllm bench serve --random-range-ratio 1", ["--random-range-ratio", "<= 0.999999"]),
    ("vllm bench serve --num-prompts 2000000", ["--num-prompts", "1,000,000"]),
])
def test_bad_benchmarks_are_refused_in_one_line(text, words):
    with pytest.raises(InputError) as err:
        read_bench(text)
    assert "\n" not in str(err.value) and all(w in str(err.value) for w in words), str(err.value)


def test_bad_inference_perf_configs(tmp_path):
    with pytest.raises(InputError, match="load.sweep"):
        read_inference_perf({"load": {"sweep": {"type": "linear"}}})
    with pytest.raises(InputError, match=r"load.stages\[0\].rate"):
        read_inference_perf({"load": {"stages": [{"rate": -1, "duration": 5}]}})
    bad = tmp_path / "c.yml"
    bad.write_text("load: [1, 2\n")
    with pytest.raises(InputError, match="c.yml"):
        read_bench_file(bad)


# -------------------------------------------------------------------------------------------------- the CLI
BASE = ["infer", "--hardware", "dgx-h100"]
SERVER = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 1 --max-num-seqs 32 --gpu-memory-utilization 0.9"
BENCH = "vllm bench serve --random-input-len 256 --random-output-len 32 --max-concurrency 4 --num-prompts 12"


def test_cli_fills_the_flags_from_the_commands(capsys):
    assert main([*BASE, "--server-cmd", SERVER, "--bench-cmd", BENCH, "--format", "json", "--explain"]) == 0
    out, err = capsys.readouterr()
    import json

    data = json.loads(out)
    plan, work = data["estimate"]["plan"], data["simulation"]["workload"]
    assert (plan["tp"], plan["max_batch"], plan["mem_fraction"], plan["stack"], plan["input_len"],
            plan["output_len"], plan["concurrency"]) == (1, 32, 0.9, "vllm", 256, 32, 4)
    assert (work["arrival"], work["concurrency"], work["requests"]) == ("closed", 4, 12)
    assert "--max-num-seqs = 32 -> max_batch = 32" in err and "--num-prompts = 12 -> requests = 12" in err


def test_cli_agreeing_flags_pass_and_contradictions_exit_2(capsys):
    assert main([*BASE, "--server-cmd", SERVER, "--tp", "1", "--input-len", "64", "--output-len", "8"]) == 0
    capsys.readouterr()
    assert main([*BASE, "--server-cmd", SERVER, "--tp", "2", "--input-len", "64", "--output-len", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tp 2 contradicts the server command's -tp = 1" in err and "Traceback" not in err
    assert main([*BASE, "--bench-cmd", BENCH, "--model", "llama-3.1-8b", "--request-rate", "3"]) == 2
    assert "--request-rate 3 contradicts the benchmark command's --max-concurrency = 4" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["--input-len", "8", "--output-len", "8"], ["--model is needed"]),
    (["--server-cmd", "vllm serve baidu/ERNIE-4.5-21B-A3B-PT", "--input-len", "8", "--output-len", "8"],
     ["--model is needed", "ERNIE-4.5-21B-A3B-PT is no preset"]),
    (["--server-cmd", SERVER], ["--input-len is needed"]),
    (["--server-cmd", "vllm serve m --speculative-config '{'", "--input-len", "8", "--output-len", "8"],
     ["--speculative-config", "not JSON"]),
    (["--model", "llama-3.1-8b", "--input-len", "8", "--output-len", "8", "--explain"], ["--explain", "valid:"]),
])
def test_cli_refusals_exit_2_in_one_line(capsys, argv, words):
    assert main([*BASE, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and all(w in err for w in words), err


def test_cli_bench_file_implies_simulate(capsys):
    cfg = FIXTURES / "inference-perf_sglang_shared_prefix.yml"
    assert main([*BASE, "--model", "llama-3.1-8b", "--bench-file", str(cfg), "--stack", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "Simulated requests: 90" in out and "1 req/s x 30 s, 2 req/s x 30 s" in out and "prefix cache" in out


# --------------------------------------------------------------------------------------------- the fixtures
def read_fixture(path: Path):
    if path.suffix == ".yml":
        return read_bench_file(path)
    return (read_bench if "bench" in path.name else read_server)(path.read_text())


FILES = sorted(p for p in FIXTURES.iterdir() if p.suffix in (".sh", ".yml"))


def test_there_are_enough_fixtures_and_each_has_a_source():
    sources = (FIXTURES / "SOURCES.md").read_text()
    assert len(FILES) >= 10 and all(f"`{p.name}`" in sources for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_key_of_every_fixture_has_a_fate(path):
    r = read_fixture(path)
    keys = {k.key for k in r.keys}
    if path.suffix == ".yml":
        import yaml

        def leaves(d, pre=""):
            for k, v in d.items():
                yield from leaves(v, f"{pre}{k}.") if isinstance(v, dict) and v else [f"{pre}{k}"]

        wanted = set(leaves(yaml.safe_load(path.read_text())))
    else:
        words, env = command_words(path.read_text(), "fixture")
        wanted = {w.split("=", 1)[0] for w in words if is_flag(w) and w != "-m"} | set(env)  # -m: python's
        wanted = {w if "." not in w or w.startswith("--speculative-config.") is False else "--speculative-config.*"
                  for w in wanted}
    assert wanted <= keys, sorted(wanted - keys)
    assert all(k.fate in ("mapped", "not priced", "default") and (k.fate != "not priced" or k.why) for k in r.keys)


HAND = {  # fixture -> the fields read, checked against the command by hand
    "vllm_llama3.3-70b_bench.sh": {"concurrency": 512, "requests": 2560, "input_len": 1024, "output_len": 1024,
                                   "range_ratio": 0.0, "length_spread": "around"},
    "vllm_deepseek-r1_dp8_ep.sh": {"model": "deepseek-v3", "attention_dp": 8, "dp": 1, "ep": 8, "precision": "fp8",
                                   "kv_dtype": "bf16", "stack": "vllm"},
    "vllm_deepseek-r1_bench.sh": {"request_rate": 10000.0, "arrival": "poisson", "requests": 16, "input_len": 8000,
                                  "output_len": 1000},
    "vllm_qwen3-coder-480b_fp8_dp8_ep.sh": {"model": "qwen3-coder-480b-a35b", "attention_dp": 8, "ep": 8,
                                            "precision": "fp8"},
    "vllm_qwen3-coder-480b_bench.sh": {"concurrency": 10, "requests": 100, "input_len": 2048, "output_len": 1024},
    "vllm_gpt-oss-120b_mi300x.sh": {"model": "gpt-oss-120b", "tp": 8, "precision": "w4a16", "mem_fraction": 0.95},
    "vllm_ernie4.5-300b_mtp.sh": {"tp": 8, "precision": "fp8", "mem_fraction": 0.95, "speculative": "mtp",
                                  "draft_tokens": 1},
    "vllm_glm5.1-fp8_mtp.sh": {"model": "glm-5", "tp": 8, "precision": "fp8", "speculative": "mtp",
                               "draft_tokens": 3},
    "sglang_deepseek-v3_mtp.sh": {"model": "deepseek-v3", "tp": 8, "speculative": "mtp", "draft_tokens": 3,
                                  "stack": "sglang"},
    "sglang_deepseek-v3_tool_calls.sh": {"model": "deepseek-v3", "tp": 8, "mem_fraction": 0.9},
    "sglang_deepseek-r1-awq_a100.sh": {"model": "deepseek-v3", "tp": 8, "precision": "w4a16", "kv_dtype": "fp16"},
    "sglang_bench_serving_random.sh": {"requests": 3000, "input_len": 1024, "output_len": 1024, "range_ratio": 0.5},
    "sglang_bench_serving_random_rate128.sh": {"request_rate": 128.0, "arrival": "poisson", "input_len": 128,
                                               "output_len": 128, "range_ratio": 1.0},
    "inference-perf_sglang_shared_prefix.yml": {"arrival": "constant", "stages": "1@30;2@30", "prefix_groups": 10,
                                                "prefix_len": 100, "input_len": 150, "output_len": 50},
    "inference-perf_sglang_random.yml": {"arrival": "constant", "stages": "1@30", "input_len": 50, "output_len": 50},
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_fixture_values_by_hand(name):
    fields = read_fixture(FIXTURES / name).fields
    assert {k: fields.get(k) for k in HAND[name]} == HAND[name]
