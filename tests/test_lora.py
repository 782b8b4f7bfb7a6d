"""LoRA fine-tuning on a frozen base (Plan.lora, spec.plan.finetune, cost.memory.frozen), checked by hand.

Llama 2 70B (h 8192, 64 query and 8 KV heads of 128, ffn 28672, 80 layers) with rank-16 adapters on the
attention projections, MLPerf's llama2_70b_lora setting: per layer the qkv adapter is 16 x (8192 + 10240) and the
output projection's 16 x (8192 + 8192), 557,056 parameters; 80 layers hold 44,564,480 (the trainable count the
MLPerf reference prints for this model).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from perfmodel import Plan, estimate, load_hardware, load_model
from perfmodel.cost.compute.flops import attention_flops_per_token, matmul_params, model_flops_per_token
from perfmodel.cost.memory.frozen import adapter_params
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.comm.compression import GRAD_BYTES
from perfmodel.cost.memory.footprint import layer_activation_bytes, recomputed_share
from perfmodel.errors import InputError
from perfmodel.spec.plan.finetune import LoRA
from perfmodel.spec.plan.layout import resolve

ADAPTERS_PER_LAYER = 16 * (8192 + 10240) + 16 * (8192 + 8192)
LORA = dict(rank=16, base_weights="fp8")


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-2-70b").model_copy(update=dict(max_seq_len=8192))


@pytest.fixture(scope="module")
def mi300x():
    return load_hardware("mi300x-8")


def plan(model, system, **kw):
    base = dict(gpus=8, micro_batch=1, global_batch=8, seq_len=8192, precision="fp8", zero=1, stack="nemo",
                recompute="full", recompute_method="block", recompute_num_layers=21, lora=LORA)
    return resolve(Plan(**{**base, **kw}), model, system)


def test_adapter_count(llama, mi300x):
    lay = Layouts.from_plan(plan(llama, mi300x))
    assert ADAPTERS_PER_LAYER == 557_056
    assert adapter_params(llama, lay)[0] == ADAPTERS_PER_LAYER
    assert 80 * ADAPTERS_PER_LAYER == 44_564_480
    everything = Layouts.from_plan(plan(llama, mi300x, tp=2, lora=dict(rank=8, modules="all")))
    mlp = 8 * (2 * 28672 + 8192) + 8 * (8192 + 28672)  # gate and up as one GEMM, then down
    assert everything.lora.targets == ("qkv", "out_proj", "mlp_in", "mlp_out")
    assert adapter_params(llama, everything)[0] == (ADAPTERS_PER_LAYER / 2 + mlp) / 2


def test_states_train_the_adapters_alone(llama, mi300x):
    """Weights: the base at 1 B (fp8) + the adapters at 2 B; gradients and Adam state (12 B, ZeRO-1 over dp 8) the
    adapters' only."""
    p = plan(llama, mi300x)
    e = estimate(llama, mi300x, p)
    adapters = 80 * ADAPTERS_PER_LAYER
    mem = e.memory_bytes
    assert mem.weights == pytest.approx(e.params * 1.0 + adapters * 2.0, rel=1e-9)
    assert mem.gradients == pytest.approx(adapters * GRAD_BYTES[p.grad_dtype], rel=1e-9)
    assert mem.optimizer == pytest.approx(adapters * 12.0 / 8, rel=1e-9)
    full = estimate(llama, mi300x, plan(llama, mi300x, lora=None))
    assert full.memory_bytes.gradients == pytest.approx(e.params * GRAD_BYTES[p.grad_dtype], rel=1e-9)


def test_the_data_parallel_reduction_carries_the_adapters(llama, mi300x):
    e = estimate(llama, mi300x, plan(llama, mi300x))
    (red,) = [c for c in e.comms if c.name == "dp gradient reduction"]
    assert red.bytes == pytest.approx(80 * ADAPTERS_PER_LAYER * 2.0, rel=1e-9)  # bf16 on the wire


def test_a_frozen_gemm_runs_no_weight_gradient(llama, mi300x):
    """qkv's backward under LoRA is its input gradient alone; adapters add two thin GEMMs with full backward."""
    p = plan(llama, mi300x, precision="bf16", recompute="none", recompute_method="uniform", recompute_num_layers=None)
    ops = {o.name: o for o in estimate(llama, mi300x, p).ops}
    full = {o.name: o for o in estimate(llama, mi300x, p.model_copy(update=dict(lora=None))).ops}
    assert ops["qkv"].fwd_s == full["qkv"].fwd_s
    assert ops["qkv"].bwd_s < 0.6 * full["qkv"].bwd_s  # one GEMM of the two
    assert ops["qkv.lora_a"].fwd_flops == 2 * 8192 * 16 * 8192 and ops["qkv.lora_b"].fwd_flops == 2 * 8192 * 10240 * 16
    assert "qkv.lora_a" not in full and "mlp_in.lora_a" not in ops


def test_model_flops_drop_the_weight_gradients(llama):
    """Per token: 2 x 2 P + 3 A frozen against 6 P + 3 A (P: matmul weights, A: attention)."""
    P, A = matmul_params(llama), attention_flops_per_token(llama, 8192)
    assert model_flops_per_token(llama, 8192, frozen=True) == pytest.approx(4 * P + 3 * A)
    assert model_flops_per_token(llama, 8192) == pytest.approx(6 * P + 3 * A)


def test_frozen_unadapted_linears_keep_no_input(llama, mi300x):
    """mlp_in and mlp_out are frozen and not adapted: their inputs (h and ffn wide, bf16) are not kept."""
    p = plan(llama, mi300x, precision="bf16", recompute="none", recompute_method="uniform", recompute_num_layers=None)
    T = 8192
    kept = layer_activation_bytes(llama, p)
    full = layer_activation_bytes(llama, p.model_copy(update=dict(lora=None)))
    assert float((full - kept)[0]) == pytest.approx(2.0 * T * (8192 + 28672))


def test_block_recompute_reruns_its_layers_only(llama, mi300x):
    """Megatron-LM's block method recomputes 21 of the 80 layers: 21/80 of the uniform method's recompute time."""
    block = plan(llama, mi300x)
    uniform = plan(llama, mi300x, recompute_method="uniform", recompute_num_layers=None)
    assert recomputed_share(llama, Layouts.from_plan(block))[0] == pytest.approx(21 / 80)
    t_block, t_all = estimate(llama, mi300x, block).time_s.recompute, estimate(llama, mi300x, uniform).time_s.recompute
    assert t_block == pytest.approx(t_all * 21 / 80, rel=1e-9)
    pp2 = plan(llama, mi300x, pp=2, global_batch=16)  # 40 layers a stage: 21 of 40
    assert recomputed_share(llama, Layouts.from_plan(pp2))[0] == pytest.approx(21 / 40)


def test_zero3_gathers_the_base_as_stored(llama, mi300x):
    e = estimate(llama, mi300x, plan(llama, mi300x, zero=3))
    by = {(c.name, c.bytes > 1e8): c for c in e.comms}  # the layer's (not the embedding's or head's)
    gather, scatter = by["zero3 weight all-gather", True], by["zero3 gradient reduce-scatter", False]
    assert scatter.bytes == pytest.approx(ADAPTERS_PER_LAYER * 2.0, rel=1e-9)  # bf16 on the wire
    per_layer = llama.matmul_params_per_layer() + 2 * llama.norm_params()
    assert gather.bytes == pytest.approx(per_layer * 1.0, rel=1e-6)  # fp8: 1 B each


def test_bad_lora_input(llama, mi300x):
    with pytest.raises(InputError, match=r"lora.rank = 9000 exceeds llama-2-70b's hidden size 8192"):
        plan(llama, mi300x, lora=dict(rank=9000))
    with pytest.raises(InputError, match="modules"):
        Plan(micro_batch=1, global_batch=8, seq_len=8192, lora=dict(rank=16, modules="mlp"))


@pytest.mark.parametrize("flags, message", [
    (["--lora-modules", "all"], "--lora-modules needs --lora-rank R"),
    (["--lora-rank", "0"], "--lora-rank"),
])
def test_cli_refuses_bad_lora_flags(flags, message):
    cmd = [sys.executable, "-m", "perfmodel", "predict", "--model", "llama-2-7b", "--hardware", "dgx-h100",
           "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "4096",
           *flags]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr


def test_cli_prices_a_lora_plan():
    cmd = [sys.executable, "-m", "perfmodel", "predict", "--model", "llama-2-7b", "--hardware", "dgx-h100",
           "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "4096",
           "--lora-rank", "16", "--format", "json"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert '"lora"' in run.stdout and '"rank": 16' in run.stdout
    assert np.isfinite(float(run.stdout.split('"step_time_s":')[1].split(",")[0]))


@pytest.mark.parametrize("to", ["megatron", "torchtitan", "deepspeed", "maxtext"])
def test_no_export_target_drops_the_adapters(to):
    """An exported LoRA plan would train every weight: another job. Every target refuses it, naming the field."""
    from perfmodel.export.checks.spread import maxtext_plan_file
    from perfmodel.export.targets import export, nearest_updates

    pf = maxtext_plan_file("v7-fp8")
    pf = pf.model_copy(update={"plan": pf.plan.model_copy(update={"lora": LoRA(rank=16)})})
    for call in (lambda: export(pf, to), lambda: nearest_updates(pf, to, None)):
        with pytest.raises(InputError, match=rf"plan.lora = rank 16: {to}'s training configuration has no LoRA"):
            call()


def test_a_lora_plan_file_keeps_megatron_placements(tmp_path):
    """PaSE's tables price full training: a LoRA plan file keeps Megatron-LM's placements and says why."""
    out = tmp_path / "lora.json"
    cmd = [sys.executable, "-m", "perfmodel", "predict", "--model", "llama-2-7b", "--hardware", "dgx-h100",
           "--gpus", "8", "--tp", "2", "--pp", "1", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "4096",
           "--lora-rank", "16", "--save-plan", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    from perfmodel.spec.plan.file import load_plan_file

    pf = load_plan_file(out)
    assert pf.plan.lora.rank == 16 and pf.placements == [] and pf.placement_cost is None
    assert "PaSE does not price LoRA" in pf.created_by


def test_zero3_reduces_nothing_for_a_frozen_embedding_and_head(llama, mi300x):
    """Under LoRA the embedding and head have no gradient: their ZeRO-3 reduce-scatter is not run (no call, no
    latency); their gathers are."""
    e = estimate(llama, mi300x, plan(llama, mi300x, zero=3))
    names = [c.name for c in e.comms]
    assert "zero3 weight all-gather (embedding)" in names and "zero3 weight all-gather (head)" in names
    assert "zero3 gradient reduce-scatter (embedding)" not in names and "zero3 gradient reduce-scatter (head)" not in names
