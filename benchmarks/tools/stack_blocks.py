"""The stack profiles' fitted blocks (hardware_specs/stacks/NAME.yaml), rewritten in place from an evaluation's
residuals: the step-time intervals (`interval`, `moe_interval`: benchmarks/evals/published_runs.py and
published_moe_runs.py --write-intervals) and the measured-memory bands (`memory_band`:
benchmarks/evals/measured_memory.py --write-bands). Each leaves the rest of the file as it is.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from benchmarks import ROOT
from perfmodel.spec.stack.profile import MemoryBand

STACKS = ROOT / "hardware_specs" / "stacks"


def replace_block(path: Path, key: str, data) -> bool:
    """Rewrite the top-level `key` block of the YAML file `path` with `data` (inserted before the `sources` block
    where the file has none), the rest of the file as it is; whether the file changed."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    block = yaml.safe_dump({key: data}, sort_keys=False, width=10**4, allow_unicode=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(f"{key}:")), None)
    if start is None:  # before the sources block, where a profile's other fitted blocks are
        start = end = next((i for i, line in enumerate(lines) if line.startswith("sources:")), len(lines))
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in (" ", "\n")), len(lines))
    new = "".join(lines[:start]) + block + "".join(lines[end:])
    if new != text:
        path.write_text(new)
    return new != text


def write_intervals(bands: dict, key: str = "interval", root: Path = STACKS) -> list[str]:
    """Rewrite the `key` block (interval, or moe_interval) of each stack profile in `root` with `bands` (stack ->
    Interval); the files it changed."""
    return [f"{name}.yaml" for name, band in bands.items()
            if replace_block(root / f"{name}.yaml", key, band.model_dump(exclude_none=True))]


def write_bands(bands: dict[str, dict[str, MemoryBand]], root: Path = STACKS) -> list[str]:
    """Rewrite (or add) the `memory_band` block of each stack profile in `root`; the files it changed."""
    return [f"{name}.yaml" for name, views in bands.items()
            if replace_block(root / f"{name}.yaml", "memory_band",
                             {v: b.model_dump(exclude_none=True) for v, b in views.items()})]
