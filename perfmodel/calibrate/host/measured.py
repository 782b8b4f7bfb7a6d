"""This machine's host as a spec carries it (spec.host.cpu.HostCPU), from what calibrate.host.calls measured: every
probed kind cited to the command, and what the run could not probe said so."""

from __future__ import annotations

from pathlib import Path

# Transformer Engine's te.Linear over torch's nn.Linear, host seconds per forward call (TE issue #2053: GB200
# 99.7/37.1, GH200 90.5/33.2; mid-2025 TE): what a host without Transformer Engine takes for a fused module
TE_OVER_LINEAR = (99.7 / 37.1 + 90.5 / 33.2) / 2


def sockets_and_cores() -> tuple[int, int]:
    """(sockets, physical cores per socket) from /proc/cpuinfo's physical id and cpu cores (1 and the logical
    CPUs where it lacks them)."""
    import os

    from ...execute.host import proc_field

    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return 1, os.cpu_count() or 1
    ids = {line.split(":")[1].strip() for line in text.splitlines() if line.startswith("physical id")}
    cores = proc_field("/proc/cpuinfo", "cpu cores")
    return max(len(ids), 1), int(cores) if cores and cores.isdigit() else (os.cpu_count() or 1)


def measured_host(result: dict, name: str, command: str):
    """The host of this machine as `measure` found it (spec.host.cpu.HostCPU): every kind measured but a fused
    module without Transformer Engine (its nn.Linear call x TE_OVER_LINEAR) and a kind the run could not probe (the
    DGX H100 host's cost of it, scaled by this host's eager op over that one's); each cost cites the command."""
    from ...errors import InputError
    from ...spec.host.cpu import CALL_KINDS, REFERENCE_HOST, HostCPU, reference_host

    calls = dict(result["calls_s"])
    for kind in ("eager_op", "module_call"):  # what every stand-in below is scaled from
        if kind not in calls:
            raise InputError(f"the {kind} probe failed ({result['failed'].get(kind, 'not run')}): no host file can be "
                             "written without it; valid: a run whose eager-op and nn.Linear probes succeed")
    how = f"measured: `{command}` on {result['host']['cpu']} ({result['date']}; calibrate.host.calls)"
    sources = {f"calls.{k}_s": how for k in CALL_KINDS}
    if "fused_module" not in calls:
        calls["fused_module"] = calls["module_call"] * TE_OVER_LINEAR
        sources["calls.fused_module_s"] = (f"derived: this host's nn.Linear call x {TE_OVER_LINEAR:.2f}, Transformer "
                                           "Engine's te.Linear over torch's (TE issue #2053, GB200 and GH200): "
                                           "transformer_engine does not import here")
    # a kind this run could not probe: the DGX H100 host's cost of it, scaled by how this host's eager op compares
    ratio = calls["eager_op"] / reference_host().calls.eager_op_s  # 1 / this host's HostCPU.speed
    stand_in = reference_host().calls.scaled(ratio)
    for kind in CALL_KINDS:
        if kind not in calls:
            calls[kind] = stand_in.cost(kind)
            why = result["failed"].get(kind, "no such probe on this device")
            sources[f"calls.{kind}_s"] = (f"not measured here ({why}): the DGX H100 host's ({REFERENCE_HOST}) x "
                                          f"{ratio:.2f}, this host's eager op over that one's")
    sockets, cores = sockets_and_cores()
    return HostCPU(name=name, description=f"this machine's host as perfmodel calibrate measured it ({result['date']})",
                   cpu=result["host"]["cpu"], sockets=sockets, cores_per_socket=cores,
                   calls={f"{k}_s": float(calls[k]) for k in CALL_KINDS},
                   sources={**sources, "cpu": "/proc/cpuinfo of this machine"})
