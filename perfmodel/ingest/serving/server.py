"""A vLLM or SGLang server's command line -> `perfmodel infer`'s layout and engine settings, every flag accounted for.

vLLM: `vllm serve MODEL ...` or `python -m vllm.entrypoints.openai.api_server --model MODEL ...`; the flags as
vllm/engine/arg_utils.py (EngineArgs.add_cli_args) and vllm/entrypoints/openai/cli_args.py define them.
SGLang: `python -m sglang.launch_server --model-path MODEL ...`; the flags of
python/sglang/srt/server_args.py (ServerArgs.add_cli_args). How each maps is in the tables below, cited there.

The layout: a replica is tp x attention_dp x pp GPUs (docs/inference.md "Layout").
- vLLM `--data-parallel-size D` of a dense model is D replicas. Of a MoE model it is attention data parallelism:
  "the expert layers form a (DP x TP) sized group" and with `--enable-expert-parallel` the experts are split over
  it (docs.vllm.ai serving/data_parallel_deployment, serving/expert_parallel_deployment), so attention_dp = D and
  ep = tp x D (ep = tp at D = 1).
- SGLang `--tp-size T --dp-size D` is D router replicas of T GPUs; with `--enable-dp-attention` it is one replica of
  T GPUs whose attention runs in D groups of T / D (docs/basic_usage/deepseek_v3.md, "Data Parallelism Attention":
  `--enable-dp-attention --tp 16 --dp 2` is "2 DP groups, each containing 8 TP GPUs"), so tp = T / D,
  attention_dp = D. `--ep-size E` splits the experts E ways within the T GPUs (moe_tp = T / E).
"""

from __future__ import annotations

from ...errors import InputError
from ...spec.model.catalogue import load_model
from ...spec.model.config import ModelConfig
from ...spec.serving.schema import ServePlan
from .account import Account, CommandRead, choice, count, json_object, number, switch
from .models import precision_named, preset_for
from .words import Flag, command_words, flags_of

WHAT = {"vllm": "vllm serve command", "sglang": "sglang.launch_server command"}
SPEC_EXAMPLE = '{"method":"eagle3","num_speculative_tokens":3}'

# ----------------------------------------------------------------------------------------------- flag tables
# name -> (short forms, takes no value); the canonical name is the long one
VLLM_FLAGS = {
    "--model": (), "--tensor-parallel-size": ("-tp",), "--pipeline-parallel-size": ("-pp",),
    "--data-parallel-size": ("-dp",), "--enable-expert-parallel": ("-ep",), "--max-num-seqs": (),
    "--max-num-batched-tokens": (), "--gpu-memory-utilization": (), "--kv-cache-dtype": (),
    "--quantization": ("-q",), "--dtype": (), "--enable-prefix-caching": (), "--enable-chunked-prefill": (),
    "--max-model-len": (), "--speculative-config": (), "--block-size": (), "--kv-offloading-size": (),
    "--num-redundant-experts": (), "--all2all-backend": (), "--enable-dbo": (), "--compilation-config": ("-cc", "-O"),
}
VLLM_SWITCHES = {"--enable-expert-parallel", "--enable-prefix-caching", "--enable-chunked-prefill", "--enable-dbo",
                 "--trust-remote-code", "--disable-log-requests", "--disable-log-stats", "--enable-log-requests",
                 "--enable-auto-tool-choice", "--enforce-eager", "--async-scheduling", "--enable-eplb", "--headless",
                 "--disable-custom-all-reduce", "--enable-prompt-tokens-details", "--disable-uvicorn-access-log",
                 "--enable-sleep-mode", "--enable-server-load-tracking", "--disable-fastapi-docs",
                 "--enable-force-include-usage", "--enable-log-outputs"}
SGLANG_FLAGS = {
    "--model-path": ("--model",), "--tp-size": ("--tp",), "--dp-size": ("--dp",), "--ep-size": ("--ep",),
    "--pp-size": ("--pp",), "--enable-dp-attention": (), "--mem-fraction-static": (), "--max-running-requests": (),
    "--chunked-prefill-size": (), "--max-prefill-tokens": (), "--kv-cache-dtype": (), "--quantization": (),
    "--dtype": (), "--disable-radix-cache": (), "--speculative-algorithm": (), "--speculative-num-draft-tokens": (),
    "--speculative-num-steps": (), "--speculative-eagle-topk": (), "--context-length": (), "--page-size": (),
    "--enable-two-batch-overlap": (), "--moe-a2a-backend": (), "--ep-num-redundant-experts": (),
    "--enable-ep-moe": (),
}
SGLANG_SWITCHES = {"--enable-dp-attention", "--disable-radix-cache", "--enable-two-batch-overlap", "--enable-ep-moe",
                   "--trust-remote-code", "--disable-cuda-graph", "--enable-torch-compile", "--enable-metrics",
                   "--enable-dp-lm-head", "--disable-overlap-schedule", "--log-requests", "--enable-mixed-chunk",
                   "--skip-server-warmup", "--enable-cache-report", "--enable-eplb", "--disable-shared-experts-fusion",
                   "--enable-deterministic-inference", "--enable-nan-detection", "--show-time-cost",
                   "--enable-hierarchical-cache"}

# Flags that do not change speed, or whose effect this model does not price: flag -> why
_NETWORK = "where the server listens: no part of the step's time"
_FRONT = "the API front end's parsing and templates: not a cost the model prices apart from the stack's front end"
_LOGS = "logging: not priced"
_LOAD = "how weights are found and loaded: start-up, not serving"
NOT_PRICED = {
    **dict.fromkeys(("--host", "--port", "--root-path", "--allowed-origins", "--api-key", "--uvicorn-log-level",
                     "--ssl-keyfile", "--ssl-certfile", "--api-server-count", "--headless", "--data-parallel-address",
                     "--data-parallel-rpc-port", "--data-parallel-size-local", "--data-parallel-start-rank",
                     "--dist-init-addr", "--nnodes", "--node-rank", "--data-parallel-backend",
                     "--distributed-executor-backend"), _NETWORK),
    **dict.fromkeys(("--served-model-name", "--enable-auto-tool-choice", "--tool-call-parser", "--reasoning-parser",
                     "--chat-template", "--chat-template-content-format", "--tool-server", "--generation-config",
                     "--override-generation-config", "--response-role", "--return-tokens-as-token-ids",
                     "--enable-prompt-tokens-details", "--enable-force-include-usage", "--tokenizer",
                     "--tokenizer-mode", "--trust-request-chat-template", "--max-log-len"), _FRONT),
    **dict.fromkeys(("--disable-log-requests", "--disable-log-stats", "--enable-log-requests", "--enable-log-outputs",
                     "--disable-uvicorn-access-log", "--log-requests", "--log-level", "--enable-metrics",
                     "--enable-cache-report", "--show-time-cost", "--otlp-traces-endpoint"), _LOGS),
    **dict.fromkeys(("--trust-remote-code", "--download-dir", "--load-format", "--revision", "--code-revision",
                     "--tokenizer-revision", "--hf-overrides", "--seed", "--random-seed", "--model-impl",
                     "--skip-server-warmup", "--enable-sleep-mode", "--disable-fastapi-docs",
                     "--enable-server-load-tracking"), _LOAD),
    "--max-model-len": "the longest request the engine admits: perfmodel checks input + output against the model's "
                       "max_seq_len, and the requests priced are the benchmark's lengths",
    "--context-length": "the longest request the engine admits: perfmodel checks input + output against the model's "
                        "max_seq_len, and the requests priced are the benchmark's lengths",
    "--block-size": "tokens per KV block: ServePlan has no block size; the stack profile's kv_block_tokens (vLLM 16) "
                    "sets where a shared prefix's cache hit stops",
    "--page-size": "tokens per KV page: ServePlan has no page size; the stack profile's kv_block_tokens (SGLang 1) sets "
                   "where a shared prefix's cache hit stops",
    "--kv-offloading-size": "KV blocks offloaded to CPU memory: this ServePlan has no kv_offload_gb field, so the KV "
                            "cache is the GPU's alone",
    "--kv-offloading-backend": "KV blocks offloaded to CPU memory: ServePlan has no kv_offload field",
    "--swap-space": "CPU swap for preempted sequences: preemption is priced as recomputation",
    "--cpu-offload-gb": "weights offloaded to CPU memory: not priced (every weight is read from HBM)",
    "--enable-prefix-caching": "ServePlan has no prefix-cache switch: the stack profile's (on, for vLLM and SGLang) "
                               "holds; it matters only where the benchmark's prompts share a prefix",
    "--disable-radix-cache": "ServePlan has no prefix-cache switch: the stack profile's (on, for vLLM and SGLang) "
                             "holds; it matters only where the benchmark's prompts share a prefix",
    "--attention-backend": "the attention kernels are priced from the part's measured tables, not by backend",
    "--compilation-config": "torch.compile passes and fusions: the stack release's graph defaults are priced, not "
                            "per-run fusions",
    "--enforce-eager": "CUDA graphs off: the stack release's graph defaults hold (EngineRelease); eager decode is "
                       "slower than priced",
    "--disable-cuda-graph": "CUDA graphs off: the stack release's graph defaults hold (EngineRelease); eager decode "
                            "is slower than priced",
    "--cuda-graph-max-bs": "the largest decode batch captured: the stack release's decode_graph_max_batch holds",
    "--cuda-graph-bs": "the decode batches captured: the stack release's decode_graph_max_batch holds",
    "--cuda-graph-sizes": "the decode batches captured: the stack release's decode_graph_max_batch holds",
    "--async-scheduling": "the stack release's async_scheduling default holds (EngineRelease), not a per-run switch",
    "--disable-overlap-schedule": "the stack release's async_scheduling default holds (EngineRelease)",
    "--enable-torch-compile": "the stack release's compiled default holds (EngineRelease)",
    "--torch-compile-max-bs": "the stack release's compiled default holds (EngineRelease)",
    "--disable-custom-all-reduce": "the engines' own all-reduce is priced from the part's measured table",
    "--enable-eplb": "EPLB's rebalancing is not priced: tokens are routed uniformly (balanced routing)",
    "--eplb-config": "EPLB's rebalancing is not priced: tokens are routed uniformly (balanced routing)",
    "--kv-transfer-config": "disaggregated serving's KV connector: the prefill pool is --prefill-dp / --prefill-tp",
    "--disaggregation-mode": "disaggregated serving: the prefill pool is --prefill-dp / --prefill-tp",
    "--limit-mm-per-prompt": "multimodal inputs are not priced (text tokens only)",
    "--mm-encoder-tp-mode": "multimodal encoders are not priced (text tokens only)",
    "--speculative-eagle-topk": "perfmodel prices a chain of drafts; a tree (topk > 1) verifies "
                                "--speculative-num-draft-tokens tokens, as priced",
    "--speculative-draft-model-path": "the draft's weights: an EAGLE-3 layer or the model's MTP module of the "
                                      "model's own shape is priced",
    "--deepep-mode": "DeepEP's kernels are priced as the low-latency ones (moe_a2a deepep_ll)",
    "--moe-runner-backend": "the fused MoE is priced by the stack profile's moe_kernel, not by backend",
    "--moe-dense-tp-size": "the dense MLPs run at the attention's tp as priced",
    "--enable-dp-lm-head": "the LM head runs at tp as priced",
    "--schedule-policy": "the scheduler is first-come first-served as priced",
    "--scheduling-policy": "the scheduler is first-come first-served as priced",
    "--enable-mixed-chunk": "prompt chunks share decode steps as the stack release says (EngineRelease.mixed_prefill)",
    "--max-num-partial-prefills": "the stack's chunked prefill is priced one prompt chunk at a time",
    "--long-prefill-token-threshold": "the stack's chunked prefill is priced at max_num_tokens a step",
    "--config": "a YAML of more flags, which this reader does not open: give its flags on the command line",
    "--enable-hierarchical-cache": "KV offload to host memory is not priced (the KV cache is the GPU's alone)",
    "--disable-shared-experts-fusion": "the shared experts are priced as their own GEMMs",
}


def _known(table: dict[str, tuple], switches: set[str]) -> dict[str, str]:
    names = {name: name for name in list(table) + list(NOT_PRICED) + sorted(switches)}
    for name, shorts in table.items():
        names.update({s: name for s in shorts})
    return names


# ---------------------------------------------------------------------------------------- shared value tables
# --dtype: vLLM ModelConfig dtype choices (auto, half, float16, bfloat16, float, float32), SGLang's the same
DTYPES = {"auto": None, "bfloat16": "bf16", "bf16": "bf16", "half": "fp16", "float16": "fp16", "fp16": "fp16"}
# --kv-cache-dtype: vLLM CacheDType (auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla), SGLang's (auto,
# fp8_e4m3, fp8_e5m2, bf16, bfloat16); "auto" is the model's dtype (vllm/config/cache.py, server_args.py)
KV_DTYPES = {"auto": None, "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
             "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8_inc": "fp8", "fp8_ds_mla": "fp8"}
# --quantization -> ServePlan.precision, with why; None: the scheme is the checkpoint's and not told by the flag.
# vLLM: vllm/model_executor/layers/quantization/__init__.py QUANTIZATION_METHODS ("modelopt" is ModelOptFp8Config,
# "modelopt_fp4" NVFP4); SGLang: python/sglang/srt/layers/quantization/__init__.py
QUANTIZATIONS = {
    "fp8": ("fp8", ""), "modelopt": ("fp8", "ModelOpt's FP8 checkpoint"), "modelopt_fp8": ("fp8", ""),
    "w8a8_fp8": ("fp8", ""), "fbgemm_fp8": ("fp8", ""), "ptpc_fp8": ("fp8", ""),
    "modelopt_fp4": ("fp4", "NVFP4"), "nvfp4": ("fp4", ""), "fp4": ("fp4", ""),
    "mxfp4": ("w4a16", "MXFP4 weights, as vLLM runs them on Hopper (Marlin), bf16 activations"),
    **dict.fromkeys(("awq", "awq_marlin", "gptq", "gptq_marlin", "marlin", "moe_wna16"),
                    ("w4a16", "4-bit weights in groups, bf16 activations (an 8-bit GPTQ is not told apart)")),
}


def read_server(text: str, model: str | ModelConfig | None = None) -> CommandRead:
    """The server command `text` read: perfmodel infer's layout and engine fields, every flag's fate. `model`, the
    user's --model where given (a preset, a file or a ModelConfig), says whether the model has experts (how data
    parallelism maps, above); else the command's own model, where it names a preset. InputError in one line for a
    program this reader does not know, a value no engine takes, or flags that contradict each other."""
    words, env = command_words(text, "server command")
    engine, start, model_word = _program(words)
    what = WHAT[engine]
    table, switches = (VLLM_FLAGS, VLLM_SWITCHES) if engine == "vllm" else (SGLANG_FLAGS, SGLANG_SWITCHES)
    flags, loose = flags_of(words, start, _known(table, switches), switches, what)
    acc = Account(what)
    for name, value in env.items():
        acc.skip(name, value, -1, "an environment variable: kernel and backend choices the model does not price")
    acc.set(" ".join(words[:model_word or start]), engine, 0, why="the serving engine's profile", stack=engine)
    model_id = _model(acc, flags, None if model_word is None else words[model_word], model_word, what)
    config = _model_config(model, model_id)
    by: dict[str, Flag] = {}
    for f in flags:
        if f.sub:
            continue
        if f.name in by:
            acc.skip(by[f.name].written, by[f.name].value, by[f.name].word,
                     f"given again at word {f.word}: argparse keeps the last")
        by[f.name] = f
    dotted = [f for f in flags if f.sub]
    flags = [f for f in flags if not f.sub and by.get(f.name) is f]
    handled = _layout(acc, engine, {f.name: f for f in flags}, config, what)
    handled |= _precision(acc, {f.name: f for f in flags}, model_id, what)
    handled |= _speculative(acc, engine, {f.name: f for f in flags}, dotted, config, what)
    handled |= {"--model", "--model-path"}
    for f in flags:
        if f.name not in handled:
            _setting(acc, engine, f, what)
    for i, word in loose:
        acc.skip(word, "", i, "a word outside any flag: not a flag this reader knows (the engine's parser would "
                              "refuse it)")
    return acc.read("vllm serve" if engine == "vllm" else "sglang.launch_server", text, model_id,
                    {f.written: f.how for f in flags if f.how})


def _program(words: list[str]) -> tuple[str, int, int | None]:
    """(engine, index of the first flag, index of a positional model or None)."""
    w = [x.rsplit("/", 1)[-1] for x in words[:3]]
    if w[:2] == ["vllm", "serve"]:
        has_model = len(words) > 2 and not words[2].startswith("-")
        return "vllm", 3 if has_model else 2, 2 if has_model else None
    if len(w) >= 3 and w[0].startswith("python") and w[1] == "-m":
        if words[2] == "vllm.entrypoints.openai.api_server":
            return "vllm", 3, None
        if words[2] == "sglang.launch_server":
            return "sglang", 3, None
    raise InputError(f"server command: {' '.join(words[:3])!r} is not a server this reader knows; valid: vllm serve "
                     "MODEL ..., python -m vllm.entrypoints.openai.api_server --model MODEL ..., python -m "
                     "sglang.launch_server --model-path MODEL ...")


def _model(acc: Account, flags: list[Flag], positional: str | None, model_word: int | None,
           what: str) -> str | None:
    """The model the command serves, recorded as a key; its id."""
    given = [(f.written, f.value, f.word) for f in flags if f.name in ("--model", "--model-path")]
    if positional is not None:
        given.insert(0, ("model", positional, model_word))
    if not given:
        return None
    key, model_id, word = given[-1]
    for k, v, w in given[:-1]:
        if v != model_id:
            raise InputError(f"{what} names two models: {k} = {v} and {key} = {model_id}; valid: one")
    if not model_id:
        raise InputError(f"{what}: {key} has no value; valid: a Hugging Face id or a checkpoint folder")
    preset, how = preset_for(model_id)
    if preset is None:
        acc.skip(key, model_id, word, "no preset is this model: give --model (a preset, perfmodel models list, or "
                                      "the checkpoint's config.json)")
    else:
        acc.set(key, model_id, word, why=how or "the Hugging Face id's preset", model=preset)
    return model_id


def _model_config(model: str | ModelConfig | None, model_id: str | None) -> ModelConfig | None:
    if isinstance(model, ModelConfig):
        return model
    name = model or (preset_for(model_id)[0] if model_id else None)
    return load_model(name) if name else None


def _layout(acc: Account, engine: str, by: dict[str, Flag], config: ModelConfig | None, what: str) -> set[str]:
    """tp, pp, dp, attention_dp and ep from the parallel flags (module docstring); the flags it read."""
    def get(name, least=1):
        f = by.get(name)
        return (count(f.written, f.value, what, least), f) if f is not None else (None, None)

    moe = None if config is None else config.moe is not None
    if engine == "vllm":
        (tp, ftp), (pp, fpp), (dp, fdp) = (get(n) for n in ("--tensor-parallel-size", "--pipeline-parallel-size",
                                                            "--data-parallel-size"))
        fep = by.get("--enable-expert-parallel")
        ep_on = fep is not None and switch(fep.written, fep.value, what)
        if ftp:
            acc.set(ftp.written, tp, ftp.word, tp=tp)
        if fpp:
            acc.set(fpp.written, pp, fpp.word, pp=pp)
        moe_dp = moe or (moe is None and ep_on)
        if fdp and moe_dp and dp > 1:
            acc.set(fdp.written, dp, fdp.word, why="a MoE model's data parallelism: attention in dp groups, the "
                    "experts over all dp x tp GPUs (vLLM data_parallel_deployment)", attention_dp=dp, dp=1)
        elif fdp:
            acc.set(fdp.written, dp, fdp.word, why="replicas of a dense model" if moe is False else
                    "replicas (the model's experts unknown: give --model)", dp=dp)
        if fep is not None:
            if not ep_on:
                acc.skip(fep.written, fep.value, fep.word, "off: the experts split tp ways (the default)")
            elif moe is False:
                acc.skip(fep.written, fep.value, fep.word, "a dense model has no experts to split")
            else:
                acc.set(fep.written, "true", fep.word, why="the experts split over tp x dp GPUs",
                        ep=(tp or 1) * (dp or 1))
        return {"--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
                "--enable-expert-parallel"}
    (tp, ftp), (dp, fdp), (ep, fep), (pp, fpp) = (get(n) for n in ("--tp-size", "--dp-size", "--ep-size",
                                                                    "--pp-size"))
    fatt, fepm = by.get("--enable-dp-attention"), by.get("--enable-ep-moe")
    att = fatt is not None and switch(fatt.written, fatt.value, what)
    tp_all = tp or 1
    if fpp:
        acc.set(fpp.written, pp, fpp.word, pp=pp)
    if att:
        d = dp or 1
        if tp_all % d:
            raise InputError(f"{what}: --enable-dp-attention with {ftp.written if ftp else '--tp-size'} = {tp_all} "
                             f"and {fdp.written if fdp else '--dp-size'} = {d}: the attention groups split the tp "
                             f"GPUs evenly; valid: a dp size dividing {tp_all}")
        acc.set(fatt.written, "true", fatt.word, why=f"the {tp_all} GPUs' attention in {d} groups of {tp_all // d}",
                tp=tp_all // d, attention_dp=d, dp=1)
        if ftp:
            acc.set(ftp.written, tp, ftp.word, why="with --enable-dp-attention: GPUs of the replica, tp x attention_dp")
        if fdp:
            acc.set(fdp.written, dp, fdp.word, why="with --enable-dp-attention: attention data-parallel groups")
    else:
        if fatt is not None:
            acc.skip(fatt.written, fatt.value, fatt.word, "off (the default)")
        if ftp:
            acc.set(ftp.written, tp, ftp.word, tp=tp)
        if fdp:
            acc.set(fdp.written, dp, fdp.word, why="router replicas of tp GPUs each", dp=dp)
    if fep:
        acc.set(fep.written, ep, fep.word, why="the experts split over ep of the replica's tp GPUs", ep=ep)
    if fepm is not None:
        if switch(fepm.written, fepm.value, what):
            acc.set(fepm.written, "true", fepm.word, why="SGLang sets ep_size = tp_size (server_args.py)", ep=tp_all)
        else:
            acc.skip(fepm.written, fepm.value, fepm.word, "off (the default)")
    return {"--tp-size", "--dp-size", "--ep-size", "--pp-size", "--enable-dp-attention", "--enable-ep-moe"}


def _precision(acc: Account, by: dict[str, Flag], model_id: str | None, what: str) -> set[str]:
    """precision from --quantization, else the checkpoint's name or config, else --dtype; kv_dtype from
    --kv-cache-dtype ("auto": the model's dtype, bf16 unless --dtype says fp16)."""
    fq, fd, fk = by.get("--quantization"), by.get("--dtype"), by.get("--kv-cache-dtype")
    named, named_why = precision_named(model_id) if model_id else (None, "")
    dtype = None
    if fd is not None:
        if str(fd.value).lower() in ("float32", "float", "fp32"):
            raise InputError(f"{what}: {fd.written} = {fd.value}: fp32 serving is not priced; valid: "
                             f"{', '.join(DTYPES)}")
        dtype = choice(fd.written, fd.value, what, DTYPES)
    if named and model_id:
        acc.set("model precision", model_id, 0.5, why=named_why, precision=named)
    if fq is not None:
        q = QUANTIZATIONS.get(str(fq.value).lower())
        if q is None:
            acc.skip(fq.written, fq.value, fq.word, f"a scheme perfmodel does not price by this name (it prices "
                     f"{', '.join(sorted(QUANTIZATIONS))}); give --precision")
        else:
            acc.set(fq.written, fq.value, fq.word, why=q[1], precision=q[0])
    if fd is not None:
        if fq is not None or named:
            acc.skip(fd.written, fd.value, fd.word, "the activations' dtype beside quantized weights: precision "
                                                    "comes from the quantization")
        elif dtype is None:
            acc.skip(fd.written, fd.value, fd.word, "the checkpoint's own dtype: bf16, --precision's default")
        else:
            acc.set(fd.written, fd.value, fd.word, precision=dtype)
    model_dtype = dtype or "bf16"
    if fk is not None:
        if str(fk.value).lower() not in KV_DTYPES:
            raise InputError(f"{what}: {fk.written} = {fk.value!r}: perfmodel prices a KV cache of bf16, fp16 or "
                             f"fp8; valid: {', '.join(KV_DTYPES)}")
        kv = KV_DTYPES[str(fk.value).lower()]
        acc.set(fk.written, fk.value, fk.word, why="auto: the model's dtype" if kv is None else "",
                kv_dtype=kv or model_dtype)
    else:
        acc.default("--kv-cache-dtype", "auto", why="the engines' default: the KV cache in the model's dtype",
                    kv_dtype=model_dtype)
    return {"--quantization", "--dtype", "--kv-cache-dtype"}


# vLLM SpeculativeConfig.method (vllm/config/speculative.py): the model's own MTP modules, EAGLE heads
VLLM_METHODS = {"mtp": "mtp", "deepseek_mtp": "mtp", "ernie_mtp": "mtp", "qwen3_next_mtp": "mtp", "glm4_moe_mtp": "mtp",
                "mimo_mtp": "mtp", "longcat_flash_mtp": "mtp", "eagle3": "eagle", "eagle": "eagle"}
# SGLang --speculative-algorithm (server_args.py): EAGLE on a model with MTP layers runs them (NEXTN is its alias,
# docs/basic_usage/deepseek_v3.md "Multi-token Prediction": --speculative-algorithm EAGLE); EAGLE3 an EAGLE-3 head
SGLANG_ALGORITHMS = {"eagle": "eagle", "eagle3": "eagle", "nextn": "mtp", "mtp": "mtp"}


def _speculative(acc: Account, engine: str, by: dict[str, Flag], dotted: list[Flag], config: ModelConfig | None,
                 what: str) -> set[str]:
    """speculative and draft_tokens from vLLM's --speculative-config (JSON, or its dotted keys) or SGLang's
    --speculative-algorithm and --speculative-num-draft-tokens / --speculative-num-steps."""
    if engine == "vllm":
        f = by.get("--speculative-config")
        spec = json_object(f.written, f.value, what, SPEC_EXAMPLE) if f is not None else {}
        for d in dotted:
            if d.name == "--speculative-config":
                spec[d.sub] = d.value
            else:
                acc.skip(d.written, d.value, d.word, NOT_PRICED.get(d.name, "not a flag this reader knows"))
        if not spec:
            return {"--speculative-config"}
        word = f.word if f is not None else min(d.word for d in dotted if d.name == "--speculative-config")
        key = f.written if f is not None else "--speculative-config.*"
        method = str(spec.get("method", "")).lower()
        if method not in VLLM_METHODS:
            acc.skip(key, spec, word, f"method {method or 'unset'!r}: perfmodel prices MTP modules and EAGLE heads "
                                      f"({', '.join(VLLM_METHODS)}); the estimate runs without drafts")
            return {"--speculative-config"}
        n = count(f"{key} num_speculative_tokens", spec.get("num_speculative_tokens"), what)
        kind = VLLM_METHODS[method]
        acc.set(key, _compact(spec), word, why="an EAGLE-1 head priced as an EAGLE-3 layer" if method == "eagle" else
                "", speculative=kind, draft_tokens=n)
        return {"--speculative-config"}
    fa, fn, fs = (by.get(n) for n in ("--speculative-algorithm", "--speculative-num-draft-tokens",
                                      "--speculative-num-steps"))
    if fa is None:
        for f in (fn, fs):
            if f is not None:
                acc.skip(f.written, f.value, f.word, "without --speculative-algorithm no draft runs")
        return {"--speculative-algorithm", "--speculative-num-draft-tokens", "--speculative-num-steps"}
    algo = str(fa.value).lower()
    if algo not in SGLANG_ALGORITHMS:
        acc.skip(fa.written, fa.value, fa.word, f"perfmodel prices {', '.join(SGLANG_ALGORITHMS)} (MTP modules and "
                                                "EAGLE heads); the estimate runs without drafts")
        return {"--speculative-algorithm", "--speculative-num-draft-tokens", "--speculative-num-steps"}
    kind = SGLANG_ALGORITHMS[algo]
    if algo == "eagle" and config is not None and config.mtp_layers:
        kind = "mtp"
    acc.set(fa.written, fa.value, fa.word, why="the model's own MTP module (SGLang runs it as EAGLE)" if (
        kind == "mtp" and algo == "eagle") else "", speculative=kind)
    if fn is not None:
        n = count(fn.written, fn.value, what, least=2)
        acc.set(fn.written, n, fn.word, why="tokens verified a step, the last accepted one included: a chain of "
                                            f"{n - 1} drafts", draft_tokens=n - 1)
        if fs is not None:
            acc.skip(fs.written, fs.value, fs.word, f"the drafts priced are {fn.written}'s")
    elif fs is not None:
        acc.set(fs.written, fs.value, fs.word, why="a chain of this many drafts", draft_tokens=count(fs.written,
                                                                                                     fs.value, what))
    else:
        acc.default("--speculative-num-steps", 3, why="SGLang's default for DeepSeek models: 3 steps, topk 1, 4 "
                    "draft tokens (docs/basic_usage/deepseek_v3.md)", draft_tokens=3)
    return {"--speculative-algorithm", "--speculative-num-draft-tokens", "--speculative-num-steps"}


def _compact(spec: dict) -> str:
    import json

    return json.dumps(spec, separators=(",", ":"))


# vLLM --all2all-backend (vllm/config/parallel.py All2AllBackend) -> ServePlan.moe_a2a
A2A = {"allgather_reducescatter": "allgather", "naive": "allgather", "deepep_low_latency": "deepep_ll",
       "pplx": "alltoall"}


def _setting(acc: Account, engine: str, f: Flag, what: str) -> None:
    """One engine setting: a scheduler limit, the memory share, an overlap, or a flag not priced."""
    k, v, w = f.written, f.value, f.word
    if f.name in ("--max-num-seqs", "--max-running-requests"):
        acc.set(k, v, w, max_batch=count(k, v, what))
    elif f.name == "--max-num-batched-tokens":
        acc.set(k, v, w, max_num_tokens=count(k, v, what))
    elif f.name == "--enable-chunked-prefill":
        acc.set(k, "true" if switch(k, v, what) else "false", w, chunked_prefill="on" if switch(k, v, what) else "off")
    elif f.name == "--chunked-prefill-size":
        n = int(number(k, v, what, low=-1, above=False)) if str(v).strip() == "-1" else count(k, v, what)
        if n == -1:
            acc.set(k, v, w, why="-1: chunked prefill off", chunked_prefill="off")
        else:
            acc.set(k, v, w, why="the step's token budget", max_num_tokens=n)
    elif f.name == "--max-prefill-tokens":
        acc.skip(k, v, w, "SGLang caps a prefill batch's tokens at it; the step's budget priced is "
                          "--chunked-prefill-size")
    elif f.name in ("--gpu-memory-utilization", "--mem-fraction-static"):
        acc.set(k, v, w, mem_fraction=number(k, v, what, 0.0, 1.0))
    elif f.name in ("--num-redundant-experts", "--ep-num-redundant-experts"):
        acc.set(k, v, w, redundant_experts=count(k, v, what, least=0))
    elif f.name == "--enable-two-batch-overlap" or f.name == "--enable-dbo":
        on = switch(k, v, what)
        if on:
            acc.set(k, "true", w, why="" if engine == "sglang" else "vLLM's dual-batch overlap: two micro-batches, "
                    "one's MoE exchange behind the other's compute", two_batch_overlap=True)
        else:
            acc.skip(k, v, w, "off (the default)")
    elif f.name == "--all2all-backend":
        a2a = A2A.get(str(v).lower())
        if a2a is None:
            acc.skip(k, v, w, f"perfmodel prices {', '.join(A2A)}")
        else:
            acc.set(k, v, w, moe_a2a=a2a)
    elif f.name == "--moe-a2a-backend":
        if str(v).lower() == "deepep":
            acc.set(k, v, w, why="DeepEP priced as its low-latency kernels", moe_a2a="deepep_ll")
        elif str(v).lower() == "none":
            acc.skip(k, v, w, "the default: all-gather and reduce-scatter (the stack's moe_a2a)")
        else:
            acc.skip(k, v, w, "perfmodel prices deepep (as deepep_ll) and the default all-gather")
    elif f.name == "--kv-offloading-size" and "kv_offload_gb" in ServePlan.model_fields:
        acc.set(k, v, w, why="GiB of host memory the OffloadingConnector keeps KV blocks in",
                kv_offload_gb=number(k, v, what, 0.0, 1e6, above=False))
    elif (f.name == "--enable-prefix-caching" and v == "false") or f.name == "--disable-radix-cache":
        acc.skip(k, v, w, NOT_PRICED[f.name].replace("holds;", "holds, though this command turns it off;"))
    elif f.name in NOT_PRICED:
        acc.skip(k, v, w, NOT_PRICED[f.name])
    elif f.name in VLLM_SWITCHES | SGLANG_SWITCHES:
        acc.skip(k, v, w, "a switch whose effect the model does not price")
    else:
        acc.skip(k, v, w, "not a flag this reader knows")
