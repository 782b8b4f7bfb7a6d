"""Where the published-runs development set is: the shared copy when this checkout has one, else the bundled copy."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "data" / "published_runs_dev.csv"
BUNDLED = HERE / "data" / "published_runs_dev.csv"
DEFAULT_CSV = SHARED if SHARED.exists() else BUNDLED
