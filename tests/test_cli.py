"""The `perfmodel` command line, run as a subprocess: outputs, and one-line errors with exit code 2.

Every command line used here is declared at module level and started on a small thread pool when the module
is imported, so the interpreter start-ups (about 0.5 s each) overlap with each other and with other tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import perfmodel as pm
from perfmodel.spec.stack.profile import load_stack

FIXTURES = Path(__file__).parent / "fixtures"
SYSTEMS = ["dgx-a100-40gb", "dgx-a100-80gb", "dgx-b200", "dgx-b300", "dgx-h100", "dgx-h200", "gb200-nvl72",
           "gb300-nvl72", "gh200", "l40s-8", "mi300x-8", "mi325x-8", "mi350x-8", "mi355x-8", "tpu-v4", "tpu-v5e",
           "tpu-v5p", "tpu-v6e", "tpu-v7"]


def _run(argv: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfmodel", *argv], capture_output=True, text=True, timeout=120)


def predict_argv(*extra: str, **flags) -> tuple[str, ...]:
    base = dict(model="llama-3-8b", hardware="dgx-h100", gpus="64", tp="8", pp="1", micro_batch="1",
                global_batch="64", seq_len="8192")
    base.update(flags)
    args = ["predict"]
    for k, v in base.items():
        if v is not None:
            args += [f"--{k.replace('_', '-')}", str(v)]
    return tuple(args) + extra


# ---------------------------------------------------------------------------------------------------------
# Command lines
# ---------------------------------------------------------------------------------------------------------
PREDICT_EXAMPLE = ("predict",)
PREDICT_JSON = predict_argv("--format", "json", "--zero", "1", "--recompute", "selective", "--sequence-parallel")
PREDICT_HF = predict_argv("--format", "json", model=str(FIXTURES / "hf" / "llama-3-8b" / "config.json"))
PREDICT_TABLE = predict_argv()
NOFIT_JSON = predict_argv("--format", "json", model="llama-3.1-405b", gpus="8", tp="8", global_batch="8")
NOFIT_TABLE = predict_argv(model="llama-3.1-405b", gpus="8", tp="8", global_batch="8")
HW_LIST = ("hardware", "list")
HW_SHOW = ("hardware", "show", "dgx-h100")
HW_SCHEMA = ("hardware", "schema")
MODELS_LIST = ("models", "list")
MODELS_SHOW = ("models", "show", "llama-3-8b")

# (id, argv, substrings the one stderr line must contain)
BAD = [
    ("unknown-model", predict_argv(model="llama-3-8"), ["llama-3-8", "did you mean", "llama-3-8b"]),
    ("unknown-hardware", predict_argv(hardware="dgx-h10"), ["dgx-h10", "did you mean", "dgx-h100"]),
    ("models-show-unknown", ("models", "show", "mistral-8b"), ["mistral-8b", "did you mean"]),
    ("hardware-show-unknown", ("hardware", "show", "tpu-v6"), ["tpu-v6"]),
    ("malformed-yaml", predict_argv(hardware=str(FIXTURES / "malformed_system.yaml")),
     ["malformed_system.yaml", "malformed YAML"]),
    ("malformed-json", predict_argv(model=str(FIXTURES / "malformed_config.json")),
     ["malformed_config.json", "malformed JSON"]),
    ("tp-heads", predict_argv(gpus="24", tp="3"),
     ["tp=3 does not divide num_attention_heads = 32", "valid tp: 1, 2, 4, 8"]),
    ("tp-kv-heads", predict_argv(gpus="16", tp="16", global_batch="1"),
     ["tp=16", "num_key_value_heads = 8", "valid tp"]),
    ("pp-layers", predict_argv(model="gpt2-124m", gpus="16", tp="1", pp="16", seq_len="1024", global_batch="16"),
     ["pp=16", "n_layers = 12"]),
    ("layout-product", predict_argv("--dp", "4"), ["tp*pp*cp*dp = 8*1*1*4 = 32 != gpus = 64"]),
    ("gpus-not-divisible", predict_argv(gpus="12"), ["gpus = 12", "tp*pp*cp"]),
    ("global-batch", predict_argv(global_batch="12"), ["global_batch = 12", "dp*micro_batch = 8*1 = 8"]),
    ("cp-seq-len", predict_argv("--cp", "3", gpus="24", global_batch="1"), ["cp=3", "seq_len = 8192"]),
    ("fp8-a100", predict_argv("--precision", "fp8", hardware="dgx-a100-80gb"), ["precision=fp8", "A100"]),
    ("fp4-a100", predict_argv("--precision", "fp4", hardware="dgx-a100-80gb"), ["precision=fp4", "A100"]),
    ("fp4-h100", predict_argv("--precision", "fp4"), ["precision=fp4", "H100"]),
    ("seq-len-learned-positions", predict_argv(model="gpt2-124m", tp="4", gpus="8", seq_len="2048", global_batch="2"),
     ["seq_len = 2048", "1024"]),
    ("gpus-zero", predict_argv(gpus="0"), ["--gpus", "0"]),
    ("tp-negative", predict_argv(tp="-1"), ["--tp", "-1"]),
    ("global-batch-negative", predict_argv(global_batch="-8"), ["--global-batch", "-8"]),
    ("seq-len-zero", predict_argv(seq_len="0"), ["--seq-len", "0"]),
    ("micro-batch-zero", predict_argv(micro_batch="0"), ["--micro-batch", "0"]),
    ("gpus-not-int", predict_argv(gpus="abc"), ["--gpus", "abc"]),
    ("tp-float", predict_argv(tp="2.5"), ["--tp", "2.5"]),
    ("seq-len-8k", predict_argv(seq_len="8k"), ["--seq-len", "8k"]),
    ("bad-choice", predict_argv("--recompute", "partial"), ["--recompute", "partial"]),
    ("missing-flag", predict_argv(seq_len=None), ["--seq-len"]),
    ("vpp-without-pp", predict_argv("--vpp", "2"), ["vpp=2"]),
]

ALL = [PREDICT_EXAMPLE, PREDICT_JSON, PREDICT_HF, PREDICT_TABLE, NOFIT_JSON, NOFIT_TABLE, HW_LIST, HW_SHOW,
       HW_SCHEMA, MODELS_LIST, MODELS_SHOW] + [argv for _, argv, _ in BAD]
_POOL = ThreadPoolExecutor(max_workers=2)
_FUTURES = {argv: _POOL.submit(_run, argv) for argv in ALL}


def cli(argv: tuple[str, ...]) -> subprocess.CompletedProcess:
    fut = _FUTURES.get(argv)
    if fut is not None:
        try:
            return fut.result()
        except OSError:  # a start-up that failed under load (e.g. fork limits) is retried in the foreground
            pass
    return _run(argv)


# ---------------------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------------------
def test_predict_with_no_args_runs_the_example():
    r = cli(PREDICT_EXAMPLE)
    assert r.returncode == 0, r.stderr
    assert "step time" in r.stdout
    assert "llama-3-70b" in r.stdout and "512 x dgx-h100" in r.stdout
    assert r.stderr == ""


def test_the_example_lives_in_one_place():
    """`perfmodel predict` with no flags, with the example's flags written out (cli.plan_flags.EXAMPLE) and the
    Python API on spec.example all give one estimate; forecast has no default and names what it needs."""
    from perfmodel.cli.plan_flags import EXAMPLE
    from perfmodel.spec import example

    api = pm.estimate(example.MODEL, example.HARDWARE, example.example_plan())
    bare, spelled = (json.loads(cli(argv).stdout) for argv in (("predict", "--format", "json"),
                                                                  ("predict", *EXAMPLE, "--format", "json")))
    assert bare["step_time_s"] == spelled["step_time_s"] == api.step_time_s
    assert bare["plan"] == spelled["plan"] == api.plan.model_dump()
    assert EXAMPLE[:4] == ["--model", example.MODEL, "--hardware", example.HARDWARE]
    r = cli(("forecast", "--tokens", "15T"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == ("error: forecast needs --model, --hardware, --gpus, --tp, --pp, --micro-batch, "
                                "--global-batch, --seq-len (or --plan FILE)")


def test_predict_json():
    r = cli(PREDICT_JSON)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for k in ("step_time_s", "tokens_per_s", "model_tflops_per_gpu", "mfu", "fits_in_memory", "memory_bytes",
              "time_s", "plan"):
        assert k in d, k
    mb = d["memory_bytes"]
    assert mb["allocated"] == pytest.approx(sum(mb[k] for k in ("weights", "gradients", "optimizer", "activations",
                                                                 "transient")))
    assert mb["reserved"] == pytest.approx(mb["allocated"] + mb["fragmentation"])
    assert mb["device"] == pytest.approx(mb["reserved"] + mb["runtime"])
    assert mb["runtime"] == 3 * 2**30  # dgx-h100 memory_overhead_gib
    # megatron-core's allocator slack on CUDA (hardware_specs/stacks/megatron-core.yaml)
    assert mb["fragmentation"] == pytest.approx(0.055 * mb["allocated"])
    assert d["plan"]["dp"] == 8  # inferred: 64 / (8*1*1)
    assert d["plan"]["schedule"] == "1f1b"
    assert d["plan"]["zero"] == 1 and d["plan"]["recompute"] == "selective"
    assert d["fits_in_memory"] is True and d["memory_free_bytes"] > 0
    # budget = (80 GiB - 3 GiB runtime) x (1 - 0 headroom) / (1 + the band's upper end): megatron-core's profile
    high = load_stack("megatron-core").memory_band["reserved"].high
    assert d["memory_budget_bytes"] == pytest.approx(77 * 2**30 / (1 + high))
    assert d["memory_band_high_bytes"] == pytest.approx(mb["reserved"] * (1 + high))
    assert d["memory_free_bytes"] == pytest.approx(d["memory_budget_bytes"] - mb["reserved"])
    assert d["memory_rank"] == "0-63" and len(d["memory_ranks"]) == 1  # tp 8 x dp 8 ranks on the one stage
    assert d["tokens_per_s"] == pytest.approx(64 * 8192 / d["step_time_s"], rel=1e-9)
    assert d["time_s"]["total"] == pytest.approx(d["step_time_s"])
    assert 0 < d["mfu"] < 1
    assert d["model_tflops_per_gpu"] == pytest.approx(d["mfu"] * 989.4, rel=1e-9)  # H100 dense bf16 peak
    assert d["params"] == 8_030_261_248


def test_predict_with_hf_config_path():
    r = cli(PREDICT_HF)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["params"] == 8_030_261_248 and d["model"] == "llama-3-8b"


def test_predict_table_shows_breakdowns():
    r = cli(PREDICT_TABLE)
    assert r.returncode == 0, r.stderr
    for s in ("step time", "tokens/s", "MFU / HFU", "fits in memory", "Memory per device", "tp=8 pp=1 dp=8"):
        assert s in r.stdout, s


def test_predict_that_does_not_fit_exits_0_with_shortfall():
    r = cli(NOFIT_JSON)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["fits_in_memory"] is False
    assert d["memory_free_bytes"] < 0
    high = load_stack("megatron-core").memory_band["reserved"].high
    assert d["memory_free_bytes"] == pytest.approx(77 * 2**30 / (1 + high) - d["memory_bytes"]["reserved"])
    # 405.9B params at 16 B/param over 8 devices alone is ~760 GiB per device.
    assert d["memory_bytes"]["allocated"] > 16 * 405e9 / 8
    assert any("does not fit" in n for n in d["notes"])
    t = cli(NOFIT_TABLE)
    assert t.returncode == 0 and "NO: ranks 0-7 (single stage) are short by" in t.stdout


def test_hardware_list():
    r = cli(HW_LIST)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == len(SYSTEMS)
    assert [ln.split()[0] for ln in lines] == SYSTEMS


def test_hardware_show():
    r = cli(HW_SHOW)
    assert r.returncode == 0, r.stderr
    for s in ("dgx-h100", "H100-SXM5-80GB", "nvlink", "infiniband", "989.4", "sources"):
        assert s in r.stdout, s


def test_hardware_schema_is_json():
    r = cli(HW_SCHEMA)
    assert r.returncode == 0, r.stderr
    schema = json.loads(r.stdout)
    assert schema["type"] == "object"
    assert {"name", "accelerator", "tiers", "efficiency"} <= set(schema["properties"])


def test_models_list_and_show():
    r = cli(MODELS_LIST)
    assert r.returncode == 0, r.stderr
    names = [ln.split()[0] for ln in r.stdout.splitlines() if ln.strip()]
    for n in ("gpt3-175b", "llama-3-8b", "llama-3.1-405b", "mistral-7b", "gpt2-124m"):
        assert n in names
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("llama-3-8b "))
    assert "8.03B" in row and "32/8" in row
    r = cli(MODELS_SHOW)
    assert r.returncode == 0, r.stderr
    assert "8,030,261,248" in r.stdout and "32 / 8 / 128" in r.stdout and "swiglu" in r.stdout


# ---------------------------------------------------------------------------------------------------------
# Bad input: exit 2, exactly one line on stderr naming the field and value, no traceback
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,needles", [(a, n) for _, a, n in BAD], ids=[i for i, _, _ in BAD])
def test_bad_input_is_one_line_exit_2(argv, needles):
    r = cli(argv)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    lines = r.stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0], r.stderr
    assert r.stdout == "", r.stdout
    for n in needles:
        assert n in lines[0], (n, lines[0])
