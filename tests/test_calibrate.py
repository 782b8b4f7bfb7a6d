"""perfmodel calibrate: fits recover known parameters; real quick CPU calibrations write loadable specs; bad input.

The fits are checked on synthetic timings made by the cost model's own formulas, so they must come back
exactly. The real calibrations (one in-process rank, two ranks under torchrun) assert only sane ranges:
absolute CPU timings vary between runs and machines.
"""

import gzip
import json
import math

import pytest
from pathlib import Path
import yaml

import perfmodel as pm
from perfmodel.calibrate.machine.calibration import calibrate, default_base, raw_path, run_calibration
from perfmodel.cli.commands import calibrate as cal_command
from perfmodel.calibrate.machine.fit import (
    COUNTED_BYTES,
    comm_coefficients,
    fit_all,
    fit_attention,
    fit_gemm,
    fit_memory,
    fit_network,
    fit_overlap,
    overlap_fraction,
)
from perfmodel.calibrate.machine.raw import (
    AttentionPoint,
    CommPoint,
    Environment,
    GemmPoint,
    LayerMix,
    Measurements,
    MemoryPoint,
    OverlapRun,
    RawFile,
    load_raw,
)
from perfmodel.calibrate.machine.calibrated_spec import build_system, cpu_template
from perfmodel.calibrate.host.costs import SUSTAIN_MODEL
from perfmodel.cost.comm.collectives import Phase, collective_time, group_phases, p2p_time
from perfmodel.cost.compute.kernel_time import flash_attention_time, gemm_time
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import load_hardware

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------------------------------------------------
# Synthetic measurements from the cost model's formulas
# ---------------------------------------------------------------------------------------------------------

def env(device="cpu", nproc=2, **kw):
    base = dict(device_type=device, device_name="Test CPU", vendor="Intel", host="testhost", torch_version="2.13.0",
                nproc=nproc, threads_per_rank=1, dtype="fp32", backend="gloo", memory_total_bytes=16 * 2**30,
                baseline_bytes=0.25 * 2**30, started_at="2025-01-02T03:04:05+00:00")
    return Environment(**{**base, **kw})


def gemm_point(m, n, k, t, precision="bf16"):
    return GemmPoint(m=m, n=n, k=k, dtype="fp32", precision=precision, source="grid", seconds=t, rank_seconds=[t])


def mem_point(kernel, shape, t, moved=0.0):
    elems = shape[0] * (shape[1] if len(shape) == 2 else 1)
    return MemoryPoint(kernel=kernel, purpose="stream" if moved else "layer", elements=elems, shape=list(shape),
                       dtype="fp32", bytes_moved=moved, seconds=t, rank_seconds=[t])


def comm_point(kind, n, size, t):
    return CommPoint(kind=kind, group_size=n, groups=1, size_bytes=size, dtype="fp32", seconds=t, rank_seconds=[t])


def test_optimizer_bandwidth_is_the_geometric_mean_rate_of_the_adam_steps():
    from perfmodel.calibrate.machine.fit import fit_optimizer

    # AdamW with fp32 gradients is charged 26 + 2 * 4 = 34 B per parameter (cost.memory.states.adam_step_bytes).
    # 1M parameters at 100 GB/s peak: 34 MB; one step at 50% of peak takes 0.68 ms, one at 12.5% 2.72 ms:
    # geometric mean of 0.5 and 0.125 = 0.25.
    pts = [mem_point("adam", [10**6], 0.68e-3), mem_point("adam", [10**6], 2.72e-3), mem_point("gelu", [4, 4], 1.0)]
    assert fit_optimizer(pts, 100e9) == pytest.approx(0.25, rel=1e-9)
    assert fit_optimizer([mem_point("gelu", [4, 4], 1.0)], 100e9) is None


def test_memory_fit_recovers_the_fraction():
    # 100 GB/s peak, 40% of it: a norm fwd+bwd over 1M elements is charged 10 B each -> 10 MB / 40 GB/s = 250 us.
    assert COUNTED_BYTES["norm"] == 10
    peak, eff = 100e9, 0.4
    pts = [mem_point(k, s, COUNTED_BYTES[k] * math.prod(s) / (peak * eff))
           for k, s in [("norm", (1000, 1000)), ("gelu", (1024, 4096)), ("add", (2**20,)), ("swiglu", (512, 2048))]]
    assert pts[0].seconds == pytest.approx(250e-6)
    fitted = fit_memory(pts + [mem_point("copy", (2**20,), 1.0, moved=8 * 2**20)], peak)
    assert fitted == pytest.approx(eff, rel=1e-12)


def test_gemm_fit_hand_checked_and_tile_recovered():
    # One compute unit, tile 1x1: no quantisation; 100x100x100 = 2 MFLOP at 0.5 x 100 GFLOP/s = 40 us.
    peak = 100e9
    pts = [gemm_point(c, c, c, gemm_time(c, c, c, peak, 0.5, 1, 1, 1, 1e15)) for c in (100, 200, 300)]
    assert pts[0].seconds == pytest.approx(40e-6)
    effs, tile, _ = fit_gemm(pts, {"bf16": peak}, 1, 1e15)
    assert effs["bf16"] == pytest.approx(0.5, rel=1e-4) and tile == (1, 1)
    # H100-like: 132 units, tile 128x256; shapes that tile and wave quantisation tell apart.
    peak, units, bw, true_tile = 989e12, 132, 3e12, (128, 256)
    shapes = [(4096, 4096, 4096), (4096 + 128, 4096, 4096), (4096, 4096 + 64, 4096), (2000, 3000, 5000),
              (8192, 1024, 8192), (1024, 8192, 1024), (768, 2304, 1024), (1000, 1000, 1000), (5120, 6144, 2048)]
    pts = [gemm_point(m, n, k, gemm_time(m, n, k, peak, 0.8, *true_tile, units, bw)) for m, n, k in shapes]
    effs, tile, fps = fit_gemm(pts, {"bf16": peak}, units, bw)
    assert tile == true_tile and effs["bf16"] == pytest.approx(0.8, rel=1e-4)
    assert max(abs(p.rel_error) for p in fps) < 1e-3


def test_attention_fit_recovers_max_and_half_seq():
    peak, amax, half = 100e12, 0.4, 512.0
    pts = []
    for seq in (256, 512, 1024, 2048, 4096, 8192):
        b, h, d = 16384 // seq, 16, 128
        flops = 3.5 * 4 * b * seq * (seq / 2) * d * h  # causal: mean keys s/2; backward 2.5x forward
        pts.append(AttentionPoint(batch=b, heads=h, seq=seq, head_dim=d, dtype="bf16",
                                  seconds=float(flash_attention_time(flops, seq, peak, amax, half)), rank_seconds=[1]))
    # at seq = half_seq the kernel runs at half of attention_max
    assert 3.5 * 4 * 32 * 512 * 256 * 128 * 16 / pts[1].seconds == pytest.approx(peak * amax / 2)
    got_max, got_half, _ = fit_attention(pts, peak)
    assert got_max == pytest.approx(amax, rel=1e-5) and got_half == pytest.approx(half, rel=1e-4)


def cpu_system(nproc=4):
    m = synthetic_measurements(nproc)
    return cpu_template(m, "test-cpu")


def test_comm_coefficients_are_the_ring_formulas():
    system = cpu_system()
    # all-reduce of 1 MB over 4: 2(n-1) = 6 latency steps and 2(n-1)/n S = 1.5 MB over the bus
    assert comm_coefficients(comm_point("all_reduce", 4, 10**6, 1.0), system, 4) == pytest.approx((6, 1.5e6))
    assert comm_coefficients(comm_point("all_gather", 2, 10**6, 1.0), system, 4) == pytest.approx((1, 0.5e6))
    assert comm_coefficients(comm_point("p2p", 2, 10**6, 1.0), system, 4) == pytest.approx((1, 1e6))


def test_network_fit_recovers_latency_and_bus_bandwidth():
    a, bus = 20e-6, 3e9  # 20 us per ring step, 3 GB/s bus bandwidth
    for system, nproc in ((cpu_system(4), 4), (load_hardware("dgx-h100"), 8)):
        pts = []
        for n in (2, 4, 8)[: 2 if nproc == 4 else 3]:
            phases = [Phase(p.tier, p.members, bus, a) for p in group_phases(system, n, 1, nproc)]
            for size in (4096, 2**20, 2**26):
                for kind in ("all_reduce", "all_gather", "reduce_scatter"):
                    pts.append(comm_point(kind, n, size, float(collective_time(kind, size, phases))))
                pts.append(comm_point("p2p", n, size, float(p2p_time(size, bus, a))))
        fit, fps = fit_network(pts, system, nproc)
        assert fit.latency_s == pytest.approx(a, rel=1e-5) and fit.bus_bandwidth == pytest.approx(bus, rel=1e-5)
        assert max(abs(p.rel_error) for p in fps) < 1e-6


# Per-kind ring parameters unlike each other, as gloo's are: (per-step latency s, bus bandwidth bytes/s).
KIND_PARAMS = {"all_reduce": (750e-6, 0.65e9), "all_gather": (1.1e-3, 0.23e9), "reduce_scatter": (1.5e-3, 0.16e9),
               "p2p": (1.4e-3, 0.99e9)}


def per_kind_points(system, nproc, params=KIND_PARAMS, groups=(2, 4), sizes=(4096, 2**16, 2**20, 2**24)):
    """Timings of every kind made by cost.comm.collectives's formulas with that kind's own latency and bus bandwidth."""
    pts = []
    for kind, (a, bus) in params.items():
        for n in groups:
            phases = [Phase(p.tier, p.members, bus, a) for p in group_phases(system, n, 1, nproc)]
            for size in sizes:
                t = p2p_time(size, bus, a) if kind == "p2p" else collective_time(kind, size, phases)
                pts.append(comm_point(kind, n, size, float(t)))
    return pts


def test_per_kind_network_fit_recovers_each_kind():
    system = cpu_system(4)
    pts = per_kind_points(system, 4)
    # hand check: all-reduce of 1 MiB over 4 = 6 steps of 750 us + 1.5 MiB at 0.65 GB/s
    ar = next(p for p in pts if p.kind == "all_reduce" and p.group_size == 4 and p.size_bytes == 2**20)
    assert ar.seconds == pytest.approx(6 * 750e-6 + 1.5 * 2**20 / 0.65e9, rel=1e-12)
    fit, fps = fit_network(pts, system, 4)
    assert set(fit.by_kind) == set(KIND_PARAMS) and fit.fallback == {}
    for kind, (a, bus) in KIND_PARAMS.items():
        k = fit.by_kind[kind]
        assert k.latency_s == pytest.approx(a, rel=1e-6) and k.bus_bandwidth == pytest.approx(bus, rel=1e-6)
        assert k.points == 8 and k.best_bus_bandwidth < bus  # every single point also pays latency
        assert k.shared_median_abs_error > 0.05  # one pair for all kinds cannot fit them
    # the residuals are those of the per-kind predictions (what the spec predicts): exact
    assert max(abs(p.rel_error) for p in fps) < 1e-6
    # the shared pair is still fitted over all points: between the kinds' values
    assert 0.16e9 < fit.bus_bandwidth < 0.99e9 and 750e-6 < fit.latency_s < 1.5e-3


def test_kinds_without_enough_points_keep_the_shared_fit():
    system = cpu_system(4)
    pts = per_kind_points(system, 4, {k: KIND_PARAMS[k] for k in ("all_reduce", "all_gather")})
    pts += per_kind_points(system, 4, {"reduce_scatter": (1e-3, 0.5e9)}, groups=(2,), sizes=(4096, 2**20))
    pts += per_kind_points(system, 4, {"p2p": (1e-3, 0.5e9)}, groups=(2,), sizes=(2**20,)) * 3  # one size
    fit, fps = fit_network(pts, system, 4)
    assert set(fit.by_kind) == {"all_reduce", "all_gather"}
    assert "2 point(s), fewer than 3" in fit.fallback["reduce_scatter"] and "ill-conditioned" in fit.fallback["p2p"]
    for p, fp in zip(pts, fps):
        if p.kind in ("reduce_scatter", "p2p"):  # predicted with the shared pair
            c_lat, c_bw = comm_coefficients(p, system, 4)
            assert fp.predicted_s == pytest.approx(fit.latency_s * c_lat + c_bw / fit.bus_bandwidth, rel=1e-12)
    assert fit.by_kind["all_gather"].latency_s == pytest.approx(1.1e-3, rel=1e-6)


def test_overlap_fraction_hand_checked():
    # (t_c + t_m - t_both) / min(t_c, t_m): 100 ms compute, 80 ms all-reduce, 130 ms both -> 50 / 80
    assert overlap_fraction(0.1, 0.08, 0.13) == pytest.approx(0.625)
    assert overlap_fraction(0.1, 0.1, 0.175) == pytest.approx(0.25)
    assert overlap_fraction(0.1, 0.08, 0.18) == pytest.approx(0.0)  # serial
    assert overlap_fraction(0.1, 0.08, 0.1) == pytest.approx(1.0)  # the all-reduce hid entirely
    assert overlap_fraction(0.1, 0.08, 0.2) == 0.0 and overlap_fraction(0.1, 0.08, 0.09) == 1.0  # clipped
    run = overlap_run()
    assert fit_overlap(run) == pytest.approx(0.625)  # median of 0.625, 0.25 and 1 (clipped from 1.125)


def overlap_run():
    return OverlapRun(gemm=(256, 256, 256), gemm_calls=75, dtype="fp32", size_bytes=8 * 2**20, group_size=4,
                      compute_s=[0.1, 0.1, 0.1], comm_s=[0.08, 0.1, 0.08], both_s=[0.13, 0.175, 0.09])


def test_cpu_spec_writes_per_kind_fits_and_overlap():
    m = synthetic_measurements(4)
    m = m.model_copy(update=dict(comm=per_kind_points(cpu_system(4), 4), overlap=overlap_run()))
    template = cpu_template(m, "cpu-testhost-4p")
    fit = fit_all(m, template)
    system = build_system(template, fit, m, "perfmodel calibrate --device cpu --nproc 4 --output x.yaml",
                          "x.raw.json")
    tier, eff = system.tiers[0], system.efficiency
    # bandwidth_gbps is the fastest kind's bus bandwidth (above any single measurement's): its efficiency is 1
    assert tier.bandwidth_gbps == pytest.approx(0.99, rel=1e-3)
    assert set(tier.by_kind) == set(KIND_PARAMS)
    for kind, (a, bus) in KIND_PARAMS.items():
        k = tier.by_kind[kind]
        assert 0 < k.collective_efficiency <= 1 and k.latency_us == pytest.approx(a * 1e6, rel=1e-3)
        assert tier.ring(kind)[0] == pytest.approx(bus, rel=1e-3)
        src = tier.sources[f"by_kind.{kind}"]
        assert f"reproduces the 8 {kind} timings alone" in src and "median error on these points" in src
        assert "measured by perfmodel calibrate on 2025-01-02" in src and "raw: x.raw.json" in src
        assert "command: perfmodel calibrate --device cpu --nproc 4" in src and "torch 2.13.0" in src
    assert tier.by_kind["p2p"].collective_efficiency == 1.0
    # what the spec predicts for each measured collective is the fit's prediction (up to 4-digit rounding)
    for p, fp in zip(m.comm, [q for q in fit.points if q.quantity == "comm"]):
        phases = group_phases(system, p.group_size, 1, 4)
        bw, lat = tier.ring("p2p")
        t = p2p_time(p.size_bytes, bw, lat) if p.kind == "p2p" else collective_time(p.kind, p.size_bytes, phases)
        assert float(t) == pytest.approx(fp.predicted_s, rel=2e-3) and fp.rel_error == pytest.approx(0, abs=1e-6)
    assert {r.kind: r.max_abs_error < 1e-6 for r in fit.residuals if r.quantity == "comm"} == dict.fromkeys(
        KIND_PARAMS, True)
    assert eff.comm_overlap == pytest.approx(0.625)
    src = eff.sources["comm_overlap"]
    assert "(t_c + t_m - t_both) / min(t_c, t_m)" in src and "75 fp32 GEMMs 256x256x256" in src
    assert "all-reduce of 8388608 B over the 4 ranks" in src and "median over 3 repeats" in src
    assert "raw: x.raw.json" in src
    # the estimate takes both up: the dp all-reduce at all_reduce's own ring, exposed as comm_overlap says
    plan = pm.Plan(gpus=4, dp=4, micro_batch=1, global_batch=4, seq_len=128)
    dp = pm.estimate(pm.load_model("gpt2-124m"), system, plan).comms[0]
    assert dp.collective == "all_reduce" and dp.group_size == 4
    assert dp.total_s == pytest.approx(6 * 750e-6 + 1.5 * dp.bytes / 0.65e9, rel=2e-3)
    hidden = system.model_copy(update=dict(efficiency=eff.model_copy(update=dict(comm_overlap=1.0))))
    dp1 = pm.estimate(pm.load_model("gpt2-124m"), hidden, plan).comms[0]
    assert dp.exposed_s == pytest.approx(0.375 * dp.total_s + 0.625 * dp1.exposed_s, rel=1e-9)


def test_raw_file_without_the_new_fields_loads_and_fits(tmp_path):
    m = synthetic_measurements(4).model_copy(update=dict(comm=per_kind_points(cpu_system(4), 4)))
    template = cpu_template(m, "cpu-testhost-4p")
    raw = RawFile(created_at="2025-01-02T03:04:05+00:00", command="perfmodel calibrate --device cpu --nproc 4 "
                  "--output old.yaml", spec_file="old.yaml", system="cpu-testhost-4p", quick=True, wall_s=10.0,
                  measurements=m, fit=fit_all(m, template))
    data = json.loads(raw.model_dump_json())
    # as written before per-kind fits and the overlap benchmark
    del data["measurements"]["overlap"], data["fit"]["comm_overlap"]
    del data["fit"]["network"]["by_kind"], data["fit"]["network"]["fallback"]
    path = tmp_path / "old.raw.json"
    path.write_text(json.dumps(data))
    old = load_raw(path)
    assert old.measurements.overlap is None and old.fit.comm_overlap is None
    assert old.fit.network.by_kind == {} and old.fit.network.fallback == {}
    assert old.fit.network.latency_s == raw.fit.network.latency_s
    refit = fit_all(old.measurements, template)
    assert refit.comm_overlap is None
    assert refit.network.by_kind["reduce_scatter"].bus_bandwidth == pytest.approx(0.16e9, rel=1e-6)
    system = build_system(template, refit, old.measurements, old.command, path.name)
    assert system.efficiency.comm_overlap == 1.0 and "not measured" in system.efficiency.sources["comm_overlap"]
    assert system.tiers[0].by_kind["all_gather"].latency_us == pytest.approx(1100, rel=1e-3)


def test_bench_adam_is_the_executors_fused_adamw():
    from perfmodel.calibrate.machine.bench import Bench

    step = Bench("cpu", quick=True)._adam([(8, 4), (4,)])
    opt = step.__self__
    assert type(opt) is torch.optim.AdamW and opt.defaults["fused"] is True and opt.defaults["weight_decay"] == 0
    before = [p.detach().clone() for p in opt.param_groups[0]["params"]]
    step()
    assert all(not torch.equal(b, p) for b, p in zip(before, opt.param_groups[0]["params"]))


def synthetic_measurements(nproc=2, device="cpu"):
    """Timings made with known parameters: GEMMs at 80 GFLOP/s (CPU: the best rate is the peak, so matmul_max
    comes back 1), attention 0.3 of it with half_seq 128, bandwidth 10 GB/s at 0.25, 50 us per ring step and
    2 GB/s bus."""
    peak, bw = 80e9, 10e9
    gemm = [gemm_point(m, n, k, gemm_time(m, n, k, peak, 1.0, 1, 1, 1, bw * 0.25))
            for m, n, k in [(512, 512, 512), (256, 768, 256), (1024, 256, 1024)]]
    attn = []
    for seq in (64, 128, 256, 512):
        flops = 3.5 * 4 * 4 * seq * (seq / 2) * 64 * 4
        attn.append(AttentionPoint(batch=4, heads=4, seq=seq, head_dim=64, dtype="fp32", rank_seconds=[1],
                                   seconds=float(flash_attention_time(flops, seq, peak, 0.3, 128))))
    mem = [mem_point("copy", (2**20,), 8 * 2**20 / bw, moved=8 * 2**20)]
    mem += [mem_point(k, s, COUNTED_BYTES[k] * math.prod(s) / (bw * 0.25))
            for k, s in [("norm", (512, 256)), ("gelu", (512, 1024)), ("add", (512 * 256,))]]
    # a layer made of these kernels: its GEMMs are compute bound, so memory_bandwidth comes back exactly
    layer = LayerMix(model="synthetic", tokens=512, tp=1, gemms=[(p.m, p.n, p.k) for p in gemm],
                     elementwise=[("norm", [512, 256], 2), ("gelu", [512, 1024], 1), ("add", [512 * 256], 4)])
    comm = []
    if nproc > 1:
        for kind, c_lat, c_bw in [("all_reduce", 2, 1.0), ("all_gather", 1, 0.5), ("p2p", 1, 1.0)]:
            for size in (4096, 2**20, 2**24):
                comm.append(comm_point(kind, 2, size, c_lat * 50e-6 + c_bw * size / 2e9))
    return Measurements(env=env(device, nproc), gemm=gemm, attention=attn, memory=mem, comm=comm, layers=[layer],
                        bench_s=1.0)


def test_cpu_spec_from_synthetic_measurements():
    m = synthetic_measurements(2)
    template = cpu_template(m, "cpu-testhost-2p")
    fit = fit_all(m, template)
    system = build_system(template, fit, m, "perfmodel calibrate --device cpu --nproc 2 --output x.yaml",
                          "x.raw.json")
    acc, eff, tier = system.accelerator, system.efficiency, system.tiers[0]
    assert acc.torch_device == "cpu" and acc.peak_tflops["bf16"] == pytest.approx(0.08)
    assert acc.hbm_bandwidth_tbps == pytest.approx(0.01) and acc.hbm_capacity_gib == pytest.approx(8)
    assert eff.matmul_max["bf16"] == pytest.approx(1.0, abs=1e-3) and eff.memory_bandwidth == pytest.approx(0.25)
    assert eff.attention_max == pytest.approx(0.3, abs=1e-3) and eff.attention_half_seq == pytest.approx(128, abs=0.5)
    assert eff.sustained_fraction == 1.0 and fit.layer_errors[0].rel_error == pytest.approx(0, abs=1e-4)
    assert tier.latency_us == pytest.approx(50, rel=1e-3)
    assert tier.bandwidth_gbps * tier.collective_efficiency == pytest.approx(2, rel=1e-3)
    assert system.memory_overhead_gib == pytest.approx(0.25) and system.max_devices == 2
    for src in (eff.sources["matmul_max"], tier.sources["latency_us"], acc.sources["peak_tflops"]):
        assert "measured by perfmodel calibrate on 2025-01-02" in src and "raw: x.raw.json" in src
        assert "command: perfmodel calibrate --device cpu --nproc 2" in src


def test_cuda_spec_keeps_datasheet_and_unmeasured_precisions():
    base = load_hardware("dgx-h100")
    m = synthetic_measurements(2, "cuda")
    m = m.model_copy(update=dict(env=env("cuda", 2, device_name="NVIDIA H100 80GB HBM3", dtype="bf16",
                                         memory_total_bytes=79.1 * 2**30, baseline_bytes=1.5 * 2**30)))
    fit = fit_all(m, base, prefer_tile=tuple(base.efficiency.matmul_tile))
    system = build_system(base, fit, m, "perfmodel calibrate --device cuda --nproc 2 --output h.yaml", "h.raw.json")
    assert system.name == "dgx-h100"
    # the GEMMs and the NVLink collectives are this machine's fits, not the catalogue's measured tables of another
    # H100 (which would override them): the tables and per-group NCCL fits are dropped (no table of its own was
    # measured here: test_calibrate_tables), the rest of the part kept
    assert base.accelerator.kernel_tables and base.tiers[0].by_group
    assert system.accelerator.kernel_tables == {} and "kernel_tables" not in system.accelerator.sources
    rest = lambda a: {k: v for k, v in a.model_dump().items()  # noqa: E731
                      if k not in ("kernel_tables", "sources", "attention_table_kernel", "power")}
    assert rest(system.accelerator) == rest(base.accelerator)
    # its rates ran at this machine's clocks: the template's power model is not applied on top (calibrated_spec)
    assert system.accelerator.power is None and base.accelerator.power is not None
    assert system.tiers[0].by_group == {} and "by_group" not in system.tiers[0].sources
    assert system.tiers[1] == base.tiers[1]
    assert system.efficiency.matmul_max["fp8"] == base.efficiency.matmul_max["fp8"]
    assert "catalogue value kept" in system.efficiency.sources["matmul_max"]
    assert system.tiers[0].bandwidth_gbps == base.tiers[0].bandwidth_gbps
    assert system.memory_overhead_gib == pytest.approx(0.9 + 1.5, abs=1e-3)
    assert default_base("NVIDIA H100 80GB HBM3", 79.1 * 2**30).name == "dgx-h100"
    assert default_base("NVIDIA H200", 140 * 2**30).name == "dgx-h200"
    assert default_base("NVIDIA A100-SXM4-40GB", 39.4 * 2**30).name == "dgx-a100-40gb"
    assert default_base("NVIDIA B300 SXM6 AC", 268 * 2**30).name == "dgx-b300"
    assert default_base("NVIDIA GB300", 277 * 2**30).name == "gb300-nvl72"  # the longer family name wins


# ---------------------------------------------------------------------------------------------------------
# Real quick calibrations on this machine's CPU
# ---------------------------------------------------------------------------------------------------------

def check_spec(path, nproc, flags=""):
    system = load_hardware(str(path))
    acc, eff = system.accelerator, system.efficiency
    assert acc.torch_device == "cpu" and acc.compute_units == 1 and system.max_devices == nproc
    assert 1e-3 < acc.peak_tflops["bf16"] < 10  # one thread: 1 GFLOP/s .. 10 TFLOP/s
    assert 0.05 < eff.matmul_max["bf16"] <= 1 and 0 < eff.attention_max <= 1 and 0 < eff.memory_bandwidth <= 1
    assert 1e-4 < acc.hbm_bandwidth_tbps < 10 and 0 < system.memory_overhead_gib < 8
    # as run from the spec's own folder: no machine path travels with it
    command = f"perfmodel calibrate --device cpu --nproc {nproc}{flags} --quick --output {Path(path).name}"
    assert f"(command: {command}); raw: {raw_path(path).name}" in eff.sources["matmul_max"]
    raw = load_raw(raw_path(path))
    assert raw.command == command and raw.measurements.env.nproc == nproc
    assert raw.measurements.env.threads_per_rank == 1
    assert raw.measurements.env.torch_version == torch.__version__
    assert len(raw.measurements.gemm) >= 10 and len(raw.measurements.attention) >= 3
    assert all(len(p.rank_seconds) == nproc for p in raw.measurements.gemm)
    # the calibrated spec predicts a small plan
    est = pm.estimate(pm.load_model("gpt2-124m"), system,
                      pm.Plan(gpus=nproc, tp=nproc, micro_batch=1, global_batch=1, seq_len=128))
    assert 0 < est.step_time_s < 1e4
    return system, raw


def test_quick_calibration_in_process(tmp_path):
    threads = torch.get_num_threads()
    out = tmp_path / "one.yaml"
    system = calibrate(device="cpu", nproc=1, output=out, quick=True)
    assert torch.get_num_threads() == threads  # restored after the one-thread benchmarks
    loaded, raw = check_spec(out, 1)
    assert loaded == system and raw.measurements.comm == [] and raw.fit.network is None
    assert "not measured" in system.tiers[0].sources["latency_us"]
    # its own GEMM table beside it, named relative to it, read as the catalogue's and pricing its GEMMs
    assert yaml.safe_load(out.read_text())["accelerator"]["kernel_tables"] == {"gemm": "one.gemm.csv.gz",
                                                                              "attention": "one.attention.csv.gz"}
    assert not (tmp_path / "one.nccl.csv.gz").exists()  # one rank: no collectives
    from perfmodel.spec.hardware.kernel_tables import gemm_grid

    grid = gemm_grid(loaded.accelerator.kernel_tables["gemm"], "bf16")
    assert grid.label == "table one.gemm bf16" and grid.measured.all() and list(grid.m) == [1, 4, 16, 64, 256, 1024]
    table = {(p.m, p.n, p.k): p.seconds for p in raw.measurements.gemm if p.source == "table"}
    assert len(table) == 6 * 16 and grid.seconds[3, 2, 3] == pytest.approx(table[(64, 256, 1024)], rel=1e-5)
    est = pm.estimate(pm.load_model("gpt2-124m"), loaded, pm.Plan(gpus=1, micro_batch=1, global_batch=1, seq_len=128))
    assert {op.priced_by for op in est.ops if op.kind == "gemm"} <= {"table one.gemm bf16",
                                                                     "table one.gemm bf16, outside its grid"}
    # and its attention from its own forward table (a suite length: on the grid), the backward at its measured rate
    from perfmodel.calibrate.machine.measured_tables import measured_backward_rate

    (att,) = [op for op in est.ops if op.kind == "attention"]
    fwd = {(p.batch, p.seq): p.seconds for p in raw.measurements.attention if p.passes == "forward"}
    b = 1024 // 128  # the quick suite's tokens per call at a 128-token prompt
    rate = 4 * b * 4 * 64 * 128 * 129 / 2 / (fwd[(b, 128)] - fwd[(b, 1)])  # by the reader's formula, 4 heads of 64
    assert att.priced_by == "table one.attention bf16" and loaded.accelerator.attention_table_kernel == "sdpa"
    sf = loaded.efficiency.sustained_fraction
    assert att.fwd_s == pytest.approx(att.fwd_flops / (rate * sf), rel=1e-4)
    assert loaded.accelerator.attention_backward_rate == pytest.approx(measured_backward_rate(raw.measurements.attention),
                                                                      rel=1e-3)
    assert att.bwd_s == pytest.approx(2.5 * att.fwd_s / loaded.accelerator.attention_backward_rate, rel=1e-9)


def test_quick_calibration_two_ranks_under_torchrun(quick_cpu_calibration):
    # the session's one quick two-rank calibration (conftest.py; notebook 04 validates against the same files)
    out, text = quick_cpu_calibration
    system, raw = check_spec(out, 2, " --name cpu-ci-2p")
    assert system.name == "cpu-ci-2p" and "cpu-ci-2p" in text and "matmul_max.bf16" in text
    assert {p.kind for p in raw.measurements.comm} == {"all_reduce", "all_gather", "reduce_scatter", "p2p"}
    assert {r.kind for r in raw.fit.residuals} >= {"all_reduce", "all_gather", "reduce_scatter", "p2p", "bf16"}
    tier = system.tiers[0]
    assert 0.1 < tier.latency_us < 1e5 and 1e-3 < tier.bandwidth_gbps < 1e3
    assert 0 < tier.collective_efficiency <= 1
    net = raw.fit.network
    assert set(net.by_kind) | set(net.fallback) == {"all_reduce", "all_gather", "reduce_scatter", "p2p"}
    # per group size where that fits cleanly (a noisy host may leave every kind to by_kind), and the timings
    # in the NCCL tables' format
    assert set(net.by_group) | set(net.group_fallback) == set(net.by_kind) | set(net.fallback)
    assert {k: set(g) for k, g in tier.by_group.items()} == {k: {"2"} for k in net.by_group}
    nccl = gzip.decompress((out.parent / "two.nccl.csv.gz").read_bytes()).decode().splitlines()
    assert nccl[0] == "op,num_gpus,message_bytes,latency_ms" and len(nccl) == 1 + len(raw.measurements.comm)
    assert set(tier.by_kind) == set(net.by_kind)
    for kind, k in tier.by_kind.items():
        assert 0 < k.collective_efficiency <= 1 and f"by_kind.{kind}" in tier.sources
        assert tier.ring(kind)[0] == pytest.approx(net.by_kind[kind].bus_bandwidth, rel=2e-3)
    o = raw.measurements.overlap
    assert o.group_size == 2 and len(o.compute_s) == len(o.comm_s) == len(o.both_s) == 5
    # the executor's host costs: one probe per layout two processes allow, each priced and measured
    from perfmodel.calibrate.host.costs import probe_plans, sustained_fraction

    hc = system.host_costs
    assert hc.stack == "plain-torch" and [p.name for p in hc.probes] == list(probe_plans(2))
    assert hc.kernel_s >= 0 and hc.collective_s >= 0 and "calibrate.host.costs" in hc.sources["kernel_s"]
    assert all(p.measured_s > 0 and p.predicted_s > 0 and p.kernels > 0 for p in hc.probes)
    # and the compute a whole step sustains, measured on the probe model no sweep runs
    assert 0.05 <= system.efficiency.sustained_fraction <= 1
    assert "sustain-probe" in system.efficiency.sources["sustained_fraction"]
    sp = hc.sustain  # the same numbers as data: the fraction follows from them
    assert sp.model == "sustain-probe" and sp.tokens_per_rank == 192
    assert system.efficiency.sustained_fraction == pytest.approx(sustained_fraction(sp.measured_s, sp.predicted_s,
                                                                                    sp.compute_s), abs=1e-4)
    # the serving loop's own: decode steps of the serving probe in the layouts two processes allow (data
    # parallel at 1, 4, 16 sequences and a long prompt; tp 2), and a served prefill's sustained fraction
    from perfmodel.calibrate.machine.serving_costs import probe_plans as serving_probes

    sv = hc.serving
    assert [p.name for p in sv.probes] == [f"{n} decode" for n in serving_probes(2)] and "tp4" not in serving_probes(2)
    layers = [3 if p.name.startswith("wide") else 4 for p in sv.probes]  # the wide probes serve sustain-probe
    assert [p.kernels for p in sv.probes] == [n * 10 + 4 for n in layers]
    assert all(p.measured_s > 0 and p.pairs > 0 for p in sv.probes)
    assert [p.calls for p in sv.probes] == [0, 0, 0, 0, 0, 0, 2 * 4 + 2]
    assert [p.pairs for p in sv.probes][4:6] == [1 * SUSTAIN_MODEL.n_heads * 3, 16 * SUSTAIN_MODEL.n_heads * 3]
    assert min(sv.kernel_s, sv.collective_s, sv.attention_s, sv.attention_key_s) >= 0
    assert sv.sustain.model == "sustain-probe" and sv.sustain.tokens_per_rank == 2 * 160
    assert sv.sustained_fraction == pytest.approx(sustained_fraction(sv.sustain.measured_s, sv.sustain.predicted_s,
                                                                     sv.sustain.compute_s), abs=1e-4)
    assert 0 <= raw.fit.comm_overlap <= 1 and system.efficiency.comm_overlap == pytest.approx(raw.fit.comm_overlap,
                                                                                             abs=1e-3)
    assert "min(t_c, t_m)" in system.efficiency.sources["comm_overlap"]
    assert "tiers" in yaml.safe_load(out.read_text())
    assert json.loads(raw_path(out).read_text())["system"] == "cpu-ci-2p"


# ---------------------------------------------------------------------------------------------------------
# Bad input: one line, nothing written
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, needle", [
    (dict(device="tpu"), "device = 'tpu'; valid: cpu, cuda"),
    (dict(nproc=0), "nproc = 0; valid: an integer >= 1"),
    (dict(nproc=True), "nproc = True"),
    (dict(nproc=2.0), "nproc = 2.0"),
    (dict(output="spec.txt"), "valid: a file name ending in .yaml or .yml"),
    (dict(output="missing/dir/spec.yaml"), "does not exist"),
    (dict(base="dgx-h100"), "applies to --device cuda only"),
    (dict(name="bad name!"), "name = 'bad name!'"),
    (dict(device="cuda"), "device = 'cuda': torch sees no CUDA GPU"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, monkeypatch, kwargs, needle):
    if kwargs.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.chdir(tmp_path)
    args = dict(device="cpu", nproc=1, output="spec.yaml", quick=True) | kwargs
    with pytest.raises(InputError) as e:
        run_calibration(**args)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg
    assert list(tmp_path.iterdir()) == []


def test_output_must_be_given_and_writable(tmp_path):
    with pytest.raises(InputError, match="output is required"):
        calibrate(device="cpu")
    (tmp_path / "d.yaml").mkdir()
    with pytest.raises(InputError, match="is a directory"):
        calibrate(device="cpu", output=tmp_path / "d.yaml")
