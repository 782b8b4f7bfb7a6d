"""Published mixture-of-experts training runs (the MoE development CSV, bundled as
benchmarks/data/published_moe_runs_dev.csv) as `calibrate.runs.table.Case`s: (model, system, plan, measured step time).

Model shapes come from the presets (their HF config.json), named by the row's `model`; layouts from the row
(tp, pp, cp, ep, etp, vpp, dp, micro and global batch); what the row leaves unstated from `MOE_DEFAULTS`, the
same for every row of a framework (never per row, never tuned). Rows this tool cannot express come back with
the reason: hybrid Mamba-MoE models (Nemotron-3: no Mamba operator), layer-truncated proxies, GPUs outside the
catalogue, rows without a step time.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from perfmodel.calibrate.runs.table import Case, cell_number, cell_text, measured_step_time
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, resolve
from perfmodel.spec.stack.frameworks import stack_for_framework
from perfmodel.spec.stack.release import is_release, split_stack

# The preset of each model family the CSV names ([tokendrop] rows are the same model with dropping routing).
MODEL_PRESETS = {
    "qwen3-30b-a3b": "qwen3-30b-a3b", "qwen3-235b-a22b": "qwen3-235b-a22b", "gpt-oss-120b": "gpt-oss-120b",
    "gpt-oss-20b": "gpt-oss-20b", "kimi-k2": "kimi-k2", "moonlight-16b-a3b": "moonlight-16b-a3b",
    "llama4-scout (llm only)": "llama-4-scout", "llama4-scout": "llama-4-scout", "mixtral-8x22b": "mixtral-8x22b",
    "deepseek-v3": "deepseek-v3",
}

# Settings the Megatron-Bridge performance tables do not state, from Megatron-Bridge's performance recipes
# (scripts/performance, the same for every row): the distributed optimizer (ZeRO-1) with overlapped gradient
# reduction and parameter gather, sequence parallelism with tp, no recomputation, bf16 gradient reduction
# (Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32 = False), Megatron's alltoall dispatcher, and
# force-balanced routing (the tables' footnote; expert_imbalance 1). NeMo AutoModel: FSDP2 (ZeRO-3) and DeepEP,
# as its rows' framework and kernel columns state ("PyTorch-native, FSDP2"; "TE + DeepEP"). torchtitan: FSDP2,
# its default data parallelism (JobConfig parallelism.data_parallel_shard_degree = -1), and its all-to-all.
# NeMo AutoModel's performance summary (main branch, Oct 2025) ran its benchmark configs; their release line holds
# the recompute and dispatcher they set (hardware_specs/stacks/releases/nemo-automodel.yaml). Which stack or release
# a row runs: its framework cell through spec.stack.frameworks.stack_for_framework, as for every runs table.
# The expert-parallel size the table leaves out ('- (not stated)'), from the config the row names
# (examples/benchmark/configs/gptoss_{20b,120b}_te_deepep.yaml @8d9bfb90e: distributed.ep_size).
AUTOMODEL_EP = {"gpt-oss-20b": 8, "gpt-oss-120b": 64}
MOE_DEFAULTS = {
    "megatron": dict(zero=1, recompute="none", grad_dtype="bf16", moe_dispatcher="alltoall", stack="megatron-core"),
    "automodel": dict(zero=3, recompute="none", grad_dtype="fp32", moe_dispatcher="flex", stack="torchtitan"),
    "torchtitan": dict(zero=3, recompute="none", grad_dtype="fp32", moe_dispatcher="alltoall", stack="torchtitan"),
}


# Megatron-Bridge's DeepSeek-V3 pipeline layout: layers per virtual chunk (chunk c on stage c % pp), the first holding
# the embedding and the last the MTP block and the loss. recipes/deepseek/deepseek_v3.py @v0.4.0 L37-45
# (set_deepseek_v3_pipeline_model_parallel_layout's layout_map, the same at v0.3.0-v0.4.2) and, for pp 2 x vpp 8,
# the GB300 workload's pp_layout "Et*4|(t*4|)*14tmL" (scripts/performance/configs/deepseek/
# deepseek_workload_base_configs.py @v0.3.0-v0.4.2).
DSV3_CHUNKS = {**dict.fromkeys([(16, 1), (8, 2), (4, 4), (2, 8)], [4] * 15 + [1]),
               **dict.fromkeys([(8, 1), (4, 2)], [8] * 7 + [5]), (4, 1): [16, 16, 16, 13]}
# The optimizer state Megatron-Bridge's DeepSeek-V3 recipe keeps: the precision-aware optimizer with bf16 Adam moments
# and bf16 main gradients beside fp32 master weights (recipes/deepseek/deepseek_v3.py @v0.4.0 L161-165; the same
# settings @v0.1.0rc3 L240-244, @v0.2.0 L272-276, @v0.3.0 L279-283).
BRIDGE_STATE = {"deepseek-v3": dict(moment_dtype="bf16", grad_dtype="bf16")}


# The micro-batch of the Megatron-Bridge performance recipe a container ran, by (release, model, system), where a table
# row's own batch columns disagree (its GA x dp x MBS is not its GBS, `batch_consistent`): 25.11's GPT-OSS 120B
# H100 row states MBS 4 and GA 2 (B200's) beside pp 4 and GBS 512; the recipe it ran sets 64 GPUs, pp 4, ep 8 and
# micro_batch_size 1 (scripts/performance/configs/gpt_oss/workload_base_configs.py @v0.2.0 L22-28 BASE_GPT_OSS_120B_
# CONFIG, L58-62 GPT_OSS_120B_H100_BF16_BASE_CONFIG).
RECIPE_MICRO_BATCH = {("megatron-bridge@25.11", "gpt-oss-120b", "dgx-h100"): 1}


def batch_consistent(row: pd.Series, gpus: float, tp: int, pp: int, cp: int, mb: float, gbs: float) -> bool:
    """Whether a row's stated gradient accumulation agrees with its batch: GA x dp x MBS = GBS, dp = gpus / (tp pp
    cp) (True where it states none)."""
    ga = cell_number(row["grad_accum"])
    return ga is None or math.isclose(ga * gpus / (tp * pp * cp) * mb, gbs)


def bridge_stage_layers(preset: str, pp: int, vpp: int) -> list[int] | None:
    """Layers per pipeline stage of Megatron-Bridge's layout for `preset` at (pp, vpp) (`DSV3_CHUNKS` summed per
    stage), None where the recipe sets none (Megatron-Core's even split)."""
    chunks = DSV3_CHUNKS.get((pp, vpp)) if preset == "deepseek-v3" else None
    return None if chunks is None else [sum(chunks[s::pp]) for s in range(pp)]


def fp8_params_of(framework: str, precision: str, recipe: str | None) -> bool:
    """Whether a NeMo / Megatron-Bridge container run stores its GEMM weights in fp8 (Plan.fp8_params): the fp8
    precision recipes with per-tensor or MXFP8 scaling set fp8_param_gather (Megatron-Bridge training/
    mixed_precision.py bf16_with_fp8_current_scaling_mixed and bf16_with_mxfp8_mixed, @v0.1.0rc3 through @v0.4.2;
    NeMo 2 nemo/collections/llm/recipes/precision/mixed_precision.py @1dd5fa11, the 25.07 container's), the
    blockwise (subchannel) one does not, nor NVFP4."""
    return framework == "megatron" and precision == "fp8" and recipe in (None, "tensorwise", "mxfp8")


def moe_system_for(gpu_type: str) -> tuple[str | None, str]:
    """Catalogue system for the MoE rows' GPU names, or (None, reason)."""
    g = gpu_type.upper()
    if "GB300" in g:
        return "gb300-nvl72", ""
    if "GB200" in g:
        return "gb200-nvl72", ""
    if "B300" in g:  # HGX / DGX B300 (8-GPU NVLink domain); GB300 is matched above
        return "dgx-b300", ""
    if "B200" in g:
        return "dgx-b200", ""
    if "H100" in g:
        return "dgx-h100", ""
    return None, f"GPU '{gpu_type}' is not in the hardware catalogue"


def _framework(row: pd.Series) -> str:
    fw = cell_text(row["framework"]).lower()
    if "automodel" in fw:
        return "automodel"
    if "torchtitan" in fw:
        return "torchtitan"
    return "megatron"


def _precision(text: str) -> str:
    t = text.lower()
    if "nvfp4" in t or "fp4" in t:
        return "fp4"
    if "fp8" in t:  # FP8, MXFP8, blockwise FP8, and the 25.09 tables' inferred FP8
        return "fp8"
    return "bf16"


def _fp8_recipe(text: str) -> str | None:
    """The fp8 recipe a row's precision cell names: MXFP8, blockwise (sub-channel) or per-tensor; None otherwise
    (bf16, fp4, or fp8 left unstated: spec.plan.fp8_recipes' default)."""
    t = text.lower()
    if "fp8" not in t or "nvfp4" in t:
        return None
    if "mxfp8" in t:
        return "mxfp8"
    if "blockwise" in t or "128x128" in t:
        return "blockwise"
    return "tensorwise" if "per-tensor" in t or t.strip() == "fp8" else None


def _dispatcher(text: str, default: str) -> str:
    t = text.lower()
    if any(k in t for k in ("deepep", "hybridep", "flex")):
        return "flex"
    if "alltoall" in t:
        return "alltoall"
    if "allgather" in t:
        return "allgather"
    return default


def moe_to_case(row: pd.Series) -> Case:
    """One MoE row as a Case (or with the reason it cannot be expressed)."""
    base = dict(row_id=row["row_id"], group=row["source_group"], trust=row["trust"], model=None, system=None,
                plan=None, measured_s=measured_step_time(row) or float("nan"))
    name = cell_text(row["model"])
    key = name.lower().replace(" [tokendrop]", "")
    if "nemotron" in key:
        return Case(**base, reason="hybrid Mamba-Transformer MoE: no Mamba operator in the cost model")
    if "truncated" in key:
        return Case(**base, reason="layer-truncated proxy of a model (row_type truncated_model_run)")
    if key not in MODEL_PRESETS:
        return Case(**base, reason=f"model {name!r} has no preset")
    sysname, why = moe_system_for(cell_text(row["gpu_type"]))
    if sysname is None:
        return Case(**base, reason=why)
    try:
        model = load_model(MODEL_PRESETS[key])
    except InputError as err:
        return Case(**base, reason=f"model: {err}")
    stack = stack_for_framework(cell_text(row["framework"]) or "megatron-core", f"row {row['row_id']}: framework")
    d = dict(MOE_DEFAULTS[_framework(row)]) | ({"stack": stack} if _framework(row) == "megatron" else {})
    release = stack if is_release(stack) else None  # spec.stack.frameworks: the container's release
    automodel = release is not None and split_stack(release)[0] == "nemo-automodel"
    if release:  # the container's recipe sets what the row leaves unstated (dispatcher, overlap, graphs, recompute)
        # and its line the gradient dtype (Defaults.grad_dtype; AutoModel's bf16 parameters' own)
        d = {k: v for k, v in d.items() if k not in ("moe_dispatcher", "recompute", "grad_dtype")} | {"stack": release}
    stated = _dispatcher(cell_text(row["dispatcher"]), None)
    if stated or not release:
        d["moe_dispatcher"] = stated or d["moe_dispatcher"]
    if "ep overlap" in cell_text(row["dispatcher"]).lower() or not release:  # stated by a few rows (M204)
        d["moe_overlap"] = "ep overlap on" in cell_text(row["dispatcher"]).lower()
    tp, pp, cp = (int(cell_number(row[k]) or 1) for k in ("tp", "pp", "cp"))
    ep, etp, vpp = int(cell_number(row["ep"]) or 1), int(cell_number(row["etp"]) or 1), int(cell_number(row["vpp"]) or 1)
    gpus, gbs, mb, seq = (cell_number(row[k]) for k in ("n_gpus", "global_batch", "micro_batch", "seq_len"))
    if None in (gpus, gbs, mb, seq):
        return Case(**base, reason="gpus, global or micro batch, or sequence length not stated")
    if not batch_consistent(row, gpus, tp, pp, cp, mb, gbs):  # the recipe's micro-batch, where one is known
        mb = RECIPE_MICRO_BATCH.get((release, MODEL_PRESETS[key], sysname), mb)
    if math.isnan(base["measured_s"]):
        return Case(**base, reason="no step time or throughput published")
    if cell_text(row["ep"]).startswith("-"):
        if not automodel or key not in AUTOMODEL_EP:
            return Case(**base, reason="expert-parallel size not stated")
        ep = AUTOMODEL_EP[key]
    rec = cell_text(row["recompute"]).lower()
    if rec.startswith("selective") and "[]" not in rec:
        return Case(**base, reason=f"recompute modules ({row['recompute']}) are per-module policies")
    preset, precision, recipe = MODEL_PRESETS[key], _precision(cell_text(row["precision"])), \
        _fp8_recipe(cell_text(row["precision"]))
    if release and split_stack(release)[0] == "megatron-bridge":  # what its recipe sets that the table leaves out
        d |= BRIDGE_STATE.get(preset, {})
        if (split := bridge_stage_layers(preset, pp, vpp)) is not None:
            d["stage_layers"] = split
    try:
        plan = Plan(gpus=int(gpus), tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, micro_batch=int(mb),
                    global_batch=int(gbs), seq_len=int(seq), sequence_parallel=tp > 1, precision=precision,
                    fp8_recipe=recipe, fp8_params=fp8_params_of(_framework(row), precision, recipe), **d)
        system = load_hardware(sysname)
        plan = resolve(plan, model, system)
    except InputError as err:
        return Case(**base, reason=f"plan: {err}")
    return Case(**{**base, "model": model, "system": system, "plan": plan})


def load_moe_cases(csv: str | Path) -> list[Case]:
    """Every training_run row of the MoE CSV as a Case."""
    df = pd.read_csv(csv)
    return [moe_to_case(r) for _, r in df[df["row_type"] == "training_run"].iterrows()]
