"""Decode-step GEMM time as perfmodel prices it for a serving step, against the measured per-op GEMM tables.

    python -m benchmarks.evals.decode_gemm

For the four layer GEMMs of a decode step (Y[M, n] = X[M, k] W[n, k]^T on one tensor-parallel rank: fused QKV
n = (n_heads + 2 n_kv_heads) head_dim / tp, k = hidden; attention output n = hidden, k = q_dim / tp; gate-up
n = 2 ffn_hidden / tp, k = hidden; down n = hidden, k = ffn_hidden / tp) of Llama-3.1-8B (tp 1), Llama-3.1-70B
(tp 4, tp 8) and Qwen3-32B (tp 2), at M = 1..256 rows (the step's decode batch), in bf16 and fp8, on H100
(system dgx-h100) and B200 (dgx-b200), compare:

* priced: `perfmodel.serve.step_time._gemm` on the serving `device` of a vLLM plan (the part's measured table,
  log-log interpolated, over the stack's sustained fraction, floored by operand traffic; fp8 with the dynamic
  activation cast's excess replaced by a static cast, `perfmodel.serve.gemm_quant`);
* measured: AIConfigurator's collected TensorRT-LLM 1.3.0rc20 GEMM tables (NVIDIA ai-dynamo/aiconfigurator,
  Apache-2.0; ../shared/data/kernels/README.md), `../shared/data/kernels/{h100_sxm,b200_sxm}/gemm.csv.gz`,
  dtypes `bfloat16` and `fp8` (per-tensor fp8, its activation scale found on the fly). The latency at exactly
  (M, n, k) where the table has it ("exact"); where n or k is off the grid, log-log bilinear interpolation in
  (n, k) between the grid's neighbours at that exact M ("interpolated"); shapes outside the grid, or whose
  neighbours are holes in the table, are skipped.

Prints every point (priced us, measured us, error % = priced / measured - 1), then per part and precision the
mean and max absolute error over the exact-grid points and over all, and the max absolute error per M.
Target: within 10% at every M. Nothing here is fitted or tuned.

Reading it: perfmodel's own GEMM tables (hardware_specs/kernels/<part>/gemm.csv.gz) hold these tables' bf16 and
fp8 rows unchanged, and its lookup is the same log-log interpolation, so bf16 differs only by 1 / sustained_fraction.
fp8 is priced below the table by the dynamic cast's excess (floor(fp8) - 2 floor(bf16) at (1, 128, 128)), a
deliberate modelling choice, not an interpolation error: the engines cast an fp8 GEMM's input with one kernel
(vLLM's static or per-token dynamic scaled_fp8_quant), where the table's TensorRT-LLM call finds a per-tensor scale
on the fly; on a lent H100 the dynamic path cost 12-16 us more than the static one at decode shapes
(perfmodel/serve/gemm_quant.py), against the 6.7 us the tables' floors take off here.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from benchmarks import SHARED
from perfmodel.serve.host_time import plan_stack
from perfmodel.serve.step_time import _gemm, device
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.serving.schema import ServePlan, resolve_serve

PARTS = {"dgx-h100": "h100_sxm", "dgx-b200": "b200_sxm"}  # system -> folder under SHARED / "kernels"
DTYPES = {"bf16": "bfloat16", "fp8": "fp8"}  # perfmodel precision -> the table's dtype
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MODELS = (("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("llama-3.1-70b", 8), ("qwen3-32b", 2))


def layer_gemms(name: str, tp: int) -> dict[str, tuple[int, int]]:
    """(n, k) of the four layer GEMMs of `name` on one rank at tensor parallelism `tp`."""
    c = load_model(name)
    shapes = {"qkv": ((c.n_heads + 2 * c.n_kv_heads) * c.head_dim / tp, c.hidden),
              "out": (c.hidden, c.q_dim / tp),
              "gate_up": (2 * c.ffn_hidden / tp, c.hidden),
              "down": (c.hidden, c.ffn_hidden / tp)}
    for op, nk in shapes.items():
        if any(v != int(v) for v in nk):
            raise ValueError(f"{name} tp {tp} {op}: (n, k) = {nk} not whole")
    return {op: (int(n), int(k)) for op, (n, k) in shapes.items()}


class Measured:
    """One dtype of a measured GEMM table: the latency at (m, n, k), exact or log-log bilinear in (n, k)."""

    def __init__(self, table: pd.DataFrame, dtype: str):
        d = table[table.dtype == dtype]
        if d.duplicated(["m", "n", "k"]).any():
            raise ValueError(f"{dtype}: duplicate (m, n, k) rows")
        self.ms = dict(zip(zip(d.m, d.n, d.k), d.latency_ms * 1e3))  # (m, n, k) -> us
        self.n_axis, self.k_axis = np.unique(d.n), np.unique(d.k)

    @staticmethod
    def _bracket(axis, x):
        """[(grid value, weight in log x)] around x: one point where x is on the grid; None outside it."""
        if x in axis:
            return [(int(x), 1.0)]
        if x < axis[0] or x > axis[-1]:
            return None
        hi = int(np.searchsorted(axis, x))
        lo_v, hi_v = axis[hi - 1], axis[hi]
        w = float(np.log(x / lo_v) / np.log(hi_v / lo_v))
        return [(int(lo_v), 1.0 - w), (int(hi_v), w)]

    def __call__(self, m: int, n: int, k: int) -> tuple[float, str]:
        """(us, "exact" | "interpolated"), or (nan, why skipped)."""
        bn, bk = self._bracket(self.n_axis, n), self._bracket(self.k_axis, k)
        if bn is None or bk is None:
            return np.nan, "outside grid"
        log_t = 0.0
        for nv, wn in bn:
            for kv, wk in bk:
                t = self.ms.get((m, nv, kv))
                if t is None:
                    return np.nan, "hole"
                log_t += wn * wk * np.log(t)
        return float(np.exp(log_t)), "exact" if len(bn) == len(bk) == 1 else "interpolated"


def compare() -> pd.DataFrame:
    rows = []
    for system_name, folder in PARTS.items():
        system = load_hardware(system_name)
        table = pd.read_csv(SHARED / "kernels" / folder / "gemm.csv.gz")
        for precision, dtype in DTYPES.items():
            if dtype not in set(table.dtype):
                print(f"{folder}: no {dtype} rows in the table; {precision} skipped (dtypes: "
                      f"{', '.join(sorted(set(table.dtype)))})")
                continue
            measured = Measured(table, dtype)
            for name, tp in MODELS:
                model = load_model(name)
                plan = resolve_serve(ServePlan(tp=tp, precision=precision, input_len=1024, output_len=256,
                                               stack="vllm"), model)
                dev = device(model, system, plan, plan_stack(plan))
                for op, (n, k) in layer_gemms(name, tp).items():
                    for m in BATCHES:
                        meas, grid = measured(m, n, k)
                        rows.append({"part": folder, "precision": precision, "model": name, "tp": tp,
                                     "gemm": op, "n": n, "k": k, "M": m,
                                     "priced_us": _gemm(dev, m, n, k, precision=precision) * 1e6,
                                     "measured_us": meas, "grid": grid})
    out = pd.DataFrame(rows)
    out["err_pct"] = (out.priced_us / out.measured_us - 1.0) * 100.0
    return out


def summary(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (part, precision), g in df.dropna(subset=["err_pct"]).groupby(["part", "precision"], sort=False):
        exact, err = g[g.grid == "exact"].err_pct.abs(), g.err_pct.abs()
        worst = g.loc[err.idxmax()]
        rows.append({"part": part, "precision": precision, "n_exact": len(exact), "mae_exact": exact.mean(),
                     "max_exact": exact.max(), "n_all": len(err), "mae_all": err.mean(), "max_all": err.max(),
                     "within_10pct": f"{int((err <= 10).sum())}/{len(err)}",
                     "worst": f"{worst.model} tp{worst.tp} {worst.gemm} M={worst.M} ({worst.err_pct:+.1f}%)"})
    return pd.DataFrame(rows)


def main() -> None:
    start = time.perf_counter()
    df = compare()
    pd.set_option("display.width", 200)
    fmt = {"priced_us": "{:.2f}".format, "measured_us": "{:.2f}".format, "err_pct": "{:+.1f}".format}
    for (part, precision), g in df.groupby(["part", "precision"], sort=False):
        print(f"\n== {part} {precision}: decode GEMM, priced vs measured (us; err = priced / measured - 1)")
        print(g.drop(columns=["part", "precision"]).to_string(index=False, formatters=fmt))
    skipped = df[df.measured_us.isna()]
    if len(skipped):
        print(f"\nskipped {len(skipped)} points: {skipped.grid.value_counts().to_dict()}")
    print("\n== summary: |error| %, over exact-grid points and over all (exact + interpolated)")
    print(summary(df).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print("\n== max |error| % per M (all points)")
    per_m = df.assign(abs_err=df.err_pct.abs()).pivot_table(index=["part", "precision"], columns="M",
                                                            values="abs_err", aggfunc="max", sort=False)
    print(per_m.to_string(float_format=lambda v: f"{v:.1f}"))
    print(f"\nruntime {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
