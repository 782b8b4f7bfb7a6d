"""Fit labels: every layout a framework publishes as running, on the devices its source names, imported the way a
user would (`perfmodel import FILES --from FRAMEWORK`), so each one tests the config reader and the memory model
together. A label is a config, not a step time: it says only "this plan ran on N devices of this system".

The labels live in tests/fixtures/fit_labels/<framework>.yaml (each file's header states its selection rule and
every copied file's repository, commit, path and licence). A label is kept only where its source states both the
device count and the accelerator; the import is run with the files alone, then with the label's system / device
count where the refusal says the files leave them out (as real_configs does). What the reader then states is checked
against the label: a reader that reads another device count or system is a misread, named in `reason`.

The labels are an evaluation's data, in the checkout's tests/fixtures/: this reader sits with the evaluations, not in
the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from benchmarks import ROOT
from perfmodel.errors import InputError
from perfmodel.files import read_mapping
from perfmodel.ingest import Given, needed_flag, plan_of, read_config
from perfmodel.spec.hardware.system import System
from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.plan.layout import Plan

FIXTURES = ROOT / "tests" / "fixtures"
LABELS = FIXTURES / "fit_labels"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LabelSource(_Strict):
    """Where one copied file came from (byte for byte)."""

    file: str = Field(description="its path under tests/fixtures/ (corpus/... or fit_labels/...)")
    repo: str
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    path: str
    licence: str


class LabelEntry(_Strict):
    """One published layout: the files a user passes and the system and device count its source states."""

    id: str
    framework: str = Field(description="--from")
    group: str = Field(description="the framework and the source table it belongs to")
    source: str = Field(description="repo@commit:path[:line] of the layout")
    table: str | None = Field(None, description="the table row that lists it, where a table does")
    files: list[str] = Field(min_length=1, description="paths under tests/fixtures/, in the order passed")
    name: str | None = Field(None, description="--name, where a file defines several configs")
    system: str = Field(description="the catalogue system the source names")
    devices: int = Field(gt=0, description="devices the source states (TPU v7: 2 per chip)")
    stated: str = Field(description="where the source states the system and the device count")
    script_args: str | None = Field(None, description="--script-args a user runs the script with, and why")
    vocab_size: int | None = Field(None, description="--vocab-size where the files name a tokenizer only")
    why: str | None = Field(None, description="why a flag is passed, where one is")


class LabelFile(_Strict):
    sources: list[LabelSource] = Field(default_factory=list)
    labels: list[LabelEntry]


@dataclass(frozen=True)
class FitLabel:
    """One label, imported: the model, system and plan the reader gives (None where it refuses), and `reason`: ''
    or why the layout is not expressible (the import's refusal, or what the reader read otherwise than the source)."""

    row_id: str
    group: str
    source: str
    framework: str
    files: tuple[str, ...]
    stated_system: str
    stated_devices: int
    model: ModelConfig | None
    system: System | None
    plan: Plan | None
    reason: str
    needs: tuple[str, ...] = ()


def label_files(path: str | Path | None = None) -> list[Path]:
    """The label YAMLs: `path` (a file or a folder of them), by default tests/fixtures/fit_labels/."""
    p = Path(path) if path else LABELS
    return sorted(p.glob("*.yaml")) if p.is_dir() else [p]


def read_labels(path: str | Path | None = None) -> list[LabelEntry]:
    """Every label entry, checked: ids unique, every file present and sourced (corpus files by their cases.yaml)."""
    entries: list[LabelEntry] = []
    sourced: set[Path] = set()
    for f in label_files(path):
        data = LabelFile.model_validate(read_mapping(f, "fit labels"))
        entries += data.labels
        sourced |= {(FIXTURES / s.file).resolve() for s in data.sources}
    for cases in (FIXTURES / "corpus").glob("*/cases.yaml"):
        sourced |= {(cases.parent / s["file"]).resolve() for s in read_mapping(cases, "corpus").get("sources", [])}
    seen: set[str] = set()
    for e in entries:
        if e.id in seen:
            raise InputError(f"fit label id {e.id!r} appears twice; valid: unique ids")
        seen.add(e.id)
        for file in e.files:
            p = (FIXTURES / file).resolve()
            if not p.exists() or p not in sourced:
                raise InputError(f"fit label {e.id}: file {file} is {'missing' if not p.exists() else 'unsourced'}; "
                                 "valid: a copied file listed in a sources list")
    return entries


def import_label(e: LabelEntry) -> FitLabel:
    """Import one label as a user would: the files alone, then each of --hardware / --gpus the refusal names with the
    label's stated value; the reader's device count and system checked against the source's."""
    files = [str(FIXTURES / f) for f in e.files]
    given = {"--hardware": e.system, "--gpus": e.devices}
    flags: dict[str, object] = {}
    base = dict(row_id=e.id, group=e.group, source=e.source, framework=e.framework, files=tuple(e.files),
                stated_system=e.system, stated_devices=e.devices)
    while True:
        try:
            imp = read_config(files, e.framework, e.name, Given.of(e.script_args, e.vocab_size))
            model, system, plan = plan_of(imp, flags.get("--hardware"), flags.get("--gpus"))
            break
        except InputError as err:
            flag = needed_flag(str(err))
            if flag not in given or flag in flags:
                return FitLabel(**base, model=None, system=None, plan=None, reason=f"refused: {err}",
                                needs=tuple(flags))
            flags[flag] = given[flag]
    misread = []
    if plan.gpus != e.devices:
        misread.append(f"{plan.gpus} devices ({imp.set_by.get('launch.gpus', 'read')}), the source {e.devices}")
    if system.name != e.system:
        misread.append(f"system {system.name}, the source {e.system}")
    reason = f"misread: the reader gives {'; '.join(misread)}" if misread else ""
    return FitLabel(**base, model=model, system=system, plan=plan, reason=reason, needs=tuple(flags))


def load_fit_labels(path: str | Path | None = None) -> list[FitLabel]:
    """Every fit label under `path` (default tests/fixtures/fit_labels/), imported through perfmodel.ingest."""
    return [import_label(e) for e in read_labels(path)]

