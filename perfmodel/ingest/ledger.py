"""What a framework's config became: every key it states, mapped onto a model or plan field, or named as not
priced with the reason, and the result (`Imported`) that `perfmodel import` turns into a plan file.

A reader (perfmodel.ingest.<framework>_in) walks the keys its files state and tells the `Ledger` what each became.
The ledger refuses a config that contradicts itself: two keys setting one field to different values are named
together in one line. Nothing here knows any framework's vocabulary or imports the cost model.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ..errors import InputError
from ..types import Count, Schema
from ..spec.model.config import ModelConfig

Fate = Literal["mapped", "not priced", "default"]


class KeyFate(Schema):
    """One key of the config and what it became."""

    key: str = Field(description="the key as the framework spells it (--tensor-model-parallel-size, "
                                 "parallelism.tensor_parallel_degree, ici_fsdp_parallelism)")
    value: str = Field(description="its value as written (text)")
    source: str = Field(description="the file (and the part of it) the key came from")
    fate: Fate = Field(description="mapped: it set the fields in `became`; not priced: the model has no use for it "
                                   "(`why` says why); default: the framework's default, stated by no file, that a "
                                   "field was taken from")
    became: str = Field("", description="the fields it set, 'plan.tp = 4, plan.dp = 64' (empty when not priced)")
    why: str = Field("", description="not priced: the reason; mapped: how it was read, where that needs saying")

    def line(self) -> str:
        """One line of `perfmodel import --explain`."""
        head = f"{self.key} = {self.value}"
        if self.fate == "not priced":
            return f"{head}: not priced: {self.why}"
        tail = f" ({self.why})" if self.why else ""
        became = self.became or "no field of its own"  # a switch another key carries (--group-query-attention)
        return f"{head} -> {became}{tail}" + (" [the framework's default]" if self.fate == "default" else "")


class Imported(Schema):
    """A framework config read as data: the model, the plan fields, what the launcher states, and every key's fate."""

    framework: str = Field(description="megatron | bridge | torchtitan | maxtext | deepspeed")
    files: list[str] = Field(description="the files read, in order")
    name: str | None = Field(None, description="the config chosen among several a file defines (--name)")
    model: ModelConfig = Field(description="the model the config trains")
    plan: dict[str, Any] = Field(description="Plan fields the config sets (spec.plan.layout.Plan); the rest keep Plan's "
                                             "defaults")
    hardware: str | None = Field(None, description="the hardware preset the config names (MaxText's TPU type), if any")
    gpus: Count | None = Field(None, description="devices the launch states (nodes x processes per node), if any")
    keys: list[KeyFate] = Field(description="every key read, in the order read")
    set_by: dict[str, str] = Field(default_factory=dict, description="field -> the key that set it ('plan.tp' -> "
                                                                      "'--tensor-model-parallel-size = 4')")
    given_unused: list[str] = Field(default_factory=list, description="flags given for what files leave out "
                                    "(--vocab-size, --script-args) that no file needed, one line each")
    deferred: dict[str, Any] = Field(default_factory=dict, description="what the reader completes once the device "
                                     "count and system are known (`complete(deferred, gpus, system)` of its module: "
                                     "MaxText's mesh axes of -1, its per-device batch); empty when nothing waits")

    def not_priced(self) -> list[KeyFate]:
        return [k for k in self.keys if k.fate == "not priced"]


def text_of(value) -> str:
    """A value as the explanation prints it."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


class Ledger:
    """The running account of one import: the fields set so far and which key set each.

    `set(key, value, source, **fields)` maps a key onto fields ("plan.tp", "model.hidden", "launch.gpus",
    "launch.hardware"); `skip(key, value, source, why)` names a key as not priced; `default(...)` records a field taken
    from the framework's default where no file states it. A field set twice to different values is refused naming
    both keys; set twice to the same value, the second key is recorded as mapped too.
    """

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self.fields: dict[str, Any] = {}
        self.set_by: dict[str, str] = {}
        self.keys: list[KeyFate] = []

    def set(self, key: str, value, source: str, why: str = "", **fields) -> None:
        for name, new in fields.items():
            field = name.replace("__", ".")
            if field in self.fields and self.fields[field] != new:
                raise InputError(f"{self.framework} config contradicts itself: {self.set_by[field]} sets {field} = "
                                 f"{self.fields[field]!r} but {key} = {text_of(value)} ({source}) sets it to {new!r}; "
                                 "valid: one of them, or both agreeing")
            self.set_by.setdefault(field, f"{key} = {text_of(value)}")
            self.fields[field] = new
        became = ", ".join(f"{n.replace('__', '.')} = {text_of(v)}" for n, v in fields.items())
        self.keys.append(KeyFate(key=key, value=text_of(value), source=source, fate="mapped", became=became, why=why))

    def default(self, key: str, value, why: str = "", **fields) -> None:
        """A field the config leaves to the framework's default: set only where no key has set it."""
        fields = {n: v for n, v in fields.items() if n.replace("__", ".") not in self.fields}
        if not fields:
            return
        for name, new in fields.items():
            self.fields[name.replace("__", ".")] = new
            self.set_by[name.replace("__", ".")] = f"{key} (default {text_of(value)})"
        became = ", ".join(f"{n.replace('__', '.')} = {text_of(v)}" for n, v in fields.items())
        self.keys.append(KeyFate(key=key, value=text_of(value), source=f"{self.framework}'s default", fate="default",
                                 became=became, why=why))

    def skip(self, key: str, value, source: str, why: str) -> None:
        self.keys.append(KeyFate(key=key, value=text_of(value), source=source, fate="not priced", why=why))

    def get(self, field: str, default=None):
        return self.fields.get(field, default)

    def has(self, field: str) -> bool:
        return field in self.fields

    def group(self, prefix: str) -> dict[str, Any]:
        """The fields under `prefix.` ("plan", "model", "launch"), without the prefix."""
        return {k.split(".", 1)[1]: v for k, v in self.fields.items() if k.startswith(prefix + ".")}

    def imported(self, files, model: ModelConfig, name: str | None = None, deferred: dict | None = None) -> Imported:
        launch = self.group("launch")
        return Imported(framework=self.framework, files=[str(f) for f in files], name=name, model=model,
                        plan=self.group("plan"), hardware=launch.get("hardware"), gpus=launch.get("gpus"),
                        keys=self.keys, set_by=self.set_by, deferred=deferred or {})
