"""Release lines of a stack: the defaults one release of a framework runs a plan with.

A framework's settings change between releases while its code path stays: Megatron-Bridge's NeMo containers
(25.09 ... 26.08) run Megatron-Core's training loop, but each ships its own MoE performance recipes (token dispatcher,
expert-parallel overlap, CUDA-graph scope, recompute modules; Megatron-Bridge scripts/performance and perf_recipes at
the release tag). A release line is data (`hardware_specs/stacks/releases/NAME.yaml`): the stack profile it runs
(`profile`) and per release its recipes, rules matched on model, GPU and precision, the first match winning.

`--stack megatron-bridge@26.08` names a release (the bare line name: the newest); `spec.plan.layout.resolve` fills the plan
fields the user left unset from the matching recipe (`release_recipe`); the estimate reads the line's profile
(`profile_of`). Nothing here is fitted: every recipe cites the file it was read from.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Literal

from pydantic import Field, model_validator

from ...errors import InputError, suggest
from ...types import Precision, Schema
from ...files import read_mapping
from ..plan.recompute import RecomputeModule

GraphScope = Literal["none", "layer", "step"]
Dispatcher = Literal["alltoall", "allgather", "flex"]


class Recipe(Schema):
    """One rule of a release: where it applies (empty lists: anywhere) and the plan fields it sets there."""

    models: list[str] = Field(default_factory=list, description="model presets (ModelConfig.name) it applies to")
    gpus: list[str] = Field(default_factory=list, description="accelerators it applies to: the first word of the "
                                                              "accelerator's name (H100, B200, GB300)")
    precisions: list[str] = Field(default_factory=list, description="plan precisions it applies to (fp8 on "
                                                                    "Blackwell: the recipes' MXFP8)")
    moe_dispatcher: Dispatcher = Field(description="the token dispatcher (flex: DeepEP / HybridEP)")
    moe_overlap: bool = Field(description="expert-parallel communication overlapped with the other micro-batch "
                                          "(overlap_moe_expert_parallel_comm), where the layout allows it")
    cuda_graphs: Literal["none", "step"] = Field(description="what the release captures in CUDA graphs as the launch "
                                                             "queue prices it: none, or step (full-iteration graphs)")
    graph_modules: list[str] = Field(default_factory=list, description="Transformer Engine module graphs (scopes "
                                     "attn, moe_router, moe_preprocess) the recipe captures; recorded, priced eager")
    recompute_modules: list[RecomputeModule] | None = Field(
        None, description="selective recompute modules ([]: no recompute); null: the recipe leaves recompute alone")
    moe_capacity_factor: float | None = Field(None, gt=0, description="token dropping at this capacity factor "
                                              "(Megatron-Core moe_expert_capacity_factor); null: dropless")
    moe_pad_to_capacity: bool = Field(False, description="every expert's input padded to its capacity "
                                                         "(moe_pad_expert_input_to_capacity)")
    recompute_full: bool = Field(False, description="the recipe checkpoints every whole block (NeMo AutoModel's "
                                                    "activation_checkpointing: true); excludes recompute_modules")
    source: str = Field(description="the recipe file and key it was read from")

    @model_validator(mode="after")
    def _one_recompute(self):
        if self.recompute_full and self.recompute_modules is not None:
            raise ValueError(f"recompute_full with recompute_modules {self.recompute_modules}: a recipe sets one of "
                             "them; valid: recompute_full true and recompute_modules null, or recompute_full false")
        return self

    def matches(self, model: str, gpu: str, precision: str) -> bool:
        return ((not self.models or model in self.models) and (not self.gpus or gpu in self.gpus)
                and (not self.precisions or precision in self.precisions))


class Defaults(Schema):
    """What a release's performance scripts set for every model they train, MoE and dense alike, beside the
    per-model recipes: the gradient reduction dtype and, for dense models, tensor-parallel communication overlap."""

    grad_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="the dtype gradients are reduced in (Megatron-Core DistributedDataParallelConfig."
                          "grad_reduce_in_fp32 false: bf16); null: the profile's")
    grad_dtype_precisions: list[Precision] = Field(default_factory=list, description="plan precisions that dtype "
                                                                                      "applies to ([]: every one)")
    dense_tp_comm_overlap: bool | None = Field(
        None, description="a dense model's tensor-parallel all-gathers / reduce-scatters beside its GEMMs "
                          "(CommOverlapConfig tp_comm_overlap, userbuffers) where tp > 1 with sequence parallelism; "
                          "null: the profile's")
    tp_overlap_off_precisions: list[Precision] = Field(default_factory=list, description="plan precisions the "
                                                       "scripts turn that overlap off at (nvfp4: fp4)")
    source: str = Field(description="the scripts and lines these were read from (Llama 3 / 3.1's performance "
                                    "scripts: applied to every dense model, as no other dense model's were read)")

    def fields(self, moe: bool, precision: str) -> dict:
        """The plan fields these set for a model (MoE or dense) at a precision: grad_dtype, tp_comm_overlap."""
        out = {}
        if self.grad_dtype is not None and (not self.grad_dtype_precisions or precision in self.grad_dtype_precisions):
            out["grad_dtype"] = self.grad_dtype
        if self.dense_tp_comm_overlap is not None and not moe:
            out["tp_comm_overlap"] = self.dense_tp_comm_overlap and precision not in self.tp_overlap_off_precisions
        return out


class Release(Schema):
    """One release of a line: its versions and its recipes (the last one matching every plan)."""

    version: str = Field(description="the release name a stack takes after '@' (a NeMo container: 26.08)")
    bridge: str = Field(description="the framework's tag (or commit) of that release")
    megatron_core: str | None = Field(None, description="the Megatron-Core version the release ships; null: it runs "
                                                        "no Megatron-Core (a PyTorch-native framework)")
    source: str = Field(description="where its recipes were read")
    extends: str | None = Field(None, description="an earlier release of the line whose recipes follow this one's (a "
                                "patch container listing only the rules it changes); null: its recipes are all")
    defaults: Defaults | None = Field(None, description="what its scripts set for every model (null: nothing beyond "
                                                        "the recipes; a release that extends another takes its)")
    recipes: list[Recipe] = Field(min_length=1, description="rules, first match wins")

    @model_validator(mode="after")
    def _last_matches_all(self):
        last = self.recipes[-1]
        if self.extends is None and (last.models or last.gpus or last.precisions):
            raise ValueError(f"release {self.version}: the last recipe must match every plan (no models, gpus or "
                             "precisions): what a model without a recipe runs with")
        return self

    def recipe(self, model: str, gpu: str, precision: str) -> Recipe:
        """The first recipe matching the model preset, accelerator and precision."""
        return next(r for r in self.recipes if r.matches(model, gpu, precision))


class ReleaseLine(Schema):
    """A framework's releases over one stack profile."""

    name: str = Field(description="the line's name, what `--stack NAME@VERSION` takes")
    framework: str = Field("Megatron-Bridge", description="the framework whose releases these are, as printed")
    profile: str = Field(description="the stack profile (hardware_specs/stacks) its releases run")
    profile_fields: dict[str, object] = Field(
        default_factory=dict, description="fields of that profile the line's releases run differently (NeMo "
                                          "AutoModel: bf16 parameters and optimizer state); each cited in sources")
    sources: dict[str, str] = Field(default_factory=dict, description="profile field -> citation")
    releases: list[Release] = Field(min_length=1, description="oldest first; the last is what the bare name means")

    @model_validator(mode="after")
    def _extends_earlier(self):
        earlier: list[str] = []
        for r in self.releases:
            if r.extends is not None and r.extends not in earlier:
                raise ValueError(f"release {r.version}: extends = {r.extends!r}, not an earlier release of "
                                 f"{self.name}; valid: {', '.join(earlier) or 'none (it is the first)'}")
            earlier.append(r.version)
        return self

    def resolved(self) -> "ReleaseLine":
        """The line with each release that `extends` an earlier one running its own rules, then that release's."""
        done: dict[str, Release] = {}
        for r in self.releases:
            done[r.version] = r if r.extends is None else r.model_copy(
                update={"recipes": r.recipes + done[r.extends].recipes,
                        "defaults": r.defaults or done[r.extends].defaults})
        return self.model_copy(update={"releases": list(done.values())})

    def release(self, version: str | None) -> Release:
        if version is None:
            return self.releases[-1]
        for r in self.releases:
            if r.version == version:
                return r
        raise InputError(f"stack {self.name}@{version}: no such release; valid: "
                         f"{', '.join(f'{self.name}@{r.version}' for r in self.releases)}")


@cache
def _line_files() -> dict:
    root = resources.files("perfmodel.hardware_specs") / "stacks" / "releases"
    return {e.name.removesuffix(".yaml"): e for e in root.iterdir() if e.name.endswith(".yaml")}


_LINES: dict[str, ReleaseLine] = {}


def release_lines() -> list[str]:
    """The release lines' names (megatron-bridge, nemo-automodel)."""
    return sorted(_line_files())


def load_line(name: str) -> ReleaseLine:
    key = name.lower()
    if key not in _LINES:
        files = _line_files()
        if key not in files:
            raise suggest(name, files, "release line")
        _LINES[key] = ReleaseLine.parse(read_mapping(files[key], f"hardware_specs/stacks/releases/{key}.yaml"),
                                        where=key).resolved()
    return _LINES[key]


def release_label(line: ReleaseLine, r: Release) -> str:
    """'Megatron-Bridge v0.4.0, Megatron-Core 0.17.0' (or without Megatron-Core where the release runs none)."""
    return f"{line.framework} {r.bridge}" + (f", Megatron-Core {r.megatron_core}" if r.megatron_core else "")


def split_stack(spec: str) -> tuple[str, str | None]:
    """'megatron-bridge@26.08' -> ('megatron-bridge', '26.08'); a name without '@' -> (name, None)."""
    name, at, version = str(spec).partition("@")
    return name, (version if at else None)  # 'name@' names no release: refused


def is_release(spec: str) -> bool:
    """Whether a stack name is a release line's (with or without '@VERSION')."""
    return split_stack(spec)[0].lower() in _line_files()


def profile_of(spec: str) -> str:
    """The stack profile a stack name prices: a release line's profile (after checking the version), else the name."""
    if not is_release(spec):
        return spec
    name, version = split_stack(spec)
    line = load_line(name)
    line.release(version)  # refuses an unknown version
    return line.profile


def profile_fields(spec: str) -> dict:
    """The profile fields a release line overrides ({} for a stack that is not a release line, or a line that runs
    its profile as it is)."""
    if not is_release(spec):
        return {}
    return load_line(split_stack(spec)[0]).profile_fields


def release_recipe(spec: str, model: str, accelerator: str, precision: str) -> tuple[Release, Recipe] | None:
    """(release, the recipe it runs this model with on this accelerator at this precision), or None for a stack
    that is not a release line. `accelerator`: the accelerator's name; its first word is matched."""
    if not is_release(spec):
        return None
    name, version = split_stack(spec)
    release = load_line(name).release(version)
    return release, release.recipe(model, accelerator.split("-")[0], precision)


CAPACITY_FIELDS = ("moe_capacity_factor", "moe_pad_to_capacity")  # one setting: the user's whole, or the recipe's


def release_fields(spec: str, model: str, accelerator: str, generation: str, precision: str,
                   user_capacity: bool = False) -> tuple[Recipe, dict] | None:
    """(the recipe, the fields it sets whatever the layout) for a MoE model `model` on `accelerator` (of
    `generation`) at `precision` under a release line's stack, None for another stack: the token dispatcher, the
    CUDA graphs and, at fp8 on Blackwell, the mxfp8 recipe (the releases' fp8 there is fp8_mx, which their rules
    describe), and the recipe's token dropping (capacity factor, padding). EP overlap and recompute depend on the layout: spec.plan.moe_rules.apply_release decides them."""
    found = release_recipe(spec, model, accelerator, precision)
    if found is None:
        return None
    r = found[1]
    fp8 = "mxfp8" if precision == "fp8" and generation == "blackwell" else None
    fields = {"moe_dispatcher": r.moe_dispatcher, "cuda_graphs": r.cuda_graphs, "fp8_recipe": fp8}
    if not user_capacity:  # the user who sets either capacity field takes neither from the recipe (CAPACITY_FIELDS)
        fields.update(moe_capacity_factor=r.moe_capacity_factor,
                      moe_pad_to_capacity=r.moe_pad_to_capacity if r.moe_capacity_factor is not None else None)
    return r, fields


def release_defaults(spec: str, moe: bool, precision: str) -> dict:
    """The plan fields a release's scripts set for every model (Defaults.fields: grad_dtype, a dense model's
    tp_comm_overlap); {} for a stack that is not a release line, or a release that sets none."""
    if not is_release(spec):
        return {}
    name, version = split_stack(spec)
    d = load_line(name).release(version).defaults
    return {} if d is None else d.fields(moe, precision)


def pinned(spec: str) -> str:
    """A stack name with its release spelled out: 'megatron-bridge' -> 'megatron-bridge@26.08' (the newest), a
    release or a profile as it is."""
    if not is_release(spec) or split_stack(spec)[1] is not None:
        return spec
    return f"{spec}@{load_line(spec).releases[-1].version}"
