"""Measured GEMM tables (hardware_specs/kernels/): read into grids, looked up exactly at measured points,
interpolated in log space between them, and named by the specs that carry them."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest

from perfmodel import load_hardware
from perfmodel.cost.compute.kernel_lookup import gemm_table_time
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import Accelerator, list_accelerators, load_accelerator
from perfmodel.spec.hardware.kernel_tables import KERNELS, gemm_grid

H100 = "h100_sxm/gemm.csv.gz"


def rows(table: str, dtype: str) -> dict[tuple[float, float, float], float]:
    """(m, n, k) -> seconds, read straight from the file (independent of spec.hardware.kernel_tables)."""
    out = {}
    with gzip.open(KERNELS / table, "rt") as f:
        next(f)
        for line in f:
            d, m, n, k, ms = line.strip().split(",")
            if d == dtype:
                out[(float(m), float(n), float(k))] = float(ms) * 1e-3
    return out


def test_every_catalogue_part_with_a_table_loads_it():
    named = {a: load_accelerator(a).kernel_tables for a in list_accelerators()}
    with_tables = sorted(a for a, t in named.items() if t)
    assert with_tables == ["A100-SXM4-80GB", "B200", "B300", "GB200", "GB300", "GH200-96GB", "H100-SXM5-80GB",
                           "H200-SXM-141GB"]  # GH200: the H100 SXM tables (same GH100 GPU)
    for a in with_tables:
        acc = load_accelerator(a)
        assert "kernel_tables" in acc.sources and "AIConfigurator" in acc.sources["kernel_tables"]
        for dtype in ("bf16",) + (("fp8",) if "fp8" in acc.peak_tflops else ()):
            assert gemm_grid(acc.kernel_tables["gemm"], dtype).seconds.shape[0] == 74  # the collector's m grid


def test_measured_points_are_returned_exactly():
    measured = rows(H100, "bf16")
    grid = gemm_grid(H100, "bf16")
    keys = list(measured)[::97]  # a spread of ~370 points over the whole grid
    m, n, k = (np.array([key[i] for key in keys]) for i in range(3))
    seconds, outside = gemm_table_time(grid, m, n, k)
    np.testing.assert_allclose(seconds, [measured[key] for key in keys], rtol=1e-12)
    assert not outside.any()


def test_between_points_log_linear_interpolation():
    # m = 6000 lies between the grid's 4353 and 8192; n and k are grid points. By hand: log-linear in m,
    # t = t0 * (t1 / t0) ** (log(6000 / m0) / log(m1 / m0))
    measured = rows(H100, "bf16")
    grid = gemm_grid(H100, "bf16")
    m0, m1 = max(m for m in grid.m if m <= 6000), min(m for m in grid.m if m >= 6000)
    assert (m0, m1) == (4353, 8192)
    t0, t1 = measured[(m0, 8192, 8192)], measured[(m1, 8192, 8192)]
    by_hand = t0 * (t1 / t0) ** (math.log(6000 / m0) / math.log(m1 / m0))
    seconds, outside = gemm_table_time(grid, 6000, 8192, 8192)
    assert float(seconds) == pytest.approx(by_hand, rel=1e-12) and not outside
    assert min(t0, t1) <= float(seconds) <= max(t0, t1)
    # in all three dimensions at once: the geometric mean of the 8 corners at the cell's log-midpoint
    corners = [measured[(a, b, c)] for a in (m0, m1) for b in (4096, 5120) for c in (4096, 5120)]
    mid, _ = gemm_table_time(grid, math.sqrt(m0 * m1), math.sqrt(4096 * 5120), math.sqrt(4096 * 5120))
    assert float(mid) == pytest.approx(math.prod(corners) ** (1 / 8), rel=1e-9)


def test_a_large_gemm_runs_near_the_parts_peak():
    # 8192^3 bf16 on H100: 2 * 8192^3 FLOPs at under the 989.4 TFLOP/s dense peak, and above the 0.7 of it
    # that large GEMMs reach (stas00/ml-engineering's maximum achievable matmul FLOPS: 794.5 TF)
    seconds, _ = gemm_table_time(gemm_grid(H100, "bf16"), 8192, 8192, 8192)
    rate = 2 * 8192**3 / float(seconds) / 1e12
    assert 0.7 * 989.4 < rate < 989.4
    fp8, _ = gemm_table_time(gemm_grid(H100, "fp8"), 8192, 8192, 8192)
    assert float(fp8) < float(seconds)  # fp8 runs the same GEMM faster


def test_outside_the_grid_is_scaled_by_flops_and_flagged():
    grid = gemm_grid(H100, "bf16")
    edge, out_edge = gemm_table_time(grid, 32768, 4096, 4096)
    twice, out_twice = gemm_table_time(grid, 65536, 4096, 4096)
    assert not out_edge and out_twice
    assert float(twice) == pytest.approx(2 * float(edge), rel=1e-12)
    small, out_small = gemm_table_time(grid, 1, 16, 4096)  # n below the grid's 32: the edge's time, flagged
    assert out_small and float(small) == pytest.approx(float(gemm_table_time(grid, 1, 32, 4096)[0]), rel=1e-12)


def test_holes_are_filled_from_the_shape_below_and_marked():
    grid = gemm_grid(H100, "bf16")
    i, j, l = list(grid.m).index(32768), list(grid.n).index(65536), list(grid.k).index(4096)
    assert not grid.measured[i, j, l]  # 32768 x 65536 >= 2^31: the collector skipped it
    assert grid.measured[i - 1, j, l]
    assert grid.seconds[i, j, l] == pytest.approx(grid.seconds[i - 1, j, l] * 32768 / grid.m[i - 1], rel=1e-12)
    assert (~grid.measured).sum() == 74 * 22 * 22 - len(rows(H100, "bf16"))


def test_a_search_sized_lookup_is_vectorised():
    grid = gemm_grid(H100, "bf16")
    m = np.arange(1, 200_001, dtype=float)
    seconds, _ = gemm_table_time(grid, m, 8192, 4096)
    assert seconds.shape == (200_000,) and np.isfinite(seconds).all()


def test_bad_tables_are_refused_with_one_line(tmp_path):
    for name, data in (("plain.csv.gz", b"dtype,m,n,k,latency_ms\nbf16,1,32,32,0.01\n"),
                       ("header.csv.gz", gzip.compress(b"dtype,m,n,latency_ms\nbf16,1,32,0.01\n")),
                       ("ragged.csv.gz", gzip.compress(b"dtype,m,n,k,latency_ms\nbf16,1,32,32\n")),
                       ("nocomma.csv.gz", gzip.compress(b"dtype,m,n,k,latency_ms\ngarbage\n")),
                       ("empty.csv.gz", gzip.compress(b"dtype,m,n,k,latency_ms\n")),
                       ("corrupt.csv.gz", gzip.compress(b"dtype,m,n,k,latency_ms\n" * 50)[:30] + b"\xff" * 40)):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InputError, match="valid: (a gzipped CSV |rows )?dtype,m,n,k,latency_ms") as e:
            gemm_grid(str(tmp_path / name), "bf16")
        assert "\n" not in str(e.value)
    one_m = tmp_path / "one_m.csv.gz"
    one_m.write_bytes(gzip.compress(b"dtype,m,n,k,latency_ms\nbf16,8,32,32,0.01\nbf16,8,64,32,0.02\n"
                                    b"bf16,8,32,64,0.02\nbf16,8,64,64,0.03\n"))
    with pytest.raises(InputError, match=r"m takes 1 value\(s\) from 8; valid: at least 2 positive values"):
        gemm_grid(str(one_m), "bf16")
    with pytest.raises(InputError, match="has no fp8 GEMMs; it has: bf16"):
        gemm_grid("a100_sxm/gemm.csv.gz", "fp8")
    with pytest.raises(InputError, match="file does not exist"):
        gemm_grid("nowhere/gemm.csv.gz", "bf16")
    base = load_accelerator("H100-SXM5-80GB").model_dump()
    with pytest.raises(InputError, match=r"gemm = 'nope.csv.gz': no such file; valid: a table under "
                                         r"hardware_specs/kernels/"):
        Accelerator.parse(base | {"kernel_tables": {"gemm": "nope.csv.gz"}}, where="accelerator x")
    with pytest.raises(InputError, match="kernel_tables"):
        Accelerator.parse(base | {"kernel_tables": {"moe": H100}}, where="accelerator x")


def test_hardware_show_names_the_tables(capsys):
    from perfmodel.cli.main import main

    assert main(["hardware", "show", "dgx-h100"]) == 0
    out = capsys.readouterr().out
    assert "kernel tables: gemm h100_sxm/gemm.csv.gz (measured bf16, fp8: prices a plan's GEMMs" in out
    assert load_hardware("tpu-v5p").accelerator.kernel_tables == {}


def _device(hardware="dgx-h100", precision="bf16", tables=True):
    import perfmodel as pm
    from perfmodel.cost.compute.kernels import Device

    system = load_hardware(hardware)
    if not tables:
        system = system.on_datasheet(collectives=False)
    plan = pm.Plan(gpus=8, tp=8, dp=1, global_batch=8, micro_batch=1, seq_len=4096, precision=precision)
    return Device(pm.load_model("llama-3-8b"), system, plan)


def test_step_gemms_are_priced_from_the_table_over_sustained_fraction():
    from perfmodel.cost.compute.kernels import linear_op

    dev = _device()
    measured = rows(H100, "bf16")
    sf = dev.fraction  # sustained_fraction at the loop's clock (cost.compute.kernels.Device.fraction)
    # grid points of the H100 table: m = 4096 tokens, n = 2048, k = 4096 (and the two backward shapes)
    m, n, k = 4096.0, 2048.0, 4096.0
    assert {(m, n, k), (m, k, n), (k, n, m)} <= set(measured)
    (op,) = linear_op(dev, "x", m, n, k)
    assert op.fwd_s == pytest.approx(measured[(m, n, k)] / sf, rel=1e-12)
    assert op.bwd_s == pytest.approx((measured[(m, k, n)] + measured[(k, n, m)]) / sf, rel=1e-12)
    assert op.priced_by == "table h100_sxm/gemm bf16" and not op.outside
    assert op.fwd_flops == 2 * m * n * k and op.bwd_flops == 4 * m * n * k
    # beyond the grid (m = 65536 > 32768): flagged, so the op table can say it extrapolated
    (big,) = linear_op(dev, "x", 65536.0, n, k)
    assert big.outside and big.fwd_s == pytest.approx(2 * measured[(32768.0, n, k)] / sf, rel=1e-12)


def test_grouped_gemms_price_as_one_of_batch_m_rows_floored_by_their_weight_traffic():
    dev = _device()
    measured = rows(H100, "bf16")
    sf = dev.fraction
    # 8 experts of 512 tokens each, 4096 x 2048: the table's one GEMM of 4096 rows (compute-bound there)
    t, by, _ = dev.gemm_priced(512.0, 2048.0, 4096.0, batch=8)
    traffic = 8 * ((512 * 4096 + 4096 * 2048) * 2 + 512 * 2048 * 2) / dev.mem_bw
    assert traffic < measured[(4096.0, 2048.0, 4096.0)]
    assert t == pytest.approx(measured[(4096.0, 2048.0, 4096.0)] / sf, rel=1e-12)
    # 64 experts of 1 token: the table's GEMM of 64 rows reads one weight; the 64 distinct weights bound it
    t1, _, _ = dev.gemm_priced(1.0, 2048.0, 4096.0, batch=64)
    weights = 64 * ((1 * 4096 + 4096 * 2048) * 2 + 2048 * 2) / dev.mem_bw  # memory-bound: no sustained_fraction
    assert t1 == pytest.approx(weights, rel=1e-12) and t1 > measured[(64.0, 2048.0, 4096.0)] / sf


def test_the_datasheet_prices_what_no_table_measured():
    from perfmodel.cost.compute.kernel_time import gemm_time

    for dev in (_device(tables=False), _device("dgx-a100-40gb"), _device("mi300x-8", precision="fp16")):
        t, by, outside = dev.gemm_priced(4096.0, 2048.0, 4096.0)
        assert by == "datasheet" and not outside and dev.gemm_table(dev.plan.precision) is None
        eff, acc = dev.system.efficiency, dev.system.accelerator
        prec = dev.plan.precision
        by_hand = gemm_time(4096.0, 2048.0, 4096.0, acc.peak_flops(prec) * dev.fraction,
                            eff.matmul_max[prec], *eff.matmul_tile, acc.compute_units, dev.mem_bw)
        assert t == pytest.approx(float(by_hand), rel=1e-12)


def test_fp8_tables_hold_the_activation_casts_so_only_the_weight_is_cast_apart():
    """The fp8 table times dynamic activation quantisation with the GEMM (hardware_specs/kernels/README.md): a
    table-priced fp8 linear adds only its weight's cast (k n (2 + 1) B over the micro-batches), the datasheet path
    the input's and the output gradient's too."""
    from perfmodel.cost.compute.kernels import linear_op

    m, n, k = 4096.0, 2048.0, 4096.0
    table = _device(precision="fp8")
    gemm, cast = linear_op(table, "x", m, n, k)
    mb = table.plan.num_microbatches
    assert gemm.priced_by == "table h100_sxm/gemm fp8" and cast.formula == "quantise the weight to fp8"
    assert cast.fwd_s == pytest.approx(k * n * 3 / mb / table.mem_bw, rel=1e-12) and cast.bwd_s == 0
    sheet = _device(precision="fp8", tables=False)
    _, cast = linear_op(sheet, "x", m, n, k)
    assert cast.fwd_s == pytest.approx((m * k * 3 + k * n * 3 / mb) / sheet.mem_bw, rel=1e-12)
    assert cast.bwd_s == pytest.approx(m * n * 3 / sheet.mem_bw, rel=1e-12)


def test_fp16_reads_the_bf16_table_where_the_datasheet_rates_them_alike():
    measured = rows(H100, "bf16")
    dev = _device(precision="fp16")
    t, by, _ = dev.gemm_priced(4096.0, 2048.0, 4096.0)
    assert by == "table h100_sxm/gemm bf16 (for fp16)"
    assert t == pytest.approx(measured[(4096.0, 2048.0, 4096.0)] / dev.fraction, rel=1e-12)


def test_predict_names_what_priced_each_op_and_still_sums(capsys):
    import json

    from perfmodel.cli.main import main

    assert main(["predict", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "2",
                 "--pp", "1", "--micro-batch", "1", "--global-batch", "16", "--seq-len", "4096", "--format", "json"]) == 0
    e = json.loads(capsys.readouterr().out)
    by = {o["name"]: o["priced_by"] for o in e["ops"]}
    assert by["qkv"] == by["mlp_in"] == by["lm_head"] == "table h100_sxm/gemm bf16"
    assert by["attention"] == "table h100_sxm/attention bf16" and by["norm1"] == "datasheet"
    parts = {k: v for k, v in e["time_s"].items() if k != "total"}
    assert sum(parts.values()) == pytest.approx(e["time_s"]["total"], rel=1e-9)


def test_a_table_in_any_row_order_reads_the_same(tmp_path):
    import random

    lines = gzip.decompress((KERNELS / "b300_sxm/gemm.csv.gz").read_bytes()).decode().strip().split("\n")
    body = lines[1:]
    random.Random(0).shuffle(body)
    path = tmp_path / "shuffled.csv.gz"
    path.write_bytes(gzip.compress("\n".join([lines[0]] + body).encode()))
    for dtype in ("bf16", "fp8", "fp4"):
        a, b = gemm_grid("b300_sxm/gemm.csv.gz", dtype), gemm_grid(str(path), dtype)
        np.testing.assert_array_equal(a.seconds, b.seconds)
        np.testing.assert_array_equal(a.measured, b.measured)
