"""MoE runs that ran, read so that they fit: Megatron-Bridge's DeepSeek-V3 layout and optimizer state,
fp8-stored weights under NeMo / Bridge fp8 recipes (Plan.fp8_params), a recipe's micro-batch where a table row's
batch columns disagree, NeMo AutoModel's bf16 loss and fused expert activation. Values checked by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from perfmodel import load_hardware, load_model
from perfmodel.cost.estimate import estimate
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.memory.footprint import layer_gemm_params, loss_temporary_bytes, stage_memory
from perfmodel.cost.memory.stack_kept import eager_kept_bytes
from perfmodel.errors import InputError
from benchmarks.evals.published.moe_runs import bridge_stage_layers, fp8_params_of, moe_to_case
from perfmodel.spec.plan.layout import Plan, resolve

GIB = 2**30


def _row(**kw) -> pd.Series:
    """A MoE CSV row (published_moe_runs_dev.csv's columns) with what a test states."""
    base = dict(row_id="X", source_group="g", row_type="training_run", trust="A", cp=1, etp=None, vpp=None,
                recompute="not stated in table", dispatcher="not stated in table", grad_accum=None,
                iter_time_s=10.0, tokens_per_s_per_gpu=None, tflops_per_gpu=None, mfu_pct=None,
                tokens_per_s_total=None)
    return pd.Series(base | kw)


# M057 of the MoE dev set: the Megatron-Bridge 26.04.01 table's DeepSeek-V3 row on 256 GB300
DSV3_GB300 = dict(model="DeepSeek-V3", seq_len=4096, gpu_type="GB300 (NVL72)", n_gpus="256", tp=1, pp=2, ep="32",
                  vpp=8, micro_batch=2, global_batch=4096, grad_accum=16, precision="MXFP8",
                  framework="NeMo 26.04.01 container (Megatron-Bridge / Megatron-Core)", iter_time_s=13.128)


@pytest.mark.parametrize("pp, vpp, stages", [
    (16, 1, [4] * 15 + [1]),  # 'E' + 4 | 4 x 14 | 1 + MTP + loss
    (8, 2, [8] * 7 + [5]),  # chunks 0..7 then 8..15 of the 16: the last stage holds chunks 7 (4) and 15 (1)
    (4, 4, [16, 16, 16, 13]),
    (2, 8, [32, 29]),  # GB300's "Et*4|(t*4|)*14tmL": stage 1 holds seven chunks of 4 and the last of 1
    (8, 1, [8] * 7 + [5]),
    (4, 1, [16, 16, 16, 13]),
])
def test_bridge_deepseek_layout(pp, vpp, stages):
    """set_deepseek_v3_pipeline_model_parallel_layout's map (Bridge recipes/deepseek/deepseek_v3.py @v0.4.0), summed
    per stage; 61 layers every time."""
    assert bridge_stage_layers("deepseek-v3", pp, vpp) == stages
    assert sum(stages) == 61


def test_bridge_layout_only_where_the_recipe_sets_one():
    assert bridge_stage_layers("deepseek-v3", 2, 1) is None  # not in the map: Megatron-Core's split
    assert bridge_stage_layers("kimi-k2", 16, 1) is None


def test_deepseek_row_reads_the_recipe():
    """M057 states tp 1, pp 2, vpp 8, ep 32, mb 2, MXFP8: read with Bridge's layout [32, 29], the recipe's bf16 Adam
    moments and gradients, MXFP8-stored weights; it ran, and fits."""
    case = moe_to_case(_row(**DSV3_GB300))
    assert not case.reason
    p = case.plan
    assert (p.tp, p.pp, p.vpp, p.ep, p.micro_batch) == (1, 2, 8, 32, 2)
    assert p.stage_layers == [32, 29]
    assert (p.moment_dtype, p.grad_dtype, p.fp8_recipe, p.fp8_params) == ("bf16", "bf16", "mxfp8", True)
    assert estimate(case.model, case.system, p).memory_verdict == "fits"


def test_fp8_params_of_recipes():
    """fp8_param_gather is set by the per-tensor and MXFP8 recipes, not by blockwise (subchannel) nor NVFP4, and
    only NeMo / Bridge containers run those recipes."""
    assert fp8_params_of("megatron", "fp8", "mxfp8") and fp8_params_of("megatron", "fp8", "tensorwise")
    assert not fp8_params_of("megatron", "fp8", "blockwise")
    assert not fp8_params_of("megatron", "fp4", None)
    assert not fp8_params_of("torchtitan", "fp8", "mxfp8")


def _mem(precision="fp8", fp8_recipe="mxfp8", **kw):
    model, system = load_model("llama-3-8b"), load_hardware("dgx-b200")
    plan = resolve(Plan(gpus=8, micro_batch=1, global_batch=64, seq_len=4096, zero=1, stack="megatron-core",
                        precision=precision, fp8_recipe=fp8_recipe, **kw), model, system)
    lay = Layouts.from_plan(plan)
    out, _ = stage_memory(model, system, lay)
    return model, lay, {k: float(v[0]) for k, v in out.items()}


def test_fp8_params_drop_the_bf16_gemm_weights():
    """Llama 3 8B, 32 layers, MXFP8 on one stage: without fp8_params the bf16 weights and two cached MXFP8 copies
    (2 x (1 + 1/32) B per GEMM parameter); with them the copies are the weights and no bf16 copy of the GEMM weights
    is held: 2 B per GEMM parameter less allocated, the copies moved from transient into weights."""
    model, lay, cached = _mem()
    _, _, stored = _mem(fp8_params=True)
    gemm = 32 * float(layer_gemm_params(model, lay)[0])
    copies = 2 * (1 + 1 / 32) * gemm
    assert cached["allocated"] - stored["allocated"] == pytest.approx(2.0 * gemm)
    assert stored["weights"] - cached["weights"] == pytest.approx(copies - 2.0 * gemm)
    assert cached["transient"] - stored["transient"] == pytest.approx(copies)
    assert cached["between_steps"] - stored["between_steps"] == pytest.approx(2.0 * gemm)


def test_fp8_params_need_fp8():
    with pytest.raises(InputError, match="fp8_params"):
        _mem(precision="bf16", fp8_recipe=None, fp8_params=True)


GPT_OSS_H100 = dict(model="GPT-OSS-120B", seq_len=4096, gpu_type="H100-SXM5-80GB (DGX)", n_gpus="64", tp=1, pp=4,
                    ep="8", vpp=1, micro_batch=4, global_batch=512, precision="BF16",
                    framework="NeMo 25.11 container (Megatron-Bridge / Megatron-Core)", iter_time_s=5.82)


def test_inconsistent_batch_takes_the_recipes_micro_batch():
    """25.11's GPT-OSS 120B H100 row (M177) states MBS 4 and GA 2 with pp 4 on 64 GPUs: 2 x 16 x 4 = 128, not its
    GBS 512; the recipe it ran (workload_base_configs.py @v0.2.0) sets micro_batch_size 1. A row whose GA agrees
    (8 x 16 x 4 = 512) keeps its own."""
    assert moe_to_case(_row(**GPT_OSS_H100, grad_accum=2)).plan.micro_batch == 1
    assert moe_to_case(_row(**GPT_OSS_H100, grad_accum=8)).plan.micro_batch == 4


def test_llama4_scout_alias():
    """torchtitan's 'Llama4-Scout' rows name the llama-4-scout preset; without a global batch they are refused for
    that, not for the model."""
    case = moe_to_case(_row(model="Llama4-Scout", seq_len=8192, gpu_type="GB200 (64 nodes x 4)", n_gpus="256", tp=None,
                            pp=None, ep="16", micro_batch=10, global_batch=None, precision="BF16",
                            framework="torchtitan + torchao, torch.compile"))
    assert case.reason == "gpus, global or micro batch, or sequence length not stated"


def _automodel_lay(stack):
    model, system = load_model("gpt-oss-120b"), load_hardware("dgx-h100")
    plan = resolve(Plan(gpus=64, ep=64, micro_batch=2, global_batch=512, seq_len=4096, zero=3, stack=stack),
                   model, system)
    return model, Layouts.from_plan(plan)


def test_automodel_bf16_loss():
    """MaskedCrossEntropy(fp32_upcast=False): 6 B per logit at the backward, 4 of them counted kept with the head:
    (6 - 4) x 8192 tokens x 201088 vocabulary = 3.07 GiB of loss temporaries (torchtitan's fp32 loss: 12 - 4)."""
    model, lay = _automodel_lay("nemo-automodel@25.10")
    assert float(loss_temporary_bytes(model, lay)[0]) == pytest.approx(2 * 8192 * 201088)
    model, lay = _automodel_lay("torchtitan")
    assert float(loss_temporary_bytes(model, lay)[0]) == pytest.approx(8 * 8192 * 201088)


def test_weighted_expert_activation_keeps_no_eager_copy():
    """GPT-OSS has no dense MLP: torchtitan's eager SiLU keeps 2 B x 2880 per routed copy (8192 tokens x top-4),
    AutoModel's compiled weighted activation (moe_probs_in_experts) nothing."""
    model, lay = _automodel_lay("torchtitan")
    assert float(eager_kept_bytes(model, lay)[0]) == pytest.approx(2 * 2880 * 8192 * 4)
    model, lay = _automodel_lay("nemo-automodel@25.10")
    assert float(eager_kept_bytes(model, lay)[0]) == 0.0
