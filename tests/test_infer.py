"""Serving (perfmodel.serve, perfmodel infer): KV-cache and weight bytes by hand, decode attention at the HBM rate,
the steady-state identities of continuous batching, the refusals, the CLI's JSON contract and the layout search."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from perfmodel import load_hardware, load_model
from perfmodel.errors import InputError
from perfmodel.serve import infer
from perfmodel.serve.kv_cache import kv_bytes_per_token, memory, weight_bytes
from perfmodel.serve.layout_search import fewest_gpus, rank
from perfmodel.serve.step_time import decode_attention_s, device
from perfmodel.spec.serving.schema import ServePlan, load_serving_stack

GIB = 2.0**30
ROOT_KERNELS = __import__("pathlib").Path(__file__).parents[1] / "hardware_specs" / "kernels"


def test_kv_bytes_per_token_by_hand():
    """Llama 3.1 70B: 80 layers x (K and V) x 8 kv heads x 128; tp 8 keeps one head each, tp 16 too (replicated)."""
    m = load_model("llama-3.1-70b")
    assert kv_bytes_per_token(m, ServePlan(tp=1, input_len=1, output_len=1)) == 80 * 2 * 8 * 128 * 2
    assert kv_bytes_per_token(m, ServePlan(tp=8, precision="fp8", input_len=1, output_len=1)) == 80 * 2 * 128 * 1
    assert kv_bytes_per_token(m, ServePlan(tp=16, input_len=1, output_len=1)) == 80 * 2 * 128 * 2
    assert kv_bytes_per_token(m, ServePlan(tp=8, pp=4, input_len=1, output_len=1)) == 20 * 2 * 128 * 2
    # DeepSeek-V3 (MLA): the 512-wide latent and the 64-wide shared rotary key per layer, on every tp rank
    ds = load_model("deepseek-v3")
    assert kv_bytes_per_token(ds, ServePlan(tp=8, input_len=1, output_len=1)) == 61 * (512 + 64) * 2


def test_weight_bytes_by_hand():
    m = load_model("llama-3.1-8b")
    assert weight_bytes(m, ServePlan(input_len=1, output_len=1)) == pytest.approx(2 * m.n_params(), rel=1e-9)
    # fp8 GEMMs: the layers at 1 B, embedding and LM head stay bf16; tp 2 halves both
    fp8 = weight_bytes(m, ServePlan(tp=2, precision="fp8", input_len=1, output_len=1))
    ends = m.embedding_params() + m.head_params()
    assert fp8 == pytest.approx((m.layer_params() * 1 + ends * 2) / 2, rel=1e-6)


def _without_decode_table(system):
    acc = system.accelerator
    tables = {k: v for k, v in acc.kernel_tables.items() if k != "decode_attention"}
    return system.model_copy(update={"accelerator": acc.model_copy(update={"kernel_tables": tables})})


def test_decode_attention_reads_the_kv_cache_at_the_hbm_rate():
    """256 sequences at 2048 keys on Llama 3.1 8B, bf16 KV, one H100 without its measured decode table: 256 x 2048
    x (2 x 8 x 128 x 2 B) per layer, over the spec's HBM bandwidth x its memory-bandwidth efficiency (memory-bound:
    4 x 2048 x 4096 FLOPs per sequence is far under the compute rate)."""
    m, sysm = load_model("llama-3.1-8b"), _without_decode_table(load_hardware("dgx-h100"))
    plan = ServePlan(input_len=1024, output_len=1024, gpus=1)
    dev = device(m, sysm, plan, load_serving_stack("trtllm"))
    nbytes = 256 * 2048 * 2 * 8 * 128 * 2
    bw = sysm.accelerator.hbm_bandwidth * sysm.efficiency.memory_bandwidth
    assert decode_attention_s(dev, plan, 256, 2048) == pytest.approx(nbytes / bw, rel=1e-9)


def test_steady_state_identities():
    e = infer("llama-3.1-70b", "dgx-h200", ServePlan(tp=4, dp=2, precision="fp8", input_len=1000, output_len=500))
    p = e.plan
    assert p.gpus == 8
    assert e.output_tokens_per_s == pytest.approx(e.batch / e.tpot_s, rel=1e-12)  # batch counts both replicas
    assert e.requests_per_s == pytest.approx(e.output_tokens_per_s / 500, rel=1e-12)
    assert e.total_tokens_per_s == pytest.approx(e.output_tokens_per_s * 1500 / 500, rel=1e-12)
    assert e.e2e_s == pytest.approx(e.ttft_s + 499 * e.tpot_s, rel=1e-12)
    assert e.tpot_s == pytest.approx(sum(e.decode_step_s.values()), rel=1e-12)
    # max throughput: as many whole sequences as the KV cache holds (trtllm reserves input + output), or max_batch
    m, sysm, stack = load_model("llama-3.1-70b"), load_hardware("dgx-h200"), load_serving_stack("trtllm")
    kv = memory(m, sysm, p, stack)["kv_cache"]
    fit = math.floor(kv / kv_bytes_per_token(m, p) / 1500)
    budget = math.floor(stack.max_num_tokens / (1 + 1000 / 500))  # B decode + B x I / O prompt tokens per step
    assert e.batch == 2 * min(fit, stack.max_batch, budget)
    # a fixed concurrency below that: exactly it, and no faster per sequence than the max-throughput batch
    c = infer("llama-3.1-70b", "dgx-h200", ServePlan(tp=4, dp=2, precision="fp8", input_len=1000, output_len=500,
                                                     concurrency=64))
    assert c.batch == 64 and c.tpot_s < e.tpot_s and c.output_tokens_per_s < e.output_tokens_per_s


def test_the_same_kernels_as_training():
    """A layer's GEMMs at one row cost at least their weight bytes over the HBM rate (the roofline's memory side:
    decode is memory-bound), and doubling the rows barely moves them; at 8192 rows at least their FLOPs over the
    part's dense fp8 peak (the compute side)."""
    m, sysm = load_model("llama-3.1-8b"), load_hardware("dgx-h100")
    plan = ServePlan(input_len=8192, output_len=16, gpus=1, precision="fp8")
    dev = device(m, sysm, plan, load_serving_stack("trtllm"))
    from perfmodel.serve.step_time import layer_gemm_s

    one, two, big = layer_gemm_s(dev, plan, 1), layer_gemm_s(dev, plan, 2), layer_gemm_s(dev, plan, 8192)
    weights = m.matmul_params_per_layer() * 1.0  # fp8: 1 B each
    assert one >= weights / dev.mem_bw * 0.999 and two < 1.2 * one
    assert big >= 2 * 8192 * m.matmul_params_per_layer() / sysm.accelerator.peak_flops("fp8")


@pytest.mark.parametrize("kw, message", [
    (dict(tp=3), "tp=3 does not divide num_attention_heads = 64; valid tp: 1, 2, 4, 8, 16, 32, 64"),
    (dict(tp=8, ep=2), "ep=2 for llama-3.1-70b, which has no experts; valid ep: 1"),
    (dict(tp=8, gpus=16), "gpus = 16 is not tp x pp x dp = 8 x 1 x 1 = 8"),
    (dict(tp=8, input_len=130000, output_len=2000), "input_len + output_len = 130000 + 2000 exceeds llama-3.1-70b's "
                                                   "context (max_seq_len = 131072)"),
    (dict(tp=1, precision="bf16"), "llama-3.1-70b does not fit on dgx-h100 with tp=1 pp=1"),
])
def test_refusals(kw, message):
    job = dict(input_len=1000, output_len=1000) | kw
    with pytest.raises(InputError) as err:
        infer("llama-3.1-70b", "dgx-h100", ServePlan(**job))
    assert message in str(err.value)


def test_moe_ep_must_divide_experts_and_tp():
    with pytest.raises(InputError, match=r"ep=3 does not divide tp = 8 .*valid ep: 1, 2, 4, 8"):
        infer("mixtral-8x7b", "dgx-h100", ServePlan(tp=8, ep=3, input_len=128, output_len=128))
    e = infer("mixtral-8x7b", "dgx-h100", ServePlan(tp=8, ep=8, precision="fp8", input_len=128, output_len=128))
    assert e.plan.etp == 1 and e.output_tokens_per_s > 0


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "perfmodel", "infer", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_json_contract():
    run = _cli("--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "1", "--tp", "1", "--pp", "1",
               "--ep", "1", "--dp", "1", "--precision", "fp8", "--kv-dtype", "fp8", "--input-len", "128",
               "--output-len", "128", "--max-throughput", "--stack", "trtllm", "--format", "json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    for key in ("output_tokens_per_s", "ttft_s", "tpot_s", "batch", "kv_cache_tokens", "fits_in_memory",
                "memory_gib", "decode_step_s", "prefill_s"):
        assert key in out, key
    direct = infer("llama-3.1-8b", "dgx-h100", ServePlan(precision="fp8", kv_dtype="fp8", input_len=128,
                                                         output_len=128))
    assert out["output_tokens_per_s"] == pytest.approx(direct.output_tokens_per_s, rel=1e-12)


def test_cli_bad_input_is_one_line():
    run = _cli("--model", "llama-3.1-70b", "--hardware", "dgx-h100", "--tp", "3", "--input-len", "10",
               "--output-len", "10")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == ["error: tp=3 does not divide num_attention_heads = 64; valid tp: 1, 2, "
                                               "4, 8, 16, 32, 64"]
    run = _cli("--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--input-len", "10", "--output-len", "10",
               "--ttft-ms", "100")
    assert run.returncode == 2 and "--ttft-ms 100 is a --search limit" in run.stderr


def test_search_ranks_and_finds_the_fewest_gpus():
    job = dict(precision="fp8", input_len=1000, output_len=1000)
    ranked, dropped = rank("llama-3.1-70b", "dgx-h100", 8, job)
    rates = [e.output_tokens_per_s for e in ranked]
    assert rates == sorted(rates, reverse=True) and all(e.plan.gpus == 8 for e in ranked)
    _, bf16_dropped = rank("llama-3.1-70b", "dgx-h100", 8, job | dict(precision="bf16"))
    assert any(d.startswith("tp1 pp1 dp8: llama-3.1-70b does not fit on dgx-h100") for d in bf16_dropped)
    tight, _ = rank("llama-3.1-70b", "dgx-h100", 8, job, tpot_s=ranked[-1].tpot_s * 0.999)
    assert len(tight) < len(ranked)
    n, meets = fewest_gpus("llama-3.1-8b", "dgx-h100", 8, 5.0, dict(precision="fp8", input_len=128, output_len=128))
    best_half = rank("llama-3.1-8b", "dgx-h100", n // 2, dict(precision="fp8", input_len=128, output_len=128))[0] \
        if n > 1 else []
    assert meets and meets[0].requests_per_s >= 5.0
    assert n == 1 or not best_half or best_half[0].requests_per_s < 5.0


def test_benchmark_maps_rows_and_reports(tmp_path):
    """benchmarks/evals/published_inference.py: row I0444 (Llama 3.1 8B, H200, TP1, FP8, 128/128, offline) maps to
    llama-3.1-8b on dgx-h200 and its prediction is infer's; the printed ALL line is the CSV's MAPE; an
    online-serving row's simulated mean is serve.simulate's (every 12th online row: CI's benchmark lane runs all)."""
    from pathlib import Path

    import pandas as pd

    from perfmodel.serve.simulate import simulate

    root = Path(__file__).parents[1]
    out, on_out = tmp_path / "inf.csv", tmp_path / "online.csv"
    run = subprocess.run([sys.executable, "-m", "benchmarks.evals.published_inference", "--data",
                          str(root / "benchmarks" / "data" / "published_inference_dev.csv"), "--csv", str(out),
                          "--online-sample", "12", "--online-csv", str(on_out)], cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    df = pd.read_csv(out)
    row = df[df["row_id"] == "I0444"].iloc[0]
    assert (row["model"], row["hardware"], row["precision"], row["layout"]) == ("llama-3.1-8b", "dgx-h200", "fp8",
                                                                                "tp1 pp1")
    direct = infer("llama-3.1-8b", "dgx-h200", ServePlan(precision="fp8", stack="trtllm", stack_version="0.17",
                                                         input_len=128, output_len=128))
    assert row["predicted"] == pytest.approx(direct.output_tokens_per_s, rel=1e-9)
    ok = df[df["predicted"].notna()]
    assert f"MAPE {100 * (ok['predicted'] / ok['measured'] - 1).abs().mean():.1f}%" in run.stdout
    assert df["predicted"].notna().all()  # every row maps, L40S to l40s-8
    assert set(df[df["hardware"] == "l40s-8"]["layout"]) == {"tp1 pp1", "tp4 pp1", "tp8 pp1"}
    on = pd.read_csv(on_out)
    assert len(on) == 12 and on["simulated"].notna().all() and "TTFT: " in run.stdout
    r = on.iloc[0]
    tp, (i, o) = int(r["layout"].removeprefix("tp")), map(int, r["lengths"].split("/"))
    work = dict(arrival="burst", requests=500) if r["qps"] == "INF" else dict(
        arrival="poisson", request_rate=float(r["qps"]), requests=500)
    sim = simulate(r["model"], r["hardware"], ServePlan(tp=tp, precision=r["precision"], stack="trtllm",
                                                        stack_version="0.14.0", input_len=i, output_len=o), work)
    assert r["simulated"] == pytest.approx(1e3 * (sim.ttft_s.mean if r["metric"] == "ttft" else sim.tpot_s.mean),
                                           rel=1e-9)


def test_moe_layers_from_the_measured_fused_moe_table():
    """Mixtral 8x7B fp8 on H100, tp 8 ep 8 (each GPU one expert, whole): the table's curve at 256 tokens is one of
    its rows (ms / 1e3), 300 tokens lies log-log between 256 and 320, and the serving step's MoE layer is that
    over sustained_fraction."""
    import gzip

    import numpy as np

    from perfmodel.cost.power import loop_clock
    from perfmodel.cost.compute.kernel_lookup import moe_table_time
    from perfmodel.serve.step_time import moe_table_s
    from perfmodel.spec.hardware.kernel_tables import moe_curves

    rows = {}
    for line in gzip.open(ROOT_KERNELS / "h100_sxm" / "moe.csv.gz", "rt").read().splitlines()[1:]:
        d, *v = line.split(",")
        if (d, *map(int, v[:6])) == ("fp8", 4096, 14336, 2, 8, 1, 8):
            rows[int(v[6])] = float(v[7]) / 1e3
    curves = moe_curves("h100_sxm/moe.csv.gz")
    key = ("fp8", 4096, 14336, 2, 8, 1, 8)
    assert moe_table_time(curves, key, 256) == pytest.approx(rows[256], rel=1e-9)
    w = (np.log(300) - np.log(256)) / (np.log(320) - np.log(256))
    want = np.exp(np.log(rows[256]) + w * (np.log(rows[320]) - np.log(rows[256])))
    assert moe_table_time(curves, key, 300) == pytest.approx(want, rel=1e-9)
    assert moe_table_time(curves, key, 2 * max(rows)) == pytest.approx(2 * rows[max(rows)], rel=1e-9)
    m, sysm = load_model("mixtral-8x7b"), load_hardware("dgx-h100")
    plan = ServePlan(tp=8, ep=8, precision="fp8", input_len=128, output_len=128)
    dev = device(m, sysm, plan, load_serving_stack("trtllm"))
    # over sustained_fraction alone: a served step's kernels are priced at the tables' clock, the step's own clock
    # applied after from its mix (serve.power_mix.served_clock), not a compute-bound loop's (0.811)
    assert loop_clock(sysm.accelerator.power) < 0.9
    assert moe_table_s(dev, plan, 256) == pytest.approx(rows[256] / sysm.efficiency.sustained_fraction, rel=1e-9)
    ds = load_model("deepseek-v3")
    assert moe_table_s(device(ds.model_copy(update={"fp8_weight_blocks": False}), sysm, plan,
                              load_serving_stack("trtllm")), plan, 256) is None  # no per-tensor fp8 DeepSeek-V3 curve
    # its published checkpoint's 128 x 128 blocks read the block-scaled kernel's rows (ModelConfig.fp8_weight_blocks)
    blocks = {}
    for line in gzip.open(ROOT_KERNELS / "h100_sxm" / "moe.csv.gz", "rt").read().splitlines()[1:]:
        d, *v = line.split(",")
        if (d, *map(int, v[:6])) == ("fp8_block", 7168, 2048, 8, 256, 1, 8):
            blocks[int(v[6])] = float(v[7]) / 1e3
    assert ds.fp8_weight_blocks and 256 in blocks
    assert moe_table_s(device(ds, sysm, plan, load_serving_stack("trtllm")), plan, 256) == pytest.approx(
        blocks[256] / sysm.efficiency.sustained_fraction, rel=1e-9)


def test_ttft_is_never_below_the_prompts_own_prefill():
    """One request in flight: TTFT is at least its 8000-token prefill alone; at 64 in flight, longer still."""
    job = dict(tp=8, precision="fp8", input_len=8000, output_len=100)
    one = infer("llama-3.1-70b", "dgx-h100", ServePlan(concurrency=1, **job))
    many = infer("llama-3.1-70b", "dgx-h100", ServePlan(concurrency=64, **job))
    assert one.ttft_s >= sum(one.prefill_s.values()) * 0.999999
    assert many.ttft_s > one.ttft_s


def test_limits_on_the_batch():
    """vLLM runs at most max_num_seqs = 1024 sequences (its default on 80 GB-class GPUs) whatever the concurrency asked; TensorRT-LLM's token budget
    caps a 2048/128 job at 8192 / (1 + 16) = 481 sequences; concurrency below dp is refused."""
    v = infer("llama-3.1-8b", "dgx-h100", ServePlan(precision="fp8", stack="vllm", input_len=128, output_len=128,
                                                    concurrency=100000))
    assert v.batch == 1024 and any("max_batch 1024" in n for n in v.notes)
    t = infer("llama-3.1-8b", "dgx-h200", ServePlan(precision="fp8", input_len=2048, output_len=128))
    assert t.batch == 481 and any("token budget" in n for n in t.notes)
    with pytest.raises(InputError, match="concurrency = 1 is fewer than the dp = 8 replicas"):
        infer("llama-3.1-8b", "dgx-h100", ServePlan(dp=8, concurrency=1, input_len=128, output_len=128))


def test_kv_budgets_per_stack_by_hand():
    """H100 (80 GiB), Llama 3.1 8B bf16: trtllm 0.95 x (cap - runtime - weights - activations); vLLM 0.9 x cap -
    weights - activations - runtime; SGLang 0.88 x cap - weights - runtime (its activations outside the share)."""
    from perfmodel.serve.kv_cache import activation_bytes

    m, sysm = load_model("llama-3.1-8b"), load_hardware("dgx-h100")
    plan = ServePlan(input_len=128, output_len=128)
    cap, rt, w = sysm.accelerator.hbm_bytes, sysm.memory_overhead_bytes, weight_bytes(m, plan)
    for name, want in (("trtllm", lambda a: 0.95 * (cap - rt - w - a)), ("vllm", lambda a: 0.9 * cap - w - a - rt),
                       ("sglang", lambda a: 0.88 * cap - w - rt)):
        stack = load_serving_stack(name)
        a = activation_bytes(m, plan, stack)
        assert memory(m, sysm, plan, stack)["kv_cache"] == pytest.approx(want(a), rel=1e-12), name
    # the engine's launch flag in its own meaning replaces the profile's share (SGLang --mem-fraction-static 0.95)
    own = ServePlan(input_len=128, output_len=128, mem_fraction=0.95)
    for name, want in (("trtllm", lambda a: 0.95 * (cap - rt - w - a)), ("vllm", lambda a: 0.95 * cap - w - a - rt),
                       ("sglang", lambda a: 0.95 * cap - w - rt)):
        stack = load_serving_stack(name)
        a = activation_bytes(m, own, stack)
        assert memory(m, sysm, own, stack)["kv_cache"] == pytest.approx(want(a), rel=1e-12), name


def test_mem_fraction_reaches_the_kv_cache_from_the_cli(capsys):
    from perfmodel.cli.main import main

    base = ["infer", "--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "1", "--input-len", "128",
            "--output-len", "128", "--stack", "sglang"]
    tokens = {}
    for f in ("0.7", "0.95"):
        assert main([*base, "--mem-fraction", f]) == 0
        tokens[f] = float(re.search(r"KV cache\s+([\d,]+) tokens", capsys.readouterr().out).group(1).replace(",", ""))
    # SGLang's share is of the whole device: 0.25 x 80 GiB more for the cache, at 128 KiB per token (bf16, 32 layers
    # x 8 kv heads x 128 x 2 x 2 B)
    assert tokens["0.95"] - tokens["0.7"] == pytest.approx(0.25 * load_hardware("dgx-h100").accelerator.hbm_bytes
                                                           / (32 * 8 * 128 * 2 * 2), rel=0.01)
    for bad in ("0", "1.5", "nan", "abc"):
        with pytest.raises(SystemExit) as exit_:
            main([*base, "--mem-fraction", bad])
        assert exit_.value.code == 2 and "--mem-fraction" in capsys.readouterr().err


def test_active_experts_by_hand():
    """Qwen3-30B-A3B (128 experts, top 8): one token reaches 8 experts, two reach 8 + 8 x 120/128 on average."""
    from perfmodel.serve.step_time import active_experts

    assert active_experts(128, 8, 128, 1) == pytest.approx(8.0)
    assert active_experts(128, 8, 128, 2) == pytest.approx(8 + 8 * 120 / 128)
    assert active_experts(16, 8, 128, 10**6) == pytest.approx(16.0)


def test_search_refuses_a_fixed_layout_flag():
    run = _cli("--model", "llama-3.1-8b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "2", "--input-len", "10",
               "--output-len", "10", "--search")
    assert run.returncode == 2 and run.stderr.startswith("error: --tp is chosen by --search")


def test_tp_allreduce_from_the_engines_measured_table():
    """Two all-reduces per layer of tokens x hidden bf16 over tp: at 8 GPUs on H100 and a 4 MiB message (256 tokens
    of Llama 3.1 70B: 256 x 8192 x 2 B) the table's own row, 0.0519 ms; past the table's 8 GPUs, none."""
    from perfmodel.cost.compute.kernel_lookup import allreduce_table_time
    from perfmodel.serve.step_time import tp_allreduce_s
    from perfmodel.spec.hardware.kernel_tables import allreduce_curves

    curves = allreduce_curves("h100_sxm/allreduce.csv.gz")
    assert sorted(curves) == [2, 4, 8]
    assert allreduce_table_time(curves, 8, 4194304) == pytest.approx(0.051903e-3, rel=1e-5)
    assert allreduce_table_time(curves, 8, 100) == pytest.approx(curves[8][1][0])  # the latency floor
    assert allreduce_table_time(curves, 16, 4194304) is None
    m, sysm = load_model("llama-3.1-70b"), load_hardware("dgx-h100")
    plan = ServePlan(tp=8, input_len=128, output_len=128, gpus=8)
    assert tp_allreduce_s(m, sysm, plan, 256) == pytest.approx(2 * 0.051903e-3, rel=1e-5)


def _bw_lat(tier):
    return tier.bandwidth, tier.latency


def test_disaggregated_kv_transfer_and_rates_by_hand():
    """Llama 3.1 70B fp8 on one DGX H200: 1 prefill replica of tp 4 and 1 decode replica of tp 4. A prompt's KV
    cache is 2000 tokens x 80 layers x (K, V) x 8 kv heads x 128 x 1 B; each prefill GPU sends a quarter over
    NVLink (the 8 GPUs share a node). Requests/s is the least of the three rates the note lists; the prefill
    pool bounds it, so the decode replica holds B' sequences whose decode rate is that rate."""
    from perfmodel.cost.comm.collectives import p2p_tier, p2p_time
    from perfmodel.serve.disaggregated import kv_transfer
    from perfmodel.serve.step_time import step_parts

    m, sysm = load_model("llama-3.1-70b"), load_hardware("dgx-h200")
    e = infer(m, sysm, ServePlan(tp=4, prefill_dp=1, prefill_tp=4, precision="fp8", input_len=2000, output_len=500))
    p = e.plan
    assert p.gpus == 8 and p.prefill_gpus == 4 and p.disaggregated
    whole = 2000 * 80 * 2 * 8 * 128 * 1
    tier = p2p_tier(sysm, 1, 8)
    assert tier.name == sysm.tiers[0].name
    # 2 kv heads on each of the 4 prefill GPUs and of the 4 decode GPUs: a quarter each way
    assert e.kv_transfer_s == pytest.approx(float(p2p_time(whole / 4, tier.bandwidth, tier.latency)), rel=1e-9)
    assert kv_transfer(m, sysm, p)[:2] == pytest.approx((e.kv_transfer_s, tier.bandwidth / (whole / 4)), rel=1e-9)
    # the receiving end sets the time where it holds more: prefill tp 8 (one kv head a GPU) into decode tp 2
    # (4 kv heads a GPU); and kv heads replicated past tp 8 (tp 16 keeps one head each, as tp 8)
    wide = ServePlan(tp=2, prefill_dp=1, prefill_tp=8, precision="fp8", input_len=2000, output_len=500, gpus=10)
    assert kv_transfer(m, sysm, wide)[0] == pytest.approx(float(p2p_time(whole / 2, *_bw_lat(p2p_tier(sysm, 1, 10)))),
                                                          rel=1e-9)
    assert kv_transfer(m, sysm, wide)[1] == pytest.approx(min(p2p_tier(sysm, 1, 10).bandwidth / (whole / 8),
                                                              p2p_tier(sysm, 1, 10).bandwidth / (whole / 2)), rel=1e-9)
    assert e.ttft_s == pytest.approx(e.request_s["frontend"] + sum(e.prefill_s.values()) + e.kv_transfer_s, rel=1e-9)
    assert e.output_tokens_per_s == pytest.approx(e.requests_per_s * 500, rel=1e-9)
    assert "bound by the prefill pool" in e.notes[0]
    stack = load_serving_stack("trtllm")
    n = math.floor(stack.max_num_tokens / 2000)  # 4 prompts a prefill step
    assert e.requests_per_s == pytest.approx(n / sum(e.prefill_s.values()), rel=1e-9)
    t_d = sum(step_parts(m, sysm, p, stack, decode=e.batch, context=2250, prefill_seqs=0, prompt=0,
                         logits=e.batch).values())
    assert e.tpot_s == pytest.approx(t_d, rel=1e-9)
    assert e.batch / (499 * t_d) == pytest.approx(e.requests_per_s, rel=1e-6)  # the decode pool runs at that rate


def test_disaggregated_decode_bound_keeps_the_decode_only_token_budget():
    """With prefill capacity to spare the decode pool bounds the rate, at the batch its KV cache holds: sequences
    of 256 tokens (whole sequences reserved) in the budget `kv_cache.memory` leaves. Aggregated, the token budget
    (8192 / (1 + 128/128) = 4096) would not bind either; disaggregated decode steps carry no prompt tokens."""
    from perfmodel.serve.kv_cache import memory, sequence_kv_bytes

    m, sysm = load_model("llama-3.1-8b"), load_hardware("dgx-h100")
    e = infer(m, sysm, ServePlan(tp=1, dp=1, prefill_dp=4, prefill_tp=1, input_len=128, output_len=128))
    assert "bound by the decode pool (KV cache)" in e.notes[0]
    stack = load_serving_stack("trtllm")
    budget = memory(m, sysm, e.plan, stack)["kv_cache"]
    assert e.batch == math.floor(budget / sequence_kv_bytes(m, e.plan, 256, stack))
    assert e.requests_per_s == pytest.approx(e.batch / (127 * e.tpot_s), rel=1e-9)


@pytest.mark.parametrize("plan, message", [
    (dict(tp=4, prefill_dp=1, output_len=1), "output_len = 1 with a prefill pool (prefill_dp = 1)"),
    (dict(tp=4, prefill_tp=2), "prefill_tp = 2 without prefill_dp: no prefill pool"),
    (dict(tp=4, prefill_dp=1, prefill_tp=3), "prefill_tp=3 does not divide num_attention_heads = 64"),
    (dict(tp=4, prefill_dp=1, gpus=6), "gpus = 6 is not tp x pp x dp = 4 x 1 x 1 + prefill_tp x prefill_dp = 4 = 8"),
])
def test_disaggregated_bad_layouts_are_one_line(plan, message):
    with pytest.raises(InputError, match=re.escape(message)):
        infer("llama-3.1-70b", "dgx-h200", ServePlan(**{"input_len": 100, "output_len": 100} | plan))


def test_vocab_collectives_by_hand():
    """tp 4 on vLLM (vocabulary-split embedding): the logits' all-gather (B x V x 2 B, the system's collective
    formula) and the embedding's all-reduce (M x h x 2 B, as a layer's); TensorRT-LLM replicates the embedding."""
    from perfmodel.cost.comm.collectives import group_collective
    from perfmodel.serve.step_time import vocab_comm_s

    m, sysm = load_model("llama-3.1-8b"), load_hardware("dgx-h100")
    plan = ServePlan(tp=4, input_len=100, output_len=100, gpus=4)
    gather = float(group_collective(sysm, "all_gather", 32 * m.vocab * 2, 4, 1, 4))
    from perfmodel.cost.compute.kernel_lookup import allreduce_table_time
    from perfmodel.spec.hardware.kernel_tables import allreduce_curves

    # the embedding's all-reduce is the layers' collective: the engines' measured NVLink all-reduce on 4 GPUs
    reduce = allreduce_table_time(allreduce_curves(sysm.accelerator.kernel_tables["allreduce"]), 4, 96 * m.hidden * 2)
    assert vocab_comm_s(m, sysm, plan, load_serving_stack("vllm"), 96, 32) == pytest.approx(gather + reduce)
    assert vocab_comm_s(m, sysm, plan, load_serving_stack("trtllm"), 96, 32) == pytest.approx(gather)
    assert vocab_comm_s(m, sysm, plan.model_copy(update={"tp": 1, "gpus": 1}), load_serving_stack("vllm"), 96,
                        32) == 0.0


def test_decode_attention_from_the_measured_table():
    """With the part's decode-attention table (AIConfigurator's generation_attention on H100): at a measured point
    the table's latency itself (Llama 3.1 70B at tp 8: 8 query heads and 1 kv head of 128 a GPU, fp8 KV; 64
    sequences over 1023 cached tokens, so 1024 keys); between measured batches log-log between them; beyond the
    largest, scaled by the batch."""
    import gzip

    import numpy as np

    from perfmodel.cost.compute.kernel_lookup import decode_table_time
    from perfmodel.spec.hardware.kernel_tables import decode_curves

    m, sysm = load_model("llama-3.1-70b"), load_hardware("dgx-h100")
    plan = ServePlan(tp=8, precision="fp8", input_len=1000, output_len=1000, gpus=8)
    dev = device(m, sysm, plan, load_serving_stack("trtllm"))
    rows = [line.split(",") for line in gzip.decompress(
        (ROOT_KERNELS / "h100_sxm" / "decode_attention.csv.gz").read_bytes()).decode().splitlines()[1:]]
    ms = {(int(b), int(p)): float(t) for kv, hd, q, k, b, p, t in rows if (kv, hd, q, k) == ("1", "128", "8", "1")}
    assert decode_attention_s(dev, plan, 64, 1024) == pytest.approx(ms[(64, 1023)] / 1e3, rel=1e-6)
    t48 = decode_attention_s(dev, plan, 48, 1024)
    want = np.exp(np.interp(np.log(48), np.log([32, 64]), np.log([ms[(32, 1023)], ms[(64, 1023)]]))) / 1e3
    assert t48 == pytest.approx(want, rel=1e-6)
    top = max(b for b, _ in ms)  # the largest batch timed (at the pasts its calls could hold)
    past = sorted(p for b, p in ms if b == top)
    at = past[len(past) // 2]
    curves = decode_curves(sysm.accelerator.kernel_tables["decode_attention"])
    assert decode_table_time(curves, (1, 128, 8, 1), 2 * top, at + 1) == pytest.approx(2 * ms[(top, at)] / 1e3,
                                                                                       rel=1e-6)
    assert decode_table_time(curves, (1, 128, 7, 1), 64, 1024) is None  # heads it did not time: the roofline
