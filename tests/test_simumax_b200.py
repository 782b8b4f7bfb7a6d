"""The SimuMax v1.2 B200 validation rows (benchmarks/simumax_b200.py): what the rows ran and what B200 measured.

- the runs' launcher passes no --overlap-grad-reduce / --overlap-param-gather (Megatron-LM's defaults: off), so
  the data-parallel collectives are exposed;
- B200's grouped-GEMM slowdown is SimuMax's measured TE GroupedLinear efficiency against its dense TE GEMMs'
  plateau on the same node (hardware_specs/accelerators/b200.yaml, benchmarks/data/simumax/).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.cost.compute.grouped_gemm import grouped_slowdown
from perfmodel.published.memory_peaks import SIMUMAX_GROUP, moe_case
from perfmodel.spec.hardware.system import load_hardware

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def simumax():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import simumax_b200

    return simumax_b200


def test_simumax_rows_run_megatron_without_dp_overlap():
    """M228 states tp1 pp1 ep8 on 8 GPUs, global batch 32, micro-batch 1: dp 8, 4 micro-batches, and the launcher's
    non-overlap contract: overlap_dp_comm False."""
    df = pd.read_csv(ROOT / "benchmarks/data/published_moe_runs_dev.csv")
    row = df[(df["row_id"] == "M228") & (df["source_group"] == SIMUMAX_GROUP)].iloc[0]
    plan = moe_case(row).plan
    assert (plan.tp, plan.pp, plan.ep, plan.dp, plan.global_batch, plan.micro_batch) == (1, 1, 8, 8, 32, 1)
    assert plan.overlap_dp_comm is False


def test_grouped_curve_by_hand(simumax):
    """At 1232 tokens per expert (DeepSeek-V2, ep 8: 20 experts) SimuMax's forward grouped efficiencies are 0.51342
    (N 3072, K 5120) and 0.39744 (N 5120, K 1536); its dense TN plateau median is 0.49269: ratios 0.9596 and 1.2397,
    median 1.0996."""
    curve = simumax.grouped_curve()
    assert curve.loc[1232, "fwd"] == pytest.approx(1.0996, abs=1e-4)
    assert list(curve.index) == [128, 154, 256, 308, 512, 616, 1024, 1232, 2460, 9832]


def test_b200_spec_quotes_the_derived_curve(simumax):
    curve = simumax.grouped_curve().round(3)
    spec = load_hardware("dgx-b200").accelerator.grouped_gemm_slowdown
    assert spec.tokens_per_group == list(curve.index)
    for field, stage in (("forward", "fwd"), ("input_grad", "bwd_grad_act"), ("weight_grad", "bwd_grad_w")):
        assert getattr(spec, field) == pytest.approx(curve[stage].tolist(), abs=1e-9)


def test_b200_grouped_slowdown_at_the_proxies_tokens():
    """DeepSeek-V3 at ep 8 routes 4096 x 8 x 8 / 256 = 1024 tokens to each of 32 local experts: the measured point
    (1.180, 1.138, 1.685); one expert per device stays a plain GEMM (1.0)."""
    curve = load_hardware("dgx-b200").accelerator.grouped_gemm_slowdown
    got = grouped_slowdown(curve, np.array([1024.0, 1024.0]), np.array([32, 1]))
    assert [r.tolist() for r in got] == [[1.180, 1.0], [1.138, 1.0], [1.685, 1.0]]
