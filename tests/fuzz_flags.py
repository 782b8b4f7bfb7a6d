"""The CLI fuzz's table: every flag of every subcommand, the kind of value it takes, and bad values of that kind.

`FLAGS[(command, flag)]` is a `Kind`: bad values tried every run (`fixed`), a hypothesis strategy of more (`more`),
the base invocation the bad value goes into, and flags given with it. A value is a string, or a `File` the
runner writes first (its name is what the flag gets). `tests/test_fuzz_cli.py` fails when the parser has a flag
this table lacks: a new flag needs a row here.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import typing
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from perfmodel.cli.argtypes import MAX_COUNT
from perfmodel.spec.plan.recompute import Recompute
from perfmodel.sweep.schema import OBJECTIVES

ROOT = Path(__file__).resolve().parents[1]
DEV_CSV = ROOT / "benchmarks" / "data" / "published_runs_dev.csv"


@dataclass(frozen=True)
class File:
    """A file the runner writes (relative to the working directory) before the call; the flag gets its name."""

    name: str
    data: bytes


@dataclass
class Kind:
    fixed: list
    more: st.SearchStrategy
    base: str | None = None  # key of BASES (default: the command's own)
    extra: tuple[str, ...] = ()  # given with the bad value
    names: tuple[str, ...] = ()  # what the message may name besides the flag and its dest
    path: bool = False  # a file or directory: naming the value given (the file) names the input too

    def __post_init__(self):
        self.fixed = list(self.fixed)


def _safe(s: str) -> bool:
    return "\x00" not in s


TEXT = st.text(max_size=16).filter(_safe)


def _int_ok(s, least, most) -> bool:
    try:
        return least <= int(s) <= most
    except ValueError:
        return False


def _float(s) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


COUNT_BAD = ["0", "-1", "1.5", "abc", "", "nan", "inf", "1e400", "99999999999999999999999"]


def count(least: int = 1, most: int = MAX_COUNT, **kw) -> Kind:
    fixed = [v for v in COUNT_BAD if not _int_ok(v, least, most)] + [str(least - 1), str(most + 1)]
    more = st.one_of(st.integers(max_value=least - 1).map(str), st.integers(min_value=most + 1).map(str),
                     st.floats().map(repr), TEXT.filter(lambda s: not _int_ok(s, least, most)))
    return Kind(fixed, more, **kw)


def number(low: float = 0.0, high: float | None = None, above: bool = False, **kw) -> Kind:
    def bad(s) -> bool:
        v = _float(s)
        return v is None or not math.isfinite(v) or (v <= low if above else v < low) or (high is not None and v > high)

    fixed = ["nan", "inf", "-inf", "-1", "abc", "", "1e400", repr(low) if above else repr(low - 1)]
    fixed += [repr(high * 10 + 1)] if high is not None else []
    more = st.one_of(st.floats().map(repr), st.floats(max_value=low).map(repr), TEXT).filter(bad)
    return Kind([v for v in fixed if bad(v)], more, **kw)


def seconds(**kw) -> Kind:
    return number(0.0, above=True, **kw)


def choice(choices, convert=None, **kw) -> Kind:
    def bad(s) -> bool:
        try:
            return (convert(s) if convert else s) not in choices
        except (TypeError, ValueError):
            return True

    first = sorted(map(str, choices))[0]
    fixed = ["", "bogus", "x" * 80, " " + first, first.upper() + "!"]
    return Kind([v for v in fixed if bad(v)], TEXT.filter(bad), **kw)


def _stages_ok(s: str) -> bool:
    """A valid --stages value (RATE@SECONDS;...)."""
    from perfmodel.errors import InputError
    from perfmodel.spec.serving.workload import parse_stages

    try:
        parse_stages(s)
    except InputError:
        return False
    return True


def _old_or_no_version(s: str) -> bool:
    """--stack-version's bad values for the default stack (trtllm, whose profile starts at 0.14): no leading dotted
    number, or one older than 0.14."""
    from perfmodel.errors import InputError
    from perfmodel.spec.serving.schema import version_key

    try:
        return version_key(s) < (0, 14)
    except InputError:
        return True


def stack_in(**kw) -> Kind:
    """--stack: a stack profile's name, or a release line's with an optional '@VERSION' of its releases."""
    from perfmodel.spec.stack.profile import STACKS
    from perfmodel.spec.stack.release import load_line, release_lines

    valid = set(STACKS) | {f"{n}{v}" for n in release_lines()
                           for v in ("", *(f"@{r.version}" for r in load_line(n).releases))}
    fixed = ["", "bogus", "x" * 80, "megatron-core@26.08", "megatron-bridge@", "megatron-bridge@27.01"]
    return Kind(fixed, TEXT.filter(lambda s: s.lower() not in valid), **kw)  # a catalogue name in any case: valid


def flag_switch(**kw) -> Kind:
    """A store_true flag: the only bad value is one given to it (`--flag=VALUE`)."""
    return Kind(["=1", "=yes", "="], TEXT.map(lambda s: "=" + s), **kw)


def script_args(**kw) -> Kind:
    """--script-args: words the shell cannot split (an unclosed quote)."""
    def unsplittable(s: str) -> bool:
        try:
            shlex.split(s)
        except ValueError:
            return True
        return False

    return Kind(["'", '"', "a 'b", 'x"y'], TEXT.filter(unsplittable), **kw)


def _junk(suffix: str):
    return st.binary(max_size=64).map(lambda b: File(f"junk{suffix}", b))


PLAN_BAD = ["missing.json", "adir", "empty.json", "binary.json", "latin1.json", "list.json", "spec.yaml",
            "runs.csv", "truncated.json", "wrongplan.json", ""]
MODEL_BAD = ["nosuch-model", "", "missing.yaml", "adir", "empty.yaml", "binary.yaml", "plan.json", "runs.csv",
             "list.json", "truncated.json", "spec.yaml"]
HW_BAD = ["nosuch-system", "", "missing.yaml", "adir", "empty.yaml", "binary.yaml", "plan.json", "runs.csv",
          "list.json", "truncated.json", "model.yaml"]


def plan_in(**kw) -> Kind:
    return Kind(PLAN_BAD, st.one_of(_junk(".json"), st.dictionaries(TEXT, st.integers() | TEXT, max_size=3).map(
        lambda d: File("obj.json", json.dumps(d).encode()))), path=True, **kw)


def _preset(s: str, names) -> bool:
    return s.strip().lower() in {n.lower() for n in names()}


def model_in(**kw) -> Kind:
    from perfmodel.spec.model.catalogue import list_models

    return Kind(MODEL_BAD, st.one_of(_junk(".yaml"), _junk(".json"), TEXT.filter(
        lambda s: s and not _preset(s, list_models))), path=True, **kw)


def hardware_in(names=(), **kw) -> Kind:
    from perfmodel.spec.hardware.system import list_systems

    names = ("hardware", "system", "spec", *names)
    return Kind(HW_BAD, st.one_of(_junk(".yaml"), TEXT.filter(lambda s: s and not _preset(s, list_systems))),
                path=True, names=names, **kw)


HOST_BAD = ["nosuch-host", "", "missing.yaml", "adir", "empty.yaml", "binary.yaml", "plan.json", "runs.csv",
            "list.json", "truncated.json", "spec.yaml"]


def host_in(**kw) -> Kind:
    """--host: a catalogue host (perfmodel hardware hosts) or a host YAML file."""
    from perfmodel.spec.host.cpu import list_hosts

    return Kind(HOST_BAD, st.one_of(_junk(".yaml"), TEXT.filter(lambda s: s and not _preset(s, list_hosts))),
                path=True, names=("host", *kw.pop("names", ())), **kw)


READ_ONLY = "/proc/sys"  # a directory even root cannot write into (Linux; elsewhere: one that does not exist)


def output(suffix: str, **kw) -> Kind:
    """An output file: missing directory, a directory, under a file, wrong suffix."""
    fixed = [f"nodir/out{suffix}", "adir", f"afile.txt/out{suffix}", "", f"{READ_ONLY}/out{suffix}"]
    fixed += ["out.txt"] if suffix else []
    more = st.sampled_from([f"nodir/{{}}{suffix}", f"afile.txt/{{}}{suffix}"] + (["{}.txt"] if suffix else [])).flatmap(
        lambda pattern: st.from_regex(r"[a-z]{1,8}", fullmatch=True).map(pattern.format))
    return Kind(fixed, more, **kw)


def directory(**kw) -> Kind:
    """An output directory: a file, or under one."""
    more = st.from_regex(r"[a-z]{1,8}", fullmatch=True).map(lambda s: f"afile.txt/{s}")
    return Kind(["afile.txt", "afile.txt/sub", "", f"{READ_ONLY}/sub"], more, **kw)


def name(good=(), **kw) -> Kind:
    return Kind(["", "nosuch", "a b", "-x", "../x", "x" * 300], TEXT.filter(lambda s: s not in good), **kw)


def gpu_list() -> Kind:
    fixed = ["", ",", "8,", ",8", "0", "-8", "8,abc", "8,,16", "1.5", "99999999999999999999999", "8;16", "8,0"]
    more = st.one_of(st.lists(st.integers(max_value=0) | st.integers(min_value=MAX_COUNT + 1), min_size=1,
                              max_size=3).map(lambda v: ",".join(map(str, [8] + v))),
                     TEXT.filter(lambda s: not all(_int_ok(p, 1, MAX_COUNT) for p in s.split(","))))
    return Kind(fixed, more)


def recompute_modules(valid=("core_attn", "mlp", "layernorm"), **kw) -> Kind:
    """--recompute-modules with --recompute selective: a list with a name that is no module (argparse refuses it)
    or a module the base's model lacks (gpt2-124m: no experts, no latent attention; spec.plan.layout.resolve refuses it)."""
    def bad(s: str) -> bool:
        return any(p.strip() not in valid for p in s.split(","))

    fixed = ["", ",", "core_attn,", ",mlp", "bogus", "core_attn,,mlp", "CORE_ATTN", "core-attn", "moe", "moe_act",
             "shared_experts", "mla_up_proj", "core_attn,moe", "core_attn mlp", "core_attn;mlp"]
    names = st.sampled_from(["core_attn", "mlp", "layernorm", "moe", "moe_act", "shared_experts", "mla_up_proj"])
    more = st.one_of(st.lists(names | TEXT, min_size=1, max_size=4).map(",".join), TEXT).filter(bad)
    return Kind([v for v in fixed if bad(v)], more, extra=("--recompute", "selective"), **kw)


def offload_modules(**kw) -> Kind:
    """--offload-modules: a list with a name that is no offloadable module (argparse refuses it;
    perfmodel.spec.plan.offload_rules.OFFLOAD_MODULES)."""
    from perfmodel.spec.plan.offload_rules import OFFLOAD_MODULES

    def bad(s: str) -> bool:
        return any(p.strip() not in OFFLOAD_MODULES for p in s.split(","))

    fixed = ["", ",", "core_attn,", ",attn_proj", "bogus", "core_attn,,attn_proj", "CORE_ATTN", "core-attn",
             "core_attn attn_proj", "core_attn;attn_proj", "mlp"]
    names = st.sampled_from([*OFFLOAD_MODULES, "mlp", "layernorm"])
    more = st.one_of(st.lists(names | TEXT, min_size=1, max_size=4).map(",".join), TEXT).filter(bad)
    return Kind([v for v in fixed if bad(v)], more, **kw)


def tensor_list(valid: tuple, fixed: list, others: list, **kw) -> Kind:
    """--recompute-saved / --recompute-offloaded with --recompute names: a list with a name that is not among
    `valid` (argparse refuses it)."""

    def bad(s: str) -> bool:
        return any(p.strip() not in valid for p in s.split(","))

    names = st.sampled_from([*valid, *others])
    more = st.one_of(st.lists(names | TEXT, min_size=1, max_size=4).map(",".join), TEXT).filter(bad)
    return Kind([v for v in fixed if bad(v)], more, **{"extra": ("--recompute", "names"), **kw})


def recompute_saved(**kw) -> Kind:
    return tensor_list(("qkv", "attention", "out_proj", "mlp_in"), ["", ",", "qkv,", ",out_proj", "mlp_out", "QKV",
                       "qkv;out_proj", "qkv out_proj", "context", "core_attn"], ["mlp_out", "context", "query_proj"],
                       **kw)


def recompute_offloaded(**kw) -> Kind:
    return tensor_list(("layer_input", "qkv", "attention", "out_proj", "mlp_in"), ["", ",", "layer_input,",
                       "decoder_layer_input", "LAYER_INPUT", "qkv;out_proj", "mlp_out"],
                       ["decoder_layer_input", "mlp_out", "query_proj"], **kw)


def parsed_by(action: argparse.Action, refuse=(), **kw) -> Kind:
    """A number flag checked by its own parser type (`--headroom`, whose bounds differ between predict and
    search): bad values are what that type refuses; `refuse` must be refused whatever the bounds."""
    def bad(s) -> bool:
        try:
            action.type(s)
        except (argparse.ArgumentTypeError, TypeError, ValueError):
            return True
        return False

    fixed = ["nan", "inf", "-inf", "-1", "-0.001", "abc", "", "1e400", "0.995", "1", "1.0", "1.5", "100", "0x1"]
    more = st.one_of(st.floats().map(repr), st.floats(min_value=0.9, max_value=2.0).map(repr), TEXT).filter(bad)
    return Kind(list(refuse) + [v for v in fixed if v not in refuse and bad(v)], more, **kw)


# refused as a headroom by every command: outside [0, 1), or no number
HEADROOM_BAD = ("-1", "1", "1.0", "nan", "inf", "abc", "")

ONLY_COUNTS = ["tp", "pp", "cp", "vpp", "ep", "etp", "micro_batch"]
ONLY_FIELDS = ONLY_COUNTS + ["recompute", "sequence_parallel", "zero"]
RECOMPUTES = typing.get_args(Recompute)  # none, selective, full, per-op: what --only recompute= takes


def _only_ok(field: str, values: str) -> bool:
    """Whether search would take --only FIELD=VALUES."""
    def ok(v: str) -> bool:
        v = v.strip()
        if field == "recompute":
            return v in RECOMPUTES
        if field == "sequence_parallel":
            return v.lower() in ("true", "false", "on", "off", "1", "0")
        return _int_ok(v, 0, 3) if field == "zero" else _int_ok(v, 1, 2**80)
    return all(ok(v) for v in values.split(","))


def only() -> Kind:
    fixed = ["tp", "tp=", "=1", "foo=1", "tp=a", "tp=0", "tp=-1", "tp=1.5", "recompute=bogus", "zero=7",
             "sequence_parallel=maybe", "tp=1,,2", "micro-batch=0", "zero=-1"]
    pairs = st.tuples(st.sampled_from(ONLY_FIELDS), TEXT | st.lists(st.integers(max_value=0) | st.integers(
        min_value=4), min_size=1, max_size=3).map(lambda v: ",".join(map(str, v))))
    more = st.one_of(pairs.filter(lambda p: p[1].strip() and not _only_ok(*p)).map("=".join),
                     TEXT.filter(lambda s: s.partition("=")[0].strip().replace("-", "_") not in ONLY_FIELDS))
    return Kind(fixed, more, names=("--only",))


def hw_list() -> Kind:
    fixed = ["", ",", "dgx-h100,", "nosuch", "dgx-h100,nosuch", "missing.yaml", "adir", "empty.yaml", "binary.yaml"]
    from perfmodel.spec.hardware.system import list_systems

    def bad(s: str) -> bool:  # some name is empty, or neither a preset nor the zoo's spec
        return any(not p.strip() or not (_preset(p, list_systems) or p.strip() == "spec.yaml") for p in s.split(","))
    return Kind(fixed, TEXT.filter(bad), names=("hardware", "system", "spec"))


def tokens() -> Kind:
    fixed = ["abc", "0", "-1", "nan", "inf", "1e400", "15X", "", "1e400T", "0e5"]
    return Kind(fixed, st.one_of(st.floats(max_value=0).map(repr), TEXT.filter(lambda s: not s.strip()[:1].isdigit())))


def ramp() -> Kind:
    fixed = ["a", "1:", ":1", "0:10", "10:0", "-1:5", "1:2:3", "8:10,", "99999999999999999999999:1", "3:10",
             "8:99999999999999999999999", "16:10", "4:1e9"]
    pair = st.tuples(st.integers(max_value=0) | st.integers(min_value=MAX_COUNT + 1), st.integers(min_value=1,
                                                                                                max_value=9))
    return Kind(fixed, st.one_of(pair.map(lambda p: f"{p[0]}:{p[1]}"), pair.map(lambda p: f"{p[1]}:{p[0]}"),
                                 TEXT.filter(lambda s: ":" not in s)), names=("--ramp", "ramp"))


def yaml_in(**kw) -> Kind:
    """A YAML mapping file (--storage): missing, a directory, empty, binary, not a mapping, wrong fields/values."""
    fields = st.sampled_from(["write_gbps", "read_gbps", "node_gbps", "staging_gbps", "devices_per_node",
                              "write_efficiency", "read_efficiency", "bogus"])
    values = st.one_of(st.floats(), st.integers(max_value=0), st.integers(min_value=2**63), TEXT, st.booleans(),
                       st.none(), st.lists(st.integers(), max_size=2))
    docs = st.dictionaries(fields, values, min_size=1, max_size=3).map(
        lambda d: File("store.yaml", json.dumps(d, allow_nan=True).encode()))
    fixed = ["missing.yaml", "adir", "empty.yaml", "binary.yaml", "latin1.json", "list.json", "plan.json",
             "truncated.json", "spec.yaml", "store-nan.yaml", "store-negative.yaml", "store-huge.yaml",
             "store-string.yaml"]
    return Kind(fixed, st.one_of(docs, _junk(".yaml")), path=True, **kw)


def text_arg(**kw) -> Kind:
    """Free text passed on (torchrun's rendezvous settings): empty, spaces, an option-like word."""
    return Kind(["", " ", "a b", "\t"], TEXT.filter(lambda s: not s or any(c.isspace() for c in s)), **kw)


def runs_in(**kw) -> Kind:
    fixed = ["missing.csv", "empty.csv", "header.csv", "binary.csv", "latin1.csv", "adir", "emptydir", "plan.json",
             "truncated.csv", "notes.log"]
    return Kind(fixed, _junk(".csv"), names=("--from-runs", "run log"), path=True, **kw)


def trace_in(**kw) -> Kind:
    """--from-trace / --trace: a Kineto trace file or folder: missing, an empty folder, empty, binary, not JSON, a JSON
    with no traceEvents, a bare list of no events, truncated."""
    fixed = ["missing.json", "adir", "empty.json", "binary.json", "spec.yaml", "plan.json", "list.json",
             "truncated.json", "runs.csv"]
    names = ("trace", "--from-trace", *kw.pop("names", ()))
    return Kind(fixed, _junk(".json"), names=names, path=True, **kw)


def config_in(**kw) -> Kind:
    """A framework config file (perfmodel import, --config): missing, a folder, empty, binary, not the framework's
    format, truncated."""
    fixed = ["missing.toml", "adir", "empty.json", "binary.yaml", "plan.json", "truncated.json", "list.json",
             "runs.csv"]
    return Kind(fixed, _junk(".toml"), names=("config", *kw.pop("names", ())), path=True, **kw)


def _command_refused(kind: str, text: str) -> bool:
    """A server or benchmark command the reader refuses (or fails on: the CLI call then shows how)."""
    from perfmodel.errors import InputError
    from perfmodel.ingest.serving import read_bench, read_server

    try:
        (read_server if kind == "server" else read_bench)(text)
    except InputError:
        return True
    except Exception:  # noqa: BLE001 - the fuzz call reports it
        return True
    return False


def serving_cmd(kind: str) -> Kind:
    """--server-cmd / --bench-cmd: a command the reader refuses, one a flag of the base contradicts (its lengths,
    16 and 16; its model, gpt2-124m), or none at all."""
    if kind == "server":
        fixed = ["", " ", "x", "'", "tgi-launcher --model-id m", "vllm serve m -tp 0", "vllm serve m -tp four",
                 "vllm serve m --speculative-config '{'", "vllm serve meta-llama/Llama-3.1-70B-Instruct",
                 "python -m sglang.launch_server --model-path m --tp 4 --dp 3 --enable-dp-attention",
                 "vllm serve m --kv-cache-dtype fp4", "vllm serve a\nvllm serve b"]
        names = ("server command", "serve command", "launch_server command")
    else:
        fixed = ["", "x", "'", "vllm bench serve --request-rate 0", "vllm bench serve --num-prompts 0",
                 "python -m sglang.bench_serving --dataset-name random --random-input-len 99",
                 "vllm bench serve --random-input-len 16 --random-output-len 16 --random-range-ratio 2"]
        names = ("benchmark command", "bench serve command", "bench_serving command")
    return Kind(fixed, TEXT.filter(lambda s: _command_refused(kind, s)), names=names)


def bench_file_in() -> Kind:
    """--bench-file: missing, a folder, empty, binary, not an inference-perf config, not a command."""
    fixed = ["missing.yaml", "adir", "empty.yaml", "binary.yaml", "plan.json", "list.json", "truncated.json",
             "runs.csv", "spec.yaml", "empty.txt"]
    return Kind(fixed, st.one_of(_junk(".yaml"), _junk(".sh")), names=("benchmark command", "inference-perf"),
                path=True)


def data_in() -> Kind:
    """--data (an empty or too short file: tests/fuzz_corpus/cli, a known bug in execute/)."""
    return Kind(["missing.txt", "adir", ""], st.sampled_from(["missing.txt", "adir", "afile.txt/x"]), path=True)


# ---------------------------------------------------------------------------------------------- the files
PRED = ["--model", "gpt2-124m", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch",
        "1", "--global-batch", "8", "--seq-len", "1024"]
CONFIG_LAUNCH = ["--hardware", "dgx-h100", "--gpus", "8"]  # what a torchtitan TOML leaves to its launcher
BASES = {
    "": ["models", "list"],
    "predict": ["predict", *PRED],
    "predict-plan": ["predict", "--plan", "plan.json"],
    "predict-config": ["predict", "--config", "cfg.toml", "--from", "torchtitan", *CONFIG_LAUNCH],
    "forecast-config": ["forecast", "--tokens", "1e9", "--config", "cfg.toml", "--from", "torchtitan", *CONFIG_LAUNCH],
    "import": ["import", "cfg.toml", "--from", "torchtitan", *CONFIG_LAUNCH],
    "forecast": ["forecast", *PRED, "--tokens", "1e9"],
    "forecast-plan": ["forecast", "--tokens", "1e9", "--plan", "plan.json"],
    "search": ["search", "--model", "gpt2-124m", "--hardware", "dgx-h100", "--gpus", "8", "--global-batch", "8",
               "--seq-len", "1024"],
    "whatif": ["whatif", "--model", "gpt2-124m", "--gpus", "8", "--global-batch", "8", "--seq-len", "1024",
               "--hardware", "dgx-h100,dgx-a100-80gb"],
    "infer": ["infer", "--model", "gpt2-124m", "--hardware", "dgx-h100", "--input-len", "16", "--output-len", "16"],
    "export": ["export", "plan.json", "--to", "megatron"],
    "app": ["app", "--port", "0"],  # every bad value is refused before the server starts
    "execute": ["execute", "cpu1.json", "--nproc", "1", "--device", "cpu"],
    "execute-ck": ["execute", "cpu1.json", "--nproc", "1", "--device", "cpu", "--steps", "4", "--checkpoint-dir",
                   "ck", "--checkpoint-every", "2"],
    "validate": ["validate", "cpu1.json", "--nproc", "1", "--out-dir", "val"],
    "validate-sweep": ["validate", "--out-dir", "val", "--hardware", "spec.yaml", "--sweep", "cpu-smoke"],
    "calibrate": ["calibrate", "--device", "cpu", "--quick", "--output", "cal.yaml"],
    "calibrate-runs": ["calibrate", "--from-runs", "runs.csv", "--hardware", "dgx-h100", "--output", "fit.yaml"],
    "calibrate-trace": ["calibrate", "--from-trace", "trace.json.gz"],
    "calibrate-trace-config": ["calibrate", "--from-trace", "trace.json.gz", "--config", "cfg.toml", "--from",
                               "torchtitan"],
    "hardware": ["hardware", "show", "dgx-h100"],
    "hardware show": ["hardware", "show", "dgx-h100"],
    "hardware hosts": ["hardware", "hosts", "xeon-8480c"],
    "models": ["models", "show", "gpt2-124m"],
    "models show": ["models", "show", "gpt2-124m"],
    "stacks": ["stacks", "show", "megatron-core"],
    "stacks show": ["stacks", "show", "megatron-core"],
    "sweep": ["sweep", "sw.yaml", "--out", "swout", "--workers", "1", "--quiet"],
    "sweep-report": ["sweep", "report", "swdone"],
    "sweep-ray": ["sweep", "sw.yaml", "--out", "swout", "--quiet"],
}
# Positionals: the index of their value in the base.
POSITIONAL = {("", "cmd"): 0, ("export", "plan"): 1, ("import", "files"): 1, ("execute", "plans"): 1, ("validate", "plans"): 1,
              ("hardware", "action"): 1, ("models", "action"): 1, ("hardware show", "name"): 2,
              ("hardware hosts", "host"): 2,
              ("models show", "name"): 2, ("stacks", "action"): 1, ("stacks show", "name"): 2,
              ("sweep", "target"): 1, ("sweep", "dir"): 2}
DIRS = ("adir", "emptydir")


def zoo_files(plan_json: bytes, cpu_plan_json: bytes, runs_csv: bytes, spec_yaml: bytes) -> dict[str, bytes]:
    """Every file the bases and the bad values name (plus the directories in DIRS)."""
    store = {"write_gbps": 100.0, "read_gbps": 100.0, "node_gbps": 50.0, "staging_gbps": 20.0}
    return {
        "plan.json": plan_json, "cpu1.json": cpu_plan_json, "runs.csv": runs_csv, "spec.yaml": spec_yaml,
        "trace.json.gz": (ROOT / "tests" / "fixtures" / "traces" / "hta" / "mi250_rocm.json.gz").read_bytes(),
        "cfg.toml": (ROOT / "tests" / "fixtures" / "configs" / "torchtitan" / "llama3_8b.toml").read_bytes(),
        "model.yaml": b"name: m\nn_layers: 2\nhidden: 64\nn_heads: 4\nffn_hidden: 256\nvocab: 512\nmax_seq_len: 64\n",
        "empty.json": b"", "empty.yaml": b"", "empty.csv": b"", "empty.txt": b"", "tiny.txt": b"hello",
        "binary.json": bytes(range(256)), "binary.yaml": bytes(range(256)) * 2, "binary.csv": b"\x00\xff" * 64,
        "latin1.json": '{"name": "caf\xe9"}'.encode("latin-1"), "latin1.csv": runs_csv.replace(b"H100", b"H\xe9100"),
        "list.json": b"[1, 2]", "truncated.json": plan_json[: len(plan_json) // 2],
        "wrongplan.json": b'{"version": 1, "plan": {"tp": "x"}}',
        "header.csv": runs_csv.split(b"\n")[0] + b"\n", "truncated.csv": runs_csv[: len(runs_csv) * 2 // 3],
        "notes.log": b"nothing to see here\n", "afile.txt": b"a file, not a directory\n",
        "store-nan.yaml": json.dumps({**store, "write_gbps": float("nan")}).encode(),
        "store-negative.yaml": json.dumps({**store, "read_gbps": -1}).encode(),
        "store-huge.yaml": json.dumps({**store, "write_gbps": 1e308, "node_gbps": 1e-308}).encode(),
        "store-string.yaml": json.dumps({**store, "node_gbps": "fast"}).encode(),
        "sw.yaml": SWEEP_YAML, "sw-badaxis.yaml": SWEEP_YAML.replace(b"flops:", b"accelerator.nosuch:"),
        "sw-badmodel.yaml": SWEEP_YAML.replace(b"gpt2-124m", b"nosuch-model"),
    }


# A one-point sweep (perfmodel sweep): the base of its flags, and of `sweep report` once run (test_fuzz_cli's zoo)
SWEEP_YAML = (b"name: tiny\nsystems: [dgx-h100]\naxes:\n  flops: {factors: [1]}\nworkloads:\n  - name: t\n"
              b"    train: {model: gpt2-124m, gpus: 8, global_batch: 8, seq_len: 1024}\n")


# ---------------------------------------------------------------------------------------------- the table
CHOICES = {"--format": None}  # choices flags read their choices from the parser (see table())


def _plan_flags(cmd: str) -> dict:
    counts = ["--gpus", "--tp", "--pp", "--dp", "--dp-replicate", "--cp", "--vpp", "--ep", "--etp", "--micro-batch",
              "--global-batch", "--seq-len", "--first-stage-layers", "--last-stage-layers"]
    out = {f: count() for f in counts}
    out |= {"--plan": plan_in(base=f"{cmd}-plan", names=("plan file",)), "--model": model_in(),
            "--hardware": hardware_in(names=("system", "spec")), "--expert-imbalance": number(1.0, 64.0),
            "--moe-capacity-factor": number(0.0, 64.0, above=True),
            "--powersgd-rank": count(extra=("--grad-compression", "powersgd")),
            # gpt2-124m's hidden is 768: a larger rank is a count, but no low-rank adapter (plan.lora.rank)
            "--lora-rank": count(names=("lora.rank",)),
            "--recompute-modules": recompute_modules(),
            "--recompute-saved": recompute_saved(),
            "--recompute-offloaded": recompute_offloaded(),
            "--loss-chunks": count(), "--host": host_in(), "--offload-modules": offload_modules(),
            # gpt2-124m has 12 layers: 12 or more offloaded is a count, but every layer (Megatron-Core refuses N >= L)
            "--activation-offload-layers": count(extra=("--recompute", "none")),
            # gpt2-124m has 12 layers: 13 is a count, but too many
            "--recompute-num-layers": count(extra=("--recompute", "full"))}
    out["--recompute-num-layers"].fixed += ["13", "1000"]
    out["--activation-offload-layers"].fixed += ["12", "1000"]
    out["--lora-rank"].fixed += ["769"]
    out["--stack"] = stack_in()
    out |= {"--config": config_in(base=f"{cmd}-config"), "--name": name(base=f"{cmd}-config")}
    out |= {"--vocab-size": count(), "--script-args": script_args()}
    out |= {f: flag_switch() for f in ("--moe-overlap", "--moe-pad-to-capacity", "--sequence-parallel", "--no-overlap-dp-comm",
                                       "--account-for-embedding", "--account-for-loss", "--optimizer-offload",
                                       "--moe-dense-dispatch")}
    return out


def table(parser: argparse.ArgumentParser) -> dict[tuple[str, str], Kind]:
    """(command, flag) -> Kind for every flag the table knows; choices flags get bad choices of their own list."""
    from perfmodel.cli.commands.forecast import RANGES  # the API's ranges (forecast.py, energy.py)
    from perfmodel.validate.sweeps import SWEEPS

    t = {}
    t |= {("predict", f): k for f, k in _plan_flags("predict").items()}
    t |= {("predict", "--save-plan"): output(".json"), ("predict", "--plot"): output(".png"),
          ("predict", "--trace"): trace_in(names=("--trace",))}
    t |= {("forecast", f): k for f, k in _plan_flags("forecast").items()}
    t |= {("forecast", "--tokens"): tokens(), ("forecast", "--ramp"): ramp(), ("forecast", "--plot"): output(".png"),
          ("forecast", "--storage"): yaml_in(names=("storage",))}
    t |= {("forecast", f): number(r["low"], r["high"], above=r.get("above", False)) for f, r in RANGES.items()}
    t |= {("search", "--model"): model_in(), ("search", "--hardware"): hardware_in(names=("system", "spec")),
          ("search", "--gpus"): gpu_list(), ("search", "--global-batch"): count(), ("search", "--seq-len"): count(),
          ("search", "--powersgd-rank"): count(extra=("--grad-compression", "powersgd")),
          ("search", "--lora-rank"): count(names=("lora.rank",)),
          ("search", "--expert-imbalance"): number(1.0, 64.0), ("search", "--moe-overlap"): flag_switch(),
          ("search", "--moe-capacity-factor"): number(0.0, 64.0, above=True),
          ("search", "--moe-pad-to-capacity"): flag_switch(),
          ("search", "--only"): only(), ("search", "--top"): count(0), ("search", "--output"): output(".json"),
          ("search", "--recompute-saved"): recompute_saved(extra=("--only", "recompute=names")),
          ("search", "--recompute-offloaded"): recompute_offloaded(extra=("--only", "recompute=names")),
          ("search", "--loss-chunks"): count(), ("search", "--optimizer-offload"): flag_switch(),
          ("search", "--plot"): output(".png"), ("search", "--host"): host_in(), ("search", "--stack"): stack_in(),
          ("predict", "--versus"): stack_in()}
    t |= {("whatif", "--model"): model_in(), ("whatif", "--gpus"): count(), ("whatif", "--global-batch"): count(),
          ("whatif", "--seq-len"): count(), ("whatif", "--hardware"): hw_list(),
          ("whatif", "--upgrade"): hardware_in(names=("upgrade", "system", "spec")),
          ("whatif", "--factor"): number(0.0, above=True), ("whatif", "--plot"): output(".png"),
          ("whatif", "--stack"): stack_in()}
    srch = dict(extra=("--search",))
    sim = dict(extra=("--simulate", "--concurrency", "1"))
    t |= {("infer", "--model"): model_in(), ("infer", "--hardware"): hardware_in(names=("system", "spec")),
          ("infer", "--gpus"): count(), ("infer", "--tp"): count(), ("infer", "--pp"): count(),
          ("infer", "--dp"): count(), ("infer", "--ep"): count(), ("infer", "--attention-dp"): count(),
          ("infer", "--input-len"): count(),
          ("infer", "--output-len"): count(), ("infer", "--concurrency"): count(),
          ("infer", "--mem-fraction"): number(0.0, 1.0, above=True),
          ("infer", "--max-batch"): count(), ("infer", "--max-num-tokens"): count(),
          ("infer", "--redundant-experts"): count(least=0), ("infer", "--two-batch-overlap"): flag_switch(),
          ("infer", "--max-throughput"): flag_switch(), ("infer", "--search"): flag_switch(),
          ("infer", "--ttft-ms"): number(0.0, above=True, **srch), ("infer", "--tpot-ms"): number(0.0, above=True, **srch),
          ("infer", "--target-rps"): number(0.0, above=True, **srch), ("infer", "--top"): count(),
          ("infer", "--plot"): output(".png"),
          ("infer", "--write-plan"): output(".json", extra=("--concurrency", "4")),
          ("infer", "--prefill-dp"): count(), ("infer", "--prefill-tp"): count(extra=("--prefill-dp", "1")),
          ("infer", "--prefill-attention-dp"): count(extra=("--prefill-dp", "1")),
          ("infer", "--prefill-ep"): count(extra=("--prefill-dp", "1")),
          ("infer", "--draft-tokens"): count(most=16, extra=("--speculative", "eagle", "--acceptance-rate", "0.5")),
          ("infer", "--acceptance-rate"): number(0.0, high=0.999999, above=True, extra=("--speculative", "eagle")),
          ("infer", "--acceptance-length"): number(1.0, extra=("--speculative", "eagle")),
          ("infer", "--draft-vocab"): count(extra=("--speculative", "eagle", "--acceptance-rate", "0.5")),
          ("infer", "--simulate"): flag_switch(), ("infer", "--requests"): count(most=1_000_000, **sim),
          ("infer", "--seed"): count(least=0, **sim), ("infer", "--range-ratio"): number(0.0, high=1.0, above=True, **sim),
          ("infer", "--stack-version"): Kind(["", "abc", "nightly", "x" * 300, "0.1", "0.13.9"],
                                             TEXT.filter(_old_or_no_version)),
          ("infer", "--request-rate"): Kind(["nan", "-inf", "-1", "0", "abc", ""],
                                            TEXT.filter(lambda s: not (_float(s) is not None and _float(s) > 0)),
                                            extra=("--simulate",)),
          ("infer", "--stages"): Kind(["", "5", "1@", "@5", "0@5", "1@0", "-1@5", "nan@5", "1@inf", "1@5;;2@5"],
                                      TEXT.filter(lambda s: not _stages_ok(s)), extra=("--simulate",)),
          ("infer", "--burstiness-cv"): number(0.0, above=True, **sim),
          ("infer", "--prefix-groups"): count(extra=("--simulate", "--concurrency", "1", "--prefix-len", "1")),
          ("infer", "--prefix-len"): count(least=0, extra=("--simulate", "--concurrency", "1", "--prefix-groups",
                                                           "1"))}
    t |= {("infer", "--server-cmd"): serving_cmd("server"), ("infer", "--bench-cmd"): serving_cmd("bench"),
          ("infer", "--bench-file"): bench_file_in(), ("infer", "--explain"): flag_switch(),
          ("infer", "--kv-offload-gb"): number(0.0, 1e6, extra=("--stack", "vllm"))}
    t |= _trace_rows(sim)
    t |= {("import", "files"): config_in(), ("import", "--hardware"): hardware_in(names=("system", "spec")),
          ("import", "--gpus"): count(), ("import", "--name"): name(), ("import", "--output"): output(".json"),
          ("import", "--explain"): flag_switch(), ("import", "--strict"): flag_switch(),
          ("import", "--vocab-size"): count(), ("import", "--script-args"): script_args(),
          ("predict", "--strict"): flag_switch()}
    t |= {("export", "plan"): plan_in(names=("plan file",)),
          ("export", "--to"): name(good=("megatron", "torchtitan", "deepspeed")),
          ("export", "--version"): name(good=("core_r0.16", "core_r0.12")),  # the base exports to megatron
          ("export", "--check"): flag_switch()}
    t |= {("app", "--host"): Kind(["", " ", "a b", "\t", "-x", "ho$t", "a..b/c"],
                                  TEXT.filter(lambda s: not re.fullmatch(r"[A-Za-z0-9.:-]+", s))),
          ("app", "--port"): count(0, 65535), ("app", "--open"): flag_switch()}
    ck = dict(base="execute-ck")
    t |= {("execute", "plans"): plan_in(names=("plan file", "PLAN.json")), ("execute", "--nproc"): count(),
          ("execute", "--device"): name(good=("auto", "cpu")), ("execute", "--steps"): count(),
          ("execute", "--warmup"): count(0), ("execute", "--rounds"): count(),
          ("execute", "--seed"): count(0, 2**32 - 1),
          ("execute", "--data"): data_in(), ("execute", "--output"): output("", names=("measurement output",)),
          ("execute", "--timeout"): seconds(), ("execute", "--plot"): output(".png"),
          ("execute", "--checkpoint-every"): count(**ck), ("execute", "--checkpoint-dir"): directory(**ck),
          ("execute", "--resume"): flag_switch(**ck), ("execute", "--checkpoint-async"): flag_switch(**ck),
          ("execute", "--nnodes"): count(), ("execute", "--node-rank"): count(0),
          ("execute", "--rdzv-backend"): name(good=("c10d", "etcd", "etcd-v2", "static")),
          ("execute", "--rdzv-endpoint"): text_arg(), ("execute", "--rdzv-id"): text_arg(),
          ("execute", "--master-addr"): text_arg(), ("execute", "--master-port"): count(1, 65535),
          ("execute", "--trace"): directory(names=("--trace",))}
    t[("execute", "--warmup")].fixed.append("8")  # not below --steps (8)
    t[("execute", "--checkpoint-every")].fixed.append("5")  # beyond --steps 4
    t[("execute", "--nproc")].fixed.append("2")  # the plan needs 1
    sweep = dict(base="validate-sweep", names=("sweep",))
    t |= {("validate", "plans"): plan_in(names=("plan file", "PLAN.json")), ("validate", "--sweep"): name(
              good=tuple(SWEEPS), **sweep), ("validate", "--nproc"): count(),
          ("validate", "--hardware"): hardware_in(names=("system", "spec")), ("validate", "--out-dir"): directory(),
          ("validate", "--steps"): count(), ("validate", "--warmup"): count(0), ("validate", "--rounds"): count(),
          ("validate", "--plot"): output(".png"), ("validate", "--csv"): output(".csv"),
          ("validate", "--full-calibration"): flag_switch(), ("validate", "--timeout"): seconds(),
          ("validate", "--checkpoint-every"): count(), ("validate", "--checkpoint-async"): flag_switch(),
          ("validate", "--trace"): directory(names=("--trace",)),
          ("validate", "--calibrate-from-trace"): flag_switch(base="validate-sweep"),
          ("validate", "--trace-plan"): name(good=tuple(e.name for e in SWEEPS["cpu-smoke"].plans),
                                             base="validate-sweep", extra=("--calibrate-from-trace",))}
    t[("validate", "--warmup")].fixed.append("8")
    t[("validate", "--checkpoint-every")].fixed.append("99")
    t[("validate", "--nproc")].fixed.append("2")
    t[("validate", "--hardware")].fixed.append("dgx-h100")  # a GPU spec for a CPU plan
    runs = dict(base="calibrate-runs")
    t |= {("calibrate", "--from-runs"): runs_in(**runs), ("calibrate", "--hardware"): hardware_in(
              names=("system", "spec"), **runs), ("calibrate", "--nproc"): count(),
          ("calibrate", "--base"): name(names=("base",)), ("calibrate", "--name"): Kind(
              ["", "a b", "-x", "../x", ".hidden", "x/y", "é"], TEXT.filter(lambda s: not _system_name(s))),
          ("calibrate", "--quick"): flag_switch(), ("calibrate", "--output"): output(".yaml"),
          ("calibrate", "--step-overhead"): flag_switch(**runs), ("calibrate", "--host-only"): flag_switch(),
          ("calibrate", "--plot"): output(".png"),
          ("calibrate", "--from-trace"): trace_in(base="calibrate-trace"),
          ("calibrate", "--plan"): plan_in(base="calibrate-trace", names=("plan file", "--plan")),
          ("calibrate", "--config"): config_in(base="calibrate-trace-config"),
          ("calibrate", "--config-name"): name(base="calibrate-trace-config"),
          ("calibrate", "--gpus"): count(base="calibrate-trace-config"),
          ("calibrate", "--vocab-size"): count(base="calibrate-trace-config"),
          ("calibrate", "--script-args"): script_args(base="calibrate-trace-config")}
    report = dict(base="sweep-report")
    t |= {("sweep", "target"): Kind(["missing.yaml", "adir", "empty.yaml", "binary.yaml", "list.json", "plan.json",
                                     "truncated.json", "spec.yaml", "runs.csv", "sw-badaxis.yaml", "sw-badmodel.yaml"],
                                    st.one_of(_junk(".yaml"), st.dictionaries(TEXT, st.integers() | TEXT, max_size=3)
                                              .map(lambda d: File("sw2.yaml", json.dumps(d).encode()))),
                                    path=True, names=("sweep file", "SWEEP.yaml", "workloads", "axes")),
          ("sweep", "dir"): Kind(["adir", "emptydir", "missing", "afile.txt", "sw.yaml"],
                                 st.from_regex(r"[a-z]{1,8}", fullmatch=True), path=True,
                                 names=("DIR", "results folder"), **report),
          ("sweep", "--workers"): count(), ("sweep", "--ray"): text_arg(base="sweep-ray"), ("sweep", "--out"): directory(),
          ("sweep", "--resume"): flag_switch(), ("sweep", "--quiet"): flag_switch(),
          ("sweep", "--objective"): name(good=tuple(OBJECTIVES), names=("objective",), **report),
          ("sweep", "--plot"): output(".png", **report)}
    t |= {("hardware show", "name"): hardware_in(names=("system", "spec", "hardware")),
          ("hardware hosts", "host"): host_in(),
          ("models show", "name"): model_in(names=("model",)), ("stacks show", "name"): stack_in(names=("stack",))}
    # --headroom (predict, forecast, search; each command's own bounds): what its parser type refuses
    for (cmd, flag), action in walk(parser).items():
        if flag == "--headroom":
            t[(cmd, flag)] = parsed_by(action, HEADROOM_BAD)
    # choices flags (and the subcommand words): strings not in the parser's own choices
    for (cmd, flag), action in walk(parser).items():
        if action.choices is not None and (cmd, flag) not in t:
            t[(cmd, flag)] = choice(action.choices, action.type)
    return t


def _trace_rows(sim: dict) -> dict:
    """infer --trace (a request trace: missing, a folder, empty, binary, not UTF-8, a JSON or CSV of no trace's
    fields, truncated), its settings (with a real trace sample) and --warmup-requests."""
    sample = str(ROOT / "tests" / "fixtures" / "traces" / "requests" / "AzureLLMInferenceTrace_conv.csv")
    traced = {"extra": ("--simulate", "--trace", sample)}
    bad = ["missing.csv", "adir", "empty.csv", "empty.json", "binary.csv", "binary.json", "latin1.csv", "header.csv",
           "truncated.csv", "runs.csv", "list.json", "plan.json", "truncated.json", "spec.yaml", "notes.log"]
    return {("infer", "--trace"): Kind(bad, st.one_of(_junk(".csv"), _junk(".jsonl")), extra=("--simulate",),
                                       names=("--trace", "trace"), path=True),
            ("infer", "--trace-speed"): number(0.0, high=1e6, above=True, **traced),
            ("infer", "--trace-requests"): count(most=1_000_000, **traced),
            ("infer", "--warmup-requests"): count(least=0, most=1_000_000, **sim)}


def _system_name(s: str) -> bool:
    import re

    return re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", s) is not None


def walk(parser: argparse.ArgumentParser, cmd: str = "") -> dict[tuple[str, str], argparse.Action]:
    """(command, flag or positional dest) -> action, for the parser and every subparser under it."""
    out = {}
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        key = (cmd, a.option_strings[0] if a.option_strings else a.dest)
        out[key] = a
        if isinstance(a, argparse._SubParsersAction):
            for word, sub in a.choices.items():
                out |= walk(sub, f"{cmd} {word}".strip())
    return out


def commands(parser: argparse.ArgumentParser) -> list[list[str]]:
    """argv prefixes of every (sub)command, for --help."""
    out = [[]]
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for word, sub in a.choices.items():
                out += [[word, *rest] for rest in commands(sub)]
    return out
