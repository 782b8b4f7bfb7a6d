"""How far the stacks' counted calls at their probed costs fall short of a whole step's host time, and the
in-context factors that close it (cost.host.launch_queue.IN_CONTEXT), fitted on this project's lent-GPU measurements.

    python benchmarks/host_twins.py

A probe times one kind of call in a tight loop (calibrate.host.calls): hot caches, one shape, no Python around it.
In a model's step the same calls run among the model code's own Python (functions, attribute reads, shape logic)
and the autograd engine's and optimizer's bookkeeping. Those cost the host too, in proportion to the calls they
surround. So the host seconds of a pass are counts x probed costs x a factor per pass (forward: model code around
its calls; backward: the engine around its nodes; optimizer: its Python loop around its multi-tensor calls),
applied to the Python-side kinds (eager ops, views, module calls, fused modules, autograd nodes, list tensors;
not to NCCL calls, compiled regions, graph replays or bare launches).

The measurements: tiny twins of real models (every tensor tiny, so the step is all host: benchmarks/host_launch.py)
on three lent H100 machines whose per-call costs the same session probed (benchmarks/results/host/):
  nanoGPT GPT-2 124M (12 layers; fused AdamW, clip) on the third, fourth and fifth machines,
  HF transformers GPT-2 Large (36 layers; torch AdamW foreach, clip) on the fourth and the fifth,
each pass's host seconds (the twin's forward, backward and optimizer issue times) against the cost model's for
the same twin priced on that machine's host. Each factor is the geometric mean
over the twins of measured / priced; leave-one-twin-out: each twin predicted with the factors of the others. Checks not fitted: FSDP2's
hooks (nanoGPT's twin under fully_shard), the compiled twin, and the executor's own host-bound plans
(benchmarks/results/validation/gpu-single-h100-third, on the third machine).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
RES = ROOT / "benchmarks" / "results" / "host"
sys.path.insert(0, str(ROOT))

from perfmodel.calibrate.host.measured import TE_OVER_LINEAR  # noqa: E402
from perfmodel.spec.host.cpu import CALL_KINDS, HostCPU  # noqa: E402
from perfmodel.spec.model.config import ModelConfig  # noqa: E402

PASSES = ("forward", "backward", "optimizer")


def cuda_launch_s() -> float:
    """The third machine's bare cudaLaunchKernel from C (benchmarks/cuda_launch.cu, same run as its probes), seconds."""
    run = json.loads((RES / "h100-third-host_launch.json").read_text())
    return run["cuda_launch"]["launch_host_s"]


def lent_host(name: str) -> HostCPU:
    """The lent machine's host as its probes measured it: the third (host_calls JSON) or the fourth (calibrate's
    spec; its list tensor, probed only on the third, scaled by the two machines' eager ops)."""
    run = json.loads((RES / "h100-third-host_calls.json").read_text())
    third = {**run["calls_s"], "list_tensor": run["optimizer_s"]["adamw_fused_tensor_s"]}
    spec = yaml.safe_load((RES / "h100-fourth-calibrate-host.yaml").read_text())["host_cpu"]["calls"]
    fourth = {k.removesuffix("_s"): v for k, v in spec.items() if k != "list_tensor_s"}
    run5 = json.loads((RES / "h100-fifth-host_calls.json").read_text())
    fifth = {**run5["calls_s"], "fused_module": run5["calls_s"]["module_call"] * TE_OVER_LINEAR,
             "dtensor_op": run5["optimizer_s"]["dtensor_op_s"]}  # that run reported it beside the kinds
    dt = fifth["dtensor_op"] / fifth["eager_op"]  # the DTensor op, probed on the fifth alone, as its eager ratio
    if name == "third":  # its view op: the fourth's view / eager (the probe came after this run), as the catalogue
        calls = {**third, "kernel_launch": cuda_launch_s(),
                 "view_op": third["eager_op"] * fourth["view_op"] / fourth["eager_op"]}
        calls["fused_module"] = calls["module_call"] * TE_OVER_LINEAR
    elif name == "fourth":
        calls = {**fourth, "list_tensor": third["list_tensor"] * fourth["eager_op"] / third["eager_op"]}
    else:
        calls = fifth
    calls = {"zero3_hook": 0.0, **calls}
    calls.setdefault("dtensor_op", calls["eager_op"] * dt)
    return HostCPU(name=f"lent-{name}", description="a lent H100's host", cpu="Intel Xeon (KVM)", sockets=1,
                   cores_per_socket=16, calls={f"{k}_s": calls[k] for k in CALL_KINDS},
                   sources={f"calls.{k}_s": "benchmarks/results/host" for k in CALL_KINDS})


def twin(layers: int, bias: bool) -> ModelConfig:
    """host_launch.py's twin_of: hidden 64, 2 heads, vocab 128, 64 tokens."""
    return ModelConfig(name=f"twin-{layers}", n_layers=layers, hidden=64, n_heads=2, ffn_hidden=256, vocab=128,
                       max_seq_len=64, mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True,
                       linear_bias="all" if bias else "none", dropout=0.0, source="benchmarks/host_launch.py twin_of")


def measured(file: str, code: str) -> dict[str, float]:
    """A twin's issue seconds per pass (host_launch.py's time_steps: forward, backward, optimizer)."""
    rows = json.loads((RES / file).read_text())["steps"]
    t = next(r["twin"] for r in rows if r["code"] == code and r["mode"] == "eager")
    return {"forward": t["issue_forward_s"], "backward": t["issue_backward_s"], "optimizer": t["issue_optimizer_s"]}


def priced(model: ModelConfig, stack: str, host: HostCPU, factors=None) -> dict[str, float]:
    """The cost model's host seconds per pass of a one-GPU step of `model` at micro-batch 1 of 64 tokens on an H100
    with `host` (in-context factors `factors`, default the model's own)."""
    from perfmodel.cost.host import launch_queue
    from perfmodel.cost.estimate import evaluate_plan
    from perfmodel.spec.hardware.system import load_hardware

    saved = dict(launch_queue.IN_CONTEXT)
    if factors is not None:
        launch_queue.IN_CONTEXT.update(factors)
    try:
        system = load_hardware("dgx-h100").with_host(host)
        step, _ = evaluate_plan(model, system, dict(gpus=1, micro_batch=1, global_batch=1, seq_len=64, stack=stack))
    finally:
        launch_queue.IN_CONTEXT.clear()
        launch_queue.IN_CONTEXT.update(saved)
    f = sum(float(step.unit_host[u][0][0]) * n for u, n in (("embedding", 1), ("layer", model.n_layers), ("head", 1)))
    b = sum(float(step.unit_host[u][1][0]) * n for u, n in (("embedding", 1), ("layer", model.n_layers), ("head", 1)))
    return {"forward": f, "backward": b, "optimizer": float(step.host_s[0]) - f - b}


TWINS = {  # name -> (model, stack, host, measurement file, host_launch code)
    "nanoGPT, third machine": (twin(12, False), "nanogpt", "third", "h100-third-host_launch.json", "nanogpt"),
    "nanoGPT, fourth machine": (twin(12, False), "nanogpt", "fourth", "h100-fourth-host_launch-variants.json", "nanogpt"),
    "HF GPT-2 Large, fourth machine": (twin(36, True), "hf-transformers", "fourth",
                                       "h100-fourth-host_launch-variants.json", "hf"),
    "nanoGPT, fifth machine": (twin(12, False), "nanogpt", "fifth", "h100-fifth-host_launch-variants.json", "nanogpt"),
    "HF GPT-2 Large, fifth machine": (twin(36, True), "hf-transformers", "fifth",
                                      "h100-fifth-host_launch-variants.json", "hf"),
}
NEUTRAL = dict.fromkeys(PASSES, 1.0)


def ratios() -> dict[str, dict[str, float]]:
    """measured / priced per pass of each twin, at factors of 1."""
    out = {}
    for name, (model, stack, host, file, code) in TWINS.items():
        p, m = priced(model, stack, lent_host(host), NEUTRAL), measured(file, code)
        out[name] = {k: m[k] / p[k] for k in PASSES}
    return out


def fit(r: dict[str, dict[str, float]]) -> dict[str, float]:
    """Per pass, the geometric mean over the twins of measured / priced."""
    return {k: math.exp(float(np.mean([math.log(v[k]) for v in r.values()]))) for k in PASSES}


def main() -> int:
    r = ratios()
    factors = fit(r)
    print("measured / priced at factors of 1 (a twin's issue seconds per pass against counts x probed costs)")
    print(f"{'twin':34s}" + "".join(f"{k:>11s}" for k in PASSES))
    for name, v in r.items():
        print(f"{name:34s}" + "".join(f"{v[k]:11.2f}" for k in PASSES))
    print(f"{'fitted (geometric mean)':34s}" + "".join(f"{factors[k]:11.3f}" for k in PASSES))
    print("\nleave-one-twin-out: each twin's step host predicted with the others' factors")
    errs = []
    for name in r:
        rest = fit({n: v for n, v in r.items() if n != name})
        model, stack, host, file, code = TWINS[name]
        p = priced(model, stack, lent_host(host), rest)
        m = measured(file, code)
        e = sum(p.values()) / sum(m.values()) - 1
        errs.append(abs(e))
        print(f"  {name:34s} predicted {sum(p.values()) * 1e3:7.2f} ms, measured {sum(m.values()) * 1e3:7.2f} ms: "
              f"{e:+.1%}  (" + ", ".join(f"{k} {p[k] / m[k] - 1:+.0%}" for k in PASSES) + ")")
    print(f"  mean |error| {np.mean(errs):.1%}")
    from perfmodel.cost.host.launch_queue import IN_CONTEXT

    print(f"\nthe model's IN_CONTEXT: {IN_CONTEXT}; this fit: "
          + ", ".join(f"{k} {v:.3f}" for k, v in factors.items()))
    # checks, not fitted: the ZeRO-3 hooks' twins (the hook itself is what the catalogue derives from them)
    print("\nnot fitted (checks): FSDP twins against nanoGPT's on the same machine")
    for machine, file in (("fourth", "h100-fourth-host_launch-variants.json"), ("fifth", "h100-fifth-host_launch-variants.json")):
        base = measured(file, "nanogpt")
        for code in ("fsdp2", "fsdp1"):
            try:
                m = measured(file, code)
            except StopIteration:
                continue
            extra = (m["forward"] + m["backward"]) - (base["forward"] + base["backward"])
            print(f"  {code} on the {machine} machine: forward + backward {(m['forward'] + m['backward']) * 1e3:.1f} ms "
                  f"against nanoGPT's {(base['forward'] + base['backward']) * 1e3:.1f}: {extra / 39 * 1e6:.0f} us per "
                  f"collective (39: 13 wrapped modules x 3); optimizer {m['optimizer'] * 1e3:.1f} ms against "
                  f"{base['optimizer'] * 1e3:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
