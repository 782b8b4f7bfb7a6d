"""Hand-checked values for the memory mechanisms behind the measured peaks: torch.distributed.pipelining's
buffers (cost.memory.stack_kept.pipeline_buffer_bytes), the bf16-moment optimizer of the Moonlight study's recipe, and the
allocator-slack fit with its leave-one-group-out (benchmarks/evals/measured_memory.py)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.evals.measured_memory import fit_slack, logo, pair_slack  # noqa: E402
from perfmodel.cost.layouts import Layouts  # noqa: E402
from perfmodel.cost.memory.footprint import reserved_of  # noqa: E402
from perfmodel.cost.memory.stack_kept import pipeline_buffer_bytes  # noqa: E402
from perfmodel.cost.memory.states import state_bytes  # noqa: E402
from perfmodel.spec.model.catalogue import load_model  # noqa: E402
from perfmodel.spec.hardware.system import load_hardware  # noqa: E402
from perfmodel.spec.plan.layout import Plan, resolve  # noqa: E402

MiB = 2.0 ** 20


def _lay(stack="torchtitan", pp=8):
    """Llama 3.1 405B as torchtitan's Table 5 ran it: tp 8 (SP), pp 8, dp 8, 8 micro-batches of 4 x 8192."""
    plan = Plan(tp=8, pp=pp, dp=8, micro_batch=4, global_batch=256, seq_len=8192, sequence_parallel=True, zero=3,
                stack=stack, recompute="full", schedule="1f1b", grad_dtype="fp32")
    return Layouts.from_plan(resolve(plan, load_model("llama-3.1-405b"), load_hardware("dgx-h100")))


def test_torch_pipelining_buffers_by_hand():
    model, lay = load_model("llama-3.1-405b"), _lay()
    boundary = 2 * 4 * 8192 * 16384 / 8  # one micro-batch's stage boundary tensor, bf16, sequence shard: 128 MiB
    assert boundary == 128 * MiB
    # a middle stage, 7 micro-batches in flight: 8 input buffers less the 7 the layers keep anyway, 8 gradient ones
    mid = pipeline_buffer_bytes(model, lay, False, False, 7)
    assert mid.item() == pytest.approx((8 - 7 + 8) * boundary)
    # the first stage receives no input: its 8 gradient buffers alone
    assert pipeline_buffer_bytes(model, lay, True, False, 8).item() == pytest.approx(8 * boundary)
    # the last: 7 input buffers beyond the one in flight, no gradient buffers, and all 8 micro-batches' bf16 logits,
    # 32768 tokens x 128256 / 8 vocabulary entries x 2 B each (loss parallel: the vocabulary split over tp)
    logits = 8 * 32768 * (128256 // 8) * 2
    assert logits == 8_405_385_216
    assert pipeline_buffer_bytes(model, lay, False, True, 1).item() == pytest.approx(7 * boundary + logits)


def test_no_torch_pipelining_buffers_elsewhere():
    model = load_model("llama-3.1-405b")
    assert pipeline_buffer_bytes(model, _lay(stack="megatron-core"), False, True, 1).item() == 0.0
    assert pipeline_buffer_bytes(model, _lay(pp=1), True, True, 1).item() == 0.0


def test_bf16_moments_optimizer_bytes():
    """The Moonlight recipe's precision-aware optimizer: fp32 main parameters + bf16 exp_avg and exp_avg_sq = 8 B per
    parameter in the optimizer, against 12 B with fp32 moments (ZeRO-1 over 4 ranks: a quarter each)."""
    base = dict(tp=2, pp=1, dp=4, micro_batch=1, global_batch=4, seq_len=4096, zero=1, stack="megatron-core",
                grad_dtype="bf16")
    fp32 = state_bytes(1e9, Plan(**base))["optimizer"]
    bf16 = state_bytes(1e9, Plan(**base, moment_dtype="bf16", weight_dtype="fp32"))["optimizer"]
    assert float(fp32) == pytest.approx(12e9 / 4) and float(bf16) == pytest.approx(8e9 / 4)


def test_moonlight_rows_take_the_recipe_optimizer():
    from benchmarks.evals.published.memory_peaks import memory_cases
    root = Path(__file__).parents[1] / "benchmarks" / "data"
    cases = {c.row_id: c for c in memory_cases(root / "measured_memory_dev.csv", root / "published_moe_runs_dev.csv")}
    for r in ("M209", "M210", "M214"):
        assert (cases[r].plan.moment_dtype, cases[r].plan.weight_dtype) == ("bf16", "fp32")
    assert cases["M204"].plan.moment_dtype != "bf16"  # the Qwen3 rows ran other recipes


def _rows():
    # two reserved rows of a fitted stack measured 10% over their allocated prediction, one 30% over; a pair of
    # measured views elsewhere (reserved / allocated - 1 = 0.05 and 0.01)
    return pd.DataFrame(dict(
        row_id=["a", "b", "c", "d", "e"], group=["T", "T", "T", "N", "N"],
        stack=["torchtitan"] * 3 + ["nanotron"] * 2, view=["reserved"] * 3 + ["allocated"] * 2,
        measured_gib=[110.0, 55.0, 130.0, 40.0, 20.0], predicted_gib=[101.7, 50.85, 101.7, 40.0, 20.0],
        predicted_allocated_gib=[100.0, 50.0, 100.0, 40.0, 20.0], usable_gib=[1e3] * 5,
        measured_other_gib=[np.nan, np.nan, np.nan, 42.0, 20.2]))


def test_fit_slack_minimises_the_mape():
    # MAPE(s) = (2 |1.1^-1 (1 + s) - 1| + |1.3^-1 (1 + s) - 1|) / 3 falls until s = 0.1, the weighted median
    assert fit_slack(_rows()[_rows()["group"] == "T"]) == pytest.approx(0.10)
    assert pair_slack(_rows()) == pytest.approx(0.03)  # median of 42 / 40 - 1 and 20.2 / 20 - 1
    assert float(reserved_of(np.array(100.0), 0.1, np.array(105.0))) == 105.0  # capped at what the device gives


def test_logo_refits_without_the_group():
    rows = _rows()
    pred, used = logo(rows)
    # without group T no torchtitan row is left: its slack falls back on the other group's measured pairs
    assert used["T"]["torchtitan"] == pytest.approx(0.03)
    assert list(pred[:3]) == pytest.approx([103.0, 51.5, 103.0])
    assert used["N"]["torchtitan"] == pytest.approx(0.10)
    assert list(pred[3:]) == [40.0, 20.0]  # allocated-view rows: no fitted constant, LOGO = in-sample


def test_loss_parallel_bytes_by_hand():
    """torchtitan's loss under loss_parallel (tp > 1) holds 16 B per local logit at its backward peak, 4 of them the
    kept log-softmax: 12 B transient; torch's fused cross entropy (tp 1) 12 B, 8 transient."""
    from perfmodel.cost.memory.footprint import loss_temporary_bytes
    model = load_model("llama-3.1-405b")
    tp8 = _lay(pp=1)
    assert loss_temporary_bytes(model, tp8).item() == pytest.approx(12 * 4 * 8192 * (128256 // 8))
    tp1 = Layouts.from_plan(resolve(Plan(tp=1, pp=1, dp=8, micro_batch=2, global_batch=16, seq_len=8192, zero=3,
                                         stack="torchtitan", grad_dtype="fp32"),
                                    load_model("llama-3.1-8b"), load_hardware("dgx-h100")))
    assert loss_temporary_bytes(load_model("llama-3.1-8b"), tp1).item() == pytest.approx(8 * 2 * 8192 * 128256)


def test_bridge_gb_is_decimal():
    """Megatron-Bridge's report_memory divides bytes by 1e9: 36.618 GB = 36.618e9 / 2^30 = 34.1032 GiB; a figure
    stated in GiB is kept."""
    from benchmarks.evals.published.memory_peaks import gib_of
    assert gib_of(36.618, "peak allocated after iter 2 (GB as written)") == pytest.approx(34.1032, abs=1e-4)
    assert gib_of(62.166, "rank-0 peak allocated (GiB)") == 62.166
    assert gib_of(45.63, "max allocated (GiB), max over ranks; reserved 48.79 GiB") == 45.63
