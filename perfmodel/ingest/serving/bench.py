"""A serving benchmark's command line or config -> `perfmodel infer --simulate`'s load and lengths, every key
accounted for.

- vLLM: `vllm bench serve ...` or `python benchmarks/benchmark_serving.py ...`. The flags and defaults of
  vllm-project/vllm vllm/benchmarks/serve.py (`--request-rate` inf, `--burstiness` 1.0, `--max-concurrency` None)
  and vllm/benchmarks/datasets/arg_utils.py at 237145e (`--dataset-name` random, `--num-prompts` 1000, `--seed` 0,
  `--random-input-len` 1024, `--random-output-len` 128, `--random-range-ratio` 0.0, `--random-prefix-len` 0).
  serve.py's get_request draws the gaps from a gamma of shape b = `--burstiness` and scale 1 / (rate x b): mean
  1 / rate, coefficient of variation 1 / sqrt(b) (b = 1: Poisson; b = inf: constant gaps). The random dataset
  (vllm/benchmarks/datasets.py RandomDataset.get_sampling_params) draws lengths uniformly in
  [floor(L (1 - r)), ceil(L (1 + r))], and puts one fixed prefix of `--random-prefix-len` tokens before every
  prompt.
- SGLang: `python -m sglang.bench_serving ...`, sgl-project/sglang python/sglang/bench_serving.py at 0033168:
  `--dataset-name` sharegpt, `--num-prompts` 1000, `--request-rate` inf (else Poisson arrivals), `--seed` 1,
  `--random-input-len` 1024, `--random-output-len` 1024, `--random-range-ratio` 0.0 (lengths uniform in
  [max(int(L r), 1), L]: sample_random_requests), and generated-shared-prefix's `--gsp-num-groups` 64,
  `--gsp-prompts-per-group` 16, `--gsp-system-prompt-len` 2048, `--gsp-question-len` 128, `--gsp-output-len` 256
  (num_groups x prompts_per_group requests, each a group's system prompt and its own question: sample_generated_
  shared_prefix_requests, which shuffles them).
- inference-perf (kubernetes-sigs/inference-perf at 7de5ef2): a YAML of `load` (inference_perf/config/loadgen/
  config.py: type constant | poisson | concurrent, stages of {rate, duration} or {num_requests,
  concurrency_level}) and `data` (inference_perf/config/datagen/config.py: type random with input_distribution /
  output_distribution, or shared_prefix with num_groups (num_unique_system_prompts), num_prompts_per_group
  (num_users_per_system_prompt), system_prompt_len, question_len, output_len).

`Workload.range_ratio` takes either meaning by `Workload.length_spread`: below, [ratio x L, L] (SGLang's), or around,
[L (1 - r), L (1 + r)] (vLLM's); each tool's ratio maps with its own spread.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...files import read_mapping
from .account import Account, CommandRead, count, number
from .words import Flag, command_words, flags_of

MAX_REQUESTS = 1_000_000  # perfmodel infer --requests' bound

# --------------------------------------------------------------------------------------------- vLLM, SGLang
LOAD = ("--request-rate", "--burstiness", "--max-concurrency", "--num-prompts", "--seed", "--dataset-name")
RANDOM = ("--random-input-len", "--random-output-len", "--random-range-ratio", "--random-prefix-len")
GSP = ("--gsp-num-groups", "--gsp-prompts-per-group", "--gsp-system-prompt-len", "--gsp-question-len",
       "--gsp-output-len")
REPETITION = ("--prefix-repetition-prefix-len", "--prefix-repetition-suffix-len", "--prefix-repetition-num-prefixes",
              "--prefix-repetition-output-len")
VLLM_DEFAULTS = {"--request-rate": math.inf, "--burstiness": 1.0, "--num-prompts": 1000, "--seed": 0,
                 "--dataset-name": "random", "--random-input-len": 1024, "--random-output-len": 128,
                 "--random-range-ratio": 0.0, "--random-prefix-len": 0, "--prefix-repetition-prefix-len": 256,
                 "--prefix-repetition-suffix-len": 256, "--prefix-repetition-num-prefixes": 10,
                 "--prefix-repetition-output-len": 128}
SGLANG_DEFAULTS = {"--request-rate": math.inf, "--num-prompts": 1000, "--seed": 1, "--dataset-name": "sharegpt",
                   "--random-input-len": 1024, "--random-output-len": 1024, "--random-range-ratio": 0.0,
                   "--gsp-num-groups": 64, "--gsp-prompts-per-group": 16, "--gsp-system-prompt-len": 2048,
                   "--gsp-question-len": 128, "--gsp-output-len": 256}
_WHERE = "where the client sends: no part of the server's time"
_OUT = "what the client records or prints: not priced"
_REQ = "the request's sampling or format: perfmodel generates every request's full output length"
BENCH_NOT_PRICED = {
    **dict.fromkeys(("--host", "--port", "--base-url", "--endpoint", "--backend", "--ready-check-timeout-sec",
                     "--header", "--insecure"), _WHERE),
    **dict.fromkeys(("--save-result", "--save-detailed", "--result-filename", "--result-dir", "--output-file",
                     "--output-details", "--percentile-metrics", "--metric-percentiles", "--disable-tqdm",
                     "--label", "--metadata", "--append-result", "--plot-timeline", "--profile", "--goodput",
                     "--cache-report", "--tag", "--request-id-prefix", "--plot-dataset-stats"), _OUT),
    **dict.fromkeys(("--temperature", "--top-p", "--top-k", "--min-p", "--logprobs", "--return-logprob",
                     "--extra-request-body", "--extra-body", "--disable-stream", "--apply-chat-template",
                     "--skip-chat-template", "--prompt-suffix", "--tokenize-prompt", "--lora-name", "--lora-modules",
                     "--use-beam-search", "--frequency-penalty", "--presence-penalty", "--repetition-penalty"), _REQ),
    "--model": "the served model: the server command's (or --model) names it",
    "--served-model-name": "the served model: the server command's (or --model) names it",
    "--tokenizer": "the tokenizer counts the tokens; the lengths priced are the flags'",
    "--tokenizer-mode": "the tokenizer counts the tokens; the lengths priced are the flags'",
    "--trust-remote-code": "loading the tokenizer: not priced",
    "--ignore-eos": "every request runs to its full output length, as perfmodel generates them",
    "--disable-ignore-eos": "requests may stop early at an end-of-sequence token; perfmodel generates every request's "
                            "full output length",
    "--num-warmups": "warm-up requests before the measured ones: not simulated",
    "--warmup-requests": "warm-up requests before the measured ones: not simulated",
    "--flush-cache": "the server's prefix cache is flushed first: the simulation starts with an empty cache too",
    "--pd-separated": "disaggregated serving is the server's layout (--prefill-dp), not the client's",
    "--dataset-path": "the dataset's file: its lengths are not read (give --input-len and --output-len)",
    "--ramp-up-strategy": "a request rate that ramps: perfmodel's stages (--stages) are steps, not a ramp",
    "--ramp-up-start-rps": "a request rate that ramps: perfmodel's stages (--stages) are steps, not a ramp",
    "--ramp-up-end-rps": "a request rate that ramps: perfmodel's stages (--stages) are steps, not a ramp",
    "--disable-shuffle": "the order of a dataset's prompts: random lengths are drawn independently anyway",
    "--no-oversample": "a dataset file's sampling: its lengths are not read",
}
BENCH_SWITCHES = {"--ignore-eos", "--disable-ignore-eos", "--save-result", "--save-detailed", "--disable-tqdm",
                  "--trust-remote-code", "--profile", "--output-details", "--disable-stream", "--return-logprob",
                  "--apply-chat-template", "--skip-chat-template", "--tokenize-prompt", "--flush-cache",
                  "--pd-separated", "--append-result", "--plot-timeline", "--cache-report", "--disable-shuffle",
                  "--no-oversample", "--use-beam-search", "--insecure", "--plot-dataset-stats"}


def read_bench(text: str) -> CommandRead:
    """The benchmark command `text` read: the simulated load, lengths and prefix sharing, every flag's fate.
    InputError in one line for a program this reader does not know or a value the tool refuses."""
    words, env = command_words(text, "benchmark command")
    tool, start = _program(words)
    what = f"{'vllm bench serve' if tool == 'vllm' else 'sglang.bench_serving'} command"
    names = list(LOAD) + list(RANDOM) + list(GSP) + list(REPETITION) + list(BENCH_NOT_PRICED) + sorted(BENCH_SWITCHES)
    known = {n: n for n in names}
    flags, loose = flags_of(words, start, known, BENCH_SWITCHES, what)
    acc = Account(what)
    for name, value in env.items():
        acc.skip(name, value, -1, "an environment variable of the client: not priced")
    acc.set(" ".join(words[:start]), tool, 0, why="the requests are simulated one by one", simulate=True)
    by: dict[str, Flag] = {}
    for f in flags:
        if f.name in by:
            acc.skip(by[f.name].written, by[f.name].value, by[f.name].word, f"given again at word {f.word}: argparse "
                                                                            "keeps the last")
        by[f.name] = f
    defaults = VLLM_DEFAULTS if tool == "vllm" else SGLANG_DEFAULTS
    handled = _load(acc, tool, by, defaults, what) | _dataset(acc, tool, by, defaults, what)
    for f in by.values():
        if f.name in handled:
            continue
        if f.name in BENCH_NOT_PRICED:
            acc.skip(f.written, f.value, f.word, BENCH_NOT_PRICED[f.name])
        elif f.name in GSP + RANDOM + REPETITION:
            acc.skip(f.written, f.value, f.word, "a length of another dataset than the one this command runs")
        else:
            acc.skip(f.written, f.value, f.word, "not a flag this reader knows")
    for i, word in loose:
        acc.skip(word, "", i, "a word outside any flag: not a flag this reader knows (the tool's parser would "
                              "refuse it)")
    return acc.read("vllm bench serve" if tool == "vllm" else "sglang.bench_serving", text, None,
                    {f.written: f.how for f in flags if f.how})


def _program(words: list[str]) -> tuple[str, int]:
    w = [x.rsplit("/", 1)[-1] for x in words[:3]]
    if w[:3] == ["vllm", "bench", "serve"]:
        return "vllm", 3
    if len(words) >= 2 and w[0].startswith("python") and w[1] == "benchmark_serving.py":
        return "vllm", 2
    if len(words) >= 3 and w[0].startswith("python") and w[1] == "-m" and words[2] in ("sglang.bench_serving",
                                                                                         "sglang.benchmark.serving"):
        return "sglang", 3
    raise InputError(f"benchmark command: {' '.join(words[:3])!r} is not a benchmark this reader knows; valid: vllm "
                     "bench serve ..., python benchmarks/benchmark_serving.py ..., python -m sglang.bench_serving "
                     "..., or an inference-perf YAML (--bench-file)")


def _value(by, name, defaults):
    """(flag or None, its text or the tool's default)."""
    f = by.get(name)
    return f, (f.value if f is not None else defaults.get(name))


def _load(acc: Account, tool: str, by: dict[str, Flag], defaults: dict, what: str) -> set[str]:
    """arrival, request_rate, burstiness_cv, concurrency, requests and seed."""
    fr, rate = _value(by, "--request-rate", defaults)
    rate = number(fr.written if fr else "--request-rate", rate, what, infinite=True)
    fb, b = _value(by, "--burstiness", defaults)
    if tool == "vllm":
        b = number(fb.written if fb else "--burstiness", b, what, infinite=True)
    fc = by.get("--max-concurrency")
    conc = count(fc.written, fc.value, what) if fc is not None else None
    if math.isinf(rate) and conc is not None:
        acc.set(fc.written, conc, fc.word, why="every request sent at once, the client keeping this many in flight: "
                "a closed loop", concurrency=conc)
        if fr is not None:
            acc.set(fr.written, fr.value, fr.word, why="inf: with --max-concurrency, a closed loop")
    elif math.isinf(rate):
        if fr is not None:
            acc.set(fr.written, fr.value, fr.word, why="every request at t = 0", request_rate=math.inf)
        else:
            acc.default("--request-rate", "inf", why="every request at t = 0", request_rate=math.inf)
    else:
        if tool == "sglang" or b == 1:
            arrival, why = {"arrival": "poisson"}, "Poisson arrivals"
        elif math.isinf(b):
            arrival, why = {"arrival": "constant"}, "constant gaps (burstiness inf)"
        else:
            arrival, why = {"arrival": "gamma", "burstiness_cv": 1 / math.sqrt(b)}, ""
        acc.set(fr.written, fr.value, fr.word, why="an open loop" + (f", {why}" if why else ""), request_rate=rate,
                **({} if fb is not None and tool == "vllm" else arrival))
        if fc is not None:
            acc.skip(fc.written, fc.value, fc.word, "a cap on the open loop's requests in flight, which the simulated "
                                                    "open loop has not: it binds only where the server falls behind")
    if fb is not None:
        if tool != "vllm":
            acc.skip(fb.written, fb.value, fb.word, "not a flag this reader knows")
        elif math.isinf(rate):
            acc.skip(fb.written, fb.value, fb.word, "the gaps' shape of an open loop: no gaps with every request at "
                                                    "once")
        elif b == 1:
            acc.set(fb.written, fb.value, fb.word, why="gamma of shape 1: Poisson", arrival="poisson")
        elif math.isinf(b):
            acc.set(fb.written, fb.value, fb.word, why="constant gaps", arrival="constant")
        else:
            acc.set(fb.written, fb.value, fb.word, why=f"gamma gaps of shape {b:g}: CV = 1 / sqrt({b:g})",
                    arrival="gamma", burstiness_cv=1 / math.sqrt(b))
    fn, n = _value(by, "--num-prompts", defaults)
    n = count(fn.written if fn else "--num-prompts", n, what)
    if n > MAX_REQUESTS:
        raise InputError(f"{what}: --num-prompts = {n}; valid: at most {MAX_REQUESTS:,} requests simulated")
    if fn is not None:
        acc.set(fn.written, fn.value, fn.word, why=fn.how, requests=n)
    else:
        acc.default("--num-prompts", n, requests=n)
    fs = by.get("--seed")
    if fs is not None:
        acc.set(fs.written, fs.value, fs.word, why="seeds perfmodel's own draws (not the tool's sequence)",
                seed=count(fs.written, fs.value, what, least=0))
    return {"--request-rate", "--burstiness", "--max-concurrency", "--num-prompts", "--seed"}


def _dataset(acc: Account, tool: str, by: dict[str, Flag], defaults: dict, what: str) -> set[str]:
    """input_len, output_len, range_ratio and the shared prefix from the dataset's flags."""
    fd, name = _value(by, "--dataset-name", defaults)
    name = str(name).lower()
    dkey = fd.written if fd else "--dataset-name"
    mapped = {"random", "random-ids", "generated-shared-prefix", "prefix_repetition"}
    if name not in mapped:
        why = (f"the lengths are {name}'s prompts', which this reader does not read: give --input-len and "
               f"--output-len (perfmodel reads {', '.join(sorted(mapped))})")
        if fd is not None:
            acc.skip(fd.written, fd.value, fd.word, why)
        else:
            acc.notes.append(f"{dkey} defaults to {name}: {why}")
        return {"--dataset-name"}
    (acc.set(fd.written, fd.value, fd.word, why="synthetic lengths, from the flags below") if fd is not None
     else acc.default("--dataset-name", name, why="synthetic lengths, from the flags below"))

    def val(flag, least=1):
        f, v = _value(by, flag, defaults)
        return f, count(f.written if f else flag, v, what, least)

    def put(flag, f, v, why="", **fields):
        if f is not None:
            acc.set(f.written, f.value, f.word, why=why, **fields)
        else:
            acc.default(flag, v, why=why, **fields)

    if name == "generated-shared-prefix":
        # it sends groups x prompts per group whatever --num-prompts says, given or its default
        fn = by.get("--num-prompts")
        nkey = fn.written if fn is not None else "--num-prompts"
        acc.drop(nkey, "requests")
        (fg, g), (fp, per), (fs, s), (fq, q), (fo, o) = (val(k) for k in GSP)
        put("--gsp-num-groups", fg, g, why="system prompts, each shared by its group's prompts (SGLang shuffles "
            "them; perfmodel takes the groups in turn)", prefix_groups=g)
        put("--gsp-prompts-per-group", fp, per, why="the requests are groups x prompts per group",
            requests=_requests(g * per, what))
        put("--gsp-system-prompt-len", fs, s, prefix_len=s)
        put("--gsp-question-len", fq, q, why="a prompt is its system prompt and its question", input_len=s + q)
        put("--gsp-output-len", fo, o, output_len=o)
        if fn is not None:
            acc.skip(fn.written, fn.value, fn.word, "generated-shared-prefix sends --gsp-num-groups x "
                                                    "--gsp-prompts-per-group requests")
        acc.fields["requests"] = _requests(g * per, what)
        return {"--dataset-name", *GSP}
    if name == "prefix_repetition":
        (fp, p), (fs, s), (fg, g), (fo, o) = (val(k) for k in REPETITION)
        put(REPETITION[2], fg, g, why="prefixes, the prompts spread over them", prefix_groups=g)
        put(REPETITION[0], fp, p, prefix_len=p)
        put(REPETITION[1], fs, s, why="a prompt is its prefix and its own suffix", input_len=p + s)
        put(REPETITION[3], fo, o, output_len=o)
        return {"--dataset-name", *REPETITION}
    (fi, L), (fo, O) = val("--random-input-len"), val("--random-output-len")
    fr, r = _value(by, "--random-range-ratio", defaults)
    rkey = fr.written if fr else "--random-range-ratio"
    fp, P = (by.get("--random-prefix-len"), 0) if tool != "vllm" else val("--random-prefix-len", least=0)
    if tool == "vllm":
        r = number(rkey, r, what, 0.0, 0.999999, above=False)
        put("--random-input-len", fi, L, why="after the fixed prefix" if P else "", input_len=L + P)
        put("--random-output-len", fo, O, output_len=O)
        put(rkey, fr, r, why=(f"vLLM draws in [L (1 - r), L (1 + r)]: [{math.floor(L * (1 - r))}, "
                              f"{math.ceil(L * (1 + r))}] prompt tokens" + (" after the prefix" if P else "")
                              if r else "0: every request at its nominal lengths"),
            range_ratio=r, length_spread="around")
        if P:
            put("--random-prefix-len", fp, P, why="one prefix before every prompt: a group of one, cached after the "
                "first request" + (" (perfmodel spreads the whole prompt's length, prefix included)" if r else ""),
                prefix_groups=1, prefix_len=P)
        elif fp is not None:
            acc.set(fp.written, fp.value, fp.word, why="no shared prefix")
    else:
        r = number(rkey, r, what, 0.0, 1.0, above=False)
        ratio = r if r > 0 else 1.0 / max(L, O)
        put("--random-input-len", fi, L, input_len=L)
        put("--random-output-len", fo, O, output_len=O)
        put(rkey, fr, r, why="lengths in [L r, L], perfmodel's meaning" if r > 0 else
            f"0: lengths from 1 up to L (range ratio 1 / {max(L, O)})", range_ratio=ratio)
        if fp is not None:
            acc.skip(fp.written, fp.value, fp.word, "not a flag of sglang.bench_serving")
    return {"--dataset-name", *RANDOM}


def _requests(n: int, what: str) -> int:
    if n > MAX_REQUESTS:
        raise InputError(f"{what}: --gsp-num-groups x --gsp-prompts-per-group = {n:,} requests; valid: at most "
                         f"{MAX_REQUESTS:,}")
    return n


# ------------------------------------------------------------------------------------------- inference-perf
# Sections and keys that do not change the server's time: prefix -> why
PERF_NOT_PRICED = {
    "api": "the API the client calls (completion or chat): not priced",
    "server.ignore_eos": "every request runs to its full output length, as perfmodel generates them",
    "server.type": "the server's API flavour: the engine priced is the server command's (or --stack)",
    "server.model_name": "the served model: the server command's (or --model) names it",
    "server": "where the client sends: no part of the server's time",
    "tokenizer": "the tokenizer counts the tokens; the lengths priced are the config's",
    "metrics": "what the client scrapes: not priced",
    "report": "what the client reports: not priced",
    "storage": "where the client writes its reports: not priced",
    "circuit_breakers": "when the client stops: not priced",
    "load.interval": "the pause between stages: the simulation runs them back to back",
    "load.num_workers": "the client's worker processes: not priced",
    "load.worker_max_concurrency": "the client's in-flight cap per worker: the simulated open loop has none",
    "load.worker_max_tcp_connections": "the client's connections: not priced",
    "load.base_seed": "seeds the client's own draws (perfmodel's are --seed's)",
    "load.request_timeout": "the client's timeout: no request is dropped in the simulation",
    "data.shared_prefix.seed": "seeds the client's own prompts",
    "data.shared_prefix.enable_multi_turn_chat": "multi-turn chats are not simulated: each prompt is new",
    "data.use_chat_template": "the request's format: not priced",
}


def read_bench_file(path: str | Path) -> CommandRead:
    """An inference-perf YAML config (or a file holding one benchmark command) read as `read_bench` reads a
    command."""
    path = Path(path)
    if path.suffix.lower() not in (".yml", ".yaml", ".json"):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"--bench-file {str(path)!r}: cannot read it ({err.__class__.__name__}); valid: an "
                             "inference-perf YAML, or a file holding a benchmark command") from None
        return read_bench(text)
    data = read_mapping(path, f"--bench-file {path}")
    return read_inference_perf(data, str(path))


def _flatten(data: dict, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in data.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out += _flatten(v, key)
        else:
            out.append((key, v))
    return out


def _mean(v, key: str, what: str) -> int:
    """A length: a number, or a distribution's mean."""
    if isinstance(v, dict):
        if "mean" not in v:
            raise InputError(f"{what}: {key} = {v}: a distribution without a mean; valid: a number of tokens or "
                             "{mean: N, ...}")
        v = v["mean"]
    return count(key, v, what)


def read_inference_perf(data: dict, source: str = "inference-perf config") -> CommandRead:
    """An inference-perf config (a mapping) read: the load's stages and arrival, the data's lengths and prefix
    sharing; every leaf key a fate."""
    what = f"inference-perf config {source}"
    acc = Account(what)
    load = data.get("load") or {}
    dataset = data.get("data") or {}
    if not isinstance(load, dict) or not isinstance(dataset, dict):
        raise InputError(f"{what}: load and data must be mappings; valid: load: {{type: constant, stages: [...]}}")
    leaves = _flatten(data)
    order = {k: i for i, (k, _) in enumerate(leaves)}
    done: set[str] = set()

    def put(key, value, why="", **fields):
        acc.set(key, value, order.get(key, -1), why=why, **fields)
        done.add(key)

    acc.set("inference-perf", source, -1, why="the requests are simulated one by one", simulate=True)
    kind = str(load.get("type", "constant")).lower()
    stages = load.get("stages") or []
    if "sweep" in load:
        raise InputError(f"{what}: load.sweep finds its stages' rates from the server's saturation at run time; "
                         "valid: load.stages [{rate, duration}, ...]")
    if kind not in ("constant", "poisson", "concurrent"):
        raise InputError(f"{what}: load.type = {kind}; valid: constant, poisson, concurrent (trace replays are not "
                         "read)")
    if not isinstance(stages, list) or not stages:
        raise InputError(f"{what}: load.stages = {stages!r}; valid: a list of {{rate, duration}} (or "
                         "{num_requests, concurrency_level} with type concurrent)")
    if "type" in load:
        put("load.type", kind, why="" if kind == "concurrent" else "the gaps between sends",
            **({} if kind == "concurrent" else {"arrival": kind}))
    elif kind != "concurrent":
        acc.default("load.type", kind, arrival=kind)
    if kind == "concurrent":
        if len(stages) != 1:
            raise InputError(f"{what}: load.stages holds {len(stages)} concurrent stages; valid: one "
                             "{num_requests, concurrency_level} stage (perfmodel simulates one closed loop)")
        st = stages[0] if isinstance(stages[0], dict) else {}
        c = count("load.stages[0].concurrency_level", st.get("concurrency_level"), what)
        n = count("load.stages[0].num_requests", st.get("num_requests"), what)
        put("load.stages", stages, why="a closed loop", concurrency=c, requests=_requests(n, what))
    else:
        parts = []
        for i, st in enumerate(stages):
            if not isinstance(st, dict):
                raise InputError(f"{what}: load.stages[{i}] = {st!r}; valid: {{rate: R, duration: SECONDS}}")
            r = number(f"load.stages[{i}].rate", st.get("rate"), what)
            d = number(f"load.stages[{i}].duration", st.get("duration"), what)
            parts.append(f"{r:g}@{d:g}")
        put("load.stages", stages, why="an open loop in stages, run one after another", stages=";".join(parts))
    done |= {k for k in order if k.startswith("load.stages")}
    dtype = str(dataset.get("type", "mock"))
    if dtype == "shared_prefix":
        sp = dataset.get("shared_prefix") or {}
        alias = {"num_groups": "num_unique_system_prompts", "num_prompts_per_group": "num_users_per_system_prompt"}

        def sp_key(name):
            for k in (name, alias.get(name)):
                if k and k in sp:
                    return f"data.shared_prefix.{k}", sp[k]
            raise InputError(f"{what}: data.shared_prefix.{name} is missing; valid: num_groups, "
                             "num_prompts_per_group, system_prompt_len, question_len, output_len")

        (kg, g), (kp, per), (ks, s), (kq, q), (ko, o) = (sp_key(n) for n in (
            "num_groups", "num_prompts_per_group", "system_prompt_len", "question_len", "output_len"))
        g, per = count(kg, g, what), count(kp, per, what)
        s, q, o = _mean(s, ks, what), _mean(q, kq, what), _mean(o, ko, what)
        put("data.type", dtype, why="prompts sharing system prompts")
        put(kg, g, why="system prompts, each shared by its group (perfmodel takes the groups in turn)",
            prefix_groups=g)
        put(kp, per, why="distinct questions per system prompt: each new to the cache")
        put(ks, s, prefix_len=s)
        put(kq, q, why="a prompt is its system prompt and its question", input_len=s + q)
        put(ko, o, output_len=o)
        done |= {k for k in order if k.startswith((ks, kq, ko))}
    elif dtype == "random":
        for side, field in (("input_distribution", "input_len"), ("output_distribution", "output_len")):
            dist = dataset.get(side)
            key = f"data.{side}.mean"
            if not isinstance(dist, dict) or "mean" not in dist:
                raise InputError(f"{what}: data.{side}.mean is missing; valid: data.{side}: {{mean: N, min, max, "
                                 "std_dev}}")
            put(key, dist["mean"], why="the mean length, priced as every request's", **{field: count(key,
                                                                                                    dist["mean"],
                                                                                                    what)})
            for k, value in leaves:
                if k.startswith(f"data.{side}.") and k != key:
                    acc.skip(k, value, order[k], "perfmodel draws lengths uniformly about the nominal length "
                                                 "(--range-ratio), not from this distribution")
                    done.add(k)
        put("data.type", dtype, why="synthetic lengths")
    else:
        if "type" in dataset:
            acc.skip("data.type", dtype, order["data.type"], f"the lengths are {dtype}'s prompts', which this reader "
                     "does not read: give --input-len and --output-len (perfmodel reads random and shared_prefix)")
            done.add("data.type")
        else:
            acc.notes.append("data.type defaults to mock: give --input-len and --output-len")
    for key, value in leaves:
        if key in done:
            continue
        why = next((w for p, w in PERF_NOT_PRICED.items() if key == p or key.startswith(p + ".")), None)
        acc.skip(key, value, order[key], why or "not a key this reader knows")
    if "server" in data and isinstance(data["server"], dict) and data["server"].get("model_name"):
        acc.notes.append(f"server.model_name = {data['server']['model_name']}: the model is the server command's "
                         "(or --model)")
    return acc.read("inference-perf", source, data.get("server", {}).get("model_name") if isinstance(
        data.get("server"), dict) else None)


__all__ = ["read_bench", "read_bench_file", "read_inference_perf"]
