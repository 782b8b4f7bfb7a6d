"""nanoGPT (Karpathy's model.py, as benchmarks/probes/host_launch.py's GPT twin): counted eager, and its
torch.compile'd step (--compile: Inductor's kernels per region read from its output code)."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import torch

from benchmarks.tools.host_counts import counter
from benchmarks.tools.host_counts.counter import PASSES, count_model, make_rules, tokens, walk

TINY = dict(n_layer=2, n_head=2, n_embd=64, vocab=128, block=64)

NANOGPT_RULES = make_rules(r"h\.(\d+)", {
    "ln_1": ("norm1", None), "c_attn": ("qkv", "attention"), "attn_proj": ("out_proj", "residual1"),
    "ln_2": ("norm2", None), "c_fc": ("mlp_in", "activation"), "mlp_proj": ("mlp_out", "residual2"),
}, {
    "": ("_model", "loss", "embedding"), "wte": ("embedding", "embedding_output"), "wpe": ("embedding_output", None),
    "ln_f": ("final_norm", None), "lm_head": ("lm_head", "loss"),
})
SOURCE = (
    "counted: benchmarks/probes/host_launch.py GPT/Block (Karpathy's nanoGPT model.py: no biases, fused c_attn, SDPA, "
    "tied wte/lm_head, loss inside forward), bf16 autocast (torch.autocast on CPU; casts as CUDA autocast "
    "makes them for these ops); optimizer: fused AdamW in two weight-decay groups + clip_grad_norm_(1.0) + "
    "zero_grad(set_to_none) + loss.item() per step")


def nanogpt(n_layer: int = 2, autocast: bool = True) -> dict:
    from benchmarks.probes.host_launch import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**TINY, "n_layer": n_layer})).to(counter.DEVICE)
    x, y = (t.to(counter.DEVICE) for t in tokens(TINY["vocab"]))
    return count_model(model, lambda: model(x, y), *NANOGPT_RULES, n_layer, autocast)


# -- torch.compile'd nanoGPT ---------------------------------------------------------------------------------------
KERNEL_CALL = re.compile(r"^\s*(?:\w+\s*=\s*)?(cpp_fused_\w+|triton_\w+\.run|extern_kernels\.\w+"
                         r"|torch\.ops\.\w+\.\w+(?:\.\w+)?|aten\.\w+(?:\.\w+)?)\(", re.M)


def inductor_kernels(modules) -> list[list[str]]:
    """The kernel calls in each Inductor output module's call(): generated kernels (cpp_fused_* on a CPU, triton_* on
    a GPU), extern kernels (GEMMs) and ATen fallbacks (SDPA, sort ...); allocations and views are not calls."""
    out = []
    for m in modules:
        src = Path(m.__file__).read_text()
        i = src.find("def call(")
        body = src[i:src.find("\nrunner", i) if "\nrunner" in src[i:] else None]
        out.append([k for k in KERNEL_CALL.findall(body)])
    return out


def nanogpt_compiled() -> dict:
    """torch.compile(model) of nanoGPT's twin (host_launch.py's compiled step, bf16 autocast), 1 and 2 layers: compiled
    regions entered per step (forward, and the backward's CompiledFunctionBackward), kernels per region from Inductor's
    output code (this CPU's C++ kernels; a GPU build's Triton kernels differ in fusion: see the note), autograd
    nodes."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    from torch._inductor.codecache import PyCodeCache

    from benchmarks.probes.host_launch import GPT, GPTConfig

    res = {}
    for n in (1, 2):
        torch._dynamo.reset()
        counters.clear()
        before = list(PyCodeCache.modules)
        torch.manual_seed(0)
        model = GPT(GPTConfig(**{**TINY, "n_layer": n}))
        run = torch.compile(model)
        x, y = tokens(TINY["vocab"])
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = run(x, y)
            nodes, _ = walk([loss.grad_fn])
            loss.backward()
            model.zero_grad(set_to_none=True)
        new = [m for m in PyCodeCache.modules if m not in before]
        kernels = inductor_kernels(new)
        res[n] = {"graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(counters["graph_break"].values()),
                  "regions": len(new), "kernels_per_region": [len(k) for k in kernels],
                  "kernel_names": kernels, "autograd_nodes": len(nodes),
                  "node_types": dict(collections.Counter(type(q).__name__ for q in nodes))}
    one, two = res[1], res[2]
    fwd = [len(k) for k in one["kernel_names"]]
    per_layer = [b - a for a, b in zip(one["kernels_per_region"], two["kernels_per_region"])]
    summary = {
        "forward": {"compiled_entry": 1, "compiled_kernel": one["kernels_per_region"][0]},
        "backward": {"compiled_entry": 1, "compiled_kernel": one["kernels_per_region"][-1],
                     "autograd_node": one["autograd_nodes"]},
        "per_layer": {"forward": {"compiled_kernel": per_layer[0]},
                      "backward": {"compiled_kernel": per_layer[-1],
                                   "autograd_node": two["autograd_nodes"] - one["autograd_nodes"]}},
    }
    for p in PASSES:  # the model-level part (embedding, head, loss, the region's own entry) = 1 layer - per layer
        summary[p + "_model_level"] = {k: summary[p][k] - summary["per_layer"][p].get(k, 0)
                                       for k in summary[p] if k != "compiled_entry"}
    del fwd
    return {"summary": summary, "layers_1": one, "layers_2": two,
            "note": ("Inductor on this CPU (C++ kernels, extern GEMMs and SDPA as ATen calls); a GPU build fuses "
                     "differently (Triton: a reduction and its pointwise consumers, e.g. layer norm, can take separate "
                     "kernels; the CPU backend fuses loops more), so compiled_kernel is the CPU count, a lower bound "
                     "for "
                     "the GPU's. The measured H100 compiled twin's kernels per step are in _sanity.")}

