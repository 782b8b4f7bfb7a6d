"""Build the calibrated System: a template holding the reference peaks, then the fitted efficiencies on it.

CPU (no datasheet): every number comes from this machine.
- `peak_tflops.bf16` (and fp32) = the best per-rank fp32 GEMM rate measured with all ranks running at once.
  The CPU executor computes in fp32 and a plan's precision name (bf16) maps to it, so `matmul_max` is the
  fraction of that best rate a GEMM shape reaches under the cost model's tile rule.
- `compute_units` = 1: a rank runs on one thread, so a GEMM's tiles run one after another and only tile
  quantisation (not wave quantisation) is left in `gemm_time`.
- `hbm_capacity_gib` = host RAM / nproc; `hbm_bandwidth_tbps` = the best copy/add bandwidth per rank (all
  ranks streaming at once); `memory_bandwidth` = the fraction of it the elementwise kernels reach when counted
  in the estimate's bytes (bf16, 2 B per element, while fp32 moves 4: the factor is part of the fraction).
- one network tier, gloo over loopback: `bandwidth_gbps` = the best bus bandwidth measured (or a fitted one,
  shared or of a kind, if higher), `collective_efficiency` = fitted bus bandwidth / it, `latency_us` = fitted
  per-step latency, all kinds together; `by_kind` = each kind's own fit (its bus bandwidth / bandwidth_gbps,
  its latency) where its points allow one.
- `comm_overlap` = the fraction of an all-reduce that ran beside a GEMM loop on all ranks at once.
- `memory_overhead_gib` = resident memory of a rank after `import torch` and process-group setup (what a rank
  holds before the model exists); `max_devices` = nproc (the rates are those of nproc ranks sharing the host).
CUDA: the catalogue system `base` keeps its datasheet peaks and every tier a node cannot measure; its
efficiencies (and, for nproc > 1, comm_overlap and the innermost tier's latency, efficiency and by_kind) are
replaced by fitted ones, and `memory_overhead_gib` by the measured device memory torch's allocator cannot use.
`sustained_fraction` is 1.0 here (the fitted rates and the GEMM table are this machine's own); on a CPU
`calibrate.host.costs` then measures it end to end on a probe model that no validation sweep runs; it is never
fitted to validation plans or published runs.
GEMM table (both): the template part's measured tables, timed on another machine, are dropped; the table this run
measured (`calibrate.machine.measured_tables`, written beside the spec) takes their place, so the spec prices its GEMMs
from this machine's own times, and matmul_max (still fitted) prices the precisions the table lacks. Per-group
collective fits (`by_group`): this run's where they are clean (`measured_tables.fit_groups`), never the template's.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from ...spec.hardware.system import GEMM_DTYPES, MAX_BACKWARD_RATE, Accelerator, Efficiency, GiB, NetworkTier, System
from .fit import best_gemm_rate, best_stream_bandwidth, roofline_gemms
from .measured_tables import measured_backward_rate, table_grid
from .raw import FitResult, Measurements
from .suite import COLD_POOL_BYTES

CPU_TIER = "gloo-loopback"


def sig(x: float, digits: int = 4) -> float:
    """x rounded to `digits` significant figures (a spec file is read by people)."""
    return float(f"{x:.{digits}g}")


def _ms(times: list[float]) -> str:
    return f"{statistics.median(times) * 1e3:.1f} ms"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "host"


def default_name(m: Measurements, base: System | None) -> str:
    if m.env.device_type == "cpu":
        return f"cpu-{slug(m.env.host)}-{m.env.nproc}p"
    return f"{base.name}-calibrated"


def cpu_template(m: Measurements, name: str) -> System:
    """A CPU system whose peaks are the best rates measured; efficiencies are placeholders until fitted."""
    env = m.env
    best = best_gemm_rate(m.gemm)
    acc = Accelerator(
        name=f"{env.device_name} (1 thread, {env.nproc} ranks on {env.host})", vendor=env.vendor,
        peak_tflops={"bf16": sig(best / 1e12), "fp32": sig(best / 1e12)},
        hbm_capacity_gib=sig(env.memory_total_bytes / GiB / env.nproc),
        hbm_bandwidth_tbps=sig(best_stream_bandwidth(m.memory) / 1e12), tdp_w=None, compute_units=1,
        torch_device="cpu")
    tier = NetworkTier(name=CPU_TIER, domain_size=None, topology="switch", bandwidth_gbps=1.0, latency_us=0.0,
                       collective_efficiency=1.0)
    eff = Efficiency(matmul_max={"bf16": 1.0}, matmul_tile=(1, 1), attention_max=1.0, attention_half_seq=0.0,
                     memory_bandwidth=1.0)
    return System(name=name, description=f"{env.device_name} on host {env.host}: {env.nproc} torch process(es) "
                                         f"x 1 thread, gloo over loopback (perfmodel calibrate)",
                  accelerator=acc, tiers=[tier], efficiency=eff,
                  memory_overhead_gib=sig(env.baseline_bytes / GiB), max_devices=env.nproc)


def provenance(m: Measurements, command: str, raw_name: str) -> str:
    env = m.env
    return (f"measured by perfmodel calibrate on {env.started_at[:10]}, {env.nproc} x {env.device_name}, "
            f"torch {env.torch_version} (command: {command}); raw: {raw_name}")


def build_system(template: System, fit: FitResult, m: Measurements, command: str, raw_name: str,
                 name: str | None = None, gemm_table: str | Path | None = None,
                 attention_table: str | Path | None = None) -> System:
    """The template with every fitted field replaced, each citing the calibration run; `gemm_table`: the GEMM table
    written of `m` (`measured_tables.gemm_table_text`), which prices the spec's GEMMs (None: the datasheet path);
    `attention_table`: its attention table (`measured_tables.attention_table_text`), which prices every stack's
    flash attention with the backward at the measured rate (None: attention_max)."""
    env, prov = m.env, provenance(m, command, raw_name)
    cpu = env.device_type == "cpu"
    data = template.model_dump(mode="json")
    data["name"] = name or template.name
    acc, effd = data["accelerator"], data["efficiency"]
    # The GEMMs are this machine's own: its table, else its fit (matmul_max); the template part's measured tables,
    # timed on another machine, would override them (cost.compute.kernels.Device.gemm_table)
    acc["sources"] = {k: v for k, v in acc.get("sources", {}).items()
                      if k not in ("kernel_tables", "attention_table_kernel", "attention_backward_rate")}
    acc["kernel_tables"] = {"gemm": str(Path(gemm_table).resolve())} if gemm_table is not None else {}
    acc["attention_table_kernel"] = acc["attention_backward_rate"] = None  # the template's table goes with the rest
    # ... and its power model: the rates measured here ran at this machine's own clocks (cost.power would lower
    # them again); energy falls back to the board power (run.energy)
    acc["power"] = None
    if gemm_table is not None:
        grid = table_grid(m.gemm)
        axes = [sorted({key[i] for key in next(iter(grid.values()))}) for i in range(3)]
        acc["sources"]["kernel_tables"] = (
            f"gemm: measured on this machine by perfmodel calibrate, its own table (not the catalogue's), beside "
            f"this spec in the catalogue's format (hardware_specs/kernels/README.md): "
            + (f"F.linear (x W^T, as nn.Linear) with each call's weight taken in turn from {COLD_POOL_BYTES >> 20} "
               "MiB of them, read "
               "from beyond the caches as a model's forward reads it (calibrate.machine.bench.gemm), " if cpu else
               "torch.mm ")
            + f"in {env.dtype} on every m x n x k of m {axes[0]}, n {axes[1]}, k {axes[2]} "
            f"({', '.join(f'{d}: {len(p)}' for d, p in grid.items())} shapes"
            + ("; the CPU executor computes a plan's bf16 in fp32, so these fp32 times are the bf16 rows"
               if cpu else "") + f"), median seconds per call with all {env.nproc} ranks running at once; {prov}")
    if attention_table is not None:
        attention_source(acc, m, attention_table, prov, gemm_table is not None)

    if cpu:
        best = fit.peak_flops["bf16"]
        shape = max(m.gemm, key=lambda p: 2.0 * p.m * p.n * p.k / p.seconds)
        acc["sources"].update({
            "peak_tflops": f"best per-rank fp32 GEMM rate, {shape.m}x{shape.n}x{shape.k} at {best / 1e9:.1f} GFLOP/s "
                           f"with all {env.nproc} ranks running at once; the CPU executor computes in fp32 and a "
                           f"plan's bf16 maps to it (fp32 listed for clarity); {prov}",
            "hbm_capacity_gib": f"host MemTotal {env.memory_total_bytes / GiB:.1f} GiB / {env.nproc} ranks; {prov}",
            "hbm_bandwidth_tbps": f"best per-rank copy/add bandwidth ({env.dtype}, bytes really moved), all ranks "
                                  f"streaming at once; {prov}",
            "compute_units": "1: each rank computes on one thread (execute.launch.torchrun.worker_env, torch.set_num_threads(1)); "
                             "a GEMM's tiles run one after another, so only tile quantisation applies",
            "name": f"CPU of host {env.host} as one torch rank sees it",
        })

    # Efficiencies: every fitted field, and the catalogue's value for precisions not measured.
    matmul = dict(effd["matmul_max"])
    for prec, v in fit.matmul_max.items():
        matmul[prec] = sig(v)
    supported = [d for d in GEMM_DTYPES if d in acc["peak_tflops"]]
    matmul = {d: matmul[d] for d in supported if d in matmul}
    unmeasured = [d for d in matmul if d not in fit.matmul_max]
    n_gemm = len(roofline_gemms(m.gemm))
    both = [p for p in m.attention if p.passes == "forward_backward"]
    src = dict(effd.get("sources", {}))
    src.update(
        matmul_max=(f"fitted: cost.compute.kernel_time.gemm_time with matmul_tile, {fit.compute_units} compute unit(s) and the "
                    f"roofline at the streaming bandwidth ({fit.gemm_bandwidth / 1e9:.4g} GB/s in the estimate's "
                    f"bytes) reproduces {n_gemm} GEMM timings (small-model layer shapes, and the GEMM table's and "
                    f"irregular shapes of at least their FLOPs: calibrate.machine.fit.roofline_gemms) by least squares of log "
                    f"time, as a fraction of peak_tflops; it prices the precisions the GEMM table lacks"
                    + (f"; {', '.join(unmeasured)} not measured, catalogue value kept" if unmeasured else "")
                    + f"; {prov}"),
        matmul_tile=(f"fitted with matmul_max: of the tiles with sides 1..256 within 5% of the best RMS log error, "
                     f"{'the catalogue tile if among them, else ' if not cpu else ''}the smallest; {prov}"),
        attention_max=(f"fitted: cost.compute.kernel_time.flash_attention_time of the estimate's causal FLOPs reproduces "
                       f"{len(both)} scaled_dot_product_attention fwd+bwd timings ({env.dtype}, is_causal) "
                       f"over sequence lengths {sorted({p.seq for p in both})}; {prov}"),
        attention_half_seq=f"fitted with attention_max; {prov}",
        memory_bandwidth=(
            (f"fitted on {len(m.layers)} layer training steps of small models (fwd+bwd+AdamW): the estimate's "
             f"time, GEMMs by cost.compute.kernel_time.gemm_time, norm x2, GELU/SwiGLU, residual add x4 (cost.compute.kernels."
             f"ELEMENTWISE_BYTES) by memory_bound_time at this bandwidth and the AdamW step at "
             f"optimizer_bandwidth, matches the GEMMs as fitted plus the rest as measured ({env.dtype}); 1-D least "
             f"squares of log time"
             if m.layers else
             f"fitted: cost.compute.kernel_time.memory_bound_time of cost.compute.kernels.ELEMENTWISE_BYTES reproduces a layer's "
             f"elementwise time (norm x2, GELU or SwiGLU, residual add x4; {env.dtype})")
            + f"; fraction of {fit.peak_bandwidth / 1e9:.4g} GB/s"
            + ("; on one CPU thread GELU and norms are compute bound (a few % of streaming bandwidth), and the "
               "estimate counts bf16 (2 B) activations where the CPU executor moves fp32 (4 B)" if cpu else "")
            + f"; {prov}"),
        sustained_fraction=("1.0: a calibrated spec's GEMM table and efficiencies are this machine's own "
                            "microbenchmark times and rates "
                            "(on a CPU calibrate.host.costs replaces it by an end-to-end measurement on a probe model); "
                            "never fitted to validation plans or published runs"),
    )
    opt_bw = effd.get("optimizer_bandwidth")
    if fit.optimizer_bandwidth is not None:
        opt_bw = sig(fit.optimizer_bandwidth)
        n_adam = sum(1 for p in m.memory if p.purpose == "layer" and p.kernel == "adam")
        src["optimizer_bandwidth"] = (
            f"fitted: cost.compute.kernel_time.memory_bound_time of cost.memory.states.adam_step_bytes per parameter reproduces "
            f"{n_adam} fused torch.optim.AdamW steps (execute.parallel.data.adamw, {env.dtype}) over the "
            f"parameters of small-model layers, by least squares of log time; fraction of "
            f"{fit.peak_bandwidth / 1e9:.4g} GB/s; {prov}")
    overlap, measured = effd.get("comm_overlap", 1.0), False
    if m.overlap is not None and fit.comm_overlap is not None:
        o = m.overlap
        overlap, measured = sig(fit.comm_overlap, 3), True
        src["comm_overlap"] = (
            f"measured: on all {o.group_size} ranks at once, t_c = {o.gemm_calls} {o.dtype} GEMMs "
            f"{'x'.join(map(str, o.gemm))} alone, t_m = an all-reduce of {o.size_bytes} B over the {o.group_size} "
            f"ranks ({env.backend}) alone, t_both = the all-reduce started with async_op=True, the same GEMMs, then "
            f"its wait; comm_overlap = (t_c + t_m - t_both) / min(t_c, t_m) clipped to [0, 1] (0: serial, 1: fully "
            f"concurrent), median over {len(o.both_s)} repeats (medians t_c {_ms(o.compute_s)}, t_m "
            f"{_ms(o.comm_s)}, t_both {_ms(o.both_s)}, slowest rank)"
            + ("; gloo's collectives run on the CPU cores that compute" if cpu else "") + f"; {prov}")
    elif cpu:
        src["comm_overlap"] = ("not measured: a one-process calibration runs no collectives; the schema default "
                               "that a one-device job never uses" if not m.comm else
                               "not measured: the raw data predate the overlap benchmark; the schema default")
    data["efficiency"] = dict(matmul_max=matmul, matmul_tile=list(fit.matmul_tile),
                              attention_max=sig(fit.attention_max), attention_half_seq=sig(fit.attention_half_seq),
                              memory_bandwidth=sig(fit.memory_bandwidth), optimizer_bandwidth=opt_bw,
                              comm_overlap=overlap, comm_overlap_measured=measured,
                              sustained_fraction=1.0, sources=src)

    # The innermost tier, where the collectives were measured.
    tier = data["tiers"][0]
    if fit.network is not None:
        net = fit.network
        kind_bus = [k.bus_bandwidth for k in net.by_kind.values()]
        ref = max(net.best_bus_bandwidth, net.bus_bandwidth) if cpu else tier["bandwidth_gbps"] * 1e9
        group_bus = [k.bus_bandwidth for groups in net.by_group.values() for k in groups.values()]
        ref = max([ref, net.bus_bandwidth] + kind_bus + group_bus)  # above the datasheet it raises it (eff <= 1)
        kinds = sorted({p.kind for p in m.comm})
        sizes = sorted({p.group_size for p in m.comm})
        span = f"{min(p.size_bytes for p in m.comm)}..{max(p.size_bytes for p in m.comm)} B"
        fitted = (f"fitted: cost.comm.collectives.collective_time over cost.comm.collectives.group_phases ({', '.join(kinds)}) and "
                  f"cost.comm.collectives.p2p_time reproduce {len(m.comm)} timings over groups of {sizes} of {env.nproc} "
                  f"ranks, {span}, by least squares of log time; {prov}")
        # by_kind is this run's alone: a template's per-kind values belong to the shared values it replaces, and its
        # per-group NCCL fits (by_group, measured on another machine) would override this run's
        tsrc = {k: v for k, v in tier.get("sources", {}).items() if not k.startswith(("by_kind", "by_group"))}
        tsrc.update(latency_us=f"per-step latency {fitted}",
                    collective_efficiency=f"fitted bus bandwidth {net.bus_bandwidth / 1e9:.3f} GB/s / "
                                          f"bandwidth_gbps; {fitted}")
        if cpu or ref > tier["bandwidth_gbps"] * 1e9:
            tsrc["bandwidth_gbps"] = (f"best bus bandwidth of any measurement ((n-1)/n S / t per ring pass, NCCL-"
                                      f"tests convention) or the fitted one (shared, of any kind or of a group "
                                      f"size) if higher; {prov}")
        by_kind = {}
        for kind, k in net.by_kind.items():
            pts = [p for p in m.comm if p.kind == kind]
            formula = "cost.comm.collectives.p2p_time" if kind == "p2p" else "cost.comm.collectives.collective_time over cost.comm.collectives.group_phases"
            by_kind[kind] = dict(collective_efficiency=min(1.0, sig(k.bus_bandwidth / ref)),
                                 latency_us=sig(k.latency_s * 1e6))
            tsrc[f"by_kind.{kind}"] = (
                f"fitted apart from the other kinds: {formula} reproduces the {k.points} {kind} timings alone over "
                f"groups of {sorted({p.group_size for p in pts})} of {env.nproc} ranks, "
                f"{min(p.size_bytes for p in pts)}..{max(p.size_bytes for p in pts)} B, by least squares of log "
                f"time: latency {k.latency_s * 1e6:.4g} us per step, bus bandwidth {k.bus_bandwidth / 1e9:.4g} GB/s "
                f"(collective_efficiency = it / bandwidth_gbps); the shared latency_us and collective_efficiency "
                f"leave {k.shared_median_abs_error:.0%} median error on these points; {prov}")
        for kind, why in net.fallback.items():
            tsrc[f"by_kind.{kind}"] = f"not fitted apart ({why}): {kind} uses latency_us and collective_efficiency"
        by_group = {kind: {g: dict(collective_efficiency=min(1.0, sig(k.bus_bandwidth / ref)),
                                   latency_us=sig(k.latency_s * 1e6)) for g, k in groups.items()}
                    for kind, groups in net.by_group.items()}
        if by_group or net.group_fallback:
            tsrc["by_group"] = (
                (f"fitted per kind and group size as hardware_specs/kernels/import_tables.py fits the catalogue's NCCL "
                 f"tables (calibrate.machine.fit.fit_network on one group size's timings, calibrate.machine.measured_tables."
                 f"fit_groups), {'; '.join(f'{kind} groups of {sorted(map(int, g))}' for kind, g in by_group.items())}"
                 f"; the timings: {Path(raw_name).name.removesuffix('.raw.json')}.nccl.csv.gz; " if by_group else "")
                + "".join(f"{kind} not per group size ({why}): its by_kind; "
                          for kind, why in net.group_fallback.items())
                + prov)
        tier.update(bandwidth_gbps=sig(ref / 1e9), latency_us=sig(net.latency_s * 1e6),
                    collective_efficiency=min(1.0, sig(net.bus_bandwidth / ref)), by_kind=by_kind, by_group=by_group,
                    sources=tsrc)
    elif cpu:
        tier["sources"] = {k: "not measured: a one-process calibration runs no collectives; a placeholder that a "
                              "one-device job (max_devices: 1) never uses"
                           for k in ("bandwidth_gbps", "latency_us", "collective_efficiency")}

    ssrc = dict(data.get("sources", {}))
    if cpu:
        ssrc["memory_overhead_gib"] = (f"resident memory (VmRSS) of a rank after import torch and process-group "
                                       f"setup, largest over ranks; {prov}")
        ssrc["max_devices"] = f"the {env.nproc} ranks that shared the host during calibration"
        if env.cores is not None:
            data["shared_host"] = {
                "ranks": env.nproc, "cores": env.cores,
                "sources": {"ranks": f"ranks that ran the benchmarks at once; {prov}",
                            "cores": f"execute.host.usable_cores of a rank (affinity mask, cgroup quota): the CPUs the ranks shared; {prov}"}}
    else:
        exposed_gap = template.accelerator.hbm_bytes - env.memory_total_bytes
        data["memory_overhead_gib"] = sig((max(0.0, exposed_gap) + env.baseline_bytes) / GiB)
        ssrc["memory_overhead_gib"] = (f"datasheet capacity minus the device memory torch reports "
                                       f"({env.memory_total_bytes / GiB:.2f} GiB), plus memory in use but not in "
                                       f"torch's allocator after the benchmarks (CUDA context, NCCL, libraries); "
                                       f"{prov}")
    data["sources"] = ssrc
    if not cpu:
        data["description"] = (f"{template.description} -- efficiencies calibrated on "
                               f"{env.nproc} x {env.device_name} ({env.started_at[:10]})")
    return System.parse(data, where="calibrated spec")


def attention_source(acc: dict, m: Measurements, table: str | Path, prov: str, after_gemm: bool) -> None:
    """The spec's accelerator `acc` (as data) priced by the attention table `table` written of `m`: the table, its
    kernel (sdpa: every stack's flash attention), the measured backward rate, and their sources."""
    pts = [p for p in m.attention if p.passes == "forward"]
    rate = measured_backward_rate(m.attention)
    odd = rate is not None and not 0 < rate <= MAX_BACKWARD_RATE
    acc["kernel_tables"]["attention"] = str(Path(table).resolve())
    acc["attention_table_kernel"], acc["attention_backward_rate"] = "sdpa", None if odd or rate is None else sig(rate)
    acc["sources"]["attention_table_kernel"] = (
        "sdpa: the table times torch's scaled_dot_product_attention as the executor calls it (FlashAttention-2 on "
        "CUDA in bf16), which prices every stack's flash attention at its attention_speed")
    acc["sources"]["kernel_tables"] = acc["sources"].get("kernel_tables", "") + (
        f"{'; ' if after_gemm else ''}attention: measured on this machine by perfmodel calibrate, beside this spec "
        f"in the catalogue's format: causal scaled_dot_product_attention forward in {m.env.dtype}, "
        f"{pts[0].heads} heads of {pts[0].head_dim}, prompts {sorted({p.seq for p in pts})} at "
        f"{sorted({p.batch for p in pts})} sequences, median seconds per call; {prov}")
    acc["sources"]["attention_backward_rate"] = (
        f"not kept: the measured {rate:.3g} lies outside (0, {MAX_BACKWARD_RATE:g}] (a noisy backward); "
        "FlashAttention-2's 63/73 stands" if odd else
        "measured: FLASH_BWD_FACTOR x (forward - the one-token call) / (forward + backward - forward) of the same "
        f"scaled_dot_product_attention calls, median over the calls the table keeps "
        f"(calibrate.machine.measured_tables.measured_backward_rate); {prov}" if rate is not None else
        "not measured (no call the table keeps has a backward): FlashAttention-2's 63/73 stands")
