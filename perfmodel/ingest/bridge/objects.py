"""The objects a Megatron-Bridge recipe read as data is made of (perfmodel.ingest.bridge.recipe follows the recipe;
perfmodel.ingest.bridge.calls reads the Bridge functions it calls that are not among the files)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any


class Stop(Exception):
    """A `raise` the recipe reaches (caught by an enclosing `try`, else the recipe fails to build)."""


@dataclass
class Obj:
    """A config object: a ConfigContainer, a section (TrainingConfig), a model provider or a precision recipe."""

    kind: str  # the call that made it: 'ConfigContainer', 'TrainingConfig', 'AutoBridge', 'bf16_mixed', ...
    origin: Any = None  # the model's HF id (AutoBridge) or provider class; the precision recipe's name
    attrs: dict[str, Any] = field(default_factory=dict)
    auto: bool = False  # the result of a function not followed: its sections appear as the recipe names them
    at: str = ""  # where a function not followed was called


@dataclass
class Write:
    """One value stated for an attribute of an object, where it was stated."""

    obj: Obj
    attr: str
    value: Any
    where: str


@dataclass
class Noted:
    """A statement or keyword the recipe states that sets no attribute: a call not followed, a branch not known."""

    key: str
    value: Any
    where: str
    why: str


@dataclass
class Module:
    file: str
    tree: ast.Module
    names: dict[str, Any]
    functions: dict[str, ast.FunctionDef]


def member(owner: Obj, attr: str) -> Obj:
    """owner.attr as a config section, made where the recipe has not built it (a base recipe not followed)."""
    got = owner.attrs.get(attr)
    if not isinstance(got, Obj):
        got = owner.attrs[attr] = Obj("call", f"{owner.origin}.{attr}", auto=True) if owner.auto else Obj(attr)
    return got
