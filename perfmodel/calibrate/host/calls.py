"""This host's seconds per call, by the kind of call a training or serving stack makes (`spec.hardware.system.HostCalls`).

    python -m perfmodel.calibrate.host.calls --device cuda --out host_calls.json      (or perfmodel calibrate)

What a step costs its host is counts x per-call costs: the stack says how many calls of each kind a layer makes
(`spec.stack.profile.HostProfile`), the host what each kind costs. Each probe below repeats a public measurement's own
loop, so that a number measured here reads against the published ones of production hosts
(shared/data/host/host_overheads.md):

  eager_op        torch.matmul of two fp32 16x16 tensors back to back, no autograd: NVIDIA dgxc-benchmarking's
                  microbenchmarks/cpu_overhead/pytorch_kernel_launch_latency.py (dispatcher, cuBLAS's heuristics,
                  the launch); 6.8 us on a DGX H100
  view_op         Tensor.view / transpose of a tensor that requires gradients, alternately: Python, the
                  dispatcher and autograd's view node, no kernel
  autograd_node   a chain of element-wise multiplies recorded with autograd, its backward's host time per node
                  (the autograd engine's C++ loop: one node, its kernel's launch, the gradient's bookkeeping)
  module_call     a torch.nn.Linear forward in bf16, hidden 2048, 8192 tokens, weights requiring gradients:
                  Transformer Engine issue #2053's CPU time per call; 13.5 us on a DGX H100
  fused_module    a Transformer Engine te.Linear forward, the same shape (where transformer_engine imports)
  nccl_call       torch.distributed.all_reduce of 1 KiB on a one-rank NCCL (gloo off CUDA) process group: the
                  process group's work object, stream events and NCCL's enqueue, without a peer's latency
  compiled_entry  a torch.compile'd function's call less its kernels: the intercept of host seconds per call over
                  its kernels (1 vs 8 GEMM + ReLU pairs); tritonbench PR #1017 measured 42-44 us on GB200
  compiled_kernel that slope: a kernel launched from Inductor's wrapper (6.8-9.1 us in the same PR)
  graph_replay    torch.cuda.CUDAGraph.replay() of a one-kernel graph: cudaGraphLaunch's host seconds
  graph_node      host seconds per node of a replayed graph (a 1000-kernel graph against a one-kernel graph)
  kernel_launch   cuLaunchKernel of an empty kernel through the CUDA driver (ctypes; the ctypes call's own cost,
                  timed on cuCtxGetCurrent, taken off): what a C/CUDA program pays (llm.c); 3.0 us on GB200
  dtensor_op      x + y on DTensors sharded over a one-rank mesh: DTensor's dispatch around the op
  zero3_hook      FSDP2's hooks per collective in a step: 8 tiny blocks under fully_shard against without
  list_tensor     torch.optim.AdamW(fused=True)'s step per parameter tensor (the line through 8 and 64 tensors): a
                  tensor's turn in a multi-tensor call (foreach where fused does not run: a CPU)
  optimizer       the same per tensor and per step for fused / foreach / for-loop AdamW and clip_grad_norm_
                  (reported beside the kinds)

Host time is what the host thread spends enqueueing: bursts shorter than the CUDA launch queue, the device idle at
each start, the median burst. A number is the host's at the moment of the run: a shared VM varies (its hypervisor
steals cycles), so the probes run in rounds and the median stands.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

import torch

BURST = 200  # calls per timed burst: fewer than the CUDA launch queue holds (~1024), so the host never waits
REPS = 25  # bursts; the median burst stands


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def burst_s(fn, dev: torch.device, n: int = BURST, reps: int = REPS) -> float:
    """Median host seconds per call of `fn` over `reps` bursts of `n` calls, the device idle at each start."""
    for _ in range(3):
        fn()
    per = []
    for _ in range(reps):
        _sync(dev)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per.append((time.perf_counter() - t0) / n)
    _sync(dev)
    return statistics.median(per)


def eager_op(dev: torch.device, reps: int = REPS) -> float:
    """dgxc-benchmarking's loop: torch.matmul of fp32 16x16 tensors, no autograd (seconds per op)."""
    a, b = torch.randn(16, 16, device=dev), torch.randn(16, 16, device=dev)
    with torch.no_grad():
        return burst_s(lambda: torch.matmul(a, b), dev, reps=reps)


def view_op(dev: torch.device, reps: int = REPS) -> float:
    """Host seconds of a view op that launches nothing: x.view(-1) and x.t() of a 16x16 tensor that requires
    gradients (autograd records a view node), alternately."""
    x = torch.randn(16, 16, device=dev, requires_grad=True)
    calls = [lambda: x.view(-1), lambda: x.t()]
    return burst_s(lambda: [c() for c in calls], dev, n=BURST // 2, reps=reps) / 2


def autograd_node(dev: torch.device, reps: int = REPS) -> float:
    """Host seconds per node of a backward pass: a chain of BURST multiplies, backward() timed to its return
    (the engine has enqueued every node's kernels then; no device sync)."""
    leaf = torch.ones(16, device=dev, requires_grad=True)
    per = []
    for i in range(reps + 3):
        y = leaf
        for _ in range(BURST):
            y = y * 1.0001
        y = y.sum()
        _sync(dev)
        t0 = time.perf_counter()
        y.backward()
        t1 = time.perf_counter()
        leaf.grad = None
        if i >= 3:
            per.append((t1 - t0) / (BURST + 1))  # the chain's nodes and the sum's
    _sync(dev)
    return statistics.median(per)


def module_call(dev: torch.device, reps: int = REPS, hidden: int = 2048, tokens: int = 8192) -> float:
    """Transformer Engine #2053's probe: a bf16 torch.nn.Linear(hidden, hidden) forward on `tokens` tokens with
    its weights requiring gradients (autograd records the node); host seconds per call."""
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if dev.type != "cuda":
        hidden, tokens = 16, 4  # a CPU computes what it launches: a tiny GEMM keeps the probe about the call
    lin = torch.nn.Linear(hidden, hidden, device=dev, dtype=dtype)
    x = torch.randn(tokens, hidden, device=dev, dtype=dtype)
    return burst_s(lambda: lin(x), dev, n=50, reps=reps)


def fused_module(dev: torch.device, reps: int = REPS) -> float | None:
    """The same probe on Transformer Engine's te.Linear (None where transformer_engine does not import or the
    device is not CUDA)."""
    if dev.type != "cuda":
        return None
    try:
        import transformer_engine.pytorch as te
    except Exception:  # noqa: BLE001 - absent or broken: not measured
        return None
    lin = te.Linear(2048, 2048, params_dtype=torch.bfloat16, device="cuda")
    x = torch.randn(8192, 2048, device=dev, dtype=torch.bfloat16)
    return burst_s(lambda: lin(x), dev, n=50, reps=reps)


def nccl_call(dev: torch.device, reps: int = REPS) -> float:
    """Host seconds of one all_reduce of 1 KiB on a one-rank process group (NCCL on CUDA, gloo otherwise)."""
    import torch.distributed as dist

    if dist.is_initialized():
        raise RuntimeError("nccl_call needs a process without a default process group")
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        t = torch.ones(256, device=dev)
        return burst_s(lambda: dist.all_reduce(t), dev, n=100, reps=reps)
    finally:
        dist.destroy_process_group()


def compiled_calls(dev: torch.device, reps: int = REPS) -> tuple[float, float]:
    """(entry seconds, seconds per kernel) of a torch.compile'd region: host seconds per call of two compiled
    functions of 1 and 8 (GEMM, ReLU) pairs (2 and 16 kernels: the GEMM an extern cuBLAS call, the ReLU an
    Inductor kernel), the line through them."""
    ws = [torch.randn(16, 16, device=dev) for _ in range(8)]
    x = torch.randn(16, 16, device=dev)

    def chain(n):
        def f(x):
            for w in ws[:n]:
                x = torch.relu(x @ w)
            return x
        return torch.compile(f, fullgraph=True, dynamic=False)

    one, eight = chain(1), chain(8)
    with torch.no_grad():
        t1 = burst_s(lambda: one(x), dev, n=100, reps=reps)
        t8 = burst_s(lambda: eight(x), dev, n=100, reps=reps)
    per_kernel = max(t8 - t1, 0.0) / 14
    return max(t1 - 2 * per_kernel, 0.0), per_kernel


def graph_calls(dev: torch.device, reps: int = REPS) -> tuple[float, float, float]:
    """(host seconds per replay of a one-kernel CUDA graph, host seconds per further node, device seconds per
    node) from graphs of 1 and 1000 tiny kernels."""
    x = torch.zeros(16, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            x.add_(1.0)
    torch.cuda.current_stream().wait_stream(side)

    def capture(n):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                x.add_(1.0)
        g.replay()
        return g

    small, big = capture(1), capture(1000)
    t1 = burst_s(small.replay, dev, n=100, reps=reps)
    tb = burst_s(big.replay, dev, n=5, reps=reps)
    a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    _sync(dev)
    a.record()
    for _ in range(20):
        big.replay()
    z.record()
    z.synchronize()
    return t1, max(tb - t1, 0.0) / 999, a.elapsed_time(z) * 1e-3 / 20000


NOOP_PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry noop() { ret; }
"""


def kernel_launch(dev: torch.device, reps: int = REPS) -> float | None:
    """Host seconds of cuLaunchKernel of an empty kernel (PTX loaded through the driver), less the ctypes
    call's own cost (cuCtxGetCurrent through the same binding); None off CUDA or without libcuda."""
    if dev.type != "cuda":
        return None
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    torch.cuda.init()
    torch.zeros(1, device=dev)  # the primary context, current on this thread
    ctx = ctypes.c_void_p()
    if cu.cuCtxGetCurrent(ctypes.byref(ctx)) != 0 or not ctx.value:
        return None
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    if cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(NOOP_PTX)) != 0:
        return None
    if cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"noop") != 0:
        return None
    launch = cu.cuLaunchKernel
    u = ctypes.c_uint
    launch.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    stream = ctypes.c_void_p(torch.cuda.current_stream(dev).cuda_stream)
    f = fn.value
    get = cu.cuCtxGetCurrent
    get.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    ref = ctypes.byref(ctx)
    launches = burst_s(lambda: launch(f, 1, 1, 1, 1, 1, 1, 0, stream, None, None), dev, reps=reps)
    binding = burst_s(lambda: get(ref), dev, reps=reps)
    return max(launches - binding, 0.0)


def dtensor_op(dev: torch.device, reps: int = REPS) -> float:
    """Host seconds of one op on DTensors (x + y, both Shard(0) on a one-rank mesh): DTensor's dispatch (sharding
    propagation, local op, output wrapping) around the eager op; needs a default process group."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh(dev.type, (1,))
    x = distribute_tensor(torch.randn(16, 16, device=dev), mesh, [Shard(0)])
    y = distribute_tensor(torch.randn(16, 16, device=dev), mesh, [Shard(0)])
    return burst_s(lambda: x + y, dev, n=50, reps=reps)


def zero3_hook(dev: torch.device, blocks: int = 8, reps: int = 9) -> float:
    """Host seconds per ZeRO-3 collective as FSDP2's hooks issue it in a step: a stack of `blocks` tiny linear
    blocks, forward and backward, with each block under fully_shard (a one-rank mesh) against without, over the
    blocks' three collectives each (the all-gather before the forward, again before the backward, the
    reduce-scatter after); needs a default process group. A limitation: the difference holds everything FSDP2 adds
    on one rank (its hooks' Python, the collectives' calls, the copies in and out of the flat buffers), not the
    waits a real mesh adds, and per collective of a one-parameter-pair block: a block of many tensors takes longer
    per hook (its copies scale with them)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def model(shard: bool):
        m = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()) for _ in range(blocks)))
        m = m.to(dev)
        if shard:
            mesh = init_device_mesh(dev.type, (1,))
            for b in m:
                fully_shard(b, mesh=mesh)
            fully_shard(m, mesh=mesh)
        return m

    x = torch.randn(4, 16, device=dev)
    times = []
    for shard in (False, True):
        m = model(shard)
        times.append(burst_s(lambda m=m: m(x).sum().backward(), dev, n=5, reps=reps))
    return max(times[1] - times[0], 0.0) / (3 * blocks)


def optimizer_calls(dev: torch.device, reps: int = 9) -> dict[str, float]:
    """Host seconds of torch.optim.AdamW's step per parameter tensor and per step (the line through 8 and 64
    tiny tensors), for each implementation the device runs (fused on CUDA, foreach, for-loop), and of
    torch.nn.utils.clip_grad_norm_ (foreach) likewise."""
    out = {}

    def params(n):
        ps = [torch.zeros(16, device=dev, requires_grad=True) for _ in range(n)]
        for p in ps:
            p.grad = torch.ones_like(p)
        return ps

    def line(make):
        small, big = make(8), make(64)
        ts = [burst_s(small, dev, n=10, reps=reps), burst_s(big, dev, n=10, reps=reps)]
        per = max(ts[1] - ts[0], 0.0) / 56
        return per, max(ts[0] - 8 * per, 0.0)

    kinds = {"foreach": dict(foreach=True), "forloop": dict(foreach=False)}
    if dev.type == "cuda":
        kinds = {"fused": dict(fused=True), **kinds}
    for name, kw in kinds.items():
        def make(n, kw=kw):
            opt = torch.optim.AdamW(params(n), lr=1e-4, **kw)
            return opt.step
        out[f"adamw_{name}_tensor_s"], out[f"adamw_{name}_step_s"] = line(make)

    def clip(n):
        ps = params(n)
        return lambda: torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True)
    out["clip_grad_norm_tensor_s"], out["clip_grad_norm_step_s"] = line(clip)
    return out


def cpu_facts() -> dict:
    """What the host says of its CPU: model name, logical CPUs, MHz as /proc/cpuinfo reports it."""
    from ...execute.host import proc_field, cpu_name
    import os

    return {"cpu": cpu_name(), "logical_cpus": os.cpu_count(), "mhz": proc_field("/proc/cpuinfo", "cpu MHz"),
            "python": sys.version.split()[0], "torch": torch.__version__,
            "cuda": torch.version.cuda if torch.cuda.is_available() else None}


def measure(device: str = "cuda", rounds: int = 3, compile_probe: bool = True, reps: int = REPS, echo=None) -> dict:
    """Every probe, `rounds` times over (the median round per probe stands); seconds per call by kind, with the
    rounds and the host's facts. `compile_probe` False skips torch.compile (its first call compiles, seconds)."""
    dev = torch.device(device)
    say = echo or (lambda s: None)
    runs: dict[str, list[float]] = {}
    failed: dict[str, str] = {}

    def keep(name, probe, *args):
        """Run one probe; a probe that fails (a driver without the call, a compiler missing) is reported, not
        fatal: the others still measure."""
        try:
            value = probe(*args)
        except Exception as err:  # noqa: BLE001 - reported in the result
            failed[name] = f"{type(err).__name__}: {err}"
            return
        values = value if isinstance(value, tuple) else (value,)
        for n, v in zip(name.split(","), values):
            if v is not None:
                runs.setdefault(n, []).append(float(v))

    opt_runs: dict[str, list[float]] = {}
    for r in range(rounds):
        keep("eager_op", eager_op, dev, reps)
        keep("view_op", view_op, dev, reps)
        keep("autograd_node", autograd_node, dev, reps)
        keep("module_call", module_call, dev, reps)
        keep("fused_module", fused_module, dev, reps)
        keep("kernel_launch", kernel_launch, dev, reps)
        if dev.type == "cuda":
            keep("graph_replay,graph_node,graph_node_device", graph_calls, dev, reps)
        opt = optimizer_calls(dev)
        for k, v in opt.items():
            opt_runs.setdefault(k, []).append(v)
        runs.setdefault("list_tensor", []).append(opt.get("adamw_fused_tensor_s", opt["adamw_foreach_tensor_s"]))
        say(f"host calls: round {r + 1} of {rounds} done")
    keep("nccl_call", nccl_call, dev, reps)  # one process group per process lifetime is the safe use
    try:  # the DTensor op and FSDP2's hooks (torchtitan's and the executor's DTensor and ZeRO-3 paths)
        import torch.distributed as dist

        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", store=dist.HashStore(), rank=0,
                                world_size=1)
        keep("dtensor_op", dtensor_op, dev, reps)
        keep("zero3_hook", zero3_hook, dev)
        dist.destroy_process_group()
    except Exception as err:  # noqa: BLE001 - reported
        failed["process group"] = f"{type(err).__name__}: {err}"
    if compile_probe:
        keep("compiled_entry,compiled_kernel", compiled_calls, dev, reps)
    calls = {k: statistics.median(v) for k, v in runs.items()}
    optimizer = {k: statistics.median(v) for k, v in opt_runs.items()}
    return {"device": device, "host": cpu_facts(), "calls_s": calls, "optimizer_s": optimizer,
            "rounds": {**runs, **opt_runs}, "failed": failed, "date": time.strftime("%Y-%m-%d")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile probe")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    res = measure(a.device, a.rounds, not a.no_compile, echo=print)
    for k, v in {**res["calls_s"], **res["optimizer_s"]}.items():
        print(f"  {k:28s} {v * 1e6:9.2f} us")
    print(res["host"])
    for k, v in res["failed"].items():
        print(f"  {k}: not measured ({v})")
    if a.out:
        a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
