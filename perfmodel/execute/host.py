"""What the Linux host says about itself in /proc: the CPU's name and vendor, its memory, and this process's
resident memory. One reader for the executor (measurement) and calibration (environment); no torch."""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path


def proc_field(path: str, key: str) -> str | None:
    """The value after 'key:' in a /proc file of 'key: value' lines; None where the file or key is missing."""
    try:
        for line in Path(path).read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    except OSError:
        pass
    return None


def proc_kib(path: str, key: str) -> float | None:
    """A '<n> kB' field of a /proc file (/proc/self/status, /proc/meminfo) in bytes."""
    value = proc_field(path, key)
    return None if value is None else float(value.split()[0]) * 1024


def rss_bytes(field: str = "VmRSS") -> float:
    """This process's resident size (VmRSS) or its high-water mark (VmHWM), bytes."""
    value = proc_kib("/proc/self/status", field)
    if value is None:
        raise RuntimeError(f"/proc/self/status has no {field}")
    return value


def memory_total_bytes() -> float:
    """The host's memory (MemTotal), or pages x page size where /proc is missing."""
    return proc_kib("/proc/meminfo", "MemTotal") or float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def cpu_name() -> str:
    return proc_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine() or "cpu"


def cpu_vendor() -> str:
    v = proc_field("/proc/cpuinfo", "vendor_id") or ""
    return {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(v, v or platform.machine() or "unknown")


CPU_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_stat() -> dict[str, int] | None:
    """The host's CPU time so far by kind (the `cpu` line of /proc/stat, clock ticks); None without /proc."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    values = dict(zip(CPU_STAT_FIELDS, map(int, first[1:1 + len(CPU_STAT_FIELDS)])))
    return {k: values.get(k, 0) for k in CPU_STAT_FIELDS}  # old kernels list fewer kinds


def cpu_shares(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, float] | None:
    """Fraction of the host's CPU time between two `cpu_stat` readings spent in each kind. `steal` is time the
    hypervisor gave this virtual machine's CPUs to others: the noise a shared VM adds to every timing."""
    if not before or not after:
        return None
    delta = {k: after[k] - before[k] for k in CPU_STAT_FIELDS}
    total = sum(delta.values())
    return {k: v / total for k, v in delta.items()} if total > 0 else None


def usable_cores() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota (cpu.max) where one
    is set (a container limited to 2 of 16 CPUs has 2); os.cpu_count() where there is no affinity call."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores
