"""Memory of one rank over the measured steps, in the views the cost model predicts (spec.result.MemoryBreakdown).

CUDA, after `reset_peak_memory_stats` at the first measured step (set-up excluded):
- allocated peak: `torch.cuda.max_memory_allocated` (what the caching allocator handed to tensors: weights,
  gradients, optimizer state, activations, communication buffers; not its cached slack);
- reserved peak: `torch.cuda.max_memory_reserved` (the allocator's segments: allocated plus cached and
  fragmented blocks);
- device: the device memory in use as NVML reports it (`torch.cuda.device_memory_used`, else pynvml directly),
  the largest of the samples taken after every step: the CUDA context, NCCL's buffers, library workspaces and
  the allocator's segments (which it keeps between steps, so the sample after a step holds the step's reserved
  peak unless something freed segments). NVML counts every process on the device, not this rank alone. None
  where NVML cannot be read (no pynvml / nvidia-ml-py installed, or NVML fails);
- between steps: `torch.cuda.memory_allocated` right after each step (optimizer step and zero_grad done), the
  largest over the steps: the training state that stays allocated.

CPU: torch keeps no allocator statistics for CPU tensors. The most faithful measure found (see
/work/shared/TORCH_NOTES.md for the alternatives tried: the profiler's memory events were 10-25% off, the
private MemTracker missed DDP's buckets) is the process's resident-set high-water mark (VmHWM in
/proc/self/status) with glibc returning every block of a page (4 KiB) or more to the OS at once
(MALLOC_MMAP_THRESHOLD_=4096, execute.launch.torchrun.MALLOC_MEMORY): then resident memory follows the live tensors to within
~1 MiB. That setting slows the steps (a page fault per allocation), so on CPU `execute` measures memory in an
untimed phase and times the steps in the next, in the same ranks, the allocator switched between them
(execute.launch.torchrun.set_allocator; execute.run_plans.run_plans). The high-water mark is reset (write 5
to /proc/self/clear_refs) when measurement starts, and the resident size before the model was built (the
interpreter, torch's libraries, the process group) is subtracted, or the resident size after the plan's
model, optimizer and batches are freed if larger (library code and workspaces that the first step paged in
stay resident and are not the plan's memory), read once glibc has returned its heap's free pages (malloc_trim,
`freed_rss_bytes`). Between steps: the resident size right after each step, read the same way, less the same
baseline, the largest over the steps. A CPU has no caching allocator and no device memory apart
from the host's: reserved and device are not measured (None).
"""

from __future__ import annotations

import torch

from .host import rss_bytes
from .launch.torchrun import MALLOC_MEMORY, allocator_text

_CPU_BASE = ("less the larger of the resident size before the model was built and after it was freed; "
             + allocator_text(MALLOC_MEMORY))

# How each RankRecord memory field is measured, by device type (spec.measurement.MEMORY_FIELDS).
METHODS = {
    "cuda": {
        "peak_memory_bytes": "torch.cuda.max_memory_allocated after reset_peak_memory_stats (set-up excluded)",
        "peak_reserved_bytes": "torch.cuda.max_memory_reserved after reset_peak_memory_stats (set-up excluded)",
        "device_bytes": "device memory used as NVML reports it ({nvml}), the largest of the samples after each "
                        "step (every process on the device)",
        "between_steps_bytes": "torch.cuda.memory_allocated right after each step (optimizer step and zero_grad "
                               "done), the largest over the steps",
    },
    "cpu": {
        "peak_memory_bytes": "resident-set high-water mark (VmHWM, reset via /proc/self/clear_refs at the first "
                             "step) " + _CPU_BASE,
        "peak_reserved_bytes": "not measured: a CPU has no caching allocator",
        "device_bytes": "not measured: a CPU has no device memory apart from the host's",
        "between_steps_bytes": "resident size (VmRSS) right after each step once malloc_trim(0) returned the heap's "
                               "free pages, the largest over the steps, "
                               + _CPU_BASE,
    },
}
# The allocated peak's method (Measurement.memory_method)
METHOD = {kind: m["peak_memory_bytes"] for kind, m in METHODS.items()}


def freed_rss_bytes() -> float:
    """The resident size once the plan's objects are freed: glibc first returns the free pages inside its heap
    (malloc_trim(0)). A block below the mmap threshold, or one that reused a free heap chunk the agent's import left,
    goes back to the heap's free lists when freed and stays resident until trimmed; read untrimmed, that memory
    counted as library pages in the baseline and the peak came out short of the state the step held."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # no glibc: the resident size as it is
        pass
    return rss_bytes()


def nvml_reader(device: torch.device):
    """(read() -> bytes of device memory in use, how) through NVML, or (None, why not)."""
    errors = []
    if hasattr(torch.cuda, "device_memory_used"):
        try:
            torch.cuda.device_memory_used(device)
            return (lambda: torch.cuda.device_memory_used(device)), "torch.cuda.device_memory_used"
        except Exception as err:  # pynvml missing, NVML not loaded, a device NVML does not see ...
            errors.append(f"torch.cuda.device_memory_used: {type(err).__name__}: {err}")
    try:
        import pynvml

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        pynvml.nvmlDeviceGetMemoryInfo(handle)
        return (lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used), "pynvml.nvmlDeviceGetMemoryInfo"
    except Exception as err:
        errors.append(f"pynvml: {type(err).__name__}: {err}")
    return None, "; ".join(errors)


class PeakMemory:
    """`baseline()` before building the model, `start()` before the first step, `after_step()` after each,
    `stop()` after the last, `record()` (or `peak()`, the allocated peak alone) once the plan's objects are
    freed."""

    def __init__(self, device: torch.device):
        self.device = device
        self.base = self.high = 0.0
        self.reserved = None  # peak reserved (CUDA)
        self.between = None  # CUDA: bytes; CPU: resident size (the baseline is subtracted in record())
        self.used = None  # NVML device memory in use, the largest sample
        self.nvml, self.nvml_how = None, ""
        self.methods = dict(METHODS[device.type])

    def baseline(self) -> None:
        if self.device.type == "cpu":
            self.base = rss_bytes()

    def start(self) -> None:
        self.between = self.used = None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            if self.nvml is None:
                self.nvml, self.nvml_how = nvml_reader(self.device)
            if self.nvml is None:
                self.methods["device_bytes"] = f"not measured: NVML could not be read ({self.nvml_how})"
            else:
                self.methods["device_bytes"] = METHODS["cuda"]["device_bytes"].format(nvml=self.nvml_how)
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")

    def after_step(self) -> None:
        """Sample what stays allocated once a step is done (and, on CUDA, the device memory NVML reports)."""
        if self.device.type == "cuda":
            now = float(torch.cuda.memory_allocated(self.device))
            if self.nvml is not None:
                try:
                    used = float(self.nvml())
                    self.used = used if self.used is None else max(self.used, used)
                except Exception as err:  # NVML went away: keep the samples taken so far
                    self.methods["device_bytes"] += f" (a later sample failed: {type(err).__name__})"
                    self.nvml = None
        else:
            now = freed_rss_bytes()  # the step's freed heap blocks are not its state
        self.between = now if self.between is None else max(self.between, now)

    def stop(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.high = float(torch.cuda.max_memory_allocated(self.device))
            self.reserved = float(torch.cuda.max_memory_reserved(self.device))
        else:
            self.high = rss_bytes("VmHWM")

    def peak(self) -> float:
        """The allocated peak, bytes (call once the plan's objects are freed)."""
        if self.device.type == "cuda":
            return self.high
        return max(0.0, self.high - max(self.base, freed_rss_bytes()))

    def record(self) -> dict:
        """RankRecord's memory fields (spec.measurement.MEMORY_FIELDS), bytes or None where not measured; call once
        the plan's objects are freed."""
        if self.device.type == "cuda":
            return {"peak_memory_bytes": self.high, "peak_reserved_bytes": self.reserved, "device_bytes": self.used,
                    "between_steps_bytes": self.between}
        base = max(self.base, freed_rss_bytes())
        return {"peak_memory_bytes": max(0.0, self.high - base), "peak_reserved_bytes": None, "device_bytes": None,
                "between_steps_bytes": None if self.between is None else max(0.0, self.between - base)}
