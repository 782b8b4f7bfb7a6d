"""The sustained_fraction in the specs is what benchmarks/sustained_fraction.py derives from the model, per pricing path."""

import importlib.util
from pathlib import Path

import pytest

from perfmodel.spec.hardware.system import load_hardware

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sustained_fraction.py"


def test_spec_value_matches_its_derivation():
    """Each part's fraction is the derivation on the pricing path it is priced by: its measured GEMM table where
    the accelerator names one, the datasheet elsewhere (benchmarks/sustained_fraction.py, mean of its layouts).
    The parts with a power model (DGX H100, H200, B200) carry instead the share a step keeps besides its
    clock, fitted on the dense dev set (benchmarks/power_fit.py), the same on each; their clock is the power model's
    (tests/test_power.py ties the loop to its measurement)."""
    spec = importlib.util.spec_from_file_location("sustained_fraction", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    layouts = [(1, 1), (1, 2), (2, 1), (2, 2)]
    derived = {p: sum(mod.derived(p, mb, z) for mb, z in layouts) / len(layouts) for p in ("table", "datasheet")}
    assert derived["table"] > derived["datasheet"]  # the tables price the A100's GEMMs slower than its datasheet
    powered = [load_hardware(n) for n in ("dgx-h100", "dgx-h200", "dgx-b200")]
    assert all(hw.accelerator.power is not None for hw in powered)
    assert {hw.efficiency.sustained_fraction for hw in powered} == {0.99}
    assert all("benchmarks/power_fit.py" in hw.efficiency.sources["sustained_fraction"] for hw in powered)
    for name in ("dgx-a100-80gb", "gh200", "dgx-b300", "gb200-nvl72", "gb300-nvl72", "dgx-a100-40gb", "mi300x-8",
                 "l40s-8"):
        hw = load_hardware(name)
        pricing = "table" if hw.accelerator.kernel_tables else "datasheet"
        # the spec stores it to two decimals; re-run the script and update the specs if the model changes
        assert hw.efficiency.sustained_fraction == pytest.approx(derived[pricing], abs=0.006), (name, pricing)
