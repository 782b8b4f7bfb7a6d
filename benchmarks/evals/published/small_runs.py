"""Small- and mid-scale measured training runs (benchmarks/data/small_scale_runs_dev.csv: llm.c, nanoGPT,
modded-nanogpt, nanochat, HF blogs, torchtitan, Megatron-LM, fms-fsdp, DeepSpeed) as `calibrate.runs.table.Case`s, and
the rows that measured memory as `MemoryRun`s (the configuration that ran, and its figure).

Every cell is a source's own words ("DP8 + ZeRO-1 (-z 1)", "64 seq x 1024"). A row is read in order: which code ran
it (`source_of`), the layout, the model, the system, the precision, the batch, then the figure as seconds per
optimizer step (`measured_of`). What a source leaves unstated comes from `SOURCE_DEFAULTS`, the same for every row
of the source (never per row, never tuned). A row that cannot be expressed keeps what was read, no plan, and a reason.

Decisions for every row of a kind (benchmarks/data/small_scale_runs_dev.README.md has them all):
- HSDP (fms-fsdp) is zero = 3 over all data-parallel ranks: FULL_SHARD's gathers, reduce-scatters and resharding;
  the rows state no shard group size, so Plan.dp_replicate stays 1: the collectives span every rank and the
  states are sharded 128 ways (HSDP within a node: 8).
- Muon / NorMuon (modded-nanogpt, nanochat) are priced as fused AdamW, as the nanogpt stack profile states.
- fp8 on some layers only (FP8 lm_head) is not a Plan precision; PCIe cards, Titan RTX, RTX 4090, V100 and the
  H100 SXM 96GB HBM2e (500 W) are not in the hardware catalogue; a repeated measurement is counted once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmarks import DATA
from perfmodel.calibrate.runs.table import Case, cell_number, cell_text, torchtitan_selective
from perfmodel.cost.estimate import estimate
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import System, load_hardware
from perfmodel.spec.model.catalogue import list_models, load_model
from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.plan.layout import Plan, resolve
from .flop_conventions import step_flops

DEFAULT_CSV = DATA / "small_scale_runs_dev.csv"
COLUMNS = ("source", "model", "framework", "precision", "hardware", "num_gpus", "parallel_layout", "micro_batch",
           "global_batch_tokens", "recompute", "compile_flash_flags", "metric", "value", "notes")
WALLCLOCK = {"train_wallclock_s": 1, "train_runtime_s": 1, "train_wallclock_min": 60, "train_wallclock_h": 3600}
TIMES = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "aggregate_pflops", "mfu",
         *WALLCLOCK)
MEMORY = {"peak_memory_gib": 1, "peak_memory_mib": 1 / 1024, "peak_memory_mb": 1e6 / 2**30, "max_batch_that_fits": None}

GPT = dict(mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True, linear_bias="all")
# rotary, RMSNorm, no biases; ReLU^2 is a two-matrix MLP as GELU's (the same GEMMs)
MODERN = dict(mlp="gelu", norm="rmsnorm", position="rope", tie_embeddings=False, linear_bias="none")
# Megatron-LM 2019-2021 (as calibrate.runs.table.GROUP_DEFAULTS): fused softmax, not flash; full activation checkpointing
# in the example scripts; fp16 gradients reduced in 16 bits; dropout 0.1 (arguments.py); no micro-batch stated:
# 1 with pipelining, else no accumulation (as calibrate.runs.table).
MEGATRON = dict(stack="megatron-core", style=GPT, attention="unfused", recompute="full", grad_dtype="bf16",
                dropout=0.1, megatron_mb=True)

# What each source's code does where its rows are silent: the same for every row of the source, each with why.
SOURCE_DEFAULTS: dict[str, dict] = {
    # llm.c (train_gpt2.cu): GPT-2 exactly, no dropout kernel; its stack keeps bf16 gradients (floatX grads).
    "llm.c": dict(stack="llmc", style=GPT, dropout=0.0),
    # llm.c's train_gpt2.py: nanoGPT's model file loading GPT-2 (biases, no dropout), compiled only with --compile 1.
    "llm.c train_gpt2.py": dict(stack="nanogpt", style=GPT, dropout=0.0),
    # nanoGPT train.py / bench.py: bias = False, dropout = 0.0, compile = True; its A100s are the 40GB part (README:
    # '8XA100 40GB node'); model.py's attention is SDPA where the row says so (its flash path, 2023), else the
    # manual q k^T, masked_fill, softmax, @ v of the Dec-2022 code.
    "nanoGPT": dict(stack="nanogpt", style=GPT, linear_bias="none", dropout=0.0, compile="model+loss", a100="40gb",
                    attention="unfused", flash_when_stated=True),
    # modded-nanogpt's October 2024 records (the expressible ones) keep nanoGPT's tied LM head.
    "modded-nanogpt": dict(stack="nanogpt", style=MODERN, tie_embeddings=True, compile="model+loss"),
    # nanochat gpt.py: untied, no biases; base_train: the d26 leaderboard runs' --device_batch_size=16 and the
    # 524288-token total batch (the default before 2026-02-05, as the rows say); DistAdamW / DistMuon reduce-scatter
    # gradients and update a shard: ZeRO-1.
    "nanochat": dict(stack="nanogpt", style=MODERN, compile="model+loss", micro_batch=16, global_tokens=524288,
                     zero=1),
    # torchtitan: global batch = local batch x dp (training.global_batch_size -1); llama3_8b.toml checkpoints
    # selectively per op (selective_ac_option "op"); MFU in its convention (`step_flops`).
    "torchtitan": dict(stack="torchtitan", accumulate=1, selective="per-op", flops="torchtitan"),
    # fms-fsdp: no gradient accumulation (train_utils.train steps every batch); IBM's Vela nodes hold A100 80GB;
    # its bfSixteen mixed precision reduces in bf16.
    "fms-fsdp": dict(stack="hf-transformers", accumulate=1, a100="80gb", grad_dtype="bf16"),
    "hf": dict(stack="hf-transformers", style=GPT, dropout=0.1),  # HF GPT-2 configs: resid/attn/embd pdrop 0.1
    # 2020: 'local' DDP reduces after the backward; 2020's DGX A100s held 40GB parts
    "Megatron-LM 2020": MEGATRON | dict(overlap_dp_comm=False, a100="40gb"),
    "Megatron-LM 2021": MEGATRON | dict(flops="narayanan"),
    # Megatron-Core README table (2024): untied embeddings (24L x 2048 with vocab 131072 is 1.7B untied, 1.5B tied),
    # no recompute, dropout 0.1 (arguments.py); model FLOPs, as its MFU column.
    "Megatron-Core": dict(stack="megatron-core", style=GPT, tie_embeddings=False, dropout=0.1, flops="megatron",
                          megatron_mb=True),
    "DeepSpeed": dict(stack="deepspeed", style=GPT, dropout=0.1),
}

# Time figures the notes say are not one step's time: (pattern, reason, only for wall-clock totals).
NOTE_REFUSALS = (
    (r"^Same table row", "the same measurement as the table row's tokens/s ('Same table row'): counted once", False),
    (r"Do not use as ground truth", "the figure conflicts with the source's others ('Do not use as ground truth')",
     False),
    (r"incl\. interruptions", "a production average including interruptions, not a step time", False),
    (r"includes (?:startup/)?eval|eval[^.]*included", "the wall-clock includes evaluation: not a step time", True),
)


@dataclass
class MemoryRun:
    """A row that measured memory: the configuration that ran and its figure."""
    row_id: str
    group: str
    trust: str
    model: ModelConfig | None
    system: System | None
    plan: Plan | None  # what ran (max_batch_that_fits: at that micro-batch; 0: at 1, which did not fit)
    metric: str
    measured_gib: float | None  # peak memory per device, GiB; None for max_batch_that_fits
    view: str  # "allocated", "reserved", or "" where the source does not say
    fits: bool  # the run ran (False: the source reports out-of-memory at micro_batch 1)
    reason: str = ""  # why the configuration cannot be expressed (empty when it can)


def first_int(text: str, *patterns: str) -> int | None:
    """The first group of the first pattern that matches `text` (case-insensitive) as an int ('32,000' -> 32000)."""
    return next((int(m.group(1).replace(",", "")) for p in patterns if (m := re.search(p, text, re.I))), None)


def group_of(source: str, notes: str) -> str:
    """The source repository ('owner/repo@commit:path' or a github.com URL), the repository a proxy page copies
    (notes: 'Proxy copy of github.com/...'), else the page's host."""
    if m := re.match(r"([\w.-]+/[\w.-]+)@", source):
        return m.group(1)
    m = re.search(r"github\.com/([\w.-]+/[\w.-]+)", source) or re.search(r"copy of github\.com/([\w.-]+/[\w.-]+)",
                                                                           notes)
    return m.group(1) if m else re.sub(r"^https?://", "", source).split("/")[0]


def source_of(row: pd.Series) -> str:
    """Which code ran the row (a SOURCE_DEFAULTS key): the framework cell's words, else the repository's own PyTorch
    script (modded-nanogpt's, llm.c's train_gpt2.py), else a loop over HF model classes."""
    fw, group = cell_text(row["framework"]).lower(), group_of(row["source"], cell_text(row["notes"]))
    if fw.startswith("llm.c"):
        return "llm.c"
    for word, key in (("torchtitan", "torchtitan"), ("nanochat", "nanochat"), ("nanogpt", "nanoGPT"),
                      ("deepspeed", "DeepSpeed"), ("megatron-core", "Megatron-Core"), ("fms-fsdp", "fms-fsdp")):
        if word in fw:
            return key
    if era := re.search(r"megatron-lm \((\d{4})", fw):  # 2019's README runs 2020's code (local DDP, fp16)
        return f"Megatron-LM {max(int(era.group(1)), 2020)}"
    return {"KellerJordan/modded-nanogpt": "modded-nanogpt", "karpathy/llm.c": "llm.c train_gpt2.py",
            "foundation-model-stack/fms-fsdp": "fms-fsdp", "microsoft/DeepSpeed": "DeepSpeed"}.get(group, "hf")


def system_of(hardware: str, d: dict) -> tuple[str | None, str]:
    """The catalogue system a hardware cell names, or (None, reason)."""
    h = hardware.upper()
    if h.startswith("NOT STATED"):
        return None, "hardware not stated"
    for word, part in (("TITAN", "Titan RTX"), ("RTX 4090", "RTX 4090"), ("V100", "V100"),
                       ("HBM2E", "H100 SXM 96GB HBM2e @500W"), ("PCIE", "A100 40GB PCIe")):
        if word in h:
            return None, f"{part} is not in the hardware catalogue"
    if "H200" in h or "H100" in h:
        return ("dgx-h200" if "H200" in h else "dgx-h100"), ""
    if "A100" in h:
        if "80GB" in h or "SELENE" in h:  # Selene: DGX A100 640GB nodes
            return "dgx-a100-80gb", ""
        size = "40gb" if "40GB" in h else d.get("a100")
        return (f"dgx-a100-{size}", "") if size else (None, "A100 memory size not stated")
    return None, f"GPU {hardware!r} is not in the hardware catalogue"


def layout_of(text: str, gpus: float | None, flags: str) -> tuple[dict, str]:
    """tp, pp, cp, dp and the ZeRO stage the layout cell states, or ({}, reason)."""
    t = text.lower()
    if gpus is None or "not stated" in t:
        return {}, "number of GPUs or parallel layout not stated"
    if "offload" in t:
        return {}, "CPU offload of parameters and optimizer state is not expressible"
    mp = first_int(t, r"model-parallel size (\d+)")
    # Narayanan et al. 2021 keep tensor parallelism within the 8-GPU node and pipeline across (their Table 1)
    tp = min(mp, 8) if mp else first_int(t, r"\btp ?(\d+)") or 1
    pp = mp // tp if mp else first_int(t, r"\bpp ?(\d+)") or 1
    cp = first_int(t, r"\bcp (\d+)") or 1
    if gpus % (tp * pp * cp):
        return {}, f"{gpus:g} GPUs do not split into tp {tp} x pp {pp} x cp {cp}"
    if "shard_grad_op" in t or "zero-2" in t:
        zero = 2
    elif any(k in t for k in ("full_shard", "full shard", "fsdp", "hsdp")):  # HSDP: module docstring
        zero = 3
    elif any(k in t for k in ("zero-1", "-z 1", "reduce_scatter", "sharded optimizer")) or "param-gather" in flags:
        zero = 1  # Megatron-LM takes --overlap-param-gather only with --use-distributed-optimizer
    else:
        zero = 0
    return dict(tp=tp, pp=pp, cp=cp, dp=int(gpus) // (tp * pp * cp), zero=zero), ""


def precision_of(text: str) -> tuple[str | None, str]:
    """The Plan precision a precision cell states, or (None, reason)."""
    t = text.lower()
    if t.startswith("unclear"):
        return None, f"precision {text}"
    if t.startswith("fp32"):
        return None, "fp32 training is not a Plan precision (bf16, fp16, fp8, fp4)"
    if "lm_head" in t:
        return None, "fp8 on some layers only (lm_head ...): the Plan runs every GEMM at one precision"
    for word, prec in (("fp8", "fp8"), ("float8", "fp8"), ("fp16", "fp16"), ("bf16", "bf16")):
        if word in t:
            return prec, ""
    return None, "precision not stated"


def seq_of(row: pd.Series) -> int | None:
    """Tokens per sequence: the model cell's seq_len / block / T=, else the batch cells' 'seq x N' / 'xN ='."""
    return (first_int(cell_text(row["model"]), r"seq_len (\d+)", r"block (\d+)", r"\bT=(\d+)")
            or first_int(cell_text(row["micro_batch"]), r"seq x (\d+)")
            or first_int(cell_text(row["global_batch_tokens"]), r"x ?(\d+) ="))


def model_of(row: pd.Series, d: dict, tp: int, seq: int | None) -> tuple[ModelConfig | None, str]:
    """The model the model cell names: a catalogue preset by name (Llama) or by equal shape, else a ModelConfig of the
    stated shape in the source's style; (None, reason) where the shape or architecture cannot be expressed."""
    text = cell_text(row["model"])
    low, name = text.lower(), text.split("(")[0].split(",")[0].strip()
    if low.startswith("modded gpt"):  # the data set's name for modded-nanogpt's models from late 2024 on
        return None, "modded-nanogpt's modded GPT (value embeddings, U-net skip connections, ...) is not expressible"
    if "document-masked" in low:
        return None, "document-masked attention over packed sequences is not expressible (causal over seq_len only)"
    if seq is None:
        return None, "seq_len not stated"
    stated = dict(n_layers=first_int(text, r"n_layer (\d+)", r"(\d+)L\b", r"(\d+) layers"),
                  hidden=first_int(text, r"n_embd (\d+)", r"model_dim (\d+)", r"\d+L,\s*(\d+)\b"),
                  n_heads=first_int(text, r"n_head (\d+)", r"(\d+)H\b"), n_kv_heads=first_int(text, r"(\d+) KV"),
                  vocab=first_int(text, r"padded to (\d+)", r"vocab (\d+)"))  # nanoGPT's head runs the padded vocab
    llama = re.search(r"llama[ -]?\(?(2|3\.1|3)\)?\D*?(\d+)b", low)
    if llama:
        key = f"llama-{llama.group(1)}-{llama.group(2)}b"
        if key not in list_models():
            return None, f"{name}: no catalogue preset {key!r} and the row states no shape"
        preset = load_model(key)
        differ = [k for k, v in stated.items() if v is not None and v != getattr(preset, k)]
        if differ:
            return None, f"{name}: stated {', '.join(differ)} differ from the catalogue's {key}"
        return ModelConfig(**preset.model_dump() | dict(max_seq_len=max(seq, preset.max_seq_len))), ""
    if stated["n_layers"] is None or stated["hidden"] is None or "style" not in d:
        return None, f"{name}: model shape not stated"
    h, heads = stated["hidden"], stated["n_heads"]
    if heads is None:  # as calibrate.runs.table: the head count nearest head dim 128 that divides hidden and tp
        heads = min((a for a in range(tp, h + 1, tp) if h % a == 0), key=lambda a: abs(h / a - 128))
    vocab = stated["vocab"] or (50257 if re.search(r"gpt-?[23]", low) else None)  # the GPT-2 BPE tokenizer
    if vocab is None:
        return None, f"{name}: vocab not stated"
    style = d["style"] | {k: d[k] for k in ("tie_embeddings", "linear_bias") if k in d}
    try:
        model = ModelConfig(name=name, n_layers=stated["n_layers"], hidden=h, n_heads=heads,
                            n_kv_heads=stated["n_kv_heads"], head_dim=first_int(text, r"\d+H x (\d+)"),
                            ffn_hidden=4 * h, vocab=vocab, max_seq_len=seq, dropout=d.get("dropout", 0.0),
                            source=f"{row['source']}: {text}", **style)
    except InputError as err:
        return None, f"model: {err}"
    return same_preset(model, seq) or model, ""


def same_preset(model: ModelConfig, seq: int) -> ModelConfig | None:
    """The catalogue preset of exactly this shape and style that takes seq (the tightest max_seq_len), with the
    model's dropout; None if there is none."""
    skip = {"name", "source", "max_seq_len", "dropout"}
    shape = model.model_dump(exclude=skip)
    fits = [p for p in map(load_model, list_models()) if p.max_seq_len >= seq and p.model_dump(exclude=skip) == shape]
    best = min(fits, key=lambda p: p.max_seq_len, default=None)
    return best and ModelConfig(**best.model_dump() | dict(dropout=model.dropout))


def batch_of(row: pd.Series, d: dict, lay: dict, seq: int) -> tuple[tuple[int, int] | None, str]:
    """(micro_batch, global_batch) in sequences from the batch cells and the source's defaults, or (None, reason)."""
    mb_text, gb_text = cell_text(row["micro_batch"]).lower(), cell_text(row["global_batch_tokens"]).lower()
    if "schedule" in mb_text + gb_text or "->" in gb_text or "up to" in mb_text + gb_text:
        return None, "batch-size schedule: no one step shape"
    if "tokens" in mb_text and "seq" not in mb_text:
        return None, "micro-batch in tokens of packed documents"
    if gb_text.startswith("~"):
        return None, "global batch approximate"
    mb = (None if "not stated" in mb_text else first_int(mb_text, r"^\s*(\d+)\b")) or d.get("micro_batch")
    gb = first_int(gb_text, r"^\s*(\d+) seq")
    tokens = None if gb else (d.get("global_tokens") if "not stated" in gb_text else cell_number(gb_text))
    if tokens:
        if tokens % seq:
            return None, f"global batch of {tokens:g} tokens is not whole sequences of {seq}"
        gb = int(tokens) // seq
    if mb is None and gb and d.get("megatron_mb"):
        mb = 1 if lay["pp"] > 1 else gb // lay["dp"]
    if gb is None and mb and "accumulate" in d:
        gb = mb * lay["dp"] * (first_int(cell_text(row["parallel_layout"]), r"grad accum (\d+)") or d["accumulate"])
    if mb is None or gb is None:
        return None, f"{'micro-batch' if mb is None else 'global batch'} not stated"
    return (mb, gb), ""


def recompute_of(text: str, d: dict, n_layers: int) -> tuple[dict | None, str]:
    """The Plan's recompute fields for a recompute cell, or (None, reason)."""
    t = text.lower()
    if t.startswith(("none", "no ac")) or "false" in t:
        return dict(recompute="none"), ""
    if torchtitan_selective(t, n_layers):
        return torchtitan_selective(t, n_layers), ""
    if "toml" in t or t.startswith("selective"):
        return (dict(recompute=d["selective"]), "") if "selective" in d else (None, f"recompute {text!r} unclear")
    if "true" in t or "full" in t:
        return dict(recompute="full"), ""
    return dict(recompute=d.get("recompute", "none")), ""


def configure(row: pd.Series, micro_batch: int | None = None) -> tuple[ModelConfig | None, System | None, Plan | None,
                                                                       str]:
    """(model, system, resolved plan, reason) of one row, as far as it could be read (`micro_batch`: the memory rows'
    batch that fit, without accumulation)."""
    d = SOURCE_DEFAULTS[source_of(row)]
    flags, gpus, seq = cell_text(row["compile_flash_flags"]).lower(), cell_number(row["num_gpus"]), seq_of(row)
    lay, why_layout = layout_of(cell_text(row["parallel_layout"]), gpus, flags)
    model, why_model = model_of(row, d, lay.get("tp", 1), seq)
    sysname, why_system = system_of(cell_text(row["hardware"]), d)
    system = load_hardware(sysname) if sysname else None
    precision, why_precision = precision_of(cell_text(row["precision"]))
    why = why_system or why_layout or why_precision or why_model
    if why:
        return model, system, None, why
    batch, why = ((micro_batch, micro_batch * lay["dp"]), "") if micro_batch else batch_of(row, d, lay, seq)
    rec, why_rec = recompute_of(cell_text(row["recompute"]), d, model.n_layers)
    if "flexattention" in flags or "varlen" in flags:
        why = why or "document-masked / windowed attention (FlexAttention, varlen) is not expressible"
    if why or why_rec:
        return model, system, None, why or why_rec
    compile = "none" if re.search(r"eager|no (?:torch\.)?compile", flags) else (
        "model+loss" if "compile" in flags else d.get("compile", "none"))
    try:
        plan = Plan(gpus=int(gpus), tp=lay["tp"], pp=lay["pp"], cp=lay["cp"], dp=lay["dp"], micro_batch=batch[0],
                    global_batch=batch[1], seq_len=seq, zero=lay["zero"] or d.get("zero", 0), precision=precision,
                    attention=attention_of(d, flags), compile=compile, grad_dtype=d.get("grad_dtype"),
                    sequence_parallel="tp-comm-overlap" in flags, tp_comm_overlap=True if "tp-comm-overlap" in flags else None,  # TE: SP
                    overlap_dp_comm=d.get("overlap_dp_comm", True), stack=d["stack"], **rec)
        return model, system, resolve(plan, model, system), ""
    except InputError as err:
        return model, system, None, f"plan: {err}"


def attention_of(d: dict, flags: str) -> str:
    """The plan's attention for a row: the source's default, except that a source whose code ran its own unfused
    attention before it took SDPA (`flash_when_stated`: nanoGPT) runs flash only where the row names SDPA or flash."""
    if d.get("flash_when_stated") and re.search(r"sdpa|flash|scaled_dot_product", flags):
        return "flash"
    return d.get("attention", "flash")


def refusal_of(row: pd.Series) -> str:
    """Why the row's figure is not one step's time whatever its configuration (its metric, or its notes), or ''."""
    metric = cell_text(row["metric"])
    if metric not in TIMES:
        return f"metric {metric} is not a step time"
    return next((why for pattern, why, total in NOTE_REFUSALS if re.search(pattern, cell_text(row["notes"]))
                 and (metric in WALLCLOCK or not total)), "")


def measured_of(row: pd.Series, model: ModelConfig | None, system: System | None,
                plan: Plan | None) -> tuple[float, str]:
    """Seconds per optimizer step from a time metric (module docstring), or (nan, reason)."""
    metric, value, notes = cell_text(row["metric"]), float(row["value"]), cell_text(row["notes"])
    if metric == "step_time_s":
        return value, ""
    if metric in WALLCLOCK:
        steps = first_int(notes, r"(?:\bstep |--max_steps )(\d[\d,]*)", r"(\d[\d,]*) (?:training )?(?:steps|iters)\b")
        if not steps:
            return math.nan, "step count not stated: a wall-clock total cannot be turned into a step time"
        return value * WALLCLOCK[metric] / steps, ""
    if plan is None:
        return math.nan, "no step shape to convert the throughput with"
    if metric == "tokens_per_s":
        return plan.tokens_per_step / value, ""
    if metric == "tokens_per_s_per_gpu":
        return plan.tokens_per_step / plan.gpus / value, ""
    d = SOURCE_DEFAULTS[source_of(row)]
    if "flops" not in d:
        return math.nan, f"{metric}: the source's FLOP convention is not established"
    rate = {"tflops_per_gpu": value * 1e12, "aggregate_pflops": value * 1e15 / plan.gpus,
            "mfu": value / 100 * system.accelerator.peak_flops("bf16")}[metric]
    return step_flops(d["flops"], model, plan) / (plan.gpus * rate), ""


def read_table(csv: str | Path) -> pd.DataFrame:
    """The CSV with its columns and values checked; InputError naming the file, column or value."""
    path = Path(csv)
    if not path.is_file():
        raise InputError(f"small-scale runs CSV {str(path)!r}: no such file; valid: a CSV with the columns of "
                         "benchmarks/data/small_scale_runs_dev.README.md")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not a readable CSV ({str(err).splitlines()[0]})") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}; valid: the columns of "
                         "benchmarks/data/small_scale_runs_dev.README.md")
    for i, v in enumerate(df["value"]):
        if not re.fullmatch(r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?", v.strip()):
            raise InputError(f"{path}: row S{i + 1:03d}: value = {v!r}; valid: a non-negative number")
    return df.replace("", math.nan)


def trust_of(notes: str) -> str:
    """The trust the notes give ('trust A'), else B (measured, read from the source's text)."""
    return next((m.group(1) for m in re.finditer(r"\btrust ([ABC])\b", notes)), "B")


def load_small_cases(csv: str | Path = DEFAULT_CSV) -> list[Case]:
    """One Case per CSV row, in order (row_id S001, ...): a plan the estimate prices and the measured seconds per
    step, or the reason the row cannot be one."""
    out = []
    for i, row in read_table(csv).iterrows():
        model, system, plan, why = configure(row)
        measured, why_measured = measured_of(row, model, system, plan) if row["metric"] in TIMES else (math.nan, "")
        why = refusal_of(row) or why or why_measured
        if not why:
            try:
                estimate(model, system, plan)
            except InputError as err:
                why = f"estimate: {err}"
        notes = cell_text(row["notes"])
        out.append(Case(row_id=f"S{i + 1:03d}", group=group_of(row["source"], notes), trust=trust_of(notes),
                        model=model, system=system, plan=None if why else plan, measured_s=measured, reason=why))
    return out


def load_small_memory(csv: str | Path = DEFAULT_CSV) -> list[MemoryRun]:
    """The rows that measured memory (peak_memory_*, max_batch_that_fits) in CSV order, as the configuration that
    ran and its figure: a check may then test that a run that ran is said to fit. The view is the first of
    allocated / reserved the notes name; torchtitan logs the reserved peak."""
    out = []
    for i, row in read_table(csv).iterrows():
        metric, value, notes = cell_text(row["metric"]), float(row["value"]), cell_text(row["notes"])
        if metric not in MEMORY:
            continue
        batch = max(int(value), 1) if MEMORY[metric] is None else None
        model, system, plan, why = configure(row, micro_batch=batch)
        a, r = notes.lower().find("allocated"), notes.lower().find("reserved")
        view = "allocated" if a >= 0 and (r < 0 or a < r) else (
            "reserved" if r >= 0 or source_of(row) == "torchtitan" else "")
        out.append(MemoryRun(row_id=f"S{i + 1:03d}", group=group_of(row["source"], notes), trust=trust_of(notes),
                             model=model, system=system, plan=plan, metric=metric,
                             measured_gib=None if batch else value * MEMORY[metric], view="" if batch else view,
                             fits=value > 0, reason=why))
    return out
