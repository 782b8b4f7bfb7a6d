"""A sweep point's system: a base system with each axis's value applied (`point_system`).

A named resource (schema.RESOURCES) sets what it names; any other axis name is a dotted path into the System spec
(`accelerator.compute_units`, `tiers.1.latency_us`, `efficiency.matmul_max.bf16`). A factor multiplies the base's
value, a value replaces it. The technology-node axis applies a preset of `hardware_specs/technology_nodes.yaml`
(`node_changes`). The result is validated as any spec file is, so a point that is not a valid system (a capacity
below the runtime's overhead, say) is refused with the spec's own message.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources

from pydantic import Field, ValidationError

from ..errors import InputError, suggest
from ..types import PositiveReal, Schema
from ..files import read_mapping
from ..spec.hardware.system import System, load_hardware


class InvalidPoint(InputError):
    """A point whose values make no valid system (a capacity below the runtime's overhead, a power limit below the
    part's memory-bound draw): a result of the sweep, not bad input. An axis that names no field is bad input."""


class Memory(Schema):
    """A memory generation: one stack's interface and shipped capacity."""

    name: str
    pin_gbps: PositiveReal
    bus_bits: int = Field(gt=0)
    bandwidth_per_stack_gbps: PositiveReal
    capacity_per_stack_gib: PositiveReal
    sources: dict[str, str] = Field(default_factory=dict)


class Node(Schema):
    """A technology node's factors relative to the file's reference node, and the memory and links that ship with
    it."""

    name: str
    year: int
    logic_density: PositiveReal = Field(description="logic transistors per mm^2 / the reference's")
    logic_speed: PositiveReal = Field(description="clock at iso power / the reference's (recorded, not priced: the "
                                                  "die's clock is held, `node_flops`)")
    logic_power: PositiveReal = Field(description="power at iso clock / the reference's")
    sram_density: PositiveReal = Field(description="SRAM bit density / the reference's (recorded, not priced: the "
                                                   "cost model has no on-chip SRAM capacity)")
    memory: str
    memory_stacks: int = Field(gt=0)
    scale_up_gbps: PositiveReal = Field(description="per-device scale-up bandwidth, GB/s per direction")
    scale_out_gbps: PositiveReal = Field(description="per-device scale-out bandwidth, GB/s per direction")
    sources: dict[str, str] = Field(default_factory=dict)


class Nodes(Schema):
    reference: str
    nodes: list[Node]
    memories: list[Memory]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name.lower() == str(name).lower():
                return n
        raise suggest(str(name), [n.name for n in self.nodes], "technology node")

    def memory(self, name: str) -> Memory:
        for m in self.memories:
            if m.name.lower() == name.lower():
                return m
        raise InputError(f"technology node memory {name!r} is not in memories; valid: "
                         f"{', '.join(m.name for m in self.memories)}")


@lru_cache(maxsize=1)
def technology_nodes() -> Nodes:
    """The presets (hardware_specs/technology_nodes.yaml), each number with its source."""
    path = resources.files("perfmodel.hardware_specs") / "technology_nodes.yaml"
    return Nodes.parse(read_mapping(path, "hardware_specs/technology_nodes.yaml"),
                       where="hardware_specs/technology_nodes.yaml")


def node_flops(n: Node) -> float:
    """Peak FLOP/s of a node's die relative to the reference node's: the die keeps its area, its board power and its
    clock (DeepFlow's technology scaling, Ardalani et al., github.com/nanocad-lab/DeepFlow: a fixed area and power
    budget filled with compute units, "freq. does not scale"), so it holds `logic_density` times the units, and
    those units draw `logic_power` times the power each at that clock: the units that can run at once are
    min(logic_density, 1 / logic_power) times the reference's (area-bound where the node's density gained more
    than its power per unit fell, power-bound where less). Dimensionless."""
    return min(n.logic_density, 1.0 / n.logic_power)


def node_changes(base_node: str, node: str) -> dict[str, tuple[str, float]]:
    """What moving a part from `base_node` to `node` changes, as (factor | value, number) per resource: peak FLOP/s x
    node_flops(node) / node_flops(base) (the board power held); the memory generation that ships with the node,
    stacks x one stack's bandwidth (TB/s) and capacity (GiB); the node's scale-up and scale-out link generations,
    GB/s per device and direction. Sources: hardware_specs/technology_nodes.yaml (each number),
    and the chain of foundry claims kept with the sweep benchmark's results."""
    t = technology_nodes()
    a, b = t.node(base_node), t.node(node)
    mem = t.memory(b.memory)
    return {
        "flops": ("factor", node_flops(b) / node_flops(a)),
        "hbm_bandwidth": ("value", b.memory_stacks * mem.bandwidth_per_stack_gbps / 1000),  # TB/s
        "hbm_capacity": ("value", b.memory_stacks * mem.capacity_per_stack_gib),
        "scale_up_bandwidth": ("value", b.scale_up_gbps),
        "scale_out_bandwidth": ("value", b.scale_out_gbps),
    }


def _set_path(d: dict, path: str, how: str, x: float) -> None:
    """Set (`how` value) or multiply (factor) the number at dotted `path` of spec dict `d`."""
    keys, node = path.split("."), d
    for i, k in enumerate(keys[:-1]):
        node = _child(node, k, ".".join(keys[: i + 1]))
    last = keys[-1]
    old = _child(node, last, path)
    if not isinstance(old, (int, float)) or isinstance(old, bool):
        if old is None and how == "value":
            old = 0.0
        else:
            raise InputError(f"axes.{path}: the base system's value is {old!r}, not a number; valid: a path to a "
                             "number of the System spec (perfmodel hardware schema), or a named resource")
    new = x if how == "value" else old * x
    if isinstance(node, list):
        node[int(last)] = new
    else:
        node[last] = round(new) if isinstance(old, int) and not isinstance(old, bool) and float(new).is_integer() else new


def _child(node, key: str, where: str):
    if isinstance(node, list):
        if not key.isdigit() or int(key) >= len(node):
            raise InputError(f"axes.{where}: index {key} is outside the list of {len(node)}; valid: 0..{len(node) - 1}")
        return node[int(key)]
    if not isinstance(node, dict) or key not in node:
        valid = ", ".join(sorted(node)) if isinstance(node, dict) else "none (not a mapping)"
        raise InputError(f"axes.{where} is not a field of the system spec; valid here: {valid}")
    return node[key]


def _apply(d: dict, name: str, how: str, x: float) -> None:
    """Apply resource `name` (schema.RESOURCES) or a dotted spec path to spec dict `d`."""
    acc, tiers = d["accelerator"], d["tiers"]
    scale = (lambda old: x) if how == "value" else (lambda old: old * x)
    if name == "flops":
        if how == "value":  # an absolute bf16 rate: every dtype keeps its ratio to bf16
            x, how = x / acc["peak_tflops"]["bf16"], "factor"
        acc["peak_tflops"] = {k: v * x for k, v in acc["peak_tflops"].items()}
    elif name == "hbm_bandwidth":
        acc["hbm_bandwidth_tbps"] = scale(acc["hbm_bandwidth_tbps"])
    elif name == "hbm_capacity":
        acc["hbm_capacity_gib"] = scale(acc["hbm_capacity_gib"])
    elif name == "power":
        if acc.get("tdp_w") is None and how == "factor":
            raise InputError(f"axes.power: {acc['name']} has no tdp_w to scale; valid: values (W)")
        acc["tdp_w"] = scale(acc["tdp_w"] or 0.0)
        if acc.get("power"):
            acc["power"]["limit_w"] = scale(acc["power"]["limit_w"])
    elif name == "price":
        if d.get("price") is None:
            if how == "factor":
                raise InputError(f"axes.price: {d['name']} has no list price to scale; valid: values ($ per "
                                 "device-hour)")
            d["price"] = {"usd_per_device_hour": x, "date": "sweep", "source": "sweep axis price"}
        else:
            d["price"]["usd_per_device_hour"] = scale(d["price"]["usd_per_device_hour"])
    elif name in ("scale_up_size", "scale_up_bandwidth", "scale_out_bandwidth"):
        if len(tiers) < 2:
            raise InputError(f"axes.{name}: {d['name']} has one network tier ({tiers[0]['name']}); valid: a system "
                             "with a scale-up and a scale-out tier")
        if name == "scale_up_size":
            size = max(1, round(scale(tiers[0]["domain_size"])))
            tiers[0]["domain_size"] = size
            for t in tiers[1:]:
                if t["domain_size"] is not None:
                    t["domain_size"] = math.ceil(t["domain_size"] / size) * size
        else:
            t = tiers[0 if name == "scale_up_bandwidth" else -1]
            t["bandwidth_gbps"] = scale(t["bandwidth_gbps"])
    else:
        _set_path(d, name, how, x)


def point_system(base: System, values: dict[str, float | str], axes: dict, node_base: str | None = None) -> System:
    """`base` with every axis value of a point applied in the sweep file's order of axes (`axes`: name -> schema.Axis,
    for whether a value is a factor; a technology node sets memory and links, so an hbm_* axis after it changes
    the node's), named `<base> <axis>=<value> ...`; InvalidPoint where the result is not a valid system."""
    if not values:
        return base
    d = base.model_dump()
    label = []
    for name, v in values.items():
        axis = axes[name]
        if name == "technology_node":
            for res, (how, x) in node_changes(node_base or axis.base, str(v)).items():
                _apply(d, res, how, x)
            label.append(f"node={v}")
            continue
        how = "factor" if (axis.factors is not None or (axis.ranged and axis.of == "factor")) else "value"
        _apply(d, name, how, float(v))
        label.append(f"{name}{'x' if how == 'factor' else '='}{v:g}")
    d["name"] = f"{base.name} " + " ".join(label)
    d["sources"] = dict(d.get("sources") or {}, sweep=f"hypothetical: {base.name} with " + ", ".join(label))
    try:
        return System.model_validate(d)
    except (ValidationError, InputError) as err:  # the spec's own checks: one line
        reason = err.errors()[0]["msg"].removeprefix("Value error, ") if isinstance(err, ValidationError) else str(err)
        raise InvalidPoint(f"point {' '.join(label)} of {base.name} is not a valid system: {reason}") from None


def base_system(name: str, pricing: str) -> System:
    """A base system as the sweep prices it: with its measured tables (`tables`) or on its datasheet alone."""
    s = load_hardware(name)
    return s if pricing == "tables" else s.on_datasheet()
