"""comm_overlap from a CPU trace's own collectives: how much of a collective that ran beside the backward
hid behind it, in the sense `perfmodel calibrate --device` measures it (calibrate.machine.fit.overlap_fraction):

    comm_overlap = (t_c + t_m - t_both) / min(t_c, t_m), clipped to [0, 1]

with t_c the compute alone, t_m the collective alone and t_both the two together (0: serial, 1: fully concurrent).
calibrate --device times them as three separate loops; a trace has each collective once, beside whatever the job ran,
so each term is taken from the trace itself:
- a collective's window is its gloo worker span on its rank (c10d's async all-reduce runs on gloo's threads while
  the rank's main thread goes on with the backward: torch DDP's reducer launches a bucket's all-reduce as soon as
  its gradients are ready);
- a window is *beside compute* where the rank's working operators (trace.reader.leaf_work) cover at least half of
  it (BESIDE), *alone* where they cover at most a tenth (ALONE: DDP's last bucket, whose all-reduce waits for the
  backward's end);
- t_both: the seconds the operators ran inside the windows beside compute (their spans clipped to the window);
- t_c: the same operators' seconds alone, each at the mean span of its name and input shapes outside every
  collective's window on every rank (the same fraction of it inside the window);
- t_m: each collective beside compute at the seconds per byte of the same kind's alone calls (their seconds over
  their bytes; the latency a small call adds is left out, which can only raise the overlap).
The sums over every window beside compute on every rank and step go through `overlap_fraction`: t_both - t_c is
the compute the collectives slowed, and on the host cores that also compute (gloo) it is near t_m, serial.

dp4's trace (the committed cpu-smoke-vm traces, 4 ranks on 2 cores): the first 1 MiB bucket's all-reduce
ran beside the backward 8 times (spans 7-97 ms, most of it waiting for the slower ranks to reach the bucket); the
operators inside took ~30 ms more than the same operators outside any window against ~23 ms of t_m at the 20 MB
last bucket's rate: comm_overlap 0, as `calibrate --device cpu` measured 0.075 on the same VM.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..machine.fit import overlap_fraction
from .reader import RankTrace, leaf_work

# Classification thresholds, not fitted constants: the share of a collective's window the rank's operators cover for
# it to count as beside compute (BESIDE, at least) or alone (ALONE, at most). On the committed cpu-smoke dp4 trace
# the fraction is 0 for every BESIDE in 0.3-0.9 and ALONE in 0.05-0.2 (t_both / t_c / t_m 163 / 136 / 24 ms at
# 0.3-0.5, 154 / 129 / 21 at 0.7, 27 / 15 / 9 at 0.9; this project's sweep of both, 2026-11-28), so the result does
# not hang on them.
BESIDE = 0.5
ALONE = 0.1


@dataclass
class TraceOverlap:
    """What the trace's collectives say about overlap: the three sums `overlap_fraction` takes and their counts."""

    fraction: float | None  # comm_overlap; None where the trace has no collective beside compute with an alone rate
    t_c: float = 0.0
    t_m: float = 0.0
    t_both: float = 0.0
    beside: int = 0  # collective calls beside compute, all ranks and steps
    alone: int = 0  # collective calls alone
    why: str = ""  # where fraction is None: why


def _key(op) -> tuple:
    return op.name, repr(op.dims)


def _inside(op, a: float, b: float) -> float:
    return max(0.0, min(op.t1, b) - max(op.t0, a))


def trace_overlap(traces: list[RankTrace]) -> TraceOverlap:
    """The trace's comm_overlap and the sums it comes from (module docstring)."""
    windows = []  # (rank trace, kind, bytes, t0, t1, its rank's working operators overlapping it)
    outside = defaultdict(list)
    for t in traces:
        spans = [(g["kind"], g["nbytes"], g["t0"], g["t1"]) for g in t.gloo if t.in_steps(g["t0"]) and g["t1"] > g["t0"]]
        work = leaf_work(t)
        # which operators overlap each span, as arrays (a span-by-operator loop in Python took seconds a trace)
        t0, t1 = np.array([op.t0 for op in work], float), np.array([op.t1 for op in work], float)
        beside_any = np.zeros(len(work), bool)
        for kind, nbytes, a, b in spans:
            hit = np.flatnonzero((t1 > a) & (t0 < b))
            beside_any[hit] = True
            windows.append((kind, nbytes, a, b, [work[i] for i in hit]))
        for op, hit in zip(work, beside_any):
            if not hit:
                outside[_key(op)].append(op.dur)
    if not windows:
        return TraceOverlap(None, why=f"no gloo collective in the trace ({len(traces)} rank(s))")
    alone_mean = {k: float(np.mean(v)) for k, v in outside.items()}
    rate = defaultdict(lambda: [0.0, 0.0])  # kind -> [seconds, bytes] of the alone calls
    beside, alone = [], 0
    for kind, nbytes, a, b, ops in windows:
        covered = sum(_inside(op, a, b) for op in ops)
        if covered <= ALONE * (b - a) and nbytes > 0:
            rate[kind][0] += b - a
            rate[kind][1] += nbytes
            alone += 1
        elif covered >= BESIDE * (b - a):
            beside.append((kind, nbytes, a, b, ops))
    if not beside:
        return TraceOverlap(None, alone=alone, why=f"no collective ran beside compute in the trace ({len(traces)} "
                                                   "rank(s)): the base's comm_overlap stands")
    t_c = t_m = t_both = 0.0
    n = 0
    for kind, nbytes, a, b, ops in beside:
        if rate[kind][1] <= 0:
            continue
        n += 1
        t_m += nbytes * rate[kind][0] / rate[kind][1]
        for op in ops:
            inside = _inside(op, a, b)
            t_both += inside
            t_c += inside * alone_mean.get(_key(op), op.dur) / op.dur if op.dur > 0 else 0.0
    if n == 0:
        return TraceOverlap(None, beside=len(beside), alone=alone, why="no call of the kinds that ran beside compute "
                            "ran alone, to time them alone from: the base's comm_overlap stands")
    timed = min(t_c, t_m) > 0
    return TraceOverlap(overlap_fraction(t_c, t_m, t_both) if timed else None, t_c=t_c, t_m=t_m,
                        t_both=t_both, beside=n, alone=alone,
                        why="" if timed else "the collectives beside compute had no operator (t_c) or no bytes (t_m) "
                        "inside them to time: the base's comm_overlap stands")


def overlap_source(o: TraceOverlap, where: str) -> str:
    """The spec's citation of a comm_overlap taken from the trace at `where`."""
    return (f"measured in the trace ({where}; calibrate.trace.overlap): {o.beside} collective calls ran beside the "
            f"backward, {o.alone} alone; t_both = {o.t_both * 1e3:.1f} ms of operators inside the ones beside "
            f"compute, t_c = {o.t_c * 1e3:.1f} ms the same operators (name and shapes) take outside any collective, "
            f"t_m = {o.t_m * 1e3:.1f} ms the collectives at their alone calls' seconds per byte; comm_overlap = "
            "(t_c + t_m - t_both) / min(t_c, t_m) clipped to [0, 1], as calibrate --device measures it")
