"""perfmodel calibrate writes its measurements as the catalogue's tables: the GEMM table beside the spec (read back by
spec.hardware.kernel_tables as the catalogue's, named relative to the spec and priced from), the collective timings in the
NCCL tables' format, and per-group-size collective fits (by_group) where they fit cleanly.

Synthetic measurements only (the real quick calibrations in test_calibrate.py check the same on this machine).
"""

import gzip
import json

import numpy as np
import pytest
import yaml

import perfmodel as pm
from perfmodel.calibrate.machine.calibrated_spec import build_system, cpu_template
from perfmodel.calibrate.machine.fit import fit_all, roofline_gemms
from perfmodel.calibrate.machine.calibration import spec_yaml
from perfmodel.calibrate.machine.measured_tables import (
    GROUP_MAX_ERROR,
    comm_table_text,
    fit_groups,
    gemm_table_text,
    gzipped,
    table_paths,
)
from perfmodel.calibrate.machine.raw import GemmPoint
from perfmodel.calibrate.machine.suite import CUDA_MODELS, cuda_table_axes, layer_gemms, suite, table_shapes
from perfmodel.cost.comm.collectives import Phase, collective_time, group_phases, p2p_time
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.hardware.kernel_tables import gemm_grid, table_label
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.file import load_plan_file, write_plan_file

from test_calibrate import comm_point, synthetic_measurements

AXES = (16, 64, 256)


def table_point(m, n, k, precision="bf16", source="table"):
    """A GEMM timed at 1 ms per MFLOP, plus 0.001 ms: 2*16*16*16 FLOPs -> 0.008192 + 0.001 = 0.009192 ms."""
    ms = 2 * m * n * k * 1e-6 + 0.001
    return GemmPoint(m=m, n=n, k=k, dtype="fp32", precision=precision, source=source, seconds=ms * 1e-3,
                     rank_seconds=[ms * 1e-3])


def table_points(precisions=("bf16",)):
    return [table_point(m, n, k, prec) for prec in precisions for m in AXES for n in AXES for k in AXES]


def test_gemm_table_text_round_trips_through_gemm_grid(tmp_path):
    pts = table_points(("bf16", "fp16")) + [table_point(100, 300, 500, source="grid")]  # the irregular shape: left out
    text = gemm_table_text(pts)
    lines = text.splitlines()
    assert lines[0] == "dtype,m,n,k,latency_ms" and len(lines) == 1 + 2 * 27
    assert lines[1] == "bf16,16,16,16,0.009192" and lines[2] == "bf16,16,16,64,0.033768"  # by hand: 0.032768 + 0.001
    assert lines[28] == "fp16,16,16,16,0.009192" and lines[-1] == "fp16,256,256,256,33.5554"  # 6 significant digits
    path = tmp_path / "spec.gemm.csv.gz"
    path.write_bytes(gzipped(text))
    assert gzip.decompress(path.read_bytes()).decode() == text and gzipped(text) == path.read_bytes()  # no timestamp
    grid = gemm_grid(str(path), "bf16")
    assert list(grid.m) == list(grid.n) == list(grid.k) == list(AXES) and grid.measured.all()
    assert grid.seconds[0, 0, 0] == pytest.approx(0.009192e-3, rel=1e-12)
    assert grid.seconds[1, 2, 0] == pytest.approx((2 * 64 * 256 * 16 * 1e-6 + 0.001) * 1e-3, rel=1e-5)
    assert grid.label == "table spec.gemm bf16" and table_label("h100_sxm/gemm.csv.gz") == "h100_sxm/gemm"
    # a precision whose grid is not whole is not written; none whole: no table
    assert gemm_table_text(table_points()[:-1] + table_points(("fp16",))).startswith("dtype,m,n,k,latency_ms\nfp16,")
    assert gemm_table_text([table_point(100, 300, 500, source="grid")]) is None


def test_comm_table_text_is_the_nccl_tables_format():
    pts = [comm_point("p2p", 2, 4096, 2e-4), comm_point("all_reduce", 4, 2**20, 0.0125),
           comm_point("all_reduce", 2, 2**20, 0.01)]
    assert comm_table_text(pts) == ("op,num_gpus,message_bytes,latency_ms\nall_reduce,2,1048576,10\n"
                                    "all_reduce,4,1048576,12.5\nsendrecv,2,4096,0.2\n")
    assert comm_table_text([]) is None


def test_the_suites_table_is_a_whole_grid_spanning_the_models():
    s = suite("cpu", quick=True)
    assert len(table_shapes(s)) == 6 * 4**2 and s.table_axes[0] == (1, 4, 16, 64, 256, 1024)
    m, n, k = cuda_table_axes(quick=False)
    shapes = [g[:3] for name in CUDA_MODELS for g in layer_gemms(load_model(name), 8192, 2, lm_head=False)]
    assert m[0] <= min(x[0] for x in shapes) and max(x[0] for x in shapes) <= m[-1]
    assert n[0] <= min(x[1] for x in shapes) and max(x[1] for x in shapes) <= n[-1] == k[-1] == 32768


def calibrated(tmp_path, name="spec"):
    """A CPU spec built from synthetic measurements with a GEMM table, written into tmp_path as calibrate does."""
    m = synthetic_measurements(2)
    m = m.model_copy(update={"gemm": m.gemm + table_points()})
    template = cpu_template(m, "cpu-testhost-2p")
    fit = fit_groups(fit_all(m, template), m, template)
    paths = table_paths(tmp_path / f"{name}.yaml")
    paths["gemm"].write_bytes(gzipped(gemm_table_text(m.gemm)))
    system = build_system(template, fit, m, "perfmodel calibrate --device cpu --nproc 2 --output spec.yaml",
                          f"{name}.raw.json", gemm_table=paths["gemm"])
    out = tmp_path / f"{name}.yaml"
    out.write_text(spec_yaml(system, "perfmodel calibrate ...", tmp_path))
    return out, system, m


def test_a_calibrated_spec_names_its_table_relative_to_itself_and_loads_it(tmp_path, monkeypatch):
    out, system, m = calibrated(tmp_path)
    text = out.read_text()
    assert yaml.safe_load(text)["accelerator"]["kernel_tables"] == {"gemm": "spec.gemm.csv.gz"}
    assert str(tmp_path) not in text  # no machine path in the written spec
    assert system.accelerator.kernel_tables["gemm"] == str((tmp_path / "spec.gemm.csv.gz").resolve())
    src = system.accelerator.sources["kernel_tables"]
    assert "measured on this machine by perfmodel calibrate" in src and "m [16, 64, 256]" in src
    # by a path relative to another working directory: the table is found beside the spec, not in the catalogue
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    loaded = load_hardware("../spec.yaml")
    assert loaded.accelerator.kernel_tables == system.accelerator.kernel_tables
    # the matmul fit leaves out the table's shapes below the smallest other GEMM's FLOPs (here all of them)
    assert roofline_gemms(m.gemm) == [p for p in m.gemm if p.source != "table"]
    assert "reproduces 3 GEMM timings" in loaded.efficiency.sources["matmul_max"]


def test_a_calibrated_spec_prices_its_gemms_from_its_own_table(tmp_path, capsys):
    from perfmodel.cli.main import main
    from perfmodel.cost.compute.kernels import Device, linear_op

    out, _, _ = calibrated(tmp_path)
    system = load_hardware(str(out))
    plan = pm.Plan(gpus=1, micro_batch=1, global_batch=1, seq_len=64)
    dev = Device(pm.load_model("gpt2-124m"), system, plan)
    (op,) = linear_op(dev, "x", 64.0, 256.0, 16.0)  # a grid point, and so are its backward shapes
    sf = system.efficiency.sustained_fraction
    assert op.priced_by == "table spec.gemm bf16" and not op.outside
    assert op.fwd_s == pytest.approx((2 * 64 * 256 * 16 * 1e-6 + 0.001) * 1e-3 / sf, rel=1e-5)
    assert main(["hardware", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "kernel tables: gemm spec.gemm.csv.gz (this machine's own, measured by perfmodel calibrate, not the " \
           "catalogue's" in shown


def test_a_cuda_spec_prices_the_precisions_it_measured_from_its_table(tmp_path):
    from perfmodel.cost.compute.kernels import Device

    from test_calibrate import env

    base = load_hardware("dgx-h100")
    m = synthetic_measurements(2, "cuda")
    m = m.model_copy(update=dict(gemm=m.gemm + table_points(("bf16", "fp16")),
                                 env=env("cuda", 2, device_name="NVIDIA H100 80GB HBM3", dtype="bf16",
                                         memory_total_bytes=79.1 * 2**30, baseline_bytes=1.5 * 2**30)))
    path = table_paths(tmp_path / "h.yaml")["gemm"]
    path.write_bytes(gzipped(gemm_table_text(m.gemm)))
    fit = fit_all(m, base, prefer_tile=tuple(base.efficiency.matmul_tile))
    system = build_system(base, fit, m, "perfmodel calibrate --device cuda --output h.yaml", "h.raw.json",
                          gemm_table=path)
    # the template H100's tables (timed on another H100) give way to this machine's own
    assert system.accelerator.kernel_tables == {"gemm": str(path.resolve())}
    assert "bf16: 27, fp16: 27 shapes" in system.accelerator.sources["kernel_tables"]
    priced = {}
    for prec in ("bf16", "fp16", "fp8"):
        plan = pm.Plan(gpus=8, tp=8, global_batch=8, micro_batch=1, seq_len=256, precision=prec)
        priced[prec] = Device(pm.load_model("llama-3-8b"), system, plan).gemm_priced(256.0, 256.0, 64.0)[1]
    assert priced == {"bf16": "table h.gemm bf16", "fp16": "table h.gemm fp16", "fp8": "datasheet"}


def test_plan_files_and_measurements_name_the_table_relative_to_themselves(tmp_path):
    from perfmodel.search.plan_writer import plan_file

    out, _, _ = calibrated(tmp_path)
    system = load_hardware(str(out))
    pf = plan_file(pm.load_model("gpt2-124m"), system, pm.Plan(gpus=1, micro_batch=1, global_batch=1, seq_len=64))
    (tmp_path / "plans").mkdir()
    path = write_plan_file(pf, tmp_path / "plans" / "p.json")
    data = json.loads(path.read_text())
    assert data["hardware"]["accelerator"]["kernel_tables"] == {"gemm": "../spec.gemm.csv.gz"}
    assert str(tmp_path) not in path.read_text()
    assert load_plan_file(path).hardware.accelerator.kernel_tables == system.accelerator.kernel_tables


def test_a_missing_or_malformed_own_table_is_refused_in_one_line(tmp_path):
    out, _, _ = calibrated(tmp_path)
    doc = yaml.safe_load(out.read_text())
    doc["accelerator"]["kernel_tables"] = {"gemm": "missing.gemm.csv.gz"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match=r"gemm = 'missing.gemm.csv.gz': no such file; valid: a table under "
                                         r"hardware_specs/kernels/ \(e.g. h100_sxm/gemm.csv.gz\), beside the spec "
                                         r"file or at an absolute path") as e:
        load_hardware(str(bad))
    assert "\n" not in str(e.value)
    (tmp_path / "spec.gemm.csv.gz").write_bytes(gzipped("dtype,m,n,latency_ms\nbf16,16,16,0.01\n"))
    system = load_hardware(str(out))
    with pytest.raises(InputError, match="header 'dtype,m,n,latency_ms'; valid: dtype,m,n,k,latency_ms") as e:
        pm.estimate(pm.load_model("gpt2-124m"), system, pm.Plan(gpus=1, micro_batch=1, global_batch=1, seq_len=64))
    assert "\n" not in str(e.value)


# Per-group ring parameters (per-step latency s, bus bandwidth bytes/s): all_reduce differs between groups of 2 and 4
GROUPS = {("all_reduce", 2): (300e-6, 1.2e9), ("all_reduce", 4): (900e-6, 0.6e9),
          ("all_gather", 2): (500e-6, 0.4e9), ("all_gather", 4): (500e-6, 0.4e9)}


def group_points(system, nproc=4, noisy=()):
    """Timings of each (kind, group) made with its own parameters; `noisy` kinds every other point +-30%."""
    pts = []
    for (kind, g), (a, bus) in GROUPS.items():
        phases = [Phase(p.tier, p.members, bus, a) for p in group_phases(system, g, 1, nproc)]
        for i, size in enumerate((4096, 2**16, 2**20, 2**24)):
            t = float(collective_time(kind, size, phases)) * ((1.3 if i % 2 else 0.7) if kind in noisy else 1)
            pts.append(comm_point(kind, g, size, t))
    return pts


def test_per_group_fits_recover_each_group_and_go_to_by_group():
    m = synthetic_measurements(4)
    template = cpu_template(m, "cpu-testhost-4p")
    m = m.model_copy(update={"comm": group_points(template)})
    fit = fit_groups(fit_all(m, template), m, template)
    net = fit.network
    assert set(net.by_group) == {"all_reduce", "all_gather"} and net.group_fallback == {}
    for (kind, g), (a, bus) in GROUPS.items():
        k = net.by_group[kind][str(g)]
        assert k.latency_s == pytest.approx(a, rel=1e-6) and k.bus_bandwidth == pytest.approx(bus, rel=1e-6)
    assert net.by_group["all_reduce"]["2"].shared_median_abs_error > 0.05  # what one fit over both groups left
    assert max(abs(p.rel_error) for p in fit.points if p.quantity == "comm") < 1e-6  # as the spec predicts them
    system = build_system(template, fit, m, "perfmodel calibrate --device cpu --nproc 4 --output x.yaml", "x.raw.json")
    tier = system.tiers[0]
    assert tier.fit("all_reduce", 4)[1] == "measured" and tier.fit("all_reduce")[1] == "calibrated"
    assert tier.ring("all_reduce", 4)[0] == pytest.approx(0.6e9, rel=1e-3)
    assert tier.ring("all_reduce", 2)[1] == pytest.approx(300e-6, rel=1e-3)
    assert "all_reduce groups of [2, 4]" in tier.sources["by_group"] and "x.nccl.csv.gz" in tier.sources["by_group"]


def test_a_kind_that_fits_no_group_cleanly_keeps_by_kind():
    m = synthetic_measurements(4)
    template = cpu_template(m, "cpu-testhost-4p")
    m = m.model_copy(update={"comm": group_points(template, noisy=("all_gather",))})
    net = fit_groups(fit_all(m, template), m, template).network
    assert set(net.by_group) == {"all_reduce"}
    assert f"error (> {GROUP_MAX_ERROR:.0%})" in net.group_fallback["all_gather"]
    fit = fit_groups(fit_all(m, template), m, template)
    system = build_system(template, fit, m, "perfmodel calibrate --device cpu --nproc 4 --output x.yaml", "x.raw.json")
    assert system.tiers[0].fit("all_gather", 4)[1] == "calibrated"
    assert "all_gather not per group size" in system.tiers[0].sources["by_group"]


def test_nccl_group_fits_take_only_messages_of_a_mib_or_more():
    m = synthetic_measurements(4)
    template = cpu_template(m, "cpu-testhost-4p")
    m = m.model_copy(update={"comm": group_points(template), "env": m.env.model_copy(update={"backend": "nccl"})})
    net = fit_groups(fit_all(m, template), m, template).network
    # two sizes of >= 1 MiB per kind and group: fewer than the 3 points a fit apart needs
    assert net.by_group == {} and "2 point(s), fewer than 3" in net.group_fallback["all_reduce"]
    assert np.isfinite(net.latency_s)


# -- attention: the forward table and the backward's measured rate -------------------------------------------------

RATE, FIXED, BWD = 2e9, 2e-5, 0.8  # synthetic SDPA: forward FLOP/s, the one-token call's seconds, bwd rate / fwd rate


def attention_points(seqs=(64, 128, 256), tokens=1024, heads=4, head_dim=64):
    """Calls as bench.Bench.attention lists them, timed as FIXED + FLOPs / RATE forward (the table reader's FLOPs,
    4 b h d s (s+1) / 2; the one-token call: FIXED alone) and the backward's 2.5x those FLOPs at BWD x RATE."""
    from perfmodel.calibrate.machine.raw import AttentionPoint

    pts = []
    for seq in (*seqs, *(1 for _ in seqs)):
        b = tokens // (seq if seq > 1 else seqs[len([p for p in pts if p.seq == 1])])
        fwd = FIXED + (4 * b * heads * head_dim * seq * (seq + 1) / 2 / RATE if seq > 1 else 0.0)
        both = fwd + 2.5 * (fwd - FIXED) / BWD
        for passes, t in (("forward", fwd), ("forward_backward", both))[:2 if seq > 1 else 1]:
            pts.append(AttentionPoint(batch=b, heads=heads, seq=seq, head_dim=head_dim, dtype="fp32",
                                      passes=passes, seconds=t, rank_seconds=[t]))
    return pts


def test_attention_table_text_round_trips_through_attention_grid(tmp_path):
    from perfmodel.calibrate.machine.measured_tables import attention_table_text, measured_backward_rate
    from perfmodel.spec.hardware.kernel_tables import attention_grid

    pts = attention_points()
    text = attention_table_text(pts)
    lines = text.splitlines()
    assert lines[0] == "head_dim,isl,batch,heads,latency_ms" and len(lines) == 1 + 6  # 3 lengths, 3 one-token calls
    assert lines[1] == "64,1,4,4,0.02" and lines[-1] == "64,256,4,4,67.391"  # by hand, ms: 0.02 + 1e3 * 4*4*4*64*256*257/2 / 2e9
    path = tmp_path / "spec.attention.csv.gz"
    path.write_bytes(gzipped(text))
    grid = attention_grid(str(path))
    assert list(grid.isl) == [64, 128, 256] and list(grid.head_dim) == [64]
    np.testing.assert_allclose(grid.flops_per_s, RATE, rtol=1e-5)  # the one-token call taken off: RATE everywhere
    assert measured_backward_rate(pts) == pytest.approx(BWD, rel=1e-12)
    # a raw file from before the table: forward + backward only (the field's default), no table, no rate
    old = [p.model_copy(update={"passes": "forward_backward"}) for p in pts if p.seq > 1]
    assert attention_table_text(old) is None and measured_backward_rate(old) is None
    # every call shorter than twice its one-token call: the reader would keep no row, so no table and no rate
    short = [p.model_copy(update={"seconds": 1.5 * FIXED}) if p.seq > 1 else p for p in pts]
    assert attention_table_text(short) is None and measured_backward_rate(short) is None
    assert type(pts[0]).model_validate({k: v for k, v in pts[0].model_dump().items() if k != "passes"}).passes \
        == "forward_backward"


def test_a_calibrated_spec_prices_attention_from_its_table_at_its_measured_backward_rate(tmp_path, capsys):
    from perfmodel.cli.main import main
    from perfmodel.cost.compute.kernels import Device, attention_ops

    m = synthetic_measurements(2)
    m = m.model_copy(update={"attention": attention_points()})
    template = cpu_template(m, "cpu-testhost-2p")
    fit = fit_all(m, template)
    paths = table_paths(tmp_path / "spec.yaml")
    from perfmodel.calibrate.machine.measured_tables import attention_table_text

    paths["attention"].write_bytes(gzipped(attention_table_text(m.attention)))
    system = build_system(template, fit, m, "perfmodel calibrate --device cpu --nproc 2 --output spec.yaml",
                          "spec.raw.json", attention_table=paths["attention"])
    assert [p.label for p in fit.points if p.quantity == "attention"] == [  # fitted on forward + backward alone
        "b16 h4 s64 d64", "b8 h4 s128 d64", "b4 h4 s256 d64"]
    out = tmp_path / "spec.yaml"
    out.write_text(spec_yaml(system, "perfmodel calibrate ...", tmp_path))
    acc = yaml.safe_load(out.read_text())["accelerator"]
    assert acc["kernel_tables"] == {"attention": "spec.attention.csv.gz"} and acc["attention_table_kernel"] == "sdpa"
    assert acc["attention_backward_rate"] == pytest.approx(BWD)
    loaded = load_hardware(str(out))
    for stack in ("plain-torch", "megatron-core"):  # sdpa prices every stack, each at its attention_speed
        plan = pm.Plan(gpus=1, micro_batch=1, global_batch=1, seq_len=128, stack=stack)
        dev = Device(pm.load_model("gpt2-124m"), loaded, plan)
        (op,) = attention_ops(dev, 128.0, 12.0, 128.0, 1.0)
        rate = RATE * dev.stack.attention_speed * loaded.efficiency.sustained_fraction
        assert op.priced_by == "table spec.attention bf16" and op.fwd_s == pytest.approx(op.fwd_flops / rate, rel=1e-4)
        assert op.bwd_s == pytest.approx(2.5 * op.fwd_flops / (rate * BWD), rel=1e-4)
    assert main(["hardware", "show", str(out)]) == 0
    assert "backward at 0.800 of its rate (measured)" in capsys.readouterr().out
    bad = dict(yaml.safe_load(out.read_text()))
    bad["accelerator"] = dict(bad["accelerator"], kernel_tables={}, attention_table_kernel=None)
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(InputError, match="attention_backward_rate = 0.8 without an attention table; valid: null"):
        load_hardware(str(tmp_path / "bad.yaml"))


def test_built_grids_are_kept_on_disk_and_rebuilt_when_the_table_or_cache_changes(tmp_path, monkeypatch):
    """A grid read back from the disk cache equals the one built from the table; an edited table gets its own entry
    (content-keyed); a torn cache file is built again and replaced; PERFMODEL_CACHE_DIR='' writes nothing."""
    import numpy as np

    from perfmodel.spec.hardware import grid_cache, kernel_tables as kt

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    table = tmp_path / "t.gemm.csv.gz"
    rows = [f"bf16,{m},{n},{k},{2 * m * n * k / 1e5:.6f}" for m in (1, 8) for n in (16, 32) for k in (16, 32)]
    table.write_bytes(gzip.compress(("dtype,m,n,k,latency_ms\n" + "\n".join(rows) + "\n").encode()))

    def fresh():
        kt._gemm_grid.cache_clear()
        kt._rows_of.cache_clear()
        return kt.gemm_grid(str(table), "bf16")

    built = fresh()
    files = sorted((tmp_path / "cache" / "kernel_grids").glob("gemm-*.npz"))
    assert len(files) == 1
    again = fresh()  # from the cache file
    for f in ("m", "n", "k", "seconds", "measured"):
        assert np.array_equal(getattr(built, f), getattr(again, f))
    assert again.seconds[1, 1, 1] == pytest.approx(2 * 8 * 32 * 32 / 1e5 * 1e-3)  # ms -> s, as built
    assert (again.table, again.dtype) == (str(table), "bf16")

    files[0].write_bytes(b"torn")  # rebuilt and replaced
    assert np.array_equal(fresh().seconds, built.seconds)
    assert files[0].read_bytes()[:2] == b"PK"

    rows = [f"bf16,{m},{n},{k},{4 * m * n * k / 1e5:.6f}" for m in (1, 8) for n in (16, 32) for k in (16, 32)]
    table.write_bytes(gzip.compress(("dtype,m,n,k,latency_ms\n" + "\n".join(rows) + "\n").encode()))
    edited = fresh()
    assert len(list((tmp_path / "cache" / "kernel_grids").glob("gemm-*.npz"))) == 2
    assert np.allclose(edited.seconds, 2 * built.seconds)

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", "")
    assert grid_cache.grid_cache_dir() is None
    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "off"))
    monkeypatch.setattr(grid_cache, "grid_cache_dir", lambda: None)
    fresh()
    assert not (tmp_path / "off").exists()
