"""Peak memory of one rank over the measured steps.

CUDA: `torch.cuda.max_memory_allocated` after `reset_peak_memory_stats` (what the caching allocator handed to
tensors: weights, gradients, optimizer state, activations, communication buffers; not its cached slack).

CPU: torch keeps no allocator statistics for CPU tensors. The most faithful measure found (see
/work/shared/TORCH_NOTES.md for the alternatives tried: the profiler's memory events were 10-25% off, the
private MemTracker missed DDP's buckets) is the process's resident-set high-water mark (VmHWM in
/proc/self/status) with glibc returning every block of a page (4 KiB) or more to the OS at once
(MALLOC_MMAP_THRESHOLD_=4096, launch.MALLOC_MEMORY): then resident memory follows the live tensors to within
~1 MiB. That setting slows the steps (a page fault per allocation), so on CPU `execute` measures memory in a
launch of its own and times the steps in another (execute.run_plans). The high-water mark is reset (write 5
to /proc/self/clear_refs) when measurement starts, and the resident size before the model was built (the
interpreter, torch's libraries, the process group) is subtracted, or the resident size after the plan's
model, optimizer and batches are freed if larger (library code and workspaces that the first step paged in
stay resident and are not the plan's memory).
"""

from __future__ import annotations

import torch

from ..host import rss_bytes
from ..launch import MALLOC_MEMORY

METHOD = {
    "cuda": "torch.cuda.max_memory_allocated after reset_peak_memory_stats (set-up excluded)",
    "cpu": "resident-set high-water mark (VmHWM, reset via /proc/self/clear_refs at the first step) minus the "
           "larger of the resident size before the model was built and after it was freed; "
           + " ".join(f"{k}={v}" for k, v in MALLOC_MEMORY.items()),
}


class PeakMemory:
    """`baseline()` before building the model, `start()` before the first step, `stop()` after the last,
    `peak()` once the plan's objects are freed."""

    def __init__(self, device: torch.device):
        self.device = device
        self.base = self.high = 0.0

    def baseline(self) -> None:
        if self.device.type == "cpu":
            self.base = rss_bytes()

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")

    def stop(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.high = float(torch.cuda.max_memory_allocated(self.device))
        else:
            self.high = rss_bytes("VmHWM")

    def peak(self) -> float:
        if self.device.type == "cuda":
            return self.high
        return max(0.0, self.high - max(self.base, rss_bytes()))
