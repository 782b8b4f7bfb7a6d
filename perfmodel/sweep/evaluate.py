"""One chunk of a sweep: each point's system, the workload's best plan on it (the real search, never a proxy), and
one row of results per (point, workload).

Training: `search.ranking.search` ranks every feasible layout and keeps the fastest; the row holds its step time,
tokens/s per GPU, memory, goodput and energy, and with the workload's `tokens` the run's days, dollars and MWh
(the same arithmetic as `perfmodel forecast` at its defaults: steps x wall seconds per step, goodput counted).
Serving: `serve.layout_search.rank` predicts every layout of the job's GPUs at its traffic and keeps the most output
tokens/s among those within the SLO. A point the search refuses (nothing fits, the SLO is missed, the point is not a
valid system) still yields its row, with `feasible` false and the reason: the report counts why points fail.

Rows hold results only (no timings), so that the engine never changes them: the same sweep gives the same rows on
one worker, many, or a Ray cluster.
"""

from __future__ import annotations

import math

from ..errors import InputError
from ..run.energy import facility_kwh, power_for
from ..spec.model.catalogue import load_model
from ..spec.plan.layout import layout_label
from .axes import InvalidPoint
from .points import Chunk, Point, code_version, system_of
from .schema import Serving, Sweep, Training

# Every row's columns, in order (point columns: point, system, then one per axis, added by `rows_of`).
RESULT_COLUMNS = ["workload", "kind", "weight", "feasible", "reason", "layout", "gpus", "step_time_s",
                  "tokens_per_s_per_gpu", "mfu", "memory_gib", "goodput", "usd_per_gpu_hour", "board_w",
                  "tokens_per_usd", "tokens_per_kwh", "time_to_train_days", "cost_usd", "energy_mwh",
                  "ttft_s", "tpot_s", "requests_per_s"]
NAN = float("nan")


def _empty(w, gpus: int) -> dict:
    return {c: NAN for c in RESULT_COLUMNS} | {"workload": w.name, "kind": w.kind, "weight": w.weight,
                                              "feasible": False, "reason": "", "layout": "", "gpus": gpus}


def _price(system) -> float:
    return system.price.usd_per_device_hour if system.price is not None else NAN


def train_row(w, system, model) -> dict:
    """The best plan of training job `w.train` on `system` (module docstring)."""
    from ..search.ranking import search

    job: Training = w.train
    row = _empty(w, job.gpus)
    kw = {"stack": job.stack} if job.stack else {}
    try:
        res = search(model, system, job.gpus, job.global_batch, job.seq_len, precision=job.precision, top=1,
                     **kw)
    except InputError as err:
        return row | {"reason": str(err)}
    best = res.records(1)[0]
    tokens_step = job.global_batch * job.seq_len
    tps = tokens_step / best["step_time_s"]
    price = _price(system)
    wall_gpu_h = best["wall_gpu_hours_per_step"]
    kwh = best["energy_kwh_per_step"] if best["energy_kwh_per_step"] is not None else NAN
    row.update(feasible=True, layout=layout_label(res.plan(0)), step_time_s=best["step_time_s"],
               tokens_per_s_per_gpu=tps / job.gpus, mfu=best["mfu"], memory_gib=best["memory_gib"],
               goodput=best["goodput"], usd_per_gpu_hour=price, board_w=_board(system),
               tokens_per_usd=tokens_step / (wall_gpu_h * price), tokens_per_kwh=tokens_step / kwh)
    if job.tokens is not None:
        steps = math.ceil(job.tokens / tokens_step)
        row.update(time_to_train_days=steps * best["wall_s_per_step"] / 86400, cost_usd=steps * wall_gpu_h * price,
                   energy_mwh=steps * kwh / 1000)
    return row


def _board(system) -> float:
    p = power_for(system)
    return p.board_w if p is not None else NAN


def serve_row(w, system, model) -> dict:
    """The best layout of serving job `w.serve` on `system` within its SLO (module docstring)."""
    from ..serve.layout_search import rank, serve_label

    job: Serving = w.serve
    row = _empty(w, job.gpus)
    fields = dict(input_len=job.input_len, output_len=job.output_len, precision=job.precision,
                  concurrency=job.concurrency) | ({"stack": job.stack} if job.stack else {})
    ttft = job.ttft_ms / 1e3 if job.ttft_ms is not None else None
    tpot = job.tpot_ms / 1e3 if job.tpot_ms is not None else None
    try:
        kept, dropped = rank(model, system, job.gpus, fields, ttft, tpot)
    except InputError as err:
        return row | {"reason": str(err)}
    if not kept:
        return row | {"reason": _slo_reason(dropped, job)}
    e = kept[0]
    p = e.plan
    label = serve_label(p.tp, p.attention_dp, p.pp, p.dp, p.ep)
    price, power = _price(system), power_for(system, precision=job.precision if job.precision in (
        "bf16", "fp8", "fp4") else "bf16")
    per_gpu = e.output_tokens_per_s / job.gpus
    # an hour of serving at the board power (no power model of a serving step: its activity is not priced)
    kwh = facility_kwh(power, job.gpus, 3600.0, 1.0) if power is not None else NAN
    row.update(feasible=True, layout=label, tokens_per_s_per_gpu=per_gpu, memory_gib=e.memory_gib.get("total", NAN),
               usd_per_gpu_hour=price, board_w=power.board_w if power is not None else NAN,
               tokens_per_usd=per_gpu * 3600 / price, tokens_per_kwh=e.output_tokens_per_s * 3600 / kwh,
               ttft_s=e.ttft_s, tpot_s=e.tpot_s, requests_per_s=e.requests_per_s)
    return row


def _slo_reason(dropped: list[str], job: Serving) -> str:
    """Why no layout serves the job: how many layouts missed the TTFT limit, the TPOT limit, or did not run (memory,
    a layout the stack refuses), from `rank`'s one line per dropped layout ('LABEL: TTFT ... > ...')."""
    why = [d.split(": ", 1)[1] for d in dropped]
    ttft = sum(w.startswith("TTFT ") for w in why)
    tpot = sum(w.startswith("TPOT ") for w in why)
    other = [w for w in why if not w.startswith(("TTFT ", "TPOT "))]
    parts = [f"{ttft} over TTFT {job.ttft_ms:g} ms" if ttft else "", f"{tpot} over TPOT {job.tpot_ms:g} ms" if tpot
             else "", f"{len(other)} not run (e.g. {other[0]})" if other else ""]
    return f"no layout of {job.gpus} GPUs within the SLO: " + (", ".join(p for p in parts if p) or "none to try")


def rows_of(sweep: Sweep, point: Point, w, model=None) -> dict:
    """The row of workload `w` on `point`: point columns, then RESULT_COLUMNS (`model`: the workload's, loaded)."""
    model = model or load_model(w.job.model)
    head = {"point": point.index, "system": point.base} | {k: v for k, v in point.values}
    gpus = w.job.gpus
    try:
        system = system_of(sweep, point)
    except InvalidPoint as err:
        return head | _empty(w, gpus) | {"reason": str(err)}
    return head | (train_row(w, system, model) if w.kind == "train" else serve_row(w, system, model))


def run_chunk(sweep: Sweep, chunk: Chunk) -> list[dict]:
    """Every row of `chunk`, in point order. The workload's model is loaded once and its kernel grids stay warm in
    this process from one point to the next. A worker of another perfmodel version (a Ray node installed apart) is
    refused: its rows would be filed under this version's keys."""
    if chunk.version and code_version() != chunk.version:
        raise InputError(f"a sweep worker runs another perfmodel version ({code_version()} != {chunk.version}, "
                         "perfmodel/sweep/points.code_version); valid: the same perfmodel installed on every node")
    model = load_model(chunk.workload.job.model)
    return [rows_of(sweep, p, chunk.workload, model) for p in chunk.points]
