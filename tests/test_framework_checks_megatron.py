"""Megatron-LM exports through megatron-core's own config checks (perfmodel.export.checks.megatron_check), at
every version perfmodel writes for, for every plan of the spread; and the checks refuse what Megatron refuses,
so an accepted export means something. Each megatron-core release is downloaded from PyPI once (no GPU)."""

from __future__ import annotations

import re

import pytest

from perfmodel.export.megatron.script import VERSIONS
from perfmodel.export.nearest import export_plan
from perfmodel.export.checks.releases import run_check, run_checks
from perfmodel.export.checks.spread import SPREAD, spread_plan_file


@pytest.mark.parametrize("version", list(VERSIONS))
def test_every_spread_plan_is_accepted(version):
    texts = [export_plan(spread_plan_file(name), "megatron", version) for name in SPREAD]
    for name, r in zip(SPREAD, run_checks("megatron", version, VERSIONS[version], texts)):
        assert r.accepted, (name, r.error)
        assert any(c.startswith(("TransformerConfig", "MLATransformerConfig")) for c in r.checks), r.checks


def _check(text: str, version: str = "core_r0.16"):
    return run_check("megatron", version, VERSIONS[version], text)


def test_the_checks_refuse_what_megatron_refuses():
    uneven = export_plan(spread_plan_file("pp4-vpp3-uneven"), "megatron", "core_r0.16")
    fsdp = export_plan(spread_plan_file("cp4-zero3-full"), "megatron", "core_r0.16")
    selective = export_plan(spread_plan_file("tp8-pp4-vpp2-sp-zero1"), "megatron", "core_r0.16")
    cases = {  # name -> (text, the error megatron-core gives; None: accepted); one subprocess for all
        # without CUDA_DEVICE_MAX_CONNECTIONS=1 at tp = 2 (validate_args)
        "connections": (re.sub(r"(?m)^export CUDA_DEVICE_MAX_CONNECTIONS=1.*\n", "", uneven),
                        "CUDA_DEVICE_MAX_CONNECTIONS to 1"),
        # a layout holding 31 of the 32 layers: megatron-core's validate_layer_layout
        "layout": (uneven.replace("|ttL", "|tL"), "must match num_layers 32"),
        # a global batch that micro x dp does not divide: 256 over micro 3 x dp 8
        "batch": (uneven.replace("--micro-batch-size 1", "--micro-batch-size 3"),
                  "not divisible by micro batch size (3) times data parallel size (8)"),
        # Megatron-FSDP with a single CUDA queue
        "fsdp": (fsdp.replace("unset CUDA_DEVICE_MAX_CONNECTIONS", "export CUDA_DEVICE_MAX_CONNECTIONS=1"), "FSDP"),
        "selective": (selective, None),
        # a recompute module megatron-core does not know (TransformerConfig.__post_init__)
        "module": (selective.replace("--recompute-modules core_attn", "--recompute-modules core_attn nope"), "nope"),
    }
    results = run_checks("megatron", "core_r0.16", VERSIONS["core_r0.16"], [text for text, _ in cases.values()])
    assert len(results) == len(cases)
    for (name, (_, error)), r in zip(cases.items(), results):
        if error is None:
            assert r.accepted, (name, r.error)
        else:
            assert not r.accepted and error in r.error, (name, r.error)
    # a layout on core_r0.12, which has no pipeline_model_parallel_layout field
    r = _check(uneven, "core_r0.12")
    assert not r.accepted and "--pipeline-model-parallel-layout" in r.error


def test_moe_flags_go_through_the_same_checks():
    text = export_plan(spread_plan_file("moe-deepseek-v3-pp8-ep64"), "megatron", "core_r0.16")
    r = _check(text)
    assert r.accepted and r.checks[-2].startswith("MLATransformerConfig"), (r.error, r.checks)
    # a shared expert of width 0: megatron-core's MoE checks
    bad = re.sub(r"--moe-shared-expert-intermediate-size \d+", "--moe-shared-expert-intermediate-size 0", text)
    assert bad != text and not _check(bad).accepted
