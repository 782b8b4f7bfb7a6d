"""A memory budget by Lagrangian relaxation: the exact DP minimises time + lambda * bytes, and lambda >= 0 is
searched for the smallest value whose optimum fits (PaSE minimises time only; this is our extension)."""

from __future__ import annotations

from dataclasses import dataclass

from .program import ChainProblem, Problem


@dataclass
class Point:
    lam: float  # the lambda it was found at; its edges run the way that is cheaper there
    assignment: list[int]
    time: float
    memory: float
    reported_lam: float | None = None


def fit_budget(prob: Problem | ChainProblem, budget: float, max_runs: int = 64) -> tuple[Point, bool, int]:
    """The strategy of the smallest lambda >= 0 whose time + lambda * memory optimum fits `budget`.

    lambda = 0 if the time-optimal strategy fits. Otherwise the optimum as a function of lambda is the lower
    envelope of the lines time(x) + lambda * memory(x); walk its breakpoints between the time-optimal point
    (infeasible) and the memory-optimal one (feasible), each run at the lambda where the two current lines cross,
    until no strategy lies below the crossing: that lambda is the breakpoint where the optimum starts to fit.
    Returns (point, budget met, DP runs). When even the memory-optimal strategy exceeds the budget, that one.
    """
    def run(lam: float) -> Point:
        _, a = prob.solve(lam)
        return Point(lam, a, *prob.evaluate(a, lam))

    lo = run(0.0)
    if lo.memory <= budget:
        lo.reported_lam = 0.0
        return lo, True, 1
    # Memory first, time only to break ties: the time-optimal strategy's bytes priced at a million of its steps.
    hi = run(1e6 * max(lo.time, 1e-30) / lo.memory)
    runs, lam = 2, 0.0
    if hi.memory > budget:
        return hi, False, runs
    while runs < max_runs:
        lam = max(0.0, (hi.time - lo.time) / (lo.memory - hi.memory))
        cur = run(lam)
        runs += 1
        line = lo.time + lam * lo.memory
        if cur.time + lam * cur.memory >= line - 1e-12 * abs(line):
            break
        if cur.memory <= budget:
            hi = cur
        else:
            lo = cur
    hi.reported_lam = lam
    return hi, True, runs
