"""Collectives on one node priced from measured NCCL tables: the per-group-size fits the catalogue's
NVLink tiers quote (`NetworkTier.by_group`) are those hardware_specs/kernels/import_tables.py fitted, a group takes
the fit of the largest measured size not above its own, and the time is the ring formula on them, by hand."""

from __future__ import annotations

import csv
import gzip

import pytest

from perfmodel import estimate, load_hardware
from perfmodel.cost.comm.collectives import collective_time, group_phases
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import System
from perfmodel.spec.hardware.kernel_tables import KERNELS

FITS = list(csv.DictReader((KERNELS / "nccl_fits.csv").open()))


def test_every_fit_is_in_its_systems_nvlink_tier():
    assert {r["system"] for r in FITS} == {"dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200", "dgx-b300",
                                           "gb200-nvl72", "gb300-nvl72"}
    for r in FITS:
        tier = load_hardware(r["system"]).tiers[0]
        bus, lat = tier.ring(r["kind"], int(r["group_size"]))
        assert bus / 1e9 == pytest.approx(float(r["bus_bandwidth_gbps"]), rel=1e-3), r
        assert lat * 1e6 == pytest.approx(float(r["latency_us"]), abs=1e-3), r
        assert "nccl" in tier.sources["by_group"] and "AIConfigurator" in tier.sources["by_group"]


def test_the_fits_reproduce_the_measured_table():
    """The 8-GPU all-gather of 128 MiB on DGX H100: nccl-tests measured it; the ring formula on the fit
    reproduces it within the fit's quoted error (by hand: 7 * latency + 7/8 * S / bus bandwidth)."""
    rows = gzip.decompress((KERNELS / "h100_sxm" / "nccl.csv.gz").read_bytes()).decode().split("\n")
    measured = {(r.split(",")[0], int(r.split(",")[1]), int(r.split(",")[2])): float(r.split(",")[3]) * 1e-3
                for r in rows[1:] if r}
    fit = next(r for r in FITS if r["system"] == "dgx-h100" and r["kind"] == "all_gather" and r["group_size"] == "8")
    s = 2**27
    by_hand = 7 * float(fit["latency_us"]) * 1e-6 + 7 / 8 * s / (float(fit["bus_bandwidth_gbps"]) * 1e9)
    system = load_hardware("dgx-h100")
    assert float(collective_time("all_gather", s, group_phases(system, 8, 1, 8))) == pytest.approx(by_hand, rel=1e-3)
    assert by_hand == pytest.approx(measured[("all_gather", 8, s)], rel=float(fit["max_abs_error"]))


def test_a_group_takes_the_largest_measured_size_not_above_its_own():
    tier = load_hardware("gb200-nvl72").tiers[0]  # measured on 2 and 4 GPUs of a compute tray
    four = tier.ring("all_gather", 4)
    assert tier.ring("all_gather", 72) == four and tier.ring("all_gather", 8) == four
    assert tier.ring("all_gather", 3) == tier.ring("all_gather", 2)
    assert tier.ring("all_gather", 1) == tier.ring("all_gather", 2)  # below every size: the smallest
    assert tier.ring("p2p", 8) == (tier.bandwidth * tier.collective_efficiency, tier.latency)  # not measured
    assert tier.ring("all_gather") == (tier.bandwidth * tier.collective_efficiency, tier.latency)  # no size given


def test_predict_says_which_tiers_were_measured():
    e = estimate("llama-3-8b", "dgx-h100", dict(gpus=16, tp=8, pp=2, micro_batch=1, global_batch=32, seq_len=4096,
                                                 sequence_parallel=True))
    by = {c.name: c.priced_by for c in e.comms}
    assert by["tp activations"] == "nvlink measured" and by["pp activations/gradients"] == "infiniband datasheet"
    assert estimate("llama-3-8b", "dgx-a100-40gb", dict(gpus=8, tp=8, pp=1, micro_batch=1, global_batch=8,
                                                         seq_len=2048)).comms[0].priced_by == "nvlink datasheet"


def test_a_bad_group_size_is_refused_in_one_line():
    doc = load_hardware("dgx-h100").model_dump()
    doc["tiers"][0]["by_group"] = {"all_gather": {"eight": {"collective_efficiency": 0.7, "latency_us": 2.0}}}
    with pytest.raises(InputError, match=r"by_group.all_gather key 'eight' is not a group size; valid: a positive "
                                         r"integer in quotes") as e:
        System.parse(doc, where="system x")
    assert "\n" not in str(e.value)


def test_the_fit_names_its_source_in_the_tiers_order():
    tier = load_hardware("dgx-h100").tiers[0]
    assert tier.fit("all_gather", 8)[1] == "measured" and tier.fit("p2p", 8) == (None, "datasheet")
    calibrated = tier.model_copy(update={"by_group": {}, "by_kind": {"all_gather": tier.fit("all_gather", 8)[0]}})
    assert calibrated.fit("all_gather", 8)[1] == "calibrated"
    assert calibrated.ring("all_gather", 8) == tier.ring("all_gather", 8)
    bare = load_hardware("dgx-h100").on_datasheet()
    assert bare.tiers[0].fit("all_gather", 8) == (None, "datasheet") and bare.accelerator.kernel_tables == {}
