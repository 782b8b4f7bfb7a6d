"""`perfmodel infer`: serve a model on a layout (TTFT, TPOT, throughput, memory and the KV cache), or with --search
rank the layouts of a job under latency limits, and with --target-rps find the fewest GPUs that serve a rate;
with --simulate serve the requests one by one as a benchmark client sends them (`serve.simulate`)."""

from __future__ import annotations

import argparse
import json
import math
import sys

from ...errors import InputError
from ...spec.serving.schema import SERVING_STACKS
from ...spec.serving.workload import parse_stages
from ..argtypes import integer, number, path
from ..serving_commands import add_command_flags, commands_into


def add_parser(sub, name: str, help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description="Predict serving (inference) of one layout: memory, KV-cache "
                                                     "capacity, TTFT, TPOT and throughput under continuous batching "
                                                     "(docs/inference.md).")
    p.add_argument("--model", help="preset name or path (as predict); default: --server-cmd's model")
    p.add_argument("--hardware", required=True, help="preset name or path (as predict)")
    p.add_argument("--gpus", type=integer("--gpus"), help="GPUs in all (default tp x pp x dp); with --search the "
                                                          "count to lay out, with --target-rps the most to use")
    p.add_argument("--tp", type=integer("--tp"), help="tensor parallel size (default 1)")
    p.add_argument("--pp", type=integer("--pp"), help="pipeline stages (default 1)")
    p.add_argument("--dp", type=integer("--dp"), help="model replicas (default gpus / (tp x pp))")
    p.add_argument("--ep", type=integer("--ep"), help="MoE expert parallel size within tp x attention-dp (default 1)")
    p.add_argument("--redundant-experts", type=integer("--redundant-experts", least=0), metavar="N",
                   help="EPLB's redundant expert slots beside a MoE model's experts, each rank holding (experts + N) / "
                        "ep (SGLang --ep-num-redundant-experts, vLLM --num-redundant-experts; default 0)")
    p.add_argument("--attention-dp", type=integer("--attention-dp"),
                   help="attention data-parallel groups of tp GPUs per replica, the MoE layers over all of them "
                        "(DeepSeek's DP attention + wide EP; default 1)")
    p.add_argument("--moe-a2a", choices=["allgather", "deepep_ll", "alltoall"],
                   help="with --attention-dp: how MoE tokens cross the groups (default the stack's: allgather); "
                        "deepep_ll: DeepEP low-latency (SGLang --moe-a2a-backend deepep, vLLM --all2all-backend "
                        "deepep_low_latency); alltoall: a bf16 all-to-all (TensorRT-LLM NVLink all-to-all, pplx)")
    p.add_argument("--two-batch-overlap", action="store_true",
                   help="with --attention-dp: decode as two half batches, one's MoE exchange behind the other's "
                        "compute (SGLang --enable-two-batch-overlap)")
    p.add_argument("--precision", choices=["bf16", "fp16", "fp8", "fp4", "w4a16"], default="bf16",
                   help="GEMM weights and activations (default bf16); w4a16: 4-bit routed experts (a dense model: "
                        "layer weights) with bf16 activations")
    p.add_argument("--kv-dtype", choices=["bf16", "fp16", "fp8"], help="KV cache (default fp8 with fp8/fp4 GEMMs)")
    p.add_argument("--input-len", type=integer("--input-len"), help="prompt tokens per request (needed, or set by "
                   "--bench-cmd / --bench-file; with --trace, default the trace's mean)")
    p.add_argument("--output-len", type=integer("--output-len"), help="generated tokens per request (needed, or set "
                   "by --bench-cmd / --bench-file; with --trace, default the trace's mean)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--max-throughput", action="store_true",
                      help="as many sequences as memory and the stack allow (the default)")
    load.add_argument("--concurrency", type=integer("--concurrency"), help="sequences in flight in all")
    p.add_argument("--stack", choices=SERVING_STACKS, default="trtllm", help="serving stack (default trtllm)")
    p.add_argument("--stack-version", metavar="V", help="the stack's release whose defaults run the request path "
                   "(CUDA graphs, scheduling, front end), e.g. 0.12.0 (default: the newest its profile lists)")
    p.add_argument("--mem-fraction", type=number("--mem-fraction", 0.0, 1.0, above=True, what="a share of memory"),
                   metavar="F", help="the memory share the engine is launched with, in its own meaning: TensorRT-LLM "
                   "free_gpu_memory_fraction (of the free memory), vLLM gpu_memory_utilization (of the device, "
                   "for everything), SGLang --mem-fraction-static (of the device, weights and KV cache); default "
                   "the stack's")
    p.add_argument("--kv-offload-gb", type=number("--kv-offload-gb", 0.0, 1e6, what="GiB of host memory"),
                   default=0.0, metavar="GIB", help="vLLM's KV offload to host memory: --kv-offloading-size GiB (the "
                   "native OffloadingConnector), its block copies and host work priced in each step (default 0: none)")
    p.add_argument("--max-batch", type=integer("--max-batch"), metavar="N", help="sequences a step runs at most: vLLM "
                   "--max-num-seqs, SGLang --max-running-requests, TensorRT-LLM max_batch_size (default the stack's)")
    p.add_argument("--max-num-tokens", type=integer("--max-num-tokens"), metavar="N", help="tokens a step runs at "
                   "most: vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size, TensorRT-LLM max_num_tokens "
                   "(default the stack's)")
    p.add_argument("--chunked-prefill", choices=["on", "off"], help="split a long prompt over steps (on) or prefill it "
                   "whole, at most --max-num-tokens (off) (default the stack's)")
    p.add_argument("--prefill-dp", type=integer("--prefill-dp"), help="disaggregated serving: prefill replicas in a "
                   "pool of their own, sending KV caches to the tp x attention-dp x pp x dp decode replicas")
    p.add_argument("--prefill-tp", type=integer("--prefill-tp"), help="with --prefill-dp: tensor parallel size of "
                   "each prefill replica (of each of its attention groups; default --tp)")
    p.add_argument("--prefill-attention-dp", type=integer("--prefill-attention-dp"), help="with --prefill-dp: "
                   "attention data-parallel groups of prefill-tp GPUs per prefill replica, the MoE layers over all of "
                   "them (MoE models; default 1)")
    p.add_argument("--prefill-ep", type=integer("--prefill-ep"), help="with --prefill-dp: MoE expert parallel size "
                   "within a prefill replica's prefill-tp x prefill-attention-dp GPUs (default the largest dividing "
                   "both --ep and those)")
    p.add_argument("--speculative", choices=["mtp", "eagle"], help="speculative decoding: the model's MTP module "
                   "drafts, or an EAGLE-3 layer; with --draft-tokens and --acceptance-rate or --acceptance-length")
    p.add_argument("--draft-tokens", type=integer("--draft-tokens", most=16), help="with --speculative: tokens "
                   "drafted a step (default 1)")
    p.add_argument("--acceptance-rate", type=number("--acceptance-rate", above=True, high=0.999999), metavar="A",
                   help="with --speculative: probability a draft token is accepted given the ones before it "
                        "were (default with mtp: the model's published figure, where it has one)")
    p.add_argument("--acceptance-length", type=number("--acceptance-length", low=1.0), metavar="L",
                   help="with --speculative: mean tokens a step emits per sequence (its own included)")
    p.add_argument("--draft-vocab", type=integer("--draft-vocab"), help="with --speculative eagle: the draft head's "
                   "vocabulary (EAGLE-3 for Llama 3.1: 32000; default the model's)")
    p.add_argument("--simulate", action="store_true",
                   help="also serve the requests one by one as a benchmark client sends them (serve.simulate): with "
                        "--concurrency a closed loop of that many clients, with --request-rate an open loop; "
                        "mean / median / p99 TTFT, TPOT and end-to-end")
    p.add_argument("--request-rate", type=_rate, metavar="R",
                   help="with --simulate: requests per second, an open loop (inf: every request at once)")
    p.add_argument("--arrival", choices=["poisson", "constant", "gamma"], default="poisson",
                   help="with --request-rate or --stages: the gaps between sends: poisson (vllm bench serve's "
                        "default), constant (inference-perf's load.type constant) or gamma (--burstiness-cv)")
    p.add_argument("--burstiness-cv", type=number("--burstiness-cv", above=True), default=1.0, metavar="CV",
                   help="with --arrival gamma: the gaps' coefficient of variation (vllm bench serve --burstiness "
                        "B is CV = 1 / sqrt(B); default 1, Poisson)")
    p.add_argument("--stages", metavar="RATE@SECONDS;...",
                   help="with --simulate: an open loop in stages run one after another, e.g. 2.5@600s;6@600s "
                        "(inference-perf's load.stages), in place of --request-rate and --requests; latencies by "
                        "stage too")
    p.add_argument("--prefix-groups", type=integer("--prefix-groups"), metavar="N",
                   help="with --simulate: N system prompts the prompts share, taken in turn (with --prefix-len)")
    p.add_argument("--prefix-len", type=integer("--prefix-len", least=0), metavar="TOKENS",
                   help="with --prefix-groups: tokens of each system prompt, within --input-len; the stack's prefix "
                        "cache serves them from the second request of a group on")
    p.add_argument("--requests", type=integer("--requests", most=1_000_000), default=1000,
                   help="with --simulate: requests sent (default 1000)")
    p.add_argument("--range-ratio", type=number("--range-ratio", high=1.0), default=None,
                   help="with --simulate: lengths uniform in [ratio x L, L] (--length-spread below; default 1: the "
                        "nominal lengths), or in [L (1 - ratio), L (1 + ratio)] (around; default 0)")
    p.add_argument("--seed", type=integer("--seed", least=0), default=0, help="with --simulate: seed of the draws")
    _add_trace_flags(p)
    p.add_argument("--search", action="store_true", help="rank every layout of --gpus GPUs (tp, pp, dp, ep)")
    p.add_argument("--ttft-ms", type=number("--ttft-ms", above=True), help="with --search: drop layouts slower to first token")
    p.add_argument("--tpot-ms", type=number("--tpot-ms", above=True), help="with --search: drop layouts slower per token")
    p.add_argument("--target-rps", type=number("--target-rps", above=True),
                   help="with --search: the fewest GPUs (powers of two up to --gpus) serving this many requests/s")
    p.add_argument("--top", type=integer("--top"), default=10, help="with --search: rows shown (default 10)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--plot", type=path("--plot", "a file ending in .png"), metavar="FILE.png",
                   help="draw memory per GPU and the step's time by part")
    p.add_argument("--write-plan", type=path("--write-plan", "a file ending in .json"), metavar="PLAN.json",
                   help="with --concurrency: write a serving plan file for the executor (perfmodel execute "
                        "PLAN.json serves the batch and writes PLAN.served.json beside it)")
    add_command_flags(p)  # last: it marks the defaults of the flags above that a command fills
    return p


def _rate(text: str) -> float:
    """--request-rate: requests per second > 0, or inf."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if math.isnan(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"--request-rate {text!r}; valid: a number of requests per second > 0, or inf")
    return v


def _workload(a: argparse.Namespace) -> dict:
    """The --simulate flags as a Workload's fields; InputError for a flag that needs another."""
    traced = _trace_workload(a)
    if traced is not None:
        return traced
    if not a.simulate:
        for flag, value in (("--request-rate", a.request_rate), ("--stages", a.stages),
                            ("--prefix-groups", a.prefix_groups)):
            if value is not None:
                raise InputError(f"{flag} sets the simulated load; valid: add --simulate, or leave it out")
        return {}
    if a.search:
        raise InputError("--simulate with --search: the search ranks layouts in steady state; valid: one of them")
    if [a.concurrency is not None, a.request_rate is not None, a.stages is not None].count(True) != 1:
        raise InputError("--simulate needs one load: --concurrency C (a closed loop of C clients), --request-rate "
                         "R (an open loop of R requests/s, inf: all at once) or --stages RATE@SECONDS;...; valid: "
                         "exactly one of the three")
    if (a.prefix_groups is None) != (a.prefix_len is None):
        raise InputError("--prefix-groups and --prefix-len go together (N system prompts of L tokens); valid: both "
                         "or neither")
    if a.prefix_len is not None and a.prefix_len > a.input_len:
        raise InputError(f"--prefix-len = {a.prefix_len} is longer than --input-len = {a.input_len}; valid: at most "
                         "the prompt's length")
    common = dict(range_ratio=_range_ratio(a), seed=a.seed, burstiness_cv=a.burstiness_cv,
                  length_spread=a.length_spread, warmup_requests=a.warmup_requests)
    if a.prefix_groups is not None:
        common["prefix"] = dict(groups=a.prefix_groups, shared_len=a.prefix_len)
    if a.concurrency is not None:
        return dict(arrival="closed", concurrency=a.concurrency, requests=a.requests, **common)
    if a.stages is not None:
        return dict(arrival=a.arrival, stages=parse_stages(a.stages), **common)
    if math.isinf(a.request_rate):
        return dict(arrival="burst", requests=a.requests, **common)
    return dict(arrival=a.arrival, request_rate=a.request_rate, requests=a.requests, **common)


def _add_trace_flags(p: argparse.ArgumentParser) -> None:
    """--trace and its settings, --warmup-requests, --length-spread (with --simulate)."""
    p.add_argument("--trace", type=path("--trace", "a request trace file"), metavar="FILE",
                   help="with --simulate: replay a request trace, each request at its recorded time with its own "
                        "prompt and output lengths (Mooncake JSONL, Azure LLM inference CSV, BurstGPT CSV; "
                        "docs/inference.md); --input-len / --output-len then only size the plan's static estimate "
                        "and default to the trace's mean lengths")
    p.add_argument("--trace-format", choices=["auto", "mooncake", "azure", "burstgpt"], default="auto",
                   help="with --trace: the file's format (default auto: told by its first line)")
    p.add_argument("--trace-speed", type=number("--trace-speed", high=1e6, above=True), metavar="X",
                   help="with --trace: time scale, the trace's times divided by X (2: twice the rate; default 1)")
    p.add_argument("--trace-requests", type=integer("--trace-requests", most=1_000_000), metavar="N",
                   help="with --trace: send its first N requests (default all)")
    p.add_argument("--warmup-requests", type=integer("--warmup-requests", least=0, most=1_000_000), default=0,
                   metavar="N", help="with --simulate: N copies of the first request sent and ended before the "
                                     "measured run, left out of every statistic (vllm bench serve --num-warmups; "
                                     "default 0)")
    p.add_argument("--length-spread", choices=["below", "around"], default="below",
                   help="with --simulate: how --range-ratio spreads the lengths: below, in [ratio x L, L] (SGLang "
                        "bench_serving, InferenceMAX), or around, in [L (1 - ratio), L (1 + ratio)] (vllm bench serve)")


def _range_ratio(a: argparse.Namespace) -> float:
    """--range-ratio, or where not given its default for the spread: 1 below, 0 around (vllm bench serve's)."""
    if a.range_ratio is not None:
        return a.range_ratio
    return 0.0 if a.length_spread == "around" else 1.0


def _trace_source(a: argparse.Namespace) -> dict:
    return {"path": a.trace, "format": a.trace_format, "speed": a.trace_speed or 1.0, "limit": a.trace_requests}


def _trace_lengths(a: argparse.Namespace) -> None:
    """With --trace and no --input-len / --output-len: the trace's mean lengths (of the requests sent) as the plan's
    nominal ones, which size its static estimate; InputError for a trace flag without --trace, or a trace beside a
    benchmark command (each is a load)."""
    if a.trace is None:
        given = [f for f, v in (("--trace-format", a.trace_format != "auto"), ("--trace-speed", a.trace_speed),
                                ("--trace-requests", a.trace_requests)) if v]
        if given:
            raise InputError(f"{given[0]} sets the trace replayed; valid: add --trace FILE, or leave {given[0]} out")
        return
    for flag in ("bench_cmd", "bench_file"):
        if getattr(a, flag, None) is not None:
            raise InputError(f"--trace with --{flag.replace('_', '-')}: each sets the simulated load; valid: one of "
                             "them")
    if a.input_len is None or a.output_len is None:
        from ...spec.serving.traces import mean_lengths, read_trace

        mean_in, mean_out = mean_lengths(read_trace(_trace_source(a)))
        a.input_len = mean_in if a.input_len is None else a.input_len
        a.output_len = mean_out if a.output_len is None else a.output_len


def _trace_workload(a: argparse.Namespace) -> dict | None:
    """The --trace flags as a Workload's fields (None without --trace); InputError for a flag that needs another
    or a bad trace file (read here, before anything is priced)."""
    if a.trace is None:
        if not a.simulate and a.warmup_requests:
            raise InputError("--warmup-requests sets the simulated load; valid: add --simulate, or leave it out")
        return None
    if not a.simulate:
        raise InputError("--trace sets the simulated load; valid: add --simulate, or leave it out")
    if a.search:
        raise InputError("--simulate with --search: the search ranks layouts in steady state; valid: one of them")
    given = [f for f, v in (("--concurrency", a.concurrency), ("--request-rate", a.request_rate),
                            ("--stages", a.stages), ("--prefix-groups", a.prefix_groups)) if v is not None]
    if given:
        raise InputError(f"--trace with {given[0]}: the trace's requests come at their own times, with their own "
                         f"lengths and shared blocks; valid: one load, --trace or {given[0]}")
    from ...spec.serving.traces import read_trace

    source = _trace_source(a)
    read_trace(source)
    return {"arrival": "trace", "trace": source, "seed": a.seed, "warmup_requests": a.warmup_requests}


def _speculative(a: argparse.Namespace) -> dict | None:
    """The --speculative flags as a SpeculativeConfig's fields (None without it); InputError for a flag that needs
    another."""
    given = [f for f, v in (("--draft-tokens", a.draft_tokens), ("--acceptance-rate", a.acceptance_rate),
                            ("--acceptance-length", a.acceptance_length), ("--draft-vocab", a.draft_vocab))
             if v is not None]
    if a.speculative is None:
        if given:
            raise InputError(f"{given[0]} describes a speculative draft; valid: add --speculative mtp|eagle, or leave "
                             f"{', '.join(given)} out")
        return None
    if a.acceptance_rate is not None and a.acceptance_length is not None:
        raise InputError(f"--speculative {a.speculative} takes one acceptance: --acceptance-rate A (each draft "
                         "token's) or --acceptance-length L (tokens a step); valid: one of the two, or neither for "
                         "the model's published figure (DeepSeek-V3's MTP)")
    if a.draft_vocab is not None and a.speculative != "eagle":
        raise InputError(f"--draft-vocab {a.draft_vocab} with --speculative {a.speculative}: an MTP module shares the "
                         "model's head; valid: --draft-vocab with --speculative eagle")
    fields = dict(method=a.speculative, draft_tokens=a.draft_tokens or 1, acceptance_rate=a.acceptance_rate,
                  acceptance_length=a.acceptance_length, draft_vocab=a.draft_vocab)
    from ...spec.serving.schema import SpeculativeConfig

    SpeculativeConfig.parse(fields, where="--speculative")  # e.g. an acceptance length past draft tokens + 1
    return fields


def _job(a: argparse.Namespace) -> dict:
    return dict(precision=a.precision, kv_dtype=a.kv_dtype, input_len=a.input_len, output_len=a.output_len,
                concurrency=a.concurrency, stack=a.stack, stack_version=a.stack_version,
                speculative=_speculative(a), mem_fraction=a.mem_fraction, moe_a2a=a.moe_a2a,
                two_batch_overlap=a.two_batch_overlap, kv_offload_gb=a.kv_offload_gb) | _settings(a)


def _settings(a: argparse.Namespace) -> dict:
    """The engine settings a run overrides (ServePlan: max_batch, max_num_tokens, chunked_prefill; None: the
    stack's) and its redundant experts."""
    chunked = None if a.chunked_prefill is None else a.chunked_prefill == "on"
    return dict(max_batch=a.max_batch, max_num_tokens=a.max_num_tokens, chunked_prefill=chunked,
                redundant_experts=a.redundant_experts or 0)


def run(a: argparse.Namespace) -> str:
    from ...plots.canvas import check_plot_path

    _trace_lengths(a)  # --trace: its mean lengths where --input-len / --output-len are not given
    commands_into(a)  # --server-cmd / --bench-cmd / --bench-file fill the flags not given

    if a.plot is not None:
        check_plot_path(a.plot)
    for flag, v in (("--ttft-ms", a.ttft_ms), ("--tpot-ms", a.tpot_ms), ("--target-rps", a.target_rps)):
        if v is not None and not a.search:
            raise InputError(f"{flag} {v:g} is a --search limit; valid: add --search, or leave {flag} out")
    if a.write_plan is not None:
        from ...files import check_output

        if a.search or a.concurrency is None or a.prefill_dp is not None:
            raise InputError("--write-plan writes one layout's static batch, prefilled and decoded by the same "
                             "replicas; valid: --write-plan with --concurrency, without --search or --prefill-dp")
        check_output(a.write_plan, "--write-plan", ".json")
    workload = _workload(a)
    if a.search:
        pools = [f for f, v in (("--prefill-dp", a.prefill_dp), ("--prefill-tp", a.prefill_tp),
                                ("--prefill-attention-dp", a.prefill_attention_dp), ("--prefill-ep", a.prefill_ep))
                 if v is not None]
        if pools:
            raise InputError(f"{pools[0]} with --search: the search ranks layouts whose replicas prefill and decode "
                             f"(no prefill pool); valid: --search without {', '.join(pools)}, or a disaggregated "
                             "layout without --search")
        given = [f for f, v in (("--tp", a.tp), ("--pp", a.pp), ("--dp", a.dp), ("--ep", a.ep),
                                ("--attention-dp", a.attention_dp)) if v is not None]
        if given:
            raise InputError(f"{given[0]} is chosen by --search (every layout of --gpus is tried); valid: leave "
                             f"{', '.join(given)} out, or drop --search to predict that layout")
        return _search(a)
    a.tp, a.pp, a.ep, adp = a.tp or 1, a.pp or 1, a.ep or 1, a.attention_dp or 1
    from ...serve import infer
    from ...spec.serving.schema import ServePlan

    dp = a.dp
    pool = (a.prefill_tp or a.tp) * (a.prefill_attention_dp or 1) * a.prefill_dp if a.prefill_dp else 0  # its GPUs
    if dp is None:
        n, per = (a.gpus - pool) if a.gpus else a.tp * adp * a.pp, a.tp * adp * a.pp
        names = "tp x attention-dp x pp" if adp > 1 else "tp x pp"
        if n <= 0 or n % per:
            raise InputError(f"gpus = {a.gpus} leaves {n} GPUs for the decode replicas after the prefill pool's {pool}, "
                             f"not a multiple of {names} = {per}; valid gpus: {pool} + a multiple of {per}" if pool
                             else f"gpus = {a.gpus} is not a multiple of {names} = {per}; valid gpus: multiples of "
                             f"{per}")
        dp = n // per
    plan = ServePlan(gpus=a.gpus, tp=a.tp, attention_dp=adp, pp=a.pp, dp=dp, ep=a.ep, prefill_dp=a.prefill_dp,
                     prefill_tp=a.prefill_tp, prefill_attention_dp=a.prefill_attention_dp, prefill_ep=a.prefill_ep,
                     **_job(a))
    e = infer(a.model, a.hardware, plan)
    if a.write_plan is not None:
        print(f"wrote {write_plan(a.model, a.hardware, plan, a.write_plan)}", file=sys.stderr)
    if a.plot is not None:
        from ...plots.serving_figure import serving_figure

        serving_figure(e, a.plot)
        print(f"wrote {a.plot}", file=sys.stderr)
    if not workload:
        return e.model_dump_json(indent=2) if a.format == "json" else table(e)
    from ...serve.simulate import simulate

    sim = simulate(a.model, a.hardware, plan, workload)
    if a.format == "json":
        return json.dumps({"estimate": e.model_dump(mode="json"), "simulation": sim.model_dump(mode="json")}, indent=2)
    return table(e) + "\n\n" + simulation_table(sim)


def simulation_table(sim) -> str:
    """The simulated requests' latencies (ms) and throughput, as benchmark_serving prints them; stage by stage
    where the load ran in stages."""
    w = sim.workload
    gaps = {"poisson": "Poisson", "constant": "constant", "gamma": f"gamma (cv {w.burstiness_cv:g})"}
    if w.arrival == "closed":
        load = f"closed loop of {w.concurrency} clients"
    elif w.arrival == "burst":
        load = "every request at once"
    elif w.stages is not None:
        load = f"{gaps[w.arrival]} arrivals in stages " + ", ".join(f"{s.rate:g} req/s x {s.duration_s:g} s"
                                                                   for s in w.stages)
    elif w.arrival == "trace":
        load = _trace_load(w)
    else:
        load = f"{gaps[w.arrival]} arrivals at {w.request_rate:g} req/s"
    lines = [f"Simulated requests: {sim.requests}, {load}, {_lengths_text(w)}",
             f"  {'':<30} {'mean':>10} {'median':>10} {'p90':>10} {'p99':>10}"]
    rows = [("", sim.ttft_s, sim.tpot_s, sim.e2e_s)] + [
        (f" stage {i + 1} ({st.rate:g}/s)", st.ttft_s, st.tpot_s, st.e2e_s) for i, st in enumerate(sim.stages)]
    for tag, *stats in rows:
        for name, st in zip(("TTFT ms", "TPOT ms", "end-to-end ms"), stats):
            lines.append(f"  {name + tag:<30} {1e3 * st.mean:>10.1f} {1e3 * st.median:>10.1f} {1e3 * st.p90:>10.1f} "
                         f"{1e3 * st.p99:>10.1f}")
    lines += [f"  output tokens/s {sim.output_tokens_per_s:,.0f}, requests/s {sim.requests_per_s:.2f}, mean batch "
              f"{sim.mean_batch:.1f} per replica, {sim.steps:,} steps ({sim.priced_parts} step components priced)"]
    return "\n".join(lines + [f"note: {n}" for n in sim.notes])


def _trace_load(w) -> str:
    """The replayed trace in words (its file, speed, window) and the warm-ups before it."""
    t = w.trace
    speed = f" at {t.speed:g}x speed" if t.speed != 1 else ""
    first = f", its first {t.limit:,} requests" if t.limit else ""
    return f"trace {t.path} replayed{speed}{first}"


def _lengths_text(w) -> str:
    """How the lengths were drawn (a trace's: its own), the warm-ups sent before the measured run, the seed."""
    if w.arrival == "trace":
        text = "the trace's own lengths"
    elif w.length_spread == "around":
        text = f"lengths in [{1 - w.range_ratio:g} x, {1 + w.range_ratio:g} x] nominal"
    else:
        text = f"lengths in [{w.range_ratio:g} x, 1 x] nominal"
    warm = f", after {w.warmup_requests} warm-up request(s)" if w.warmup_requests else ""
    return f"{text}{warm} (seed {w.seed})"


def write_plan(model, hardware, plan, path) -> str:
    """The serving plan file of `plan`'s static batch (serve.batching.static_batch) at `path`."""
    from ...serve.batching import static_batch
    from ...spec.hardware.system import load_hardware
    from ...spec.model.catalogue import load_model
    from ...spec.hardware.kernel_tables import write_with_tables
    from ...spec.serving.files import ServePlanFile
    from ...spec.serving.schema import resolve_serve

    model, system = load_model(model), load_hardware(hardware)
    plan = resolve_serve(plan, model)
    pf = ServePlanFile(created_by="perfmodel infer --write-plan", model=model, hardware=system, plan=plan,
                       predicted=static_batch(model, system, plan))
    return str(write_with_tables(pf, path, "--write-plan"))


def _search(a: argparse.Namespace) -> str:
    from ...serve.layout_search import fewest_gpus, rank, serve_label

    if a.gpus is None:
        raise InputError("--search needs --gpus (the count to lay out, or with --target-rps the most to use)")
    ttft, tpot = (None if a.ttft_ms is None else a.ttft_ms / 1e3), (None if a.tpot_ms is None else a.tpot_ms / 1e3)
    if a.target_rps is not None:
        n, ranked = fewest_gpus(a.model, a.hardware, a.gpus, a.target_rps, _job(a), ttft, tpot)
        head, dropped = f"fewest GPUs for {a.target_rps:g} requests/s: {n}", []
    else:
        ranked, dropped = rank(a.model, a.hardware, a.gpus, _job(a), ttft, tpot)
        head = f"{len(ranked)} layouts of {a.gpus} GPUs fit and meet the limits ({len(dropped)} dropped)"
        if not ranked:
            raise InputError(f"no layout of {a.gpus} GPUs fits and meets the limits: " + "; ".join(dropped[:3]))
    rows = ranked[: a.top]
    if a.format == "json":
        return json.dumps({"summary": head, "layouts": [json.loads(e.model_dump_json()) for e in rows]}, indent=2)
    lines = [head, f"{'layout':<20} {'batch':>7} {'out tok/s':>11} {'req/s':>8} {'TTFT ms':>8} {'TPOT ms':>8}"]
    for e in rows:
        p = e.plan
        label = serve_label(p.tp, p.attention_dp, p.pp, p.dp, p.ep)
        lines.append(f"{label:<20} {e.batch:>7.0f} {e.output_tokens_per_s:>11,.0f} {e.requests_per_s:>8.2f} "
                     f"{1e3 * e.ttft_s:>8.1f} {1e3 * e.tpot_s:>8.2f}")
    return "\n".join(lines)


def table(e) -> str:
    """The estimate as text: headline numbers, memory per GPU, the step by part."""
    p = e.plan
    padp = f" attention_dp={p.prefill_attention_dp} ep={p.prefill_ep}" if (p.prefill_attention_dp or 1) > 1 else ""
    pool = f" + prefill pool tp={p.prefill_tp}{padp} dp={p.prefill_dp}" if p.disaggregated else ""
    adp = f" attention_dp={p.attention_dp}" if p.attention_dp > 1 else ""
    lines = [f"{e.model} on {p.gpus} x {e.hardware}: tp={p.tp}{adp} pp={p.pp} dp={p.dp} ep={p.ep}{pool} "
             f"precision={p.precision} kv={p.kv} stack={p.stack}",
             f"  requests of {p.input_len} prompt + {p.output_len} output tokens, "
             + (f"concurrency {p.concurrency}" if p.concurrency else "max throughput"), "",
             f"output tokens/s          {e.output_tokens_per_s:,.0f}  (all GPUs; {e.output_tokens_per_s / p.gpus:,.0f} "
             "per GPU)",
             f"total tokens/s           {e.total_tokens_per_s:,.0f}",
             f"requests/s               {e.requests_per_s:,.2f}",
             f"batch (in flight)        {e.batch:,.0f}",
             f"TTFT                     {1e3 * e.ttft_s:,.1f} ms",
             f"TPOT                     {1e3 * e.tpot_s:,.2f} ms",
             *([f"KV transfer              {1e3 * e.kv_transfer_s:,.2f} ms (in TTFT)"] if p.disaggregated else []),
             f"end-to-end               {e.e2e_s:,.2f} s",
             f"KV cache                 {e.kv_cache_tokens:,.0f} tokens per replica; maximum concurrency for "
             f"{p.input_len + p.output_len:,} tokens per request: {e.kv_cache_tokens / (p.input_len + p.output_len):,.2f}x "
             "(as vLLM logs it, per max_model_len)", "",
             "Memory per GPU (GiB)"]
    lines += [f"  {k:<14} {v:8.2f}" for k, v in e.memory_gib.items()]
    if e.request_s:
        lines += ["", "Time to first token by part (front end, wait for the step in flight, the prompt's steps)"]
        lines += [f"  {k:<14} {1e3 * v:8.3f} ms" for k, v in e.request_s.items()]
    lines += ["", "One step of the steady batch (seconds by part; launch, schedule: host time the device waits on)"]
    lines += [f"  {k:<14} {1e3 * v:8.3f} ms" for k, v in e.decode_step_s.items()]
    lines += ["", "One prefill step of the prefill pool (seconds by part)" if p.disaggregated else
              "One request's prefill alone (seconds by part)"]
    lines += [f"  {k:<14} {1e3 * v:8.3f} ms" for k, v in e.prefill_s.items()]
    lines += [f"note: {n}" for n in e.notes]
    return "\n".join(lines)
