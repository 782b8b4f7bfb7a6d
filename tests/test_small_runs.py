"""The small- and mid-scale runs (benchmarks/data/small_scale_runs_dev.csv) as Cases and MemoryRuns
(benchmarks.evals.published.small_runs): the mapping of rows whose values were worked out by hand from their text."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from perfmodel.errors import InputError
from benchmarks.evals.published.small_runs import DEFAULT_CSV, load_small_cases, load_small_memory

ROOT = Path(__file__).parents[1]
EXPRESSIBLE = 56  # rows with a plan the estimate prices and a measured step time (change it when the reader changes)


@pytest.fixture(scope="module")
def cases():
    """The reader's Cases by row id (read once: each row is priced by the estimate)."""
    return {c.row_id: c for c in load_small_cases()}


def test_reads_the_bundled_copy_one_case_per_row_in_order(cases):
    """The default CSV is the repository's copy; one Case per row, S001.. in file order."""
    assert DEFAULT_CSV == ROOT / "benchmarks" / "data" / "small_scale_runs_dev.csv"
    assert list(cases) == [f"S{i:03d}" for i in range(1, len(pd.read_csv(DEFAULT_CSV)) + 1)]
    assert len(cases) == 163


def test_every_row_has_a_plan_and_a_time_or_a_reason(cases):
    """A row is a priced plan with a positive time, or a reason; the expressible count is pinned."""
    for c in cases.values():
        if c.reason:
            assert c.plan is None, c.row_id
        else:
            assert c.plan is not None and c.model is not None and c.system is not None, c.row_id
            assert c.measured_s > 0 and math.isfinite(c.measured_s), c.row_id
        assert c.trust in ("A", "B", "C")
    assert sum(not c.reason for c in cases.values()) == EXPRESSIBLE


def test_llmc_gpt2_124m_on_8_a100(cases):
    """llm.c run_gpt2_124M.sh: GPT-2 124M, 8 A100 80GB, ZeRO-1, 64 x 1024 per GPU, 524288 tokens, ~300 ms."""
    c = cases["S001"]
    p = c.plan
    assert (c.group, c.trust, c.model.name, c.system.name) == ("karpathy/llm.c", "B", "gpt2-124m", "dgx-a100-80gb")
    m = c.model
    assert (m.n_layers, m.hidden, m.n_heads, m.vocab, m.dropout) == (12, 768, 12, 50257, 0)
    assert (p.gpus, p.tp, p.pp, p.dp, p.zero) == (8, 1, 1, 8, 1)
    assert (p.micro_batch, p.global_batch, p.seq_len) == (64, 512, 1024)
    assert (p.stack, p.precision, p.recompute, p.compile, p.grad_dtype) == ("llmc", "bf16", "none", "none", "bf16")
    assert c.measured_s == 0.3


def test_groups_from_repositories_urls_and_proxy_copies(cases):
    """Groups are repositories (also behind a URL or a proxy copy); stacks follow the code that ran."""
    assert cases["S008"].group == "karpathy/llm.c"  # a proxy page of github.com/karpathy/llm.c/discussions/677
    assert cases["S019"].group == "karpathy/nanoGPT"  # a github.com issue URL
    assert cases["S020"].plan.stack == "llmc"  # llm.c run in the modded-nanogpt records: llm.c's stack
    assert cases["S022"].plan.stack == cases["S041"].plan.stack == cases["S015"].plan.stack == "nanogpt"
    assert cases["S020"].trust == "A" and cases["S015"].trust == "C"


def test_tokens_per_s_per_gpu(cases):
    """tokens/s per GPU: tokens per step per GPU over the figure; torchtitan's AC options."""
    fms = cases["S158"]  # fms-fsdp Llama 2 7B, HSDP on 128 A100, 2 sequences of 4096 per GPU, 3760 tokens/s/GPU
    assert (fms.model.name, fms.system.name, fms.plan.zero, fms.plan.global_batch) == (
        "llama-2-7b", "dgx-a100-80gb", 3, 256)
    assert fms.measured_s == pytest.approx(2 * 4096 / 3760)
    titan = cases["S108"]  # torchtitan Llama 3 8B, 64 A100, 1 x 8192 tokens per GPU, 2904 tokens/s per GPU
    assert titan.measured_s == pytest.approx(8192 / 2904)
    p = titan.plan  # selective layer AC: every second block fully recomputed
    assert (p.recompute, p.recompute_method, p.recompute_num_layers, p.zero) == ("full", "block", 16, 3)
    assert cases["S110"].plan.recompute == "per-op"


def test_total_tokens_per_s_and_source_defaults(cases):
    """tokens/s in total: tokens per step over the figure, the step from nanochat's defaults."""
    c = cases["S041"]  # nanochat d26: 630K tokens/s over 8 H100; step of 524288 tokens (nanochat's default then)
    assert (c.plan.micro_batch, c.plan.global_batch, c.plan.seq_len, c.plan.zero) == (16, 256, 2048, 1)
    assert c.measured_s == pytest.approx(524288 / 630000)
    assert (cases["S042"].plan.precision, cases["S041"].plan.precision) == ("fp8", "bf16")


def test_tflops_through_the_sources_flop_count(cases):
    """TFLOP/s per GPU through each source's FLOP count, worked out by hand."""
    # Megatron-LM April 2021, 1.7B: 24 layers of 2304, vocab 51200, 512 x 2048 tokens, 137 TFLOP/s on 32 A100
    c = cases["S128"]
    flops = 96 * 512 * 2048 * 24 * 2304 ** 2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304))
    assert c.measured_s == pytest.approx(flops / (32 * 137e12)) == pytest.approx(3.528, abs=1e-3)
    assert (c.plan.tp, c.plan.pp, c.plan.dp, c.plan.micro_batch, c.plan.attention, c.plan.recompute) == (
        1, 1, 32, 16, "unfused", "full")
    # Megatron-Core 2024, 1.7B: 24 layers of 2048, 16 heads, vocab 131072, 192 x 4096 tokens, 408.8 TFLOP/s on 48
    c = cases["S119"]
    flops = 12 * 192 * 4096 * 24 * 2048 ** 2 * ((1 + 1 + 4096 / 2048) + 4 + 131072 / (2 * 24 * 2048))
    assert c.measured_s == pytest.approx(flops / (48 * 408.8e12)) == pytest.approx(0.4519, abs=1e-4)
    assert (c.plan.zero, c.plan.micro_batch, c.model.tie_embeddings) == (1, 4, False)
    p = cases["S136"].plan  # model-parallel size 280: tp 8 within the node, pp 35
    assert (p.tp, p.pp, p.dp) == (8, 35, 9)


def test_wall_clock_totals_over_stated_steps(cases):
    """Wall-clock totals over the step count the notes give; none where evaluation is included."""
    assert cases["S008"].measured_s == pytest.approx(24 * 3600 / 32000)  # '32,000 steps'
    assert cases["S044"].measured_s == pytest.approx(10949.47 / 16704)  # 'step 16704'
    assert cases["S018"].reason.startswith("the wall-clock includes evaluation")


def test_reasons(cases):
    """Rows that cannot be expressed say why."""
    expect = {"S092": "H100 SXM 96GB HBM2e @500W is not in the hardware catalogue",
              "S070": "Titan RTX is not in the hardware catalogue", "S138": "V100 is not in the hardware catalogue",
              "S027": "metric peak_memory_mib is not a step time", "S011": "metric fwd_only_step_time_s is not",
              "S009": "fp32 training is not a Plan precision", "S026": "fp8 on some layers only",
              "S039": "modded-nanogpt's modded GPT", "S109": "the same measurement", "S007": "the figure conflicts",
              "S160": "Llama2-architecture 34b: no catalogue preset", "S021": "micro-batch not stated"}
    for row, why in expect.items():
        assert cases[row].reason.startswith(why), (row, cases[row].reason)


def test_memory_rows():
    """Memory rows: the configuration that ran, its figure in GiB and view, and whether it fit."""
    runs = {m.row_id: m for m in load_small_memory()}
    df = pd.read_csv(DEFAULT_CSV)
    assert len(runs) == df["metric"].str.startswith(("peak_memory", "max_batch")).sum() == 32
    m = runs["S116"]  # torchtitan Llama 3.1 8B on 32 H200: 47.96 GiB reserved
    assert not m.reason and (m.measured_gib, m.view, m.fits) == (47.96, "reserved", True)
    assert (m.plan.gpus, m.plan.micro_batch, m.plan.zero, m.plan.precision) == (32, 2, 3, "fp8")
    assert runs["S027"].measured_gib == pytest.approx(37653 / 1024) and runs["S027"].view == "allocated"
    assert runs["S061"].fits is False and runs["S061"].reason == "Titan RTX is not in the hardware catalogue"


def test_bad_input_is_one_line(tmp_path):
    """A missing file, a missing column and a bad value are one-line InputErrors naming them."""
    with pytest.raises(InputError, match="no such file"):
        load_small_cases(tmp_path / "missing.csv")
    df = pd.read_csv(DEFAULT_CSV, dtype=str, keep_default_na=False).head(3)
    df.drop(columns=["metric"]).to_csv(tmp_path / "no_metric.csv", index=False)
    with pytest.raises(InputError, match="missing column.*metric"):
        load_small_cases(tmp_path / "no_metric.csv")
    df.assign(value=["0.3", "fast", "1"]).to_csv(tmp_path / "bad_value.csv", index=False)
    with pytest.raises(InputError, match=r"row S002: value = 'fast'"):
        load_small_memory(tmp_path / "bad_value.csv")


def test_scale_regimes_by_hand():
    """benchmarks/evals/published_runs.py's regimes: frontier at 1024 devices and more, whatever the model;
    else small under 2B parameters or at most 4096 tokens per micro-batch per device (micro_batch x seq_len / cp);
    else mid."""
    import perfmodel as pm
    from benchmarks.evals.published_runs import scale_regime

    big, gpt2 = pm.load_model("llama-3-70b"), pm.load_model("gpt2-124m")
    plan = lambda **kw: pm.Plan(**({"gpus": 64, "micro_batch": 1, "global_batch": 64, "seq_len": 8192} | kw))  # noqa: E731
    assert scale_regime(big, plan(gpus=1024, global_batch=1024)) == "frontier"
    assert scale_regime(gpt2, plan(gpus=1024, global_batch=1024, seq_len=1024)) == "frontier"
    assert scale_regime(gpt2, plan(seq_len=1024)) == "small"  # 0.12B parameters
    assert scale_regime(big, plan(seq_len=4096)) == "small"  # 4096 tokens per micro-batch
    assert scale_regime(big, plan(seq_len=8192, cp=2)) == "small"  # 8192 / cp 2
    assert scale_regime(big, plan()) == "mid"
