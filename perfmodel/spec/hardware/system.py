"""Hardware schema and catalogue: accelerators, network tiers, achievable efficiencies, systems.

Specs are YAML data under `hardware_specs/` (installed as `perfmodel.hardware_specs`). A file states numbers in
the units people read on datasheets (TFLOP/s, GiB, TB/s, GB/s, microseconds); the properties below convert
them to SI (FLOP/s, bytes, bytes/s, seconds) for the cost model. Every number in a catalogue file names its
source in the `sources` mapping of the object that holds it (tests enforce this).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, field_serializer, field_validator, model_validator

from ...errors import InputError, suggest
from ...types import MAX_COUNT, Count, Flag, PositiveReal, Real, Schema
from ...files import looks_like_path, read_mapping
from .kernel_tables import current_spec_folder, held_name, spec_folder, table_path, written_name
from .network import DATASHEET_MAX, CollectiveKind, Datasheet, KindFit, Latency, NetworkTier  # noqa: F401
from .grouped_slowdown import GroupedGemmSlowdown  # noqa: F401 - re-exported: a field of Accelerator
from ..host.cpu import HostCPU, SharedHost, load_host, resolve_host  # noqa: F401 - SharedHost re-exported
from .power_model import PowerModel  # noqa: F401 - re-exported: a field of Accelerator
from ..host.overheads import HostCosts, HostProbe, ServingHostCosts, SustainProbe  # noqa: F401
from ..stack.profile import NARROW_PRECISIONS, Interval  # noqa: F401
from ..stack.release import profile_of

Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8"]
GEMM_DTYPES = ("bf16", "fp16", "fp8", "fp4", "int8")  # the training precisions a plan may pick
GiB = 2**30


# The share of the allocator's room (capacity - runtime) a user keeps free beyond the estimate's own error: none
# by default. The estimate's error is the stack's measured-peak band (Stack.memory_band, cost.memory.fit.
# memory_limits), from the residuals of the measured-memory benchmark, not a fixed share (it was 10% until
# 2026-11-28, covering 84% of the 49 measured peaks then). Set it per run with --headroom.
DEFAULT_HEADROOM = 0.0

MAX_BACKWARD_RATE = 4.0  # attention backward / forward FLOP rate: FlashAttention-2 is 0.86; 4 is a broken timing


class Accelerator(Schema):
    """One chip as its datasheet describes it. Peak rates are dense (no structured sparsity)."""

    name: str = Field(description="part name; what a system's `accelerator: NAME` looks up (case-insensitive)")
    vendor: str = Field(description="manufacturer")
    generation: str | None = Field(None, description="architecture generation (ampere, hopper, blackwell, cdna3, "
                                   "tpu-v5p, ...; the vendor's name for it): the runs a prediction interval came "
                                   "from span some of them, and a part of another is an extrapolation "
                                   "(spec.stack.profile.Interval.bounds); null: the part's own name")
    peak_tflops: dict[Dtype, Datasheet] = Field(description="dense peak TFLOP/s per dtype the part supports")
    hbm_capacity_gib: Datasheet = Field(description="device memory, GiB")
    hbm_bandwidth_tbps: Datasheet = Field(description="device memory bandwidth, TB/s (1e12 bytes/s)")
    tdp_w: Datasheet | None = Field(None, description="board/chip power, W; null where unpublished")
    compute_units: Count = Field(description="SMs / CUs / matrix units that GEMM tiles are spread over")
    torch_device: Literal["cuda", "cpu", "xla"] = Field(
        "cuda", description="torch device type that runs this part (ROCm GPUs are 'cuda' to torch; TPUs 'xla'); "
                            "the executor refuses a plan for another device type")
    kernel_tables: dict[Literal["gemm", "attention", "moe", "allreduce", "decode_attention"], str] = Field(
        default_factory=dict, description="kernel kind -> measured table (a file beside the spec file, relative to "
                                          "its folder, as perfmodel calibrate writes its own; hardware_specs/kernels/"
                                          "<part>/...; or an absolute path): GEMM latency by dtype, m, n, k; causal "
                                          "attention forward latency by head_dim, isl, batch, heads; fused MoE forward "
                                          "latency by model shape, moe_tp x moe_ep slice and tokens, and the serving "
                                          "engines' NVLink all-reduce latency by GPUs and bytes (serving) "
                                          "(spec.hardware.kernel_tables)")
    attention_table_kernel: Literal["flash-attn-2", "sdpa", "native"] | None = Field(
        None, description="the kernel the attention table timed: flash-attn-2, or sdpa (PyTorch's "
                          "scaled_dot_product_attention, as perfmodel calibrate times it: FlashAttention-2 on CUDA "
                          "in bf16), each pricing every stack's flash attention at its attention_speed; or native "
                          "(the part's own FMHA: it prices the stacks whose attention_native is true; "
                          "FlashAttention-2 stacks keep attention_max)")
    attention_backward_rate: float | None = Field(
        None, gt=0, le=MAX_BACKWARD_RATE,
        description="backward FLOP/s over the attention table's forward FLOP/s, measured (perfmodel calibrate: the "
                    "same calls forward and forward + backward); null: FlashAttention-2's 63/73 (Dao 2023, Sec. 4.1; "
                    "cost.compute.kernels.FLASH_BWD_RATE)")
    unaligned_matmul_tflops: dict[Literal["forward", "input_grad", "weight_grad"], Datasheet] = Field(
        default_factory=dict, description="TFLOP/s of a 2-byte (bf16/fp16) linear layer's GEMMs whose out or in "
        "features are not a multiple of 8 elements (16 bytes: GPT-2's vocabulary of 50257, say), which cuBLAS runs "
        "with its alignment-1 kernels: the forward x W^T, the input gradient dy W and the weight gradient dy^T x "
        "(cost.compute.kernels.gemm_op); empty: not measured, such GEMMs priced as aligned ones")
    grouped_gemm_slowdown: GroupedGemmSlowdown | None = Field(
        None, description="a 2-byte grouped GEMM's (a device's local experts) time over one dense GEMM of the same "
        "rows, per pass and tokens per expert, measured on this architecture; null: not measured, grouped GEMMs "
        "priced as the dense GEMM of their rows (cost.compute.grouped_gemm.grouped_slowdown)")
    gemm_power_w: dict[Literal["bf16", "fp8", "fp4"], Datasheet] = Field(default_factory=dict, description="W drawn "
        "by GEMMs of >= 1e12 FLOPs per dtype (kernels/gemm_power.csv), as AIConfigurator's collector read it")
    power: PowerModel | None = Field(None, description="draw by kernel kind, board limit and clock response "
                                     "(cost.power); null: compute at sustained_fraction alone, energy from tdp_w")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")

    @field_validator("kernel_tables")
    @classmethod
    def _tables_exist(cls, tables):
        folder = current_spec_folder()  # the folder of the spec file read (load_hardware), if one
        for kind, path in ((k, p) for k, p in tables.items() if not table_path(p, folder).is_file()):
            raise ValueError(f"{kind} = {path!r}: no such file; valid: a table under hardware_specs/kernels/ "
                             f"(e.g. h100_sxm/gemm.csv.gz), beside the spec file or at an absolute path")
        return {kind: held_name(path, folder) for kind, path in tables.items()}

    @field_serializer("kernel_tables")
    def _tables_written(self, tables):
        """Named relative to the folder of the file written (`spec_folder`), as held otherwise."""
        folder = current_spec_folder()
        return tables if folder is None else {kind: written_name(path, folder) for kind, path in tables.items()}

    @model_validator(mode="after")
    def _attention_kernel_named(self):
        if ("attention" in self.kernel_tables) != (self.attention_table_kernel is not None):
            raise ValueError(f"kernel_tables.attention = {self.kernel_tables.get('attention')!r} with "
                             f"attention_table_kernel = {self.attention_table_kernel!r}; valid: both set (the kernel "
                             f"the table timed: flash-attn-2, sdpa or native) or neither")
        if self.attention_backward_rate is not None and "attention" not in self.kernel_tables:
            raise ValueError(f"attention_backward_rate = {self.attention_backward_rate!r} without an attention "
                             f"table; valid: null, or set with kernel_tables.attention (it is that table's ratio)")
        return self

    @model_validator(mode="after")
    def _has_bf16(self):
        if "bf16" not in self.peak_tflops:
            raise ValueError(f"peak_tflops needs a bf16 entry (the MFU reference); got {sorted(self.peak_tflops)}")
        return self

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for `dtype`; InputError naming the supported dtypes if the part lacks it."""
        if dtype not in self.peak_tflops:
            raise InputError(
                f"precision={dtype} is not supported by {self.name} (it has: {', '.join(self.peak_tflops)})"
            )
        return self.peak_tflops[dtype] * 1e12

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_capacity_gib * GiB

    @property
    def hbm_bandwidth(self) -> float:
        return self.hbm_bandwidth_tbps * 1e12

    @property
    def generation_name(self) -> str:
        """`generation`, or the part's own name (lower case) where the spec leaves it out."""
        return self.generation or self.name.lower()


class Efficiency(Schema):
    """Achievable fractions of the datasheet peaks, measured by microbenchmarks (see `sources`).

    Matmul: a GEMM runs at `matmul_max[dtype]` of peak on its best shape, reduced by tile and wave
    quantisation over `matmul_tile` tiles on the accelerator's compute units, and never faster than its
    operands can stream from memory (see `cost.compute.kernel_time.gemm_time`).
    Attention: a fused (flash) attention kernel reaches `attention_max` of the bf16 peak on long sequences and
    half of that at `attention_half_seq` keys (see `cost.compute.kernel_time.flash_attention_time`).
    Both are isolated-kernel measurements; inside a training step compute-bound kernels sustain
    `sustained_fraction` of them (derived from an end-to-end measurement by the sustained-fraction benchmark).
    """

    matmul_max: dict[Dtype, Real] = Field(description="best-shape GEMM fraction of peak, per dtype")
    matmul_tile: tuple[Count, Count] = Field(description="output tile (rows, cols) of the GEMM kernel")
    attention_max: Real = Field(
        gt=0, le=1, description="fused attention fwd+bwd fraction of the bf16 peak on long sequences")
    attention_half_seq: Real = Field(ge=0, le=MAX_COUNT, description="key length at which the attention kernel "
                                                                     "reaches half of attention_max")
    memory_bandwidth: Real = Field(gt=0, le=1, description="achieved / peak HBM bandwidth for streaming kernels")
    optimizer_bandwidth: Real | None = Field(
        None, gt=0, le=1,
        description="achieved / peak HBM bandwidth of the fused optimizer step (one streaming pass over weights, "
                    "gradients and states); null: memory_bandwidth. Apart because on a CPU the activation "
                    "kernels (GELU, norms) are compute bound while the optimizer streams")
    comm_overlap: Real = Field(
        1.0, ge=0, le=1,
        description="fraction of a collective's time that can run concurrently with compute when the schedule "
                    "allows it: 1 where communication has its own engines (GPU copy engines and NICs), lower where "
                    "it runs on the cores that compute (gloo on a CPU host); measured by perfmodel calibrate")
    comm_overlap_measured: Flag = Field(
        False, description="comm_overlap was measured with a collective beside compute (perfmodel calibrate): it "
                           "then holds the compute the collective's own kernels take, and the stack's comm_ctas "
                           "is not applied on top (cost.comm.sharded.overlap_fraction)")
    sustained_fraction: Real = Field(
        1.0, gt=0, le=1,
        description="fraction of the microbenchmarked GEMM and attention rates a whole training step sustains "
                    "(clocks under continuous load, kernels interleaved with cold caches, launch gaps)")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")

    @model_validator(mode="after")
    def _ranges(self):
        for k, v in self.matmul_max.items():
            if not 0 < v <= 1:
                raise ValueError(f"matmul_max.{k} = {v} must be in (0, 1]")
        return self


class RunResidual(Schema):
    """One measured run of a calibration from runs: what was measured and predicted with the fitted spec."""

    run: str = Field(description="the run's row_id (or log file stem)")
    stack: str = Field(description="software stack the run was priced with")
    measured_s: PositiveReal = Field(description="measured seconds per step")
    predicted_s: PositiveReal = Field(description="prediction of the fitted spec, seconds per step")
    loo_predicted_s: PositiveReal | None = Field(
        None, description="prediction of the spec fitted to every other run (leave-one-out); null with < 4 runs")


class RunFit(Schema):
    """What `perfmodel calibrate --from-runs` fitted to a user's measured runs (perfmodel.calibrate.runs.from_runs).

    The estimate applies it last (cost.step.run_fit.calibrated): compute parts / compute_speed, communication parts /
    network_speed, host parts / host_speed, plus step_overhead_s (0 unless asked for). `interval` is this spec's
    prediction interval (leave-one-out residuals of the runs where there are enough, else the stacks'; no
    narrower than the stacks' where a speed was `held`)."""

    compute_speed: PositiveReal = Field(description="measured compute speed over the spec's (divides the compute "
                                                     "parts of a step: cost.step.run_fit.COMPUTE_TIME)")
    network_speed: PositiveReal = Field(description="measured communication speed over the spec's (divides the "
                                                     "exposed communication parts: cost.step.run_fit.COMM_TIME)")
    host_speed: PositiveReal = Field(1.0, description="measured host speed over the spec's (divides the host "
                                                      "seconds the device waits on and the stack's per-step overhead)")
    step_overhead_s: Real = Field(0.0, ge=0, description="fitted seconds per step outside the model, added to every "
                                                          "step (only where asked: calibrate --step-overhead)")
    held: list[str] = Field(default_factory=list, description="speeds the runs could not pin down (pushed to a "
                                                              "bound), held at the spec's 1")
    notes: list[str] = Field(default_factory=list, description="what the fit flags: held speeds, a compute speed "
                                                               "far from any dev-set cluster's")
    interval: Interval | None = Field(None, description="prediction interval from the runs' residuals")
    loo_mape: Real | None = Field(None, ge=0, description="leave-one-out mean |error| over the runs (fraction)")
    runs: list[RunResidual] = Field(description="the runs fitted to, with their residuals")
    skipped: list[str] = Field(default_factory=list, description="files of a log directory that were not run logs")
    source: str = Field(description="the file and command the fit came from")

    def applies_to(self, stack: str) -> bool:
        """Whether a plan of software stack `stack` is priced with this fit: it is one of the runs' stacks. The speeds
        fitted hold a stack's own efficiency as much as the cluster's (the development sets' groups of one cluster
        and two stacks, Narayanan et al. 2021 Table 2, differ by 3x), so a plan of another stack keeps the spec's
        rates and its stack's own interval, and the estimate says so. A release prices its line's profile: the same."""
        return profile_of(stack) in {profile_of(r.stack) for r in self.runs}


# A checkpoint store's least bandwidth (1 MB/s) and efficiency (1% of its peaks): slower than any store there is; a
# denormal 1e-308 made a save last past a float and the goodput overflowed.
STORE_MIN_GBPS, STORE_MIN_EFFICIENCY = 1e-3, 0.01


class Storage(Schema):
    """The file system checkpoints are written to and read from (perfmodel forecast): aggregate peaks, each node's
    link to it, the share of those peaks a checkpoint burst reaches, and the device-to-host copy an asynchronous
    checkpoint blocks on."""

    write_gbps: Datasheet = Field(ge=STORE_MIN_GBPS, description="aggregate write bandwidth of the store, GB/s")
    read_gbps: Datasheet = Field(ge=STORE_MIN_GBPS, description="aggregate read bandwidth of the store, GB/s")
    node_gbps: Datasheet = Field(ge=STORE_MIN_GBPS, description="one node's link to the store, GB/s each way")
    devices_per_node: Count = Field(description="devices that share one node's link")
    write_efficiency: Real = Field(ge=STORE_MIN_EFFICIENCY, le=1,
                                   description="share of the write peaks a checkpoint save reaches")
    read_efficiency: Real = Field(ge=STORE_MIN_EFFICIENCY, le=1,
                                  description="share of the read peaks a checkpoint load reaches")
    staging_gbps: Datasheet = Field(ge=STORE_MIN_GBPS, description="device-to-host copy per device, GB/s (what an "
                                                                   "asynchronous checkpoint blocks on)")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")


class HostLink(Schema):
    """Each device's link to its host's memory, and that memory: what offloading activations or the optimizer
    state to the host (Plan.recompute_offloaded, optimizer_offload; cost.memory.offload) moves and where it lands."""

    bandwidth_gbps: Datasheet = Field(description="device-to-host and host-to-device copy, GB/s each way per device")
    efficiency: Real = Field(gt=0, le=1, description="share of bandwidth_gbps a large pinned-host copy reaches")
    memory_gib: Datasheet = Field(description="host memory per device, GiB (the host's memory over its devices)")
    memory_bandwidth_gbps: Datasheet | None = Field(
        None, description="host memory bandwidth per device, GB/s: what an optimizer update on the host's CPUs streams "
                          "its state through (Plan.optimizer_update host; cost.host.host_update); null: not stated, such "
                          "an update is not priced")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")


class Price(Schema):
    """An on-demand list price of the system, per device-hour."""

    usd_per_device_hour: Datasheet = Field(description="US dollars per device-hour")
    date: str = Field(description="when the price was listed (YYYY-MM)")
    source: str = Field(description="where it is listed")


class System(Schema):
    """A named cluster preset: accelerator, interconnect tiers, efficiencies, fixed memory overhead."""

    name: str = Field(description="preset name; what `perfmodel hardware list` shows and `--hardware NAME` takes")
    description: str = Field("", description="one line on what the system is")
    accelerator: Accelerator = Field(
        description="a catalogue accelerator by name (e.g. H100-SXM5-80GB), or a full Accelerator "
                    "mapping (the only way to use a part the catalogue lacks)")
    tiers: list[NetworkTier] = Field(min_length=1, description="innermost first")
    efficiency: Efficiency = Field(description="achievable fractions of the peaks (Efficiency)")
    memory_overhead_gib: Real = Field(ge=0, description="per-device memory not available to the model (runtime "
                                                        "context, comm buffers, workspace)")
    max_devices: Count | None = Field(None, description="largest cluster this preset can describe")
    shared_host: SharedHost | None = Field(None, description="set where ranks share a host's cores (CPU "
                                                             "calibrations); null: every rank has its own device")
    run_fit: RunFit | None = Field(None, description="set on a spec written by perfmodel calibrate --from-runs")
    storage: Storage | None = Field(None, description="the checkpoint store (null: perfmodel forecast's default, "
                                                      "docs/forecast.md)")
    price: Price | None = Field(None, description="on-demand list price (null: give perfmodel forecast --price)")
    host: HostLink | None = Field(None, description="each device's link to host memory (null: nothing can be "
                                                    "offloaded to the host)")
    host_cpu: HostCPU | None = Field(None, description="the host that launches the kernels: a catalogue host by name "
                                                       "(perfmodel hardware hosts) or a HostCPU mapping (perfmodel "
                                                       "calibrate writes the one it measured); null: no host priced")
    host_costs: HostCosts | None = Field(None, description="a CPU spec's per-launch host costs of the executor's stack, "
                                                           "fitted by perfmodel calibrate --device cpu (ranks that "
                                                           "compute on their host thread); null: none")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")

    @model_validator(mode="after")
    def _tiers_nest(self):
        sizes = [t.domain_size for t in self.tiers]
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            if a is None:
                raise ValueError(f"tiers.{i}.domain_size is null (unbounded: tier '{self.tiers[i].name}' spans every "
                                 f"device) but {len(sizes) - 1 - i} tier(s) follow it; valid: a domain_size on every "
                                 "tier but the last")
            if b is not None and (b < a or b % a):
                raise ValueError(f"tiers.{i + 1}.domain_size = {b} must be a multiple of tiers.{i}.domain_size = {a}")
        gemm_dtypes = [d for d in GEMM_DTYPES if d in self.accelerator.peak_tflops]
        missing = [d for d in gemm_dtypes if d not in self.efficiency.matmul_max]
        if missing:
            raise ValueError(f"efficiency.matmul_max lacks {missing}, which the accelerator supports")
        return self

    @model_validator(mode="after")
    def _overhead_fits(self):
        if self.memory_overhead_gib >= self.accelerator.hbm_capacity_gib:
            raise ValueError(f"memory_overhead_gib = {self.memory_overhead_gib} leaves nothing of the "
                             f"accelerator.hbm_capacity_gib = {self.accelerator.hbm_capacity_gib} GiB on "
                             f"{self.accelerator.name}; valid: 0 <= memory_overhead_gib < "
                             f"{self.accelerator.hbm_capacity_gib}")
        return self

    @property
    def memory_overhead_bytes(self) -> float:
        return self.memory_overhead_gib * GiB

    def on_datasheet(self, gemms: bool = True, collectives: bool = True) -> System:
        """This system without its measured kernel tables, GEMM (with the alignment-1 rates) and attention
        (`gemms`), and per-group NCCL fits (`collectives`): what the datasheet path alone prices
        (the sustained-fraction benchmark derives that path's fraction on it)."""
        acc = self.accelerator.model_copy(update={"kernel_tables": {}, "attention_table_kernel": None,
                                                           "attention_backward_rate": None,
                                                           "unaligned_matmul_tflops": {},
                                                           "grouped_gemm_slowdown": None}) \
            if gemms else self.accelerator
        tiers = [t.model_copy(update={"by_group": {}}) for t in self.tiers] if collectives else self.tiers
        return self.model_copy(update={"accelerator": acc, "tiers": tiers})

    def with_host(self, host: str | Path | HostCPU | None) -> System:
        """This system with another host (a catalogue name, a host file or a HostCPU; None: as it is)."""
        return self if host is None else self.model_copy(update={"host_cpu": load_host(host, flag="--host")})

    def check_gpus(self, gpus: int) -> None:
        if self.max_devices is not None and gpus > self.max_devices:
            raise InputError(f"gpus={gpus} exceeds {self.name}'s largest configuration ({self.max_devices} devices); valid gpus: 1..{self.max_devices}")


# ---------------------------------------------------------------------------------------------------------
# Catalogue: YAML files shipped in perfmodel.hardware_specs
# ---------------------------------------------------------------------------------------------------------

def _catalogue_dir():
    return resources.files("perfmodel.hardware_specs")


def _catalogue(kind: str) -> dict[str, object]:
    """name -> resource path for 'accelerators' or 'systems'."""
    out = {}
    for entry in (_catalogue_dir() / kind).iterdir():
        if entry.name.endswith(".yaml"):
            out[entry.name.removesuffix(".yaml")] = entry
    return out


def list_accelerators() -> list[str]:
    return sorted(read_mapping(p, n)["name"] for n, p in _catalogue("accelerators").items())


def list_systems() -> list[str]:
    return sorted(_catalogue("systems"))


def load_accelerator(name: str) -> Accelerator:
    """Catalogue accelerator by its name (e.g. 'H100-SXM5-80GB'), case-insensitive."""
    by_name = {}
    for fname, path in _catalogue("accelerators").items():
        data = read_mapping(path, f"hardware_specs/accelerators/{fname}.yaml")
        by_name[str(data.get("name", fname)).lower()] = (path, data)
    hit = by_name.get(name.lower())
    if hit is None:
        raise suggest(name, [d["name"] for _, d in by_name.values()], "accelerator")
    return Accelerator.parse(hit[1], where=f"accelerator {name}")


def _system_from_mapping(data: dict, where: str, folder: Path | None = None) -> System:
    """`data` as a System; `folder`: the folder of the file it was read from, where its tables may lie."""
    acc = data.get("accelerator")
    if isinstance(acc, str):
        try:
            data = {**data, "accelerator": load_accelerator(acc).model_dump()}
        except InputError as err:
            raise InputError(f"{where}: accelerator: {err}") from None
    elif acc is None:
        raise InputError(f"{where}: field 'accelerator' is required (a catalogue name such as H100-SXM5-80GB, or a mapping)")
    data = resolve_host(data, where)
    if folder is None:
        return System.parse(data, where=where)
    with spec_folder(folder):
        return System.parse(data, where=where)


def load_hardware(spec: str | Path | System) -> System:
    """A system by preset name (`perfmodel hardware list`) or by path to a YAML/JSON spec file (whose relative
    kernel table names are looked up beside it first: spec.hardware.kernel_tables.table_path)."""
    if isinstance(spec, System):
        return spec
    spec = str(spec)
    if looks_like_path(spec):
        return _system_from_mapping(read_mapping(Path(spec), f"hardware spec {spec}"), where=spec,
                                    folder=Path(spec).parent)
    systems = _catalogue("systems")
    key = spec.lower()
    if key not in systems:
        raise suggest(spec, systems, "hardware")
    return _system_from_mapping(read_mapping(systems[key], f"hardware_specs/systems/{key}.yaml"), where=key)


def hardware_json_schema() -> dict:
    """JSON schema of a system spec file (what `perfmodel hardware schema` prints; hardware_specs/schema.json).

    In a file, `accelerator` may also be the name of a catalogue accelerator.
    """
    schema = System.model_json_schema()
    schema["properties"]["accelerator"] = {
        "anyOf": [{"type": "string", "description": "catalogue accelerator name, e.g. H100-SXM5-80GB"},
                  {"$ref": "#/$defs/Accelerator"}],
        "description": schema["properties"]["accelerator"]["description"],
    }
    schema["properties"]["host_cpu"] = {
        "anyOf": [{"type": "string", "description": "catalogue host name, e.g. xeon-8480c"},
                  {"$ref": "#/$defs/HostCPU"}, {"type": "null"}],
        "description": schema["properties"]["host_cpu"]["description"],
    }
    return schema
