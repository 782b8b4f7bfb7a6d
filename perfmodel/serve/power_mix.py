"""The clock a served step runs at under the board power limit: a step's kinds of time as the power model reads
them (`served_mix`), mixes of many steps summed (`add_mix`), and the clock `cost.power.step_clock` gives a mix
(`mix_clock`: a run's sustained work, `serve.simulate`, `serve.batching`; or one step's alone, `served_clock`)."""

from __future__ import annotations

import numpy as np

from ..cost.power import COMM_PARTS, COMPUTE_PARTS, MEMORY_PARTS, WAIT_PARTS, step_clock
from ..spec.hardware.system import System

# the TimeBreakdown parts cost.power reads a step by (phase_seconds: recompute split between compute and memory)
MIX_KINDS = (*COMPUTE_PARTS, "recompute", *MEMORY_PARTS, *COMM_PARTS, *WAIT_PARTS)


def served_mix(parts: dict, compute: float, prefill_attn: float) -> dict[str, float]:
    """A served step's kinds of time at the tables' clock, in `cost.power`'s TimeBreakdown parts (s): compute-bound
    are `compute` seconds of its GEMMs (`gemm_compute_s`, at most their priced seconds) and the prefill attention
    (gemm, attention); the rest of the GEMMs (reading weights at a few rows), the decode attention (reading the KV
    cache), the element-wise kernels and a speculative draft are memory-bound (memory_bound); collectives comm
    (tp_comm, pp_comm); host overhead wait (overhead). Mixes of many steps add part by part (`add_mix`)."""
    out = dict.fromkeys(MIX_KINDS, 0.0)
    out.update(gemm=compute, attention=prefill_attn, tp_comm=parts["tp_comm"], pp_comm=parts["pp_comm"],
               overhead=parts["overhead"],
               memory_bound=parts["gemm"] + parts["lm_head"] - compute + parts["attention"] - prefill_attn
               + parts["memory"] + parts.get("draft", 0.0))
    return out


def add_mix(total: dict, mix: dict, weight: float = 1.0) -> dict:
    """`total` (a mix, `served_mix`; empty to start) with `weight` x `mix` added part by part, s."""
    for k, v in mix.items():
        total[k] = total.get(k, 0.0) + weight * v
    return total


def mix_clock(system: System, mix: dict) -> float:
    """The clock fraction (<= 1) compute-bound kernels sustain under the board power limit while the GPU runs the
    work `mix` holds (`served_mix`, of one step or summed over many): `cost.power.step_clock` over it, its kernels
    priced at the tables' clock. 1 where the part has no power model or the mix is empty.

    The limit is a control loop on board power averaged over time, not a bound on each kernel: NVML reports the
    clock it takes away as throttle reason SwPowerCap, "SW Power Scaling algorithm is reducing the clocks below
    requested clocks" (NVML API reference, nvmlClocksThrottleReasons; DCGM_CLOCKS_THROTTLE_REASON_SW_POWER_CAP), and
    the board power NVML reads on Ampere (but GA100) and newer parts is averaged over 1 s (nvmlDeviceGetPowerUsage;
    NVML_FI_DEV_POWER_AVERAGE beside NVML_FI_DEV_POWER_INSTANT). The GPU's own clock changes take a switching and a
    transition latency that Velicka et al. measure on A100 and GH200 (arXiv 2502.20075, 2025; the 2026 follow-up,
    "An in-depth study of GPU frequency-scaling latency and its optimization on modern architectures"); no public
    source found states the power loop's own averaging window, so it is taken as much longer than a step (tens of
    ms) and shorter than a benchmark stage (tens of seconds to minutes): the clock of a served step is its run's
    sustained mix's (a replica's steps and idle waits of one stage, `serve.simulate`; the steady cycle,
    `serve.batching`), not its own. The dev data check the assumption: pricing each prefill at its own mix's clock
    (near a GEMM loop's, 0.87 on H100) overstated vLLM 0.15.1's online TTFT on H100 (serving_online MAPE 17.2%, 13.2%
    at the sustained clock); TensorRT-LLM's published online rows, under-predicted at low load where no clock is in
    play (their ITL), move further under (published_inference)."""
    power = system.accelerator.power
    if power is None or not mix or sum(mix.values()) <= 0.0:
        return 1.0
    time = {k: np.asarray(mix.get(k, 0.0), float) for k in MIX_KINDS}
    return float(step_clock(power, time, 1.0))


def served_clock(system: System, parts: dict, compute: float, prefill_attn: float) -> float:
    """The clock fraction (<= 1) of a served step from its own mix alone (`mix_clock` of `served_mix`): the step's
    clock where no run's mix is given (`step_parts` with clock None: the disaggregated simulation, the static
    batch). 1 where the part has no power model."""
    return mix_clock(system, served_mix(parts, compute, prefill_attn))
