"""Wall time of the PaSE per-operator sharding search (perfmodel.search.pase.solver.solve).

    python -m benchmarks.speed.pase_speed [--repeat N]

Times `solve` end to end after imports (plan resolution, operator graph, cost tables, separators and
GENERATESEQ, the DP runs of the memory-budget search), best of N, for Llama-3.1 405B on dgx-h100 with the
plan Llama 3 trained with (Dubey et al. 2024, Table 4: tp 8, pp 16, seq 8192, global batch 2048 sequences on
16384 GPUs), and how the time grows with the number of layers, the mesh axes that take part, and the
configurations per vertex (a larger micro-batch makes the batch dimension splittable over more axes; a
restricted table keeps the first K configurations of every kind), and what the block chain saves over one DP
over the whole graph in GENERATESEQ order. The last columns break one `solve` down.
Target: under 0.5 s for the 126-layer graph on the plan's mesh on a 2-core machine.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from perfmodel import load_hardware, load_model
from perfmodel.spec.model.operators import AXES
from perfmodel.spec.plan.layout import Plan, resolve
from perfmodel.search.pase import solver as pase

SYSTEM = load_hardware("dgx-h100")
BASE = {"gpus": 16384, "tp": 8, "pp": 16, "micro_batch": 1, "global_batch": 2048, "seq_len": 8192, "zero": 1}


def case(label: str, layers: int = 126, keep: int | None = None, whole: bool = False, **plan) -> dict:
    model = load_model("llama-3.1-405b")
    model = model.model_copy(update={"n_layers": layers})
    plan = resolve(Plan(**{**BASE, **plan}), model, SYSTEM)
    return {"case": label, "model": model, "plan": plan, "keep": keep, "whole": whole}


def timed(c: dict, repeat: int) -> dict:
    model, plan = c["model"], c["plan"]
    best, result = float("inf"), None
    for _ in range(repeat):
        if c["keep"] is None and not c["whole"]:
            start = time.perf_counter()
            result = pase.solve(model, SYSTEM, plan)
            wall = time.perf_counter() - start
            d = result.diagnostics
            runs, table, dep, cands = d.dp_runs, d.max_table_entries, d.max_dependent_set, d.candidates
        else:  # one DP run at lambda 0: on a restricted candidate set, or over the whole graph without blocks
            start = time.perf_counter()
            graph = pase.operator_graph(model.n_layers)
            tables = pase.cost_tables(graph, model, SYSTEM, plan)
            if c["keep"] is not None:
                tables = pase.restrict_tables(tables, {k: range(min(c["keep"], tables.size(k))) for k in tables.time})
            prob = pase.Problem(graph, tables) if c["whole"] else pase.ChainProblem(graph, tables)
            prob.solve(0.0)
            wall = time.perf_counter() - start
            st = prob.stats
            runs, table, dep = 1, st.max_table_entries, st.max_dependent_set
            cands = {k: tables.size(k) for k in tables.time}
        best = min(best, wall)
    mesh = " x ".join(f"{a}{n}" for a, n in zip(AXES, (plan.dp, plan.cp, plan.tp)) if n > 1)
    row = {"case": c["case"], "layers": model.n_layers, "mesh": mesh, "axes": sum(n > 1 for n in (plan.dp, plan.cp,
           plan.tp)), "max K": max(cands.values()), "mean K": round(sum(cands.values()) / len(cands), 1),
           "max table": table, "max |D|": dep, "DP runs": runs, "wall s": round(best, 3)}
    if result is not None:
        d = result.diagnostics
        row.update({"tables s": round(d.tables_s, 3), "order s": round(d.order_s, 3), "dp s": round(d.dp_s, 3),
                    "s / DP run": round(d.dp_s / d.dp_runs, 4), "fits": result.budget_met})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the best is reported")
    args = ap.parse_args()
    cases = [
        case("Llama 3 405B plan (tp8 pp16 dp128)"),
        case("layers", layers=32),
        case("layers", layers=64),
        case("layers", layers=126),
        case("axes: tp only", gpus=128),
        case("axes: dp x tp", gpus=2048),
        case("axes: dp x cp x tp", cp=2),
        case("candidates: micro-batch 8", micro_batch=8),
        case("candidates: micro-batch 16", micro_batch=16),
        case("candidates: K <= 4 (1 run)", keep=4),
        case("candidates: K <= 8 (1 run)", keep=8),
        case("candidates: K <= 16 (1 run)", keep=16),
        case("candidates: all (1 run)", keep=10_000),
        case("pp 1, ZeRO-3, full recompute", pp=1, zero=3, recompute="full"),
        case("whole-graph DP, no blocks (1 run)", whole=True),
        case("whole-graph DP, no blocks (1 run)", whole=True, cp=2),
    ]
    timed(cases[0], 1)  # warm the caches of numpy / pydantic once
    df = pd.DataFrame([timed(c, args.repeat) for c in cases])
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df.to_string(index=False))


if __name__ == "__main__":
    main()
