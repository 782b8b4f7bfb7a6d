"""Where the development sets are: the shared copy when this checkout has one, else the bundled copy."""

from pathlib import Path

HERE = Path(__file__).resolve().parent


def _devset(name: str) -> Path:
    shared = HERE.parent.parent / "shared" / "data" / name
    return shared if shared.exists() else HERE / "data" / name


DEFAULT_CSV = _devset("published_runs_dev.csv")  # dense published runs (perfmodel.published.runs)
MOE_CSV = _devset("published_moe_runs_dev.csv")  # mixture-of-experts published runs (perfmodel.published.moe_runs)
SMALL_CSV = _devset("small_scale_runs_dev.csv")  # small- and mid-scale runs (perfmodel.published.small_runs)
TPU_AMD_CSV = _devset("tpu_amd_runs_dev.csv")  # TPU and AMD runs (perfmodel.published.tpu_amd_runs)
