"""The hardware catalogue: every preset loads, every number names its source, datasheet peaks are right,
and bad spec files fail with one-line InputErrors."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import (
    Accelerator,
    GEMM_DTYPES,
    Efficiency,
    HostLink,
    NetworkTier,
    System,
    list_accelerators,
    list_systems,
    load_accelerator,
    load_hardware,
)

REQUIRED_SYSTEMS = sorted([
    "dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200", "dgx-b300", "gb200-nvl72",
    "gb300-nvl72", "gh200", "l40s-8", "mi300x-8", "mi325x-8", "mi350x-8", "mi355x-8", "tpu-v4", "tpu-v5e",
    "tpu-v5p", "tpu-v6e", "tpu-v7",
])
REQUIRED_ACCELERATORS = sorted([
    "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB", "B200", "B300", "GB200",
    "GB300", "GH200-96GB", "L40S-48GB", "MI300X", "MI325X", "MI350X", "MI355X", "TPU-v4", "TPU-v5e", "TPU-v5p",
    "TPU-v6e", "TPU-v7",
])

# Dense BF16 peaks, hand-checked against the datasheets (sparsity figures halved).
DENSE_BF16 = {
    "A100-SXM4-40GB": 312,
    "A100-SXM4-80GB": 312,
    "H100-SXM5-80GB": 989.4,
    "H200-SXM-141GB": 989.4,
    "B200": 2250,
    "B300": 2250,
    "GB200": 2500,
    "GB300": 2500,
    "L40S-48GB": 362.05,
    "MI300X": 1307.4,
    "MI325X": 1307.4,
    "MI350X": 2306.9,
    "MI355X": 2516.6,
    "TPU-v4": 275,
    "TPU-v5e": 197,
    "TPU-v5p": 459,
    "TPU-v6e": 918,
    "TPU-v7": 2307 / 2,  # per device: an Ironwood chip's two dies, as JAX sees them
}


def test_system_list_is_the_required_catalogue():
    assert list_systems() == REQUIRED_SYSTEMS


def test_accelerator_list_is_the_required_catalogue():
    assert list_accelerators() == REQUIRED_ACCELERATORS


@pytest.mark.parametrize("name", REQUIRED_SYSTEMS)
def test_every_system_loads(name):
    system = load_hardware(name)
    assert isinstance(system, System)
    assert system.name == name
    assert system.accelerator.name in REQUIRED_ACCELERATORS


@pytest.mark.parametrize("name", REQUIRED_ACCELERATORS)
def test_every_accelerator_loads(name):
    acc = load_accelerator(name)
    assert isinstance(acc, Accelerator)
    assert acc.name == name


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _numeric_fields(obj: BaseModel) -> list[str]:
    """Fields of `obj` whose value is a number, or a list/tuple/dict holding numbers."""
    out = []
    for field in type(obj).model_fields:
        if field == "sources":
            continue
        v = getattr(obj, field)
        if _is_number(v):
            out.append(field)
        elif isinstance(v, (list, tuple)) and any(_is_number(x) for x in v):
            out.append(field)
        elif isinstance(v, dict) and any(_is_number(x) for x in v.values()):
            out.append(field)
    return out


def _objects(system: System):
    yield system
    yield system.accelerator
    yield from system.tiers
    yield system.efficiency
    if system.host is not None:
        yield system.host


def _unsourced(obj: BaseModel) -> list[str]:
    return [f for f in _numeric_fields(obj) if not str(obj.sources.get(f, "")).strip()]


@pytest.mark.parametrize("name", REQUIRED_SYSTEMS)
def test_every_number_in_a_system_names_its_source(name):
    system = load_hardware(name)
    missing = []
    for obj in _objects(system):
        assert isinstance(obj, (System, Accelerator, NetworkTier, Efficiency, HostLink))
        label = getattr(obj, "name", type(obj).__name__)
        missing += [f"{type(obj).__name__}({label}).{f}" for f in _unsourced(obj)]
    assert not missing, f"{name}: numbers without a source: {missing}"


@pytest.mark.parametrize("name", REQUIRED_ACCELERATORS)
def test_every_number_in_an_accelerator_names_its_source(name):
    acc = load_accelerator(name)
    assert not _unsourced(acc), f"{name}: numbers without a source: {_unsourced(acc)}"
    if acc.tdp_w is None:  # null TDP must say it is unpublished
        assert "unpublished" in acc.sources.get("tdp_w", "")


def test_sources_check_catches_a_missing_citation():
    acc = load_accelerator("A100-SXM4-40GB")
    bare = acc.model_copy(update={"sources": {k: v for k, v in acc.sources.items() if k != "hbm_bandwidth_tbps"}})
    assert _unsourced(bare) == ["hbm_bandwidth_tbps"]


@pytest.mark.parametrize("name,bf16", sorted(DENSE_BF16.items()))
def test_dense_bf16_peaks_match_datasheets(name, bf16):
    acc = load_accelerator(name)
    assert acc.peak_tflops["bf16"] == pytest.approx(bf16)
    assert acc.peak_flops("bf16") == pytest.approx(bf16 * 1e12)


def test_dtype_coverage_by_generation():
    for name in ("A100-SXM4-40GB", "A100-SXM4-80GB"):
        assert set(load_accelerator(name).peak_tflops) == {"fp32", "tf32", "bf16", "fp16"}
    for name in ("H100-SXM5-80GB", "H200-SXM-141GB", "MI300X"):
        peaks = load_accelerator(name).peak_tflops
        assert "fp8" in peaks and "fp4" not in peaks
    for name in ("B200", "B300", "GB200", "GB300"):
        peaks = load_accelerator(name).peak_tflops
        assert {"bf16", "fp16", "fp8", "fp4"} <= set(peaks)
    # TPUs publish bf16 and int8 (AQT's training matmuls): v4 the same 275 TF, the later ones twice bf16
    for name, int8 in (("TPU-v4", 275), ("TPU-v5e", 394), ("TPU-v5p", 918), ("TPU-v6e", 1836)):
        peaks = load_accelerator(name).peak_tflops
        assert set(peaks) == {"bf16", "int8"} and peaks["int8"] == int8


@pytest.mark.parametrize("name", ["A100-SXM4-40GB", "A100-SXM4-80GB"])
def test_a100_has_no_fp8(name):
    acc = load_accelerator(name)
    assert "fp8" not in acc.peak_tflops
    with pytest.raises(InputError, match="fp8"):
        acc.peak_flops("fp8")


def test_dgx_b300_by_hand():
    """DGX B300 (HGX Blackwell Ultra): datasheet totals / 8 GPUs, as the loader exposes them in SI units."""
    system = load_hardware("dgx-b300")
    acc = system.accelerator
    assert acc.name == "B300"
    assert acc.peak_flops("bf16") == pytest.approx(36e15 / 2 / 8)  # 36 PF sparse for 8 GPUs -> 2.25 PF dense
    assert acc.peak_flops("fp8") == pytest.approx(72e15 / 2 / 8)  # 4.5 PF dense, as B200
    assert acc.peak_flops("fp4") == pytest.approx(108e15 / 8)  # dense FP4 stated: 13.5 PF, above B200's 9
    assert acc.hbm_bytes == pytest.approx(288 * 2**30)
    assert acc.hbm_bandwidth == pytest.approx(8e12)
    nvlink, ib = system.tiers
    assert (nvlink.domain_size, ib.domain_size) == (8, None)
    assert nvlink.bandwidth == pytest.approx(1.8e12 / 2)  # 1.8 TB/s bidirectional per GPU
    assert ib.bandwidth == pytest.approx(800e9 / 8)  # one 800 Gb/s ConnectX-8 per GPU = 100 GB/s
    assert system.efficiency.matmul_max["bf16"] == pytest.approx(1769.0 / 2250, abs=5e-4)  # MAMF R0542


@pytest.mark.parametrize("name", REQUIRED_SYSTEMS)
def test_tiers_and_efficiency_are_consistent(name):
    system = load_hardware(name)
    gemm = [d for d in GEMM_DTYPES if d in system.accelerator.peak_tflops]
    assert sorted(system.efficiency.matmul_max) == sorted(gemm)
    if name.startswith("tpu-"):  # slices of the ICI torus, joined over the data-centre network (multislice)
        ici, dcn = system.tiers
        assert ici.topology == "torus" and dcn.domain_size is None and system.max_devices is None
        # chips per pod (v7: two dies each)
        assert ici.domain_size == {"tpu-v4": 4096, "tpu-v5e": 256, "tpu-v5p": 8960, "tpu-v6e": 256,
                                   "tpu-v7": 2 * 9216}[name]
    else:
        assert system.tiers[-1].domain_size is None
        assert system.max_devices is None


def test_user_yaml_naming_a_catalogue_accelerator_loads(tmp_path):
    spec = tmp_path / "my-cluster.yaml"
    spec.write_text(
        """
name: my-cluster
accelerator: H100-SXM5-80GB
tiers:
  - name: nvlink
    domain_size: 8
    bandwidth_gbps: 450
    latency_us: 3.4
    collective_efficiency: 0.8
  - name: ethernet
    bandwidth_gbps: 25
    latency_us: 20
    collective_efficiency: 0.7
efficiency:
  matmul_max: {bf16: 0.8, fp16: 0.8, fp8: 0.7}
  matmul_tile: [128, 256]
  attention_max: 0.35
  attention_half_seq: 423
  memory_bandwidth: 0.88
memory_overhead_gib: 3
"""
    )
    system = load_hardware(spec)
    assert system.name == "my-cluster"
    assert system.accelerator.name == "H100-SXM5-80GB"
    assert system.accelerator.peak_tflops["bf16"] == pytest.approx(989.4)
    assert [t.name for t in system.tiers] == ["nvlink", "ethernet"]


def test_malformed_yaml_is_a_one_line_input_error(tmp_path):
    spec = tmp_path / "broken.yaml"
    spec.write_text("name: broken\naccelerator: [H100-SXM5-80GB\ntiers: {\n")
    with pytest.raises(InputError) as info:
        load_hardware(spec)
    msg = str(info.value)
    assert "\n" not in msg
    assert "malformed YAML" in msg and "broken.yaml" in msg


def test_yaml_missing_tiers_is_a_one_line_input_error(tmp_path):
    spec = tmp_path / "no-tiers.yaml"
    spec.write_text(
        """
name: no-tiers
accelerator: A100-SXM4-80GB
efficiency:
  matmul_max: {bf16: 0.8, fp16: 0.8}
  matmul_tile: [256, 128]
  attention_max: 0.6
  attention_half_seq: 423
  memory_bandwidth: 0.88
memory_overhead_gib: 3
"""
    )
    with pytest.raises(InputError) as info:
        load_hardware(spec)
    msg = str(info.value)
    assert "\n" not in msg
    assert "tiers" in msg and "required" in msg
