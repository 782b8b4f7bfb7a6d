"""An optimizer state kept and updated in host memory (Plan.optimizer_update host / host_overlapped: DeepSpeed's
ZeRO-Offload and SuperOffload; cost.host.host_update, cost.host.host_update_time), and the DeepSpeed reader that sets it.

Llama 3.1 8B has P = 8,030,261,248 parameters, by hand from its config.json (vocab 128256, hidden 4096, 32 layers,
ffn 14336, 32 heads of 128, 8 KV heads, untied): embedding + head 2 x 128256 x 4096 = 1,050,673,152; per layer
q, o 2 x 4096^2 + k, v 2 x 4096 x 1024 + MLP 3 x 4096 x 14336 + 2 norms x 4096 = 218,112,000, x 32 =
6,979,584,000; final norm 4096."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import perfmodel
from perfmodel.cost.host.host_update import REDUCE_BUCKET
from perfmodel.cost.host.host_update_time import HOST_ADAM_BYTES, HOST_ADAM_EFFICIENCY, host_update_comm
from perfmodel.cost.layouts import Layouts
from perfmodel.errors import InputError
from perfmodel.ingest import Given, plan_of, read_config
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan

P = 8_030_261_248
LABELS = Path(__file__).parent / "fixtures" / "fit_labels" / "deepspeed"


def _plan(**kw) -> Plan:
    base = dict(gpus=1, dp=1, zero=3, micro_batch=4, global_batch=4, seq_len=4096, recompute="full",
                stack="deepspeed", optimizer_offload=True, optimizer_update="host_overlapped",
                optimizer_offload_ratio=0.8)
    return Plan(**{**base, **kw})


def test_llama8b_gh200_bytes_by_hand():
    """1 GH200, ZeRO-3 over one rank, SuperOffload with ratio 0.8 (the llama-8b example's config), the deepspeed
    stack's fp32 gradients (4 B): the device holds the bf16 weights 2P, the reduce bucket 5e8 x 4 B, and the
    device's fifth of the fp32 master + moments + fp32 gradients, 16 B x 0.2 P; the host the other four fifths,
    16 B x 0.8 P, and ZeRO-3's gradient partitions, 4 B x P. Without the offload the optimizer's 12 B x P and
    the gradients' 4 B x P sit on the device."""
    est = perfmodel.estimate(load_model("llama-3.1-8b"), load_hardware("gh200"), _plan())
    mb = est.memory_bytes
    assert mb.weights == pytest.approx(2 * P, rel=1e-9)
    assert mb.gradients == pytest.approx(5e8 * 4, rel=1e-9)
    assert mb.optimizer == pytest.approx(16 * 0.2 * P, rel=1e-9)
    assert mb.host == pytest.approx(16 * 0.8 * P + 4 * P, rel=1e-9)
    whole = perfmodel.estimate(load_model("llama-3.1-8b"), load_hardware("gh200"),
                               _plan(optimizer_offload=False, optimizer_update="device", optimizer_offload_ratio=1.0))
    assert whole.memory_bytes.optimizer == pytest.approx(12 * P, rel=1e-9)
    assert whole.memory_bytes.gradients == pytest.approx(4 * P, rel=1e-9)
    assert whole.memory_bytes.host == 0.0
    assert mb.activations == whole.memory_bytes.activations  # the offload moves states only
    assert est.memory_verdict == "fits" and whole.memory_verdict == "does not fit"  # 93 GiB of room on a GH200


def test_zero2_host_update_bytes_by_hand():
    """ZeRO-Offload at ZeRO-2 over 8 H100s with overlap_comm (stage_1_and_2.py: two ipg buckets): the device keeps
    the whole bf16 weights 2P and two 5e8-element fp32 buckets, no optimizer; the host its eighth of the fp32
    master + moments + fp32 gradients, 16 B x P / 8, and no ZeRO-3 gradient partitions."""
    plan = _plan(gpus=8, dp=8, zero=2, global_batch=32, overlap_dp_comm=True, optimizer_update="host",
                 optimizer_offload_ratio=1.0)
    mb = perfmodel.estimate(load_model("llama-3.1-8b"), load_hardware("dgx-h100"), plan).memory_bytes
    assert (mb.weights, mb.gradients, mb.optimizer) == pytest.approx((2 * P, 2 * 5e8 * 4, 0.0), rel=1e-9)
    assert mb.host == pytest.approx(16 * P / 8, rel=1e-9)


def _exposed(comm) -> float:
    return float(np.ravel(comm.exposed)[0])  # Layouts of one plan: arrays of one


def test_host_update_seconds_by_hand():
    """The copies over NVLink-C2C (450 GB/s x 0.8 each way) and CPU Adam (500 GB/s x HOST_ADAM_EFFICIENCY at 28 B
    per parameter) for P parameters at ratio 0.8, nothing to hide behind: out = (4 B x P + 4 B x 0.8 P) / 360e9,
    back (the gradient buffer) 4 B x P / 360e9, in 4 B x 0.8 P / 360e9, Adam 28 B x 0.8 P / (500e9 x 0.64).
    ZeRO-Offload shows out + Adam + in; SuperOffload max(out, Adam) + in, and behind a backward longer than both
    only the copies in."""
    gh200 = load_hardware("gh200")
    assert HOST_ADAM_BYTES == 28.0 and REDUCE_BUCKET == 5e8
    out, inn = (4 * P + 4 * 0.8 * P) / 360e9, 4 * 0.8 * P / 360e9
    adam = 28 * 0.8 * P / (500e9 * HOST_ADAM_EFFICIENCY)
    lay = Layouts.from_plan(_plan(optimizer_update="host"))
    assert _exposed(host_update_comm(gh200, lay, P, P, 0.0)) == pytest.approx(out + adam + inn, rel=1e-9)
    lay = Layouts.from_plan(_plan())
    assert _exposed(host_update_comm(gh200, lay, P, P, 0.0)) == pytest.approx(max(out, adam) + inn, rel=1e-9)
    assert _exposed(host_update_comm(gh200, lay, P, P, 10.0)) == pytest.approx(inn, rel=1e-9)


def test_host_update_plan_checks():
    """A host update needs an offloaded state; a partial offload is ZeRO-3's; the system must state its host
    memory bandwidth (dgx-a100-40gb has no host section at all)."""
    m, gh200 = load_model("llama-3.1-8b"), load_hardware("gh200")
    with pytest.raises(InputError, match="optimizer_update = host without optimizer_offload"):
        perfmodel.estimate(m, gh200, _plan(optimizer_offload=False, optimizer_update="host", optimizer_offload_ratio=1))
    with pytest.raises(InputError, match="optimizer_offload_ratio = 0.8 .* at zero = 2"):
        perfmodel.estimate(m, gh200, _plan(zero=2))
    with pytest.raises(InputError, match="no host link"):
        perfmodel.estimate(m, load_hardware("dgx-a100-40gb"), _plan(gpus=8, dp=8, global_batch=32))


def _import(files, args=None):
    imp = read_config([str(f) for f in files], "deepspeed", None, Given.of(args, None))
    return imp, plan_of(imp, "gh200")[2]


def test_superoffload_script_sets_host_overlapped():
    """finetune_llama-8b_1gpu.sh run with `superoffload` writes stage 3, offload_optimizer {device cpu, ratio 0.80,
    super_offload true} and no gradient_clipping: plan.optimizer_offload, optimizer_update host_overlapped,
    optimizer_offload_ratio 0.8; its `zerooffload` branch (device cpu alone): host, the whole state."""
    imp, plan = _import([LABELS / "superoffload_finetune_llama-8b_1gpu.sh"], "superoffload")
    assert (plan.zero, plan.optimizer_offload, plan.optimizer_update, plan.optimizer_offload_ratio) == (
        3, True, "host_overlapped", 0.8)
    fate = {k.key: k.fate for k in imp.keys}
    assert fate["zero_optimization.offload_optimizer.super_offload"] == "mapped"
    assert fate["zero_optimization.offload_optimizer.ratio"] == "mapped"
    assert fate["zero_optimization.offload_optimizer.cpuadam_cores_perc"] == "not priced"
    _, plan = _import([LABELS / "superoffload_finetune_llama-8b_1gpu.sh"], "zerooffload")
    assert (plan.optimizer_offload, plan.optimizer_update, plan.optimizer_offload_ratio) == (True, "host", 1.0)


@pytest.mark.parametrize("section,stage,clip,want", [
    ({"device": "cpu", "super_offload": True}, 3, 1.0, (True, "host", 1.0)),  # clipping: no early update
    ({"device": "cpu", "super_offload": True, "ratio": 0.5}, 2, 0, (True, "host", 1.0)),  # ZeRO-3 features only
    ({"device": "nvme", "nvme_path": "/nvme"}, 3, 0, (False, "device", 1.0)),  # ZeRO-Infinity NVMe: not priced
    ({"device": "cpu"}, 0, 0, (False, "device", 1.0)),  # stage 0 builds no ZeRO optimizer
])
def test_offload_sections(tmp_path, section, stage, clip, want):
    cfg = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True},
           "zero_optimization": {"stage": stage, "offload_optimizer": section}}
    if clip:
        cfg["gradient_clipping"] = clip
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(cfg))
    run = tmp_path / "run.sh"
    run.write_text("deepspeed --num_gpus 1 train.py --model_name_or_path meta-llama/Llama-3.1-8B "
                   "--max_seq_length 4096 --deepspeed ds.json\n")
    _, plan = _import([ds, run])
    assert (plan.optimizer_offload, plan.optimizer_update, plan.optimizer_offload_ratio) == want
