"""The measured-memory rows as (model, system, plan, view, rank) (benchmarks.evals.published.memory_peaks) and the benchmark
that compares them with the estimate (benchmarks/evals/measured_memory.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfmodel import estimate
from benchmarks.evals.published.memory_peaks import memory_cases, nanotron_stage_layers, predicted

ROOT = Path(__file__).parents[1]
DENSE = ROOT / "benchmarks" / "data" / "measured_memory_dev.csv"
MOE = ROOT / "benchmarks" / "data" / "published_moe_runs_dev.csv"
GiB = 2.0 ** 30


@pytest.fixture(scope="module")
def cases():
    return {c.row_id: c for c in memory_cases(DENSE, MOE)}


def test_every_row_with_a_measured_peak(cases):
    moe = pd.read_csv(MOE)
    assert len(cases) == len(pd.read_csv(DENSE)) + moe["mem_peak_gib"].notna().sum() == 28 + 25
    assert {c.view for c in cases.values()} == {"allocated", "reserved"}
    assert {c.rank for c in cases.values()} <= {"max", "first", "last"}


def test_torchtitan_fsdp_row(cases):
    c = cases["M001"]
    p = c.plan
    assert not c.reason
    assert (p.tp, p.pp, p.dp, p.cp, p.zero, p.recompute, p.stack) == (1, 1, 8, 1, 3, "per-op", "torchtitan")
    assert (p.micro_batch, p.global_batch, p.seq_len, p.precision, p.grad_dtype) == (2, 16, 8192, "bf16", "fp32")
    assert (c.view, c.rank, c.measured_gib) == ("reserved", "max", 82.4)
    assert c.model.n_layers == 32 and c.model.vocab == 128256 and c.model.n_kv_heads == 8
    assert c.system.accelerator.hbm_capacity_gib == 96  # the 96 GB H100 of the Grand Teton hosts
    assert cases["M003"].plan.precision == "fp8"
    m7 = cases["M007"].plan
    assert (m7.dp, m7.cp, m7.seq_len, m7.recompute, m7.zero_shard) == (1, 8, 262144, "full", 8)


def test_torchtitan_pipelined_rows(cases):
    p = cases["M011"].plan
    assert (p.tp, p.dp, p.sequence_parallel, p.micro_batch) == (8, 32, True, 16)
    p13, p14 = cases["M013"].plan, cases["M014"].plan
    # torchtitan 9dec370 splits the local batch of 32 into pp = 8 micro-batches whatever the schedule
    # (build_pipeline_schedule: n_microbatches = pipeline_parallel_degree when unset): 4 sequences each
    assert (p13.tp, p13.pp, p13.dp, p13.vpp, p13.micro_batch, p13.num_microbatches) == (8, 8, 8, 1, 4, 8)
    assert (p14.vpp, p14.schedule, p14.micro_batch, p14.num_microbatches) == (2, "interleaved", 4, 8)
    p18 = cases["M018"].plan
    assert (p18.dp, p18.cp, p18.micro_batch, p18.num_microbatches) == (1, 8, 1, 8)


def test_nanotron_row(cases):
    c = cases["M030"]
    p = c.plan
    assert (p.tp, p.pp, p.dp, p.zero, p.recompute, p.stack) == (4, 2, 1, 1, "none", "nanotron")
    assert (p.micro_batch, p.global_batch, p.seq_len) == (8, 1024, 4096)
    assert (p.grad_dtype, p.sequence_parallel) == ("fp32", True)
    assert p.stage_layers == [14, 10]  # nanotron's compute-balanced split (the LM head costs 2.45 layers)
    assert c.model.tie_embeddings and c.model.vocab == 50257
    assert (c.view, c.rank, c.measured_gib, c.measured_between_gib) == ("allocated", "first", 25.1, 2.98)
    assert c.measured_other_gib == 25.49  # peak reserved, from the notes
    assert cases["M031"].plan.stage_layers is None


def test_nanotron_split(cases):
    """nanotron balances block costs: 41.9 M per llama-1B layer, 102.9 M for the LM head (V h)."""
    model = cases["M035"].model
    assert nanotron_stage_layers(model, 1)[0] == [24]
    assert nanotron_stage_layers(model, 4)[0] == [7, 7, 6, 4]
    split, note = nanotron_stage_layers(model, 8)
    assert "[4, 3, 3, 4, 3, 3, 4, 0]" in note and split == [4, 3, 3, 4, 3, 3, 3, 1]
    assert cases["M035"].plan.stage_layers == split


def test_moe_rows(cases):
    q = cases["M204"]
    assert (q.plan.ep, q.plan.dp, q.plan.zero, q.plan.grad_dtype, q.plan.moe_dispatcher) == (16, 16, 1, "bf16", "flex")
    assert (q.view, q.rank) == ("allocated", "first")
    m = cases["M212"]
    assert m.model.name == "moonlight-16b-a3b"
    assert (m.plan.tp, m.plan.ep, m.plan.edp, m.plan.recompute) == (2, 8, 1, "selective")
    assert m.plan.recompute_modules == ["mlp", "mla_up_proj"]
    assert cases["M209"].plan.recompute == "none"  # selective with no modules
    s = cases["M231"]
    assert s.model.n_layers == 4 and s.model.moe.first_dense_layers == 1 and s.model.mtp_layers == 0
    assert s.model.moe.n_experts == 256 and s.system.name == "dgx-b200"
    assert (s.plan.pp, s.plan.ep, s.plan.dp, s.plan.zero) == (2, 4, 4, 1)
    assert (s.plan.grad_dtype, s.plan.recompute) == ("fp32", "none")
    assert (s.view, s.rank, s.measured_gib, s.measured_other_gib) == ("allocated", "max", 114.0, 118.61)
    v2 = cases["M228"].model
    assert (v2.hidden, v2.moe.n_experts, v2.moe.top_k, v2.vocab) == (5120, 160, 6, 102400)
    for r in ("M215", "M216", "M217", "M218"):
        assert "Mamba" in cases[r].reason


def test_nanotron_between_steps_by_hand(cases):
    """M031 (llama-1B, tp2 pp1 dp4, ZeRO-1, fp32 gradients, tied embeddings): weights + gradients + optimizer per
    device = params per rank x (2 + 4 + 12 / dp)."""
    h, f, L, V, tp, dp = 2048, 4096, 24, 50257, 2, 4
    per_layer = (4 * h * h + 3 * h * f) / tp + 2 * h  # q, k, v, o and gate/up/down split over tp; two norms whole
    params = L * per_layer + V * h / tp + h  # vocab-parallel embedding (tied: no separate head at pp 1), final norm
    by_hand = params * (2 + 4 + 12 / dp)
    c = cases["M031"]
    got = predicted(c, estimate(c.model, c.system, c.plan))["between_gib"] * GiB
    assert got == pytest.approx(by_hand, rel=0.01)


def test_benchmark_runs(tmp_path):
    out = tmp_path / "mm.csv"
    run = subprocess.run([sys.executable, "-m", "benchmarks.evals.measured_memory", "--dense", str(DENSE), "--moe",
                          str(MOE), "--csv", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    df = pd.read_csv(out)
    expressible = [c.row_id for c in memory_cases(DENSE, MOE) if not c.reason]
    assert len(expressible) >= 49
    assert set(df.loc[df["predicted_gib"].notna(), "row_id"]) == set(expressible)
    for r in expressible:
        assert f"  {r} " in run.stdout or f"{r}  " in run.stdout
    assert "not expressible (4 rows)" in run.stdout and "ALL reserved" in run.stdout
    ok = df[df["predicted_gib"].notna()]
    assert (ok["predicted_gib"] > 0).all() and ok["error"].notna().all()
