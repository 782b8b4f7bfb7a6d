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


def write_intervals(bands: dict, key: str = "interval", root: Path = STACKS) -> list[str]:
    """Rewrite the `key` block (interval, or moe_interval) of each stack profile in `root` with `bands` (stack -> Interval),
    leaving the rest of the file as it is; the files it changed."""
    changed = []
    for name, band in bands.items():
        path = root / f"{name}.yaml"
        lines = path.read_text().splitlines(keepends=True)
        start = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
        end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in (" ", "\n")), len(lines))
        block = yaml.safe_dump({key: band.model_dump(exclude_none=True)}, sort_keys=False, width=10**4,
                               allow_unicode=True)
        new = "".join(lines[:start]) + block + "".join(lines[end:])
        if new != path.read_text():
            path.write_text(new)
            changed.append(path.name)
    return changed


def write_bands(bands: dict[str, dict[str, MemoryBand]], root: Path = STACKS) -> list[str]:
    """Rewrite (or append) the `memory_band` block of each stack profile in `root`, the rest of the file as
    it is; the files it changed."""
    changed = []
    for name, views in bands.items():
        path = root / f"{name}.yaml"
        text = path.read_text()
        lines = text.splitlines(keepends=True)
        block = yaml.safe_dump({"memory_band": {v: b.model_dump(exclude_none=True) for v, b in views.items()}},
                               sort_keys=False, width=10**4, allow_unicode=True)
        start = next((i for i, line in enumerate(lines) if line.startswith("memory_band:")), None)
        if start is None:  # before the sources block, where the profile's other bands are
            start = end = next((i for i, line in enumerate(lines) if line.startswith("sources:")), len(lines))
        else:
            end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in (" ", "\n")), len(lines))
        new = "".join(lines[:start]) + block + "".join(lines[end:])
        if new != text:
            path.write_text(new)
            changed.append(path.name)
    return changed
