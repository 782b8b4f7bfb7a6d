"""The real-world config corpus (tests/fixtures/corpus/<framework>/, verbatim from the frameworks' repositories at
pinned commits) through `perfmodel import`: each case imports or is refused as its cases.yaml says, the plan and model
it gives are the ones read by hand from its files (`expect`), a refusal names the flag that supplies what the files
leave out, and the corpus as a whole imports (at least 90% of it)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from benchmarks.evals.real_configs import CORPUS, FRAMEWORKS, cases, load_corpus, run_case

CASES = cases()
IDS = [f"{fw}/{c.id}" for fw, _, c in CASES]


@cache
def outcome(i: int) -> dict:
    """One case's outcome, computed once for the tests that read it."""
    return run_case(*CASES[i])


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_case_as_read_by_hand(i, monkeypatch):
    monkeypatch.chdir(Path(__file__).parents[1])
    fw, _, case = CASES[i]
    r, e = outcome(i), case.expect
    assert r["outcome"] == e.outcome, r["why"]
    assert r["needs"] == e.needs, r["why"]
    if e.outcome == "refused":
        assert e.refusal and e.refusal in r["why"]
        assert "\n" not in r["why"]
        return
    model, plan, system = r["model"], r["plan"], r["system"]
    if e.model is not None:
        assert model.name == e.model
    for field, value in e.shape.items():
        assert getattr(model, field) == value, field
    for field, value in e.plan.items():
        actual = getattr(plan, field)
        if isinstance(value, dict):  # a nested field (plan.lora): the parts the files state
            actual = {k: getattr(actual, k, None) for k in value}
        assert actual == value, field
    if e.gpus is not None:
        assert plan.gpus == e.gpus
    if e.hardware is not None:
        assert system.name == e.hardware
    assert plan.tp * plan.pp * plan.dp * plan.cp == plan.gpus  # the layout covers the devices it runs on


def test_sources_cover_every_file():
    """Every file of a corpus folder has its source (repository, commit, path, licence), and every source's file
    is there."""
    for fw in FRAMEWORKS:
        if not (CORPUS / fw / "cases.yaml").exists():
            continue
        folder, corpus = load_corpus(fw)
        files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != "cases.yaml"}
        assert files == {s.file for s in corpus.sources}, fw


def test_share_that_imports():
    """The corpus's bar: at least 60 configs, every framework in it, at least 90% of them import."""
    assert len(CASES) >= 60 and {fw for fw, _, _ in CASES} == set(FRAMEWORKS)
    imported = sum(outcome(i)["outcome"] == "imported" for i in range(len(CASES)))
    assert imported >= 0.9 * len(CASES)
