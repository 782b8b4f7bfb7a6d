"""Serving benchmark: predicted against published offline max-throughput (output tokens/s, all GPUs) on the
development rows.

    python benchmarks/published_inference.py [--data PATH] [--csv OUT.csv]

Rows: published_inference_dev.csv with metric output_tokens_per_s_total and an offline load (TensorRT-LLM's
perf-overview v0.17 trtllm-bench tables). Each row maps to (model preset, system, ServePlan) by the rules in
`case` (stated, not tuned): the model by name, the system by GPU (H100 SXM, H200 SXM, GH200, A100 SXM 80GB, L40S PCIe:
l40s-8, whose efficiencies are estimates carried from H100), tp/pp as stated, precision FP8 (with its fp8 KV cache) or FP16/BF16, the
trtllm stack, max throughput. Prints every row (measured, predicted, error), then MAPE per group, hardware,
precision and model, and the rows it cannot express with the reason (counted at 100% in the MAPE with them).
Then the online-serving table (mean TTFT and ITL at an offered request rate, 500 requests): infer's steady
state against the request-level simulation (`online`). Nothing here is fitted per row.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from devset import HERE
from perfmodel.errors import InputError
from perfmodel.serve import infer
from perfmodel.serve.simulate import simulate
from perfmodel.spec.serving.schema import ServePlan

MODELS = (("405b", "llama-3.1-405b"), ("70b", "llama-3.1-70b"), ("8b", "llama-3.1-8b"),
          ("mixtral-8x22b", "mixtral-8x22b"), ("mixtral-8x7b", "mixtral-8x7b"), ("mistral-7b", "mistral-7b"),
          ("gpt-oss-20b", "gpt-oss-20b"))
# first match wins: "gh200" before "h200", which it contains
SYSTEMS = (("gh200", "gh200"), ("l40s", "l40s-8"), ("h200", "dgx-h200"), ("h100", "dgx-h100"), ("a100", "dgx-a100-80gb"))


def _devset() -> Path:
    shared = HERE.parent.parent / "shared" / "data" / "published_inference_dev.csv"
    return shared if shared.exists() else HERE / "data" / "published_inference_dev.csv"


def _num(x, default=1) -> int:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return default if np.isnan(v) else int(v)


def case(row: pd.Series) -> tuple[str | None, str | None, dict | None, str]:
    """(preset, system, ServePlan fields, reason it cannot be expressed) of one row."""
    low = str(row["model"]).lower()
    model = next((m for key, m in MODELS if key in low.split("(")[0]), None)
    hw = str(row["hardware"]).lower()
    system = next((s for key, s in SYSTEMS if key in hw), "?")
    if model is None:
        return None, None, None, f"model {row['model']!r} has no preset"
    if system is None or system == "?":
        return model, None, None, f"hardware {row['hardware']!r} is not in the catalogue"
    prec = str(row["precision"]).lower()
    precision = "fp8" if "fp8 weights" in prec else "fp16" if "fp16" in prec else "bf16"
    version = str(row["framework_version"])  # the release the table ran (0.14, 0.17): its request path's defaults
    plan = dict(tp=_num(row["tp"]), pp=_num(row["pp"]), dp=1, ep=1, precision=precision, stack="trtllm",
                stack_version=version if re.match(r"\d+\.\d+", version) else None,
                input_len=_num(row["input_len"]), output_len=_num(row["output_len"]))
    return model, system, plan, ""


def table(path: Path) -> pd.DataFrame:
    d = pd.read_csv(path)
    d = d[(d["metric"] == "output_tokens_per_s_total")
          & d["batch_size_or_concurrency"].astype(str).str.startswith("offline")]
    out = []
    for _, row in d.iterrows():
        model, system, plan, reason = case(row)
        r = dict(row_id=row["row_id"], group=row["source_group"], model=model or row["model"],
                 hardware=system or str(row["hardware"]).split(" (")[0], precision=plan["precision"] if plan else "",
                 layout=f"tp{plan['tp']} pp{plan['pp']}" if plan else "", lengths=f"{row['input_len']}/{row['output_len']}",
                 measured=float(row["value"]), predicted=np.nan, batch=np.nan, reason=reason)
        if plan:
            try:
                e = infer(model, system, ServePlan(**plan))
                r.update(predicted=e.output_tokens_per_s, batch=e.batch)
            except InputError as err:
                r["reason"] = f"infer: {err}"
        out.append(r)
    df = pd.DataFrame(out)
    df["error"] = df["predicted"] / df["measured"] - 1
    return df


def online(path: Path, sample: int = 1) -> pd.DataFrame:
    """The online-serving table's rows (offered QPS, 500 requests): mean TTFT and ITL measured against infer's
    steady state (a request joining a steady batch of the simulation's mean batch) and the request-level
    simulation (`serve.simulate`: Poisson arrivals at the offered rate, every request at once for INF; the table's
    500 requests at the nominal lengths); every `sample`-th row (1: all)."""
    d = pd.read_csv(path)
    d = d[d["metric"].isin(["ttft_ms_mean", "itl_ms_mean"]) & d["batch_size_or_concurrency"].astype(str).str.startswith("offered QPS")]
    d = d.iloc[::sample]
    out, cache = [], {}
    for _, row in d.iterrows():
        model, system, plan, reason = case(row)
        rate = str(row["batch_size_or_concurrency"]).split("=")[1].split()[0]
        r = dict(row_id=row["row_id"], model=model, hardware=system, layout=f"tp{plan['tp']}" if plan else "",
                 precision=plan["precision"] if plan else "",
                 lengths=f"{row['input_len']}/{row['output_len']}", qps=rate, metric=row["metric"].split("_")[0],
                 measured=float(row["value"]), steady=np.nan, simulated=np.nan, reason=reason)
        if plan:
            key = (model, system, tuple(sorted(plan.items())), rate)
            if key not in cache:
                w = dict(arrival="burst", requests=500) if rate == "INF" else dict(
                    arrival="poisson", request_rate=float(rate), requests=500)
                try:
                    sim = simulate(model, system, ServePlan(**plan), w)
                    e = infer(model, system, ServePlan(**plan, concurrency=max(1, round(sim.mean_batch))))
                    cache[key] = (sim, e)
                except InputError as err:
                    cache[key] = err
            got = cache[key]
            if isinstance(got, InputError):
                r["reason"] = f"{got}"
            else:
                sim, e = got
                ttft = r["metric"] == "ttft"
                r.update(steady=1e3 * (e.ttft_s if ttft else e.tpot_s),
                         simulated=1e3 * (sim.ttft_s.mean if ttft else sim.tpot_s.mean))
        out.append(r)
    return pd.DataFrame(out)


def mape(df: pd.DataFrame, by: str) -> pd.DataFrame:
    def agg(g):
        e = g["error"].dropna()
        with_missing = pd.concat([e.abs(), pd.Series([1.0] * int(g["error"].isna().sum()))])
        return pd.Series({"rows": len(g), "predicted": len(e), "MAPE %": 100 * e.abs().mean() if len(e) else np.nan,
                          "mean err %": 100 * e.mean() if len(e) else np.nan,
                          "MAPE % (missing 100%)": 100 * with_missing.mean()})
    return df.groupby(by).apply(agg, include_groups=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=_devset())
    ap.add_argument("--csv", type=Path, help="write the per-row table as CSV")
    ap.add_argument("--online-sample", type=int, default=1, help="score every N-th online-serving row (default 1: "
                                                                  "all; the tests take a few)")
    ap.add_argument("--online-csv", type=Path, help="write the online-serving rows as CSV")
    a = ap.parse_args(argv)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 1000)
    df = table(a.data)
    ok = df[df["predicted"].notna()]
    print(f"offline max-throughput rows of {a.data.name}: {len(df)}, {len(ok)} predicted; output tokens/s, all GPUs; "
          "err = predicted / measured - 1\n")
    show = ok[["row_id", "model", "hardware", "precision", "layout", "lengths", "measured", "predicted", "batch",
               "error"]].copy()
    show["error"] = 100 * show["error"]
    print(show.to_string(index=False, float_format=lambda x: f"{x:,.1f}"))
    for by in ("group", "hardware", "precision", "model"):
        print(f"\nby {by}")
        print(mape(df, by).to_string(float_format=lambda x: f"{x:.1f}"))
    e = ok["error"]
    print(f"\nALL: {len(ok)} of {len(df)} rows, MAPE {100 * e.abs().mean():.1f}%, mean error {100 * e.mean():+.1f}%, "
          f"median APE {100 * e.abs().median():.1f}%; counting the {len(df) - len(ok)} rows it cannot predict at 100%: "
          f"{100 * (e.abs().sum() + len(df) - len(ok)) / len(df):.1f}%")
    bad = df[df["predicted"].isna()]
    if len(bad):
        print(f"\nnot predicted ({len(bad)} rows):")
        for reason, g in bad.groupby("reason"):
            print(f"  {len(g):3d}  {reason}")
    if a.csv:
        df.to_csv(a.csv, index=False)
    on = online(a.data, max(a.online_sample, 1))
    if a.online_csv:
        on.to_csv(a.online_csv, index=False)
    print(f"\nonline-serving table (offered QPS, 500 requests): mean TTFT and ITL (ms), measured, infer's steady state and "
          "the request-level simulation (serve.simulate)")
    print(on.drop(columns=["reason"]).to_string(index=False, float_format=lambda x: f"{x:,.1f}"))
    for m, g in on.groupby("metric"):
        ok = g.dropna(subset=["simulated"])
        ape = lambda col: 100 * (ok[col] / ok["measured"] - 1).abs()  # noqa: E731
        print(f"{m.upper()}: {len(ok)} of {len(g)} rows; MAPE steady {ape('steady').mean():.1f}%, simulated "
              f"{ape('simulated').mean():.1f}% (median {ape('steady').median():.1f}% / {ape('simulated').median():.1f}%)")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
