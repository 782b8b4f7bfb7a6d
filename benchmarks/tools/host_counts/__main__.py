"""python -m benchmarks.tools.host_counts: every stack's counts, the checks, the table and the JSON (the package
docstring says what is counted and how)."""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch

from benchmarks.tools.host_counts.checks import cpu_ratios, gpu_check, sanity
from benchmarks.tools.host_counts.counter import EXTRA, KINDS
from benchmarks.tools.host_counts.fsdp2 import fsdp2_counts, fsdp2_worker
from benchmarks.tools.host_counts.optimizer import optimizer_counts
from benchmarks.tools.host_counts.stacks import (composer_fsdp1, deepspeed, hf_transformers, llmc, megatron_core,
                                                 nanogpt, nanotron, plain_torch, torchtitan)
from perfmodel.spec.model.operators import GRAPH_OPS

# the stacks read from their source, in the output's order
READ_ONLY = {"llmc": llmc.COUNTS, "deepspeed": deepspeed.COUNTS, "nanotron": nanotron.COUNTS,
             "composer-fsdp1": composer_fsdp1.COUNTS}


# -- output ----------------------------------------------------------------------------------------------------------
ABBREV = {"eager_op": "e", "view_op": "v", "module_call": "m", "fused_module": "f", "autograd_node": "n",
          "nccl_call": "c", "compiled_entry": "ce", "compiled_kernel": "ck", "graph_replay": "g", "kernel_launch": "k"}


def fmt(counts: dict) -> str:
    parts = []
    for k in KINDS:
        v = counts.get(k)
        if v:
            parts.append(f"{ABBREV[k]}{v:g}" if float(v).is_integer() else f"{ABBREV[k]}{v:.2f}")
    return " ".join(parts) or "-"


def table(results: dict) -> str:
    keys = " ".join(f"{a}={k}" for k, a in ABBREV.items())
    lines = [f"calls per operator (layer operators: per layer; others: per step, one micro-batch); {keys}", ""]
    for stack, r in results.items():
        if not isinstance(r, dict) or "qkv" not in r:
            continue
        for label, res in [(stack, r)] + [(f"{stack} [{v}]", rv) for v, rv in r.get("_variants", {}).items()
                                          if isinstance(rv, dict) and "qkv" in rv]:
            lines.append(f"== {label}")
            lines.append(f"  {'operator':17s} {'forward':34s} backward")
            for op in (*GRAPH_OPS, *EXTRA):
                d = res.get(op, {})
                f, b = fmt(d.get("forward", {})), fmt(d.get("backward", {}))
                if f == "-" and b == "-":
                    continue
                lines.append(f"  {op:17s} {f:34s} {b}")
            lines.append("")
    return "\n".join(lines)


def strip(res: dict) -> dict:
    """A stack's result without the per-layer check's bookkeeping."""
    return {k: v for k, v in res.items() if k not in ("_layers_seen",)}


def run_all(only: set | None, compile_: bool, echo) -> dict:
    want = lambda s: only is None or s in only  # noqa: E731
    out: dict = {}
    t0 = time.perf_counter()
    opt = optimizer_counts()
    echo(f"optimizer counts ({time.perf_counter() - t0:.0f} s)")
    ratios = cpu_ratios()
    echo(f"CPU ratios: {ratios['ratios_to_eager_op']}")
    fsdp = fsdp2_counts() if (want("torchtitan") or want("plain-torch")) else None
    echo(f"FSDP2 counts ({time.perf_counter() - t0:.0f} s)")
    if want("plain-torch"):
        main, llama = plain_torch.plain_torch("gpt2"), plain_torch.plain_torch("llama")
        step = main.pop("_step")
        llama.pop("_step")
        out["plain-torch"] = {**strip(main), "_step": step, "_optimizer": opt, "_fsdp2": fsdp,
                              "_variants": {"llama": strip(llama)}, "_source": plain_torch.SOURCE}
        echo(f"plain-torch ({time.perf_counter() - t0:.0f} s)")
    if want("nanogpt"):
        nano = nanogpt.nanogpt()
        out["nanogpt"] = {**strip(nano), "_optimizer": opt, "_source": nanogpt.SOURCE}
        if compile_:
            out["nanogpt"]["_compiled"] = nanogpt.nanogpt_compiled()
            echo(f"nanogpt compiled ({time.perf_counter() - t0:.0f} s)")
        out["_sanity"] = sanity(nano, opt, ratios, out["nanogpt"].get("_compiled"))
        echo(f"nanogpt ({time.perf_counter() - t0:.0f} s)")
    if want("hf-transformers"):
        try:
            g, ll = hf_transformers.hf("gpt2"), hf_transformers.hf("llama")
            out["hf-transformers"] = {**strip(g), "_optimizer": opt, "_variants": {"llama": strip(ll)},
                                      "_source": hf_transformers.source(g["_version"])}
        except ImportError as err:
            out["hf-transformers"] = {"_error": f"transformers not importable: {err}"}
        echo(f"hf-transformers ({time.perf_counter() - t0:.0f} s)")
    if want("torchtitan"):
        try:
            tt = torchtitan.torchtitan()
            out["torchtitan"] = {**strip(tt), "_optimizer": opt, "_fsdp2": fsdp,
                                 "_source": torchtitan.source(tt["_version"])}
        except Exception as err:  # noqa: BLE001 - a framework that cannot run here is reported
            out["torchtitan"] = {"_error": repr(err)[:500]}
        echo(f"torchtitan ({time.perf_counter() - t0:.0f} s)")
    if want("megatron-core"):
        try:
            mg, nf, ml = (megatron_core.megatron_core("gpt2", True), megatron_core.megatron_core("gpt2", False),
                          megatron_core.megatron_core("llama", True))
            te = megatron_core.megatron_te("gpt2"), megatron_core.megatron_te("llama")
            out["megatron-core"] = {**strip(te[0]), "_variants": {
                "te_llama": strip(te[1]), "local": strip(mg), "local_no_fusion": strip(nf), "local_llama": strip(ml)},
                "_source": megatron_core.SOURCE}
        except Exception:  # noqa: BLE001
            import traceback
            out["megatron-core"] = {"_error": traceback.format_exc()[-1500:]}
        echo(f"megatron-core ({time.perf_counter() - t0:.0f} s)")
    for name, res in READ_ONLY.items():
        if want(name):
            out[name] = res
    out["_cpu_ratios"] = ratios
    out["_kinds"] = {"priced": list(KINDS), "abbreviations": ABBREV}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tools.host_counts",
                                 description="How many host calls of each kind a training step makes, per operator, "
                                             "counted in each stack's own model code.")
    ap.add_argument("--out", type=Path, help="write the counts as JSON")
    ap.add_argument("--txt", type=Path, help="write the printed table")
    ap.add_argument("--compile", action="store_true", help="also the torch.compile'd nanoGPT (~30 s more)")
    ap.add_argument("--only", default="", help="comma-separated stacks")
    ap.add_argument("--fsdp2-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--gpu-check", type=Path, help="on a CUDA machine: compare CUDA's counts with the CPU's (JSON)")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    if a.fsdp2_worker:
        print(json.dumps(fsdp2_worker()))
        return 0
    if a.gpu_check:
        r = gpu_check(a.gpu_check)
        print(json.dumps(r, indent=1, default=str)[:6000])
        return 0
    echo = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    results = run_all({x for x in a.only.split(",") if x} or None, a.compile, echo)
    args = argv if argv is not None else sys.argv[1:]
    results["_meta"] = {"command": "python -m benchmarks.tools.host_counts " + " ".join(args),
                        "torch": torch.__version__, "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d"),
                        "seconds": round(time.perf_counter() - t0, 1)}
    text = table(results)
    sn = results.get("_sanity")
    if sn:
        text += ("\nsanity (nanoGPT GPT-2 124M twin, 12 layers, eager, H100 VM per-call costs): predicted "
                 f"{sn['predicted_total_ms']} ms vs measured {sn['measured_ms']['wall']} ms: ratio "
                 f"{sn['ratio_predicted_over_measured']} (by part {sn['ratio_by_part']}); kernels predicted fwd+bwd "
                 f"{sn['kernels_predicted_fwd_bwd']}, measured per step {sn['kernels_measured_per_step']}\n")
    print(text)
    if a.txt:
        a.txt.write_text(text)
    if a.out:
        a.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
