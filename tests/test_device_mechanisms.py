"""The step as the GPU runs it, each mechanism against numbers worked by hand:

- GEMMs with a leading dimension off 16 bytes (GPT-2's vocabulary of 50257) run at the part's measured
  alignment-1 rates; a stack that pads the vocabulary (Megatron-LM, llm.c) keeps the aligned kernels;
- torchtitan's per-op checkpointing rebuilds wk, wo and w3 (their share of the fused GEMMs) and their FLOPs;
- an eager PyTorch softmax moves the measured bytes per score, Megatron's fused kernel 4 / 6 B;
- DeepSpeed's ZeRO-3 holds at most stage3_max_live_parameters gathered (never less than the largest module);
- the dense runs reader names torchtitan's selective modes as the small-scale reader does;
- a device's local experts in one grouped GEMM take the part's measured slowdown over one dense GEMM of their rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfmodel.cost.estimate import estimate
from perfmodel.cost.compute.flops import recompute_flops_per_token
from perfmodel.cost.compute.grouped_gemm import grouped_slowdown
from perfmodel.cost.compute.kernels import EAGER_SOFTMAX_BYTES, softmax_bytes, unaligned
from perfmodel.cost.compute.operator_table import per_op_share
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan

GPT2 = load_model("gpt2-124m")
LLAMA = load_model("llama-3-8b")
H100 = load_hardware("dgx-h100")


def _op(e, name):
    return next(r for r in e.ops if r.name == name)


def test_alignment_rule():
    # bf16: 8 elements = 16 B; fp8: 16 elements
    assert unaligned(50257, 768, "bf16") and not unaligned(50304, 768, "bf16")
    assert unaligned(3072, 769, "bf16") and not unaligned(4096, 4096, "bf16")
    assert unaligned(50312, 768, "fp8") and not unaligned(50304, 768, "fp8")
    assert list(unaligned(np.array([50257, 50304]), 768, "bf16")) == [True, False]


def test_gpt2_lm_head_runs_at_the_measured_unaligned_rates(no_host):
    """GPT-2 124M, micro-batch 8 x 1024 on one H100: the LM head's GEMMs are 2 x 8192 x 50257 x 768 = 632.4 GFLOP
    each, at 97.6 (forward), 142.3 and 150.8 TFLOP/s (backward) = 6.48 ms and 4.44 + 4.19 ms."""
    rates = H100.accelerator.unaligned_matmul_tflops
    assert rates == {"forward": 97.6, "input_grad": 142.3, "weight_grad": 150.8}
    plan = dict(gpus=1, micro_batch=8, global_batch=8, seq_len=1024)
    # at the rates' own clock: the power model's clock for this step divides every GEMM alike (tests/test_power.py)
    fixed = H100.model_copy(update={"accelerator": H100.accelerator.model_copy(update={"power": None})})
    torch_ = estimate(GPT2, fixed, Plan(**plan, stack="plain-torch"))
    assert torch_.time_s.total < estimate(GPT2, H100, Plan(**plan, stack="plain-torch")).time_s.total
    flops = 2 * 8192 * 50257 * 768
    head = _op(torch_, "lm_head")
    assert head.fwd_s == pytest.approx(flops / 97.6e12, rel=1e-6)
    assert head.bwd_s == pytest.approx(flops / 142.3e12 + flops / 150.8e12, rel=1e-6)
    assert "alignment-1" in head.priced_by
    # Megatron-LM pads the vocabulary to a multiple of 128 x tp (50304 rows): the aligned table kernels, > 5x faster
    mega = _op(estimate(GPT2, fixed, Plan(**plan, stack="megatron-core")), "lm_head")
    assert "alignment-1" not in mega.priced_by and mega.fwd_s < head.fwd_s / 5
    assert mega.fwd_flops == pytest.approx(2 * 8192 * 50304 * 768)


def test_no_measured_rate_prices_unaligned_gemms_as_aligned(no_host):
    b200 = load_hardware("dgx-b200")
    assert b200.accelerator.unaligned_matmul_tflops == {}
    e = estimate(GPT2, b200, Plan(gpus=1, micro_batch=8, global_batch=8, seq_len=1024, stack="plain-torch"))
    assert "alignment-1" not in _op(e, "lm_head").priced_by


def test_per_op_recomputes_wk_wo_and_w3():
    # Llama 3 8B: q 4096, kv 1024 -> wk is 1024 / (4096 + 2048) = 1/6 of the fused qkv GEMM; gated MLP: w3 half
    assert per_op_share("qkv", LLAMA) == pytest.approx(1 / 6)
    assert per_op_share("out_proj", LLAMA) == 1.0
    assert per_op_share("mlp_in", LLAMA) == 0.5 and per_op_share("mlp_out", LLAMA) == 0.0
    # GPT-2 (GeLU): wq wk wv wo fc1 fc2 -> wk, wo, fc2; MHA: wk is a third of qkv
    assert per_op_share("qkv", GPT2) == pytest.approx(1 / 3)
    assert (per_op_share("mlp_in", GPT2), per_op_share("mlp_out", GPT2)) == (0.0, 1.0)
    # FLOPs: 2 per weight of wk (1024 x 4096), wo (4096 x 4096) and w3 (14336 x 4096), 32 layers
    want = 2 * 32 * (1024 * 4096 + 4096 * 4096 + 14336 * 4096)
    assert recompute_flops_per_token(LLAMA, 8192, "per-op") == pytest.approx(want)


def test_per_op_recompute_time_is_the_share_of_each_gemm(no_host):
    plan = dict(gpus=8, zero=3, micro_batch=1, global_batch=8, seq_len=8192, stack="torchtitan")
    e = estimate(LLAMA, H100, Plan(**plan, recompute="per-op"))
    for name, share in (("qkv", 1 / 6), ("out_proj", 1.0), ("mlp_in", 0.5)):
        op = _op(e, name)
        assert op.recompute_s == pytest.approx(share * op.fwd_s, rel=1e-6), name
    assert _op(e, "mlp_out").recompute_s == 0.0


def test_eager_softmax_moves_the_measured_bytes(no_host):
    assert softmax_bytes(False) == (4.0, 6.0) and softmax_bytes(True) == EAGER_SOFTMAX_BYTES == (43.0, 57.0)
    plan = dict(gpus=1, micro_batch=8, global_batch=8, seq_len=1024, attention="unfused")
    scores = 8 * 12 * 1024 * 1024
    rate = H100.accelerator.hbm_bandwidth * H100.efficiency.memory_bandwidth
    drop = 5 if GPT2.dropout > 0 else 0  # the dropout's mask, 5 B each way (GPT-2: dropout 0.1)
    eager = _op(estimate(GPT2, H100, Plan(**plan, stack="nanogpt")), "attn_softmax")
    assert eager.fwd_s == pytest.approx(scores * (43 + drop) / rate, rel=1e-6)
    assert eager.bwd_s == pytest.approx(scores * (57 + drop) / rate, rel=1e-6)
    fused = _op(estimate(GPT2, H100, Plan(**plan, stack="megatron-core")), "attn_softmax")
    assert fused.fwd_s == pytest.approx(scores * (4 + drop) / rate, rel=1e-6)
    compiled = _op(estimate(GPT2, H100, Plan(**plan, stack="nanogpt", compile="model")), "attn_softmax")
    assert compiled.fwd_s == pytest.approx(fused.fwd_s)  # Inductor fuses the eager chain again


def test_deepspeed_zero3_holds_its_live_parameter_cap(no_host):
    """Llama 3 8B, ZeRO-3 over 8: torchtitan's FSDP gathers a whole block twice (218.1M parameters each, bf16)
    and its fp32 gradients; DeepSpeed at most 1e9 parameters gathered (436.2M: the two blocks are fewer), and the
    largest module's (w1 and w3 fused: 117.4M) fp32 gradients (both stacks' default grad_dtype)."""
    plan = dict(gpus=8, zero=3, micro_batch=1, global_batch=8, seq_len=4096)
    titan = estimate(LLAMA, H100, Plan(**plan, stack="torchtitan")).memory_bytes
    ds = estimate(LLAMA, H100, Plan(**plan, stack="deepspeed")).memory_bytes
    block = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    module = 2 * 14336 * 4096
    # the transient difference is the copies' alone (the loss temporaries differ by stack too: compare copies)
    from perfmodel.cost.layouts import Layouts
    from perfmodel.cost.memory.footprint import largest_module_params, zero_copy_bytes
    from perfmodel.spec.plan.layout import resolve

    for stack, gathered, grads in (("torchtitan", 2 * block, block * 4), ("deepspeed", min(2 * block, 1e9), module * 4)):
        lay = Layouts.from_plan(resolve(Plan(**plan, stack=stack), LLAMA, H100))
        assert largest_module_params(LLAMA, lay)[0] == module
        got = zero_copy_bytes(lay, np.array([32 * block + 2 * 128256 * 4096.0]), np.array([block * 1.0]),
                              module=np.array([module * 1.0]))[0]
        assert got == pytest.approx(gathered * 2 + grads), stack
    assert ds.transient < titan.transient


def test_dense_reader_maps_torchtitan_selective_modes():
    from perfmodel.calibrate.runs.table import load_cases, torchtitan_selective

    assert torchtitan_selective("selective op", 32) == {"recompute": "per-op"}
    assert torchtitan_selective("selective layer", 32) == dict(recompute="full", recompute_method="block",
                                                               recompute_num_layers=16)
    assert torchtitan_selective("full", 32) is None
    cases = {c.row_id: c for c in load_cases("benchmarks/data/published_runs_dev.csv")}
    assert cases["R0532"].plan.recompute == "per-op"  # Llama 2 70B 'selective op': ran, and fits
    assert cases["R0526"].plan.recompute_num_layers == 16


def test_a_gpu_spec_prices_its_host_a_cpu_spec_its_fitted_launches():
    """cost.host.launch_queue.host_rates: on a GPU the stack's counted calls at the system's host (System.host_cpu), and a
    spec's fitted per-launch costs (host_costs) play no part; a GPU system naming no host prices none. On a CPU
    spec the fitted costs (calibrate.host.costs prices its probes with zero costs: zero prices nothing)."""
    from perfmodel.cost.host.launch_queue import host_rates
    from perfmodel.cost.layouts import Layouts
    from perfmodel.spec.hardware.system import HostCosts
    from perfmodel.spec.plan.layout import resolve
    from perfmodel.spec.stack.profile import load_stack

    plan = resolve(Plan(gpus=1, micro_batch=1, global_batch=1, seq_len=1024, stack="plain-torch"), GPT2, H100)
    lay, profile = Layouts.from_plan(plan), load_stack("plain-torch")
    costs = lambda s, k: s.model_copy(update={"host_costs": HostCosts(stack="plain-torch", kernel_s=k,  # noqa: E731
                                                                        collective_s=0.0, probes=[])})
    gpu = host_rates(H100, profile, lay, GPT2)
    assert gpu.priced and gpu.kernel_s == 0 and not gpu.serial and "xeon-8480c" in gpu.source
    assert host_rates(costs(H100, 9.2e-5), profile, lay, GPT2) == gpu  # the fitted costs are a CPU's
    assert not host_rates(H100.model_copy(update={"host_cpu": None}), profile, lay, GPT2).priced
    cpu = load_hardware(Path(__file__).parent / "fixtures" / "cpu-test.yaml")
    assert not host_rates(costs(cpu, 0.0), profile, lay, GPT2).priced
    fitted = host_rates(costs(cpu, 9.2e-5), profile, lay, GPT2)
    assert fitted.kernel_s == 9.2e-5 and fitted.serial


@pytest.mark.parametrize("overlap", [True, False])
def test_search_prices_the_tp_overlap_it_writes(overlap):
    """The ranked table and the plan the search writes say the same step: the job's tp_comm_overlap reaches the
    layouts it prices (it once priced the stack's default and wrote the job's)."""
    from perfmodel.search import search

    result = search(LLAMA, H100, 16, 32, 4096, space={"tp": [4], "pp": [1]}, tp_comm_overlap=overlap)
    plan = result.plan(0)
    assert plan.tp_comm_overlap is overlap and plan.sequence_parallel
    assert result.columns["step_time_s"][0] == pytest.approx(estimate(LLAMA, H100, plan).step_time_s, rel=1e-9)


def test_grouped_slowdown_interpolates_the_measured_ratios_in_log_tokens():
    curve = H100.accelerator.grouped_gemm_slowdown
    fwd, dgrad, wgrad = grouped_slowdown(curve, np.array([1024, 724.077, 50, 1e6, 1024]), np.array([16, 8, 4, 4, 1]))
    assert list(fwd[[0, 2, 3, 4]]) == pytest.approx([1.117, 1.824, 1.076, 1.0])  # measured point, ends held; g=1
    assert fwd[1] == pytest.approx((1.165 + 1.117) / 2, rel=1e-4)  # sqrt(512 * 1024): half way in log tokens
    assert (dgrad[0], wgrad[0]) == pytest.approx((1.114, 1.248))
    assert [r.tolist() for r in grouped_slowdown(None, 128, 8)] == [1.0, 1.0, 1.0]


def test_expert_gemms_take_the_measured_grouped_slowdown(no_host):
    """GPT-OSS-120B on 8 H100, ep 8, micro-batch 1 x 4096, bf16: 16 local experts, each on 8 x 4096 x 4 / 128 = 1024
    routed tokens (balanced): forward x 1.117, input gradient x 1.114, weight gradient x 1.248 over the dense
    pricing; fp8 keeps the dense pricing (no grouped fp8 kernel of the stacks' kind measured)."""
    model = load_model("gpt-oss-120b")
    h100 = H100.model_copy(update={"accelerator": H100.accelerator.model_copy(update={"power": None})})  # one clock
    plain = h100.model_copy(update={"accelerator": h100.accelerator.model_copy(
        update={"grouped_gemm_slowdown": None})})
    plan = Plan(gpus=8, ep=8, micro_batch=1, global_batch=8, seq_len=4096, stack="megatron-core")
    measured, dense = (_op(estimate(model, hw, plan), "experts_in") for hw in (h100, plain))
    assert "grouped-GEMM slowdown" in measured.priced_by and "grouped" not in dense.priced_by
    assert measured.fwd_s == pytest.approx(dense.fwd_s * 1.117, rel=1e-6)
    # the backward is the input and weight gradients, each at its own ratio: between the two
    assert dense.bwd_s * 1.114 < measured.bwd_s < dense.bwd_s * 1.248
    fp8 = plan.model_copy(update={"precision": "fp8"})
    assert _op(estimate(model, h100, fp8), "experts_in").fwd_s == pytest.approx(
        _op(estimate(model, plain, fp8), "experts_in").fwd_s)


def test_autocast_casts_each_linear_weight_bias_and_fp32_input(no_host):
    """The executor (plain-torch) trains fp32 parameters under autocast: GPT-2 350M (hidden 1024), micro-batch 8 x 1024 on one
    H200. qkv: the wq, wk, wv weights and biases (3072 x 1024 + 3072) and three casts of the first norm's fp32
    output (3 x 8192 x 1024); mlp_out: its weight and bias alone (1024 x 4096 + 1024), its input already bf16; both at
    6 bytes per element, forward and backward. Megatron-Core keeps bf16 parameters: no casts."""
    model, h200 = load_model("gpt2-350m"), load_hardware("dgx-h200")
    plan = dict(gpus=1, micro_batch=8, global_batch=8, seq_len=1024)
    e = estimate(model, h200, Plan(**plan, stack="plain-torch"))
    qkv, out = _op(e, "qkv.autocast"), _op(e, "mlp_out.autocast")
    qkv_elements = 3072 * 1024 + 3072 + 3 * 8192 * 1024
    out_elements = 1024 * 4096 + 1024
    assert qkv.fwd_s / out.fwd_s == pytest.approx(qkv_elements / out_elements, rel=1e-6)
    # backward: the same casts back, and autograd joins the three readers' fp32 input gradients twice (12 B each)
    joins = 2 * 8192 * 1024
    assert qkv.bwd_s / qkv.fwd_s == pytest.approx((6 * qkv_elements + 12 * joins) / (6 * qkv_elements), rel=1e-6)
    assert out.bwd_s == pytest.approx(out.fwd_s) and qkv.kind == "memory"
    assert _op(e, "mlp_in.autocast").fwd_s / out.fwd_s == pytest.approx(
        (4096 * 1024 + 4096 + 8192 * 1024) / out_elements, rel=1e-6)  # GELU's one in-projection reads norm2
    assert not any(o.name.endswith(".autocast") for o in estimate(model, h200, Plan(**plan, stack="megatron-core")).ops)


def test_eager_autocast_keeps_an_fp32_stream_and_torch_reduces_bias_gradients(no_host):
    """Eager plain-torch (fp32 parameters under autocast) on one H200, GPT-2 350M, micro-batch 8 x 1024: the norms
    read and write fp32 (8 / 12 B per element against bf16's 4 / 6), the residual adds fp32 + bf16 -> fp32 (10 B, +1
    for GPT-2's dropout mask) and their backward casts down and joins two fp32 gradients (6 + 12 B), the loss casts
    the logits up and back (14 / 18 B). Each biased linear's bias gradient is a reduction reading its output
    gradient once (2 B per element of tokens x out features). nanoGPT compiled (its default): the casts fuse, bf16
    bytes, and only the weights' casts stay. Megatron-Core (bf16 parameters, the bias gradient in the GEMM's
    epilogue): neither."""
    model, h200 = load_model("gpt2-350m"), load_hardware("dgx-h200")
    plan = dict(gpus=1, micro_batch=8, global_batch=8, seq_len=1024)
    eager = estimate(model, h200, Plan(**plan, stack="plain-torch"))
    core = estimate(model, h200, Plan(**plan, stack="megatron-core"))
    compiled = estimate(model, h200, Plan(**plan, stack="nanogpt", compile="model+loss"))
    nano = estimate(model, h200, Plan(**plan, stack="nanogpt"))
    for name, ratio in (("norm1", (8 / 4, 12 / 6)), ("residual1", (11 / 7, 19 / 7)), ("cross_entropy", (14 / 10, 18 / 6))):
        e, c = _op(eager, name), _op(core, name)
        assert (e.fwd_s / c.fwd_s, e.bwd_s / c.bwd_s) == pytest.approx(ratio, rel=1e-6), name
        assert _op(compiled, name).fwd_s == pytest.approx(c.fwd_s, rel=1e-6), name
    tokens = 8 * 1024
    bias = {"qkv": 3 * 1024, "out_proj": 1024, "mlp_in": 4096, "mlp_out": 1024}
    grads = {n: _op(eager, f"{n}.bias_grad") for n in bias}
    assert all(g.fwd_s == 0.0 for g in grads.values())
    assert grads["qkv"].bwd_s / grads["mlp_out"].bwd_s == pytest.approx(3.0, rel=1e-6)
    # 2 B per element at the spec's memory bandwidth: the same seconds as the 8/12 B norm's backward per element
    assert grads["mlp_in"].bwd_s == pytest.approx(_op(eager, "norm1").bwd_s * 4096 * 2 / (1024 * 12), rel=1e-6)
    assert not any(o.name.endswith(".bias_grad") for o in core.ops)
    qkv_weights = 3072 * 1024 + 3072  # nanoGPT's one c_attn reads norm1: one input cast, no join
    assert _op(compiled, "qkv.autocast").fwd_s / _op(nano, "qkv.autocast").fwd_s == pytest.approx(
        qkv_weights / (qkv_weights + tokens * 1024), rel=1e-6)
    assert _op(nano, "qkv.autocast").bwd_s == pytest.approx(_op(nano, "qkv.autocast").fwd_s, rel=1e-6)
    assert _op(nano, "norm1").fwd_s == pytest.approx(_op(eager, "norm1").fwd_s, rel=1e-6)


def test_autocast_gives_the_operator_table_its_bytes():
    """cost.compute.autocast hands the operator table figures, not kernels. nanoGPT eager (fp32 parameters under
    autocast) on an H100, GPT-2 350M at micro-batch 8 x 1024: qkv's casts are its weight and bias (3072 x 1024 +
    3072) and its fp32 input once (one c_attn reads norm1), 6 B per element each way; its bias gradient reads the
    8192 x 3072 output gradient once, 2 B per element, backward only. Megatron-Core (bf16 parameters, the bias
    gradient in the GEMM's epilogue): neither."""
    from perfmodel.cost.compute.autocast import bias_grad_bytes, cast_bytes
    from perfmodel.cost.compute.kernels import Device
    from perfmodel.cost.layouts import Layouts
    from perfmodel.spec.plan.layout import resolve

    model, tokens = load_model("gpt2-350m"), 8 * 1024

    def dev(stack):
        plan = resolve(Plan(gpus=1, micro_batch=8, global_batch=8, seq_len=1024, stack=stack), model, H100)
        return Device(model, H100, Layouts.from_plan(plan))

    nano, core = dev("nanogpt"), dev("megatron-core")
    assert cast_bytes(nano, "qkv", tokens, 3072, 1024) == (3072 * 1024 + 3072 + tokens * 1024, 6.0, 6.0)
    assert bias_grad_bytes(nano, "qkv", tokens, 3072) == (tokens * 3072, 0.0, 2.0)
    assert cast_bytes(core, "qkv", tokens, 3072, 1024) is None and bias_grad_bytes(core, "qkv", tokens, 3072) is None


def test_hopper_loop_clock_is_the_measured_gemm_loop_over_the_table():
    """dgx-h200's and dgx-h100's power model prices a GEMM looping alone at the lent H200's bf16 8192^3 GEMM run back
    to back at the 700 W limit (benchmarks/probes/sustained_clock.py, the last quarter of 75 s) over the H200 kernel table's
    rate for the same shape: 654 / 806 TFLOP/s (cost.power.loop_clock). The A100 (400 W) keeps its end-to-end 0.89
    and no power model; GH200 (another power limit) too."""
    import json

    from benchmarks.probes.sustained_clock import sample_smi, table_rate
    from perfmodel.cost.power import loop_clock

    root = Path(__file__).parents[1]

    run = json.loads((root / "benchmarks/results/device/sustained_h200_8192.json").read_text())
    table_tflops = table_rate("dgx-h200", run["size"])  # what the script prints with --hardware dgx-h200
    assert table_tflops == pytest.approx(806, abs=1) and table_rate("dgx-a100-40gb", 8192) is None
    ratio = run["steady_tflops"] / table_tflops
    for name in ("dgx-h200", "dgx-h100"):
        assert loop_clock(load_hardware(name).accelerator.power) == pytest.approx(ratio, abs=0.005)
    for name in ("dgx-a100-80gb", "gh200"):
        assert load_hardware(name).efficiency.sustained_fraction == 0.89
        assert load_hardware(name).accelerator.power is None
    class Out:  # nvidia-smi's csv rows as the script reads them, a malformed one skipped
        stdout = type("S", (), {"read": lambda self: "2026/11/27 13:40:01.000, 1434, 691.2, 59\nbad line\n"})()

    assert sample_smi(Out) == [{"time": "2026/11/27 13:40:01.000", "sm_mhz": 1434.0, "power_w": 691.2,
                                "temp_c": 59.0}]


def test_a_lora_base_casts_its_frozen_weights_forward_only_and_reduces_no_bias(no_host):
    """Under LoRA the executor freezes every base weight and bias (execute/lora.py): plain-torch's qkv still casts its
    weight, bias and three inputs forward, but casts back only the inputs' gradients (and joins them), and no
    bias gradient is reduced; the fp32 stream's norms are unchanged."""
    model, h200 = load_model("gpt2-350m"), load_hardware("dgx-h200")
    plan = dict(gpus=1, micro_batch=8, global_batch=8, seq_len=1024, stack="plain-torch")
    full = estimate(model, h200, Plan(**plan))
    lora = estimate(model, h200, Plan(**plan, lora=dict(rank=16)))
    weights, inputs, joins = 3072 * 1024 + 3072, 3 * 8192 * 1024, 2 * 8192 * 1024
    q_full, q_lora = _op(full, "qkv.autocast"), _op(lora, "qkv.autocast")
    assert q_lora.fwd_s == pytest.approx(q_full.fwd_s, rel=1e-9)
    assert q_lora.bwd_s / q_full.bwd_s == pytest.approx((6 * inputs + 12 * joins) / (6 * (weights + inputs) + 12 * joins),
                                                        rel=1e-6)
    assert not any(o.name.endswith(".bias_grad") for o in lora.ops)
    assert _op(lora, "norm1").bwd_s == pytest.approx(_op(full, "norm1").bwd_s, rel=1e-9)
