"""Megatron-LM's checks of an exported `pretrain_gpt.py` script (stdin), at one version (argv[1]); run by
perfmodel.export.checks.releases.run_check with that version's megatron-core release first on PYTHONPATH.

Megatron-LM's own argument parser (megatron/training/arguments.py) is not published on PyPI and GitHub is out of
reach of the machines this runs on, so the check has two parts:
1. megatron-core's own code, run as Megatron-LM runs it: the arguments become TransformerConfig (MLATransformerConfig
   with latent attention) and DistributedDataParallelConfig fields the way megatron/training/arguments.py's
   core_transformer_config_from_args does (every config field named like an argument, plus the renames below),
   so their __post_init__ checks run, among them pipeline_model_parallel_layout's parse and validate_layer_layout;
   an argument whose config field the release lacks is refused, as argparse refuses an unknown argument.
2. the checks of validate_args that need no GPU, transcribed (TRANSCRIBED names them): the environment variable,
   the world size and batch divisibility, fp16 with expert parallelism.
It prints one JSON line: {"accepted", "error", "checks"}.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import sys
import warnings

# Megatron-LM argument -> the config field it sets, where the names differ (core_transformer_config_from_args)
RENAMED = {"num_experts": "num_moe_experts", "decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
           "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage", "fp8_format": "fp8",
           "fp4_format": "fp4", "accumulate_allreduce_grads_in_fp32": "grad_reduce_in_fp32"}
# Transformer Engine is CUDA-only, so megatron-core's TE version checks read this instead of an installed TE. It
# is an assumption, not a measurement: the TE of the NVIDIA PyTorch container of each release's time (NGC 25.04
# for core_r0.12, 25.11 for core_r0.16, from NVIDIA's container release notes as remembered, not checked from
# here). --check's output states it; a launch with an older TE can fail checks these pass.
TE_VERSION = {"core_r0.16": "2.9.0", "core_r0.12": "2.2.0"}
TRANSCRIBED = ["validate_args: CUDA_DEVICE_MAX_CONNECTIONS", "validate_args: world size and batch",
               "validate_args: fp16 with expert parallelism"]


def parse_script(text: str) -> tuple[dict[str, str | None], int, dict[str, object]]:
    """(environment set by the script: name -> value, None when unset; world size from torchrun's --nproc-per-node
    x --nnodes; pretrain_gpt.py arguments: dest -> value, True for a flag, a list for several values)."""
    env, world, args = {}, 0, {}
    body = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    for line in body.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            name, _, value = words[1].partition("=")
            env[name] = value
        elif words[:1] == ["unset"]:
            env[words[1]] = None
        elif words[:1] == ["torchrun"]:
            world = int(words[words.index("--nproc-per-node") + 1]) * int(words[words.index("--nnodes") + 1])
            rest = words[words.index("pretrain_gpt.py") + 1:]
            key = None
            for w in rest:
                if w.startswith("--"):
                    key = w[2:].replace("-", "_")
                    args[key] = True
                elif key is not None:
                    v = _value(w)
                    args[key] = v if args[key] is True else [*(args[key] if isinstance(args[key], list)
                                                                else [args[key]]), v]
    return env, world, args


def _value(w: str):
    for kind in (int, float):
        try:
            return kind(w)
        except ValueError:
            pass
    return w


def validate_args(env: dict, world: int, a: dict) -> list[str]:
    """The transcribed validate_args checks (TRANSCRIBED); their messages as Megatron-LM words them."""
    tp, pp, cp = a.get("tensor_model_parallel_size", 1), a.get("pipeline_model_parallel_size", 1), \
        a.get("context_parallel_size", 1)
    fsdp = a.get("use_megatron_fsdp") or a.get("use_custom_fsdp")
    errors = []
    if (tp > 1 or cp > 1) and not fsdp and env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        errors.append("Using tensor model parallelism or context parallelism require setting the environment "
                      "variable CUDA_DEVICE_MAX_CONNECTIONS to 1")
    if fsdp and env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
        errors.append("FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one")
    if world % (tp * pp * cp):
        errors.append(f"world size ({world}) is not divisible by tensor parallel size ({tp}) times pipeline "
                      f"parallel size ({pp}) times context parallel size ({cp})")
    else:
        dp = world // (tp * pp * cp)
        if a["global_batch_size"] % (a["micro_batch_size"] * dp):
            errors.append(f"global batch size ({a['global_batch_size']}) is not divisible by micro batch size "
                          f"({a['micro_batch_size']}) times data parallel size ({dp})")
    if a.get("fp16") and a.get("expert_model_parallel_size", 1) > 1:
        errors.append("Expert parallelism is not supported with fp16 training.")
    return errors


def core_configs(a: dict, version: str) -> list[str]:
    """Build megatron-core's configs from the arguments (their __post_init__ checks run); the functions run."""
    import torch
    import torch.nn.functional as F
    from megatron.core import utils
    from packaging.version import Version

    utils.get_te_version = lambda: Version(TE_VERSION[version])
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import transformer_config as tc
    from megatron.core.transformer.enums import AttnBackend

    cls = tc.MLATransformerConfig if a.get("multi_latent_attention") else tc.TransformerConfig
    kw = {RENAMED.get(k, k): v for k, v in a.items()}
    pp = a.get("pipeline_model_parallel_size", 1)
    if "num_layers_per_virtual_pipeline_stage" in a:  # validate_args derives the virtual stages from it
        kw["virtual_pipeline_model_parallel_size"] = a["num_layers"] // pp // a["num_layers_per_virtual_pipeline_stage"]
    if "num_virtual_stages_per_pipeline_rank" in a:
        kw["virtual_pipeline_model_parallel_size"] = a["num_virtual_stages_per_pipeline_rank"]
    if "pipeline_model_parallel_layout" in a:
        kw["virtual_pipeline_model_parallel_size"] = None  # the layout sets it
    if isinstance(kw.get("recompute_modules"), str):
        kw["recompute_modules"] = [kw["recompute_modules"]]
    if isinstance(kw.get("moe_layer_freq"), str):  # arguments.py's moe_freq_type evaluates the expression
        kw["moe_layer_freq"] = eval(kw["moe_layer_freq"])  # noqa: S307 (a list expression this exporter wrote)
    if "attention_backend" in kw:
        kw["attention_backend"] = AttnBackend[kw["attention_backend"]]
    kw["gated_linear_unit"] = bool(a.get("swiglu"))
    if a.get("swiglu"):
        kw["activation_func"] = F.silu
    kw["add_bias_linear"] = not a.get("disable_bias_linear", False)
    kw["params_dtype"] = kw["pipeline_dtype"] = torch.bfloat16 if a.get("bf16") else torch.float16 if a.get(
        "fp16") else torch.float32
    known = {f.name for f in dataclasses.fields(cls)}
    ddp_known = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    missing = [k for k in ("pipeline_model_parallel_layout", "recompute_modules", "fp4", "mtp_num_layers",
                           "overlap_moe_expert_parallel_comm", "attention_backend") if k in kw and k not in known]
    missing += [k for k in ("use_megatron_fsdp", "use_custom_fsdp", "data_parallel_sharding_strategy")
                if k in kw and k not in ddp_known]
    if missing:
        raise ValueError(f"unrecognized arguments: {' '.join('--' + k.replace('_', '-') for k in missing)} (this "
                         "release's configs have no such field)")
    cls(**{k: v for k, v in kw.items() if k in known})
    DistributedDataParallelConfig(**{k: v for k, v in kw.items() if k in ddp_known})
    return [f"{cls.__name__}.__post_init__ (Transformer Engine {TE_VERSION[version]} assumed)",
            "DistributedDataParallelConfig.__post_init__"]


def check(text: str, version: str) -> dict:
    """{"accepted", "error", "checks"} for one exported script at `version`."""
    env, world, a = parse_script(text)
    checks = list(TRANSCRIBED)
    try:
        errors = validate_args(env, world, a)
        if errors:
            raise ValueError("; ".join(errors))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            checks += core_configs(a, version)
    except Exception as e:  # noqa: BLE001 (the framework's refusal, whatever its type, is the result)
        return {"accepted": False, "error": f"{type(e).__name__}: {e}", "checks": checks}
    return {"accepted": True, "error": "", "checks": checks}


if __name__ == "__main__":
    print(json.dumps(check(sys.stdin.read(), sys.argv[1])), flush=True)
    os._exit(0)  # as batch.py: no interpreter teardown once the answer is out
