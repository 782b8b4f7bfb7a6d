"""A sweep's points: each base system with one combination of the axes' values (a grid, or quasi-random draws from
scipy.stats.qmc), and the tasks (point x workload) grouped into chunks keyed by what they compute.

A chunk holds one workload's runs on `chunk_points` consecutive points: a worker that runs it reuses that
workload's model tables and kernel grids from one point to the next. Its key hashes the workload and its model, the
points' base systems (their full specs) and values, and the code version (`code_version`, which covers the
technology-node presets), so a finished chunk is found again by --resume and a changed input or program never
reuses an old one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .axes import InvalidPoint, base_system, point_system
from .schema import Axis, Sweep, Workload


@dataclass(frozen=True)
class Point:
    """One design: `base` with `values` (axis name -> value) applied; `index` orders the sweep."""

    index: int
    base: str
    values: tuple[tuple[str, float | str], ...]


def _grid_values(axis: Axis) -> list:
    return list(axis.values if axis.values is not None else axis.factors)


def _draw(axis: Axis, u: np.ndarray) -> list:
    """Values of `axis` at unit-interval draws `u`: a list axis picks entry floor(u * n), a range maps u linearly or
    in log space, rounded where the axis is whole."""
    if not axis.ranged:
        vals = _grid_values(axis)
        return [vals[min(int(x * len(vals)), len(vals) - 1)] for x in u]
    lo, hi = axis.low, axis.high
    x = np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo))) if axis.log else lo + u * (hi - lo)
    return [int(round(v)) if axis.integer else float(v) for v in x]


def sample_unit(method: str, n: int, dims: int, seed: int) -> np.ndarray:
    """`n` points in [0, 1)^dims: Latin hypercube (McKay et al. 1979) or scrambled Sobol' (Owen 1998), both from
    scipy.stats.qmc with `seed`."""
    from scipy.stats import qmc

    if dims == 0:
        return np.zeros((n, 0))
    engine = qmc.LatinHypercube(d=dims, seed=seed) if method == "lhs" else qmc.Sobol(d=dims, scramble=True, seed=seed)
    if method == "sobol":
        m = int(np.ceil(np.log2(max(n, 1))))
        return engine.random_base2(m)[:n]  # the first n of a balanced 2^m set
    return engine.random(n)


def points(sweep: Sweep) -> list[Point]:
    """Every point of the sweep, base system by base system, in a fixed order (the same sweep file, the same points)."""
    names = list(sweep.axes)
    if sweep.sampling.method == "grid":
        combos = list(itertools.product(*(_grid_values(sweep.axes[k]) for k in names)))
    else:
        u = sample_unit(sweep.sampling.method, sweep.sampling.points, len(names), sweep.sampling.seed)
        cols = [_draw(sweep.axes[k], u[:, i]) for i, k in enumerate(names)]
        combos = list(zip(*cols)) if names else [()] * sweep.sampling.points
    out = []
    for base in sweep.systems:
        for combo in combos:
            out.append(Point(len(out), base, tuple(zip(names, combo))))
    return out


def system_of(sweep: Sweep, p: Point):
    """The System of point `p` (InputError: the point is not a valid system)."""
    return point_system(_base(p.base, sweep.pricing), dict(p.values), sweep.axes)


@lru_cache(maxsize=64)
def _base(name: str, pricing: str):
    return base_system(name, pricing)


@lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of perfmodel's sources and data files (Python, YAML, JSON, the kernel tables): results of another
    version of the program are not reused."""
    root = Path(__file__).resolve().parents[1]
    data = Path(str(_data_root()))
    h = hashlib.sha256()
    for folder in (root, data):
        for f in sorted(folder.rglob("*")):
            if f.is_file() and f.suffix in (".py", ".yaml", ".json", ".csv", ".gz") and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(folder)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _data_root():
    from importlib import resources

    return resources.files("perfmodel.hardware_specs")


@dataclass(frozen=True)
class Chunk:
    """One workload on consecutive points: what a worker runs and one Parquet file holds."""

    key: str
    workload: Workload
    points: tuple[Point, ...]
    version: str = ""  # the code version of the process that laid it out (evaluate.run_chunk checks a worker's)


def point_key(base_spec: str, p: Point) -> str:
    """What a point's results depend on besides the workload and the code: its base system's full spec (a user's
    file may change) and its axis values (the point's system is a function of the two, `system_of`)."""
    return hashlib.sha256(json.dumps([base_spec, [list(v) for v in p.values]]).encode()).hexdigest()[:16]


def workload_key(w: Workload) -> str:
    """What a workload's rows depend on: its fields, and the model they name as loaded (a user's model file may
    change under the same name)."""
    from ..spec.model.catalogue import load_model

    return json.dumps([w.model_dump_json(), load_model(w.job.model).model_dump_json()])


def check_axes(sweep: Sweep, pts: list[Point]) -> None:
    """Refuse an axis that names no field of a base system (bad input, before anything is written): each axis
    applied alone, at its first point's value, to each base system. A value that makes no valid system is a result
    (InvalidPoint), found when the point runs."""
    firsts = {}
    for p in pts:
        for name, v in p.values:
            firsts.setdefault((p.base, name), v)
    for (base, name), v in firsts.items():
        try:
            point_system(_base(base, sweep.pricing), {name: v}, sweep.axes)
        except InvalidPoint:
            pass


def chunks(sweep: Sweep, pts: list[Point] | None = None) -> list[Chunk]:
    """The sweep's tasks in chunks: workload by workload, `chunk_points` points each, keyed by (workload and its
    model, the points' indices, base systems and values, pricing, code version)."""
    pts = points(sweep) if pts is None else pts
    check_axes(sweep, pts)
    bases = {b: _base(b, sweep.pricing).model_dump_json() for b in sweep.systems}
    keys = [point_key(bases[p.base], p) for p in pts]
    version = code_version()
    out = []
    for w in sweep.workloads:
        wjson = workload_key(w)
        for start in range(0, len(pts), sweep.chunk_points):
            group = pts[start:start + sweep.chunk_points]
            h = hashlib.sha256(json.dumps([wjson, version, sweep.pricing,
                                           [(p.index, p.base, keys[p.index]) for p in group]]).encode())
            out.append(Chunk(f"{w.name}-{start:07d}-{h.hexdigest()[:12]}", w, tuple(group), version))
    return out
