"""Calibrate a spec from measured training runs: `perfmodel calibrate --from-runs RUNS.csv|LOGDIR`.

A user gives a few measured steps of their own cluster and stack (a CSV in the columns of the published-runs
development set, which docs/stacks.md lists; or Megatron-LM / torchtitan logs, read by
`calibrate.runs.logs`). Each run is priced by the cost model with the given spec; the step's parts are split into
compute C and exposed communication M (`cost.step.run_fit.COMPUTE_TIME`, `COMM_TIME`) and host time H (the seconds the
device waits on its host, `cost.host.launch_queue`, plus the stack's per-step overhead), and what is physical and
size-free is fitted (a calibration from runs of one size must carry over to another):

    measured ~ C / compute_speed + M / network_speed + H / host_speed [+ step_overhead_s]   (cost.step.run_fit.run_fit_time)

as the posterior mode of a Bayesian update of the uncalibrated spec (a shrinkage fit): the likelihood is robust in
the runs' relative residuals (soft-L1 with a 5% scale, SOFT_SCALE, which a run's noise is taken to be: one odd run
does not pull the fit), the prior Gaussian in the log speeds, centred on the spec (speeds 1), with the standard
deviations PRIOR_SD. A host speed scales with the kernels and operators a step launches, so a fit to large runs
(host time ~0) leaves it at its prior instead of adding seconds to every small run, as the fixed per-step overhead
of earlier versions did (Korthikanti et al. 2022 Table 5: 2.06 s per step fitted on the 14-94 s runs put the 1.4 s
runs at 3.2 s). That overhead is fitted only where a user asks for it (`--step-overhead`: a cluster with a slow
data loader or logging, whose runs show it), its prior 10% of the median step.

With one to three runs the prior holds what they cannot tell apart (compute from communication; a cluster's bias
from its runs' noise), with twenty the runs decide. A speed the runs push to its bound (BOUNDS) is one they cannot
pin down: it is held at its prior, the others refitted, the interval widened to at least the stacks' own, and the
fit says so (`RunFit.held`); a compute speed beyond what any development-set cluster is from its spec (FAR) is kept
but flagged (`RunFit.notes`, naming the runs furthest from the spec). Only input errors are refused.

PRIOR_SD comes from the development sets and this project's measurements, not from a user's runs: the spread
between source groups of the compute speed each group's own runs fit (median absolute deviation of log speed x
1.48: 0.13 dense, 0.28 MoE, taken as 0.2), the network speed, which most groups' runs barely inform (1.4: taken as
1, a factor e at one standard deviation), and the host speed: 0.5, the log ratio of the per-launch host cost of
the two lent H100 machines' hosts this project measured (154.8 us against 91.9 us, in the two machines'
calibrations kept with the benchmarks). The fitted values, every run's residual and its leave-one-out prediction
(the fit to all other runs) go into the written spec (`spec.hardware.system.RunFit`), whose predictions then carry them.

The model is linear in (1/compute_speed, 1/network_speed, 1/host_speed, overhead), so a fit costs one cost-model
evaluation per run; leave-one-out and the benchmark's leave-one-group-out refit the small linear problem only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ...cost.estimate import estimate
from ...cost.step.run_fit import COMM_TIME, COMPUTE_TIME, run_fit_time
from ...errors import InputError
from ...types import MAX_COUNT
from ...spec.hardware.system import RunFit, RunResidual, System
from .table import Case, cell_number, to_case
from ...spec.stack.profile import Interval
from ...spec.stack.release import profile_of
from .intervals import weighted_bounds

# prior sd of log compute speed, log network speed, log host speed, overhead / median step (module docstring)
PRIOR_SD = (0.2, 1.0, 0.5, 0.1)
SPEEDS = ("compute_speed", "network_speed", "host_speed")
NEUTRAL = (1.0, 1.0, 1.0, 0.0)  # the uncalibrated spec: every speed 1, no per-step overhead
FAR = 4.0  # a fitted log compute speed beyond this many PRIOR_SD[0] is flagged (a unit slip, another GPU?)
SOFT_SCALE = 0.05  # relative residual where the soft-L1 loss turns from quadratic to linear: a run's noise
MIN_RUNS = 3
QUANTILES = (0.1, 0.9)  # the 80% prediction interval
MIN_INTERVAL_RUNS = 5  # fewer leave-one-out residuals than this say too little about the tails
COLUMNS = ("row_id", "source_group", "row_type", "trust", "model", "n_layers", "hidden", "ffn_hidden", "heads",
           "kv_heads", "vocab", "seq_len", "gpu_type", "n_gpus", "tp", "pp", "dp", "cp", "sp", "vpp", "micro_batch",
           "global_batch", "recompute", "zero_dist_opt", "precision", "framework", "iter_time_s",
           "tokens_per_s_per_gpu", "tokens_per_s_total", "source")
REQUIRED = ("n_layers", "hidden", "heads", "vocab", "seq_len", "tp", "pp", "dp", "global_batch")
BOUNDS = ([0.05, 0.05, 0.05, 0.0], [20.0, 20.0, 20.0, np.inf])  # of (1 / each speed, overhead)
STEP_S = (1e-6, 1e7)  # a measured step: a microsecond to four months (anything outside is a unit or typing slip)
# Sizes and counts: whole numbers from 1 to this (vocab 1e400 read as inf stopped int(); a hidden of 2e9 with no
# heads would make table.model_for try every head count up to it).
SIZES = {"n_layers": MAX_COUNT, "hidden": 2**20, "ffn_hidden": MAX_COUNT, "heads": MAX_COUNT, "kv_heads": MAX_COUNT,
         "vocab": MAX_COUNT, "seq_len": MAX_COUNT, "n_gpus": MAX_COUNT, "tp": MAX_COUNT, "pp": MAX_COUNT,
         "dp": MAX_COUNT, "cp": MAX_COUNT, "vpp": MAX_COUNT, "micro_batch": MAX_COUNT, "global_batch": MAX_COUNT}


@dataclass
class Parts:
    """A run priced at the spec's rates: seconds of compute, exposed communication and host time per step."""

    compute: np.ndarray
    comm: np.ndarray
    host: np.ndarray
    measured: np.ndarray
    scopes: np.ndarray  # each run's "system / stack profile": a fit applies to plans of its runs' stacks on their
    # system, a release line's versions as one (RunFit.applies_to)
    # (spec.hardware.system.RunFit.applies_to; a calibrated spec is one system)
    estimates: list | None = None  # the uncalibrated Estimate of each run (price); not carried by take

    def predict(self, params, fitted=None) -> np.ndarray:
        """Seconds per step with `params` = (compute_speed, network_speed, host_speed, step_overhead_s); `fitted`:
        the scopes of the runs the params were fitted to (None: every run's), the others at the spec's rates."""
        out = run_fit_time(self.compute, self.comm, self.host, *params)
        if fitted is None:
            return out
        return np.where(np.isin(self.scopes, list(fitted)), out, run_fit_time(self.compute, self.comm, self.host,
                                                                             *NEUTRAL))

    def take(self, idx) -> Parts:
        return Parts(self.compute[idx], self.comm[idx], self.host[idx], self.measured[idx], self.scopes[idx])

    @staticmethod
    def joined(parts: list[Parts]) -> Parts:
        """The runs of several Parts, in order, with their estimates."""
        cols = [np.concatenate([getattr(p, f) for p in parts]) if parts else np.empty(0)
                for f in ("compute", "comm", "host", "measured", "scopes")]
        return Parts(*cols, [e for p in parts for e in (p.estimates or [])])


def read_runs_table(path: str | Path) -> pd.DataFrame:
    """Measured runs as a dev-set table: a CSV file, or a directory (or file) of training logs."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"--from-runs {str(path)!r}: no such file or directory; valid: a CSV of measured runs "
                         "(the published-runs columns) or a directory of Megatron-LM / torchtitan logs")
    if path.is_dir() or path.suffix.lower() != ".csv":
        from .logs import runs_from_logs

        return runs_from_logs(path)
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as err:
        raise InputError(f"--from-runs {str(path)!r}: not a readable CSV ({str(err).splitlines()[0]})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if "iter_time_s" not in df.columns and "tokens_per_s_per_gpu" not in df.columns:
        missing.append("iter_time_s (or tokens_per_s_per_gpu)")
    if missing:
        raise InputError(f"--from-runs {str(path)!r}: missing column(s) {', '.join(missing)}; valid: the columns "
                         "of the published-runs CSV (docs/stacks.md, 'Calibrating to your cluster from measured runs')")
    return df


def cases_of(df: pd.DataFrame, system: System, where: str) -> list[Case]:
    """Every training run of the table priced on `system`; InputError naming the first run that cannot be."""
    df = df.copy()
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = np.nan
    df["row_id"] = [str(r) if isinstance(r, str) or r == r else f"run{i + 1}" for i, r in enumerate(df["row_id"])]
    # text columns: object dtype first (an empty column reads as float64, which a future pandas will not fill with text)
    for col, default in (("source_group", "user-runs"), ("trust", "A"), ("framework", "megatron-core"),
                         ("source", where), ("row_type", "training_run")):
        df[col] = df[col].astype(object).fillna(default)
    runs = df[df["row_type"] == "training_run"]
    cases = []
    for _, row in runs.iterrows():
        for col, high in SIZES.items():
            v = cell_number(row[col])
            if v is not None and not (np.isfinite(v) and v == int(v) and 1 <= v <= high):
                raise InputError(f"{where}: run {row['row_id']}: {col} = {row[col]!r}; valid: a whole number from 1 "
                                 f"to {high}")
        case = to_case(row, system)
        if case.reason:
            raise InputError(f"{where}: run {case.row_id}: {case.reason}")
        low, high = STEP_S
        if not low <= case.measured_s <= high:  # 1e-175 s made the fit's residuals overflow to inf
            raise InputError(f"{where}: run {case.row_id}: measured step time {case.measured_s!r} s (from iter_time_s "
                             f"or tokens_per_s_*); valid: {low:g} to {high:g} seconds")
        stated, p = pd.to_numeric(row["n_gpus"], errors="coerce"), case.plan
        if stated == stated and float(stated) != p.tp * p.pp * p.dp * p.cp:
            raise InputError(f"{where}: run {case.row_id}: n_gpus = {row['n_gpus']} != tp*pp*dp*cp = {p.tp}*{p.pp}*"
                             f"{p.dp}*{p.cp} = {p.tp * p.pp * p.dp * p.cp}; valid: a layout that covers the run's "
                             "devices")
        cases.append(case)
    if len(cases) < MIN_RUNS:
        raise InputError(f"{where}: {len(cases)} training run(s); valid: at least {MIN_RUNS} measured runs to fit "
                         "compute speed, network speed and per-step overhead")
    return cases


def price(cases: list[Case], where: str = "") -> Parts:
    """Each run at the spec's rates (the system of each case, uncalibrated), split into the parts the fit scales.
    `where`: the input the runs came from, which an error names first."""
    rows, ests = [], []
    for c in cases:
        system = c.system.model_copy(update={"run_fit": None})
        try:
            e = estimate(c.model, system, c.plan)
        except InputError as err:
            raise InputError(f"{where + ': ' if where else ''}run {c.row_id}: {err}") from None
        t = e.time_s.model_dump()
        # the host seconds the device waits on stay as priced (a host speed is not fitted here)
        rows.append((sum(t[k] for k in COMPUTE_TIME), sum(t[k] for k in COMM_TIME), t["overhead"] + t["host"],
                     c.measured_s))
        ests.append(e)
    a = np.array(rows, float).reshape(-1, 4)
    scopes = np.array([f"{c.system.name} / {profile_of(c.plan.stack)}" for c in cases], dtype=object)
    return Parts(a[:, 0], a[:, 1], a[:, 2], a[:, 3], scopes, ests)


def fit(parts: Parts, weights=None, overhead: bool = False, hold=()) -> tuple[float, float, float, float]:
    """(compute_speed, network_speed, host_speed, step_overhead_s): the posterior mode of the module docstring's
    update, by scipy.optimize.least_squares over the log inverse speeds and the overhead within BOUNDS.

    `weights`: per run (default 1 each; the residuals are scaled by sqrt(weight)); `overhead` True fits a per-step
    overhead too (else 0); `hold`: names in SPEEDS kept at their prior, 1 (`held_speeds`)."""
    scale = float(np.median(parts.measured))  # the overhead's prior is stated relative to a typical step
    n = len(parts.measured)
    w = np.ones(n) if weights is None else np.asarray(weights, float)
    free = [i for i, name in enumerate(SPEEDS) if name not in hold] + ([3] if overhead else [])
    sd = np.asarray(PRIOR_SD)[free]
    lo, hi = BOUNDS
    low = [np.log(lo[i]) if i < 3 else lo[i] for i in free]
    high = [np.log(hi[i]) if i < 3 else hi[i] for i in free]

    def full(x):
        out = np.zeros(4)
        out[free] = x
        return out

    def residuals(x):
        lc, ln, lh, o = full(x)
        pred = run_fit_time(parts.compute, parts.comm, parts.host, np.exp(-lc), np.exp(-ln), np.exp(-lh), o)
        prior = np.array([v / scale if i == 3 else v for i, v in zip(free, x)])
        # a prior term of (x / sd) standard deviations weighs as that many run-noise scales (SOFT_SCALE)
        return np.concatenate([pred / parts.measured - 1.0, SOFT_SCALE * prior / sd])

    if not free:
        return 1.0, 1.0, 1.0, 0.0
    # x0 clear of the bounds: least_squares' trust region does not leave a start on (or a hair from) one
    x0 = [1e-6 * scale if i == 3 else 0.0 for i in free]
    sol = least_squares(residuals, x0=x0, loss=robust_loss(w), bounds=(low, high))
    lc, ln, lh, o = full(sol.x)
    return float(np.exp(-lc)), float(np.exp(-ln)), float(np.exp(-lh)), float(o)


def at_bound(params) -> list[str]:
    """The speeds of `params` the fit pushed to (within 0.1% of) a bound of BOUNDS: what the runs cannot pin down."""
    lo, hi = BOUNDS
    return [name for i, name in enumerate(SPEEDS)
            if not 1 / hi[i] * 1.001 < params[i] < 1 / lo[i] * 0.999]


# The host speed is pinned down by runs that wait on their host for a share of the step that differs from run to
# run: one run at least HOST_SHARE of whose predicted step is the host's wait, and one whose share is under half of
# that run's (host and compute would otherwise scale together, and a slower host reads as a slower GPU).
HOST_SHARE = 0.1


def host_unpinned(parts: Parts) -> str:
    """Why the runs cannot pin the host speed down ('' where they can): none waits on its host for HOST_SHARE of
    its step, or all wait alike (one micro-batch size and model: the host's share is the same in every run)."""
    pred = parts.predict(NEUTRAL)
    share = np.divide(parts.host, pred, out=np.zeros_like(pred), where=pred > 0)
    if len(share) == 0 or share.max() < HOST_SHARE:
        return (f"no run waits on its host for {HOST_SHARE:.0%} of its step (the most: "
                f"{(share.max() if len(share) else 0):.0%}): give a run at a micro-batch small enough to be "
                "host-bound")
    if share.min() > share.max() / 2:
        return (f"every run waits on its host for a like share of its step ({share.min():.0%}-{share.max():.0%}): "
                "give runs at two or more micro-batch sizes, one of them host-bound, one not")
    return ""


def fit_held(parts: Parts, weights=None, overhead: bool = False) -> tuple[tuple, list[str]]:
    """`fit`, then again with every speed it pushed to a bound held at its prior (until none is): (params, the
    speeds held). The host speed is held from the start where the runs cannot pin it down (`host_unpinned`)."""
    held: list[str] = ["host_speed"] if host_unpinned(parts) else []
    params = fit(parts, weights, overhead, hold=held)
    while bound := [b for b in at_bound(params) if b not in held]:
        held += bound
        params = fit(parts, weights, overhead, hold=held)
    return params, held


def robust_loss(weights: np.ndarray):
    """least_squares' loss for the runs' residuals (one weight each) then the prior's: soft-L1 at SOFT_SCALE on
    the runs (rho(z) = 2 C^2 (sqrt(1 + z / C^2) - 1), z the squared residual; scipy's soft_l1 with f_scale C),
    each run's rho times its weight (outside the loss, so a weight counts as that many runs in the tails too),
    plain squares on the prior (Gaussian), as (rho, rho', rho'') rows."""
    c2, n, w = SOFT_SCALE**2, len(weights), np.asarray(weights, float)

    def loss(z):
        out = np.empty((3, len(z)))
        t = np.sqrt(1 + z[:n] / c2)
        out[:, :n] = w * 2 * c2 * (t - 1), w / t, -0.5 * w / (c2 * t**3)
        out[0, n:], out[1, n:], out[2, n:] = z[n:], 1.0, 0.0
        return out
    return loss


def leave_one_out(parts: Parts, overhead: bool = False) -> np.ndarray:
    """Each run predicted by the fit to all the others (NaN with fewer than MIN_RUNS + 1 runs)."""
    n = len(parts.measured)
    if n <= MIN_RUNS:
        return np.full(n, np.nan)
    out = np.empty(n)
    for i in range(n):
        rest = parts.take(np.arange(n) != i)
        out[i] = parts.take([i]).predict(fit_held(rest, overhead=overhead)[0], set(rest.scopes))[0]
    return out


def interval_from(errors: np.ndarray, source: str, weights=None) -> Interval | None:
    """The 80% interval of measured/predicted - 1 over `errors` (weighted quantiles; None with too few)."""
    errors = np.asarray(errors, float)
    keep = np.isfinite(errors)
    if keep.sum() < MIN_INTERVAL_RUNS:
        return None
    e = errors[keep]
    w = np.ones_like(e) if weights is None else np.asarray(weights, float)[keep]
    lo, hi = weighted_bounds(e, w, QUANTILES[0])
    return Interval(low=lo, high=hi, coverage=QUANTILES[1] - QUANTILES[0], rows=int(keep.sum()), source=source)


def furthest(cases: list[Case], parts: Parts, n: int = 3) -> str:
    """The runs whose measured step lies furthest from the uncalibrated spec's (|log measured / predicted|), as a
    refusal names them: 'furthest from the spec: r3 (3.1x its prediction), ...'."""
    ratio = parts.measured / parts.predict(NEUTRAL)
    order = np.argsort(-np.abs(np.log(ratio)))[:n]
    return "furthest from the spec: " + ", ".join(f"{cases[i].row_id} ({ratio[i]:.3g}x its prediction)"
                                                    for i in order)


def calibrate_from_runs(path: str | Path, system: System, source: str, overhead: bool = False) -> System:
    """`system` with a RunFit fitted to the runs at `path` (see the module docstring); `overhead`: fit a per-step
    overhead too (`calibrate --step-overhead`)."""
    where = f"--from-runs {str(path)!r}"
    table = read_runs_table(path)
    cases = cases_of(table, system, where)
    parts = price(cases, where)
    params, held = fit_held(parts, overhead=overhead)
    notes = []
    why_host = host_unpinned(parts)
    if why_host:
        notes.append(f"host_speed held at the spec's 1: the runs cannot pin it down, {why_host}")
    bound = [h for h in held if h != "host_speed" or not why_host]
    if bound:
        notes.append(f"the runs cannot pin down {', '.join(bound)} (the fit pushed {'it' if len(bound) == 1 else 'them'}"
                     f" to a bound): held at the spec's 1; {furthest(cases, parts)}")
    if abs(np.log(params[0])) > FAR * PRIOR_SD[0]:  # a unit slip or the wrong --hardware, or a stack far off
        low, high = np.exp(-FAR * PRIOR_SD[0]), np.exp(FAR * PRIOR_SD[0])
        notes.append(f"compute_speed {params[0]:.3g} is beyond what any development-set cluster is from its spec "
                     f"({low:.2g} to {high:.2g}, {FAR:g} prior standard deviations): check those runs' step time "
                     f"(seconds per step), layout and batch, or the --hardware they ran on; {furthest(cases, parts)}")
    if overhead and params[3] > 0.5 * parts.measured.min():
        notes.append(f"the fit puts {params[3]:.3g} s of every step outside the model, more than half of the shortest "
                     f"run ({parts.measured.min():.3g} s): the runs and the spec disagree by more than a data loader "
                     "explains; check each run's layout, batch and step time")
    pred = parts.predict(params)
    loo = leave_one_out(parts, overhead)
    err = parts.measured / loo - 1  # measured / predicted - 1, as the interval is stated
    interval = interval_from(err, f"leave-one-out residuals of the runs in {path}")
    if bound:  # a speed the runs pushed to a bound; a host speed they leave untouched narrows nothing either way
        interval = widened(interval, parts, f"no narrower than the runs' stacks' own (held: {', '.join(bound)})")
    runs = [RunResidual(run=c.row_id, stack=c.plan.stack, measured_s=float(m), predicted_s=float(p),
                        loo_predicted_s=None if np.isnan(q) else float(q))
            for c, m, p, q in zip(cases, parts.measured, pred, loo)]
    loo_mape = float(np.nanmean(np.abs(loo / parts.measured - 1))) if np.isfinite(loo).any() else None
    c, n, h, o = params
    run_fit = RunFit(compute_speed=round(c, 4), network_speed=round(n, 4), host_speed=round(h, 4),
                     step_overhead_s=round(o, 6), held=held, notes=notes, interval=interval, loo_mape=loo_mape,
                     runs=runs, skipped=table.attrs.get("skipped", []), source=source)
    return system.model_copy(update={"run_fit": run_fit})


def widened(interval: Interval | None, parts: Parts, why: str) -> Interval:
    """`interval` (or none) widened to cover the uncalibrated prediction intervals of the runs' stacks (each run's
    Estimate step_time_s_low / high, as measured/predicted - 1): a fit that held a speed at its prior knows no more
    than the stacks' profiles about it."""
    est = parts.estimates or []
    low = min((e.step_time_s_low / e.step_time_s - 1 for e in est), default=0.0)
    high = max((e.step_time_s_high / e.step_time_s - 1 for e in est), default=0.0)
    if interval is not None:
        low, high = min(low, interval.low), max(high, interval.high)
    return Interval(low=low, high=high, coverage=QUANTILES[1] - QUANTILES[0], rows=len(parts.measured),
                    source=(interval.source + "; " if interval else "") + why)


def report(system: System) -> str:
    """The fitted parameters and every run's residual and leave-one-out error, as `calibrate` prints them."""
    f = system.run_fit
    lines = [f"calibrated {system.name} from {len(f.runs)} measured runs ({f.source})",
             f"  compute_speed   {f.compute_speed:.4f}  (compute parts of a step divided by it)",
             f"  network_speed   {f.network_speed:.4f}  (exposed communication divided by it)",
             f"  host_speed      {f.host_speed:.4f}  (host time the device waits on divided by it)"]
    if f.step_overhead_s:
        lines.append(f"  step_overhead_s {f.step_overhead_s:.4g}  (added to every step: --step-overhead)")
    lines += [f"  note: {n}" for n in f.notes]
    if f.loo_mape is not None:
        lines.append(f"  leave-one-out MAPE {100 * f.loo_mape:.1f}%")
    if f.interval is not None:
        lines.append(f"  80% interval {100 * f.interval.low:+.1f}% / {100 * f.interval.high:+.1f}% "
                     f"({f.interval.source})")
    else:
        lines.append(f"  interval: fewer than {MIN_INTERVAL_RUNS} leave-one-out residuals; predictions keep their "
                     "stacks' intervals")
    lines += [f"  skipped (not a run log): {why}" for why in f.skipped]
    table = pd.DataFrame([{"run": r.run, "stack": r.stack, "measured s": r.measured_s, "fitted s": r.predicted_s,
                           "error %": 100 * (r.predicted_s / r.measured_s - 1),
                           "LOO error %": (100 * (r.loo_predicted_s / r.measured_s - 1)
                                           if r.loo_predicted_s else float("nan"))} for r in f.runs])
    lines += ["", table.to_string(index=False, float_format=lambda x: f"{x:.3f}")]
    return "\n".join(lines)
