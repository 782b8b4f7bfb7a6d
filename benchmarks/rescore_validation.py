"""Re-predict the plans of a validation run with this perfmodel, against the step times that run measured.

    python benchmarks/rescore_validation.py benchmarks/results/validation/gpu-single-h100/plans \
        --hardware benchmarks/results/calibration/dgx-h100-calibrated.yaml

A lent GPU is rare; its measurements stay true while the cost model moves. For each PLAN.json with a
PLAN.measured.json beside it: the job's measured step (per step the slowest rank, median after the warm-up, as
`perfmodel validate` takes it), the prediction the plan file was written with, and this perfmodel's estimate of the
same plan on `--hardware` (default: the spec the plan file holds), with its host part. Prints a table and the MAPE.
With `--host A,B`, the same plans predicted with each host in place of the spec's own (spec.host.cpu: the lent
machine's measured host against the DGX host the catalogue system names, say), a column pair per host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import pandas as pd

from perfmodel.cost.estimate import estimate
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.hardware.kernel_tables import spec_folder
from perfmodel.spec.plan.file import load_plan_file


def measured_step(path: Path) -> float:
    """The job's step time of a measurement file: per step the slowest rank, median of the steps after warm-up."""
    m = json.loads(path.read_text())
    ranks = [r["step_times_s"] for r in m["ranks"]]
    return statistics.median(max(r[i] for r in ranks) for i in range(m["warmup"], len(ranks[0])))


def rescore(folder: Path, hardware: str | None, host: str | None = None) -> pd.DataFrame:
    system = load_hardware(hardware).with_host(host) if hardware else None
    rows = []
    for meas in sorted(folder.glob("*.measured.json")):
        plan = meas.with_name(meas.name.replace(".measured.json", ".json"))
        pf = load_plan_file(plan)
        with spec_folder(plan.parent):
            e = estimate(pf.model, system or pf.hardware.with_host(host), pf.plan)
        step = measured_step(meas)
        rows.append({"plan": plan.stem, "measured_ms": 1e3 * step, "written_ms": 1e3 * pf.prediction.step_time_s,
                     "predicted_ms": 1e3 * e.step_time_s, "host_ms": 1e3 * e.time_s.host,
                     "error_%": 100 * (e.step_time_s / step - 1),
                     "written_error_%": 100 * (pf.prediction.step_time_s / step - 1)})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--hardware", help="spec to predict with (preset or YAML); default the plan files' own")
    ap.add_argument("--host", help="hosts to predict with, comma-separated (perfmodel hardware hosts, or host YAML "
                                   "files), each in place of the spec's own")
    a = ap.parse_args(argv)
    if not a.host:
        df = rescore(a.folder, a.hardware)
        print(df.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
        print(f"\nstep time MAPE: {df['error_%'].abs().mean():.1f}% now, {df['written_error_%'].abs().mean():.1f}% "
              f"as written ({len(df)} plans)")
        return 0
    hosts = a.host.split(",")
    out = None
    for h in hosts:
        df = rescore(a.folder, a.hardware, h)[["plan", "measured_ms", "predicted_ms", "host_ms", "error_%"]]
        df = df.rename(columns={c: f"{c} {h}" for c in ("predicted_ms", "host_ms", "error_%")})
        out = df if out is None else out.merge(df, on=["plan", "measured_ms"])
    print(out.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    for h in hosts:
        e = out[f"error_% {h}"]
        print(f"host {h}: step time MAPE {e.abs().mean():.1f}%, signed median {e.median():+.1f}% ({len(out)} plans)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
