"""Measured attention tables (hardware_specs/kernels/<part>/attention.csv.gz): forward throughput by head dim,
prompt length and parallel work, read independently of spec.hardware.kernel_tables and checked against its grid; which
stacks they price; the backward as the cited ratio."""

from __future__ import annotations

import csv
import gzip
import math
import statistics

import numpy as np
import pytest

import perfmodel as pm
from perfmodel import load_hardware
from perfmodel.cost.compute.kernel_lookup import attention_table_rate
from perfmodel.cost.compute.kernels import FLASH_BWD_FACTOR, FLASH_BWD_RATE, Device, attention_ops
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import Accelerator, list_accelerators, load_accelerator
from perfmodel.spec.hardware.kernel_tables import KERNELS, attention_grid

H100 = "h100_sxm/attention.csv.gz"


def raw_rows(table: str):
    with gzip.open(KERNELS / table, "rt") as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def test_hopper_and_blackwell_parts_carry_a_native_attention_table():
    with_tables = sorted(a for a in list_accelerators() if "attention" in load_accelerator(a).kernel_tables)
    assert with_tables == ["B200", "B300", "GB200", "GB300", "GH200-96GB", "H100-SXM5-80GB", "H200-SXM-141GB"]
    for a in with_tables:
        acc = load_accelerator(a)
        assert acc.attention_table_kernel == "native" and "attention_table_kernel" in acc.sources
    assert load_accelerator("A100-SXM4-80GB").attention_table_kernel is None  # vLLM's FA2: import_tables.py


def test_grid_cell_is_the_median_rate_of_its_rows_less_the_one_token_call():
    # By hand from the file: head dim 128, prompt 8192, the calls of batch x heads in the bin of 64 (45..90):
    # FLOPs 4 b h d s (s + 1) / 2 over (latency - the same call's latency at a one-token prompt)
    rows = raw_rows(H100)
    one = {(r["head_dim"], r["batch"], r["heads"]): r["latency_ms"] for r in rows if r["isl"] == 1}
    rates = []
    for r in rows:
        b, h, s = r["batch"], r["heads"], r["isl"]
        fixed = one.get((128.0, b, h))
        if r["head_dim"] == 128 and s == 8192 and round(math.log2(b * h)) == 6 and r["latency_ms"] >= 2 * fixed:
            rates.append(4 * b * h * 128 * s * (s + 1) / 2 / ((r["latency_ms"] - fixed) * 1e-3))
    assert len(rates) >= 3
    g = attention_grid(H100)
    cell = g.flops_per_s[list(g.head_dim).index(128), list(g.isl).index(8192), list(g.work).index(64)]
    assert cell == pytest.approx(statistics.median(rates), rel=1e-12)
    assert 400e12 < cell < 600e12  # H100 bf16 FMHA forward at long prompts: ~50% of the 989 TFLOP/s peak


def test_lookup_is_exact_on_the_grid_log_linear_between_and_flags_outside():
    g = attention_grid(H100)
    h = list(g.head_dim).index(128)
    i = list(g.isl).index(4096)
    rate, out = attention_table_rate(g, 128, 4096, 32)
    assert rate == pytest.approx(g.flops_per_s[h, i, 5], rel=1e-12) and not out
    # between isl 4096 and 6144 at work 32: r0 (r1 / r0) ** (log(5000 / 4096) / log(6144 / 4096))
    r0, r1 = g.flops_per_s[h, i, 5], g.flops_per_s[h, i + 1, 5]
    w = math.log(5000 / 4096) / math.log(6144 / 4096)
    assert attention_table_rate(g, 128, 5000, 32)[0] == pytest.approx(r0 * (r1 / r0) ** w, rel=1e-12)
    # beyond the longest prompt: the edge's rate, flagged; a head dim the table lacks: the nearest, flagged
    rate, out = attention_table_rate(g, 128, 65536, 32)
    assert rate == pytest.approx(g.flops_per_s[h, -1, 5], rel=1e-12) and out
    b200 = attention_grid("b200_sxm/attention.csv.gz")
    assert 192 not in b200.head_dim
    rate, out = attention_table_rate(b200, 160, 4096, 32)  # nearest in log: 128
    assert out and rate == pytest.approx(attention_table_rate(b200, 128, 4096, 32)[0], rel=1e-12)
    # vectorised over a search's layouts
    rates, outs = attention_table_rate(g, 128, np.array([2048, 4096, 8192]), np.array([8, 16, 32]))
    assert rates.shape == (3,) and not outs.any()


def _device(stack="megatron-core", hardware="dgx-h100", tp=8):
    plan = pm.Plan(gpus=8, tp=tp, dp=8 // tp, global_batch=8, micro_batch=1, seq_len=8192, stack=stack)
    return Device(pm.load_model("llama-3-8b"), load_hardware(hardware), plan)


def test_native_stacks_are_priced_from_the_table_with_the_cited_backward_ratio():
    dev = _device()
    m = dev.model
    heads, seq = m.n_heads / 8, 8192
    (op,) = attention_ops(dev, seq, heads, seq, 1)
    rate, _ = attention_table_rate(attention_grid(H100), m.head_dim, seq, heads)
    rate *= dev.fraction * dev.stack.attention_speed  # sustained_fraction at the loop's clock
    fwd = 4.0 * seq * seq / 2 * m.head_dim * heads  # causal: s / 2 keys per query on average
    assert op.fwd_flops == pytest.approx(fwd) and op.bwd_flops == pytest.approx(FLASH_BWD_FACTOR * fwd)
    assert op.fwd_s == pytest.approx(fwd / rate, rel=1e-12)
    assert op.bwd_s == pytest.approx(FLASH_BWD_FACTOR * fwd / (rate * FLASH_BWD_RATE), rel=1e-12)
    assert FLASH_BWD_RATE == pytest.approx(63 / 73)  # FlashAttention-2, Sec. 4.1: 63% bwd, 73% fwd of peak
    assert op.priced_by == "table h100_sxm/attention bf16" and not op.outside


def test_flash_attention_2_stacks_keep_the_datasheet_on_a_native_table_but_not_on_an_fa2_one():
    (op,) = attention_ops(_device("torchtitan"), 8192, 4, 8192, 1)
    assert op.priced_by == "datasheet"
    # a spec whose table timed FlashAttention-2 prices them from it, at the stack's attention_speed
    system = load_hardware("dgx-h100")
    acc = system.accelerator.model_copy(update={"attention_table_kernel": "flash-attn-2"})
    system = system.model_copy(update={"accelerator": acc})
    for stack in ("torchtitan", "composer-fsdp1"):
        plan = pm.Plan(gpus=8, tp=8, dp=1, global_batch=8, micro_batch=1, seq_len=8192, stack=stack)
        dev = Device(pm.load_model("llama-3-8b"), system, plan)
        (op,) = attention_ops(dev, 8192, 4, 8192, 1)
        rate, _ = attention_table_rate(attention_grid(H100), 128, 8192, 4)
        expected = op.fwd_flops / (rate * dev.fraction * dev.stack.attention_speed)
        assert op.priced_by == "table h100_sxm/attention bf16" and op.fwd_s == pytest.approx(expected, rel=1e-12)


def test_datasheet_system_drops_the_attention_table():
    bare = load_hardware("dgx-b200").on_datasheet()
    assert bare.accelerator.kernel_tables == {} and bare.accelerator.attention_table_kernel is None
    (op,) = attention_ops(Device(pm.load_model("llama-3-8b"), bare, _device().plan), 8192, 4, 8192, 1)
    assert op.priced_by == "datasheet"


def test_bad_attention_tables_and_specs_are_refused_in_one_line(tmp_path):
    header = b"head_dim,isl,batch,heads,latency_ms\n"
    for name, data in (("plain.csv.gz", header + b"128,1,1,1,0.01\n"),
                       ("header.csv.gz", gzip.compress(b"head_dim,isl,batch,latency_ms\n128,1,1,0.01\n")),
                       ("text.csv.gz", gzip.compress(header + b"128,1,one,1,0.01\n")),
                       ("negative.csv.gz", gzip.compress(header + b"128,1,1,1,-0.01\n"))):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InputError) as e:
            attention_grid(str(tmp_path / name))
        assert "\n" not in str(e.value) and "valid:" in str(e.value)
    base = load_accelerator("H100-SXM5-80GB").model_dump()
    with pytest.raises(InputError, match="attention_table_kernel = None; valid: both set"):
        Accelerator.parse(base | {"attention_table_kernel": None}, where="accelerator x")
    with pytest.raises(InputError, match="attention_table_kernel"):
        Accelerator.parse(base | {"attention_table_kernel": "fa3"}, where="accelerator x")
