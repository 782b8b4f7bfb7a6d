"""A runs table as (model, system, plan, measured step time): a user's measured runs for `calibrate --from-runs`,
and the published-runs development set, in the same columns (docs/stacks.md lists them).

The CSV describes runs in each source's words ("full (--checkpoint-activations ...)", "FSDP FULL_SHARD",
"A100-SXM4-80GB (Selene DGX A100)"). `to_case` maps one row onto this tool's schemas, using only what the
row and its source state; where a source leaves a setting unstated, `GROUP_DEFAULTS` fills it with that
framework's documented default of the time, the same for every row of the group (never per row, never tuned).
A row that cannot be expressed comes back with the reason.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ...errors import InputError
from ...spec.hardware.system import System, load_hardware
from ...spec.model.config import ModelConfig
from ...spec.plan.layout import Plan
from ...spec.stack.frameworks import stack_for_framework

# Framework defaults for settings a source group does not state. Each entry says why.
GROUP_DEFAULTS: dict[str, dict] = {
    # Megatron-LM 2020/2021: pre-FlashAttention fused softmax; 'local' DDP all-reduces after the backward;
    # fp16 gradients reduced in fp16; activation checkpointing on in the example scripts.
    "Narayanan2021_Megatron_Table1": dict(attention="unfused", recompute="full"),
    "Narayanan2021_Megatron_Table2": dict(attention="unfused", recompute="full"),
    "MegatronLM_README_2020": dict(attention="unfused", recompute="full", overlap_dp_comm=False),
    "MTNLG_530B": dict(attention="unfused", recompute="full", zero=1),
    "BLOOM_176B_prequel_sweeps": dict(attention="unfused", recompute="full", zero=1),
    # NeMo / Megatron-Core: fused attention (TE/cuDNN), distributed optimizer, sequence parallel with TP;
    # gradients synchronised in the parameter dtype (apex DistributedFusedAdam grad_sync_dtype default,
    # Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32 = False).
    "NeMo_launcher_24.05": dict(attention="flash", recompute="none", zero=1, sp_with_tp=True, grad_dtype="bf16"),
    # 2023 launcher defaults recompute the core attention selectively, which is what the unfused kernel needs;
    # Transformer Engine's userbuffers TP overlap (model.ub_tp_comm_overlap) came with the launcher's Hopper
    # configurations: its A100 ones leave it off.
    "NeMoMegatron_launcher_A100_2023": dict(attention="unfused", zero=1, sp_with_tp=True, grad_dtype="bf16",
                                            tp_comm_overlap=False),
    "MosaicML_llm-foundry_MPT_bench": dict(attention="flash"),
    "torchtitan_perf_doc_2024": dict(attention="flash", sp_with_tp=True),
}


@dataclass
class Case:
    row_id: str
    group: str
    trust: str
    model: ModelConfig | None
    system: System | None
    plan: Plan | None
    measured_s: float
    reason: str = ""  # why the row cannot be expressed (empty when it can)


def cell_number(x) -> float | None:
    """First number in a cell ('32000 (inferred)' -> 32000), None for empty."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    m = re.search(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?", str(x))
    return float(m.group()) if m else None


def cell_text(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


def system_for(gpu_type: str) -> tuple[str | None, str]:
    """Catalogue system for a source's GPU description, or (None, reason)."""
    g = gpu_type.upper()
    if "V100" in g:
        return None, "V100 (DGX-2) is not in the hardware catalogue"
    if "H100" in g and ("HBM2E" in g or "95GB" in g):
        return None, "H100 95GB HBM2e lower-TDP variant is not in the hardware catalogue"
    if "H200" in g:
        return "dgx-h200", ""
    if "H100" in g:
        return "dgx-h100", ""
    if "A100" in g:
        if "40GB" in g:
            return "dgx-a100-40gb", ""
        if "80GB" in g or "SELENE" in g:
            return "dgx-a100-80gb", ""
        # DGX A100 shipped with 40 GB parts until the 640 GB system of November 2020.
        return "dgx-a100-40gb", ""
    return None, f"GPU '{gpu_type}' is not in the hardware catalogue"


def preset_for(row: pd.Series) -> ModelConfig | None:
    """The catalogue model the row's `model` names (a preset or alias, `perfmodel models list`), or None."""
    from ...spec.model.catalogue import load_model

    from ...files import looks_like_path

    name = cell_text(row["model"])
    if not name or looks_like_path(name):
        return None
    try:
        return load_model(name)
    except InputError:
        return None


def model_for(row: pd.Series) -> tuple[ModelConfig | None, str]:
    name = cell_text(row["model"])
    low = name.lower()
    layers, hidden, ffn = cell_number(row["n_layers"]), cell_number(row["hidden"]), cell_number(row["ffn_hidden"])
    heads, kv, vocab, seq = cell_number(row["heads"]), cell_number(row["kv_heads"]), cell_number(row["vocab"]), cell_number(row["seq_len"])
    if None in (layers, hidden, heads, vocab) and seq is not None and (preset := preset_for(row)) is not None:
        # a run that names a catalogue model and leaves part of its shape out: the preset, the stated columns over it
        stated = dict(n_layers=layers, hidden=hidden, n_heads=heads, n_kv_heads=kv, ffn_hidden=ffn, vocab=vocab)
        differ = [f"{k} = {v:g} (the catalogue's: {getattr(preset, k)})" for k, v in stated.items()
                  if v is not None and v != getattr(preset, k)]
        if differ:  # another shape under a catalogue name: its derived fields (head_dim, MoE, MLA) would not fit
            return None, (f"model {name!r} is the catalogue's {preset.name} but the row states {', '.join(differ)}; "
                          "valid: leave the shape columns empty (the catalogue's shape) or state all of n_layers, "
                          "hidden, heads and vocab")
        data = preset.model_dump() | dict(name=name, max_seq_len=max(preset.max_seq_len, int(seq)),
                                          source=f"{row['row_id']}: catalogue model {preset.name}")
        return ModelConfig(**data), ""
    if None in (layers, hidden, seq):
        return None, "model shape (layers/hidden/seq_len) not stated"
    if heads is None:
        # BLOOM candidates: the head count closest to head dim 128 (the final BLOOM: 14336 = 112 x 128) that
        # divides hidden and the row's tp (the run used that tp, so its head count was divisible by it).
        tp = int(cell_number(row["tp"]) or 1)
        fits = [a for a in range(tp, int(hidden) + 1, tp) if hidden % a == 0]
        heads = min(fits, key=lambda a: abs(hidden / a - 128))
    if vocab is None:
        if cell_text(row["source_group"]).startswith("NeMo") and low.startswith("gpt3"):
            vocab = 50257  # NeMo GPT-3 configs use the GPT-2 BPE tokenizer
        else:
            return None, "vocab not stated (give a vocab column, or name a catalogue model: perfmodel models list)"
    if "llama" in low:
        style = dict(mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=False, linear_bias="none")
    elif "mpt" in low:  # MPT: ALiBi, no biases, tied embeddings, no dropout (llm-foundry mpt yamls)
        style = dict(mlp="gelu", norm="layernorm", position="alibi", tie_embeddings=True, linear_bias="none")
    elif "bloom" in low:
        style = dict(mlp="gelu", norm="layernorm", position="alibi", tie_embeddings=True, linear_bias="all")
    elif "nemotron" in low:
        style = dict(mlp="gelu", norm="layernorm", position="rope", tie_embeddings=False, linear_bias="none")
    else:  # GPT-2/3 style as trained by Megatron-LM
        style = dict(mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True, linear_bias="all",
                     dropout=0.1)
    try:
        model = ModelConfig(name=name, n_layers=int(layers), hidden=int(hidden), n_heads=int(heads),
                            n_kv_heads=int(kv) if kv else None, ffn_hidden=int(ffn or 4 * hidden),
                            vocab=int(vocab), max_seq_len=int(seq), source=f"{row['row_id']} {row['source']}",
                            **style)
    except InputError as err:
        return None, f"model: {err}"
    return model, ""


def zero_of(text: str, default: int = 0) -> int:
    """The ZeRO stage a table's sharding text names ('PyTorch FSDP SHARD_GRAD_OP' -> 2, 'FSDP2 8-way' -> 3,
    'distributed optimizer' -> 1), `default` where it names none."""
    z = text.lower()
    if z.strip() in ("0", "1", "2", "3", "0.0", "1.0", "2.0", "3.0"):  # the stage itself (a user's runs table)
        return int(float(z))
    if "shard_grad_op" in z or "zero-2" in z:
        return 2
    if any(k in z for k in ("zero-3", "full_shard", "full shard", "fsdp", "zero_stage: 3")):
        return 3
    if any(k in z for k in ("zero-1", "zero_stage: 1", "distributed")):
        return 1
    return default


def precision_of(text: str) -> str:
    """The GEMM precision a table's precision text names: fp4 (also 'nvfp4', 'mxfp4', 'float4'), int8 (text that
    starts with it or names AQT; not 'int8_training=false'), fp8 (also 'float8'), fp16, else bf16."""
    t = text.lower()
    if "aqt" in t or t.startswith("int8"):
        return "int8"
    if "fp4" in t or "float4" in t:
        return "fp4"
    return "fp8" if ("fp8" in t or "float8" in t) else ("fp16" if "fp16" in t else "bf16")


def torchtitan_selective(text: str, n_layers: int) -> dict | None:
    """The Plan's recompute fields for torchtitan's selective activation checkpointing as its runs name it, or None:
    'selective op' (selective_ac_option = "op": per-op SAC, which keeps attention's and every second matmul's
    outputs) is per-op; 'selective layer' (selective_ac_option = "2": every second block checkpointed whole,
    torchtitan/models/llama3/infra/parallelize.py _apply_ac_to_transformer_block) is full recompute of half the
    layers (Megatron-LM's block method)."""
    t = text.lower()
    if "selective op" in t:
        return dict(recompute="per-op")
    if "selective layer" in t:
        return dict(recompute="full", recompute_method="block", recompute_num_layers=n_layers // 2)
    return None


def plan_for(row: pd.Series, model: ModelConfig) -> tuple[Plan | None, str]:
    group = row["source_group"]
    d = GROUP_DEFAULTS.get(group, {})
    tp, pp = int(cell_number(row["tp"]) or 1), int(cell_number(row["pp"]) or 1)
    dp, cp = cell_number(row["dp"]), int(cell_number(row["cp"]) or 1)
    vpp = int(cell_number(row["vpp"]) or 1)
    gbs = cell_number(row["global_batch"])
    seq = int(cell_number(row["seq_len"]))
    if gbs is None or dp is None:
        return None, "global batch or data-parallel size not stated"
    mb = cell_number(row["micro_batch"])
    if mb is None:  # not stated: Megatron-LM's micro-batch of 1 with pipelining, else no accumulation
        mb = 1 if pp > 1 else gbs / dp
    rec_text = cell_text(row["recompute"]).lower()
    torchtitan_ac = torchtitan_selective(rec_text, model.n_layers)
    if rec_text in ("none", "selective", "full", "per-op", "names"):  # Plan's own values (a user's runs table)
        recompute = rec_text
    elif torchtitan_ac:
        recompute = torchtitan_ac["recompute"]
    elif rec_text.startswith("none"):
        recompute = "none"
    elif "not stated" in rec_text or not rec_text:
        recompute = d.get("recompute", "none")
    elif "selective" in rec_text:
        recompute = "selective"
    elif "full" in rec_text:
        recompute = "full"
    else:
        recompute = d.get("recompute", "none")
    z = cell_text(row["zero_dist_opt"]).lower()
    zero = zero_of(z, d.get("zero", 0))
    precision = precision_of(cell_text(row["precision"]))
    # Gradient reduction: fp16 Megatron reduces fp16 grads; MPT 'PURE' mixed precision reduces in bf16;
    # Megatron bf16 and torch FSDP defaults reduce in fp32.
    grad = d.get("grad_dtype", "bf16" if (precision == "fp16" or "pure" in z) else "fp32")
    sp_text = cell_text(row["sp"]).lower()
    sp = sp_text.startswith("yes") or (not sp_text and d.get("sp_with_tp", False) and tp > 1)
    fw = cell_text(row["zero_dist_opt"]).lower()
    overlap = d.get("overlap_dp_comm", "ddp-impl local" not in fw)
    try:
        stack = stack_for_framework(cell_text(row["framework"]) or "megatron-core", f"row {row['row_id']}: framework")
    except InputError as err:
        return None, str(err)
    try:
        split = _megatron_split(row)
        kw = dict(tp=tp, pp=pp, dp=int(dp), cp=cp, vpp=vpp, micro_batch=int(mb), global_batch=int(gbs), seq_len=seq,
                  recompute=recompute, sequence_parallel=sp, zero=zero, precision=precision,
                  attention=d.get("attention", "flash"), grad_dtype=grad, overlap_dp_comm=overlap, stack=stack,
                  tp_comm_overlap=d.get("tp_comm_overlap"))
        plan = Plan(**kw | (torchtitan_ac or {}) | split | plan_columns(row))
    except InputError as err:
        return None, f"plan: {err}"
    return plan, ""


# Plan fields a runs table may state in a column of the field's name (beyond the dev set's columns, which map to
# the others): every setting `perfmodel predict` takes, so that no run a user measured is unrepresentable.
PLAN_COLUMNS = ("ep", "etp", "expert_imbalance", "moe_capacity_factor", "moe_pad_to_capacity", "moe_dispatcher",
                "moe_overlap", "recompute_modules",
                "recompute_saved", "recompute_num_layers", "recompute_method", "schedule", "attention", "grad_dtype",
                "grad_compression", "powersgd_rank", "overlap_dp_comm", "stack", "stage_layers", "compile",
                "loss_chunks")
LIST_COLUMNS = {"recompute_modules": str, "recompute_saved": str, "stage_layers": int}  # written "a,b" or "a b"


def plan_columns(row: pd.Series) -> dict:
    """The PLAN_COLUMNS the row states (non-empty), as Plan takes them: whole numbers as int, true/false/yes/no/1/0
    as bool for the boolean fields, lists split on commas or spaces; InputError naming the column and value."""
    out = {}
    for key in PLAN_COLUMNS:
        text = cell_text(row[key]) if key in row else ""
        if not text:
            continue
        kind = Plan.model_fields[key].annotation
        if key in LIST_COLUMNS:
            parts = [p for p in re.split(r"[,\s;]+", text) if p]
            if LIST_COLUMNS[key] is int:
                nums = [cell_number(p) for p in parts]
                if any(v is None or not math.isfinite(v) or v != int(v) for v in nums):
                    raise InputError(f"{key} = {text!r}; valid: whole numbers separated by commas")
                out[key] = [int(v) for v in nums]
            else:
                out[key] = parts
        elif kind is bool:
            if text.lower() not in ("true", "false", "yes", "no", "1", "0", "1.0", "0.0"):
                raise InputError(f"{key} = {text!r}; valid: true or false")
            out[key] = text.lower() in ("true", "yes", "1", "1.0")
        elif kind is int or key in ("recompute_num_layers",):
            v = cell_number(row[key])
            if v is None or not math.isfinite(v) or v != int(v):
                raise InputError(f"{key} = {text!r}; valid: a whole number")
            out[key] = int(v)
        elif kind is float or key == "moe_capacity_factor":
            v = cell_number(row[key])
            if v is None or not math.isfinite(v):
                raise InputError(f"{key} = {text!r}; valid: a number")
            out[key] = v
        else:
            out[key] = text
    return out


def _megatron_split(row: pd.Series) -> dict:
    """Megatron-LM's uneven pipeline split where a runs table states it (columns beyond the dev set's, written by
    calibrate.runs.logs from a Megatron-LM log): account_for_embedding / _loss, first / last_stage_layers."""
    out = {}
    for key in ("account_for_embedding", "account_for_loss"):
        if key in row and cell_text(row[key]).lower() in ("true", "1", "yes"):
            out[key] = True
    for key in ("first_stage_layers", "last_stage_layers"):
        if key in row and cell_number(row[key]) is not None:
            out[key] = int(cell_number(row[key]))
    return out


def measured_step_time(row: pd.Series) -> float | None:
    """iter_time_s, or global batch x seq_len / total tokens/s where only throughput is published."""
    t = cell_number(row["iter_time_s"])
    if t:
        return t
    gbs, seq = cell_number(row["global_batch"]), cell_number(row["seq_len"])
    tot = cell_number(row["tokens_per_s_total"])
    if tot is None and cell_number(row["tokens_per_s_per_gpu"]) is not None and cell_number(row["n_gpus"]) is not None:
        tot = cell_number(row["tokens_per_s_per_gpu"]) * cell_number(row["n_gpus"])
    if gbs and seq and tot:
        return gbs * seq / tot
    return None


def to_case(row: pd.Series, system: System | None = None) -> Case:
    """One row as a Case, on the catalogue system its gpu_type names, or on `system` (a user's calibration: then
    a gpu_type naming another accelerator is a reason to refuse the row)."""
    base = dict(row_id=row["row_id"], group=row["source_group"], trust=row["trust"], model=None, system=None,
                plan=None, measured_s=measured_step_time(row) or float("nan"))
    sysname, why = system_for(cell_text(row["gpu_type"]))
    if system is not None:
        named = load_hardware(sysname).accelerator.name if sysname else None
        if cell_text(row["gpu_type"]) and named and named != system.accelerator.name:
            return Case(**base, reason=f"gpu_type {row['gpu_type']!r} is a {named}, not the {system.accelerator.name} "
                                       f"of {system.name}")
    elif sysname is None:
        return Case(**base, reason=why)
    model, why = model_for(row)
    if model is None:
        return Case(**base, reason=why)
    plan, why = plan_for(row, model)
    if plan is None:
        return Case(**base, reason=why)
    if math.isnan(base["measured_s"]):
        return Case(**base, reason="no step time or throughput published")
    return Case(**{**base, "model": model, "system": system or load_hardware(sysname), "plan": plan})


def load_cases(csv: str | Path) -> list[Case]:
    """Every training_run row of the CSV as a Case."""
    df = pd.read_csv(csv)
    return [to_case(r) for _, r in df[df["row_type"] == "training_run"].iterrows()]
