"""`perfmodel infer --server-cmd "..." --bench-cmd "..." | --bench-file F`: the server's and the benchmark's own
command lines fill the infer flags the user left out (perfmodel.ingest.serving reads them).

A flag the user gave wins only where it agrees: one that contradicts the command is refused in one line naming
both. To tell a flag the user gave from its default, `add_command_flags` re-sets the parser's defaults as marked
values (`_Default`: a str, int or float that says it was not given) and `commands_into` unwraps them, whether or
not a command was given, before anything else reads the namespace.
"""

from __future__ import annotations

import argparse
import math
import sys

from ..errors import InputError
from ..files import looks_like_path

# infer flag destination -> its flag, for the messages
FLAG = {"model": "--model", "tp": "--tp", "pp": "--pp", "dp": "--dp", "ep": "--ep", "attention_dp": "--attention-dp",
        "precision": "--precision", "kv_dtype": "--kv-dtype", "mem_fraction": "--mem-fraction",
        "max_batch": "--max-batch", "max_num_tokens": "--max-num-tokens", "chunked_prefill": "--chunked-prefill",
        "stack": "--stack", "speculative": "--speculative", "draft_tokens": "--draft-tokens",
        "two_batch_overlap": "--two-batch-overlap", "moe_a2a": "--moe-a2a", "redundant_experts": "--redundant-experts",
        "kv_offload_gb": "--kv-offload-gb", "input_len": "--input-len", "output_len": "--output-len",
        "concurrency": "--concurrency", "request_rate": "--request-rate", "stages": "--stages",
        "arrival": "--arrival", "burstiness_cv": "--burstiness-cv", "requests": "--requests",
        "range_ratio": "--range-ratio", "length_spread": "--length-spread", "seed": "--seed", "prefix_groups": "--prefix-groups",
        "prefix_len": "--prefix-len", "simulate": "--simulate"}
LOADS = ("concurrency", "request_rate", "stages")  # one load: a flag of the group given by the user rules the group


class _Str(str):
    pass


class _Int(int):
    pass


class _Float(float):
    pass


def _marked(value):
    """`value` marked as a default no one gave (None and False stay: they say so already)."""
    for plain, mark in ((bool, None), (str, _Str), (int, _Int), (float, _Float)):
        if isinstance(value, plain):
            return value if mark is None else mark(value)
    return value


def _given(value) -> bool:
    return value is not None and value is not False and not isinstance(value, (_Str, _Int, _Float))


def _plain(value):
    for mark, plain in ((_Str, str), (_Int, int), (_Float, float)):
        if isinstance(value, mark):
            return plain(value)
    return value


def add_command_flags(p: argparse.ArgumentParser) -> None:
    """--server-cmd, --bench-cmd, --bench-file and --explain; the defaults of the flags a command fills marked."""
    from .argtypes import path

    p.add_argument("--server-cmd", metavar='"vllm serve MODEL ..."',
                   help="the server's own command line (vllm serve, python -m vllm.entrypoints.openai.api_server, "
                        "python -m sglang.launch_server): its model, layout, precision and engine settings fill the "
                        "flags not given")
    bench = p.add_mutually_exclusive_group()
    bench.add_argument("--bench-cmd", metavar='"vllm bench serve ..."',
                       help="the benchmark's own command line (vllm bench serve, benchmarks/benchmark_serving.py, "
                            "python -m sglang.bench_serving): its load and lengths fill the flags not given; implies "
                            "--simulate")
    bench.add_argument("--bench-file", type=path("--bench-file", "an inference-perf YAML, or a file holding a "
                                                               "benchmark command"),
                       metavar="CONFIG.yml", help="an inference-perf config (load stages, data) or a file holding a "
                                                  "benchmark command, read as --bench-cmd; implies --simulate")
    p.add_argument("--explain", action="store_true", help="with --server-cmd / --bench-cmd / --bench-file: print what "
                   "every flag of the commands became (mapped, not priced and why, or the tool's default) on stderr")
    for action in p._actions:
        if action.dest in FLAG and action.default is not None:
            action.default = _marked(action.default)


def commands_into(a: argparse.Namespace) -> None:
    """Fill `a` from its --server-cmd / --bench-cmd / --bench-file (the flags the user left out); InputError for a
    flag given that contradicts a command, or for what neither gives (--model, --input-len, --output-len)."""
    server, bench_cmd, bench_file = (getattr(a, k, None) for k in ("server_cmd", "bench_cmd", "bench_file"))
    given = {dest: _given(getattr(a, dest)) for dest in FLAG if hasattr(a, dest)}
    for dest in given:
        setattr(a, dest, _plain(getattr(a, dest)))
    reads = []
    if server is not None:
        from ..ingest.serving import read_server

        reads.append(("the server command", read_server(server, a.model if given.get("model") else None)))
    if bench_cmd is not None or bench_file is not None:
        from ..ingest.serving import read_bench, read_bench_file

        reads.append(("the benchmark command" if bench_cmd is not None else f"--bench-file {bench_file}",
                      read_bench(bench_cmd) if bench_cmd is not None else read_bench_file(bench_file)))
    if getattr(a, "explain", False) and not reads:
        raise InputError("--explain prints what the commands' flags became; valid: with --server-cmd, --bench-cmd "
                         "or --bench-file")
    for where, read in reads:
        _fill(a, given, where, read)
        if getattr(a, "explain", False):
            print(f"{where} ({read.program}):", file=sys.stderr)
            for line in read.lines() + [f"note: {n}" for n in read.notes]:
                print(f"  {line}", file=sys.stderr)
    for dest, flag, what in (("model", "--model", "the model (a preset, perfmodel models list, or a config.json)"),
                             ("input_len", "--input-len", "prompt tokens per request"),
                             ("output_len", "--output-len", "generated tokens per request")):
        if getattr(a, dest, None) is None and not (dest != "model" and getattr(a, "trace", None) is not None):
            by = " or named by --server-cmd's model" if dest == "model" else " or set by --bench-cmd / --bench-file"
            source = next((r for _, r in reads if dest == "model" and r.model_id), None)
            why = (f": {source.model_id} is no preset" if source is not None else "")
            raise InputError(f"{flag} is needed{why}; valid: {what}, given{by}")


def _same(dest: str, mine, theirs) -> bool:
    if isinstance(mine, float) or isinstance(theirs, float):
        try:
            return math.isclose(float(mine), float(theirs), rel_tol=1e-9) or (math.isinf(float(mine))
                                                                               and math.isinf(float(theirs)))
        except (TypeError, ValueError):
            return False
    if dest == "stages":
        from ..spec.serving.workload import parse_stages

        return parse_stages(str(mine)) == parse_stages(str(theirs))
    return str(mine).lower() == str(theirs).lower()


def _fill(a: argparse.Namespace, given: dict[str, bool], where: str, read) -> None:
    fields = dict(read.fields)
    if "kv_offload_gb" in fields and not hasattr(a, "kv_offload_gb"):
        fields.pop("kv_offload_gb")
    user_load = next((d for d in LOADS if given.get(d)), None)
    for dest, value in fields.items():
        if not hasattr(a, dest):
            continue
        key = read.set_by.get(dest, "its default")
        if dest in LOADS and user_load is not None and dest != user_load:
            raise InputError(f"{FLAG[user_load]} {_text(getattr(a, user_load))} contradicts {where}'s {key} "
                             f"({dest} = {_text(value)}); valid: leave {FLAG[user_load]} out, or drop the command's "
                             "load")
        if dest == "concurrency" and getattr(a, "max_throughput", False):
            raise InputError(f"--max-throughput contradicts {where}'s {key} (concurrency = {value}); valid: leave "
                             "--max-throughput out")
        if given.get(dest):
            mine = getattr(a, dest)
            if dest == "model" and looks_like_path(str(mine)):
                continue  # the user's own config.json of the checkpoint the command serves
            if not _same(dest, mine, value):
                raise InputError(f"{FLAG[dest]} {_text(mine)} contradicts {where}'s {key} ({dest} = {_text(value)}); "
                                 f"valid: leave {FLAG[dest]} out, or {_text(value)}")
            continue
        if dest in ("arrival", "burstiness_cv") and user_load is not None and user_load != "request_rate":
            continue
        if dest in ("tp", "pp", "dp", "ep", "attention_dp") and getattr(a, "search", False):
            continue  # --search chooses the layout; the command's model and settings still hold
        setattr(a, dest, value)
        given[dest] = True


def _text(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
