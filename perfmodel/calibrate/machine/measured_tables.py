"""The measured tables a calibration writes beside its spec, in the catalogue's formats (hardware_specs/kernels/),
and the collective fits per group size (`NetworkTier.by_group`) it makes of its own timings.

- `SPEC.gemm.csv.gz` (`gemm_table_text`): the GEMMs of the suite's regular grid (`suite.Suite.table_axes`, the
  points whose source is `suite.TABLE`), `dtype,m,n,k,latency_ms`, rows grouped by dtype and sorted, the median
  seconds per call in ms to 6 significant digits, gzipped without a timestamp, as
  hardware_specs/kernels/<part>/gemm.csv.gz. The dtype is the plan precision a timing stands for (bf16, fp16):
  on a CPU the executor computes in fp32 and a plan's bf16 maps to it, so its fp32 timings are the bf16 rows (as
  they calibrate matmul_max.bf16). The calibrated spec names it (`kernel_tables: {gemm: SPEC.gemm.csv.gz}`,
  relative to the spec's folder: `spec.hardware.kernel_tables.table_path`), so its GEMMs are priced from this machine's
  own times (`cost.compute.kernels.Device.gemm_priced`).
- `SPEC.nccl.csv.gz` (`comm_table_text`): every collective timing, `op,num_gpus,message_bytes,latency_ms` as
  hardware_specs/kernels/<part>/nccl.csv.gz (nccl-tests' op names; the ring shift of sends and receives is
  nccl-tests' `sendrecv`). Unlike nccl-tests, the nproc // num_gpus groups of a size ran at once
  (`raw.CommPoint`), in the calibration's dtype, over NCCL on CUDA and gloo on a CPU. Nothing reads it back: it
  keeps the data behind the fits in the catalogue's form.
- `SPEC.attention.csv.gz` (`attention_table_text`): the forward SDPA timings, `head_dim,isl,batch,heads,latency_ms`
  as hardware_specs/kernels/<part>/attention.csv.gz, with the one-token call of each batch that
  `spec.hardware.kernel_tables.attention_grid` takes off as the call's fixed part. The suite times `attn_tokens` tokens per
  call, so each length has its own batch: the grid's rate per length is that of one width, which the reader holds
  across widths. The calibrated spec names it with kernel `sdpa`, and `attention_backward_rate` the backward's
  measured rate against the forward's (`measured_backward_rate`), where FlashAttention-2's 63/73 stood.
- `fit_groups`: the ring formula fitted per collective kind and group size, as hardware_specs/kernels/
  import_tables.py fits the catalogue's NCCL tables (`fit.fit_network` over one group size's points; NCCL: messages
  of at least NCCL_MIN_BYTES, below which NCCL switches protocols). A kind gets `by_group` only where every group
  size it was measured at gives a clean fit: at least `fit.MIN_KIND_POINTS` points, latency and bandwidth told
  apart (`fit.MAX_KIND_CONDITION`), and a median error of at most GROUP_MAX_ERROR on its points; otherwise it
  keeps its `by_kind` fit over all group sizes, and the raw file says why (`raw.NetworkFit.group_fallback`).
This module imports no torch.
"""

from __future__ import annotations

import gzip
import io
import statistics
from pathlib import Path

from ...spec.hardware.system import System
from ...spec.hardware.kernel_tables import ATTENTION_HEADER, attention_row_kept
from .fit import comm_coefficients, fit_network, residual_table
from .raw import AttentionPoint, CommPoint, FitResult, GemmPoint, KindNetworkFit, Measurements
from .suite import TABLE

GEMM_HEADER, NCCL_HEADER = "dtype,m,n,k,latency_ms", "op,num_gpus,message_bytes,latency_ms"
NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "all_to_all": "alltoall", "p2p": "sendrecv"}  # calibrate's kind -> nccl-tests' op name
NCCL_MIN_BYTES = 2**20  # the catalogue's NCCL fits take messages of >= 1 MiB (import_tables.py NCCL_MIN_BYTES)
GROUP_MAX_ERROR = 0.10  # a group size's own fit is clean at a median |predicted / measured - 1| of at most this


def table_paths(spec: str | Path) -> dict[str, Path]:
    """The tables written beside the spec file `spec`: {'gemm': SPEC.gemm.csv.gz, 'nccl': SPEC.nccl.csv.gz,
    'attention': SPEC.attention.csv.gz} (named after the spec, as its raw file, so that two specs in one folder keep
    their own)."""
    p = Path(spec)
    stem = p.name.removesuffix(p.suffix)
    return {kind: p.with_name(f"{stem}.{kind}.csv.gz") for kind in ("gemm", "nccl", "attention")}


def gzipped(text: str) -> bytes:
    """`text` gzipped as import_tables.py writes the catalogue's tables (level 9, no name or time: the same bytes
    for the same rows)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(text.encode())
    return buf.getvalue()


def table_grid(points: list[GemmPoint]) -> dict[str, dict[tuple[int, int, int], float]]:
    """Per plan precision, seconds at each (m, n, k) of the table's grid points (source TABLE), where they fill
    their grid (every m x n x k of their axes, at least 2 values on each): what a GEMM table may hold."""
    by_prec: dict[str, dict[tuple[int, int, int], float]] = {}
    for p in points:
        if p.source == TABLE:
            by_prec.setdefault(p.precision, {})[(p.m, p.n, p.k)] = p.seconds
    out = {}
    for prec, pts in sorted(by_prec.items()):
        axes = [sorted({key[i] for key in pts}) for i in range(3)]
        if min(len(a) for a in axes) >= 2 and len(pts) == len(axes[0]) * len(axes[1]) * len(axes[2]):
            out[prec] = pts
    return out


def gemm_table_text(points: list[GemmPoint]) -> str | None:
    """The GEMM table of these measurements as CSV text (module docstring), or None where no precision measured
    a whole grid (a raw file from before the table)."""
    grid = table_grid(points)
    if not grid:
        return None
    rows = [f"{prec},{m},{n},{k},{seconds * 1e3:.6g}" for prec, pts in grid.items() for (m, n, k), seconds in
            sorted(pts.items())]
    return "\n".join([GEMM_HEADER] + rows) + "\n"


def comm_table_text(points: list[CommPoint]) -> str | None:
    """The collective timings as CSV text in the catalogue's NCCL format (module docstring), or None without any."""
    if not points:
        return None
    rows = sorted((NCCL_OPS[p.kind], p.group_size, p.size_bytes, p.seconds) for p in points)
    return "\n".join([NCCL_HEADER] + [f"{op},{n},{size},{s * 1e3:.6g}" for op, n, size, s in rows]) + "\n"


def attention_table_text(points: list[AttentionPoint]) -> str | None:
    """The forward attention timings as CSV text in the catalogue's attention format (module docstring), or None
    where no forward call longer than one token gives the reader a rate (`spec.hardware.kernel_tables.attention_row_kept`
    against the one-token call of its batch; a raw file from before the table: no forward call at all)."""
    fwd = [p for p in points if p.passes == "forward"]
    ones = {(p.head_dim, p.batch, p.heads): p.seconds for p in fwd if p.seq == 1}
    one = lambda p: ones.get((p.head_dim, p.batch, p.heads))  # noqa: E731
    if not any(p.seq > 1 and one(p) is not None and attention_row_kept(p.seconds, one(p)) for p in fwd):
        return None
    rows = sorted((p.head_dim, p.seq, p.batch, p.heads, p.seconds) for p in fwd)
    return "\n".join([",".join(ATTENTION_HEADER)] + [f"{d},{s},{b},{h},{t * 1e3:.6g}" for d, s, b, h, t in rows]) + "\n"


def measured_backward_rate(points: list[AttentionPoint]) -> float | None:
    """The backward's FLOP/s over the forward's of the measured calls, as `cost.compute.kernels.attention_table_op` prices
    them (backward FLASH_BWD_FACTOR x the forward FLOPs): FLASH_BWD_FACTOR x (t_fwd - t_1) / (t_fwd+bwd - t_fwd),
    with t_1 the one-token call of the batch that the table's reader takes off the forward; the median over the
    calls whose forward the reader keeps (`spec.hardware.kernel_tables.attention_row_kept`). None without such a call."""
    from ...cost.compute.kernels import FLASH_BWD_FACTOR

    t = {(p.passes, p.head_dim, p.batch, p.heads, p.seq): p.seconds for p in points}
    rates = []
    for (passes, d, b, h, s), both in t.items():
        fwd, one = t.get(("forward", d, b, h, s)), t.get(("forward", d, b, h, 1))
        if passes == "forward_backward" and fwd and one and attention_row_kept(fwd, one) and both > fwd:
            rates.append(FLASH_BWD_FACTOR * (fwd - one) / (both - fwd))
    return statistics.median(rates) if rates else None


def fit_groups(fit: FitResult, m: Measurements, system: System) -> FitResult:
    """`fit` with the collective kinds fitted per group size (`raw.NetworkFit.by_group`, module docstring) and
    their fit points predicted as the spec then predicts them (each group size with its own fit)."""
    net = fit.network
    if net is None:
        return fit
    nproc, nccl = m.env.nproc, m.env.backend == "nccl"
    pts = [p for p in m.comm if not nccl or p.size_bytes >= NCCL_MIN_BYTES]
    fits: dict[str, dict[str, KindNetworkFit]] = {}
    why: dict[str, str] = {}
    at = [i for i, q in enumerate(fit.points) if q.quantity == "comm"]  # fit.fit_network's, in the order of m.comm
    kind_pred = {(p.kind, p.group_size, p.size_bytes): fit.points[i].predicted_s for p, i in zip(m.comm, at)}
    for g in sorted({p.group_size for p in pts}):
        sel = [p for p in pts if p.group_size == g]
        gnet, gpts = fit_network(sel, system, nproc)
        for kind in dict.fromkeys(p.kind for p in sel):
            if kind not in gnet.by_kind:
                why.setdefault(kind, f"groups of {g}: {gnet.fallback[kind]}")
                continue
            errors = [abs(fp.rel_error) for p, fp in zip(sel, gpts) if p.kind == kind]
            if statistics.median(errors) > GROUP_MAX_ERROR:
                why.setdefault(kind, f"groups of {g}: its own fit leaves {statistics.median(errors):.0%} median "
                                     f"error (> {GROUP_MAX_ERROR:.0%})")
                continue
            before = [abs(kind_pred[(p.kind, p.group_size, p.size_bytes)] / p.seconds - 1) for p in sel
                      if p.kind == kind]
            fits.setdefault(kind, {})[str(g)] = gnet.by_kind[kind].model_copy(
                update={"shared_median_abs_error": statistics.median(before)})
    for kind in dict.fromkeys(p.kind for p in m.comm):
        if kind not in fits and kind not in why:
            why[kind] = f"no message of {NCCL_MIN_BYTES} B or more (NCCL's protocols switch below)"
    by_group = {kind: groups for kind, groups in fits.items() if kind not in why}
    points = list(fit.points)
    for p, i in zip(m.comm, at):
        if p.kind not in by_group:
            continue
        groups = {int(g): k for g, k in by_group[p.kind].items()}
        below = [g for g in groups if g <= p.group_size]
        k = groups[max(below) if below else min(groups)]  # as NetworkTier.fit picks it
        c_lat, c_bw = comm_coefficients(p, system, nproc)
        points[i] = points[i].model_copy(update={"predicted_s": k.latency_s * c_lat + c_bw / k.bus_bandwidth})
    network = net.model_copy(update={"by_group": by_group, "group_fallback": why})
    return fit.model_copy(update={"network": network, "points": points, "residuals": residual_table(points)})
