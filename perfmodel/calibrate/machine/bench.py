"""Microbenchmarks of the machine at hand: GEMMs, causal attention, elementwise kernels, collectives.

Run in-process for one rank (`run_benchmarks`), or on every rank at once as a torchrun module
(`python -m perfmodel.calibrate.machine.bench --device cpu --out M.json`, started by `perfmodel.execute.launch.torchrun.launch`), so
that per-rank rates reflect ranks sharing the machine's cores, memory bandwidth and links as the executor's
ranks do. Compute dtype is what the executor trains in: fp32 on CPU (one thread per rank), bf16 on CUDA.

Timing (`Bench.time`, `Bench.time_all`) of the points `suite.suite` lists: one warm-up call, one timed call,
then repeats; a point's time is the median over repeats of seconds per call. Rank 0 gathers every rank's medians
and writes `raw.Measurements`. `Bench.overlap` times an all-reduce beside a GEMM loop.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import socket
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ...files import write_atomic
from ...execute.host import cpu_name, cpu_vendor, memory_total_bytes, rss_bytes, usable_cores
from ...execute.launch.torchrun import PREFIX, describe
from .raw import AttentionPoint, CommPoint, Environment, GemmPoint, Measurements, MemoryPoint, OverlapRun
from .suite import COLD_POOL_BYTES, elementwise_shapes, gemm_shapes, group_sizes, layer_mixes, layer_param_shapes, suite

DTYPES = {"cpu": torch.float32, "cuda": torch.bfloat16}
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
COMM_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "p2p")


# --- Timing ---

class Bench:
    """Times callables on this rank, in lock step with the other ranks (if a process group is up)."""

    def __init__(self, device: str, quick: bool, echo=None):
        self.device = device
        self.dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
        self.dtype = DTYPES[device]
        self.s = suite(device, quick)
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.echo = echo if self.rank == 0 and echo else (lambda line: None)

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize(self.dev)

    def slowest(self, x: float) -> float:
        """The largest x over all ranks (one small all-reduce)."""
        if self.world == 1:
            return x
        t = torch.tensor([x], dtype=torch.float64, device=self.dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def time(self, fn) -> float:
        """Median seconds per call of fn() over repeats of a number of calls all ranks agree on (from the
        slowest rank's first call), so that collectives match up; on CUDA between cuda events. fn=None: an
        idle rank that only keeps step (returns nan)."""
        run = fn or (lambda: None)
        run()
        self.sync()
        t0 = time.perf_counter()
        run()
        self.sync()
        one = self.slowest(time.perf_counter() - t0)
        inner = max(1, min(10_000, int(self.s.target_s / self.s.reps / max(one, 1e-7))))
        times = []
        for _ in range(self.s.reps):
            if self.device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    run()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3 / inner)
            else:
                t0 = time.perf_counter()
                for _ in range(inner):
                    run()
                times.append((time.perf_counter() - t0) / inner)
        return statistics.median(times) if fn is not None else float("nan")

    def time_all(self, points: list[tuple[dict, object]]) -> list[tuple[dict, float]]:
        """Time compute points, each `(fields, make)` with make() allocating its tensors and returning fn.

        CUDA: one point after another (`time`). CPU: in rounds, every repeat visiting every point once, so
        that each point's median samples the whole run (other processes come and go on a shared host); a
        repeat is a window of wall time that all ranks start together and spend calling fn() (seconds per
        call = window / calls completed), so that no rank runs alone on a core another rank left idle and
        per-rank rates include the sharing.
        """
        if self.device == "cuda":
            out = []
            for fields, make in points:
                out.append((fields, self.time(make())))
                torch.cuda.empty_cache()
            return out
        fns, windows = [], []
        for _, make in points:
            fn = make()
            fn()
            t0 = time.perf_counter()
            fn()
            fns.append(fn)
            windows.append(max(self.s.target_s / self.s.reps, 3 * self.slowest(time.perf_counter() - t0)))
        times = [[] for _ in fns]
        for rep in range(self.s.reps):
            for i, (fn, window) in enumerate(zip(fns, windows)):
                self.slowest(0.0)  # start together
                t0, calls = time.perf_counter(), 0
                while True:
                    fn()
                    calls += 1
                    t = time.perf_counter()
                    if t - t0 >= window:
                        break
                times[i].append((t - t0) / calls)
            self.echo(f"calibrate: compute round {rep + 1}/{self.s.reps} done")
        return [(fields, statistics.median(ts)) for (fields, _), ts in zip(points, times)]

    def randn(self, *shape, dtype=None, grad=False):
        return torch.randn(*shape, device=self.dev, dtype=dtype or self.dtype, requires_grad=grad)

    # -- compute: (fields, make) pairs, make() allocating the tensors and returning the timed callable ----------
    def gemm(self) -> list[tuple[dict, object]]:
        """GEMMs as the executor's layers run them. CUDA: torch.mm. CPU: F.linear(x, W) (an nn.Linear's call),
        W taken in turn from COLD_POOL_BYTES of weights: read from beyond the caches, as a forward reads each
        weight (a 1-16-row GEMM over a cached 1 MB weight took 1/4-1/2 the time on this project's 2-vCPU host)."""
        pools, views = {}, {}

        def make(m, n, k, dtype):
            if self.device != "cpu":
                a, b = self.randn(m, k, dtype=dtype), self.randn(k, n, dtype=dtype)
                c = torch.empty(m, n, device=self.dev, dtype=dtype)
                return lambda: torch.mm(a, b, out=c)
            x, size = self.randn(m, k, dtype=dtype), torch.tensor([], dtype=dtype).element_size()
            if dtype not in pools:
                pools[dtype] = self.randn(COLD_POOL_BYTES // size, dtype=dtype)
            pool = pools[dtype] if n * k <= pools[dtype].numel() else self.randn(n * k, dtype=dtype)
            if (n, k, dtype) not in views:  # one list per weight shape, shared by every m
                views[n, k, dtype] = [pool[i * n * k:(i + 1) * n * k].view(n, k) for i in range(pool.numel() // (n * k))]
            weights = itertools.cycle(views[n, k, dtype])
            return lambda: F.linear(x, next(weights))

        return [(dict(m=m, n=n, k=k, dtype=DTYPE_NAMES[dtype], precision=precision, source=label),
                 lambda m=m, n=n, k=k, dtype=dtype: make(m, n, k, dtype))
                for dtype, precision in self.s.gemm_dtypes for m, n, k, label in gemm_shapes(self.s)]

    def attention(self) -> list[tuple[dict, object]]:
        """Causal SDPA at each suite length over `attn_tokens` tokens: forward + backward (attention_max); the
        forward alone (the attention table), also at a one-token prompt of each batch (its fixed part)."""
        H, D = self.s.attn_heads, self.s.attn_head_dim

        def make(B, seq, passes):
            q, k, v = (self.randn(B, H, seq, D, grad=passes != "forward") for _ in range(3))
            do, sdpa = self.randn(B, H, seq, D), lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return sdpa if passes == "forward" else lambda: torch.autograd.grad(sdpa(), (q, k, v), do)

        batches = {seq: max(1, self.s.attn_tokens // seq) for seq in self.s.attn_seqs}
        calls = [(B, seq, how) for seq, B in batches.items() for how in ("forward_backward", "forward")]
        calls += [(B, 1, "forward") for B in dict.fromkeys(batches.values())]
        return [(dict(batch=B, heads=H, seq=seq, head_dim=D, dtype=DTYPE_NAMES[self.dtype], passes=how),
                 lambda B=B, seq=seq, how=how: make(B, seq, how)) for B, seq, how in calls]

    def memory(self) -> list[tuple[dict, object]]:
        """Streaming bandwidth (copy and add over growing sizes), and forward + backward of the elementwise ops
        the cost model charges by bytes at the sizes of the calibration models' layers, and cross-entropy over
        (T, vocab) logits (`suite.elementwise_shapes`)."""
        size = torch.tensor([], dtype=self.dtype).element_size()

        def fields(kernel, shape, moved):
            elems = shape[0] * (shape[1] if len(shape) == 2 else 1)
            return dict(kernel=kernel, purpose="stream" if moved else "layer", elements=elems, shape=list(shape),
                        dtype=DTYPE_NAMES[self.dtype], bytes_moved=float(moved))

        out = []
        for E in self.s.mem_elements:
            out.append((fields("copy", [E], 2 * E * size), lambda E=E: self._stream("copy", E)))
            out.append((fields("add", [E], 3 * E * size), lambda E=E: self._stream("add", E)))
        for kernel, shape, model, tp in elementwise_shapes(self.s):
            make = (lambda m=model, tp=tp: self._adam(layer_param_shapes(m, tp))) if kernel == "adam" \
                else (lambda k=kernel, s=shape: self._elementwise(k, s))
            out.append((fields(kernel, shape, 0.0), make))
        return out

    def _adam(self, shapes):
        """One step of the executor's optimizer (`perfmodel.execute.parallel.data.adamw`: fused AdamW, one
        multi-tensor kernel over all parameters) over fp32 parameters of these shapes with gradients set."""
        from ...execute.parallel.data import adamw

        params = [torch.nn.Parameter(torch.randn(*sh, device=self.dev)) for sh in shapes]
        for p in params:
            p.grad = torch.randn_like(p)
        return adamw(params, lr=1e-3).step

    def _stream(self, kernel, E):
        x, y, z = self.randn(E), self.randn(E), torch.empty(E, device=self.dev, dtype=self.dtype)
        return (lambda: z.copy_(x)) if kernel == "copy" else (lambda: torch.add(x, y, out=z))

    def _elementwise(self, kernel, shape):
        """Forward + backward (autograd.grad, no accumulation into .grad) of one elementwise op."""
        if kernel == "add":
            x, y, z = self.randn(*shape), self.randn(*shape), torch.empty(shape, device=self.dev, dtype=self.dtype)
            return lambda: torch.add(x, y, out=z)  # the residual add; its backward is one more add (as charged)
        x, dy = self.randn(*shape, grad=True), self.randn(*shape)
        if kernel == "norm":
            w, b = self.randn(shape[1], grad=True), self.randn(shape[1], grad=True)
            return lambda: torch.autograd.grad(F.layer_norm(x, shape[1:], w, b), (x, w, b), dy)
        if kernel == "gelu":
            return lambda: torch.autograd.grad(F.gelu(x, approximate="tanh"), x, dy)
        if kernel == "swiglu":
            up = self.randn(*shape, grad=True)
            return lambda: torch.autograd.grad(F.silu(x) * up, (x, up), dy)
        target = torch.randint(0, shape[1], (shape[0],), device=self.dev)
        return lambda: torch.autograd.grad(F.cross_entropy(x, target), x)

    # -- communication ------------------------------------------------------------------------------------
    def comm(self) -> list[tuple[dict, float]]:
        """Every collective over groups of g consecutive ranks, all nproc // g groups at once (as a job's
        tp or dp groups run); ranks left over when g does not divide nproc keep step idle."""
        out = []
        dtype = self.dtype
        size = torch.tensor([], dtype=dtype).element_size()
        for g in group_sizes(self.world):
            groups = self.world // g
            mine, members = None, []
            for i in range(groups):  # every rank creates every group (new_group is collective)
                ranks = list(range(i * g, (i + 1) * g))
                pg = dist.new_group(ranks)
                if self.rank in ranks:
                    mine, members = pg, ranks
            for kind in COMM_KINDS:
                for nbytes in self.s.comm_sizes:
                    elems = max(g, nbytes // size // g * g)
                    fn = None
                    if mine is not None:
                        fn = self._collective(kind, elems, dtype, g, mine, members)
                    t = self.time(fn)
                    out.append((dict(kind=kind, group_size=g, groups=groups, size_bytes=elems * size,
                                     dtype=DTYPE_NAMES[dtype]), t))
                    fn = None
            self.echo(f"calibrate: collectives over groups of {g} done")
        return out

    def _collective(self, kind, elems, dtype, g, group, members):
        full = torch.randn(elems, device=self.dev).to(dtype)
        shard = torch.randn(elems // g, device=self.dev).to(dtype)
        if kind == "all_reduce":
            return lambda: dist.all_reduce(full, group=group)
        if kind == "all_gather":
            return lambda: dist.all_gather_into_tensor(full, shard, group=group)
        if kind == "reduce_scatter":
            return lambda: dist.reduce_scatter_tensor(shard, full, group=group)
        # p2p: a ring shift, every member sends S bytes to the next and receives S from the previous (the
        # pattern of pipeline stages exchanging activations); for g = 2 the two ranks swap.
        recv = torch.empty_like(full)
        me = members.index(self.rank)
        nxt, prv = members[(me + 1) % g], members[(me - 1) % g]

        def shift():
            ops = [dist.P2POp(dist.isend, full, nxt, group), dist.P2POp(dist.irecv, recv, prv, group)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        return shift

    # -- communication beside compute ----------------------------------------------------------------------
    def _wall(self, fn) -> float:
        """Seconds of one fn() on the slowest rank, all ranks starting together (CUDA: synchronized around)."""
        self.sync()
        self.slowest(0.0)  # start together
        t0 = time.perf_counter()
        fn()
        self.sync()
        return self.slowest(time.perf_counter() - t0)

    def overlap(self) -> OverlapRun:
        """How much of an all-reduce runs concurrently with compute, on every rank at once (`OverlapRun`).

        Compute: a loop of square GEMMs (`overlap_gemm`, the compute dtype) of about `overlap_s`. Message: an
        all-reduce over all ranks of a size scaled from a probe (`overlap_bytes`: probe, smallest, largest) to
        take about as long, so that neither hides the other by its length alone; where the largest message is
        shorter (NCCL on NVLink), the loop is shortened to match it. Each repeat times the loop alone (t_c),
        the all-reduce alone (t_m), and `work = all_reduce(async_op=True)`, the loop, `work.wait()` (t_both).
        """
        s, side = self.s, self.s.overlap_gemm
        a, b = self.randn(side, side), self.randn(side, side)
        c = torch.empty(side, side, device=self.dev, dtype=self.dtype)
        torch.mm(a, b, out=c)
        per_gemm = self._wall(lambda: [torch.mm(a, b, out=c) for _ in range(3)]) / 3
        dtype = self.dtype
        size = torch.tensor([], dtype=dtype).element_size()
        probe, lo, hi = s.overlap_bytes

        def message(nbytes):
            return torch.randn(max(self.world, nbytes // size // self.world * self.world), device=self.dev).to(dtype)

        x = message(probe)
        dist.all_reduce(x)
        t_probe = self._wall(lambda: dist.all_reduce(x))
        nbytes = int(min(hi, max(lo, probe * s.overlap_s / max(t_probe, 1e-7))))
        x = message(nbytes)
        dist.all_reduce(x)
        t_comm = self._wall(lambda: dist.all_reduce(x))  # at the size chosen, to size the loop
        calls = max(1, round(min(s.overlap_s, t_comm) / max(per_gemm, 1e-9)))

        def compute():
            for _ in range(calls):
                torch.mm(a, b, out=c)

        def both():
            work = dist.all_reduce(x, async_op=True)
            compute()
            work.wait()

        runs = {"compute_s": compute, "comm_s": lambda: dist.all_reduce(x), "both_s": both}
        for fn in runs.values():  # warm-up
            self._wall(fn)
        times = {k: [] for k in runs}
        for _ in range(s.overlap_reps):
            for k, fn in runs.items():
                times[k].append(self._wall(fn))
        return OverlapRun(gemm=(side, side, side), gemm_calls=calls, dtype=DTYPE_NAMES[dtype],
                          size_bytes=x.numel() * size, group_size=self.world, **times)

    # -- all of it -----------------------------------------------------------------------------------------
    def run(self) -> Measurements:
        start = time.perf_counter()
        started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        baseline = self._baseline() if self.device == "cpu" else 0.0
        t0 = time.perf_counter()
        compute = {name: getattr(self, name)() for name in ("gemm", "attention", "memory")}
        timed = self.time_all([p for pts in compute.values() for p in pts])
        sections, i = {}, 0
        for name, pts in compute.items():
            sections[name], i = timed[i:i + len(pts)], i + len(pts)
        self.echo(f"calibrate: {len(timed)} GEMM, attention and elementwise points in "
                  f"{time.perf_counter() - t0:.1f} s")
        sections["comm"], overlap = [], None
        if self.world > 1:
            t0 = time.perf_counter()
            sections["comm"] = self.comm()
            self.echo(f"calibrate: {len(sections['comm'])} collective points in {time.perf_counter() - t0:.1f} s")
            t0 = time.perf_counter()
            overlap = self.overlap()
            self.echo(f"calibrate: all-reduce beside compute ({overlap.size_bytes} B, {overlap.gemm_calls} GEMMs) "
                      f"in {time.perf_counter() - t0:.1f} s")
        if self.device == "cuda":
            baseline = self._baseline()
        mine = {k: [t for _, t in v] for k, v in sections.items()}
        everyone = [None] * self.world
        if self.world > 1:
            dist.all_gather_object(everyone, (mine, baseline))
        else:
            everyone = [(mine, baseline)]
        env = Environment(
            device_type=self.device, device_name=device_name(self.device), vendor=vendor(self.device),
            host=socket.gethostname(), torch_version=torch.__version__, nproc=self.world,
            threads_per_rank=torch.get_num_threads() if self.device == "cpu" else None,
            cores=usable_cores() if self.device == "cpu" else None,
            dtype=DTYPE_NAMES[self.dtype],
            backend=dist.get_backend() if self.world > 1 else None, memory_total_bytes=memory_total(self.dev),
            baseline_bytes=max(b for _, b in everyone), started_at=started_at)
        kinds = {"gemm": GemmPoint, "attention": AttentionPoint, "memory": MemoryPoint, "comm": CommPoint}
        points = {}
        for name, cls in kinds.items():
            points[name] = []
            for i, (fields, _) in enumerate(sections[name]):
                per_rank = [r[0][name][i] for r in everyone]
                per_rank = [t for t in per_rank if t == t]  # idle ranks report nan
                points[name].append(cls(**fields, seconds=statistics.median(per_rank), rank_seconds=per_rank))
        return Measurements(env=env, **points, layers=layer_mixes(self.s), overlap=overlap,
                            bench_s=time.perf_counter() - start)

    def _baseline(self) -> float:
        if self.device == "cpu":
            return rss_bytes()
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(self.dev)
        return float(total - free - torch.cuda.memory_reserved(self.dev))


# --- The machine ---

def device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else cpu_name()


def vendor(device: str) -> str:
    return ("AMD" if getattr(torch.version, "hip", None) else "NVIDIA") if device == "cuda" else cpu_vendor()


def memory_total(dev: torch.device) -> float:
    return float(torch.cuda.get_device_properties(dev).total_memory) if dev.type == "cuda" else memory_total_bytes()


# --- Entry points ---

def run_benchmarks(device: str = "cpu", quick: bool = False, echo=None) -> Measurements:
    """All benchmarks on this process alone (no process group, so no collectives). On CPU on one thread, as each
    executor rank runs (`execute.launch.torchrun.worker_env`): one rank's rates; the caller's thread count is restored."""
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)
    try:
        return Bench(device, quick, echo).run()
    finally:
        torch.set_num_threads(threads)


def main(argv=None) -> None:
    """Worker entry point under torchrun: every rank benchmarks; rank 0 writes the measurements to --out."""
    ap = argparse.ArgumentParser(prog="perfmodel.calibrate.machine.bench")
    ap.add_argument("--device", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        if args.device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        else:
            torch.set_num_threads(1)  # one thread per rank (execute.launch.torchrun.worker_env sets OMP_NUM_THREADS=1 too)
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo",
                                timeout=datetime.timedelta(seconds=300))
        echo = lambda line: print(f"{PREFIX} {line}", flush=True)  # noqa: E731
        m = Bench(args.device, args.quick, echo).run()
        if rank == 0:
            write_atomic(args.out, lambda tmp: Path(tmp).write_text(m.model_dump_json()), "--out")
        dist.barrier()
        dist.destroy_process_group()
    except Exception as err:  # one line (execute.launch.torchrun.describe: out of memory, a timed-out collective ...); log: the rest
        text = f"{type(err).__name__}: {err}"
        print(f"{PREFIX} rank {rank} failed: {describe(text) or text[:300]}".replace("\n", " ") + "\n", end="",
              flush=True)  # one write: the ranks share torchrun's stdout
        raise


if __name__ == "__main__":
    main()
