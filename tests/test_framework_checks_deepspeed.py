"""DeepSpeed's own checks (perfmodel.export.checks.deepspeed_check) on `perfmodel export --to deepspeed`: every
plan of the spread, changed to the nearest plan each version expresses and re-predicted, is accepted by that
release's DeepSpeedConfig and deepspeed.initialize; configs the releases refuse are refused by the check.

Downloads deepspeed 0.19.8 and 0.16.9 sdists from PyPI once (perfmodel.export.checks.releases.fetch) and needs their
light dependencies (hjson, py-cpuinfo, msgpack, einops, ninja, tqdm, psutil, numpy, pydantic, packaging)."""

from __future__ import annotations

import functools
import json

import pytest

from perfmodel.export.deepspeed import VERSIONS, nearest_plan
from perfmodel.export.nearest import export_plan
from perfmodel.export.checks.releases import run_checks
from perfmodel.export.checks.spread import SPREAD, spread_plan_file

pytest.importorskip("hjson", reason="DeepSpeed's checks need the frameworks extra (hjson, py-cpuinfo, ...)")


@functools.cache
def exported(name: str, version: str) -> str:
    return export_plan(spread_plan_file(name), "deepspeed", version)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_spread_plan_is_accepted(version):
    names = list(SPREAD)
    results = run_checks("deepspeed", version, VERSIONS[version], [exported(n, version) for n in names])
    refused = {n: r.error for n, r in zip(names, results) if not r.accepted}
    assert not refused, refused
    assert "deepspeed.initialize" in results[0].checks
    assert all(r.checks[1].startswith("deepspeed.runtime.config.DeepSpeedConfig") or "topology" in r.checks[1]
               for r in results)


def test_computed_values_of_spread_exports():
    # AutoTP (tp 4 of 16 GPUs, micro 2, global 64): dp 4, accumulation 8; no mpu, so DeepSpeed multiplies by 16
    cfg = json.loads(exported("autotp-zero1", "0.16.9"))
    assert cfg["tensor_parallel"] == {"autotp_size": 4} and cfg["gradient_accumulation_steps"] == 64 // (2 * 4)
    assert cfg["train_batch_size"] == 2 * 8 * 16
    # tp 8, pp 4, 512 GPUs: the pipeline topology's dp 16 divides the batch (1024 = 1 x 64 x 16)
    cfg = json.loads(exported("tp8-pp4-vpp2-sp-zero1", "0.19.8"))
    assert (cfg["train_batch_size"], cfg["gradient_accumulation_steps"]) == (1024, 64)
    assert cfg["zero_optimization"] == {"stage": 1, "overlap_comm": False}
    assert cfg["_perfmodel_changed"][0].startswith("vpp 2 -> 1: DeepSpeed")
    # gpipe with ZeRO-0 under bf16 with fp32 accumulation: 0.19.8 needs ZeRO-1, 0.16.9 takes ZeRO-0
    pf = spread_plan_file("pp4-gpipe")
    assert nearest_plan(pf, "0.19.8")[0]["zero"] == 1 and "zero" not in nearest_plan(pf, "0.16.9")[0]
    assert json.loads(exported("pp4-gpipe", "0.16.9"))["zero_optimization"] == {"stage": 0}


def _bad(name: str, version: str, **change) -> str:
    cfg = json.loads(exported(name, version))
    for key, value in change.items():
        cfg[key] = value
    return json.dumps(cfg)


@pytest.mark.parametrize("version", VERSIONS)
def test_configs_the_release_refuses_are_refused(version):
    bad = {
        "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism":
            _bad("pp8-first-last", version, zero_optimization={"stage": 2}),
        "unsupported mix": _bad("zero2-fp16-selective", version, zero_optimization={"stage": 0}),
        "Check batch related parameters": _bad("autotp-zero1", version, train_batch_size=64),  # the old export
        "no \"_perfmodel_launch\" object": _bad("zero3-per-op", version, _perfmodel_launch="deepspeed ..."),
    }
    results = run_checks("deepspeed", version, VERSIONS[version], list(bad.values()))
    for message, r in zip(bad, results):
        assert not r.accepted and message in r.error, (message, r.error)
