"""One GPU's power by kernel mix: the duty cycles that fit perfmodel's power model (idle, memory-bound and
compute-bound draw, the board limit and its averaging window, the clock the limit leaves).

    python -m benchmarks.probes.power_duty --out benchmarks/results/device/power_duty_h200.json     # a CUDA device, ~5.5 min
    python -m benchmarks.probes.power_duty --fit FILE.json [--table-tflops 806] [--fit-out FIT.json] # no GPU
    python -m benchmarks.probes.power_duty --dry-run --out /tmp/dry.json  # the phases on CPU tensors, a fake nvidia-smi

The model: a device draws idle_w while waiting, memory_w while memory-bound kernels stream HBM, and a GEMM at
clock fraction s (1: the clock the kernel tables were timed at) draws idle_w + (compute_w - idle_w) * s**alpha at a
rate proportional to s. The board limit holds power averaged over a window: a workload sustains the largest s <= 1
whose time-averaged power is <= limit_w (memory-bound and idle time are not slowed by the SM clock).
Phases (`--settle` s unrecorded, `--seconds` recorded, `--cooldown` s idle between): idle; a bf16 size^3 GEMM loop;
a memory-bound c = a + b over `--mem-gib` GiB tensors; GEMMs interleaved with that add at GEMM time duties
25/50/75% (adds per GEMM from each kernel timed alone); ~`--burst-ms` GEMM bursts with host sleeps at those duties;
long bursts (`--long-on` s on, `--long-off` s off) for the averaging window. CUDA events time the kernels only;
nvidia-smi is read every 100 ms, nothing on the card is set. `--fit`: the constants by scipy's least squares.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from datetime import datetime

import numpy as np

# nvidia-smi fields, each with the older name a driver may know instead (clocks_throttle_reasons before r535).
FIELDS = (("timestamp",), ("clocks.sm",), ("clocks.max.sm",), ("power.draw",), ("power.draw.instant",),
          ("temperature.gpu",), ("clocks_event_reasons.active", "clocks_throttle_reasons.active"), ("power.limit",))
FAKE_SMI = ("import time, datetime\nwhile True:\n print(datetime.datetime.now().strftime('%Y/%m/%d %H:%M:%S.%f')[:-3] "
            "+ ', 1980, 1980, 100.0, 100.0, 40, 0x0000000000000000, 700.00', flush=True)\n time.sleep(0.1)")
PARAMS = ("idle_w", "memory_w", "compute_w", "alpha", "table_tflops", "limit_w")
FIT_KINDS = ("idle", "gemm", "mem", "gemm_mem", "gemm_idle")  # long bursts test the window, not the mix rule


def gemm_power(s: float, c: dict) -> float:
    """Watts while a compute-bound GEMM runs at clock fraction s: idle + (compute - idle) * s**alpha (the dynamic
    part of CMOS power, C V^2 f, with the voltage following the clock: alpha is fitted, ~3 if V ~ f)."""
    return c["idle_w"] + (c["compute_w"] - c["idle_w"]) * s ** c["alpha"]


def mix_power(s: float, g0: float, m: float, i: float, c: dict) -> float:
    """Time-averaged watts of a mix of g0 s of GEMM at s = 1, m s memory-bound and i s idle, run at clock s: the
    GEMM time stretches to g0 / s, the rest keeps its length."""
    return (g0 / s * gemm_power(s, c) + m * c["memory_w"] + i * c["idle_w"]) / (g0 / s + m + i)


def sustained_s(g0: float, m: float, i: float, c: dict) -> float:
    """The largest s <= 1 whose mix_power is <= limit_w. mix_power rises with s (C > idle, alpha >= 1, memory >=
    idle) from idle_w at s -> 0, so one root; 1 when the mix at full clock is under the limit."""
    from scipy.optimize import brentq

    if g0 <= 0 or mix_power(1.0, g0, m, i, c) <= c["limit_w"]:
        return 1.0
    if mix_power(1e-6, g0, m, i, c) >= c["limit_w"]:
        return 1e-6  # idle alone is over the limit: no clock holds it
    return brentq(lambda s: mix_power(s, g0, m, i, c) - c["limit_w"], 1e-6, 1.0, xtol=1e-13, rtol=1e-13)


def probe_fields(smi_id: str) -> list[str]:
    """The fields this driver answers (one query each: one unknown field fails a whole query), first name that works."""
    def works(f: str) -> bool:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={f}", "--format=csv,noheader,nounits", "-i", smi_id],
                           capture_output=True, text=True, check=False)
        return r.returncode == 0 and "not a valid field" not in r.stdout + r.stderr

    return [f for names in FIELDS if (f := next((n for n in names if works(n)), None))]


def parse_row(line: str, fields: list[str]) -> dict | None:
    """One csv row: numbers as floats, the event-reasons bit mask kept as its hex text, [N/A] as None."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(fields):
        return None
    row = {}
    for f, p in zip(fields, parts):
        try:
            row[f] = float(p)
        except ValueError:
            row[f] = None if p.startswith("[") or p in ("N/A", "Not Supported") else p
    return row


class Sampler:
    """nvidia-smi -lms 100 in a reader thread, each row's timestamp in seconds from `t0` (time.time()); `fake`:
    a python process printing a constant row (FIELDS' first names) every 100 ms instead (--dry-run)."""

    def __init__(self, fields: list[str], smi_id: str, t0: float, fake: bool = False):
        self.fields, self.t0, self.rows = fields, t0, []
        cmd = ([sys.executable, "-c", FAKE_SMI] if fake else
               ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-i", smi_id,
                "-lms", "100"])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if (row := parse_row(line, self.fields)) is not None:  # nvidia-smi's own time: right if rows come in blocks
                when = datetime.strptime(row["timestamp"], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                self.rows.append({"t": round(when - self.t0, 3), **row})

    def stop(self) -> list[dict]:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.thread.join(timeout=10)
        return self.rows


class HostEvent:
    """torch.cuda.Event's interface on the host clock, for --dry-run (CPU ops run synchronously, so it is exact)."""
    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.t - self.t) * 1e3

    synchronize = staticmethod(lambda: None)


class Rig:
    """A bf16 size^3 GEMM and c = a + b over three tensors of `mem_bytes` (2 reads + 1 write per element, far beyond
    L2: HBM-bound), with their timers; on the CPU fp32 tensors and HostEvents."""

    def __init__(self, device: str, size: int, mem_bytes: int):
        import torch

        self.torch, self.cuda = torch, device == "cuda"
        dt = torch.bfloat16 if self.cuda else torch.float32
        self.x, self.w = (torch.randn(size, size, device=device, dtype=dt) for _ in range(2))
        elems = mem_bytes // (2 if self.cuda else 4)
        self.a, self.b = (torch.randn(elems, device=device, dtype=dt) for _ in range(2))
        self.y, self.c = torch.empty_like(self.x), torch.empty_like(self.a)
        self.flops = 2.0 * size ** 3

    def event(self):
        return self.torch.cuda.Event(enable_timing=True) if self.cuda else HostEvent()

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def timed(self, kind: str, count: int):
        """`count` GEMMs or adds between two events: (begin, end)."""
        b, e = self.event(), self.event()
        b.record()
        for _ in range(count):
            self.torch.mm(self.x, self.w, out=self.y) if kind == "gemm" else self.torch.add(self.a, self.b, out=self.c)
        e.record()
        return b, e

    def alone_ms(self, kind: str, count: int = 10, reps: int = 5) -> float:
        """Milliseconds per kernel, timed alone (median of `reps` runs of `count`, after a warm-up)."""
        self.timed(kind, 3)
        runs = [self.timed(kind, count) for _ in range(reps)]
        self.sync()
        return statistics.median(b.elapsed_time(e) / count for b, e in runs)


@dataclass
class Spec:
    """One phase's repeated cycle: `gemms` GEMMs (or GEMM segments of `chunk` until `on_s` seconds have run), then
    `mems` adds, then a host sleep of `sleep_s` (the GPU idle) after waiting for the GPU."""
    name: str
    kind: str
    duty: float | None = None
    gemms: int = 0
    mems: int = 0
    sleep_s: float = 0.0
    on_s: float = 0.0
    chunk: int = 0


def mix_counts(duty: float, tg: float, tm: float) -> tuple[int, int]:
    """GEMMs and adds per cycle whose GEMM time share, timed alone, is within 0.01 of `duty` with the fewest GEMMs
    (the shortest cycle, well inside the averaging window), else nearest it."""
    def off(kn):
        return abs(kn[0] * tg / (kn[0] * tg + kn[1] * tm) - duty)

    return min(((k, n) for k in range(1, 9) for n in range(1, 33)), key=lambda kn: (max(off(kn), 0.01), kn[0], off(kn)))


def plan(tg: float, tm: float, a) -> list[Spec]:
    """The phases, in order, from the GEMM's and the add's milliseconds alone."""
    specs = [Spec("idle", "idle", sleep_s=0.05), Spec("gemm", "gemm", 1.0, gemms=8), Spec("mem", "mem", 0.0, mems=16)]
    for d in a.duties:
        k, n = mix_counts(d, tg, tm)
        specs.append(Spec(f"gemm_mem_{d * 100:.0f}", "gemm_mem", d, gemms=k, mems=n))
    for d in a.duties:
        k = max(1, round(a.burst_ms / tg))
        specs.append(Spec(f"gemm_idle_{d * 100:.0f}", "gemm_idle", d, gemms=k, sleep_s=k * tg / 1e3 * (1 - d) / d))
    specs.append(Spec("long_burst", "long_burst", a.long_on / (a.long_on + a.long_off), sleep_s=a.long_off,
                      on_s=a.long_on, chunk=max(1, round(25.0 / tg))))  # ~25-ms segments show the clock settle
    return specs


def run_phase(rig: Rig, spec: Spec, settle: float, seconds: float, t_run: float) -> dict:
    """`spec`'s cycle for settle + seconds; GEMM and add milliseconds summed over the recorded cycles (the GPU's
    wall from its first recorded event to the end), wall-clock times (from t_run, a time.time()) for the smi rows."""
    segs, recent, mark, burst, start = [], deque(), None, 0, time.perf_counter()
    while (now := time.perf_counter()) < start + settle + seconds or mark is None:  # at least one recorded cycle
        rec = now >= start + settle
        if rec and mark is None:
            mark, t0 = rig.event(), time.time() - t_run
            mark.record()
        first, done, b0 = None, 0, time.perf_counter()
        while (time.perf_counter() - b0 < spec.on_s) if spec.on_s else done < spec.gemms:
            b, e = rig.timed("gemm", spec.chunk or spec.gemms)
            first, done = (b if first is None else first), done + (spec.chunk or spec.gemms)
            segs.append(("gemm", spec.chunk or spec.gemms, b, e, burst, first, rec))
            recent.append(e)
            if spec.on_s and len(recent) > 4:  # keep the host within a few segments of the GPU: bursts in real time
                recent.popleft().synchronize()
        if spec.mems:
            b, e = rig.timed("mem", spec.mems)
            segs.append(("mem", spec.mems, b, e, burst, first, rec))
            recent.append(e)
        while len(recent) > 8:  # back-to-back cycles: bound the launch queue without draining it
            recent.popleft().synchronize()
        if spec.sleep_s:
            rig.sync()
            time.sleep(spec.sleep_s)
        burst += 1
    _, end = rig.timed("gemm", 0)  # an event after the last kernel
    rig.sync()
    rec_segs = [s for s in segs if s[6]]
    secs = {k: sum(s[2].elapsed_time(s[3]) for s in rec_segs if s[0] == k) / 1e3 for k in ("gemm", "mem")}
    out = {**asdict(spec), "t0": round(t0, 3), "t1": round(time.time() - t_run, 3),
           "wall_s": mark.elapsed_time(end) / 1e3, "gemm_s": secs["gemm"], "mem_s": secs["mem"],
           "gemm_count": sum(s[1] for s in rec_segs if s[0] == "gemm"), "cycles": len({s[4] for s in rec_segs})}
    g, m = secs["gemm"] / out["wall_s"], secs["mem"] / out["wall_s"]
    out.update(gemm_tflops=out["gemm_count"] * rig.flops / secs["gemm"] / 1e12 if secs["gemm"] else None,
               shares={"gemm": g, "mem": m, "idle": max(0.0, 1.0 - g - m)})
    if spec.on_s:  # every segment raw: [burst, ms from the burst's first event, ms, GEMMs]
        out["segments"] = [[s[4] - rec_segs[0][4], round(s[5].elapsed_time(s[2]), 3),
                            round(s[2].elapsed_time(s[3]), 4), s[1]] for s in rec_segs if s[0] == "gemm"]
    return out


def smi_stats(rows: list[dict], t0: float, t1: float) -> dict:
    """Median SM clock, median and mean power.draw, power.draw.instant's mean and max, median temperature and the
    commonest event-reasons mask of the rows inside [t0, t1]."""
    rows = [r for r in rows if t0 <= r["t"] <= t1]

    def stat(f, fn):
        v = [r[f] for r in rows if isinstance(r.get(f), float)]
        return fn(v) if v else None

    reasons = [x for r in rows for f in FIELDS[6] if isinstance(x := r.get(f), str)]
    med, mean = statistics.median, statistics.mean
    return {"samples": len(rows), "sm_mhz_median": stat("clocks.sm", med), "power_median_w": stat("power.draw", med),
            "power_mean_w": stat("power.draw", mean), "power_instant_mean_w": stat("power.draw.instant", mean),
            "power_instant_max_w": stat("power.draw.instant", max), "temp_c_median": stat("temperature.gpu", med),
            "event_reasons": max(set(reasons), key=reasons.count) if reasons else None}


def measure(a) -> dict:
    """Every phase on the device (or, --dry-run, on CPU tensors with a fake nvidia-smi): the run's raw record."""
    import torch

    if not a.dry_run and not torch.cuda.is_available():
        raise SystemExit("error: needs a CUDA device (or --dry-run)")
    fields = [n[0] for n in FIELDS] if a.dry_run else probe_fields(a.smi_id)
    rig = Rig("cpu" if a.dry_run else "cuda", a.size, int(a.mem_gib * 2 ** 30))
    tg, tm = rig.alone_ms("gemm"), rig.alone_ms("mem")
    t_run = time.time()
    sampler = Sampler(fields, a.smi_id, t_run, fake=a.dry_run)
    phases = []
    try:
        for i, spec in enumerate(plan(tg, tm, a)):
            if i:
                time.sleep(a.cooldown)
            phases.append(run_phase(rig, spec, a.settle, a.seconds, t_run))
    finally:
        rows = sampler.stop()
    for p in phases:
        p.update(smi_stats(rows, p["t0"], p["t1"]))

    def med(f):
        v = [r[f] for r in rows if isinstance(r.get(f), float)]
        return statistics.median(v) if v else None
    return {"gpu": torch.cuda.get_device_name() if rig.cuda else "cpu (dry run)", "torch": torch.__version__,
            "command": "python -m benchmarks.probes.power_duty " + " ".join(sys.argv[1:]), "size": a.size, "dtype":
            "bf16" if rig.cuda else "fp32", "mem_gib": a.mem_gib, "settle_s": a.settle, "seconds": a.seconds,
            "cooldown_s": a.cooldown, "alone": {"gemm_ms": tg, "mem_ms": tm, "gemm_tflops": rig.flops / tg / 1e9},
            "limit_w": med("power.limit"), "max_sm_mhz": med("clocks.max.sm"), "phases": phases,
            "smi": {"columns": ["t", *fields], "rows": [[r.get(k) for k in ["t", *fields]] for r in rows]}}


def fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_run(run: dict) -> None:
    al = run["alone"]
    print(f"{run['gpu']}: {run['dtype']} {run['size']}^3 GEMM alone {al['gemm_ms']:.3f} ms ({al['gemm_tflops']:.0f} "
          f"TFLOP/s), add over {run['mem_gib']} GiB tensors {al['mem_ms']:.3f} ms; limit {run['limit_w']} W")
    print(f"{'phase':14s} {'gemm':>5s} {'mem':>5s} {'idle':>5s} {'TFLOP/s':>8s} {'SM MHz':>7s} {'P med':>6s} "
          f"{'P mean':>6s} {'P inst max':>10s} {'T C':>4s}")
    for p in run["phases"]:
        sh = p["shares"]
        print(f"{p['name']:14s} {sh['gemm']:5.2f} {sh['mem']:5.2f} {sh['idle']:5.2f} {fmt(p['gemm_tflops'], '8.0f')} "
              f"{fmt(p['sm_mhz_median'], '7.0f')} {fmt(p['power_median_w'], '6.0f')} {fmt(p['power_mean_w'], '6.0f')} "
              f"{fmt(p['power_instant_max_w'], '10.0f')} {fmt(p['temp_c_median'], '4.0f')}")


def predict(c: dict, ph: dict) -> dict:
    """A phase under constants c: its measured clock (GEMM rate / table rate), the power the model gives its measured
    mix at that clock (the state), and the clock and power the limit rule gives the same work."""
    f = ph["shares"]
    s = ph["gemm_tflops"] / c["table_tflops"] if f["gemm"] > 0 and ph.get("gemm_tflops") else 1.0
    state = f["gemm"] * gemm_power(s, c) + f["mem"] * c["memory_w"] + f["idle"] * c["idle_w"]
    g0, m, i = f["gemm"] * s, f["mem"], f["idle"]  # the same work at s = 1: only the GEMM time shrinks
    s_rule = sustained_s(g0, m, i, c)
    return {"s": s, "state_w": state, "s_rule": s_rule, "rule_w": mix_power(s_rule, g0, m, i, c) if g0 else state}


def fit(run: dict, table_tflops: float | None = None, fit_limit: bool = False, sigma_w: float = 5.0,
        sigma_s: float = 0.01) -> dict:
    """Least squares (scipy) of the constants over the idle, GEMM, memory and duty phases: each phase's mean power
    against the state power (sigma_w W), each GEMM phase's clock against the rule's (sigma_s). table_tflops and
    limit_w are held at the given / recorded values unless None / fit_limit. Standard errors from the Jacobian with
    sigma_w, sigma_s as the noise (the reduced chi-square says if they are; the rate counts as exact: CUDA events)."""
    from scipy.optimize import least_squares

    phases = [p for p in run["phases"] if p["kind"] in FIT_KINDS]
    by = {p["kind"]: p for p in phases}
    fixed = {"limit_w": run["limit_w"]} if not fit_limit else {}
    if table_tflops:
        fixed["table_tflops"] = table_tflops
    free = [k for k in PARAMS if k not in fixed]
    top = max(p["gemm_tflops"] or 0 for p in phases)
    start = {"idle_w": (by["idle"]["power_mean_w"], 0, 2e3), "memory_w": (by["mem"]["power_mean_w"], 0, 5e3),
             "compute_w": (2 * run["limit_w"], 0, 1e4), "alpha": (2.5, 1, 8), "limit_w": (run["limit_w"], 1, 1e4),
             "table_tflops": (1.05 * top, top / 2, 1e5)}  # (first guess, low, high)

    def consts(x):
        return {**fixed, **dict(zip(free, x))}

    def residuals(x):
        c, r = consts(x), []
        for p in phases:
            pr = predict(c, p)
            r.append((pr["state_w"] - p["power_mean_w"]) / sigma_w)
            if p["shares"]["gemm"] > 0:
                r.append((pr["s_rule"] - pr["s"]) / sigma_s)
        return np.array(r)

    x0, lo, hi = zip(*(start[k] for k in free))
    sol = least_squares(residuals, x0, bounds=(lo, hi), x_scale="jac", xtol=1e-12, ftol=1e-12, gtol=1e-12)
    dof = max(1, len(sol.fun) - len(free))
    cov = np.linalg.pinv(sol.jac.T @ sol.jac)
    c = consts(sol.x)
    return {"constants": c, "free": free, "stderr": dict(zip(free, np.sqrt(np.abs(np.diag(cov))).tolist())),
            "chi2_reduced": 2 * sol.cost / dof, "sigma_w": sigma_w, "sigma_s": sigma_s,
            "phases": [{"name": p["name"], "kind": p["kind"], "power_w": p["power_mean_w"], "sm_over_max":  # a check
                        p["sm_mhz_median"] / run["max_sm_mhz"] if p.get("sm_mhz_median") and run.get("max_sm_mhz")
                        else None, **predict(c, p)} for p in run["phases"]],
            "window": window_evidence(run, c)}


def window_evidence(run: dict, c: dict, tol: float = 0.03) -> dict | None:
    """What the long bursts say about the averaging window: in each burst, the first ~25-ms segment's rate over the
    burst's steady rate (its last 30%) and the ms until the rate stays within `tol` of it; the long phase's clock
    against pure GEMM's (a window much shorter than a burst) and the short bursts' at the same duty (a window much
    longer than a cycle): position 0 / 1 between them."""
    long_ = next((p for p in run["phases"] if p["kind"] == "long_burst"), None)
    pure = next((p for p in run["phases"] if p["kind"] == "gemm"), None)
    if not long_ or not long_.get("segments"):
        return None
    bursts, first_over, settle_ms = {}, [], []
    for b, off, ms, n in long_["segments"]:
        bursts.setdefault(b, []).append((off, n / ms))
    for segs in bursts.values():
        steady = statistics.median([r for off, r in segs if off >= 0.7 * segs[-1][0]])
        first_over.append(segs[0][1] / steady)
        out = [off for off, r in segs if abs(r / steady - 1) > tol]
        settle_ms.append(next((off for off, _ in segs if off > out[-1]), segs[-1][0]) if out else 0.0)
    s_long = long_["gemm_tflops"] / c["table_tflops"]
    s_pure = pure["gemm_tflops"] / c["table_tflops"] if pure else None
    short = min((p for p in run["phases"] if p["kind"] == "gemm_idle"), default=None,
                key=lambda p: abs(p["duty"] - long_["duty"]))
    s_short = short["gemm_tflops"] / c["table_tflops"] if short else None
    pos = (s_long - s_pure) / (s_short - s_pure) if s_pure and s_short and abs(s_short - s_pure) > 1e-3 else None
    return {"bursts": len(bursts), "on_s": long_["on_s"], "off_s": long_["sleep_s"], "s_long": s_long,
            "first_over_steady": statistics.median(first_over), "settle_ms": statistics.median(settle_ms),
            "s_pure_gemm": s_pure, "s_short_same_duty": s_short, "short_phase": short and short["name"],
            "position": pos, "power_instant_max_w": long_.get("power_instant_max_w"), "limit_w": c["limit_w"]}


def print_fit(r: dict) -> None:
    c, e = r["constants"], r["stderr"]
    print("  ".join(f"{k} {c[k]:.4g}" + (f" +- {e[k]:.2g}" if k in e else " (held)") for k in PARAMS))
    print(f"reduced chi-square {r['chi2_reduced']:.3g} (sigma {r['sigma_w']} W, {r['sigma_s']} in clock)")
    print(f"{'phase':14s} {'s meas':>7s} {'s rule':>7s} {'SM/max':>7s} {'P meas':>7s} {'P state':>7s} {'P rule':>7s}")
    for p in r["phases"]:
        print(f"{p['name']:14s} {p['s']:7.3f} {p['s_rule']:7.3f} {fmt(p['sm_over_max'], '7.3f')} "
              f"{fmt(p['power_w'], '7.1f')} {p['state_w']:7.1f} {p['rule_w']:7.1f}"
              + ("   (not fitted)" if p["kind"] not in FIT_KINDS else ""))
    w = r["window"]
    if w:
        print(f"window: {w['bursts']} bursts of {w['on_s']} s on / {w['off_s']} s off; first segment at "
              f"{w['first_over_steady']:.3f} x the burst's steady rate, settled within {w['settle_ms']:.0f} ms; clock "
              f"{w['s_long']:.3f} against pure GEMM {fmt(w['s_pure_gemm'], '.3f')} and {w['short_phase']} "
              f"{fmt(w['s_short_same_duty'], '.3f')} (position {fmt(w['position'], '.2f')}: 0 = window << burst, "
              f"1 = window >> cycle); instant power max {fmt(w['power_instant_max_w'], '.0f')} W, limit "
              f"{w['limit_w']:.0f} W")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the run's raw record (JSON)")
    ap.add_argument("--seconds", type=float, default=20.0, help="recorded seconds per phase")
    ap.add_argument("--settle", type=float, default=3.0, help="unrecorded seconds at the start of each phase")
    ap.add_argument("--cooldown", type=float, default=5.0, help="idle seconds between phases")
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--mem-gib", type=float, default=1.0, help="GiB per tensor of the memory-bound add (three)")
    ap.add_argument("--duties", type=lambda s: [float(x) for x in s.split(",")], default=[0.25, 0.5, 0.75])
    ap.add_argument("--burst-ms", type=float, default=5.0, help="GEMM milliseconds per short burst")
    ap.add_argument("--long-on", type=float, default=1.5)
    ap.add_argument("--long-off", type=float, default=1.5)
    ap.add_argument("--smi-id", default="0", help="nvidia-smi -i of the device torch uses")
    ap.add_argument("--dry-run", action="store_true", help="CPU tensors and a fake nvidia-smi: the machinery only")
    ap.add_argument("--fit", metavar="FILE.json", help="fit the constants from a run's record (no GPU)")
    ap.add_argument("--table-tflops", type=float, help="the GEMM's rate at full clock (kernel table); else fitted")
    ap.add_argument("--fit-limit", action="store_true", help="fit an effective limit instead of power.limit")
    ap.add_argument("--fit-out", help="the fit's constants and per-phase predictions (JSON)")
    a = ap.parse_args(argv)
    if a.fit:
        with open(a.fit) as f:
            result, out = fit(json.load(f), a.table_tflops, a.fit_limit), a.fit_out
        print_fit(result)
    else:
        result, out = measure(a), a.out
        print_run(result)
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1 if a.fit else None)  # the raw record compact: ~3000 smi rows, ~0.3 MB
    return 0


if __name__ == "__main__":
    sys.exit(main())
