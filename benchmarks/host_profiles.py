"""The stack profiles' host rates (hardware_specs/stacks/*.yaml, `host:`), derived from this project's measurements.

    python benchmarks/host_profiles.py [--check]

The measurements (benchmarks/results/host/, made on a lent H100 with benchmarks/host_launch.py and
benchmarks/host_megatron.py; the machine and commands are in each file) time tiny-tensor twins of real models,
whose steps are all host. Each rate divides a measured host time by what the cost model counts for the same model
and plan, so that the estimate's count times the rate gives back the measurement:

  op_s               (forward + backward issue seconds) / operator launches per step (cost.units.host_counts);
                     Megatron-Core: host seconds per layer and micro-batch / launches per layer and micro-batch
  compiled_op_s      op_s x (torch.compile'd twin / eager twin, timed in the same run)
  zero3_call_s       (FSDP2 twin's forward + backward issue - the plain twin's) / ZeRO-3 calls per step
  optimizer_tensor_s the optimizer's issue seconds (clip, step, zero_grad) / the twin's parameter tensors
  collective_s       one all-reduce call on a one-rank NCCL group (host_launch.py's collective_call_s)
  op_s (llmc)        one cudaLaunchKernel from C (cuda_launch.cu's launch_host_s): llm.c launches about one
                     kernel per priced operator (its fused layernorm/residual, cuBLASLt GEMM with fused bias/GeLU)

Prints each stack's rates with the figures they come from; --check compares them with the shipped profiles (exit
1 where one differs by more than 1%). Stacks whose code was not measured carry the nearest measured code's rates;
their profiles say which.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perfmodel.cost.estimate import evaluate_plan
from perfmodel.spec.model import ModelConfig
from perfmodel.spec.stack import load_stack

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "host"
LAUNCH, VARIANTS, MEGATRON = "h100-host_launch.json", "h100-host_launch-variants.json", "h100-host_megatron.json"
CALIBRATED = ROOT / "benchmarks" / "results" / "calibration" / "dgx-h100-calibrated.yaml"


def twin(name: str, layers: int, bias: str, dropout: float) -> ModelConfig:
    """A measured twin as the cost model sees it: GPT-2's structure, hidden 64, 2 heads, vocab 128, 64 tokens."""
    return ModelConfig(name=name, n_layers=layers, hidden=64, n_heads=2, ffn_hidden=256, vocab=128, max_seq_len=64,
                       mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True, linear_bias=bias,
                       dropout=dropout, source="benchmarks/host_profiles.py: a measured twin")


def counts(model: ModelConfig, **plan) -> dict[str, float]:
    """What the cost model counts per step for `model` under `plan` on one GPU: operator launches, ZeRO-3 calls
    (plan zero = 3 over 2 ranks: the calls do not depend on the group's size), and per micro-batch a layer's
    launches."""
    base = dict(gpus=1, micro_batch=1, global_batch=1, seq_len=64, stack="plain-torch")
    step, _ = evaluate_plan(model, "dgx-h100", {**base, **plan})
    return {"launches": float(step.host_kernels[0]), "calls": float(step.host_calls[0]),
            "layer_launches": float(step.units.kernels["layer"][step.units.index[0]])}


def zero3_calls(model: ModelConfig) -> float:
    """ZeRO-3 gathers and reduce-scatters per step (one micro-batch): 2 gathers and 1 reduce-scatter per unit."""
    sharded = counts(model, gpus=2, zero=3, global_batch=2)["calls"]
    return sharded - counts(model, gpus=2, global_batch=2)["calls"]


def rates() -> dict[str, dict[str, float]]:
    """Each measured code's rates (see the module docstring), with the figures they come from."""
    launch = json.loads((RESULTS / LAUNCH).read_text())
    variants = json.loads((RESULTS / VARIANTS).read_text())
    megatron = json.loads((RESULTS / MEGATRON).read_text())
    twin_of = lambda steps, code, mode="eager": next(  # noqa: E731
        r["twin"] for r in steps if r.get("code", "nanogpt") == code and r["mode"] == mode)
    out = {}

    # nanoGPT's model, eager: the variants run's median of three twins; compiled: the ratio in the first run
    nano = twin("nanogpt-twin", 12, "none", 0.0)
    n = counts(nano)
    t = twin_of(variants["steps"], "nanogpt")
    op = (t["issue_forward_s"] + t["issue_backward_s"]) / n["launches"]
    e, c = twin_of(launch["steps"], "nanogpt"), twin_of(launch["steps"], "nanogpt", "compiled")
    ratio = (c["issue_forward_s"] + c["issue_backward_s"]) / (e["issue_forward_s"] + e["issue_backward_s"])
    nano_tensors = 12 * 6 + 3  # ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj per block; wte, wpe, ln_f (no biases)
    out["nanogpt"] = {"op_s": op, "compiled_op_s": op * ratio, "optimizer_tensor_s": t["issue_optimizer_s"] / nano_tensors,
                      "launches": n["launches"], "issue_s": t["issue_forward_s"] + t["issue_backward_s"],
                      "compiled_ratio": ratio}

    # FSDP2 around nanoGPT's model: the hooks per ZeRO-3 call, DTensor's optimizer loop per tensor
    f = twin_of(variants["steps"], "fsdp2")
    extra = f["issue_forward_s"] + f["issue_backward_s"] - out["nanogpt"]["issue_s"]
    calls = zero3_calls(nano)
    out["fsdp2"] = {"zero3_call_s": extra / calls, "optimizer_tensor_s": f["issue_optimizer_s"] / nano_tensors,
                    "zero3_calls": calls}

    # HuggingFace transformers' GPT2LMHeadModel (GPT-2 Large's 36 layers, biases, dropout 0.1)
    hf = twin("hf-gpt2-large-twin", 36, "all", 0.1)
    h = counts(hf)
    t = twin_of(variants["steps"], "hf")
    hf_tensors = 36 * 12 + 4  # ln_1, c_attn, c_proj, ln_2, c_fc, mlp.c_proj with biases; wte, wpe, ln_f (w, b)
    out["hf-transformers"] = {"op_s": (t["issue_forward_s"] + t["issue_backward_s"]) / h["launches"],
                              "optimizer_tensor_s": t["issue_optimizer_s"] / hf_tensors, "launches": h["launches"]}

    # Megatron-Core, local spec (unfused attention, dropout 0.1, biases): seconds per layer and micro-batch over
    # launches per layer and micro-batch; the optimizer and schedule: the 2-layer twin less its layers, embedding and
    # head, over its tensors
    mc = twin("megatron-twin", 2, "all", 0.1)
    m = counts(mc, global_batch=4, attention="unfused")
    per_layer = megatron["host_per_layer"]["no_recompute"]
    op = per_layer["per_layer_per_microbatch_s"] / m["layer_launches"]
    rest = per_layer["twin_2_layers_s"] - op * m["launches"]
    out["megatron-core"] = {"op_s": op, "optimizer_tensor_s": max(rest, 0.0) / (2 * 12 + 4),
                            "layer_launches": m["layer_launches"], "launches": m["launches"]}
    full = megatron["host_per_layer"]["full_recompute"]
    mf = counts(mc, global_batch=4, attention="unfused", recompute="full")
    out["megatron-core"]["full_recompute_op_s"] = full["per_layer_per_microbatch_s"] / mf["layer_launches"]

    out["collective"] = {"collective_s": launch["ops"]["collective_call_s"]}
    out["cuda"] = {"launch_s": launch["cuda_launch"]["launch_host_s"]}
    return out


def profiles(r: dict) -> dict[str, dict[str, float]]:
    """Each shipped stack's host rates: its own code's where measured, else the nearest measured code's (the
    profiles' sources say which)."""
    coll = r["collective"]["collective_s"]
    nano, fsdp, hf, mc = r["nanogpt"], r["fsdp2"], r["hf-transformers"], r["megatron-core"]
    eager_fsdp = dict(op_s=nano["op_s"], compiled_op_s=nano["compiled_op_s"], collective_s=coll,
                      zero3_call_s=fsdp["zero3_call_s"], optimizer_tensor_s=fsdp["optimizer_tensor_s"])
    megatron = dict(op_s=mc["op_s"], compiled_op_s=None, collective_s=coll, zero3_call_s=fsdp["zero3_call_s"],
                    optimizer_tensor_s=mc["optimizer_tensor_s"])
    import yaml

    executor = yaml.safe_load(CALIBRATED.read_text())["host_costs"]
    return {
        "nanogpt": dict(op_s=nano["op_s"], compiled_op_s=nano["compiled_op_s"], collective_s=coll,
                        zero3_call_s=fsdp["zero3_call_s"], optimizer_tensor_s=nano["optimizer_tensor_s"]),
        "torchtitan": eager_fsdp,
        "composer-fsdp1": eager_fsdp,
        "hf-transformers": dict(op_s=hf["op_s"], compiled_op_s=hf["op_s"] * nano["compiled_ratio"], collective_s=coll,
                                zero3_call_s=fsdp["zero3_call_s"], optimizer_tensor_s=hf["optimizer_tensor_s"]),
        "megatron-core": megatron, "nemo": megatron, "deepspeed": megatron, "nanotron": megatron,
        "plain-torch": dict(op_s=executor["kernel_s"], compiled_op_s=None, collective_s=coll,
                            zero3_call_s=fsdp["zero3_call_s"], optimizer_tensor_s=0.0),
        "llmc": dict(op_s=r["cuda"]["launch_s"], compiled_op_s=None, collective_s=r["cuda"]["launch_s"],
                     zero3_call_s=r["cuda"]["launch_s"], optimizer_tensor_s=0.0),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 where a shipped profile differs by more than 1%")
    a = ap.parse_args(argv)
    r = rates()
    print("measured codes (seconds; the figures each rate comes from):")
    for code, values in r.items():
        print(f"  {code:16s} " + ", ".join(f"{k} {v:.4g}" for k, v in values.items()))
    print("\nstack profiles' host rates (microseconds):")
    bad = []
    for stack, want in profiles(r).items():
        have = load_stack(stack).host
        cells = []
        for k, v in want.items():
            shipped = None if have is None else getattr(have, k)
            cells.append(f"{k} {'-' if v is None else f'{v * 1e6:.1f}'}"
                         + ("" if shipped is None or v is None else f" (shipped {shipped * 1e6:.1f})"))
            off = (shipped is None) != (v is None) or (v is not None and abs(shipped - v) > 0.01 * max(abs(v), 1e-9))
            if off:
                bad.append(f"{stack}.host.{k}: shipped {shipped}, derived {v}")
        print(f"  {stack:16s} " + ", ".join(cells))
    if a.check and bad:
        print("\nprofiles that differ from the derivation:\n  " + "\n  ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
