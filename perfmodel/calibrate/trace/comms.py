"""Collectives in a profiler trace (calibrate.trace.reader's RankTrace): NCCL/RCCL kernels with their
record_param_comms arguments (message elements, group size, dtype), gloo's worker spans with their input shapes, and
NCCL-tests' bus bandwidth of a call."""

from __future__ import annotations

from .reader import GLOO_KINDS, RankTrace

# record_param_comms' dtype names (c10's ScalarType names) -> (name, bytes)
COMM_DTYPES = {"Float": ("fp32", 4), "BFloat16": ("bf16", 2), "Half": ("fp16", 2), "Double": ("fp64", 8),
               "Int": ("int32", 4), "Long": ("int64", 8), "Byte": ("uint8", 1), "Char": ("int8", 1),
               "Bool": ("bool", 1), "Float8_e4m3fn": ("fp8", 1), "Float8_e5m2": ("fp8", 1)}
# Bus-bandwidth factors of NCCL-tests (PERFORMANCE.md): busbw = algbw * factor, for n ranks, bytes = the full tensor
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0, "p2p": lambda n: 1.0}


def group_size_of(t: RankTrace) -> tuple[int, bool]:
    """The group size a gloo collective of this trace ran over, and whether the trace determines it (one process
    group size above 1, else the world)."""
    sizes = [g for g in t.group_sizes if g > 1]
    if len(sizes) == 1:
        return sizes[0], True
    return t.world, not sizes or sizes == [t.world]


def collectives(t: RankTrace) -> list[dict]:
    """Every collective inside the steps: {"kind", "group", "nbytes" (the full tensor), "seconds", "dtype"}: gloo's
    worker spans, or NCCL/RCCL kernels with their record_param_comms arguments (on the kernel or on the host op
    that launched it)."""
    out = []
    if t.gloo:
        group, _ = group_size_of(t)
        for g in t.gloo:
            if t.in_steps(g["t0"]):
                full = g["nbytes"] * (group if g["kind"] == "all_gather" else 1)
                out.append({"kind": g["kind"], "group": group, "nbytes": full, "seconds": g["t1"] - g["t0"],
                            "dtype": g["dtype"]})
        return out
    for k in t.kernels:
        if k["cls"] != "collective" or not t.kernel_in_steps(k):
            continue
        args = k["args"]
        if "Collective name" not in args and k["ext"] in t.comm_args:
            args = {**t.comm_args[k["ext"]], **args}
        name = str(args.get("Collective name", k["name"])).lower()
        kind = next((v for key, v in GLOO_KINDS.items() if key in name.replace("_", "")
                     or key in name), "all_reduce" if "allreduce" in name.replace("_", "") else None)
        group = int(args.get("Group size", t.world) or t.world)
        dtype, elem = COMM_DTYPES.get(str(args.get("dtype", "")), ("?", 0))
        nin, nout = int(args.get("In msg nelems", 0) or 0), int(args.get("Out msg nelems", 0) or 0)
        out.append({"kind": kind or "all_reduce", "group": group, "nbytes": max(nin, nout) * elem,
                    "seconds": k["t1"] - k["t0"], "dtype": dtype})
    return out


def bus_bandwidth(kind: str, group: int, nbytes: float, seconds: float) -> float:
    """NCCL-tests' bus bandwidth, bytes/s: nbytes / seconds times the kind's factor for `group` ranks."""
    if seconds <= 0 or group < 1:
        return 0.0
    return nbytes / seconds * BUS_FACTOR.get(kind, lambda n: 1.0)(max(group, 2))
