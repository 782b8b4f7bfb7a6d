"""Where the development sets are: the shared copy when this checkout has one, else the bundled copy."""

from pathlib import Path

from benchmarks import DATA, SHARED


def devset(name: str) -> Path:
    shared = SHARED / name
    return shared if shared.exists() else DATA / name


DEFAULT_CSV = devset("published_runs_dev.csv")  # dense published runs (perfmodel.calibrate.runs.table)
MOE_CSV = devset("published_moe_runs_dev.csv")  # mixture-of-experts published runs (benchmarks.evals.published.moe_runs)
SMALL_CSV = devset("small_scale_runs_dev.csv")  # small- and mid-scale runs (benchmarks.evals.published.small_runs)
TPU_AMD_CSV = devset("tpu_amd_runs_dev.csv")  # TPU and AMD runs (benchmarks.evals.published.tpu_amd_runs)
