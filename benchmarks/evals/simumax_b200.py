"""Accuracy benchmark: the SimuMax v1.2 B200 validation rows of the MoE development set.

    python -m benchmarks.evals.simumax_b200 [--csv PATH] [--ops ROW]

The rows (source_group SimuMax_v1.2_B200_validation; MooreThreads/SimuMax @4dcaae51 docs/b200/
b200_release_v1.2_summary.json) are layer-truncated DeepSeek-V2 / -V3 proxies (4 layers, the first dense) on one
8 x B200 node, Megatron-LM 23e00ed0 + TE 2.11, bf16, alltoall dispatch, no recompute, seq 4096, micro-batch 1.
Each row is mapped by benchmarks.evals.published.memory_peaks.moe_case (its SIMUMAX_DEFAULTS) and priced by
perfmodel.estimate with nothing fitted. Prints per row the measured and predicted step time, the signed error and
the predicted breakdown's shares of the step, then MAPE and the median signed error. `--ops ROW` also prints that
row's operator table (per-microbatch seconds, forward + backward, summed over the stage's layers).

`--grouped-curve` prints the B200 grouped-GEMM slowdown that hardware_specs/accelerators/b200.yaml quotes
(`grouped_curve`), derived from SimuMax's own B200 microbenchmarks (data/simumax/b200_bf16_ceperm.json, verbatim
from MooreThreads/SimuMax @4dcaae51, Apache-2.0; data/simumax/README.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

from benchmarks import DATA
from benchmarks.evals.devset import MOE_CSV
from benchmarks.evals.published.memory_peaks import SIMUMAX_GROUP, moe_case
from perfmodel import estimate

SIMUMAX_B200 = DATA / "simumax" / "b200_bf16_ceperm.json"
# SimuMax's grouped stages and the TE general_gemm layout of the dense GEMM of the same pass (its key's `layout`)
STAGE_LAYOUT = {"fwd": "TN", "bwd_grad_act": "NN", "bwd_grad_w": "NT"}
PLATEAU_FLOPS = 2e11  # dense GEMMs this large run at the part's plateau rate (no wave or launch tail)

SHARES = ("gemm", "attention", "memory_bound", "ep_comm", "dp_comm", "pp_comm", "bubble", "optimizer", "host")


def priced(csv) -> tuple[pd.DataFrame, dict]:
    """One line per SimuMax row: measured and predicted step (s), signed error, and the breakdown's shares."""
    df = pd.read_csv(csv)
    rows, ests = [], {}
    for _, r in df[df["source_group"] == SIMUMAX_GROUP].iterrows():
        case = moe_case(r)
        if case.reason:
            rows.append(dict(row=r["row_id"], reason=case.reason))
            continue
        e = estimate(case.model, case.system, case.plan)
        ests[r["row_id"]] = e
        t = e.time_s.model_dump()
        layout = f"pp{case.plan.pp} ep{case.plan.ep} mbc{e.num_microbatches}"
        rows.append(dict(row=r["row_id"], model=case.model.name.split(" ")[0], layout=layout,
                         measured_s=float(r["iter_time_s"]), predicted_s=e.step_time_s,
                         err=e.step_time_s / float(r["iter_time_s"]) - 1,
                         **{k: t[k] / e.step_time_s for k in SHARES}))
    return pd.DataFrame(rows), ests


def _keys(table: dict) -> list[tuple[dict, float]]:
    """SimuMax's 'a=1, b=x, ...' efficiency keys as dicts, with their efficiency (a fraction of its 2250 TFLOP/s)."""
    return [(dict(re.findall(r"(\w+)=([\w.]+)", k)), eff) for k, eff in table.items()]


def grouped_curve(path=SIMUMAX_B200) -> pd.DataFrame:
    """Grouped-GEMM seconds over dense-GEMM seconds on B200, per pass, by routed tokens per expert (M).

    SimuMax measured TE 2.11's GroupedLinear GEMMs (op group_matmul: ng experts of M rows, the DeepSeek-V2/-V3
    expert shapes, fp32 main grads as Megatron's --accumulate-allreduce-grads-in-fp32) and TE general_gemm dense
    GEMMs (op matmul) on the same B200 node (simu_tools/efficency_test/test_{grouped_,}gemm_efficiency.py). Dense
    reference: the median efficiency of its dense GEMMs of >= PLATEAU_FLOPS in the pass's layout (TN forward, NN
    input gradient, NT weight gradient; a dense GEMM of all g*M rows runs at that plateau). Ratio = dense
    efficiency / grouped efficiency, the median over the expert shapes at each M."""
    op = json.loads(Path(path).read_text())["accelerator"]["op"]
    dense = pd.DataFrame([dict(layout=k["layout"], eff=e) for k, e in _keys(op["matmul"]["accurate_efficient_factor"])
                          if 2 * int(k["m"]) * int(k["n"]) * int(k["k"]) >= PLATEAU_FLOPS])
    plateau = dense.groupby("layout")["eff"].median()
    rows = [dict(tokens=int(k["M"]), stage=k["stage"], ratio=plateau[STAGE_LAYOUT[k["stage"]]] / e)
            for k, e in _keys(op["group_matmul"]["accurate_efficient_factor"]) if k["main_grad_dtype"] == "fp32"]
    return pd.DataFrame(rows).pivot_table(index="tokens", columns="stage", values="ratio", aggfunc="median")


def op_table(e) -> pd.DataFrame:
    """The estimate's operators: forward and backward seconds of one microbatch over the stage's layers."""
    return pd.DataFrame([dict(op=o.name, kind=o.kind, fwd_ms=o.fwd_s * 1e3 * o.count, bwd_ms=o.bwd_s * 1e3 * o.count,
                              priced_by=o.priced_by) for o in e.ops])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", default=MOE_CSV)
    ap.add_argument("--ops", action="append", default=[], help="row id whose operator table to print")
    ap.add_argument("--grouped-curve", action="store_true", help="print the B200 grouped-GEMM slowdown and exit")
    a = ap.parse_args(argv)
    if a.grouped_curve:
        print(grouped_curve().round(3).to_string())
        return 0
    df, ests = priced(a.csv)
    pd.set_option("display.width", 250)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    ok = df.dropna(subset=["err"]) if "err" in df else df.iloc[0:0]
    print(f"\n{len(ok)} rows  MAPE {100 * ok['err'].abs().mean():.1f}%  median signed error "
          f"{100 * ok['err'].median():+.1f}%")
    for row in a.ops:
        if row not in ests:
            print(f"--ops {row}: not a priced SimuMax row", file=sys.stderr)
            return 2
        t = op_table(ests[row])
        print(f"\n{row}: operators per microbatch (ms)\n{t.to_string(index=False, float_format=lambda v: f'{v:.3f}')}")
        print(t.groupby("kind")[["fwd_ms", "bwd_ms"]].sum().to_string(float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
