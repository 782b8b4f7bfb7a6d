"""The host that launches a system's kernels: its CPU, and what one call of each kind costs its launching thread.

A step's host time is counts x per-call costs. The software stack says how many calls of each kind a layer's
forward, backward and recompute make (`spec.stack.profile.HostProfile`: counted from the stack's code); the host says what
one call of each kind costs (`HostCalls`): measured on that host class where a public measurement exists
(shared/data/host/host_overheads.md), by `perfmodel calibrate --device cuda` on the user's own machine
(calibrate.host.calls), or derived from a measured host by the ratio of the kinds both measured (each derivation
stated in `sources`). The catalogue is `hardware_specs/hosts/NAME.yaml`; a system names its host
(`System.host_cpu`), and `--host NAME` prices a plan on another (a lent cloud VM against a DGX, say). A CPU
testbed whose ranks outnumber its cores says so in `SharedHost`.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import Field, model_validator

from ...errors import InputError, suggest
from ...types import Count, Real, Schema
from ...files import looks_like_path, read_mapping

# The kinds of call a stack's host thread makes (HostCalls' fields, without the _s); what each probe times is
# calibrate.host.calls's docstring.
CALL_KINDS = ("eager_op", "view_op", "autograd_node", "module_call", "fused_module", "list_tensor", "dtensor_op",
              "nccl_call", "zero3_hook", "compiled_entry", "compiled_kernel", "graph_replay", "kernel_launch")


class HostCalls(Schema):
    """Host seconds per call, by kind: what the launching thread spends on one call before it returns (the
    kernels it launches run on the device afterwards)."""

    eager_op_s: Real = Field(ge=0, description="one eager PyTorch op that launches a kernel: Python, the dispatcher, "
                                               "autograd's recording where grads are on, the launch (dgxc-"
                                               "benchmarking's torch.matmul loop)")
    view_op_s: Real = Field(ge=0, description="one eager op that launches nothing: a view, reshape, transpose or "
                                              "split (Python and the dispatcher alone)")
    autograd_node_s: Real = Field(ge=0, description="one node of a backward pass run by the autograd engine, its "
                                                    "kernel's launch included")
    module_call_s: Real = Field(ge=0, description="one call of a torch.nn leaf module of the nn.Linear class: "
                                                  "Module.__call__, its hooks and the op it wraps (Transformer "
                                                  "Engine issue #2053's probe)")
    fused_module_s: Real = Field(ge=0, description="one call of a fused framework module (a Transformer Engine "
                                                   "Linear or LayerNormLinear, an apex fused norm): its Python, its "
                                                   "quantizers and the kernels it launches")
    list_tensor_s: Real = Field(ge=0, description="one tensor's turn in a multi-tensor call (a fused or foreach "
                                                  "optimizer step, clip_grad_norm_): its state and gradient read and "
                                                  "grouped by device and dtype in Python")
    dtensor_op_s: Real = Field(ge=0, description="one op on DTensors: DTensor's dispatch (sharding propagation, the "
                                                 "local op, the output's wrapping); per tensor of a foreach op over "
                                                 "DTensor lists")
    zero3_hook_s: Real = Field(ge=0, description="one ZeRO-3 weight gather or gradient reduce-scatter as FSDP's hooks "
                                                 "issue it, in a step: the hooks' bookkeeping, the copy-in and "
                                                 "copy-out, the collective's call")
    nccl_call_s: Real = Field(ge=0, description="one torch.distributed collective or send/recv call: the process "
                                                "group's work object, stream events and NCCL's enqueue")
    compiled_entry_s: Real = Field(ge=0, description="entering one torch.compile'd region: guards, the wrapper, "
                                                     "its output allocation (its kernels apart)")
    compiled_kernel_s: Real = Field(ge=0, description="one kernel launched from a compiled region's wrapper "
                                                      "(Inductor's launcher)")
    graph_replay_s: Real = Field(ge=0, description="one CUDA-graph replay (cudaGraphLaunch) of a captured region")
    kernel_launch_s: Real = Field(ge=0, description="one bare cudaLaunchKernel from C/C++ (what a native stack such "
                                                    "as llm.c pays per kernel)")

    def cost(self, kind: str) -> float:
        """Seconds per call of `kind` (CALL_KINDS)."""
        return getattr(self, f"{kind}_s")

    def scaled(self, factor: float, kinds=CALL_KINDS) -> HostCalls:
        """The costs of `kinds` (every kind by default) times `factor`: a host `factor` times slower at them."""
        return HostCalls(**{f"{k}_s": self.cost(k) * (factor if k in kinds else 1.0) for k in CALL_KINDS})


class HostCPU(Schema):
    """A system's host: the CPU that runs each rank's launching thread, and its per-call costs."""

    name: str = Field(description="host name; what `perfmodel hardware hosts` lists and `--host NAME` takes")
    description: str = Field(description="one line on the host and where it is found")
    cpu: str = Field(description="CPU model")
    sockets: Count = Field(description="CPU sockets per node")
    cores_per_socket: Count = Field(description="physical cores per socket")
    calls: HostCalls = Field(description="host seconds per call, by kind (HostCalls)")
    sources: dict[str, str] = Field(default_factory=dict, description="field name (calls.KIND_s for a cost) -> "
                                                                      "citation")

    @model_validator(mode="after")
    def _cited(self):
        missing = [f"calls.{k}_s" for k in CALL_KINDS if f"calls.{k}_s" not in self.sources]
        if missing:
            raise ValueError(f"sources lacks {', '.join(missing)}; valid: every per-call cost cites a public "
                             "measurement, a calibrate run or the derivation that gives it")
        return self

    @property
    def speed(self) -> float:
        """The host's eager-op speed relative to the DGX H100's host (REFERENCE_HOST): that host's eager_op_s / its
        own (what a cost measured on another host is scaled by; dimensionless)."""
        return reference_host().calls.eager_op_s / self.calls.eager_op_s


REFERENCE_HOST = "xeon-8480c"  # the DGX H100's host: HostCPU.speed's unit, and what a system without a host is priced on


@cache
def reference_host() -> HostCPU:
    """The catalogue's REFERENCE_HOST (its eager op: dgxc-benchmarking's 6.8 us on a DGX H100)."""
    return load_host(REFERENCE_HOST)


def _catalogue() -> dict[str, object]:
    """name -> resource path of hardware_specs/hosts/NAME.yaml."""
    folder = resources.files("perfmodel.hardware_specs") / "hosts"
    return {e.name.removesuffix(".yaml"): e for e in folder.iterdir() if e.name.endswith(".yaml")}


def list_hosts() -> list[str]:
    return sorted(_catalogue())


def load_host(spec: str | Path | HostCPU, flag: str | None = None) -> HostCPU:
    """A host by catalogue name (`perfmodel hardware hosts`) or by path to a YAML/JSON host file; `flag`: the
    option or argument that named it, which a refusal names first."""
    if isinstance(spec, HostCPU):
        return spec
    if flag is not None:
        try:
            return load_host(spec)
        except InputError as err:
            raise InputError(f"{flag} {spec}: {err}") from None
    spec = str(spec)
    if looks_like_path(spec):
        return HostCPU.parse(read_mapping(Path(spec), f"host spec {spec}"), where=spec)
    hosts = _catalogue()
    key = spec.lower()
    if key not in hosts:
        raise suggest(spec, hosts, "host")
    return HostCPU.parse(read_mapping(hosts[key], f"hardware_specs/hosts/{key}.yaml"), where=key)


def resolve_host(data: dict, where: str) -> dict:
    """A system mapping whose `host_cpu` names a catalogue host, with that host's mapping in its place."""
    name = data.get("host_cpu")
    if not isinstance(name, str):
        return data
    try:
        return {**data, "host_cpu": load_host(name).model_dump()}
    except InputError as err:
        raise InputError(f"{where}: host_cpu: {err}") from None


class SharedHost(Schema):
    """A host whose ranks outnumber its cores (a CPU testbed: torch ranks are processes of one thread each).

    accelerator.peak_tflops and hbm_bandwidth_tbps are then per-rank rates measured with all `ranks` computing at
    once; a rank that computes while others wait (a pipeline stage ahead of the slowest) gets up to a whole
    core (cost.compute.kernel_time.shared_core_speedup)."""

    ranks: Count = Field(description="ranks the host ran at once when its rates were measured")
    cores: Count = Field(description="cores those ranks shared (the CPUs the processes could run on)")
    sources: dict[str, str] = Field(default_factory=dict, description="field name -> citation")
