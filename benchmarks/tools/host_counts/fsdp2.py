"""What FSDP2's hooks call per wrapped block and for the root: nanoGPT's twin under fully_shard on a 2-rank mesh of
torch's fake process group, in a subprocess of its own (the plain-torch and torchtitan stacks' `_fsdp2`)."""

from __future__ import annotations

import collections
import contextlib
import json
import sys

import torch

from benchmarks import ROOT
from benchmarks.tools.host_counts.counter import PASSES, Counter, clean_counts, summarize, tokens
from benchmarks.tools.host_counts.stacks.nanogpt import NANOGPT_RULES, TINY

FSDP_HOOKS = {  # (class path, method) -> phase
    ("torch.distributed.fsdp._fully_shard._fsdp_state", "FSDPState", "_pre_forward"): "pre_forward",
    ("torch.distributed.fsdp._fully_shard._fsdp_state", "FSDPState", "_post_forward"): "post_forward",
    ("torch.distributed.fsdp._fully_shard._fsdp_state", "FSDPState", "_pre_backward"): "pre_backward",
    ("torch.distributed.fsdp._fully_shard._fsdp_param_group", "FSDPParamGroup", "post_backward"): "post_backward",
    ("torch.distributed.fsdp._fully_shard._fsdp_state", "FSDPState",
     "_root_post_backward_final_callback"): "root_final_callback",
}


def fsdp2_counts(n_layers: int = 2) -> dict:
    """fsdp2_worker's counts, from a subprocess (it needs a process group of its own: torch's fake backend)."""
    import subprocess

    run = subprocess.run([sys.executable, "-m", "benchmarks.tools.host_counts", "--fsdp2-worker"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
    if run.returncode or not lines:
        return {"error": (run.stderr or run.stdout).strip()[-800:]}
    return json.loads(lines[-1])


def fsdp2_worker(n_layers: int = 2) -> dict:
    """nanoGPT's twin (benchmarks/probes/host_launch.py) with each block and the root under fully_shard on a mesh of 2
    ranks of torch's fake process group (one process; collectives dispatched, not run: on a one-rank mesh FSDP2 skips
    its all-gather and reduce-scatter, _fsdp_param_group.py unshard/wait_for_unshard, _fsdp_collectives.py
    foreach_reduce), bf16 params, fp32 reduce (torchtitan's wrapping; host_launch.py's fsdp2 variant): the calls FSDP2's
    hooks make per step, by hook, per wrapped block and for the root (one micro-batch, the second step). Each hook runs
    under its own function mode (tensor hooks and the engine's callback run outside the model's), so every torch call
    in it is counted; collectives are the c10d ops dispatched (nccl_call)."""
    import importlib

    from benchmarks.probes.host_launch import GPT, GPTConfig
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    root_states = set()

    def scope(obj):
        mods = getattr(obj, "_modules", None) or getattr(obj, "modules", None) or []
        return "root" if any(id(m) in root_states for m in mods) else "block"

    saved = []  # patched before fully_shard: it registers the bound hooks
    for (mod, cls, meth), phase in FSDP_HOOKS.items():
        k = getattr(importlib.import_module(mod), cls)
        orig = getattr(k, meth)
        saved.append((k, meth, orig))

        def wrapped(self_, *a, _orig=orig, _phase=phase, **kw):
            cur = Counter.current
            if cur is None or cur.muted:
                return _orig(self_, *a, **kw)
            push = torch._C._len_torch_function_stack() == 0
            with cur.region(f"fsdp2.{scope(self_)}.{_phase}"), (cur.FM() if push else contextlib.nullcontext()):
                return _orig(self_, *a, **kw)

        setattr(k, meth, wrapped)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**TINY, "n_layer": n_layers}))
    root_states.add(id(model))
    mesh = init_device_mesh("cpu", (2,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.h:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    x, y = tokens(TINY["vocab"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    for _ in range(2):  # lazy init, optimizer state
        model(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    c = Counter(model, *NANOGPT_RULES, start="_step")
    try:
        with c.active():
            c.set("_step")
            loss = model(x, y)
            loss.backward()
    finally:
        for k, meth, orig in saved:
            setattr(k, meth, orig)
    out = {}
    for (state, layer), passes in c.tally.counts.items():
        if not state.startswith("fsdp2."):
            continue
        _, who, phase = state.split(".")
        n = n_layers if who == "block" else 1
        d = out.setdefault(who, {}).setdefault(phase, collections.Counter())
        for p in PASSES:
            for kk, v in passes[p].items():
                d[kk] += v / n
        diag = c.tally.diag.get((state, layer), {})
        for p in PASSES:
            for kk, v in diag.get(p, {}).items():
                if kk in ("meta", "aten_kernels", "c10d_ops"):
                    d[f"diag.{kk}"] += v / n
        smp = c.tally.samples.get((state, layer), {})
        for p in PASSES:
            for kk, v in smp.get(p, {}).items():
                if not kk.endswith(":meta"):
                    smp_out = out.setdefault(who, {}).setdefault("samples", {})
                    smp_out.setdefault(phase, collections.Counter())[kk] += v / n
    res = {who: {ph: (clean_counts(v) if ph != "samples" else {q: clean_counts(w) for q, w in v.items()})
                  for ph, v in phases.items()} for who, phases in out.items()}
    model_res = summarize(c, n_layers)
    res["model_under_fsdp2"] = {op: model_res[op] for op in ("qkv", "attention", "mlp_in")}
    res["world_size"] = 2
    res["note"] = ("per wrapped block per step (mean over the blocks) and for the root module; pre_forward: the "
                   "all-gather (unshard: copy-in, all_gather_into_tensor, copy-out) and the input cast; post_forward: "
                   "reshard (frees the unsharded parameters) and the pre-backward hook registration; pre_backward: the "
                   "all-gather again (prefetches the next block's); post_backward: reduce-scatter "
                   "(reduce_scatter_tensor "
                   "of the fp32 gradients, the copy into the sharded grads); root_final_callback: finalize, waits. "
                   "The root keeps its parameters unsharded after forward (no all-gather in backward). FSDP2's Python "
                   "bookkeeping beyond these torch calls is not a torch call and is not counted: price the hooks by "
                   "their measured time where one is available (the host's zero3_hook_s, spec.host.cpu)")
    return res

