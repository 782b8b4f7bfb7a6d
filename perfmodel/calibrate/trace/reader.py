"""Reading profiler traces: Kineto chrome-trace JSON (plain or gzipped), one file per rank, as torch.profiler,
torchtitan's profiling, Megatron-LM's `--use-pytorch-profiler`, HF Trainer and `perfmodel execute --trace` write
them, on CUDA, ROCm or CPU.

What a trace holds and how it is read here:
- steps: torch.profiler's `ProfilerStep#N` spans on the host (user_annotation); without them the whole trace is one
  step (said in `not_calibrated`).
- device work: GPU kernels (cat `kernel`) and copies (`gpu_memcpy`, `gpu_memset`), each tied to the host op that
  launched it by its `External id`; on a CPU trace the device is the host, and its work is the leaf operators
  (cpu_op events with no operator nested inside them) that compute, views and allocations left out.
- classes: by the kernel's name (cuBLAS/CUTLASS/nvjet/rocBLAS GEMMs, flash/FMHA attention, NCCL/RCCL collectives,
  copies, the rest memory-bound) or, on a CPU, by the operator's name.
- shapes: the launching operator's `Input Dims` and `Input type` (torch.profiler's record_shapes).
- collectives: NCCL kernels with their `record_param_comms` arguments (message elements, group size, dtype); on
  gloo the `gloo:*` spans of its worker thread (the time the exchange took) with their input shapes, the group
  from the trace's process groups.
- the host: launch calls (cudaLaunchKernel, cuLaunchKernelEx, hipLaunchKernel, ...) and the GPU's idle gaps that
  end at a kernel whose launch call had not yet returned when the gap began (the GPU waiting for the host).

Times in a trace are microseconds; everything returned here is seconds or bytes. This module imports no torch.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import InputError

US = 1e-6
KERNEL_CATS = {"kernel"}
COPY_CATS = {"gpu_memcpy", "gpu_memset"}
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                "cudaLaunchCooperativeKernel", "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel",
                "hipExtModuleLaunchKernel", "cudaGraphLaunch", "hipGraphLaunch")
# GEMM kernels by name, as cuBLAS / cuBLASLt (ampere_*, volta_*, sm80_xmma_gemm_*, nvjet_*, gemv*, splitKreduce's
# cublasSplitKParams), CUTLASS (cutlass_80_tensorop_s1688gemm_*; not every kernel with cutlass:: types in its
# template arguments, nor MIOpen's SubTensorOp), rocBLAS / hipBLASLt (Cijk_*), TensorRT-LLM (bmm_*) and
# torch.compile's templates name them (the HTA, TraceLens and lent-GPU traces the tests read);
# convolutions run implicit GEMMs (cuDNN *_implicit_gemm_*, CUTLASS ImplicitGemmConvolution, MIOpen igemm_*): their own
# class, no model GEMM
GEMM_KERNEL = re.compile(r"(?<!fb)gemm|gemv|cublas|nvjet|xmma|wgmma|matmul|cijk_|_mma_|^bmm_|"
                         r"triton_tem_fused_\w*mm", re.I)
CONV_KERNEL = re.compile(r"convolution|conv[123]d|implicit_gemm|igemm_(fwd|bwd|wrw)|fprop|dgrad|wgrad", re.I)
CONV_OP = re.compile(r"^aten::\w*conv")  # cuDNN / MIOpen run convolutions as GEMM kernels of GEMM names too
ATTENTION_KERNEL = re.compile(r"flash|fmha|attention|attn|sdpa|mha_", re.I)
COLLECTIVE_KERNEL = re.compile(r"nccl|rccl", re.I)
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::_addmm_activation"}
ATTENTION_OP = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|cudnn_attention")
NO_WORK_OPS = re.compile(r"^aten::(view|_unsafe_view|as_strided|reshape|t|transpose|permute|slice|narrow|select|"
                         r"expand|unsqueeze|squeeze|detach|alias|empty.*|resolve_conj|resolve_neg|split|chunk|"
                         r"unbind|lift_fresh|_reshape_alias|to|_to_copy|contiguous|numel|size|stride|item|"
                         r"_local_scalar_dense|set_|result_type|is_nonzero|lift)$")
DTYPES = {"c10::BFloat16": ("bf16", 2), "c10::Half": ("fp16", 2), "float": ("fp32", 4), "double": ("fp64", 8),
          "c10::Float8_e4m3fn": ("fp8", 1), "c10::Float8_e5m2": ("fp8", 1), "long int": ("int64", 8),
          "int": ("int32", 4), "bool": ("bool", 1)}
GLOO_KINDS = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather",
              "allgather": "all_gather", "reduce_scatter": "reduce_scatter", "all_to_all": "all_to_all",
              "alltoall": "all_to_all", "reducescatter": "reduce_scatter", "send": "p2p", "recv": "p2p",
              "broadcast": "broadcast"}


@dataclass
class Op:
    """One host operator span: name, start and end (seconds), its nesting, shapes and the device time it caused."""

    name: str
    t0: float
    t1: float
    tid: int
    ext: int | None
    dims: list
    types: list
    children: list = field(default_factory=list)
    device_s: float = 0.0  # GPU kernels launched under this op's External id (CUDA traces)
    kernel_names: list = field(default_factory=list)  # ... and their names

    @property
    def dur(self) -> float:
        return self.t1 - self.t0

    @property
    def self_s(self) -> float:
        return self.dur - sum(c.dur for c in self.children)


@dataclass
class RankTrace:
    """One rank's trace, indexed."""

    path: Path
    rank: int
    world: int
    device: str
    device_type: str  # "cuda" (CUDA or ROCm GPUs) or "cpu"
    vendor: str
    host: str
    backend: str | None
    group_sizes: list[int]
    steps: list[tuple[float, float]]
    stepped: bool  # ProfilerStep spans were found
    ops: list[Op]
    kernels: list[dict]  # {"name", "t0", "t1", "cls", "ext", "corr", "args"}
    launches: list[tuple[float, float, int | None, int]]  # launch calls: (t0, t1, correlation, thread)
    gloo: list[dict]  # gloo worker spans: {"kind", "t0", "t1", "nbytes", "dtype"}
    comm_args: dict  # External id -> the arguments of its record_param_comms op (NCCL/RCCL traces)
    device_bytes: float  # the GPU's memory as deviceProperties gives it (0: not recorded, or a CPU)
    launched: dict  # correlation id -> the start of its launch call
    meta: dict
    props: dict = field(default_factory=dict)  # deviceProperties of the traced GPU ({}: not recorded, or a CPU)

    def in_steps(self, t0: float) -> bool:
        return any(a <= t0 < b for a, b in self.steps)

    def kernel_in_steps(self, k: dict) -> bool:
        """A kernel belongs to the step whose host launched it (the GPU may run behind the host); by its own start
        where no launch call was recorded."""
        return self.in_steps(self.launched.get(k["corr"], k["t0"]))


def trace_files(paths) -> list[Path]:
    """The trace files named by `paths`: files as given, folders' *.json / *.json.gz files (sorted); InputError
    naming the path when one is missing or a folder holds none."""
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and (f.name.endswith(".json")
                                                                       or f.name.endswith(".json.gz")))
            if not found:
                raise InputError(f"--from-trace {str(p)!r} is a folder with no .json or .json.gz trace in it; valid: "
                                 "Kineto chrome traces, one per rank (torch.profiler's export_chrome_trace)")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise InputError(f"--from-trace {str(p)!r} does not exist; valid: a trace file or a folder of them")
    return files


def read_json(path: Path) -> dict:
    """A trace file's JSON object (gzip by its magic bytes); InputError naming the file and what is wrong."""
    where = f"trace {str(path)!r}"
    raw = path.read_bytes()
    if not raw:
        raise InputError(f"{where} is empty; valid: a Kineto chrome trace (JSON, or gzipped JSON)")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as err:
            raise InputError(f"{where} is a truncated or damaged gzip file ({err}); valid: the whole file as the "
                             "profiler wrote it") from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{where} is not JSON ({str(err)[:80]}); valid: a Kineto chrome trace, which may be cut "
                         "short when the profiler was stopped before it finished writing") from None
    if isinstance(data, list):  # the bare-array chrome-trace form
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError(f"{where} has no traceEvents list; valid: a chrome trace ({{\"traceEvents\": [...]}})")
    return data


def _dims_types(args: dict) -> tuple[list, list]:
    return args.get("Input Dims") or [], args.get("Input type") or []


def _numel(dims) -> int:
    return int(math.prod(dims)) if isinstance(dims, list) and all(isinstance(d, int) for d in dims) else 0


def _nest(ops: list[Op]) -> None:
    """Set each op's children: the ops of its thread that start and end inside it, one level down."""
    by_tid = defaultdict(list)
    for op in ops:
        by_tid[op.tid].append(op)
    for items in by_tid.values():
        items.sort(key=lambda o: (o.t0, -o.dur))
        stack: list[Op] = []
        for op in items:
            while stack and op.t0 >= stack[-1].t1 - 1e-9:
                stack.pop()
            if stack and op.t1 <= stack[-1].t1 + 1e-9:
                stack[-1].children.append(op)
            stack.append(op)


def parse(path: Path) -> RankTrace:
    """Index one rank's trace file; InputError where it holds neither device kernels nor host operators."""
    data = read_json(path)
    events = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
              and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]
    dist = data.get("distributedInfo") or {}
    props = data.get("deviceProperties") or []
    ops, kernels, launches, gloo, steps, comm_args = [], [], [], [], [], {}
    base = min((e["ts"] for e in events), default=0.0)  # relative times: seconds keep sub-nanosecond precision
    for e in events:
        cat, name, args = e.get("cat", ""), e.get("name", ""), e.get("args") or {}
        t0, t1 = (e["ts"] - base) * US, (e["ts"] - base + e["dur"]) * US
        if cat == "cpu_op" and name == "record_param_comms":
            comm_args[args.get("External id")] = args
        if cat == "cpu_op":
            ops.append(Op(name, t0, t1, e.get("tid", 0), args.get("External id"), *_dims_types(args)))
        elif cat in KERNEL_CATS or cat in COPY_CATS:
            kernels.append({"name": name, "t0": t0, "t1": t1, "ext": args.get("External id"),
                            "corr": args.get("correlation"), "args": args,
                            "cls": "copies" if cat in COPY_CATS else kernel_class(name)})
        elif cat in ("cuda_runtime", "cuda_driver") and name in LAUNCH_CALLS:
            launches.append((t0, t1, args.get("correlation"), e.get("tid", 0)))
        elif cat == "user_annotation" and name.startswith("ProfilerStep#"):
            steps.append((t0, t1))
        elif cat == "user_annotation" and name.startswith("gloo:"):
            dims, types = _dims_types(args)
            kind = GLOO_KINDS.get(name.split(":", 1)[1])
            if kind is not None:
                nbytes = sum(_numel(d) * DTYPES.get(t, ("", 4))[1] for d, t in zip(dims, types))
                gloo.append({"kind": kind, "t0": t0, "t1": t1, "nbytes": nbytes,
                             "dtype": DTYPES.get(types[0], (types[0] if types else "?",))[0] if types else "?"})
    if not kernels and not any(not NO_WORK_OPS.match(o.name) for o in ops):
        raise InputError(f"trace {str(path)!r} holds no GPU kernels and no host operators (cpu_op events); valid: "
                         "a trace recorded with torch.profiler's CPU activity, and CUDA on a GPU")
    stepped = bool(steps)
    if not steps:
        steps = [(0.0, max(e["ts"] - base + e["dur"] for e in events) * US)]
    _nest(ops)
    attach_kernels(ops, kernels, launches)
    gpu = bool(kernels)
    name = (props[0].get("name") if props else None) or data.get("perfmodel_device") or ("GPU" if gpu else "CPU")
    rocm = any("gcnArchName" in p for p in props) or any(k["name"].startswith(("Cijk_", "hip")) for k in kernels)
    return RankTrace(
        path=path, rank=int(dist.get("rank", data.get("perfmodel_rank", 0)) or 0),
        world=int(dist.get("world_size", data.get("perfmodel_world_size", 1)) or 1),
        device=name, device_type="cuda" if gpu else "cpu", vendor=("AMD" if rocm else "NVIDIA") if gpu else "CPU",
        host=str(data.get("host_name", "")), backend=dist.get("backend"),
        group_sizes=sorted({int(g.get("pg_size", 1)) for g in dist.get("pg_config", []) or []}),
        steps=sorted(steps), stepped=stepped, ops=ops, kernels=kernels, launches=launches, gloo=gloo,
        comm_args=comm_args, launched={c: a for a, _, c, _ in launches if c is not None},
        device_bytes=float(props[0].get("totalGlobalMem", 0) if props else 0),
        meta={k: v for k, v in data.items() if k.startswith("perfmodel_")}, props=dict(props[0]) if props else {})


def attach_kernels(ops: list[Op], kernels: list[dict], launches: list) -> None:
    """Add each kernel's seconds to the innermost host operator that launched it: the launch call with the kernel's
    correlation id lies inside that operator on its thread (older traces give kernels the launch's correlation as
    their External id, newer ones the operator's; the launch call ties both)."""
    top = defaultdict(list)
    inner = {id(c) for o in ops for c in o.children}
    for o in ops:
        if id(o) not in inner:
            top[o.tid].append(o)
    starts = {tid: [o.t0 for o in items] for tid, items in top.items()}

    def innermost(tid: int, t: float) -> Op | None:
        items = top.get(tid)
        if not items:
            return None
        i = bisect.bisect_right(starts[tid], t) - 1
        op = items[i] if i >= 0 and items[i].t0 <= t < items[i].t1 else None
        while op is not None:
            child = next((c for c in op.children if c.t0 <= t < c.t1), None)
            if child is None:
                return op
            op = child
        return None

    owner = {}
    for t0, _, corr, tid in launches:
        if corr is not None:
            owner[corr] = innermost(tid, t0)
    for k in kernels:
        op = owner.get(k["corr"])
        k["op"] = op.name if op is not None else None  # the operator that launched it (None: not recorded)
        if k["cls"] == "gemm" and op is not None and CONV_OP.match(op.name):
            k["cls"] = "convolution"
        if op is not None and k["cls"] != "copies":
            op.device_s += k["t1"] - k["t0"]
            op.kernel_names.append(k["name"])


def kernel_class(name: str) -> str:
    """A GPU kernel's class by its name: collective, attention, convolution, gemm or memory-bound (copies by their
    category)."""
    if COLLECTIVE_KERNEL.search(name):
        return "collective"
    if ATTENTION_KERNEL.search(name):
        return "attention"
    if CONV_KERNEL.search(name):
        return "convolution"
    if GEMM_KERNEL.search(name):
        return "gemm"
    if re.search(r"memcpy|memset", name, re.I):
        return "copies"
    return "memory-bound"


def op_class(name: str) -> str | None:
    """A CPU trace's leaf operator's class (None: no device work: views, allocations, metadata, and what is not an
    ATen or c10d operator: autograd nodes, Python functions, user annotations)."""
    if name.startswith(("c10d", "_c10d_functional", "gloo:")):
        return "collective"
    if not name.startswith("aten::") or NO_WORK_OPS.match(name):
        return None
    if name in GEMM_OPS or name in ("aten::bmm", "aten::baddbmm"):
        return "gemm"
    if ATTENTION_OP.search(name):
        return "attention"
    if name in ("aten::copy_", "aten::fill_", "aten::zero_"):
        return "copies"
    return "memory-bound"


def load_traces(paths) -> list[RankTrace]:
    """Every rank's trace from `paths` (files or folders), each rank once; InputError for a bad or mixed set."""
    traces = [parse(p) for p in trace_files(paths)]
    ranks = [t.rank for t in traces]
    if len(set(ranks)) != len(ranks):
        twice = sorted({r for r in ranks if ranks.count(r) > 1})
        raise InputError(f"--from-trace: rank {twice[0]} appears in {ranks.count(twice[0])} files; valid: one trace "
                         "per rank of one run (a folder of one step's traces)")
    devices = {t.device_type for t in traces}
    if len(devices) > 1:
        raise InputError("--from-trace mixes CPU and GPU traces; valid: the traces of one run")
    common = min(len(t.steps) for t in traces)  # the steps every rank recorded
    for t in traces:
        t.steps = t.steps[:common]
    return sorted(traces, key=lambda t: t.rank)


def leaf_work(t: RankTrace) -> list[Op]:
    """A CPU trace's innermost working operators inside the steps: a class other than none or collective
    (`op_class`) and no working operator nested inside (mm's resolve_conj or a view does not make it a parent)."""
    def works(o: Op) -> bool:
        return op_class(o.name) not in (None, "collective")

    def inner_work(o: Op) -> bool:
        return any(works(c) or inner_work(c) for c in o.children)

    return [o for o in t.ops if works(o) and t.in_steps(o.t0) and not inner_work(o)]


def dtype_of(types: list) -> tuple[str, int]:
    """(name, bytes) of an operator's first tensor input's dtype."""
    for ty in types:
        if ty in DTYPES:
            return DTYPES[ty]
    return ("?", 4)


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of (start, end) intervals."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def host_wait_seconds(t: RankTrace) -> float:
    """Seconds, inside the steps, the GPU sat idle before a kernel whose launch call had not returned when the idle
    gap began: the device waiting for the host."""
    if not t.kernels:
        return 0.0
    launch_end = {c: b for _, b, c, _ in t.launches if c is not None}
    ks = sorted((k for k in t.kernels if t.kernel_in_steps(k)), key=lambda k: k["t0"])
    wait, busy_until = 0.0, None
    for k in ks:
        if busy_until is not None and k["t0"] > busy_until:
            issued = launch_end.get(k["corr"])
            if issued is not None and issued > busy_until:
                wait += k["t0"] - busy_until
        busy_until = k["t1"] if busy_until is None else max(busy_until, k["t1"])
    return wait


def innermost_gemm(op: Op) -> bool:
    """A GEMM operator with no GEMM operator inside it at any depth (addmm dispatching to mm, DTensor's dispatch
    reaching the local mm): the one that ran, counted once."""
    def inside(o: Op) -> bool:
        return any(c.name in GEMM_OPS or inside(c) for c in o.children)

    return op.name in GEMM_OPS and not inside(op)


def gemm_shape(op: Op) -> tuple[int, int, int] | None:
    """(m, n, k) of a GEMM operator from its input shapes: mm [m, k] [k, n]; addmm bias, [m, k], [k, n]."""
    mats = [d for d in op.dims if isinstance(d, list) and len(d) == 2 and all(isinstance(x, int) for x in d)]
    if len(mats) < 2:
        return None
    (m, k), (k2, n) = mats[-2], mats[-1]
    return (m, n, k) if k == k2 and min(m, n, k) > 0 else None


def op_seconds(t: RankTrace, op: Op) -> float:
    """An operator's device seconds: on a GPU the kernels it and the operators inside it launched, on a CPU its
    span."""
    if t.device_type == "cpu":
        return op.dur
    return op.device_s + sum(op_seconds(t, c) for c in op.children)
