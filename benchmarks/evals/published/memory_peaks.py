"""Published measured peak memory (benchmarks/data/measured_memory_dev.csv and the rows of
published_moe_runs_dev.csv with `mem_peak_gib`) as (model, system, plan, measured GiB, view, rank).

Each row measured one view on one rank: `view` is "allocated" (torch.cuda.max_memory_allocated) or "reserved"
(max_memory_reserved), read from `mem_kind`; `rank` is which device the figure comes from, read from
`mem_rank` / `mem_kind`: "max" (the fullest device over all ranks), "first" (global rank 0: pipeline stage 0) or
"last" (the last pipeline stage). A row's settings come from its text with calibrate.runs.table's rules and helpers;
what a source group leaves unstated from `MEMORY_GROUP_DEFAULTS`, the same for every row of the group and each
with its reason (never per row, never tuned). A row that cannot be expressed keeps the reason.

Decisions that apply to every row of a kind:
- Rank "max": the source says max over all ranks (torchtitan footnote 1, SimuMax "max over ranks"); the
  prediction is the largest value of the view over the pipeline stages (`Estimate.memory_ranks`).
- Rank "first": "rank-0" in the text; also Megatron-LM / Megatron-Bridge logs that quote one figure with no rank
  (Moonlight "peak allocated after iter 2", Qwen3 dispatcher smoke run): Megatron-LM's report_memory prints
  "[Rank r] (after N iterations) memory (MB)" on the data-parallel-rank-0 ranks and a study quotes rank 0's;
  every such row here has pp = 1, so first = last = max up to expert imbalance (balanced here).
- Rank "first" for nanotron's "logging rank (not stated)". nanotron's own DistributedTrainer logs the loss on
  `logger_ranks` = the output (last) pipeline stage's tp 0 / dp 0 rank (nanotron/trainer.py), so "last" was the
  first guess; but which rank wrote bench_cluster's log_metrics.csv is not stated, and its between-steps column
  (memory_usage_MiB: torch.cuda.memory_allocated after the optimizer step, i.e. weights + gradients + optimizer
  state, no model constant involved) identifies the device: on all five pipelined rows it is pipeline rank 0's
  state bytes under nanotron's layer split (`nanotron_stage_layers`) within 0.07-0.09 GiB, the same small excess
  as on the pp = 1 rows (0.10 GiB), while the last stage's would be 0.8-2.9 GiB lower (M035, pp 8: rank 0 holds
  4 layers + the tied embedding, 270.7 M params x 18 B = 4.54 GiB, measured 4.61; the last stage holds only
  the LM head, 102.9 M x 18 B = 1.73 GiB). So the peak is compared with stage 0's. `mem_steady_alloc_gib` is
  compared with `MemoryBreakdown.between_steps` of the same stage.
- A figure in "GB" (Megatron-Bridge's logs, "GB as written" in its skill notes) is decimal: Bridge's report_memory
  divides torch.cuda.memory_stats() bytes by 1.0e9 (src/megatron/bridge/training/utils/train_utils.py @600d069b
  and @067f987df L1204), so it is x 1e9 / 2^30 GiB (`gib_of`); a figure stated in GiB is taken as stated.
- Hardware: "H100 SXM 96GB HBM2e" (torchtitan's Grand Teton hosts) has no catalogue system; the benchmark needs
  its capacity, because the reserved view is capped by what the device can give (cost.memory.footprint.memory_views:
  min(allocated x (1 + slack), capacity - runtime)) and with the 80 GB part's cap (77 GiB usable) the 82-85 GiB
  these rows measured could not be predicted. So it is dgx-h100 with the accelerator's hbm_capacity_gib = 96
  (six 16 GiB HBM stacks; the catalogue states the five-stack 80 GB part as 80), nothing else changed (its
  500 W cap affects time, not memory).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from perfmodel.calibrate.runs.table import cell_number, cell_text, model_for, precision_of, system_for, zero_of
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import System, load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.model.presets import DEEPSEEK_ARCH, DEEPSEEK_MLA
from perfmodel.spec.plan.layout import RECOMPUTE_MODULES, Plan, resolve
from perfmodel.spec.stack.frameworks import stack_for_framework
from .moe_runs import MODEL_PRESETS, moe_system_for, moe_to_case

VIEWS = ("allocated", "reserved")
RANKS = ("max", "first", "last")

# What a group of measured_memory_dev.csv leaves unstated; each entry says why.
MEMORY_GROUP_DEFAULTS: dict[str, dict] = {
    # torchtitan Dec 2024 (9dec370): SDPA flash/cudnn attention. Its interleaved 1F1B row states no stages per
    # rank: Interleaved1F1B needs at least 2 (torch.distributed.pipelining schedules), the fewest is taken.
    # torchtitan's pipeline_parallel_microbatches default at 9dec370 fixes the micro-batch where a row says its
    # size is not stated or not certain (the 405B rows): n_microbatches = pipeline_parallel_degree when unset,
    # whatever the stages per rank (torchtitan/parallelisms/pipelining_utils.py @9dec370 build_pipeline_schedule
    # L78-80; the pp x stages-per-rank default came later), so local batch / pp.
    "torchtitan_H100_2024-12": dict(attention="flash", interleaved_vpp=2, pp_microbatches="pp"),
    # The framework cell names nanotron: its own stack profile (hardware_specs/stacks/nanotron.yaml). flash-attn
    # (nanotron llama); its 1F1B pipeline engine (OneForwardOneBackward). Its pipeline split balances compute,
    # not layers (`nanotron_stage_layers`).
    "nanotron_old_bench_llama1B": dict(attention="flash", split="nanotron"),
}


def nanotron_stage_layers(model: ModelConfig, pp: int) -> tuple[list[int], str]:
    """Decoder layers per pipeline stage as nanotron assigns its PipelineBlocks (trainer.py _init_model, llama
    get_block_compute_costs): block costs 4 n_heads d_head h + 3 f h per decoder layer, V h for the LM head, 0
    for the embedding, norms and loss; stage r takes blocks until the cumulative cost passes
    total (r + 1) / pp (the block that passes it stays on r). The model cannot hold a stage without a layer: where
    nanotron leaves the last stage only the LM head (llama-1B at pp 8: 4,3,3,4,3,3,4,0), one layer of the stage
    before moves to it (stage 0, the one compared, is unchanged); (split, note)."""
    if pp == 1:
        return [model.n_layers], ""
    layer = 4 * model.n_heads * (model.hidden // model.n_heads) * model.hidden + 3 * model.ffn_hidden * model.hidden
    costs = [0.0] + [float(layer)] * model.n_layers + [0.0, float(model.vocab * model.hidden), 0.0, 0.0]
    kinds = ["emb"] + ["layer"] * model.n_layers + ["norm", "head", "cast", "loss"]
    total, cum, idx = sum(costs), 0.0, 0
    thresholds = [total * (r + 1) / pp for r in range(pp)]
    split = [0] * pp
    for c, k in zip(costs, kinds):
        cum += c
        if k == "layer":
            split[idx] += 1
        if cum > thresholds[idx]:
            idx = min(idx + 1, pp - 1)
    note = f"nanotron split {split}"
    for r in range(pp - 1, 0, -1):
        if split[r] == 0:
            split[r - 1] -= 1
            split[r] += 1
            note += f" -> {split} (a stage needs a layer)"
    return split, note

# What a MoE group's measured-peak rows ran beyond published.moe_runs's mapping. The Moonlight recompute study (Bridge
# 600d069b) ran "the Moonlight 16B BF16 pretraining recipe" on 8 H100s (skills/nemo-mbridge-perf-activation-recompute/
# SKILL.md): moonlight_16b_pretrain_8gpu_h100_bf16_config (recipes/moonlight/h100/moonlight_16b.py @600d069b L208-213),
# the precision-aware optimizer with bf16 Adam moments and fp32 main parameters: 4 + 2 + 2 B per parameter, not 12.
MOE_MEMORY_GROUP_DEFAULTS: dict[str, dict] = {
    "MegatronBridge_skill_activation_recompute": dict(moment_dtype="bf16", weight_dtype="fp32"),
}

# The SimuMax v1.2 B200 validation runs (Megatron-LM 23e00ed0 + TE 2.11, layer-truncated DeepSeek proxies):
# - stack megatron-core (Megatron-LM), bf16, no recompute (--recompute-num-layers 0 as stated), alltoall as stated.
# - zero 1: SimuMax's strategy files run Megatron's distributed optimizer (zero_state 1), as Megatron-LM's MoE
#   example scripts set --use-distributed-optimizer; the rows do not state it.
# - grad_dtype fp32: Megatron-LM accumulates and all-reduces bf16 gradients in fp32 (accumulate_allreduce_grads_in_fp32)
#   unless --grad-reduce-in-bf16, which the rows do not state (unlike published.moe_runs.MOE_DEFAULTS' Bridge recipes).
# - 4 layers, the first dense: the notes say "DeepSeekV3 formal rows use dense_layers=1" (DeepSeek-V2's own
#   first_k_dense_replace is 1); no multi-token-prediction module (Megatron-LM's mtp_num_layers default None).
# - overlap_dp_comm False: SimuMax's launcher (run_pretrain_deepseekv2.sh @4dcaae51) passes no --overlap-grad-reduce /
#   --overlap-param-gather, both off by default (Megatron-LM 23e00ed0 arguments.py L2359, L2383): DP comm exposed.
SIMUMAX_GROUP = "SimuMax_v1.2_B200_validation"
SIMUMAX_DEFAULTS = dict(zero=1, recompute="none", grad_dtype="fp32", moe_dispatcher="alltoall",
                        stack="megatron-core", precision="bf16", overlap_dp_comm=False)
TRUNCATED_DENSE_LAYERS = 1

# DeepSeek-V2 (deepseek-ai/DeepSeek-V2 config.json; no preset: model_type deepseek_v2 is not read by spec.model.hf_config):
# 60 layers of 5120, 128 heads, MLA with q/kv latents 1536/512 and heads of 128+64 (qk) / 128 (v); 160 routed
# experts (top-6, softmax scoring) of 1536 and 2 shared, the first layer dense (first_k_dense_replace 1, MLP 12288);
# vocab 102400, untied.
DEEPSEEK_V2 = dict(DEEPSEEK_ARCH, name="deepseek-v2", vocab=102400, max_seq_len=163840, n_layers=60, hidden=5120,
                   n_heads=128, ffn_hidden=12288,
                   moe=dict(n_experts=160, top_k=6, expert_ffn_hidden=1536, n_shared_experts=2, first_dense_layers=1,
                            router_scoring="softmax"),
                   mla=dict(DEEPSEEK_MLA, q_lora_rank=1536),
                   source="deepseek-ai/DeepSeek-V2 config.json (DeepSeek-AI 2024, DeepSeek-V2 Sec. 3.1.1)")


@dataclass
class MemoryCase:
    row_id: str
    group: str
    trust: str
    model: ModelConfig | None
    system: System | None
    plan: Plan | None
    measured_gib: float
    view: str  # "allocated" | "reserved"
    rank: str  # "max" | "first" | "last"
    measured_between_gib: float | None = None  # allocated between steps, where the row gives it
    measured_other_gib: float | None = None  # the other view's figure where the text gives it (notes / mem_kind)
    csv: str = ""  # "dense" (measured_memory_dev.csv) or "moe" (published_moe_runs_dev.csv)
    reason: str = ""  # why the row cannot be expressed (empty when it can)
    decisions: list[str] = field(default_factory=list)  # what was read or defaulted, for the table's notes


def view_of(kind: str) -> str:
    """The view a `mem_kind` names: whichever of allocated / reserved it names first (e.g. 'max allocated (GiB),
    max over ranks; reserved 47.05 GiB' is allocated, with reserved as a second figure); neither named
    (Megatron-Bridge 'rank-0 peak after iter 2 (GB)'): allocated, what Megatron's memory report's peak is."""
    k = kind.lower()
    a, r = k.find("allocated"), k.find("reserved")
    if r >= 0 and (a < 0 or r < a):
        return "reserved"
    return "allocated"


def rank_of(kind: str, rank_text: str, group: str) -> str:
    """Which device the figure is from (module docstring): max over ranks, rank 0, or nanotron's logging rank."""
    t = f"{kind} {rank_text}".lower()
    if "max over" in t or "max across" in t:
        return "max"
    if "rank-0" in t or "rank 0" in t:
        return "first"
    if "logging rank" in t:
        return "first"  # nanotron bench_cluster: pipeline rank 0 (module docstring)
    return "first"  # a Megatron log quoting one figure: rank 0's (module docstring)


def other_view_gib(row: pd.Series, view: str) -> float | None:
    """The other view's figure where the row states it ('peak reserved 25.49 GiB' in notes; 'reserved 47.05 GiB'
    in mem_kind), GiB."""
    other = "reserved" if view == "allocated" else "allocated"
    for col in ("mem_kind", "notes"):
        if col not in row:
            continue
        m = re.search(rf"{other}\s+(\d+(?:\.\d+)?)\s*GiB", cell_text(row[col]))
        if m:
            return float(m.group(1))
    return None


def _recompute(text: str) -> tuple[str, list[str] | None, str]:
    """(recompute, recompute_modules, reason) from a row's recompute text."""
    t = text.lower().strip()
    if not t or "not stated" in t:
        return "", None, ""
    if t.startswith("none"):
        return "none", None, ""
    if "per-op" in t:
        return "per-op", None, ""
    if t.startswith("selective"):
        rest = t.split(":", 1)[1] if ":" in t else ""
        if "[]" in rest:
            return "none", None, ""  # Megatron-Core selective with no modules recomputes nothing
        mods = [m.strip() for m in rest.split(",") if m.strip()]
        bad = [m for m in mods if m not in RECOMPUTE_MODULES]
        if bad:
            return "", None, f"recompute modules {bad} are not Megatron-Core --recompute-modules"
        return "selective", (mods or None), ""
    if t.startswith("full"):
        return "full", None, ""
    return "", None, f"recompute {text!r} not understood"


# --- measured_memory_dev.csv ---------------------------------------------------------------------------------

def dense_system(gpu_type: str) -> tuple[System | None, str, str]:
    """(system, reason, decision) for a dense row's GPU: the catalogue's, or the H100 96GB copy (module docstring)."""
    name, why = system_for(gpu_type)
    if name:
        return load_hardware(name), "", ""
    g = gpu_type.upper()
    if "H100" in g and "96GB" in g:
        base = load_hardware("dgx-h100")
        acc = base.accelerator.model_copy(update=dict(name="H100-SXM-96GB", hbm_capacity_gib=96.0))
        sysm = base.model_copy(update=dict(name="dgx-h100-96gb", accelerator=acc))
        return sysm, "", "H100 96GB: dgx-h100 with hbm_capacity_gib 96 (the reserved view's cap)"
    return None, why, ""


def dense_plan(row: pd.Series, model: ModelConfig, system: System) -> tuple[Plan | None, str, list[str]]:
    group = cell_text(row["source_group"])
    d = MEMORY_GROUP_DEFAULTS.get(group, {})
    notes: list[str] = []
    tp, pp = int(cell_number(row["tp"]) or 1), int(cell_number(row["pp"]) or 1)
    dp, cp = cell_number(row["dp"]), int(cell_number(row["cp"]) or 1)
    mb, gbs, seq = cell_number(row["micro_batch"]), cell_number(row["global_batch"]), cell_number(row["seq_len"])
    if None in (dp, mb, gbs, seq):
        return None, "dp, micro or global batch, or sequence length not stated", notes
    vtext = cell_text(row["vpp"]).lower()
    vpp, schedule = int(cell_number(row["vpp"]) or 1), None
    if "interleaved" in vtext:
        if cell_number(row["vpp"]) is None:
            vpp = d.get("interleaved_vpp")
            if vpp is None:
                return None, "interleaved schedule with no stages per rank", notes
            notes.append(f"interleaved: vpp {vpp} (group default)")
        schedule = "interleaved"
    if pp > 1 and d.get("pp_microbatches") == "pp":
        said = f"{cell_text(row['derived_fields'])} {cell_text(row['notes'])}".lower()
        if "microbatch" in said and ("not stated" in said or "not certain" in said):
            local = int(gbs) // int(dp)
            if local % pp == 0 and local // pp != int(mb):
                notes.append(f"micro_batch {local // pp} = local batch {local} / pp {pp} (torchtitan 9dec370 "
                             f"default: pp micro-batches), not the cell's {int(mb)}")
            if local % pp == 0:
                mb = local // pp
    stage_layers = None
    if d.get("split") == "nanotron":
        stage_layers, note = nanotron_stage_layers(model, pp)
        if pp > 1:
            notes.append(note)
        else:
            stage_layers = None
    rc, mods, why = _recompute(cell_text(row["recompute"]))
    if why:
        return None, why, notes
    if not rc:
        rc = d.get("recompute", "none")
    zero = zero_of(cell_text(row["zero_fsdp"]), d.get("zero", 0))
    precision = precision_of(cell_text(row["precision"]))
    gtext = f"{cell_text(row['precision'])} {cell_text(row['optimizer'])}".lower()
    if "fp32 reduce" in gtext or "accumulate_grad_in_fp32: true" in gtext or "fp32 grad" in gtext:
        grad = "fp32"
    else:
        grad = d.get("grad_dtype", "fp32")
    # torch.compile in the row's text: torchtitan's Dec-2024 runs compiled each TransformerBlock (9dec370
    # parallelize_llama apply_compile); the loss joined only in 2025 ([compile] components)
    comp = "model" if "torch.compile" in gtext else "none"
    sp_text = cell_text(row["sp"]).lower()
    sp = tp > 1 and (sp_text.startswith("yes") or "reduce_scatter" in sp_text or d.get("sp_with_tp", False))
    try:
        stack = stack_for_framework(cell_text(row["framework"]), f"row {row['row_id']}: framework")
    except InputError:
        stack = d.get("stack")
        if stack is None:
            return None, f"framework {row['framework']!r} names no stack", notes
        notes.append(f"stack {stack} (group default)")
    try:
        plan = Plan(tp=tp, pp=pp, dp=int(dp), cp=cp, vpp=vpp, schedule=schedule, micro_batch=int(mb),
                    global_batch=int(gbs), seq_len=int(seq), recompute=rc, recompute_modules=mods,
                    sequence_parallel=sp, zero=zero, precision=precision, grad_dtype=grad,
                    attention=d.get("attention", "flash"), stack=stack, stage_layers=stage_layers, compile=comp)
        plan = resolve(plan, model, system)
    except InputError as err:
        return None, f"plan: {err}", notes
    return plan, "", notes


def dense_case(row: pd.Series) -> MemoryCase:
    kind = cell_text(row["mem_kind"])
    view = view_of(kind)
    base = dict(row_id=row["row_id"], group=row["source_group"], trust=cell_text(row["trust"]), model=None,
                system=None, plan=None, measured_gib=float(cell_number(row["mem_peak_gib"])), view=view,
                rank=rank_of(kind, cell_text(row["mem_rank"]), row["source_group"]),
                measured_between_gib=cell_number(row["mem_steady_alloc_gib"]),
                measured_other_gib=other_view_gib(row, view), csv="dense")
    system, why, sysnote = dense_system(cell_text(row["gpu_type"]))
    if system is None:
        return MemoryCase(**base, reason=why)
    model, why = model_for(row)
    if model is None:
        return MemoryCase(**base, reason=why)
    if "tied embeddings" in f"{cell_text(row['precision'])} {cell_text(row['notes'])}".lower():
        model = ModelConfig(**{**model.model_dump(), "tie_embeddings": True})
    plan, why, notes = dense_plan(row, model, system)
    if plan is None:
        return MemoryCase(**base, reason=why, decisions=notes)
    return MemoryCase(**{**base, "model": model, "system": system, "plan": plan},
                      decisions=([sysnote] if sysnote else []) + notes)


# --- published_moe_runs_dev.csv ------------------------------------------------------------------------------

def truncated_model(name: str) -> tuple[ModelConfig | None, str]:
    """The SimuMax proxies: DeepSeek-V2 / -V3 truncated to their stated layer count (SIMUMAX notes above)."""
    low = name.lower()
    n = re.search(r"truncated to (\d+) layers", low)
    if not n:
        return None, f"truncated model {name!r}: layer count not stated"
    if "deepseekv3" in low or "deepseek-v3" in low:
        data = load_model("deepseek-v3").model_dump()
    elif "deepseekv2" in low or "deepseek-v2" in low:
        data = ModelConfig.parse(DEEPSEEK_V2, where="DeepSeek-V2 config").model_dump()
    else:
        return None, f"truncated model {name!r} has no full model here"
    data["moe"] = {**data["moe"], "first_dense_layers": TRUNCATED_DENSE_LAYERS}
    data.update(name=f"{data['name']} (first {n.group(1)} layers)", n_layers=int(n.group(1)), mtp_layers=0)
    return ModelConfig.parse(data, where=name), ""


def simumax_case(row: pd.Series, base: dict) -> MemoryCase:
    model, why = truncated_model(cell_text(row["model"]))
    if model is None:
        return MemoryCase(**base, reason=why)
    sysname, why = moe_system_for(cell_text(row["gpu_type"]))
    if sysname is None:
        return MemoryCase(**base, reason=why)
    system = load_hardware(sysname)
    rc, mods, why = _recompute(cell_text(row["recompute"]))
    if why:
        return MemoryCase(**base, reason=why)
    d = dict(SIMUMAX_DEFAULTS, recompute=rc or SIMUMAX_DEFAULTS["recompute"])
    if "alltoall" in cell_text(row["dispatcher"]).lower():
        d["moe_dispatcher"] = "alltoall"
    tp, pp, cp = (int(cell_number(row[k]) or 1) for k in ("tp", "pp", "cp"))
    ep, etp = int(cell_number(row["ep"]) or 1), int(cell_number(row["etp"]) or 1)
    gpus, gbs, mb, seq = (cell_number(row[k]) for k in ("n_gpus", "global_batch", "micro_batch", "seq_len"))
    try:
        plan = Plan(gpus=int(gpus), tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, micro_batch=int(mb), global_batch=int(gbs),
                    seq_len=int(seq), sequence_parallel=tp > 1, **d)
        plan = resolve(plan, model, system)
    except InputError as err:
        return MemoryCase(**base, reason=f"plan: {err}")
    return MemoryCase(**{**base, "model": model, "system": system, "plan": plan},
                      decisions=[f"{model.name}, first {TRUNCATED_DENSE_LAYERS} dense, no MTP; zero 1, fp32 grads"])


def gib_of(value: float, kind: str) -> float:
    """A peak in GiB: decimal GB where `kind` names GB and not GiB (module docstring), else as stated."""
    return value * 1e9 / 2.0 ** 30 if re.search(r"\bGB\b", kind) and "GiB" not in kind else value


def moe_case(row: pd.Series) -> MemoryCase:
    kind = cell_text(row["mem_kind"])
    view = view_of(kind)
    base = dict(row_id=row["row_id"], group=row["source_group"], trust=cell_text(row["trust"]), model=None,
                system=None, plan=None, measured_gib=gib_of(float(cell_number(row["mem_peak_gib"])), kind), view=view,
                rank=rank_of(kind, "", row["source_group"]), measured_other_gib=other_view_gib(row, view), csv="moe")
    name = cell_text(row["model"])
    if "nemotron" in name.lower():
        return MemoryCase(**base, reason="hybrid Mamba-Transformer MoE: no Mamba operator in the cost model")
    if "truncated" in name.lower():
        return simumax_case(row, base)
    # published.moe_runs's mapping (MOE_DEFAULTS: the Megatron-Bridge recipes' settings), on the model's preset name
    # (the text before ' (', e.g. 'Moonlight-16B-A3B (1 dense + 26 MLA+MoE layers)') and with the selective
    # recompute modules applied after (published.moe_runs leaves them out)
    rc, mods, why = _recompute(cell_text(row["recompute"]))
    if why:
        return MemoryCase(**base, reason=why)
    r = row.copy()
    r["model"] = name.split(" (")[0]
    if r["model"].lower() not in MODEL_PRESETS:
        return MemoryCase(**base, reason=f"model {name!r} has no preset")
    if rc == "selective":
        r["recompute"] = "none"
    case = moe_to_case(r)
    if case.reason:
        return MemoryCase(**base, reason=case.reason)
    plan = case.plan
    notes = []
    group = MOE_MEMORY_GROUP_DEFAULTS.get(row["source_group"], {})
    if rc == "selective" or group:
        more = dict(recompute="selective", recompute_modules=mods) if rc == "selective" else {}
        try:
            plan = resolve(Plan(**{**plan.model_dump(), **more, **group}), case.model, case.system)
        except InputError as err:
            return MemoryCase(**base, reason=f"plan: {err}")
        if rc == "selective":
            notes.append(f"selective {','.join(plan.recompute_modules)}")
        notes += [f"{k} {v} (group default)" for k, v in group.items()]
    elif not rc:
        notes.append(f"recompute {plan.recompute} (MOE_DEFAULTS)")
    return MemoryCase(**{**base, "model": case.model, "system": case.system, "plan": plan}, decisions=notes)


def memory_cases(dense_csv: str | Path, moe_csv: str | Path) -> list[MemoryCase]:
    """Every row of measured_memory_dev.csv, then every row of the MoE CSV with a measured peak, as MemoryCases."""
    dense = pd.read_csv(dense_csv)
    moe = pd.read_csv(moe_csv)
    moe = moe[moe["mem_peak_gib"].notna()]
    return [dense_case(r) for _, r in dense.iterrows()] + [moe_case(r) for _, r in moe.iterrows()]


GiB = 2.0 ** 30


def predicted(case: MemoryCase, est) -> dict:
    """The estimate in the case's view and on its rank: {stage, <view GiB>, parts GiB, between_steps GiB}."""
    ranks = est.memory_ranks
    if case.rank == "first":
        pick = ranks[0]
    elif case.rank == "last":
        pick = ranks[-1]
    else:
        pick = max(ranks, key=lambda r: getattr(r.memory_bytes, case.view))
    mb = pick.memory_bytes
    out = dict(stage=pick.stage, predicted_gib=getattr(mb, case.view) / GiB,
               between_gib=mb.between_steps / GiB)
    for k in ("weights", "gradients", "optimizer", "activations", "transient", "allocated", "reserved"):
        out[k] = getattr(mb, k) / GiB
    return out


def nan_if_none(x) -> float:
    return float("nan") if x is None else float(x)

