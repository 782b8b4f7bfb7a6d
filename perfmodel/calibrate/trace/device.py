"""The base system a GPU trace calibrates: the catalogue's system of the GPU the trace ran on (by its
deviceProperties name, calibrate.machine.calibration.default_base), else one built from the trace's own device.

A trace's deviceProperties give the GPU's name, SMs / CUs (numSms), memory (totalGlobalMem) and compute capability
(computeMajor / computeMinor; no clock and no peak rate: Kineto records none), so a GPU the catalogue lacks (a V100,
an MI250 or MI210, an H800) gets the rates the trace measured as its peaks, as a CPU trace's spec does
(calibrated_spec.cpu_template): peak_tflops of each precision = the best GEMM rate its shaped GEMMs reached, or the
job's GEMM rate against its plan's FLOPs (calibrate.trace.gemm), matmul_max 1 of it and the tile 1 x 1 (no
quantisation the trace did not show); hbm_bandwidth_tbps = the best streaming bandwidth it measured (a device-to-device
copy of a MiB or more: its bytes read and written over its seconds; or a shaped copy or add). What the trace cannot
give is named in the summary's `assumed`, and where it measured neither a GEMM rate nor a bandwidth the spec is
refused with the one thing it lacks.
"""

from __future__ import annotations

import numpy as np

from ...errors import InputError
from ...spec.hardware.system import Accelerator, Efficiency, GiB, NetworkTier, System, load_hardware
from ..machine.calibrated_spec import slug
from ..machine.fit import best_gemm_rate, best_stream_bandwidth
from ..machine.raw import Measurements
from .reader import RankTrace

MIN_COPY_BYTES = 1 << 20  # a copy of a MiB and more: bandwidth, not the launch, sets its time (from_trace's stream)
PLACEHOLDER_TFLOPS = 1.0  # a provisional device's peak, only to resolve a plan before its rate is measured


def copy_rates(traces: list[RankTrace]) -> list[float]:
    """Bytes/s of every device-to-device copy of MIN_COPY_BYTES or more inside the steps: twice its bytes (read and
    written, as from_trace's stream points count a copy) over its seconds; Kineto's gpu_memcpy events carry the bytes
    without record_shapes."""
    out = []
    for t in traces:
        for k in t.kernels:
            nbytes = k["args"].get("bytes") or 0
            if k["cls"] == "copies" and "DtoD" in k["name"] and nbytes >= MIN_COPY_BYTES and k["t1"] > k["t0"] \
                    and t.kernel_in_steps(k):
                out.append(2.0 * nbytes / (k["t1"] - k["t0"]))
    return out


def catalogue_base(t: RankTrace, hardware, strict: bool) -> tuple[System | None, list[str]]:
    """(the catalogue system to calibrate, what was assumed): --hardware's where it is the trace's GPU; else the
    catalogue's system of the trace's GPU; None where the catalogue has none. `strict` (predict --trace): --hardware
    naming another GPU is refused; else it is said and the trace's own device taken."""
    from ..machine.calibration import default_base

    assumed = []
    if hardware is not None:
        system = load_hardware(hardware)
        family = system.accelerator.name.split("-")[0].lower()
        if not t.props and system.accelerator.torch_device == "cuda":
            return system, [f"base system {system.name} (--hardware): the trace records no deviceProperties, so its "
                            f"GPU is taken to be {system.accelerator.name} as --hardware says; its datasheet peaks, "
                            "the tiers beyond the trace's groups and every efficiency the trace does not measure"]
        if system.accelerator.torch_device == "cuda" and family in t.device.lower().replace(" ", ""):
            return system, [f"base system {system.name} (--hardware): its datasheet peaks, the tiers beyond the "
                            "trace's groups and every efficiency the trace does not measure"]
        if strict:
            raise InputError(f"--hardware {hardware}: {system.name}'s accelerator is {system.accelerator.name}, the "
                             f"trace ran on {t.device}; valid: the system of the GPU the trace ran on (default: the "
                             "catalogue's, by the trace's device name)")
        assumed.append(f"--hardware {hardware} is {system.accelerator.name}, not the {t.device} the trace ran on: "
                       "calibrated against the trace's own device instead")
    try:
        system = default_base(t.device, t.device_bytes)
    except InputError:
        return None, assumed
    return system, assumed + [
        f"base system {system.name}: the catalogue's system of the trace's {t.device} (deviceProperties name, the "
        f"closest memory to its {t.device_bytes / GiB:.1f} GiB): its datasheet peaks, the tiers beyond the trace's "
        "groups and every efficiency the trace does not measure"]


def provisional_device(t: RankTrace) -> System:
    """A device the catalogue lacks, before the trace's rates are known: what resolves a plan on it (every plan
    precision at PLACEHOLDER_TFLOPS); only the plan's FLOPs, which no rate changes, are read off it."""
    from .gemm import PLAN_PRECISIONS

    return own_device(t, {p: PLACEHOLDER_TFLOPS * 1e12 for p in PLAN_PRECISIONS}, 1e12, "provisional")[0]


def own_device(t: RankTrace, rates: dict[str, float], bandwidth: float, how: str) -> tuple[System, list[str]]:
    """A system of the trace's own GPU (module docstring) with peak FLOP/s `rates` per precision and `bandwidth`
    bytes/s as measured (`how` says how), and what it assumed."""
    props = t.props
    if not props:
        raise InputError(f"trace {str(t.path)!r} records no deviceProperties (the GPU it ran on) and --hardware names "
                         "none; valid: --hardware NAME or SPEC.yaml, the system it ran on (perfmodel hardware list)")
    peaks = {d: float(f"{r / 1e12:.4g}") for d, r in rates.items()}
    assumed = [f"{t.device} is in no catalogue system: the spec is built from the trace's deviceProperties (name, "
               f"{props.get('numSms')} SMs/CUs, {t.device_bytes / GiB:.1f} GiB) with its peaks and bandwidth as the "
               f"trace measured them ({how}); no clock, datasheet peak or power is in a trace"]
    src = {"peak_tflops": f"measured by the trace, not a datasheet: {how}",
           "hbm_bandwidth_tbps": "the best streaming bandwidth in the trace (a device-to-device copy of a MiB or "
                                 "more, bytes read and written over its seconds, or a shaped copy or add)",
           "hbm_capacity_gib": "deviceProperties totalGlobalMem", "compute_units": "deviceProperties numSms"}
    if "bf16" not in peaks:  # the schema's MFU reference: the 2-byte rate where measured, else the best measured
        ref = "fp16" if "fp16" in peaks else max(peaks, key=peaks.get)
        peaks["bf16"] = peaks[ref]
        src["peak_tflops"] += f"; bf16 (the MFU reference the schema needs) is the {ref} rate: no bf16 GEMM ran"
        assumed.append(f"peak_tflops.bf16 = the trace's {ref} rate: no bf16 GEMM ran, and a plan's bf16 GEMMs are "
                       f"priced at it")
    acc = Accelerator(name=f"{t.device} (trace)", vendor=t.vendor, peak_tflops=peaks,
                      hbm_capacity_gib=float(f"{t.device_bytes / GiB:.4g}"),
                      hbm_bandwidth_tbps=float(f"{bandwidth / 1e12:.4g}"), tdp_w=None,
                      compute_units=int(props.get("numSms") or 1), torch_device="cuda", sources=src)
    tier = NetworkTier(name="trace-group", domain_size=None, topology="switch", bandwidth_gbps=1.0, latency_us=0.0,
                       collective_efficiency=1.0, sources={
                           k: "not measured until the trace's collectives are fitted: a placeholder that a one-device "
                              "job never uses" for k in ("bandwidth_gbps", "latency_us", "collective_efficiency")})
    eff = Efficiency(matmul_max={d: 1.0 for d in peaks}, matmul_tile=(1, 1),
                     attention_max=1.0, attention_half_seq=0.0, memory_bandwidth=1.0, sources={
                         "attention_max": "not measured (no fused attention at a recorded shape): 1 of the bf16 rate",
                         "matmul_tile": "1 x 1: the peak is the trace's own rate, no quantisation beyond it"})
    system = System(name=f"{slug(t.device)}-trace", description=f"{t.device} as its profiler trace measured it",
                    accelerator=acc, tiers=[tier], efficiency=eff, memory_overhead_gib=0.0, max_devices=t.world,
                    sources={"memory_overhead_gib": "not measured: a trace records no runtime memory; 0",
                             "max_devices": "the ranks of the traced job: the network beyond them is not measured"})
    return system, assumed


def device_from_trace(t: RankTrace, traces: list[RankTrace], m: Measurements, job_rate: tuple[str, float] | None,
                      label: str) -> tuple[System, list[str]]:
    """The own-device system of `traces` (a GPU the catalogue lacks) from what they measured: shaped GEMMs' best rate
    per precision, else the job's (`job_rate`: precision, FLOP/s); InputError naming the one thing missing."""
    rates = {p: best_gemm_rate(m.gemm, p) for p in sorted({g.precision for g in m.gemm})}
    how = "the best rate of the GEMMs at their recorded shapes (2 m n k over the kernels' seconds)"
    if not rates and job_rate is not None:
        rates = {job_rate[0]: job_rate[1]}
        how = f"the job's GEMM rate: {label}'s GEMM FLOPs over the GEMM kernels' seconds"
    if not rates:
        raise InputError(f"no catalogue system has the GPU {t.device!r} and its trace holds no GEMM with recorded "
                         "shapes (16-byte aligned) to take its rate from; valid: --plan PLAN.json or --config FILE --from FRAMEWORK of "
                         "the job it traced, a trace recorded with record_shapes=True, or --hardware SPEC.yaml of "
                         "its GPU")
    bandwidth = max([best_stream_bandwidth(m.memory)] + copy_rates(traces))
    if bandwidth <= 0:
        raise InputError(f"no catalogue system has the GPU {t.device!r} and its trace measures no memory bandwidth "
                         "(no device-to-device copy, copy or add of a MiB or more); valid: --hardware SPEC.yaml of "
                         "its GPU")
    return own_device(t, rates, bandwidth, how)


def with_copy_bandwidth(system: System, traces: list[RankTrace], m: Measurements) -> System:
    """`system` with memory_bandwidth from the trace's device-to-device copies (their median rate over the peak),
    where no norm, activation or add at a recorded shape fitted it; as it was where it has no such copy."""
    rates = copy_rates(traces)
    if not rates or any(p.purpose == "layer" for p in m.memory):
        return system
    eff = system.efficiency
    peak = system.accelerator.hbm_bandwidth
    value = float(f"{min(1.0, float(np.median(rates)) / peak):.4g}")
    return system.model_copy(update={"efficiency": eff.model_copy(update={"memory_bandwidth": value, "sources": {
        **eff.sources, "memory_bandwidth": f"the trace's {len(rates)} device-to-device copies of a MiB or more: "
        f"median {np.median(rates) / 1e9:.4g} GB/s (bytes read and written) over {peak / 1e9:.4g} GB/s "
        "(calibrate.trace.device; no elementwise kernel at a recorded shape)"}})})

