"""Fit the request path's constants that no public measurement gives, on the closed loops of serving_silicon_dev.csv,
and report their leave-one-model-out error (the developers' guide: a mechanism's few physical constants, fitted,
each named with its rows and its held-out error).

    python benchmarks/serving_host_fit.py [--sample N] [--jobs J] [--write]

The two constants (hardware_specs/serving/*.yaml, every release of the engine alike):
- vllm.prefill_step_s: host seconds a vLLM step that admits prompt tokens spends before its launch (the new
  requests' state, the persistent batch's inputs, attention metadata), which its asynchronous scheduling does not
  hide (serve.host_time.schedule_s). Bounded by a public measurement: a whole TTFT of 16.9 ms at c=1 for a 0.5B model
  (ray-project/ray issue #59681, vLLM 0.22, RTX 5050 host taken as the DGX H100's speed), less vLLM's 2.6 ms
  front end, leaves at most PREFILL_STEP_MAX = 14.3 ms;
- trtllm.frontend.request_s of the 1.x releases (trtllm-serve and Dynamo's front end over the PyTorch backend): its
  host seconds per request outside the forward, its admission included (no public measurement; SGLang's 6.9 ms,
  measured with the real scheduler and a mocked forward, holds its admission, so sglang.prefill_step_s stays 0 and
  nothing of SGLang is fitted), on the TensorRT-LLM rows of serving_silicon_dev.csv;
- trtllm.frontend.request_s of the 0.14 release (Triton's tensorrtllm_backend ensemble: HTTP/gRPC, its Python
  preprocessing and postprocessing models around the C++ executor), on the TTFT rows of the online-serving table of
  published_inference_dev.csv (Poisson arrivals, 500 requests, as benchmarks/published_inference.py simulates them).
A constant moves only its own rows, so each is fitted on them alone. Every N-th row (--sample, default 2; the online
table: all) is simulated at each point of a grid of the constant (the mean TTFT); a row's TTFT between grid points
is interpolated linearly. The fit is the value of least TTFT MAPE over its rows on a fine grid of the
interpolation; leave-one-model-out fits it again without each model's rows and scores them at that value. --write
puts the fitted values in the profiles.
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from devset import HERE
import published_inference
from serving_silicon import _devset, case, range_ratio

from perfmodel.errors import InputError
from perfmodel.serve.simulate import simulate
from perfmodel.spec.serving.schema import ServePlan

PROFILES = HERE.parent / "hardware_specs" / "serving"
PREFILL_STEP_MAX = 0.0169 - 0.0026  # s: ray issue #59681's whole TTFT less vLLM's front end (module docstring)
# each fitted constant: (engine, its field, the releases it is set in (None: all), its grid in seconds, its rows)
FITTED = {"vllm": ("vllm", "prefill_step_s", None, (0.0, 0.002, 0.005, 0.01, PREFILL_STEP_MAX), "silicon"),
          "trtllm": ("trtllm", "frontend.request_s", ("1.0",), (0.0, 0.0025, 0.005, 0.01, 0.02, 0.04), "silicon"),
          "trtllm-0.14": ("trtllm", "frontend.request_s", ("0.14",), (0.0, 0.0025, 0.005, 0.01, 0.02, 0.04),
                          "online")}
ENGINES = tuple(FITTED)


def grid(engine: str) -> list[dict[str, float]]:
    """The constant's grid points of `engine` (a FITTED key): {constant: seconds}."""
    _, key, _, values, _ = FITTED[engine]
    return [{key: v} for v in values]


def profile(target: str, values: dict[str, float], folder: Path) -> str:
    """The target's engine profile with `values` in its releases, written under `folder`: its path."""
    engine, _, releases, _, _ = FITTED[target]
    data = yaml.safe_load((PROFILES / f"{engine}.yaml").read_text())
    for rel in data["releases"]:
        if releases is not None and rel["since"] not in releases:
            continue
        for key, v in values.items():
            if key == "frontend.request_s":
                rel["frontend"]["request_s"] = float(v)
            else:
                rel[key] = float(v)
    tag = "_".join(f"{v:g}" for v in values.values())
    path = folder / f"{target}_{tag}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def ttft_ms(args) -> float:
    """A row's simulated mean TTFT (ms) with the profile at `path` (nan where the row is not expressed): a
    serving_silicon row's closed loop, or an online-table row's Poisson arrivals (all at once at rate INF)."""
    row, path, kind = args
    if kind == "online":
        model, system, plan, reason = published_inference.case(row)
        rate = str(row["batch_size_or_concurrency"]).split("=")[1].split()[0]
        work = dict(arrival="burst", requests=500) if rate == "INF" else dict(
            arrival="poisson", request_rate=float(rate), requests=500)
        c = None
    else:
        model, system, plan, c, reason = case(row)
        work = dict(arrival="closed", concurrency=c, requests=min(1000, 10 * c), range_ratio=range_ratio(row))
    if plan is None:
        return np.nan
    try:
        s = simulate(model, system, ServePlan(**(plan | {"stack": path})), work)
    except InputError:
        return np.nan
    return 1e3 * s.ttft_s.mean


def table(rows: pd.DataFrame, target: str, jobs: int, folder: Path) -> np.ndarray:
    """TTFT (ms) of `rows` (the target's) at each grid point: rows x points."""
    points = grid(target)
    paths = [profile(target, p, folder) for p in points]
    work = [(row, path, FITTED[target][4]) for path in paths for _, row in rows.iterrows()]
    with multiprocessing.Pool(jobs) as pool:
        out = pool.map(ttft_ms, work, chunksize=8)
    return np.array(out).reshape(len(points), len(rows)).T


def rows_of(target: str, sample: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """(rows, measured TTFT ms, model of each row) the target is fitted on."""
    engine, _, _, _, kind = FITTED[target]
    if kind == "online":
        d = pd.read_csv(published_inference._devset())
        d = d[(d["metric"] == "ttft_ms_mean") & d["batch_size_or_concurrency"].astype(str).str.startswith("offered")]
        return d, d["value"].to_numpy(float), np.array([published_inference.case(r)[0] for _, r in d.iterrows()])
    d = pd.read_csv(_devset())
    d = d[(d["mode"] == "agg") & (d["backend"] == engine)].iloc[::max(sample, 1)]
    return d, d["silicon_ttft_ms"].to_numpy(float), d["model_path"].to_numpy()


def interpolate(target: str, ttft: np.ndarray, values: dict[str, float]) -> np.ndarray:
    """Rows' TTFT at `values`, interpolated linearly between the grid's points."""
    _, key, _, points, _ = FITTED[target]
    return np.array([np.interp(values[key], np.array(points), t) for t in ttft])


def fine(target: str) -> list[dict[str, float]]:
    """The fine grid the fit searches (the interpolation's)."""
    _, key, _, points, _ = FITTED[target]
    return [{key: float(v)} for v in np.linspace(points[0], points[-1], 401)]


def mape(pred: np.ndarray, meas: np.ndarray) -> float:
    ok = np.isfinite(pred)
    return float(np.mean(np.abs(pred[ok] / meas[ok] - 1))) if ok.any() else np.nan


def fit(engine: str, ttft: np.ndarray, meas: np.ndarray, keep: np.ndarray) -> tuple[dict[str, float], float]:
    """The values of least TTFT MAPE over the rows `keep` (a mask), and that MAPE."""
    best = min(fine(engine), key=lambda v: mape(interpolate(engine, ttft[keep], v), meas[keep]))
    return best, mape(interpolate(engine, ttft[keep], best), meas[keep])


def _num(v: float) -> str:
    """A constant as the profiles write it: 4 significant digits, always a float."""
    text = f"{v:.4g}"
    return text if any(c in text for c in ".e") else text + ".0"


def write(target: str, values: dict[str, float], note: str) -> None:
    """Put `values` in the target's releases of its engine's profile, with `note` as their source (text edits, so
    the file's order and other text stay)."""
    engine, _, releases, _, _ = FITTED[target]
    path = PROFILES / f"{engine}.yaml"
    blocks = re.split(r"(?=\n  - since: )", path.read_text())
    for i, block in enumerate(blocks):
        since = re.match(r'\n  - since: "([^"]+)"', block)
        if since is None or (releases is not None and since.group(1) not in releases):
            continue
        for key, v in values.items():
            if key == "frontend.request_s":
                block = re.sub(r"(frontend: \{request_s: )[^,]+", lambda m: m.group(1) + _num(v), block)
            else:
                block = re.sub(rf"(\n    {key}: )[^\n]+", lambda m: m.group(1) + _num(v), block)
            source = key.split(".")[0]
            block = re.sub(rf'({source}: "fitted )\([^"]*?%\)|({source}: "fitted )\(benchmarks/serving_host_fit.py\)',
                           lambda m: (m.group(1) or m.group(2)) + note, block)
        blocks[i] = block
    path.write_text("".join(blocks))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=2, help="fit on every N-th row of each engine (default 2)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="write the fitted values into the profiles")
    ap.add_argument("--engines", default=",".join(ENGINES), help="constants to fit (FITTED keys, default all)")
    a = ap.parse_args(argv)
    report = []
    with tempfile.TemporaryDirectory(prefix="perfmodel-serving-fit-") as tmp:
        for target in a.engines.split(","):
            rows, meas, models = rows_of(target, a.sample)
            ttft = table(rows, target, max(a.jobs, 1), Path(tmp))
            ok = np.isfinite(ttft).all(axis=1)
            print(f"{target}: {len(rows)} rows, not expressed at each grid point: {np.isnan(ttft).sum(axis=0)}",
                  flush=True)
            values, err = fit(target, ttft, meas, ok)
            held = np.full(len(rows), np.nan)
            for m in np.unique(models[ok]):
                v, _ = fit(target, ttft, meas, ok & (models != m))
                held[models == m] = interpolate(target, ttft[models == m], v)
            lomo = mape(held[ok], meas[ok])
            signed = float(np.median(interpolate(target, ttft[ok], values) / meas[ok] - 1))
            report.append(dict(target=target, rows=int(ok.sum()), **{k: round(v * 1e3, 2) for k, v in values.items()},
                               mape=round(100 * err, 1), signed_median=round(100 * signed, 1),
                               lomo_mape=round(100 * lomo, 1)))
            which = ("the online-serving table's TTFT rows of published_inference_dev.csv" if FITTED[target][4] ==
                     "online" else f"every {a.sample}-th {FITTED[target][0]} closed-loop row of serving_silicon_dev.csv")
            note = (f"(benchmarks/serving_host_fit.py: {', '.join(f'{k} = {v * 1e3:.3g} ms' for k, v in values.items())}"
                    f" of least simulated-TTFT MAPE over {which} ({int(ok.sum())} rows, "
                    f"{len(np.unique(models[ok]))} models): {100 * err:.1f}%, leave-one-model-out {100 * lomo:.1f}%)")
            print(note, flush=True)
            if a.write:
                write(target, values, note)
    print("\nfitted constants (ms), TTFT MAPE % in sample and leave-one-model-out:")
    print(pd.DataFrame(report).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
