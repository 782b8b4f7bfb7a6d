"""Online serving under load: predicted against measured TTFT, ITL and E2E on serving_online_dev.csv (13 vLLM
0.15.1 experiments on H100, 21 load stages and 13 whole runs), beside five other tools' published predictions for
the same rows.

    python -m benchmarks.evals.serving_online [--data PATH] [--csv OUT.csv] [--jobs J]

Each experiment is simulated once, whole (`serve.simulate`): its stages one after another (inference-perf's
constant-rate stages, `stages_all`), the prompts sharing their group's system prompt (`num_system_prompts` groups of
`system_prompt_len` tokens, the prefix cache on as vLLM V1 runs it), on one replica of `tp` H100s (dgx-h100) with
the run's `gpu_mem_util`, `max_num_batched_tokens` and `max_num_seqs`, `--stack vllm --stack-version 0.15.1`. A
stage row is scored on the requests that stage sent, a whole-run row ("all") on every request. Lengths: the run's
measured means where its JSON is public, else the workload's nominal ones, every request at them (inference-perf
sends fixed lengths: `question_len`, `output_len` with ignore_eos). Precision: FP16 rows fp16; the FP8 checkpoint
(RedHatAI FP8-dynamic) fp8 GEMMs with the KV cache at the model dtype (vLLM's --kv-cache-dtype auto: bf16).
ITL is the source's: (mean E2E - mean TTFT) / (mean output tokens - 1). `cpu_offload` runs (BLIS campaign
generate.py: `--kv-offloading-size 8.0 --disable-hybrid-kv-cache-manager`) offload KV blocks to 8 GiB of host memory
(`ServePlan.kv_offload_gb` = 8.0, `serve.kv_offload`: the copies of the prompts' blocks and the connector's host
work; the runs' KV use stays far below the GPU's cache, so nothing is loaded back).

A stage is "saturated" when its simulated queue grows without bound: the mean TTFT of its last tenth of requests is
over 1 s and 3x that of its first tenth. Nothing here is fitted per row; where no constant is fitted on these rows,
leave-one-model-out equals in-sample, and the table says so.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.evals.devset import devset
from perfmodel.serve.simulate import simulate_requests
from perfmodel.spec.serving.schema import ServePlan
from perfmodel.spec.serving.workload import parse_stages

ONLINE_CSV = devset("serving_online_dev.csv")
MODELS = {"RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic": "llama-4-scout",
          "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b", "mistralai/Mistral-Nemo-Instruct-2407":
          "mistral-nemo-12b", "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b", "01-ai/Yi-34B": "yi-34b",
          "meta-llama/Llama-2-7b-hf": "llama-2-7b"}
SYSTEMS = {"H100": "dgx-h100"}
CPU_OFFLOAD_GB = 8.0  # the campaign's --kv-offloading-size where cpu_offload is set (BLIS campaign generate.py)
TOOLS = ("aiconfigurator", "vidur", "llm_optimizer", "blis_tp", "blis_roofline", "blis_evolved", "llmservingsim")
METRICS = (("ttft", "actual_ttft_mean_ms"), ("ttft_p90", "actual_ttft_p90_ms"), ("itl", "actual_itl_mean_ms"),
           ("e2e", "actual_e2e_mean_ms"), ("e2e_p90", "actual_e2e_p90_ms"))


def experiment(rows: pd.DataFrame) -> tuple:
    """(model, system, plan, workload) of one experiment's rows (module docstring)."""
    r = rows.iloc[0]
    measured_in, measured_out = r["measured_prompt_len_mean"], r["measured_output_len_mean"]
    fp8 = str(r["precision"]).upper() == "FP8"
    plan = ServePlan(tp=int(r["tp"]), precision="fp8" if fp8 else "fp16", kv_dtype="bf16" if fp8 else None,
                     input_len=int(round(measured_in)) if pd.notna(measured_in) else int(r["input_len"]),
                     output_len=int(round(measured_out)) if pd.notna(measured_out) else int(r["output_len"]),
                     stack="vllm", stack_version=str(r["vllm_version"]),
                     mem_fraction=float(r["gpu_mem_util"]) if pd.notna(r["gpu_mem_util"]) else None,
                     max_batch=int(r["max_num_seqs"]), max_num_tokens=int(r["max_num_batched_tokens"]),
                     kv_offload_gb=CPU_OFFLOAD_GB if pd.notna(r["cpu_offload"]) and bool(r["cpu_offload"]) else 0.0)
    work = {"arrival": "constant", "stages": parse_stages(str(r["stages_all"]), "stages_all"),
            "prefix": {"groups": int(r["num_system_prompts"]), "shared_len": int(r["system_prompt_len"]),
                       "users_per_group": int(r["users_per_system_prompt"])}}
    return MODELS[r["model_hf"]], SYSTEMS[r["hardware"]], plan, work


def saturated(ttft: np.ndarray) -> bool:
    """The queue grows without bound (module docstring)."""
    k = max(1, len(ttft) // 10)
    head, tail = float(np.mean(ttft[:k])), float(np.mean(ttft[-k:]))
    return tail > 1.0 and tail > 3.0 * head


def _pred(ttft, e2e, O) -> dict:
    itl = (np.mean(e2e) - np.mean(ttft)) / max(np.mean(O) - 1.0, 1.0)
    return {"ttft": 1e3 * np.mean(ttft), "ttft_p90": 1e3 * np.percentile(ttft, 90), "itl": 1e3 * itl,
            "e2e": 1e3 * np.mean(e2e), "e2e_p90": 1e3 * np.percentile(e2e, 90), "saturated": saturated(ttft)}


def score_experiment(rows: pd.DataFrame) -> list[dict]:
    """One row per dev row of this experiment: predicted and measured."""
    model, system, plan, work = experiment(rows)
    run = simulate_requests(model, system, plan, work)
    ttft, e2e, O = run.first - run.arrive, run.done - run.arrive, run.output_len
    spans = run.workload.stage_of()
    out = []
    for _, r in rows.iterrows():
        sl = slice(0, len(ttft)) if r["stage"] == "all" else slice(*spans[int(r["stage"])])
        rec = {"row_id": r["row_id"], "model": model, "tp": int(r["tp"]), "workload": r["workload"],
               "stage": r["stage"], "rate": r["request_rate_rps"], **_pred(ttft[sl], e2e[sl], O[sl]),
               "prefix_hit": run.prefix_hit, "mean_batch": run.mean_batch}
        for name, col in METRICS:
            rec[f"meas_{name}"] = r[col]
        for tool in TOOLS:
            for m in ("ttft", "itl", "e2e"):
                rec[f"{tool}_{m}"] = r[f"{tool}_{m}_mean_ms"]
        out.append(rec)
    return out


def table(path: Path = ONLINE_CSV, jobs: int = 1) -> pd.DataFrame:
    df = pd.read_csv(path)
    groups = [g for _, g in df.groupby("experiment_id", sort=False)]
    if jobs > 1:
        with multiprocessing.Pool(jobs) as pool:
            parts = pool.map(score_experiment, groups)
    else:
        parts = [score_experiment(g) for g in groups]
    return pd.DataFrame([r for p in parts for r in p])


def ape(pred: pd.Series, meas: pd.Series) -> pd.Series:
    return 100.0 * (pred - meas).abs() / meas


def summary(t: pd.DataFrame) -> pd.DataFrame:
    """MAPE per metric: perfmodel on every row, beside each tool on the rows it answers (and perfmodel on those)."""
    rows = []
    for m in ("ttft", "itl", "e2e"):
        meas = t[f"meas_{m}"]
        rows.append({"tool": "perfmodel", "metric": m, "rows": int(meas.notna().sum()),
                     "mape": ape(t[m], meas).mean(), "perfmodel_same_rows": ape(t[m], meas).mean(),
                     "signed_median": (100 * (t[m] - meas) / meas).median()})
        for tool in TOOLS:
            col = t[f"{tool}_{m}"]
            ok = col.notna() & meas.notna()
            if ok.any():
                rows.append({"tool": tool, "metric": m, "rows": int(ok.sum()), "mape": ape(col[ok], meas[ok]).mean(),
                             "perfmodel_same_rows": ape(t.loc[ok, m], meas[ok]).mean(),
                             "signed_median": (100 * (col[ok] - meas[ok]) / meas[ok]).median()})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ONLINE_CSV)
    ap.add_argument("--csv", type=Path, help="write the per-row table here")
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args(argv)
    t = table(a.data, a.jobs)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    cols = ["row_id", "model", "tp", "workload", "stage", "rate"]
    for m in ("ttft", "ttft_p90", "itl", "e2e", "e2e_p90"):
        cols += [m, f"meas_{m}"]
    print("Per row (ms; meas_ = measured):")
    print(t[cols + ["saturated", "prefix_hit"]].round(1).to_string(index=False))
    print()
    s = summary(t)
    print("MAPE (%) per metric; a tool on the rows it answers, perfmodel on the same rows beside it:")
    print(s.round(1).to_string(index=False))
    print()
    for m in ("ttft_p90", "e2e_p90"):
        print(f"perfmodel {m} MAPE: {ape(t[m], t[f'meas_{m}']).mean():.1f}% over {t[f'meas_{m}'].notna().sum()} rows")
    sat = t[t["saturated"]]
    print(f"stages predicted saturated: {len(sat)} of {len(t)} rows (every measured run served its load)")
    print("leave-one-model-out: no constant is fitted on these rows, so it equals the in-sample MAPE above")
    if a.csv:
        t.to_csv(a.csv, index=False)
        print(f"wrote {a.csv}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
