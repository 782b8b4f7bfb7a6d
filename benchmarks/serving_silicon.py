"""Serving benchmark at fixed concurrency: predicted against measured TTFT and TPOT on the aggregated rows of
serving_silicon_dev.csv (AIConfigurator's silicon sample: vLLM, SGLang, TensorRT-LLM on H100-GB300), two ways:
`infer`'s steady state (one request joining a steady batch of the row's concurrency) and the request-level
simulation (`serve.simulate`: a closed loop of that many clients, 10 requests per client up to 1,000). The lengths
follow the client that measured the row, as far as `silicon_data_source` tells it: the nightly dashboards (the
db-dump rows, and the dated exports whose rows carry a `wip=` flag and the engines' nightly images) are
InferenceMAX-style runs, which draw lengths uniform in [0.8, 1] x nominal (InferenceMAX's --random-range-ratio
0.8); the rest (AIConfigurator's and Dynamo's own collection files: per-model files, gtl_task_id runs, gap
analyses) send the nominal lengths, the default of their clients (genai-perf / AIPerf synthetic prompts, whose
length standard deviations default to 0), so a closed loop's requests start and end together, in waves. That
split is read from the metadata, not cited per file; `--range-ratio R` uses R for every row instead, and
benchmarks/results/serving_silicon.txt gives the table both ways.

    python benchmarks/serving_silicon.py [--data PATH] [--sample N] [--jobs J] [--csv OUT.csv]

Each row maps to (model, system, ServePlan) by stated rules: the model by its HF id (a catalogue preset, else its
config.json from ../shared/data/hf_configs), the system by `system` (h100_sxm: dgx-h100, h200_sxm: dgx-h200,
b200_sxm: dgx-b200, b300_sxm: dgx-b300, gb200: gb200-nvl72), tp = tp_size, ep = moe_ep_size, precision as
`precision` (none stated and no gemm_quant_mode: bf16, the checkpoint as published; int4 weight-only: w4a16),
attention_dp = attention_dp_size (where it is missing or breaks the invariant tp x attention_dp = moe_tp x
moe_ep, the invariant gives it), stack = backend at its release (`backend_version`; a nightly or special image: the
newest release the profile lists), one replica whose concurrency is `batch_size` x attention_dp (AIConfigurator's
batch_size is per attention-DP rank: the rows' silicon_concurrency is that times the replicas run). A row that
cannot be expressed (a model the catalogue cannot read, a layout that does not fit) keeps its reason and counts 100%
in the MAPE with them. Nothing here is fitted per row; the request path's two fitted constants are fitted, and held
out model by model, by benchmarks/serving_host_fit.py. --sample N scores every N-th row, --jobs J in J processes
(a quick look; the committed table scores all).

The disaggregated rows (`mode` disagg: Dynamo's deployments of a prefill pool and a decode pool) are scored as their
own group ("disagg") beside the aggregated rows in every table, by the same rules where they apply
(`disagg_case`): the prefill pool is prefill_num_workers replicas (prefill_dp) of prefill_tp_size x
prefill_attention_dp_size GPUs, experts over prefill_moe_ep_size (prefill_ep); the decode pool decode_num_workers
replicas (dp) of decode_tp_size x decode_attention_dp_size x decode_pp_size GPUs, experts over decode_moe_ep_size
(ep); a pool's attention_dp follows the invariant tp x attention_dp = moe_tp x moe_ep where both MoE sizes are
stated and it breaks it (0 is unset). Not expressed: a row without its worker counts (the 2026-03-25 export's: the
pools' sizes, and so a decode replica's share of the clients, are unknown), a prefill_pp_size above 1 (prefill
replicas run one stage). The whole deployment is simulated, one closed loop of
every client: the row's silicon_concurrency where `silicon_data_source` states it, else decode_batch_size x
decode_attention_dp_size x decode_num_workers (as the aggregated rows' batch_size x attention_dp: AIConfigurator's
batch_size is per attention-DP rank, and per worker), 10 requests per client up to 1,000; steady = infer's
`infer_disaggregated` at that concurrency (TTFT without queueing).
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from devset import HERE
from perfmodel.errors import InputError
from perfmodel.serve import infer
from perfmodel.serve.simulate import simulate
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.serving.schema import ServePlan

SHARED = HERE.parent.parent / "shared" / "data"
ALIASES = {"zhipuai/GLM-5": "zai-org/GLM-5"}  # the dataset's name for the checkpoint zai-org publishes
PRESETS = {"meta-llama/Llama-3.1-70B": "llama-3.1-70b", "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
           "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b", "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b"}
SYSTEMS = {"h100_sxm": "dgx-h100", "h200_sxm": "dgx-h200", "b200_sxm": "dgx-b200", "b300_sxm": "dgx-b300",
           "gb200": "gb200-nvl72"}
RANGE_RATIO = 0.8  # InferenceMAX's --random-range-ratio


def range_ratio(row: pd.Series) -> float:
    """The lengths' spread of the client that measured `row` (module docstring): 0.8 for the nightly dashboards
    (db-dump rows and rows with a wip= flag: InferenceMAX-style), 1 (nominal lengths) for the rest."""
    src = str(row["silicon_data_source"])
    return RANGE_RATIO if src.startswith("db-dump") or "wip=" in src else 1.0


def _devset() -> Path:
    p = SHARED / "serving_silicon_dev.csv"
    return p if p.exists() else HERE / "data" / "serving_silicon_dev.csv"


def model_of(hf_id: str):
    """(model or None, reason): the catalogue preset, else the row's config.json read by the catalogue."""
    if hf_id in PRESETS:
        return load_model(PRESETS[hf_id]), ""
    base = ALIASES.get(hf_id, hf_id)
    base = base.replace("nvidia/", "Qwen/") if base.startswith("nvidia/Qwen") else base
    base = base.removesuffix("-NVFP4").removesuffix("-FP8")
    path = SHARED / "hf_configs" / f"{base.replace('/', '--')}_config.json"
    if not path.exists():
        return None, f"no config.json for {hf_id}"
    try:
        return load_model(str(path)), ""
    except InputError as err:
        return None, f"config.json: {err}"


def _count(x) -> int:
    """A layout size of the sample (NaN or 0 where unset): at least 1."""
    return max(1, int(x)) if pd.notna(x) else 1


def _common(row: pd.Series) -> tuple:
    """(model, system, precision, reason) of any row: the reason where one of them cannot be mapped."""
    model, reason = model_of(str(row["model_path"]))
    if model is None:
        return None, None, None, reason
    system = SYSTEMS.get(str(row["system"]))
    if system is None:
        return model, None, None, f"system {row['system']!r} not mapped"
    # no precision and no quantisation stated: the checkpoint as published, bf16
    precision = "bf16" if pd.isna(row["precision"]) and pd.isna(row["gemm_quant_mode"]) else row["precision"]
    precision = {"int4": "w4a16"}.get(precision, precision)  # int4_wo: 4-bit weights only, bf16 activations
    if precision not in ("bf16", "fp8", "fp4", "w4a16"):
        return model, system, None, f"precision {precision}"
    return model, system, precision, ""


def case(row: pd.Series) -> tuple:
    """(model, system, plan fields, concurrency, reason)."""
    model, system, precision, reason = _common(row)
    if reason:
        return model, system, None, 0, reason
    adp = max(1, int(row["attention_dp_size"])) if pd.notna(row["attention_dp_size"]) else 1  # 0: unset (dense)
    moe = int(_count(row["moe_tp_size"]) * _count(row["moe_ep_size"]))
    if model.moe and moe != int(row["tp_size"]) * adp and moe % int(row["tp_size"]) == 0:
        adp = moe // int(row["tp_size"])  # attention_dp_size left out: the invariant tp x adp = moe_tp x moe_ep
    # batch_size is one replica's sequences per attention-DP rank (AIConfigurator's collectors: the client's
    # silicon_concurrency is batch_size x attention_dp_size x the replicas it ran): one replica is simulated, with
    # its share of the clients (replicas serve their round-robin shares independently)
    plan = dict(tp=int(row["tp_size"]), attention_dp=adp, pp=1, dp=1,
                ep=int(row["moe_ep_size"] or 1) if model.moe else 1,
                precision=precision, stack=str(row["backend"]), stack_version=stack_version(row),
                input_len=int(row["isl"]), output_len=int(row["osl"]))
    return model, system, plan, int(row["batch_size"]) * adp, ""


def _size(x) -> int:
    """A pool's layout size of the sample (NaN or 0: unset): the size, else 0."""
    return int(x) if pd.notna(x) and int(x) > 0 else 0


def _pool(row: pd.Series, side: str, moe: bool) -> tuple[int, int, int]:
    """(tp, attention_dp, ep) of the row's prefill or decode pool (module docstring): attention_dp as stated, or
    where it breaks the invariant tp x attention_dp = moe_tp x moe_ep with both MoE sizes stated, the invariant's."""
    tp, adp = _count(row[f"{side}_tp_size"]), _count(row[f"{side}_attention_dp_size"])
    moe_tp, moe_ep = _size(row[f"{side}_moe_tp_size"]), _size(row[f"{side}_moe_ep_size"])
    if moe and moe_tp and moe_ep and moe_tp * moe_ep != tp * adp and (moe_tp * moe_ep) % tp == 0:
        adp = moe_tp * moe_ep // tp
    return tp, adp, (moe_ep or 1) if moe else 1


def disagg_case(row: pd.Series) -> tuple:
    """(model, system, plan fields, concurrency, reason) of a disaggregated row (module docstring)."""
    model, system, precision, reason = _common(row)
    if reason:
        return model, system, None, 0, reason
    if pd.isna(row["prefill_num_workers"]) or pd.isna(row["decode_num_workers"]):
        return model, system, None, 0, "prefill_num_workers / decode_num_workers not stated: the pools' sizes unknown"
    if _count(row["prefill_pp_size"]) > 1:
        return model, system, None, 0, f"prefill_pp_size {row['prefill_pp_size']:g}: prefill replicas run one stage"
    ptp, padp, pep = _pool(row, "prefill", bool(model.moe))
    tp, adp, ep = _pool(row, "decode", bool(model.moe))
    workers = _count(row["decode_num_workers"])
    stated = re.search(r"silicon_concurrency=(\d+)", str(row["silicon_data_source"]))
    c = int(stated.group(1)) if stated else _count(row["decode_batch_size"]) * adp * workers
    plan = dict(tp=tp, attention_dp=adp, pp=_count(row["decode_pp_size"]), dp=workers, ep=ep,
                prefill_dp=_count(row["prefill_num_workers"]), prefill_tp=ptp, prefill_attention_dp=padp,
                prefill_ep=pep, precision=precision, stack=str(row["backend"]), stack_version=stack_version(row),
                input_len=int(row["isl"]), output_len=int(row["osl"]))
    return model, system, plan, c, ""


def _layout(row: pd.Series) -> str:
    if row["mode"] != "disagg":
        return f"tp{row['tp_size']:g} adp{row['attention_dp_size']:g} ep{row['moe_ep_size']:g}"
    return " / ".join(f"{side[0]}{row[f'{side}_num_workers']:g}x tp{row[f'{side}_tp_size']:g} "
                      f"adp{row[f'{side}_attention_dp_size']:g} ep{row[f'{side}_moe_ep_size']:g}"
                      for side in ("prefill", "decode"))


def stack_version(row: pd.Series) -> str | None:
    """The engine release a row ran: `backend_version` where it is a release number; a nightly or special image
    (nightly-dev-..., glm5-hopper) or none stated: None, the newest release the profile lists (the images are of
    2026, after every release listed)."""
    v = str(row["backend_version"])
    return v if re.match(r"\d+\.\d+", v) else None


def score_row(row: pd.Series, ratio: float | None = None, stack=None) -> dict:
    """One row predicted: infer's steady state and the closed-loop simulation (`stack`: a profile in place of the
    row's backend, for the fits' folds)."""
    mode = "disagg" if row["mode"] == "disagg" else "agg"
    model, system, plan, c, reason = (disagg_case if mode == "disagg" else case)(row)
    r = dict(id=row["id"], mode=mode, model=row["model_path"], system=row["system"], backend=row["backend"],
             version=row["backend_version"], precision=row["precision"], layout=_layout(row),
             lengths=f"{row['isl']}/{row['osl']}", concurrency=c, ttft_ms=row["silicon_ttft_ms"],
             tpot_ms=row["silicon_tpot_ms"], reason=reason,
             kind="disaggregated" if mode == "disagg" else "dp-attention" if plan and plan.get("attention_dp", 1) > 1
             else "tp")
    if plan is not None:
        if stack is not None:
            plan = plan | {"stack": stack}
        try:
            e = infer(model, system, ServePlan(**plan, concurrency=c))
            s = simulate(model, system, ServePlan(**plan), dict(
                arrival="closed", concurrency=c, requests=min(1000, 10 * c),
                range_ratio=range_ratio(row) if ratio is None else ratio))
            r.update(steady_ttft_ms=1e3 * e.ttft_s, steady_tpot_ms=1e3 * e.tpot_s,
                     sim_ttft_ms=1e3 * s.ttft_s.mean, sim_tpot_ms=1e3 * s.tpot_s.mean)
        except InputError as err:
            r["reason"] = f"{err}"
    return r


def _score(args) -> dict:
    return score_row(*args)


def table(path: Path, sample: int = 1, ratio: float | None = None, jobs: int = 1) -> pd.DataFrame:
    d = pd.read_csv(path)
    d = pd.concat([d[d["mode"] == "agg"].iloc[::sample], d[d["mode"] == "disagg"].iloc[::sample]])
    work = [(row, ratio) for _, row in d.iterrows()]
    if jobs > 1:
        with multiprocessing.Pool(jobs) as pool:
            out = pool.map(_score, work, chunksize=4)
    else:
        out = [_score(w) for w in work]
    df = pd.DataFrame(out)
    for k in ("steady_ttft_ms", "steady_tpot_ms", "sim_ttft_ms", "sim_tpot_ms"):
        if k not in df:
            df[k] = np.nan
    return df


def scores(df: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """MAPE % per group of TTFT and TPOT, steady and simulated, the aggregated and disaggregated rows apart (`mode`);
    a row not expressed counts 100%."""
    def ape(pred, meas):
        return (100 * (pred / meas - 1).abs()).fillna(100.0)

    e = df.assign(steady_ttft=ape(df["steady_ttft_ms"], df["ttft_ms"]), sim_ttft=ape(df["sim_ttft_ms"], df["ttft_ms"]),
                  steady_tpot=ape(df["steady_tpot_ms"], df["tpot_ms"]), sim_tpot=ape(df["sim_tpot_ms"], df["tpot_ms"]),
                  expressed=df["reason"] == "")
    keys = ["steady_ttft", "sim_ttft", "steady_tpot", "sim_tpot"]
    if by is None:
        return pd.concat([pd.DataFrame({"mode": [mode], "rows": [len(m)], "expressed": [int(m["expressed"].sum())]} |
                                       {k: [m[k].mean()] for k in keys} |
                                       {f"{k} (expressed)": [m.loc[m["expressed"], k].mean()]
                                        for k in ("sim_ttft", "sim_tpot")})
                          for mode, m in e.groupby("mode")])
    g = e.groupby(["mode", by])
    return pd.concat([g.size().rename("rows"), g["expressed"].sum()] + [g[k].mean() for k in keys], axis=1).round(1)


BANDS = (0, 4, 16, 64, 256, 10**9)  # concurrency bands: 1-4 (a request waits for little but its own prefill), ...


def signed(df: pd.DataFrame) -> pd.DataFrame:
    """Per mode (agg, disagg), stack and concurrency band, over the expressed rows: TTFT and TPOT MAPE % and signed
    median error % (simulated / measured - 1: negative = predicted too short)."""
    return pd.concat([_signed(m).assign(mode=mode)[["mode", "backend", "concurrency", "rows", "ttft_mape",
                                                    "ttft_signed_median", "tpot_mape", "tpot_signed_median"]]
                      for mode, m in df.groupby("mode")])


def _signed(df: pd.DataFrame) -> pd.DataFrame:
    e = df[df["reason"] == ""].assign(
        ttft=lambda x: x["sim_ttft_ms"] / x["ttft_ms"] - 1, tpot=lambda x: x["sim_tpot_ms"] / x["tpot_ms"] - 1,
        band=lambda x: pd.cut(x["concurrency"], BANDS, labels=["1-4", "5-16", "17-64", "65-256", ">256"]))
    out = []
    for keys, g in [(("all", "all"), e)] + [((b, "all"), g) for b, g in e.groupby("backend")] + \
            [((b, str(c)), g) for (b, c), g in e.groupby(["backend", "band"], observed=True)]:
        out.append(dict(backend=keys[0], concurrency=keys[1], rows=len(g),
                        ttft_mape=100 * g["ttft"].abs().mean(), ttft_signed_median=100 * g["ttft"].median(),
                        tpot_mape=100 * g["tpot"].abs().mean(), tpot_signed_median=100 * g["tpot"].median()))
    return pd.DataFrame(out).round(1)


def by_kind(df: pd.DataFrame) -> pd.DataFrame:
    """Per layout kind, and per kind and engine, over the expressed rows: TPOT and TTFT MAPE % and signed median %
    (simulated / measured - 1), and the mean of the per-model TPOT MAPEs (each model weighted once)."""
    e = df[df["reason"] == ""].assign(ttft=lambda x: x["sim_ttft_ms"] / x["ttft_ms"] - 1,
                                      tpot=lambda x: x["sim_tpot_ms"] / x["tpot_ms"] - 1)
    out = []
    for keys, g in [((k, "all"), g) for k, g in e.groupby("kind")] + \
            [((k, b), g) for (k, b), g in e.groupby(["kind", "backend"])]:
        out.append(dict(kind=keys[0], backend=keys[1], rows=len(g), models=g["model"].nunique(),
                        tpot_mape=100 * g["tpot"].abs().mean(), tpot_signed_median=100 * g["tpot"].median(),
                        tpot_mape_per_model=100 * g.groupby("model")["tpot"].apply(lambda x: x.abs().mean()).mean(),
                        ttft_mape=100 * g["ttft"].abs().mean(), ttft_signed_median=100 * g["ttft"].median()))
    return pd.DataFrame(out).round(1)


def main(argv=None) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=_devset())
    ap.add_argument("--sample", type=int, default=1, help="score every N-th row (default 1: all)")
    ap.add_argument("--csv", type=Path)
    ap.add_argument("--jobs", type=int, default=1, help="rows scored in parallel processes (default 1)")
    ap.add_argument("--range-ratio", type=float, help="every row's lengths uniform in [R, 1] x nominal (default: by "
                                                      "the row's source, module docstring)")
    a = ap.parse_args(argv)
    t0 = time.time()
    df = table(a.data, max(a.sample, 1), a.range_ratio, max(a.jobs, 1))
    if a.csv:
        df.to_csv(a.csv, index=False)
    pd.set_option("display.width", 200)
    lengths = "by source" if a.range_ratio is None else f"range ratio {a.range_ratio:g}"
    print(f"serving_silicon_dev.csv, aggregated (agg) and disaggregated (disagg) rows (every {a.sample}): MAPE %, a "
          "row not expressed counts 100%; "
          f"steady = infer at the row's concurrency, sim = closed-loop simulation, lengths {lengths} "
          f"({time.time() - t0:.0f} s)\n")
    print(scores(df, None).round(1).to_string(index=False), "\n")
    df["source"] = pd.read_csv(a.data).set_index("id").loc[df["id"], "silicon_data_source"].str.split(";").str[0] \
        .str.replace("source_file=", "").str.replace(r"db-dump/.*", "db-dump", regex=True).to_numpy()
    print("simulated, expressed rows: MAPE % and signed median error % (negative: predicted too short)")
    print(signed(df).to_string(index=False), "\n")
    print("leave-one-model-out: the request path's fitted constants (vllm prefill_step_s, trtllm front end) are "
          "fitted and held out by python benchmarks/serving_host_fit.py (its output follows in "
          "benchmarks/results/serving_silicon.txt)\n")
    print("simulated, expressed rows by layout kind (tp: tensor-parallel replicas; dp-attention: attention data "
          "parallelism with the experts over the groups; disaggregated: prefill and decode pools)")
    print(by_kind(df).to_string(index=False), "\n")
    print("leave-one-model-out TPOT: no constant is fitted on TPOT; the two request-path constants (above) are fitted "
          "on TTFT, so each model's TPOT below is held out of every fit but theirs (their folds: serving_host_fit)\n")
    for by in ("model", "backend", "system", "source"):
        print(scores(df, by).to_string(), "\n")
    reasons = (df["mode"] + ": " + df["reason"].str.slice(0, 110))[df["reason"] != ""].value_counts()
    print("not expressed:\n" + reasons.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
