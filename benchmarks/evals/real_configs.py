"""Real framework configs through `perfmodel import`, as a new user would pass them: every config of the
corpus in tests/fixtures/corpus/<framework>/, copied verbatim from the frameworks' own repositories at pinned commits
(each folder's cases.yaml names every file's repository, commit, path and licence), imported or refused, and why.

    python -m benchmarks.evals.real_configs                      # the table and the share that import
    python -m benchmarks.evals.real_configs --framework maxtext  # one framework's cases
    python -m benchmarks.evals.real_configs --explain CASE_ID    # also every key's fate of one case

A case is run first as its files alone (`perfmodel import FILES --from X [--name N]`). A config that leaves the
device count or the system to its launcher is refused naming the flag that supplies it (--gpus, --hardware); the
case is then run again with the value its cases.yaml gives for that flag, as the user would, and the table says
which flags it needed. Imported: the plan and the prediction, with the memory model's verdict (a config the frameworks
publish as running is imported whatever the verdict: `import -o` writes it, `--strict` refuses). Refused: the one
line the user sees. tests/test_real_configs.py checks each case's plan against the values read by hand in
cases.yaml (`expect`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmarks import ROOT

from perfmodel.errors import InputError
from perfmodel.files import read_mapping
from perfmodel.ingest import NEEDED

CORPUS = ROOT / "tests" / "fixtures" / "corpus"
FRAMEWORKS = ("megatron", "bridge", "torchtitan", "maxtext", "deepspeed")
# a refusal's "FLAG is needed" (perfmodel.ingest.NEEDED) -> the case's field that gives it (--vocab-size: vocab_size)
NEEDS = {flag: flag.removeprefix("--").replace("-", "_") for flag in NEEDED}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Source(_Strict):
    """Where one file of the corpus came from (copied byte for byte)."""

    file: str = Field(description="the file's path in this framework's corpus folder")
    repo: str = Field(description="owner/name on GitHub")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$", description="the commit it was copied at")
    path: str = Field(description="its path in that repository")
    licence: str = Field(description="the repository's licence (SPDX id, and whose)")


class Expect(_Strict):
    """What the case's files state, read by hand from them (tests/test_real_configs.py checks the import against it)."""

    outcome: Literal["imported", "refused"] = "imported"
    model: str | None = Field(None, description="the preset (or the model's name) the import must give")
    shape: dict[str, Any] = Field(default_factory=dict, description="ModelConfig fields the files state (n_layers, "
                                                                    "hidden, ...), where the model is no preset")
    plan: dict[str, Any] = Field(default_factory=dict, description="resolved Plan fields the files state (tp, pp, "
                                                                   "dp, ep, micro_batch, global_batch, seq_len, ...)")
    gpus: int | None = Field(None, description="the device count the files state (or the flag gives)")
    hardware: str | None = Field(None, description="the system the files name (or the flag gives)")
    needs: list[str] = Field(default_factory=list, description="the flags the files leave to the user (--gpus, "
                                                               "--hardware, --vocab-size, --script-args), in the order "
                                                               "the refusals name them")
    refusal: str | None = Field(None, description="refused cases: words the one-line refusal must hold")


class Case(_Strict):
    """One config as a user passes it: `perfmodel import FILES --from FRAMEWORK [--name NAME]`."""

    id: str = Field(description="short, unique in the framework's folder")
    files: list[str] = Field(min_length=1, description="the files in the order the user passes them (paths in this "
                                                       "folder; `../` reaches another framework's corpus folder)")
    name: str | None = Field(None, description="--name, where a file defines several configs")
    hardware: str | None = Field(None, description="--hardware the user adds where the files leave the system out")
    gpus: int | None = Field(None, description="--gpus the user adds where the files leave the device count out")
    vocab_size: int | None = Field(None, description="--vocab-size the user adds where the files name a tokenizer "
                                                     "file whose size they do not state")
    script_args: str | None = Field(None, description="--script-args: the words the user runs a launch script with, "
                                                      "where what it writes depends on them")
    format: str = Field(description="what kind of file it is: launch script, recipe module, TOML, model YAML, ...")
    vintage: str = Field(description="'current' (the repository's newest format) or the year-old format's date")
    expect: Expect = Field(default_factory=Expect)


class Corpus(_Strict):
    """One framework's corpus folder: where each file came from and the configs made of them."""

    sources: list[Source]
    cases: list[Case]


def load_corpus(framework: str) -> tuple[Path, Corpus]:
    """The corpus folder of `framework` and its cases.yaml, checked: every case's files exist and have a source."""
    folder = CORPUS / framework
    corpus = Corpus.model_validate(read_mapping(folder / "cases.yaml", f"{framework} corpus"))
    sourced = {(folder / s.file).resolve() for s in corpus.sources}
    for other in FRAMEWORKS:  # a case may use another framework's file (a MaxText recipe's model YAML, say)
        if other != framework and (CORPUS / other / "cases.yaml").exists():
            data = read_mapping(CORPUS / other / "cases.yaml", f"{other} corpus")
            sourced |= {(CORPUS / other / s["file"]).resolve() for s in data.get("sources", [])}
    for case in corpus.cases:
        for f in case.files:
            path = (folder / f).resolve()
            if not path.exists() or path not in sourced:
                raise SystemExit(f"{framework} corpus case {case.id}: file {f} is "
                                 f"{'missing' if not path.exists() else 'not in sources'}")
    return folder, corpus


def cases(frameworks=FRAMEWORKS) -> list[tuple[str, Path, Case]]:
    """Every case of the corpus folders that exist, as (framework, folder, case)."""
    out = []
    for fw in frameworks:
        if (CORPUS / fw / "cases.yaml").exists():
            folder, corpus = load_corpus(fw)
            out += [(fw, folder, c) for c in corpus.cases]
    return out


def run_case(framework: str, folder: Path, case: Case) -> dict:
    """Import one case as a user would (the files alone, then again with each flag a refusal says is needed, the
    value the case gives for it); the outcome."""
    from perfmodel.cost.estimate import evaluate_plan
    from perfmodel.ingest import Given, needed_flag, plan_of, read_config

    files = [os.path.relpath(folder / f, ROOT) for f in case.files]  # as typed from the repository's root
    row: dict[str, Any] = {"framework": framework, "id": case.id, "format": case.format, "vintage": case.vintage,
                           "needs": [], "imported": None}
    flags: dict[str, Any] = dict.fromkeys(NEEDS.values())
    while True:
        try:
            imp = read_config(files, framework, case.name, Given.of(flags["script_args"], flags["vocab_size"]))
            row["imported"] = imp
            model, system, plan = plan_of(imp, flags["hardware"], flags["gpus"])
            step, est = evaluate_plan(model, system, plan)
            break
        except InputError as err:
            flag = needed_flag(str(err))
            value = getattr(case, NEEDS[flag]) if flag else None
            if flag is None or flag in row["needs"] or value is None:
                return {**row, "outcome": "refused", "why": str(err)}
            row["needs"].append(flag)
            flags[NEEDS[flag]] = value
    return {**row, "outcome": "imported", "model": model, "system": system, "plan": plan, "estimate": est,
            "why": (f"{model.name} on {est.gpus} x {system.name}: tp{plan.tp} pp{plan.pp} dp{plan.dp} cp{plan.cp} "
                    f"ep{plan.ep} zero{plan.zero} {plan.recompute} {plan.precision} mb{plan.micro_batch} "
                    f"gb{plan.global_batch} s{plan.seq_len}: step {est.step_time_s:.3g} s, MFU {est.mfu:.0%}, "
                    f"memory {est.memory_verdict}")}


def table(rows: list[dict]) -> list[str]:
    """The printed table: one case a line pair, then the share imported per framework and in all."""
    lines = []
    for r in rows:
        needs = f" [needed {' '.join(r['needs'])}]" if r["needs"] else ""
        lines.append(f"{r['framework']:<10} {r['id']} ({r['format']}, {r['vintage']}){needs}")
        lines.append(f"           {r['outcome']}: {r['why']}")
    lines.append("")
    total = 0
    for fw in FRAMEWORKS:
        mine = [r for r in rows if r["framework"] == fw]
        if mine:
            ok = sum(r["outcome"] == "imported" for r in mine)
            total += ok
            lines.append(f"{fw:<10} {ok} of {len(mine)} import")
    if rows:
        lines.append(f"{'all':<10} {total} of {len(rows)} import ({total / len(rows):.0%}); "
                     f"{sum(bool(r['needs']) for r in rows)} needed a flag the files leave out")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--framework", choices=FRAMEWORKS, action="append", help="only these frameworks' cases")
    ap.add_argument("--explain", metavar="CASE_ID", help="also list every key's fate of this case")
    a = ap.parse_args(argv)
    os.chdir(ROOT)
    rows = [run_case(*c) for c in cases(a.framework or FRAMEWORKS)]
    print("\n".join(table(rows)))
    for r in rows:
        if r["id"] == a.explain and r["imported"] is not None:
            print("\n".join(f"  {k.line()}" for k in r["imported"].keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
