"""The sustained_fraction in the specs is what benchmarks/sustained_fraction.py derives from the model, per pricing path."""

import importlib.util
from pathlib import Path

import pytest

from perfmodel.spec.hardware import load_hardware

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sustained_fraction.py"


def test_spec_value_matches_its_derivation():
    """Each part's fraction is the derivation on the pricing path it is priced by: its measured GEMM table where
    the accelerator names one, the datasheet elsewhere (benchmarks/sustained_fraction.py, mean of its layouts).
    Hopper's DGX parts carry a measured figure instead (benchmarks/sustained_clock.py; tests/test_device_mechanisms.py
    ties it to its measurement)."""
    spec = importlib.util.spec_from_file_location("sustained_fraction", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    layouts = [(1, 1), (1, 2), (2, 1), (2, 2)]
    derived = {p: sum(mod.derived(p, mb, z) for mb, z in layouts) / len(layouts) for p in ("table", "datasheet")}
    assert derived["table"] > derived["datasheet"]  # the tables price the A100's GEMMs slower than its datasheet
    for name in ("dgx-a100-80gb", "gh200", "dgx-b200", "gb200-nvl72", "dgx-a100-40gb", "mi300x-8", "l40s-8"):
        hw = load_hardware(name)
        pricing = "table" if hw.accelerator.kernel_tables else "datasheet"
        # the spec stores it to two decimals; re-run the script and update the specs if the model changes
        assert hw.efficiency.sustained_fraction == pytest.approx(derived[pricing], abs=0.006), (name, pricing)
