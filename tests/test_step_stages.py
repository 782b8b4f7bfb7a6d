"""cost.step.evaluate.evaluate as its stages: each stage's figure checked by hand, and the step's breakdown traced to them."""

from __future__ import annotations

import pytest

from perfmodel import load_hardware, load_model
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.pipeline.stages import Stages
from perfmodel.cost.step.data_parallel import chunks_after, reduced_stage
from perfmodel.cost.step.evaluate import evaluate
from perfmodel.cost.step.stage import pipeline_sends, slowest_stage, unit_seconds
from perfmodel.spec.plan.layout import Plan, resolve

# the device side at a fixed clock: dgx-h100 on its datasheet tiers, without its power model (tests/test_power.py)
pytestmark = pytest.mark.usefixtures("no_host")
_DGX = load_hardware("dgx-h100").on_datasheet(gemms=False)
H100 = _DGX.model_copy(update={"accelerator": _DGX.accelerator.model_copy(update={"power": None})})
# dgx-h100's infiniband tier as its spec states it (400 Gb/s NDR per GPU = 50 GB/s, at its collective efficiency;
# 14 us), read from the spec's fields rather than through the cost model's tier functions
_IB = next(t for t in H100.tiers if t.name == "infiniband")
IB_BW, IB_LAT = _IB.bandwidth_gbps * 1e9 * _IB.collective_efficiency, _IB.latency_us * 1e-6


def _lay(model, **plan):
    return Layouts.from_plan(resolve(Plan(**plan), model, H100))


def test_stages_trace_to_the_step():
    """Llama 3 8B, tp 8 with sequence parallelism, pp 4 x vpp 2, dp 2 (64 H100s): the stages are 16 devices apart,
    over infiniband. Per micro-batch a stage sends 2 vpp times a micro-batch's 4096 x 4096 bf16 activations / tp;
    the step's pp_comm is m of those, its bubble (pp - 1) / vpp of the mean stage (Narayanan et al. 2021, Sec. 2.2),
    and its parts sum to it."""
    model = load_model("llama-3-8b")
    lay = _lay(model, gpus=64, tp=8, pp=4, vpp=2, micro_batch=1, global_batch=256, seq_len=4096,
               sequence_parallel=True)
    m = lay.num_microbatches[0]
    assert m == 128
    us = unit_seconds(model, H100, lay)
    sends = pipeline_sends(model, H100, lay, us.rates)
    one = IB_LAT + 4096 * 4096 * 2 / 8 / IB_BW
    assert sends.seconds[0] == pytest.approx(2 * 2 * one, rel=1e-12)
    assert sends.calls[0] == 4.0 and sends.link[2][0].startswith("infiniband")
    st = Stages.of(model, lay)
    slow = slowest_stage(model, lay, st, us, sends)
    step = evaluate(model, H100, lay)
    assert step.time["pp_comm"][0] == pytest.approx(m * sends.seconds[0], rel=1e-12)
    assert step.time["bubble"][0] == pytest.approx(3 / 2 * slow.mean_device[0], rel=1e-9)
    assert step.stage_time_max[0] == slow.seconds[0]
    parts = sum(v for k, v in step.time.items() if k != "total")
    assert parts[0] == pytest.approx(step.step_time_s[0], rel=1e-12)


def test_the_reduced_stage_and_its_overlap_window():
    """Llama 3 8B over pp 4 (tp 8): the stage with most parameters is the last, its 8 layers (each qkv 4096 x 6144,
    out 4096 x 4096 and the SwiGLU MLP 3 x 4096 x 14336 over tp, its two RMSNorms whole) with the untied LM head
    (128256 x 4096 over tp) and the final norm; the first's embedding equals the head, and it has no final norm.
    Interleaving's chunk passes after the first of the earlier chunks: min((vpp - 1) pp, m vpp - 1) = 4."""
    model = load_model("llama-3-8b")
    lay = _lay(model, gpus=64, tp=8, pp=4, vpp=2, micro_batch=1, global_batch=256, seq_len=4096,
               sequence_parallel=True)
    st = Stages.of(model, lay)
    r = reduced_stage(model, lay, st, unit_seconds(model, H100, lay))
    layer = (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336) / 8 + 2 * 4096
    assert r.big[0] == 2 and r.params[0] == 8 * layer + 128256 * 4096 / 8 + 4096
    assert r.layers[0] == 8 and r.expert_params[0] == 0.0
    assert chunks_after(lay)[0] == 4
