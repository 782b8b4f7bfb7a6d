"""Checks of the counts: this CPU's per-call cost ratios, the counts priced against the measured H100 nanoGPT twin
(_sanity), and on a CUDA machine the counts without emulation against the CPU's (--gpu-check)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks import RESULTS
from benchmarks.tools.host_counts import counter
from benchmarks.tools.host_counts.counter import EXTRA, KINDS, LAYER_OPS, PASSES
from benchmarks.tools.host_counts.stacks.nanogpt import nanogpt
from benchmarks.tools.host_counts.stacks.plain_torch import plain_torch
from perfmodel.spec.model.operators import GRAPH_OPS


def cpu_ratios(reps: int = 9) -> dict:
    """Seconds per call on this CPU of perfmodel.calibrate.host.calls' eager_op (torch.matmul of 16x16, no grad) and
    view_op (x.view(-1) / x.t() of a tensor requiring grad) probes, of a meta call (x.shape, x.size(-1)) and of
    module_call (nn.Linear(16, 16) forward with grad); and their ratios to eager_op."""
    from perfmodel.calibrate.host import calls as hc

    dev = torch.device("cpu")
    x = torch.randn(16, 16, requires_grad=True)
    out = {"eager_op": hc.eager_op(dev, reps), "view_op": hc.view_op(dev, reps),
           "module_call": hc.module_call(dev, reps),
           "meta": hc.burst_s(lambda: (x.shape, x.size(-1)), dev, reps=reps) / 2}
    out["ratios_to_eager_op"] = {k: round(v / out["eager_op"], 3) for k, v in out.items() if k != "eager_op"}
    return out


def sanity(nano: dict, opt: dict, ratios: dict, compiled: dict | None = None) -> dict:
    """nanoGPT's GPT-2 124M tiny twin as host_launch.py steps it (12 layers, bf16 autocast, one micro-batch, fused
    AdamW in two weight-decay groups, clip_grad_norm_, zero_grad, loss.item()): counts x the H100 VM's per-call
    seconds (h100-third-host_calls.json) against its measured host time (h100-third-host_launch.json)."""
    res_dir = RESULTS / "host"
    calls = json.loads((res_dir / "h100-third-host_calls.json").read_text())
    launch = json.loads((res_dir / "h100-third-host_launch.json").read_text())
    twin = next(r["twin"] for r in launch["steps"] if r["mode"] == "eager" and r["micro_batch"] == 1
                and r.get("code", "nanogpt") == "nanogpt")
    cost = dict(calls["calls_s"])
    gpu = res_dir / "h100-host_counts-gpu_check.json"  # --gpu-check on a lent H100: view_op measured there
    view_ratio, view_src = ratios["ratios_to_eager_op"]["view_op"], "this CPU's view_op / eager_op"
    if gpu.exists():
        view_ratio = json.loads(gpu.read_text())["per_call_us"]["view_over_eager"]
        view_src = f"the lent H100's view_op / eager_op ({gpu.name})"
    cost["view_op"] = cost["eager_op"] * view_ratio
    layers, tensors = 12, 12 * 6 + 3  # per block: ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj; wte, wpe, ln_f

    def price(counts: dict) -> float:
        return sum(v * cost.get(k, 0.0) for k, v in counts.items() if k in KINDS)

    parts = {}
    for p in PASSES:
        per_layer = sum(price(nano[op][p]) for op in LAYER_OPS) + price(nano["_layer"][p])
        model = sum(price(nano[op][p]) for op in GRAPH_OPS if op not in LAYER_OPS) + price(nano["_model"][p])
        parts[p] = layers * per_layer + model
    parts["backward"] += cost["eager_op"]  # the backward() call
    o = calls["optimizer_s"]
    parts["optimizer"] = (2 * o["adamw_fused_step_s"] + tensors * o["adamw_fused_tensor_s"]  # two param groups
                          + o["clip_grad_norm_step_s"] + tensors * o["clip_grad_norm_tensor_s"]
                          + price(opt["zero_grad_set_to_none"]["per_step"]))
    parts["loss_item_and_loop"] = 2 * cost["eager_op"]  # loss.item() (a sync), the micro-batch's copy to the device
    total = sum(parts.values())
    kernels = {p: layers * sum(nano["_diagnostics"].get(op, {}).get(p, {}).get("aten_kernels", 0) for op in LAYER_OPS)
               + sum(nano["_diagnostics"].get(op, {}).get(p, {}).get("aten_kernels", 0)
                     for op in GRAPH_OPS if op not in LAYER_OPS) for p in PASSES}
    counts = {p: {k: round(layers * sum(nano[op][p].get(k, 0) for op in (*LAYER_OPS, "_layer"))
                           + sum(nano[op][p].get(k, 0) for op in (*GRAPH_OPS, "_model") if op not in LAYER_OPS), 2)
                  for k in KINDS if any(nano[op][p].get(k) for op in (*GRAPH_OPS, *EXTRA))} for p in PASSES}
    extra = {}
    if compiled:  # the torch.compile'd twin: one region each way, the CPU's kernel counts
        ctwin = next((r["twin"] for r in launch["steps"] if r["mode"] == "compiled" and r["micro_batch"] == 1), None)
        sm = compiled["summary"]
        ck = {p: layers * sm["per_layer"][p]["compiled_kernel"] + sm[p + "_model_level"]["compiled_kernel"]
              for p in PASSES}
        nodes = layers * sm["per_layer"]["backward"]["autograd_node"] + sm["backward_model_level"]["autograd_node"]
        cf = cost["compiled_entry"] + ck["forward"] * cost["compiled_kernel"]
        cb = cost["compiled_entry"] + ck["backward"] * cost["compiled_kernel"] + nodes * cost["autograd_node"]
        extra["compiled"] = {
            "counts": {"compiled_kernel": ck, "autograd_node_backward": nodes, "compiled_entry": {"forward": 1,
                                                                                             "backward": 1}},
            "predicted_ms": {"forward": round(cf * 1e3, 3), "backward": round(cb * 1e3, 3),
                             "optimizer": round(parts["optimizer"] * 1e3, 3)},
            "measured_ms": ({"wall": round(ctwin["wall_s"] * 1e3, 2),
                             "forward": round(ctwin["issue_forward_s"] * 1e3, 2),
                             "backward": round(ctwin["issue_backward_s"] * 1e3, 2),
                             "kernels_per_step": ctwin.get("kernels_per_step")} if ctwin else None),
            "ratio_predicted_over_measured": (round((cf + cb + parts["optimizer"]) / ctwin["wall_s"], 3)
                                              if ctwin else None)}
    return {
        **extra,
        "per_call_us": {k: round(v * 1e6, 2) for k, v in cost.items() if k in KINDS},
        "view_op_estimate": f"view_op = eager_op x {view_ratio:.3f} ({view_src}; this CPU's: "
                            f"{ratios['ratios_to_eager_op']['view_op']})",
        "counts_per_step": counts, "tensors": tensors,
        "predicted_ms": {k: round(v * 1e3, 3) for k, v in parts.items()}, "predicted_total_ms": round(total * 1e3, 2),
        "measured_ms": {"wall": round(twin["wall_s"] * 1e3, 2), "forward": round(twin["issue_forward_s"] * 1e3, 2),
                        "backward": round(twin["issue_backward_s"] * 1e3, 2),
                        "optimizer": round(twin["issue_optimizer_s"] * 1e3, 2)},
        "ratio_predicted_over_measured": round(total / twin["wall_s"], 3),
        "ratio_by_part": {"forward": round(parts["forward"] / twin["issue_forward_s"], 3),
                          "backward": round(parts["backward"] / twin["issue_backward_s"], 3),
                          "optimizer": round(parts["optimizer"] / twin["issue_optimizer_s"], 3)},
        "kernels_predicted_fwd_bwd": {p: round(v) for p, v in kernels.items()},
        "kernels_measured_per_step": twin.get("kernels_per_step"),
        "source": "benchmarks/results/host/h100-third-host_calls.json, h100-third-host_launch.json (eager, mb 1)",
    }


def gpu_check(out: Path) -> dict:
    """On a CUDA device: the counts without emulation (nanoGPT, plain-torch GPT-2 and Llama), against this file's CPU
    counts (benchmarks/results/host/call_counts.json); the node SDPA with dropout makes; view_op / eager_op / meta
    seconds per call on this host (perfmodel.calibrate.host.calls' probes, inlined)."""
    import time as _t

    counter.DEVICE = torch.device("cuda")  # every Counter and stack reads it at run time
    cpu = json.loads((RESULTS / "host" / "call_counts.json").read_text())
    res: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "diffs": {}}
    runs = {"nanogpt": lambda: nanogpt(), "plain-torch": lambda: plain_torch("gpt2"),
            "plain-torch/llama": lambda: plain_torch("llama")}
    for name, fn in runs.items():
        try:
            r = fn()
        except Exception as err:  # noqa: BLE001
            res["diffs"][name] = {"error": repr(err)[:400]}
            continue
        ref = cpu[name.split("/")[0]]
        if "/" in name:
            ref = ref["_variants"][name.split("/")[1]]
        d = {}
        for op in (*GRAPH_OPS, *EXTRA):
            for p in PASSES:
                a = {k: v for k, v in r[op][p].items() if k in KINDS}
                b = {k: v for k, v in ref.get(op, {}).get(p, {}).items() if k in KINDS}
                if a != b:
                    d[f"{op}.{p}"] = {"cuda": a, "cpu_emulated": b,
                                      "cuda_samples": r["_samples"].get(op, {}).get(p)}
        res["diffs"][name] = d or "identical"
        res.setdefault("kernels", {})[name] = {op: r["_diagnostics"].get(op) for op in ("qkv", "attention", "norm1")}
    q = torch.randn(2, 2, 16, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    o = F.scaled_dot_product_attention(q, q, q, dropout_p=0.1, is_causal=True)
    res["sdpa_dropout_node"] = type(o.grad_fn).__name__
    res["sdpa_out_transposed_contiguous"] = o.transpose(1, 2).is_contiguous()
    x = torch.randn(4, 8, device="cuda", requires_grad=True)
    res["rms_norm_node"] = type(F.rms_norm(x, (8,), torch.ones(8, device="cuda", requires_grad=True)).grad_fn).__name__

    def burst(fn, n=200, reps=25):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = _t.perf_counter()
            for _ in range(n):
                fn()
            ts.append((_t.perf_counter() - t0) / n)
        return sorted(ts)[len(ts) // 2]

    a, b = torch.randn(16, 16, device="cuda"), torch.randn(16, 16, device="cuda")
    v = torch.randn(16, 16, device="cuda", requires_grad=True)
    with torch.no_grad():
        eager = burst(lambda: torch.matmul(a, b))
    view = burst(lambda: (v.view(-1), v.t())) / 2
    meta = burst(lambda: (v.shape, v.size(-1))) / 2
    res["per_call_us"] = {"eager_op": eager * 1e6, "view_op": view * 1e6, "meta": meta * 1e6,
                          "view_over_eager": view / eager, "meta_over_eager": meta / eager}
    out.write_text(json.dumps(res, indent=1, default=str))
    return res
