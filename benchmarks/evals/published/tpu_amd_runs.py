"""TPU and AMD training runs (the development CSV tpu_amd_runs_dev.csv, its columns in the shared data README) as
`calibrate.runs.table.Case`s: (model, system, plan, measured step time), or the reason a row cannot be expressed.

Sources, as each row's `source` names them: MaxText's 2023 README tables for TPU v4, v5e and v5p
(AI-Hypercomputer/maxtext src/maxtext/configs/tpu/v*/README.md, run scripts MaxText/configs/*), MaxText's docs
(docs/reference/models/tiering.md, docs/guides/optimization/custom_model.md, tpu-recipes), MLPerf Training v4.0 and
v4.1 Google GPT-3 submissions (block-level MLLOG times) and MLPerf Training v5.0 and v5.1 AMD submissions (Llama 2
70B LoRA, Llama 3.1 8B). Every decision below is the same for every row of its kind; nothing is fitted.

- Model: the catalogue preset the row's model names (the name before " (", e.g. "Llama-2-70B") where its shape
  columns agree with the preset's; else a ModelConfig from the shape columns, Llama-style (RMSNorm, RoPE, SwiGLU,
  untied, no biases; GPT-3 style for GPT-3), with what `notes` states over it: "head_dim N", a non-gated ReLU MLP
  (priced as the plain two-matrix MLP: the same GEMMs), tied embeddings (the 2023 MaxText tables' synthetic models).
- System: ACCELERATORS; a system not (yet) in the catalogue is a reason ("no catalogue system <name>").
- Plan: gpus = n_chips, tp, pp, cp, ep from the columns; the data-parallel ranks gpus / (tp pp cp). MaxText's fsdp
  (ici_fsdp x dcn_fsdp) > 1 is ZeRO-3, with the row's data degree (dcn_data) as replicas of the fsdp groups
  (Plan.dp_replicate, hybrid sharding); a MaxText row leaving fsdp empty
  takes the fsdp degree its notes state of the config ("ici_fsdp=A x dcn_fsdp=B"), else base.yml's
  ici_fsdp_parallelism -1 (every chip left after tp, pp, cp, ep). A MaxText config's mesh fixes the chips it runs on
  (max_utils.fill_unspecified_mesh_axes asserts the ICI degrees' product is the chips per slice and the DCN
  degrees' the slices): where tp x pp x cp x ep x fsdp x data differs from n_chips, the config's count is priced
  and the row noted (`chips_of`). MaxText's micro_batch is its
  per_device_batch_size, per chip whatever the sharding: the global batch is pdbs x n_chips (derived where the row
  leaves it empty) and each data-parallel rank runs global / ranks sequences in one micro-batch (MaxText's
  gradient_accumulation_steps default 1). With tp > 1 MaxText shards the activations' embed axis over `tensor`
  (logical axis activation_embed), priced as sequence parallelism. MaxText keeps fp32 weights and gradients
  (base.yml weight_dtype float32) unless notes say weight_dtype bf16: then weights, gradients and both Adam moments
  are bf16 (Plan.weight_dtype, moment_dtype; mu_dtype inherits weight_dtype and nu always does, base.yml at
  5e6a7caff904 lines 132, 614-616). NeMo/Megatron rows: micro and global batch as
  stated, the distributed optimizer (ZeRO-1) where notes say so, gradients in the stack's dtype.
- Recompute: MaxText's named remat policies as recompute = names with the tensors each saves (MAXTEXT_REMAT; two
  older names as their successors, OLD_REMAT), its 'full' (and its default) as names saving nothing
  (jax.checkpoint: XLA re-runs only what the backward needs, not Megatron's whole layer; a MoE MLP whole); 'custom'
  as names with its 'device' and 'offload' tensors (custom_remat; host offload priced by cost.memory.offload); Megatron's
  "full, block, N layers" as full / block / N.
- MoE: MaxText rows whose notes say sparse_matmul=False or name a recipe that sets it (DENSE_MOE_RECIPES) run the
  dense dispatch (Plan.moe_dense_dispatch) with the capacity factor stated; the others MaxText's default sparse path.
- Precision: bf16; FP8 (TE hybrid) -> fp8; int8 (AQT) -> int8. LoRA fine-tunes map to
  Plan.lora (rank from the notes, the base in fp8 where they say fp8_params).
- Stack: the framework cell through spec.stack.frameworks.stack_for_framework, the mapping the docs and every runs
  table use: MaxText rows -> maxtext (hardware_specs/stacks/maxtext.yaml: XLA's overlapped collectives, tensor-parallel
  ones included, fp32 master weights and gradients, no per-operator host cost); the AMD rows' NeMo 2 ports (NeMo
  2.5.0rc0, MLPerf v5.x, and MangoBoost LLMBoost, NeMo/Megatron-based) -> the nemo2 release line (nemo2@25.07 where
  the cell names NeMo 2.4 or later, else the bare line: its newest), which runs the megatron-core profile.
- Measured step time: step_time_s; else global tokens / (tokens_per_s_per_chip x n_chips); else, only where notes
  state MaxText's FLOP convention (6 x params x tokens, plus 6 H L hd S^2 per sequence where they say causal
  attention), that count per chip over tflops_per_chip. MFU alone, and MLPerf blocks that include an eval pass, give
  no step time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perfmodel.calibrate.runs.table import Case, cell_number, cell_text, precision_of
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.model.presets import ALIASES, PRESETS
from perfmodel.spec.plan.layout import Plan, resolve
from perfmodel.spec.plan.recompute import MAXTEXT_CHECKPOINT_NAMES, MAXTEXT_OFFLOADED, MAXTEXT_REMAT
from perfmodel.spec.stack.frameworks import stack_for_framework
from perfmodel.spec.stack.profile import DEFAULT_STACK

# The CSV's accelerator -> catalogue system (hardware_specs/systems)
ACCELERATORS = {"TPU v4": "tpu-v4", "TPU v5e": "tpu-v5e", "TPU v5p": "tpu-v5p", "TPU v6e Trillium": "tpu-v6e",
                "AMD MI300X": "mi300x-8", "AMD MI325X": "mi325x-8", "AMD MI350X": "mi350x-8", "AMD MI355X": "mi355x-8"}

LLAMA = dict(mlp="swiglu", norm="rmsnorm", position="rope", tie_embeddings=False, linear_bias="none")
GPT3 = dict(mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True, linear_bias="all")

# MaxText remat_policy (src/maxtext/layers/nnx_decoders.py get_remat_policy) -> recompute = names, the tensors
# each named policy saves (spec.plan.recompute.MAXTEXT_REMAT); two names of older MaxText releases as the policies that
# replaced them (ffn1 = mlpwi; the logits are the LM head's output, outside the decoder layers); 'custom' as names
# with its 'device' and 'offload' checkpoint names (base.yml; the rows shorten query_proj to query).
OLD_REMAT = {"save_dot_except_logits_ffn1": "save_dot_except_mlpwi", "save_dot_except_logits": "minimal"}
CUSTOM_NAMES = {"mlpwo": None, "query": "qkv", "key": "qkv", "value": "qkv",  # the rows' short names
                **{n: t for t, names in MAXTEXT_CHECKPOINT_NAMES.items() for n in names}}


@dataclass
class TpuAmdCase(Case):
    accelerator: str = ""  # the row's accelerator as the CSV names it
    note: str = ""  # approximations made in mapping the row (remat policy, FSDP over slices, derived batch)


def is_maxtext(row: pd.Series) -> bool:
    return "maxtext" in cell_text(row["framework"]).lower()


# MaxText recipes that run the dense MoE path (sparse_matmul False) with a capacity factor, as the recipe sets them
# (AI-Hypercomputer/maxtext benchmarks/maxtext_trillium_model_configs.py at e591f30cbbf217ed67ef71263ec0538239f9c3b8:
# mixtral_8x7b_dropped: "megablox": False, "sparse_matmul": False, "capacity_factor": 1.25)
DENSE_MOE_RECIPES = {"mixtral_8x7b_dropped": 1.25}


def dense_moe_of(row: pd.Series, model: ModelConfig) -> dict:
    """Plan.moe_dense_dispatch and moe_capacity_factor of a MaxText MoE row whose notes state sparse_matmul=False
    or name a recipe of DENSE_MOE_RECIPES (cost.compute.moe_dense): the factor the notes state (capacity_factor=X), else
    the recipe's, else none (base.yml's -1: every expert runs every token); {} for any other row."""
    notes = cell_text(row["notes"]).lower()
    recipe = next((r for r in DENSE_MOE_RECIPES if r in notes), None)
    if model.moe is None or not is_maxtext(row) or not (recipe or "sparse_matmul=false" in notes):
        return {}
    stated = re.search(r"capacity_factor[= ]([0-9.]+)", notes)
    cf = float(stated.group(1)) if stated else DENSE_MOE_RECIPES.get(recipe)
    return dict(moe_dense_dispatch=True, moe_capacity_factor=cf)


def lora_of(row: pd.Series) -> dict | None:
    """Plan.lora of a LoRA fine-tune: the rank its notes state (MLPerf's Llama 2 70B LoRA: 16), the frozen base in
    fp8 where they say fp8_params; None for a run that trains every weight."""
    text = " ".join(cell_text(row[k]) for k in ("model", "notes", "precision"))
    rank = re.search(r"LoRA rank (\d+)", text)
    if "lora" not in text.lower():
        return None
    return dict(rank=int(rank.group(1)) if rank else 16, base_weights="fp8" if "fp8_params" in text else "bf16")


def preset_of(row: pd.Series) -> ModelConfig | None:
    """The catalogue preset the row's model names exactly (before any ' (...)'), where the shape columns agree."""
    key = cell_text(row["model"]).split(" (")[0].strip().lower()
    key = ALIASES.get(key, key)
    if key not in PRESETS:
        return None
    m = ModelConfig.parse(PRESETS[key], where=f"preset {key}")
    stated = dict(n_layers="n_layers", hidden="hidden", ffn_hidden="ffn_hidden", n_heads="heads",
                  n_kv_heads="kv_heads", vocab="vocab")
    for field, col in stated.items():
        v = cell_number(row[col])
        if v is not None and v != getattr(m, field):
            return None
    experts, top_k = cell_number(row["n_experts"]), cell_number(row["top_k"])
    if (experts is not None) != (m.moe is not None) or (m.moe and (experts, top_k) != (m.moe.n_experts, m.moe.top_k)):
        return None
    return m


def model_for(row: pd.Series) -> tuple[ModelConfig | None, str]:
    """The row's model (a preset, or built from its shape columns and notes), or (None, reason)."""
    seq = cell_number(row["seq_len"])
    if seq is None:
        return None, "sequence length not stated"
    preset = preset_of(row)
    if preset is not None:
        return preset.model_copy(update=dict(max_seq_len=max(preset.max_seq_len, int(seq)))), ""
    name, notes = cell_text(row["model"]), cell_text(row["notes"]).lower()
    cols = [cell_number(row[k]) for k in ("n_layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab")]
    if None in cols:
        return None, "model shape (layers, hidden, ffn, heads, kv heads, vocab) not fully stated"
    layers, hidden, ffn, heads, kv, vocab = (int(v) for v in cols)
    style = dict(GPT3 if "gpt" in name.lower() else LLAMA)
    if "non-gated" in notes or "relu" in notes:  # ReLU's two matrices: the plain MLP's GEMMs
        style["mlp"] = "gelu"
    if "tied" in notes:
        style["tie_embeddings"] = True
    hd = re.search(r"head_dim[\s(=]*(\d+)", notes)
    moe = None
    if cell_number(row["n_experts"]) is not None:
        moe = dict(n_experts=int(cell_number(row["n_experts"])), top_k=int(cell_number(row["top_k"]) or 1),
                   expert_ffn_hidden=ffn)
    try:
        return ModelConfig(name=name, n_layers=layers, hidden=hidden, n_heads=heads, n_kv_heads=kv,
                           head_dim=int(hd.group(1)) if hd else None, ffn_hidden=ffn, vocab=vocab,
                           max_seq_len=int(seq), moe=moe, source=f"{row['row_id']} {row['source']}", **style), ""
    except InputError as err:
        return None, f"model: {err}"


# the fsdp degree a MaxText row's notes state of its config: ICI (per slice) x DCN (over slices)
CONFIG_FSDP = re.compile(r"ici_fsdp=(\d+) x dcn_fsdp=(\d+)")
STATES_BF16_WEIGHTS = re.compile(r"weight_dtype[ =:]*(?:bf16|bfloat16)")


def config_fsdp(row: pd.Series) -> int | None:
    """A MaxText row's fsdp degree: its column, else the config's its notes state (ici_fsdp x dcn_fsdp), else None."""
    fsdp = cell_number(row["fsdp"])
    stated = CONFIG_FSDP.search(cell_text(row["notes"]).lower())
    if fsdp is None and stated and is_maxtext(row):
        return int(stated.group(1)) * int(stated.group(2))
    return None if fsdp is None else int(fsdp)


def chips_of(row: pd.Series) -> tuple[float | None, str]:
    """(chips the row's run used, note): n_chips, but for a MaxText row whose mesh is known (fsdp: `config_fsdp`)
    and whose degrees tp x pp x cp x ep x fsdp x data multiply to another count, that count: MaxText runs a config
    only on the devices its mesh covers (max_utils.fill_unspecified_mesh_axes asserts the ICI degrees' product
    equals the devices per slice and the DCN degrees' the slices, maxtext@5e6a7caff904 lines 334-354)."""
    chips, fsdp = cell_number(row["n_chips"]), config_fsdp(row) if is_maxtext(row) else None
    if fsdp is None:
        return chips, ""
    mesh = fsdp * math.prod(int(cell_number(row[k]) or 1) for k in ("tp", "pp", "cp", "ep", "dp"))
    if chips is None or mesh == chips:
        return chips, ""
    return float(mesh), (f"n_chips {chips:g} -> {mesh}: the config's mesh (tp x fsdp x data degrees) covers {mesh} "
                         "chips, the only count MaxText runs it on (the row's caveat)")


def batch_of(row: pd.Series) -> tuple[int | None, int | None, str]:
    """(sequences per micro-batch per data-parallel rank, global batch, note) or (None, None, reason)."""
    chips, (mb, gbs) = chips_of(row)[0], (cell_number(row[k]) for k in ("micro_batch", "global_batch"))
    if chips is None:
        return None, None, "n_chips not stated"
    tp, pp, cp = (int(cell_number(row[k]) or 1) for k in ("tp", "pp", "cp"))
    ranks = int(chips) // (tp * pp * cp)
    note = ""
    if is_maxtext(row):  # per_device_batch_size: per chip, global = pdbs x chips, no gradient accumulation
        if gbs is None and mb is not None:
            gbs, note = mb * chips, "global batch = per-device batch x n_chips"
        if gbs is None or ranks == 0 or gbs % ranks:
            return None, None, "global batch not stated, or not a multiple of the data-parallel ranks"
        return int(gbs // ranks), int(gbs), note
    if mb is None or gbs is None:
        return None, None, "micro or global batch not stated"
    return int(mb), int(gbs), note


def remat_of(row: pd.Series, n_layers: int) -> tuple[dict | None, str]:
    """(Plan recompute fields, note) for the row's recompute text, or (None, reason)."""
    t = cell_text(row["recompute"]).strip().lower()
    if t.startswith("none"):
        return dict(recompute="none"), ""
    jax_full = is_maxtext(row)  # JAX's full: names, nothing saved
    if not t or t.startswith("not set"):  # MaxText base.yml remat_policy: 'full'
        return dict(recompute="names" if jax_full else "full"), "remat not stated: MaxText's default 'full'"
    if jax_full and t.startswith("full"):
        return dict(recompute="names"), "remat full as recompute names [] (jax.checkpoint saving nothing)"
    if t.startswith("full"):
        m = re.search(r"(\d+)\s*(?:of \d+ )?layers", t)
        if "block" in t and m:
            n = int(m.group(1))
            return dict(recompute="full", recompute_method="block", recompute_num_layers=min(n, n_layers)), ""
        return dict(recompute="full"), ""
    key = t.split(",")[0].strip()
    if key == "custom":
        return custom_remat(t)
    if OLD_REMAT.get(key, key) in MAXTEXT_REMAT:
        saved, off = MAXTEXT_REMAT[OLD_REMAT.get(key, key)], MAXTEXT_OFFLOADED.get(key)
        return (dict(recompute="names", recompute_saved=saved, recompute_offloaded=off),
                f"remat {key} as recompute names {saved}" + (f", offloaded {off}" if off else ""))
    return None, f"recompute policy {row['recompute']!r} is not mapped to a perfmodel policy"


def custom_remat(text: str) -> tuple[dict | None, str]:
    """A MaxText 'custom' remat written "custom, a/b/c=offload, d=device" as recompute names: the tensors its
    'device' and 'offload' names keep (CUSTOM_NAMES; the rest 'remat', base.yml's default), those offloaded."""
    saved, off = [], []
    for names, where in re.findall(r"([\w/]+)=(offload|device|remat)", text):
        for n in names.split("/"):
            if n not in CUSTOM_NAMES:
                return None, f"custom remat name {n!r} is not mapped to a names-policy tensor"
            t = CUSTOM_NAMES[n]
            saved += [t] * (where != "remat" and t not in (None, "layer_input"))
            off += [t] * (where == "offload" and t is not None)
    saved, off = list(dict.fromkeys(saved)), list(dict.fromkeys(off))
    return (dict(recompute="names", recompute_saved=saved, recompute_offloaded=off),
            f"remat custom as recompute names {saved}, offloaded to the host {off}")


def stack_of(row: pd.Series) -> str:
    """The row's stack: its framework cell through spec.stack.frameworks (MaxText, NeMo by version, LLMBoost)."""
    return stack_for_framework(cell_text(row["framework"]) or DEFAULT_STACK, f"row {row['row_id']}: framework")


def maxtext_flops_per_chip(row: pd.Series, model: ModelConfig, global_batch: int) -> float | None:
    """FLOPs per chip per step as MaxText's TFLOP/s counted them, where notes state the convention: 6 x params x
    tokens, plus causal attention 6 H L hd S^2 per sequence where they say so; None where they state none."""
    notes = cell_text(row["notes"]).lower().replace(" ", "")
    if not re.search(r"6\*(n|num_params)\*tokens", notes):
        return None
    seq, chips = int(cell_number(row["seq_len"])), chips_of(row)[0]
    per_seq = 6 * model.n_params() * seq
    if "causalattention6*h*l*hd*s^2" in notes:
        per_seq += 6 * model.n_heads * model.n_layers * model.head_dim * seq * seq
    return per_seq * global_batch / chips


def measured_of(row: pd.Series, model: ModelConfig, global_batch: int | None) -> tuple[float | None, str]:
    """(seconds per optimizer step, '') or (None, reason)."""
    t = cell_number(row["step_time_s"])
    if t:
        return t, ""
    chips, seq = chips_of(row)[0], cell_number(row["seq_len"])
    tps, tflops = cell_number(row["tokens_per_s_per_chip"]), cell_number(row["tflops_per_chip"])
    per_chip = global_batch * seq / chips if global_batch and chips and seq else None
    if per_chip is None and is_maxtext(row) and seq and cell_number(row["micro_batch"]):
        per_chip = cell_number(row["micro_batch"]) * seq  # MaxText's per_device_batch_size: tokens per chip
    if per_chip and tps:
        return per_chip / tps, ""
    if global_batch and chips and tflops:
        flops = maxtext_flops_per_chip(row, model, global_batch)
        if flops is None:
            return None, "TFLOP/s published but notes state no FLOP convention"
        return flops / (tflops * 1e12), ""
    if "block" in cell_text(row["derived_fields"]).lower():
        return None, "only MLPerf block times (training steps plus an eval pass) published"
    return None, "no step time, tokens/s or TFLOP/s published"


def to_tpu_amd_case(row: pd.Series) -> TpuAmdCase:
    """One row as a case: a priced-ready (model, system, plan, measured_s), or the reason it is not expressed."""
    acc = cell_text(row["accelerator"])
    base = dict(row_id=row["row_id"], group=row["source_group"], trust=row["trust"], model=None, system=None,
                plan=None, measured_s=float("nan"), accelerator=acc)
    model, why = model_for(row)
    if model is None:
        return TpuAmdCase(**base, reason=why)
    mb, gbs, batch_note = batch_of(row)
    measured, why = measured_of(row, model, gbs)
    if measured is None:
        return TpuAmdCase(**base, reason=why or batch_note)
    base["measured_s"] = measured
    if mb is None:
        return TpuAmdCase(**base, reason=batch_note)
    sysname = ACCELERATORS.get(acc)
    if sysname is None:
        return TpuAmdCase(**base, reason=f"accelerator {acc!r} has no catalogue system")
    try:
        system = load_hardware(sysname)
    except InputError:
        return TpuAmdCase(**base, reason=f"no catalogue system {sysname}")
    chips, chips_note = chips_of(row)
    if system.max_devices is not None and chips > system.max_devices:
        return TpuAmdCase(**base, reason=f"more chips than {sysname}'s largest configuration ({system.max_devices} "
                                         "devices)")
    rec, rec_note = remat_of(row, model.n_layers)
    if rec is None:
        return TpuAmdCase(**base, reason=rec_note)
    tp, pp, cp, ep = (int(cell_number(row[k]) or 1) for k in ("tp", "pp", "cp", "ep"))
    fsdp, notes = config_fsdp(row), cell_text(row["notes"]).lower()
    notes_out = [n for n in (chips_note, batch_note, rec_note) if n]
    if fsdp is None and is_maxtext(row):  # MaxText base.yml ici_fsdp_parallelism: -1, every chip left in the slice
        fsdp = int(chips) // (tp * pp * cp * ep)
        notes_out.append("fsdp not stated: MaxText's default ici_fsdp -1 (all chips left)")
    fsdp = fsdp or 1
    kw = dict(gpus=int(chips), tp=tp, pp=pp, cp=cp, ep=ep, micro_batch=mb, global_batch=gbs,
              seq_len=int(cell_number(row["seq_len"])), precision=precision_of(cell_text(row["precision"])),
              attention="flash", **rec)
    if is_maxtext(row):
        dtype = "bf16" if STATES_BF16_WEIGHTS.search(notes) else "fp32"  # gradients and moments follow weights
        kw |= dict(zero=3 if fsdp > 1 else 0, sequence_parallel=tp > 1, grad_dtype=dtype, weight_dtype=dtype,
                   moment_dtype=dtype)
        data = int(cell_number(row["dp"]) or 1)
        if fsdp > 1 and data > 1:  # MaxText's data axis beside fsdp: replicas of the fsdp groups (hybrid sharding)
            kw["dp_replicate"] = data
            notes_out.append(f"data {data} x fsdp as hybrid sharding (dp_replicate = {data})")
    else:
        kw |= dict(zero=1 if "distributed optim" in notes else 0, sequence_parallel=tp > 1)
    kw |= dense_moe_of(row, model)
    lora = lora_of(row)
    if lora:
        kw["lora"] = lora
        notes_out.append("LoRA on the attention projections (MLPerf's reference target modules)")
    try:
        kw["stack"] = stack_of(row)
        plan = resolve(Plan(**kw), model, system)
    except InputError as err:
        return TpuAmdCase(**base, reason=f"plan: {err}")
    return TpuAmdCase(**{**base, "model": model, "system": system, "plan": plan}, note="; ".join(notes_out))


def load_tpu_amd_cases(csv: str | Path) -> list[Case]:
    """Every row of the TPU/AMD CSV as a TpuAmdCase (a calibrate.runs.table.Case), in file order."""
    df = pd.read_csv(csv)
    return [to_tpu_amd_case(r) for _, r in df.iterrows()]
