"""What checks perfmodel and what makes its data, apart from the package (nothing under perfmodel/ imports it).

- `evals`: accuracy evaluations: predictions against published and measured runs, configs and traces (CI runs most).
- `tools`: generators of the data the package ships (hardware_specs/, package data), each from what it cites.
- `probes`: measurements on a GPU, a TPU compiler or this host, whose results the catalogue cites.
- `speed`: how fast the searches and sweeps run.
- `data/`: the development sets the evaluations read; `results/`: what the runs printed and measured.

Each script runs from the checkout's root as `python -m benchmarks.<folder>.<name>`.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: hardware_specs/, tests/fixtures/ and shared data beside it
DATA = ROOT / "benchmarks" / "data"
RESULTS = ROOT / "benchmarks" / "results"
SHARED = ROOT.parent / "shared" / "data"  # the project's shared data, beside the checkout (where it has one)
