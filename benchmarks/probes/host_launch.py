"""What the host that launches the kernels costs a training step, measured on this machine.

    python -m benchmarks.probes.host_launch --device cuda --out host.json [--compile] [--cuda-launch ./cuda_launch]

A GPU runs what the host enqueues; the host (Python, PyTorch's dispatcher and autograd, the CUDA driver) spends
time on every operator whatever its size. Where kernels are short the device waits for the host. This script
measures, on one device:

  (1) per operator: the host seconds of one eager op without autograd, with autograd in the forward, in the
      backward (the autograd engine), of a bf16-autocast linear layer forward and backward, of a process group's
      collective call, and of a raw CUDA launch from C (benchmarks/probes/cuda_launch.cu, the cost llm.c pays); the
      device seconds of a kernel replayed from a CUDA graph (what a graphed step pays per kernel);
  (2) a nanoGPT-style GPT-2 124M training step (Karpathy's nanoGPT model.py and train.py: pre-norm blocks, fused
      QKV, SDPA flash attention, GELU MLP, tied embeddings, vocab 50304, no biases, bf16 autocast, fused AdamW,
      gradient clipping at 1.0, loss.item() every step) at several micro-batches of 1024 tokens, eager and (with
      --compile) torch.compile'd: wall time per step, host time per step (the same step of a twin whose every
      tensor is tiny, so that its step is all host), kernels per step and the device's busy time (torch.profiler).

  (3) --variants: the same step as other model code runs it: hf (HuggingFace transformers' GPT2LMHeadModel,
      SDPA attention, torch's default AdamW: GPT-2 Large's 36 layers at micro-batch 1 and 8, and its tiny twin) and
      fsdp2 (nanoGPT's twin with every block and the root under FSDP2 fully_shard on a one-rank mesh, bf16 params,
      fp32 reduce: torchtitan's wrapping); --repeats measures each twin that many times (the host of a shared VM
      varies from run to run).

Host-bound means wall ~ host and device busy << wall. The numbers feed the stack profiles' host costs
(hardware_specs/stacks, `host:`), each cited to this command and the committed result
(benchmarks/results/host/). Printed as a table; --out writes everything as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from perfmodel.calibrate.host.calls import burst_s, graph_calls

BURST = 200  # ops per timed burst: fewer than the CUDA launch queue holds (~1024), so the host never waits


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def burst_host_s(fn, device: torch.device, n: int = BURST, reps: int = 30) -> float:
    """Median host seconds per call of `fn` over `reps` bursts of `n` calls, the device idle at each start
    (perfmodel.calibrate.host.calls.burst_s, the probes' own timer)."""
    return burst_s(fn, device, n, reps)


def op_costs(device: torch.device) -> dict[str, float]:
    """Host seconds per eager operator, by kind (see the module docstring, (1))."""
    out = {}
    x = torch.zeros(16, device=device)
    with torch.no_grad():
        out["eager_op_nograd_s"] = burst_host_s(lambda: x.add_(1.0), device)

    # a chain of n element-wise multiplies with autograd: forward records a node per op, backward runs each
    n = BURST
    leaf = torch.ones(16, device=device, requires_grad=True)

    def chain():
        y = leaf
        for _ in range(n):
            y = y * 1.0001
        return y

    fwd, bwd = [], []
    for _ in range(30):
        sync(device)
        t0 = time.perf_counter()
        y = chain().sum()
        t1 = time.perf_counter()
        y.backward()  # returns when the engine has enqueued every node's kernels (no device sync)
        t2 = time.perf_counter()
        sync(device)
        fwd.append((t1 - t0) / n)
        bwd.append((t2 - t1) / n)
        leaf.grad = None
    out["autograd_fwd_op_s"], out["autograd_bwd_op_s"] = statistics.median(fwd[3:]), statistics.median(bwd[3:])

    # bf16-autocast linear layers (16 features: all host), forward then backward, per layer
    layers = [nn.Linear(16, 16, device=device) for _ in range(50)]
    inp = torch.randn(4, 16, device=device)
    fwd, bwd = [], []
    dtype = torch.bfloat16
    for _ in range(30):
        sync(device)
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype):
            y = inp
            for layer in layers:
                y = layer(y)
            loss = y.float().sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        sync(device)
        fwd.append((t1 - t0) / len(layers))
        bwd.append((t2 - t1) / len(layers))
        for layer in layers:
            layer.zero_grad(set_to_none=True)
    out["linear_fwd_s"], out["linear_bwd_s"] = statistics.median(fwd[3:]), statistics.median(bwd[3:])
    return out


def collective_costs(device: torch.device) -> dict[str, float]:
    """Host seconds of one all-reduce call of 1 KiB on a one-rank process group (NCCL on CUDA, gloo on CPU): the
    process group's own work per call (work object, stream events), without a peer's latency."""
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        t = torch.ones(256, device=device)
        host = burst_host_s(lambda: dist.all_reduce(t), device, n=100, reps=20)
        sync(device)
        t0 = time.perf_counter()
        for _ in range(2000):
            dist.all_reduce(t)
        sync(device)
        wall = (time.perf_counter() - t0) / 2000
    finally:
        dist.destroy_process_group()
    return {"collective_call_s": host, "collective_stream_s": wall, "collective_backend": backend}


def graph_kernel_s(device: torch.device) -> float | None:
    """Device seconds per tiny kernel replayed from a CUDA graph of 1000 (perfmodel.calibrate.host.calls.graph_calls;
    None off CUDA)."""
    return graph_calls(device)[2] if device.type == "cuda" else None


# --- nanoGPT-style GPT-2 ---------------------------------------------------------------------------------------
@dataclass
class GPTConfig:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    vocab: int = 50304  # nanoGPT pads GPT-2's 50257 to a multiple of 64
    block: int = 1024


class Block(nn.Module):
    """nanoGPT's Block: x + attn(ln_1(x)), then x + mlp(ln_2(x)); no biases (train.py's bias = False)."""

    def __init__(self, c: GPTConfig):
        super().__init__()
        self.n_head = c.n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(c.n_embd, bias=False), nn.LayerNorm(c.n_embd, bias=False)
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)
        self.attn_proj = nn.Linear(c.n_embd, c.n_embd, bias=False)
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=False)
        self.mlp_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(c.vocab, c.n_embd), nn.Embedding(c.block, c.n_embd)
        self.h = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd, bias=False)
        self.lm_head = nn.Linear(c.n_embd, c.vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as GPT-2

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)


class HFLoss(nn.Module):
    """HuggingFace transformers' GPT2LMHeadModel (SDPA attention, the config's dropout 0.1) called as a training
    loop calls it: model(input_ids, labels=...).loss (the model shifts the labels)."""

    def __init__(self, c: GPTConfig):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, vocab_size=c.vocab,
                         n_positions=c.block)
        cfg._attn_implementation = "sdpa"
        self.model = GPT2LMHeadModel(cfg)

    def forward(self, idx, targets):
        return self.model(input_ids=idx, labels=idx).loss


def make_trainer(c: GPTConfig, device: torch.device, micro_batch: int, seq: int, accum: int, compile_: bool,
                 code: str = "nanogpt"):
    """A model, its optimizer and a step function that runs `accum` micro-batches of `micro_batch` x `seq` random
    tokens (pinned host memory copied non-blocking, as nanoGPT's get_batch), clips the gradient norm at 1.0 and
    steps; returns the last loss. `code`: nanogpt (fused AdamW in two weight-decay groups, as nanoGPT's
    configure_optimizers; bf16 autocast), hf (transformers' GPT2LMHeadModel, torch's default AdamW, bf16 autocast)
    or fsdp2 (nanoGPT's model, each block and the root under fully_shard with bf16 params and fp32 reduce, as
    torchtitan wraps it; a one-rank process group must exist), or fsdp1 (nanoGPT's model under FSDP1's
    FullyShardedDataParallel, each block a unit, FULL_SHARD, bf16 mixed precision, limit_all_gathers and
    use_orig_params as Composer wraps llm-foundry's MPT; torch AdamW)."""
    torch.manual_seed(0)
    model = (HFLoss(c) if code == "hf" else GPT(c)).to(device)
    autocast = code not in ("fsdp2", "fsdp1")
    if code == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}), sharding_strategy=ShardingStrategy.FULL_SHARD,
                     mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
                     limit_all_gathers=True, use_orig_params=True, device_id=device if device.type == "cuda" else None)
    if code == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(device.type, (1,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.h:
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    if code == "hf":
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4)
    else:
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=6e-4, betas=(0.9, 0.95), fused=device.type == "cuda" and code == "nanogpt")
    run = torch.compile(model) if compile_ else model
    data = torch.randint(0, c.vocab, (8, micro_batch, seq + 1))
    if device.type == "cuda":
        data = data.pin_memory()
    dtype = torch.bfloat16
    counter = [0]

    marks = []  # host clock after the forwards, the backwards and the optimizer (time_steps reads them)

    def step():
        loss = None
        fwd = bwd = 0.0
        for _ in range(accum):
            batch = data[counter[0] % len(data)].to(device, non_blocking=True)
            counter[0] += 1
            t0 = time.perf_counter()
            with torch.autocast(device.type, dtype=dtype, enabled=autocast):
                loss = run(batch[:, :-1], batch[:, 1:]) / accum
            t1 = time.perf_counter()
            loss.backward()
            fwd, bwd = fwd + t1 - t0, bwd + time.perf_counter() - t1
        t0 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        marks[:] = [fwd, bwd, time.perf_counter() - t0]
        return loss

    step.marks = marks

    return step


def time_steps(step, device: torch.device, steps: int, warmup: int) -> dict[str, float]:
    """Median wall seconds per step (loss.item() at the end, as nanoGPT logs every step) and median host seconds
    until the step's last call returned (before that sync)."""
    walls, hosts, parts = [], [], []
    for i in range(warmup + steps):
        sync(device)
        t0 = time.perf_counter()
        loss = step()
        t1 = time.perf_counter()
        loss.item()
        t2 = time.perf_counter()
        if i >= warmup:
            hosts.append(t1 - t0)
            walls.append(t2 - t0)
            parts.append(list(step.marks))
    med = lambda j: statistics.median(p[j] for p in parts)  # noqa: E731
    return {"wall_s": statistics.median(walls), "issue_s": statistics.median(hosts),
            "wall_min_s": min(walls), "wall_max_s": max(walls), "issue_forward_s": med(0),
            "issue_backward_s": med(1), "issue_optimizer_s": med(2)}


def profile_kernels(step, device: torch.device, steps: int = 3) -> dict[str, float]:
    """Kernels per step and the device's busy seconds per step (the sum of kernel, copy and set durations: one
    stream, so they do not overlap), from torch.profiler's trace over `steps` steps."""
    if device.type != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile

    step().item()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step().item()
    return trace_counts(prof, steps)


def trace_counts(prof, steps: int) -> dict[str, float]:
    """Per step, from a torch.profiler run over `steps` steps (its Chrome trace): kernels, copies and sets, the
    device's busy seconds (one stream: their durations add), host-device synchronisations, device-to-host copies."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel"]
    other = [e for e in events if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    syncs = [e for e in events if e.get("cat") == "cuda_runtime" and "Synchronize" in e.get("name", "")]
    d2h = [e for e in other if "DtoH" in e.get("name", "")]
    return {"kernels_per_step": len(kernels) / steps, "copies_per_step": len(other) / steps,
            "device_busy_s": sum(e.get("dur", 0) for e in kernels + other) * 1e-6 / steps,
            "syncs_per_step": len(syncs) / steps, "d2h_copies_per_step": len(d2h) / steps}


def twin_of(c: GPTConfig) -> GPTConfig:
    """A model with `c`'s layers and every op, every tensor tiny (hidden 64, 64 tokens, vocab 128): its step is
    all host."""
    return GPTConfig(n_layer=c.n_layer, n_head=2, n_embd=64, vocab=128, block=64)


def twin_host(c: GPTConfig, device: torch.device, compile_: bool, code: str, steps: int, warmup: int,
              repeats: int) -> dict:
    """The twin's step timed `repeats` times (each a fresh model): the median's timings, every repeat's wall
    seconds, and its kernels per step."""
    runs = []
    for _ in range(repeats):
        step = make_trainer(twin_of(c), device, 1, 64, 1, compile_, code)
        runs.append(time_steps(step, device, steps, warmup))
    runs.sort(key=lambda r: r["wall_s"])
    return {**runs[len(runs) // 2], "repeats_wall_s": [r["wall_s"] for r in runs], **profile_kernels(step, device)}


CODES = {"nanogpt": ("gpt2-124m (nanoGPT)", GPTConfig()),
         "hf": ("gpt2-large (HF transformers)", GPTConfig(n_layer=36, n_head=20, n_embd=1280, vocab=50257)),
         "fsdp2": ("gpt2-124m (nanoGPT, FSDP2)", GPTConfig()),
         "fsdp1": ("gpt2-124m (nanoGPT, FSDP1)", GPTConfig())}


def model_steps(device: torch.device, micro_batches: dict[bool, list[int]], steps: int, warmup: int,
                echo, code: str = "nanogpt", repeats: int = 1) -> list[dict]:
    """(2) and (3) of the module docstring: `code`'s model at each micro-batch of each mode (compiled: True),
    with its tiny twin's host time."""
    rows = []
    name, gpt2 = CODES[code]
    for compile_, mbs in micro_batches.items():
        mode = "compiled" if compile_ else "eager"
        t0 = time.perf_counter()
        host = twin_host(gpt2, device, compile_, code, steps, warmup, repeats)
        echo(f"  {code} twin ({mode}): {host['wall_s'] * 1e3:.2f} ms/step, repeats "
             f"{[round(x * 1e3, 1) for x in host['repeats_wall_s']]} ({time.perf_counter() - t0:.0f} s)")
        for mb in mbs:
            t0 = time.perf_counter()
            step = make_trainer(gpt2, device, mb, 1024, 1, compile_, code)
            timed = time_steps(step, device, steps, warmup)
            prof = profile_kernels(step, device)
            row = {"model": name, "code": code, "mode": mode, "micro_batch": mb, "seq": 1024, **timed, **prof,
                   "host_s": host["wall_s"], "twin": host, "seconds_to_build": time.perf_counter() - t0}
            rows.append(row)
            busy = prof.get("device_busy_s")
            echo(f"  mb {mb} ({mode}): {timed['wall_s'] * 1e3:.1f} ms/step, host {host['wall_s'] * 1e3:.1f} ms"
                 + (f", device busy {busy * 1e3:.1f} ms, {prof['kernels_per_step']:.0f} kernels" if busy else ""))
            del step
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def cuda_launch(binary: str | None) -> dict | None:
    """benchmarks/probes/cuda_launch.cu's JSON (built by the caller), or None."""
    if not binary:
        return None
    run = subprocess.run([binary], capture_output=True, text=True, timeout=120)
    if run.returncode:
        return {"error": run.stderr.strip()[-500:]}
    return json.loads(run.stdout)


def environment(device: torch.device) -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    env = {"torch": torch.__version__, "python": platform.python_version(), "cpu": cpu, "cpus": os.cpu_count(),
           "device": str(device), "date": time.strftime("%Y-%m-%d")}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, sms=props.multi_processor_count, cuda=torch.version.cuda)
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--micro-batches", default="1,2,4,8,12")
    ap.add_argument("--compile", action="store_true", help="also torch.compile'd steps")
    ap.add_argument("--compile-micro-batches", default="1,8", help="their micro-batches (one compile each)")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cuda-launch", help="the built benchmarks/probes/cuda_launch.cu")
    ap.add_argument("--variants", default="", help="also these model codes: hf, fsdp2, fsdp1 (comma-separated)")
    ap.add_argument("--variant-micro-batches", default="1,8")
    ap.add_argument("--repeats", type=int, default=1, help="times each twin is measured (the median is kept)")
    ap.add_argument("--skip-ops", action="store_true", help="leave out (1)")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    echo = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    result = {"command": "python -m benchmarks.probes.host_launch " + " ".join(argv if argv is not None else sys.argv[1:]),
              "environment": environment(device)}
    echo(f"environment: {result['environment']}")
    result["ops"], result["cuda_launch"] = {}, None
    if not a.skip_ops:
        result["ops"] = op_costs(device)
        result["ops"]["graph_kernel_s"] = graph_kernel_s(device)
        result["ops"].update(collective_costs(device))
        result["cuda_launch"] = cuda_launch(a.cuda_launch)
    echo(f"ops: {result['ops']}\ncuda_launch: {result['cuda_launch']}")
    if a.out:  # what is measured so far survives a later failure
        a.out.write_text(json.dumps(result, indent=1))
    mbs = {False: [int(x) for x in a.micro_batches.split(",") if x]}
    if a.compile:
        mbs[True] = [int(x) for x in a.compile_micro_batches.split(",") if x]
    result["steps"] = model_steps(device, mbs, a.steps, a.warmup, echo, repeats=a.repeats)
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))
    variant_mbs = [int(x) for x in a.variant_micro_batches.split(",") if x]
    for code in [v for v in a.variants.split(",") if v]:
        if code in ("fsdp2", "fsdp1"):
            import torch.distributed as dist

            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(), rank=0,
                                    world_size=1)
        try:
            result["steps"] += model_steps(device, {False: variant_mbs}, a.steps, a.warmup, echo, code, a.repeats)
        except Exception as err:  # a variant's failure keeps what the others measured
            result.setdefault("errors", {})[code] = repr(err)[:500]
            echo(f"{code}: {err!r}")
        finally:
            if code in ("fsdp2", "fsdp1"):
                dist.destroy_process_group()
        if a.out:
            a.out.write_text(json.dumps(result, indent=1))
    us = lambda x: "-" if x is None else f"{x * 1e6:.2f}"  # noqa: E731
    print("per operator (microseconds)")
    for k, v in result["ops"].items():
        print(f"  {k:24s} {us(v) if isinstance(v, float) else v}")
    if result["cuda_launch"]:
        for k in ("launch_host_s", "stream_s", "graph_kernel_s"):
            print(f"  cuda_launch.{k:12s} {us(result['cuda_launch'].get(k))}")
    print("\ntraining steps, 1024 tokens per sequence (host: the tiny twin's step)")
    print(f"{'code':8s} {'mode':9s} {'mb':>3s} {'wall ms':>9s} {'host ms':>9s} {'busy ms':>9s} {'kernels':>8s} "
          f"{'GPU idle':>9s}")
    for r in result["steps"]:
        busy = r.get("device_busy_s")
        idle = f"{100 * (1 - busy / r['wall_s']):.0f}%" if busy else "-"
        print(f"{r.get('code', 'nanogpt'):8s} {r['mode']:9s} {r['micro_batch']:3d} {r['wall_s'] * 1e3:9.1f} {r['host_s'] * 1e3:9.1f} "
              f"{busy * 1e3 if busy else math.nan:9.1f} {r.get('kernels_per_step', math.nan):8.0f} {idle:>9s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
