"""Megatron-Core's activation offloading (Plan.activation_offload_layers, Plan.offload_modules; cost.memory.act_offload,
cost.memory.offload.layer_copies) and the importers' reading of it and of FP8 parameters (ingest.megatron.offload)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import perfmodel
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.memory.offload import layer_copies
from perfmodel.errors import InputError
from perfmodel.ingest import read_config
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.plan.layout import Plan, resolve

# Llama 3 70B (hidden 8192, 64 heads of 128, 8 KV heads: q 8192, kv 1024; SwiGLU ffn 28672; no dropout; 80 layers)
# at tp 1, micro-batch 1, 8192 tokens, bf16, flash attention: what one layer keeps for its backward, by hand
# (Korthikanti et al. 2022's terms, cost.compute.operator_table.kept_bytes), T = 8192 tokens:
T, H, Q, KV, F, HEADS = 8192, 8192, 8192, 1024, 28672, 64
NORM1 = QKV_IN = OUT_IN = NORM2 = MLP_IN = 2 * T * H  # 134,217,728 each (out_proj's input: 2 T q, q = h)
ATTN = 2 * T * (Q + 2 * KV) + 4 * HEADS * T  # q, k, v and the fp32 log-sum-exp: 169,869,312
ACT = 2 * T * 2 * F  # SwiGLU's input, gate and up: 939,524,096
MLP_OUT = 2 * T * F  # 469,762,048
LAYER = NORM1 + QKV_IN + ATTN + OUT_IN + NORM2 + MLP_IN + ACT + MLP_OUT  # 2,250,244,096 B


def llama70b(**kw):
    model, system = perfmodel.load_model("llama-3-70b"), load_hardware("gb200-nvl72")
    plan = Plan(tp=1, pp=1, dp=32, zero=3, micro_batch=1, global_batch=256, seq_len=8192, stack="megatron-core", **kw)
    return model, system, plan


def test_layer_bytes_by_hand():
    assert LAYER == 2_250_244_096
    model, system, plan = llama70b()
    from perfmodel.cost.memory.footprint import layer_activation_bytes

    assert layer_activation_bytes(model, Layouts.from_plan(resolve(plan, model, system)))[0] == LAYER


def test_layer_offloading_keeps_l_minus_n_layers_on_the_device():
    """20 of the 80 layers offloaded: the device's activations drop by 20 layers' (TE's DefaultOffloadSynchronizer
    peaks at (L - N) layers), the host holds those 20 x 2,250,244,096 B = 45,004,881,920 B."""
    model, system, plan = llama70b()
    base = perfmodel.estimate(model, system, plan).memory_bytes
    off = perfmodel.estimate(model, system, plan.model_copy(update={"activation_offload_layers": 20})).memory_bytes
    assert base.activations - off.activations == pytest.approx(20 * LAYER, rel=1e-6)
    assert off.host == pytest.approx(45_004_881_920, rel=1e-6)
    assert off.transient == pytest.approx(base.transient, rel=1e-9)


def test_fine_grained_offloading_by_hand():
    """core_attn and attn_proj offloaded: each layer's q, k, v and log-sum-exp and out_proj's input (169,869,312 +
    134,217,728 = 304,087,040 B) leave all 80 layers of the one micro-batch in flight; the device keeps two layers'
    of them (Megatron-Core's margin and the group being reloaded)."""
    model, system, plan = llama70b()
    base = perfmodel.estimate(model, system, plan).memory_bytes
    off = perfmodel.estimate(model, system, plan.model_copy(update={"offload_modules": ["core_attn", "attn_proj"]}))
    o = ATTN + OUT_IN
    assert o == 304_087_040
    assert base.activations - off.memory_bytes.activations == pytest.approx(80 * o, rel=1e-6)
    assert off.memory_bytes.transient - base.transient == pytest.approx(2 * o, rel=1e-6)
    assert off.memory_bytes.host == pytest.approx(80 * o, rel=1e-6)


def test_layer_copies_exposed_where_the_stream_falls_behind():
    """gb200-nvl72's host link 225 GB/s x 0.8: a layer's 2,250,244,096 B take t = 0.012501356 s one way. With 1 ms
    of forward and 2 ms of backward per layer, 20 of 80 layers: 20 t - 78 x 0.001 = 0.172027 s exposed in the
    forward per micro-batch, 20 t - 78 x 0.002 = 0.094027 s in the backward, over the 80 layers' unit."""
    model, system, plan = llama70b(activation_offload_layers=20)
    lay = Layouts.from_plan(resolve(plan, model, system))
    c = layer_copies(model, system, lay, np.array([0.001]), np.array([0.002]))
    t = LAYER / (225e9 * 0.8)
    assert t == pytest.approx(0.012501356, rel=1e-6)
    assert c.fwd[0] * 80 == pytest.approx(20 * t - 0.078, rel=1e-9)
    assert c.bwd[0] * 80 == pytest.approx(20 * t - 0.156, rel=1e-9)
    hidden = layer_copies(model, system, lay, np.array([0.02]), np.array([0.04]))  # t < f: the copies hide
    assert hidden.exposed[0] == 0.0


@pytest.mark.parametrize("update, needle", [
    ({"activation_offload_layers": 80}, "valid: 0..79"),
    ({"activation_offload_layers": 4, "recompute": "selective"}, "recompute = selective"),
    ({"offload_modules": ["attn_proj"]}, "add core_attn"),
    ({"offload_modules": ["expert_fc1"]}, "MoE"),
    ({"offload_modules": ["core_attn"], "activation_offload_layers": 4}, "one of them"),
])
def test_megatron_core_refusals(update, needle):
    model, system, plan = llama70b()
    with pytest.raises(InputError, match=needle):
        resolve(plan.model_copy(update=update), model, system)


SMALL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
         "--global-batch-size 8 --vocab-size 1024 --bf16 ")


def imported(tmp_path: Path, extra: str):
    f = tmp_path / "args.txt"
    f.write_text(SMALL + extra + "\n")
    return read_config([f], "megatron")


def test_megatron_lm_arguments(tmp_path):
    # --cpu-offloading-num-layers 1 turns cpu_offloading on (arguments.py:1865-1866 at 2a75ac1): plan field 1
    assert imported(tmp_path, "--cpu-offloading-num-layers 1").plan["activation_offload_layers"] == 1
    fine = imported(tmp_path, "--fine-grained-activation-offloading --offload-modules core_attn attn_proj")
    assert fine.plan["offload_modules"] == ["core_attn", "attn_proj"]
    assert "offload_modules" not in imported(tmp_path, "--offload-modules core_attn").plan  # the switch is off
    gather = imported(tmp_path, "--fp8-format hybrid --use-distributed-optimizer --fp8-param-gather")
    assert gather.plan["fp8_params"] is True
    with pytest.raises(InputError, match="--use-distributed-optimizer"):
        imported(tmp_path, "--fp8-format hybrid --fp8-param-gather")


def test_bridge_legacy_formats_turn_cpu_offloading_on():
    """Bridge's older perf scripts set cpu_offloading beside the layers: c3e43e6 overrides.py:124-127 for a
    WorkloadBaseConfig (llama31_workload_base_configs.py: GB200 FP8-CS states cpu_offloading_num_layers=92), 8cec56d
    helpers.py:101-105 for a perf_matrix entry (llama31_405b_llm_pretrain.yaml gb200.num_gpus_128 fp8_cs: 95)."""
    corpus = Path(__file__).parent / "fixtures" / "corpus" / "bridge"
    table = read_config([corpus / "2025-12" / "llama" / "llama31_workload_base_configs.py"], "bridge",
                        "LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_BASE_CONFIG")
    assert (table.plan["activation_offload_layers"], table.plan["pp"]) == (92, 1)
    matrix = read_config([corpus / "2025-09" / "llama3" / "llama31_405b_llm_pretrain.yaml"], "bridge",
                         "gb200.num_gpus_128.fp8_cs")
    assert matrix.plan["activation_offload_layers"] == 95
    plain = read_config([corpus / "2025-09" / "llama3" / "llama31_405b_llm_pretrain.yaml"], "bridge",
                        "gb200.num_gpus_128.bf16")
    assert "activation_offload_layers" not in plain.plan
