"""Training logs -> rows of the published-runs CSV, so `calibrate --from-runs` fits logs and CSVs alike.

Two formats, detected from the text:

* Megatron-LM: the argument dump of `megatron/training/arguments.py` `_print_args` (lines
  `  name ........ value` between `---- arguments ----` and `---- end of arguments ----`, values printed
  with str()) and the iteration lines of `megatron/training/training.py` `training_log`
  (`iteration  20/ 500 | ... | elapsed time per iteration (ms): 1234.5 | ...`). The padded vocabulary
  comes from `megatron/training/tokenizer` ("> padded vocab (size: V) with N dummy tokens (new size: P)")
  when the argument dump predates the tokenizer.
* torchtitan: the per-step line of `torchtitan/train.py` (`step: N  loss: X  memory: M GiB(P%)  tps: T
  tflops: F  mfu: U%`, older versions `wps:`), the `Running with args: {...}` config dump, the
  `<DEVICE> capacity: NAME with X GiB memory` line of `torchtitan/components/metrics.py` and the
  `Building N-D device mesh with [...], [...]` line of `torchtitan/distributed/parallel_dims.py`.
  Without a config dump the train config TOML of the same stem next to the log is read.

Every failure is an `InputError` of one line naming the file, what is missing and what would be valid.
"""

from __future__ import annotations

import ast
import math
import re
import statistics
from pathlib import Path

import pandas as pd

from ...errors import InputError
from ...types import MAX_COUNT
from ...spec.plan.megatron_split import megatron_slots

COLUMNS = ["row_id", "source_group", "row_type", "trust", "model", "n_layers", "hidden", "ffn_hidden", "heads",
           "kv_heads", "vocab", "seq_len", "gpu_type", "n_gpus", "tp", "pp", "dp", "cp", "sp", "vpp",
           "micro_batch", "global_batch", "recompute", "zero_dist_opt", "precision", "framework", "iter_time_s",
           "tflops_per_gpu", "mfu_pct", "hfu_pct", "tokens_per_s_per_gpu", "tokens_per_s_total",
           "time_to_train_min", "other_metric", "derived_fields", "source", "notes",
           # beyond the dev set's columns: Megatron-LM's uneven pipeline split (table.plan_for reads them)
           "account_for_embedding", "account_for_loss", "first_stage_layers", "last_stage_layers"]
SUFFIXES = (".log", ".txt", ".out")
VALID = ("valid: a Megatron-LM log with an arguments block and log-interval lines, "
         "or a torchtitan log with 'step: N ... tps: T' lines")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Published shapes: layers, hidden, ffn_hidden, heads, kv_heads, vocab (Llama 2 / Llama 3 papers and configs).
FLAVORS = {
    ("llama3", "8b"): (32, 4096, 14336, 32, 8, 128256),
    ("llama3", "70b"): (80, 8192, 28672, 64, 8, 128256),
    ("llama3", "405b"): (126, 16384, 53248, 128, 8, 128256),
    ("llama2", "7b"): (32, 4096, 11008, 32, 32, 32000),
    ("llama2", "13b"): (40, 5120, 13824, 40, 40, 32000),
    ("llama2", "70b"): (80, 8192, 28672, 64, 8, 32000),
}


def _fail(name: str, what: str, valid: str = VALID) -> InputError:
    return InputError(f"run log {name}: {what}; {valid}")


def _base(name: str, framework: str) -> dict:
    return {"row_id": Path(name).stem, "source_group": "user-logs", "row_type": "training_run", "trust": "A",
            "framework": framework, "source": str(name), "gpu_type": ""}


def _after_warmup(values: list[float], name: str, what: str) -> list[float]:
    """Drop the first logged value: it includes start-up (compilation, allocator growth, data loader fill)."""
    if len(values) < 2:
        raise _fail(name, f"only {len(values)} {what} line(s); need at least 2 (the first is dropped as warm-up)")
    return values[1:]


# ---------------------------------------------------------------- Megatron-LM


def _megatron_args(text: str) -> dict:
    """The first `arguments` block as {name: Python value}; launcher prefixes ('0: ', '[default0]:') ignored."""
    m = re.search(r"-+ arguments -+\n(.*?)\n[^\n]*-+ end of arguments -+", text, re.DOTALL)
    args = {}
    for line in (m.group(1).splitlines() if m else []):
        kv = re.search(r"(\w+) \.+ (.*?)\s*$", line)
        if kv:
            try:
                args[kv.group(1)] = ast.literal_eval(kv.group(2))
            except (ValueError, SyntaxError):  # plain strings (e.g. selective, hybrid) print unquoted
                args[kv.group(1)] = kv.group(2)
    return args


OPTIONAL_SIZES = ["context_parallel_size", "data_parallel_size", "virtual_pipeline_model_parallel_size",
                  "num_layers_per_virtual_pipeline_stage", "num_query_groups", "ffn_hidden_size", "padded_vocab_size",
                  "vocab_size", "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"]


def _size(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_COUNT


def parse_megatron_log(text: str, name: str) -> dict:
    text = ANSI.sub("", text)
    a = _megatron_args(text)
    if not a:
        raise _fail(name, "no Megatron-LM '---- arguments ----' block found")
    need = ["num_layers", "hidden_size", "num_attention_heads", "seq_length", "world_size",
            "tensor_model_parallel_size", "pipeline_model_parallel_size", "micro_batch_size", "global_batch_size"]
    missing = [k for k in need if not isinstance(a.get(k), int)]
    if missing:
        raise _fail(name, f"arguments block lacks {', '.join(missing)}",
                    "valid: the full block Megatron-LM prints at start-up")
    # sizes the row is built from (a tp of 0 divided the world size by zero): whole numbers >= 1 where given
    wrong = [f"{k} = {a[k]!r}" for k in need + OPTIONAL_SIZES if a.get(k) is not None and not _size(a[k])]
    if wrong:
        raise _fail(name, f"arguments block has {', '.join(wrong)}", f"valid: whole numbers from 1 to {MAX_COUNT}")
    ms = [float(x) for x in re.findall(r"iteration\s+\d+/\s*\d+ \|.*?elapsed time per iteration \(ms\): "
                                       r"(\d+(?:\.\d*)?|\.\d+)", text)]  # a number: '.' alone is none
    if not ms:
        raise _fail(name, "no 'elapsed time per iteration (ms)' lines found")
    used = _after_warmup(ms, name, "'elapsed time per iteration (ms)'")
    layers, heads, tp, pp = a["num_layers"], a["num_attention_heads"], a["tensor_model_parallel_size"], \
        a["pipeline_model_parallel_size"]
    cp = a.get("context_parallel_size") or 1
    dp = a.get("data_parallel_size") or a["world_size"] // (tp * pp * cp)
    emb, loss = bool(a.get("account_for_embedding_in_pipeline_split")), bool(a.get("account_for_loss_in_pipeline_split"))
    if a.get("virtual_pipeline_model_parallel_size"):  # set by Megatron from either vpp argument
        vpp = a["virtual_pipeline_model_parallel_size"]
    elif a.get("num_layers_per_virtual_pipeline_stage"):  # counted in slots where embedding / loss are accounted
        vpp = megatron_slots(layers, emb, loss) // pp // a["num_layers_per_virtual_pipeline_stage"]
    else:
        vpp = 1
    # The tokenizer pads the vocabulary after the arguments are printed; its own line gives the padded size.
    padded = re.search(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)", text)
    vocab = a.get("padded_vocab_size") or (int(padded.group(1)) if padded else a.get("vocab_size"))
    recompute = a.get("recompute_granularity") or ("full" if a.get("checkpoint_activations") else "none")
    precision = "fp8" if a.get("fp8") else "bf16" if a.get("bf16") else "fp16" if a.get("fp16") else "fp32"
    # A model name the fitting code can read: 'llama' there selects SwiGLU/RMSNorm/RoPE, else GPT style.
    style = "llama-style" if a.get("swiglu") else "GPT"
    return {**_base(name, "Megatron-LM"),
            "model": f"Megatron-LM {style} {layers}L h{a['hidden_size']}",
            "n_layers": layers, "hidden": a["hidden_size"], "ffn_hidden": a.get("ffn_hidden_size"),
            "heads": heads, "kv_heads": a.get("num_query_groups") if a.get("group_query_attention") else heads,
            "vocab": vocab, "seq_len": a["seq_length"], "n_gpus": a["world_size"], "tp": tp, "pp": pp, "dp": dp,
            "cp": cp, "sp": "yes" if a.get("sequence_parallel") else "no", "vpp": vpp,
            "micro_batch": a["micro_batch_size"], "global_batch": a["global_batch_size"], "recompute": recompute,
            "zero_dist_opt": "distributed optimizer" if a.get("use_distributed_optimizer") else "none",
            "precision": precision, "iter_time_s": statistics.median(used) / 1000,
            "account_for_embedding": emb, "account_for_loss": loss,
            "first_stage_layers": a.get("decoder_first_pipeline_num_layers"),
            "last_stage_layers": a.get("decoder_last_pipeline_num_layers"),
            "notes": f"iter_time_s = median of {len(used)} 'elapsed time per iteration (ms)' log lines / 1000 "
                     f"(first of {len(ms)} dropped as warm-up)"}


# ---------------------------------------------------------------- torchtitan


def _titan_config(text: str, name: str) -> tuple[dict, str]:
    """The job config as {section: {key: value}}: the log's dump, else the TOML beside the log."""
    m = re.search(r"Running with args: (\{.*\})\s*$", text, re.MULTILINE)
    if m:
        try:
            cfg = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            cfg = None  # a dump we cannot read ({[1]: 2} is unhashable, not a syntax error): fall back to the TOML
        if isinstance(cfg, dict):  # not a set such as {1, 2}
            return cfg, "the log's config dump"
    toml = Path(name).with_suffix(".toml")
    if not toml.is_file():
        raise _fail(name, f"torchtitan log without a config dump ('Running with args: {{...}}') and no {toml}",
                    "valid: run with --job.print_args, or put the train config TOML of the same stem beside the log")
    import tomllib  # Python >= 3.11; imported here so the rest of the package loads on 3.10

    try:
        return tomllib.loads(toml.read_text(encoding="utf-8")), str(toml)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise _fail(name, f"{toml} is not valid TOML ({err})", "valid: torchtitan's train config TOML") from None


def _get(cfg: dict, key: str, sections: tuple[str, ...], default=None):
    """A config value from the first section that has it (older torchtitan kept parallelism under [training])."""
    for s in sections:
        if isinstance(cfg.get(s), dict) and cfg[s].get(key) is not None:
            return cfg[s][key]
    return default


def _compile(cfg: dict) -> str:
    """Plan.compile from a torchtitan config: [compile] enable with its components (default model and loss,
    config/job_config.py Compile), or the 2024 [training] compile flag, which compiled the blocks alone (its
    train.py left the loss eager). Compiling the loss alone is not a setting perfmodel prices: none."""
    enable = _get(cfg, "enable", ("compile",))
    if enable is not None:
        parts = set(_get(cfg, "components", ("compile",), ["model", "loss"])) if enable else set()
        return "model+loss" if {"model", "loss"} <= parts else "model" if "model" in parts else "none"
    return "model" if _get(cfg, "compile", ("training",), False) is True else "none"


def _world_size(text: str) -> int | None:
    """GPUs the log states: the device mesh torchtitan builds, or the torchrun command echoed by run_train.sh."""
    mesh = re.search(r"Building \d+-D device mesh with \[.*?\], \[([\d, ]+)\]", text)
    if mesh:
        sizes = [int(x) for x in re.findall(r"\d+", mesh.group(1))]  # '[8, , 8]' as 8 x 8, not int('')
        return math.prod(sizes) if sizes else None
    nproc = re.search(r"--nproc[_-]per[_-]node[= ](\d+)", text)
    nnodes = re.search(r"--nnodes[= ](\d+)\b(?!:)", text)
    return int(nproc.group(1)) * (int(nnodes.group(1)) if nnodes else 1) if nproc else None


def _fp8(cfg: dict, name: str, where: str) -> bool:
    """fp8 only when enabled: newer train configs carry a [float8] options section even when training bf16."""
    conv = _get(cfg, "converters", ("model",), [])
    if not isinstance(conv, (str, list, tuple)):
        raise _fail(name, f"[model] converters = {conv!r} in {where}", "valid: a list of converter names")
    converters = (conv if isinstance(conv, str) else " ".join(map(str, conv))).lower()
    return "float8" in converters or "mx" in converters or bool(_get(cfg, "enable_float8_linear", ("float8",)))


def parse_torchtitan_log(text: str, name: str) -> dict:
    text = ANSI.sub("", text)
    steps = re.findall(r"(?<!validate )\bstep:\s*(\d+)\b.*?\b(?:tps|wps):\s*(\d[\d,]*(?:\.\d+)?)", text)
    if not steps:
        raise _fail(name, "no torchtitan 'step: N ... tps: T' lines found")
    tps_all = [float(t.replace(",", "")) for _, t in steps]
    tps = statistics.median(_after_warmup(tps_all, name, "'step: N ... tps: T'"))
    if tps <= 0:
        raise _fail(name, f"median tps = {tps:g}", "valid: step lines with a positive tokens/s")
    cfg, where = _titan_config(text, name)
    model, flavor = str(_get(cfg, "name", ("model",), "")), str(_get(cfg, "flavor", ("model",), ""))
    shape = FLAVORS.get((re.sub(r"[^a-z0-9]", "", model.lower()), flavor.lower()))
    if shape is None:
        known = ", ".join(f"{m} {f.upper()}" for m, f in FLAVORS)
        raise _fail(name, f"[model] name/flavor = {model!r}/{flavor!r} in {where} is not a known model",
                    f"valid: {known}")
    par = ("parallelism", "training", "experimental")

    def count(key, sections=par, default=None, auto=False):
        """An integer setting >= 1 (or -1 where torchtitan reads it as 'derive it'), else one-line InputError."""
        v = _get(cfg, key, sections, default)
        if v is None or isinstance(v, bool) or not isinstance(v, int) or not (v >= 1 or (auto and v == -1)):
            raise _fail(name, f"{key} = {v!r} in {where}", f"valid: an integer >= 1{' or -1' if auto else ''}")
        return v

    tp, pp, cp = count("tensor_parallel_degree", default=1), count("pipeline_parallel_degree", default=1), \
        count("context_parallel_degree", default=1)
    rep, shard = count("data_parallel_replicate_degree", default=1), \
        count("data_parallel_shard_degree", default=-1, auto=True)
    if shard == -1:  # torchtitan: the shard degree takes the GPUs the other degrees leave
        world = _world_size(text)
        if world is None:
            raise _fail(name, f"data_parallel_shard_degree = -1 in {where} and the log states no world size",
                        "valid: set [parallelism] data_parallel_shard_degree to the number of FSDP shards")
        shard = max(1, world // (rep * tp * pp * cp))
    older = _get(cfg, "local_batch_size", ("training",)) is None and _get(cfg, "batch_size", ("training",))
    local = count("batch_size" if older else "local_batch_size", ("training",))
    seq = count("seq_len", ("training",))
    dp, n_gpus = rep * shard, rep * shard * tp * pp * cp
    gbs = count("global_batch_size", ("training",), -1, auto=True)
    gbs = gbs if gbs > 0 else local * dp  # -1: no gradient accumulation
    # tps = tokens of a data-parallel rank / (seconds x its tp*pp*cp GPUs), so a step of gbs*seq tokens
    # takes gbs*seq / (tps*n_gpus); with tp=pp=cp=1 and no accumulation this is local*seq/tps.
    iter_time = gbs * seq / (tps * n_gpus)
    mp = str(_get(cfg, "mixed_precision_param", ("training",), "bfloat16"))
    precision = ("fp8" if _fp8(cfg, name, where) else
                 {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(mp, mp))
    ac = str(_get(cfg, "mode", ("activation_checkpoint",), "selective")).lower()  # torchtitan's default
    gpu = re.search(r"\b[A-Z]+ capacity: (.+?) with [\d.]+ ?GiB memory", text)
    layers, hidden, ffn, heads, kv, vocab = shape
    return {**_base(name, "torchtitan"), "model": f"{model} {flavor}", "n_layers": layers, "hidden": hidden,
            "ffn_hidden": ffn, "heads": heads, "kv_heads": kv, "vocab": vocab, "seq_len": seq,
            "gpu_type": gpu.group(1).strip() if gpu else "", "n_gpus": n_gpus, "tp": tp, "pp": pp, "dp": dp,
            "cp": cp, "sp": "yes" if tp > 1 else "no",  # torchtitan's TP plan always shards norms on sequence
            "vpp": 1, "micro_batch": count("pipeline_parallel_microbatch_size", default=1) if pp > 1 else local,
            "global_batch": gbs, "recompute": ac, "zero_dist_opt": "FSDP2" if shard > 1 else "none",
            "precision": precision, "compile": _compile(cfg), "iter_time_s": iter_time, "tokens_per_s_per_gpu": tps,
            "notes": f"iter_time_s = global_batch*seq_len/(median tps*n_gpus) = {gbs}*{seq}/({tps:g}*{n_gpus}); "
                     f"median of {len(tps_all) - 1} step lines (first of {len(tps_all)} dropped as warm-up); "
                     f"layout from {where}"}


# ---------------------------------------------------------------- files


def parse_log(text: str, name: str) -> dict:
    """One row from a log's text, the format detected from what it prints."""
    if re.search(r"-+ arguments -+", text):
        return parse_megatron_log(text, name)
    if re.search(r"\bstep:\s*\d+\b.*?\b(?:tps|wps):", ANSI.sub("", text)):
        return parse_torchtitan_log(text, name)
    raise _fail(name, "neither a Megatron-LM arguments block nor torchtitan step lines found")


def runs_from_logs(path: str | Path) -> pd.DataFrame:
    """One row per log file found under `path` (a file or a directory; files *.log, *.txt, *.out searched
    recursively, sorted by name), in the dev-set CSV's columns."""
    p = Path(path)
    if p.is_file():
        files = [p]
    elif p.is_dir():
        files = sorted((f for f in p.rglob("*") if f.is_file() and f.suffix in SUFFIXES),
                       key=lambda f: (f.name, str(f)))
        if not files:
            raise InputError(f"run logs {p}: no *.log, *.txt or *.out files found; {VALID}")
    else:
        raise InputError(f"run logs {p}: no such file or directory; valid: a log file or a directory of logs")
    rows, skipped = [], []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            raise InputError(f"run log {f}: cannot be read ({err.strerror}); valid: a readable text file") from None
        try:
            rows.append(parse_log(text, str(f)))
        except InputError as err:
            if len(files) == 1:
                raise
            skipped.append(str(err))  # a directory may hold other text files (nvidia-smi dumps, configs)
    if not rows:
        raise InputError(f"run logs {p}: none of the {len(files)} files is a run log (first: {skipped[0]})")
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs["skipped"] = skipped
    return df
