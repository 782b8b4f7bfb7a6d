"""The energy model (perfmodel.run.energy) against the measured and published power figures it was not fitted to.

    python -m benchmarks.evals.energy_check

1. MLPerf Training v4.0 Power (Supermicro, https://smc.co/mlperfv40): one 8 x H100 node fine-tuning Llama2-70B
   (LoRA) for 29.1 min drew 6.741 kW DC on average. The model's node power before the PUE, for every device
   busy (activity 1) and for the activity of a compute-bound dense plan on the same node.
2. Llama 3.1 (model card): 7.0M H100-hours for 70B and 30.84M for 405B, at 700 W board power: Meta's energy
   figure is GPU-hours x board power, an upper bound without host or cooling. The forecast of the same runs
   (15T / 15.6T tokens) in device-hours and MWh, with and without the PUE.
"""

from __future__ import annotations

import pandas as pd

from perfmodel import Plan, estimate, load_hardware
from perfmodel.run.energy import activity, device_power_w, power_for
from perfmodel.run.forecast import forecast

MLPERF_NODE_KW = 6.741
LLAMA31 = {"llama-3-70b": (7.0e6, "15T"), "llama-3.1-405b": (30.84e6, "15.6T")}
PLANS = {  # Llama 3's own layouts (arXiv 2407.21783, Table 4) for 405B; a 70B layout of the same kind
    "llama-3-70b": Plan(gpus=2048, tp=8, pp=4, micro_batch=1, global_batch=1024, seq_len=8192, sequence_parallel=True,
                        zero=1, recompute="selective"),
    "llama-3.1-405b": Plan(gpus=16384, tp=8, pp=16, vpp=2, micro_batch=1, global_batch=2048, seq_len=8192,
                           sequence_parallel=True, zero=1, recompute="selective"),
}


def node_check() -> pd.DataFrame:
    system = load_hardware("dgx-h100")
    p = power_for(system)
    dense = estimate("llama-3-8b", system, Plan(gpus=8, tp=1, pp=1, micro_batch=1, global_batch=64, seq_len=8192,
                                                 zero=1))
    rows = []
    for label, act in (("every device busy", 1.0),
                       ("Llama-3-8B, 8 x H100, dp 8", activity(p, dense.time_s.model_dump(), dense.clock.clock if dense.clock else 1.0))):
        kw = 8 * device_power_w(p, act) / 1e3
        rows.append({"case": label, "activity": act, "model_kW": kw, "measured_kW": MLPERF_NODE_KW,
                     "error": kw / MLPERF_NODE_KW - 1})
    return pd.DataFrame(rows)


def llama_check() -> pd.DataFrame:
    rows = []
    for model, (hours, tokens) in LLAMA31.items():
        f = forecast(model, "dgx-h100", PLANS[model], tokens)
        rows.append({"model": model, "gpus": f.gpus, "published_Mh": hours / 1e6, "forecast_Mh": f.device_hours / 1e6,
                     "published_GWh_at_TDP": hours * 0.7 / 1e6, "forecast_GWh": f.energy_kwh / 1e6,
                     "forecast_GWh_no_PUE": f.energy_kwh / f.power.pue / 1e6, "goodput": f.goodput,
                     "activity": f.device_activity})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    pd.set_option("display.width", 160)
    print("1. one 8 x H100 node, before the PUE, against MLPerf Training v4.0 Power (6.741 kW DC)")
    print(node_check().to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print("\n2. Llama 3.1 runs: device-hours and energy against the model card (energy there = hours x 700 W)")
    print(llama_check().to_string(index=False, float_format=lambda x: f"{x:.3f}"))
