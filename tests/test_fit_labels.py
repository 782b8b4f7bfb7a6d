"""Fit labels: the layouts the frameworks publish as running, imported through perfmodel.ingest
(benchmarks.evals.published.fit_labels). The values below are read by hand from the label's files, not from the tool."""

from __future__ import annotations

from collections import Counter

import pytest

from perfmodel.spec.plan.finetune import LoRA
from benchmarks.evals.published.fit_labels import import_label, load_fit_labels, read_labels


@pytest.fixture(scope="module")
def entries():
    return {e.id: e for e in read_labels()}


@pytest.fixture(scope="module")
def labels():
    return load_fit_labels()


def test_at_least_80_labels_from_4_frameworks(entries, labels):
    assert len(entries) >= 80
    assert len(labels) == len(entries)
    frameworks = Counter(label.framework for label in labels)
    assert len(frameworks) >= 4, frameworks
    # Megatron-Bridge's perf layouts on each of the five GPUs its performance recipes cover
    systems = Counter(e.system for e in entries.values() if e.framework == "bridge")
    for system in ("dgx-h100", "dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72"):
        assert systems[system] >= 10, (system, systems)


def test_labels_state_their_source(entries):
    for e in entries.values():
        repo, _, rest = e.source.partition("@")
        assert "/" in repo and len(rest.split(":")[0]) == 40, e.source
        assert e.stated, e.id


# label id -> what its files state, read by hand: plan fields, devices, system
BY_HAND = {
    # llama/h100/llama31.py:28-68 at 067f987: TP 8, PP 8, CP 2, VPP 8, SP, seq 8192, GBS 1536, MBS 1, bf16; 1024 H100
    # (COMBOS line of dump_perf_configs.py and the function's name): dp = 1024 / (8 * 8 * 2) = 8
    "bridge-llama31-405b-pretrain-1024gpu-h100-bf16": (
        dict(tp=8, pp=8, cp=2, vpp=8, dp=8, ep=1, micro_batch=1, global_batch=1536, seq_len=8192,
             sequence_parallel=True, precision="bf16"), 1024, "dgx-h100"),
    # kimi/b300/kimi_k2.py: starts from kimi/b200's 256-GPU function (TP 1, PP 16, no VPP, CP 1, EP 16, seq 4096,
    # selective recompute of mla_up_proj), then GBS 4096, MBS 2: dp = 256 / 16 = 16
    "bridge-kimi-k2-pretrain-256gpu-b300-bf16": (
        dict(tp=1, pp=16, cp=1, ep=16, dp=16, micro_batch=2, global_batch=4096, seq_len=4096,
             recompute="selective", recompute_modules=["mla_up_proj"]), 256, "dgx-b300"),
    # llama/h100/llama3.py: llama3_70b_peft_config(peft_scheme="lora"), target_modules ["linear_qkv"] (LoRA's dim 32),
    # seq 4096, TP 1, PP 4, VPP 20, CP 1, GBS 32, MBS 1, full block recompute of 1 layer; 8 H100: dp 2
    "bridge-llama3-70b-peft-8gpu-h100-bf16": (
        dict(tp=1, pp=4, vpp=20, cp=1, dp=2, micro_batch=1, global_batch=32, seq_len=4096, recompute="full",
             recompute_method="block", recompute_num_layers=1, lora=LoRA(rank=32, modules="attention")), 8,
        "dgx-h100"),
    # ironwood/llama3.1-405b/8k-bf16-tpu7x-4x8x8/run_recipe.sh: per_device_batch_size=3, ici_fsdp_parallelism=-1,
    # max_target_length=8192 on tpu7x-4x8x8 (256 chips, 512 devices): fsdp over all 512, GBS 3 x 512
    "maxtext-ironwood-llama3.1-405b-4x8x8": (
        dict(tp=1, pp=1, dp=512, micro_batch=3, global_batch=1536, seq_len=8192, zero=3), 512, "tpu-v7"),
    # moe/gpt3_mcore_te_tp2_pp1_..._multi_dist_optimizer_instances/model_config.yaml: TP 2, PP 1, EP 2, MBS 4,
    # GBS 32, seq 1024; recipes/gb200/moe.yaml: 2 nodes x 4 GPUs: dp 4
    "megatron-ft-moe-tp2-ep2-8experts-gb200": (
        dict(tp=2, pp=1, ep=2, dp=4, micro_batch=4, global_batch=32, seq_len=1024), 8, "gb200-nvl72"),
    # llama/gb200/llama3.py:257-284 at 067f987 (the 64-GPU fp8cs function the 32-GPU one starts from): TP 1, PP 1,
    # MBS 2, cpu_offloading = True with cpu_offloading_num_layers = 40; _perf_precision("fp8_cs") is
    # bf16_with_fp8_current_scaling_mixed, whose fp8_param_gather = True (training/mixed_precision.py:302)
    "bridge-llama3-70b-pretrain-32gpu-gb200-fp8cs": (
        dict(tp=1, pp=1, micro_batch=2, precision="fp8", fp8_params=True, activation_offload_layers=40), 32,
        "gb200-nvl72"),
    # deepseek/common.py:88-116 at 067f987 (_apply_deepseek_v3_64gpu_gb300_fsdp_configs):
    # fine_grained_activation_offloading = True, offload_modules = ["core_attn", "attn_proj"]; bf16_mixed
    "bridge-deepseek-v3-pretrain-64gpu-gb300-bf16-fsdp": (
        dict(tp=1, pp=1, ep=64, micro_batch=2, offload_modules=["core_attn", "attn_proj"], fp8_params=False,
             activation_offload_layers=0), 64, "gb300-nvl72"),
    # examples/llama/train_llama3_8b_h100_fp8.sh (2025-08): --fp8-format hybrid, --fp8-param-gather (l.107-110)
    # with --use-distributed-optimizer (l.125)
    "megatron-llama3-8b-h100-fp8-2025-08": (dict(precision="fp8", fp8_params=True, zero=1), 8, "dgx-h100"),
    # DeepSpeed-SuperOffload/finetune_llama-70b_4gpu.sh superoffload: train_batch_size 4 (BATCH_SIZE default),
    # accumulation 1, ZeRO-3, bf16, MAX_LENGTH 4096, GPUS_PER_NODE 4 (README: 4x GH200): 1 per device
    "deepspeed-superoffload-llama-70b-4gpu": (
        dict(tp=1, pp=1, dp=4, micro_batch=1, global_batch=4, seq_len=4096, zero=3, precision="bf16"), 4, "gh200"),
}


@pytest.mark.parametrize("label_id", sorted(BY_HAND))
def test_imported_plan_is_what_the_files_state(entries, label_id):
    fields, devices, system = BY_HAND[label_id]
    label = import_label(entries[label_id])
    assert label.reason == "", label.reason
    assert label.plan.gpus == devices and label.system.name == system
    for field, value in fields.items():
        assert getattr(label.plan, field) == value, (field, getattr(label.plan, field), value)


def test_a_layout_the_source_contradicts_is_not_expressible(entries):
    """qwen/gb200/qwen3_moe.py, the 64-GPU fp8cs function: TP 1, PP 8, CP 1 and EP 32 on 64 GPUs leaves a pipeline
    stage 8 ranks, which EP 32 cannot divide (Megatron-Core's MoE parallel folding): the reader refuses, and the
    label says so rather than guessing another count."""
    label = import_label(entries["bridge-qwen3-235b-a22b-pretrain-64gpu-gb200-fp8cs"])
    assert label.plan is None and "ep*etp = 32*1 = 32 does not divide" in label.reason
