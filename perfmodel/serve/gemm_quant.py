"""The activation cast of a served fp8 GEMM: one kernel with the checkpoint's static scale, where the measured GEMM
table timed a dynamic one.

The parts' GEMM tables (`hardware_specs/kernels/<part>/gemm.csv.gz`, AIConfigurator's TensorRT-LLM collector) time
each fp8 GEMM through TensorRT-LLM's `Linear` with per-tensor FP8 weights and no activation scale
(ai-dynamo/aiconfigurator `collector/trtllm/collect_gemm.py` `_build_weights`: the fp8 weights carry only
`weight_scale`; nvfp4's carry an `input_scale`), so every timed call also finds its input's scale on the fly
(amax, scale, cast; the tables' README: "FP8 and FP4 times include the on-the-fly activation quantization"). At the
smallest shapes, where the GEMM itself is one launch's worth of work, that shows as a fixed floor: 12.1-13.7 us
for fp8 on H100-GB300 against 1.8-2.8 us for bf16 (one kernel).

A served fp8 checkpoint carries static activation scales (ModelOpt's `input_scale` per linear: nvidia/*-FP8 and
the engines' own FP8 exports), and the engines cast with one kernel at that scale (TensorRT-LLM
`FP8QDQLinearMethod`: `static_quantize_e4m3_per_tensor`; vLLM `Fp8LinearOp` with a static `input_scale`:
`scaled_fp8_quant(x, scale)`). So a served fp8 GEMM call is the table's time less the dynamic quantization's excess
over one cast kernel:

    saving = floor(fp8) - 2 floor(bf16)      floor: the table's time at (m, n, k) = (1, 128, 128)
    t      = max(table(m, n, k, batch) - saving, operands' bytes at HBM)

per call: a call of `batch` grouped GEMMs (a MoE layer's local experts) is priced from the table as one GEMM of
their rows (`cost.compute.kernels.Device.gemm_priced`), one cast in the table and one in the engine. Both floors are read
from the part's own table, nothing is fitted. A check from the same tables: what this leaves of an fp8 call's fixed
cost, 2 floor(bf16) = 5.3 us on H200 (two kernels), is close to the tables' own fp8_block floor, 4.5 us (a
per-token-group cast and the GEMM, no amax: ../shared/data/kernels/h200_sxm/gemm.csv.gz, m <= 4, n, k <= 128).
Measured on a lent H100 in CUDA graphs (the fp8-cast benchmark; its H100 result is kept with it):
at (1, 128, 128) the dynamic path takes 13.1 us (the H100 table: 12.3), a static cast and the GEMM 5.5 (this
model: 2 x 2.65 = 5.3); at decode shapes (8-64 rows, Llama-3.1-70B's projections at tp 4) the dynamic path costs
12-16 us more than the static one, so the floors' 7 us is the conservative reading of the saving. fp4 (NVFP4) is left as timed: its activation scales are per block
of 16 and found on the fly by the engines too.
"""

from __future__ import annotations

import numpy as np

from ..cost.compute.kernels import Device

FLOOR_SHAPE = (1.0, 128, 128)  # a GEMM of one launch's worth of work: the table's fixed cost per call


def table_floor_s(dev: Device, precision: str) -> float | None:
    """The part's measured GEMM time at FLOOR_SHAPE in `precision` (the fixed cost of one call), or None where its
    table lacks the dtype."""
    if dev.gemm_table(precision) is None:
        return None
    return float(dev.gemm_priced(*FLOOR_SHAPE, 1, precision)[0])


def served_gemm_s(dev: Device, seconds: float, m, n, k, batch, precision: str) -> float:
    """`seconds`, the table's price of `batch` GEMMs (m, n, k) in `precision`, as a serving engine runs them
    (module docstring): fp8 with the dynamic cast's excess taken out; other precisions unchanged."""
    if precision != "fp8":
        return seconds
    fp8, bf16 = table_floor_s(dev, "fp8"), table_floor_s(dev, "bf16")
    if fp8 is None or bf16 is None or fp8 <= 2 * bf16:
        return seconds
    floor = float(dev.gemm_traffic_floor(np.maximum(m, 1.0), n, k, batch, "fp8"))
    return float(max(seconds - (fp8 - 2 * bf16), floor))
