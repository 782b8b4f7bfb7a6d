"""A framework's own config in: Megatron-LM, Megatron-Bridge, torchtitan, MaxText and DeepSpeed configs read as data
(never run) into a model and a plan, every key accounted for (`perfmodel import`, `predict --config`, docs/plans.md).

This module holds the entry points: `read_config` runs the framework's reader; `plan_of` turns what it read into a
model, a system and a resolved plan once the hardware and the device count are known.

- `megatron`, `bridge`, `torchtitan`, `maxtext`, `deepspeed`: one reader per framework, each with its key table.
- `shell`: launch scripts read as bash would read them.
- `serving`: a vLLM or SGLang server's and a serving benchmark's command lines (and inference-perf configs) read into
  `perfmodel infer`'s flags (`infer --server-cmd / --bench-cmd / --bench-file`), every flag's fate a `KeyFate`.
- `sources`: argument lists, Python modules (as syntax trees), YAML, TOML and JSON read as data.
- `reading`: the design the two readers of programs (launch scripts, Megatron-Bridge recipes) share: what is read,
  what is named as not read (`NotRead`, `Unread`) and how far a reader goes (`Budget`).
- `ledger`: what every key became (`Imported`): mapped, not priced and why, or a default.
- `given`: what the user states beside the files: a script's arguments, a tokenizer's vocabulary.

It may import only `errors`, `types`, `files` and `spec` (perfmodel.layers): a config becomes spec objects, and the
caller prices them.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import InputError
from ..spec.hardware.system import System, load_hardware
from ..spec.model.config import ModelConfig
from ..spec.plan.layout import Plan, resolve
from .given import ARGS_FLAG, GIVEN, USED, VOCAB_FLAG, Given, unused
from .ledger import Imported, KeyFate

# framework -> (reader module, what it reads)
FRAMEWORKS = {
    "megatron": ("megatron.reader", "a Megatron-LM argument list, launch script or functional-test YAML"),
    "bridge": ("bridge.reader", "a Megatron-Bridge recipe module (read as data) or its YAML / key=value overrides"),
    "torchtitan": ("torchtitan.reader", "a torchtitan TOML, or a config registry module (read as data)"),
    "maxtext": ("maxtext.reader", "MaxText's base.yml, a model YAML and a recipe's overrides (shell or a Kubernetes "
                              "manifest)"),
    "deepspeed": ("deepspeed.reader", "a DeepSpeed config JSON and the launch script's model arguments"),
}

__all__ = ["FRAMEWORKS", "NEEDED", "Given", "Imported", "KeyFate", "needed_flag", "plan_of", "read_config"]


def read_config(files: Sequence[str | Path], framework: str, name: str | None = None,
                given: Given | None = None) -> Imported:
    """Read `files` as `framework`'s config (one of FRAMEWORKS); `name` picks one config of a file that defines
    several; `given`, what the user states for what the files leave out of themselves (a launch script's arguments,
    a tokenizer's vocabulary: ingest.given). InputError in one line for a missing file, a config that contradicts
    itself, or a file that defines several configs without `name` (listing them)."""
    if framework not in FRAMEWORKS:
        raise InputError(f"--from = {framework!r} is not a known framework; valid: {', '.join(FRAMEWORKS)}")
    if not files:
        raise InputError(f"no config file given; valid: one or more files holding {FRAMEWORKS[framework][1]}")
    paths = [Path(f) for f in files]
    for p in paths:
        if not p.exists():
            raise InputError(f"config file {str(p)!r} does not exist; valid: {FRAMEWORKS[framework][1]}")
    module = importlib.import_module(f"{__name__}.{FRAMEWORKS[framework][0]}")
    given = given or Given()
    token, used = GIVEN.set(given), USED.set(set())
    try:
        imp = module.read(paths, name)
        return imp.model_copy(update={"given_unused": unused(given)})
    except InputError as err:  # name the files where the reader's message does not
        if any(str(p) in str(err) or p.name in str(err) for p in paths):
            raise
        message = str(err).removeprefix(f"{framework} config: ")
        raise InputError(f"{framework} config {', '.join(repr(str(p)) for p in paths)}: {message}") from None
    finally:
        GIVEN.reset(token)
        USED.reset(used)


NEEDED = ("--hardware", "--gpus", VOCAB_FLAG, ARGS_FLAG)  # the flags that supply what a config leaves out


def needed_flag(message: str) -> str | None:
    """The flag a refusal says is needed ('--gpus is needed: ...'), or None: the one thing the files leave out."""
    return next((f for f in NEEDED if message.startswith(f"{f} is needed") or f" {f} is needed" in message), None)


def launch_of(imp: Imported, hardware: str | None, gpus: int | None) -> tuple[str, int]:
    """The hardware and device count: the flags', else what the config states (a flag asks about the same config on
    another cluster or at another size: `launch_notes` says what it replaced); one line naming the flag when neither
    gives it."""
    hardware, gpus = hardware or imp.hardware, gpus or imp.gpus
    if hardware is None:
        raise InputError(f"--hardware is needed: the {imp.framework} config does not name the system it runs on; "
                         "valid: a preset (perfmodel hardware list) or a spec YAML")
    if gpus is None:
        raise InputError(f"--gpus is needed: the {imp.framework} config leaves the device count to its launcher; "
                         "valid: the number of devices the job runs on")
    return hardware, gpus


def launch_notes(imp: Imported, hardware: str | None, gpus: int | None) -> list[str]:
    """What --hardware / --gpus replaced of the config's own launch, one line each (empty: nothing)."""
    out = []
    if hardware and imp.hardware and hardware != imp.hardware:
        out.append(f"--hardware {hardware} replaces the config's {imp.hardware} ({imp.set_by.get('launch.hardware')})")
    if gpus and imp.gpus and gpus != imp.gpus:
        out.append(f"--gpus {gpus} replaces the config's launch of {imp.gpus} devices "
                   f"({imp.set_by.get('launch.gpus')})")
    return out


def plan_of(imp: Imported, hardware: str | System | None = None, gpus: int | None = None
            ) -> tuple[ModelConfig, System, Plan]:
    """The model, system and resolved plan of an import, on `hardware` with `gpus` devices (or the config's)."""
    name, count = launch_of(imp, hardware if isinstance(hardware, str) or hardware is None else hardware.name, gpus)
    system = hardware if isinstance(hardware, System) else load_hardware(name)
    try:
        return imp.model, system, resolve(Plan(**plan_fields(imp, count, system)), imp.model, system)
    except InputError as err:
        raise InputError(f"{imp.framework} config: {err}{keys_named(imp, str(err))}") from None


def plan_fields(imp: Imported, gpus: int, system: System) -> dict:
    """The Plan fields of an import on `gpus` devices of `system`, before resolving: what the config states and what
    it leaves to the device count (Imported.deferred, completed by its reader). plan_of resolves them; the planner
    page fills its form with them."""
    fields = {**imp.plan, "gpus": gpus}
    if imp.deferred:  # what the config leaves to the device count (MaxText: -1 mesh axes, per-device batch)
        module = importlib.import_module(f"{__name__}.{FRAMEWORKS[imp.framework][0]}")
        fields.update(module.complete(imp.deferred, gpus, system))
    return fields


def keys_named(imp: Imported, message: str) -> str:
    """' (from the config's KEY = V, ...)' for the plan fields a refusal names, so the user sees their own key."""
    words = set(re.findall(r"[a-z_]+", message))
    keys = list(dict.fromkeys(by for field, by in imp.set_by.items() if field.startswith("plan.") and field[5:] in words))
    return f" (from the config's {', '.join(keys)})" if keys else ""
