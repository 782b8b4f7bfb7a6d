"""The search's speed-up changed how the cost model computes, not what it computes: the top 20 plans of
each of benchmarks/speed/search_speed.py's three jobs, in order, with their step times, memory and MFU, equal those the
search ranked before it (tests/fixtures/search_top20_before_speedup.json, written by commit df0a726's search).
That search priced GEMMs from the datasheet, so the jobs run here on their systems with the measured kernel tables
and NCCL fits taken away (the cost model since prices GEMMs and one-node collectives from them where a part has
them: a change of what is computed, on purpose). Later changes of what is computed are taken away the same way: the
host's launch costs (the stack's profile here has no `host`, as at df0a726), the vocabulary Megatron-LM pads to a
multiple of 128 x tp (`vocab_multiple` 1 here, the model's vocabulary as at df0a726), tight plans (kept by the
search since, which df0a726 left out: compared among the plans within the budget) and the power model's clock of
each step's mix and Megatron-LM's own step passes (the part's `power` and the profile's `step_passes` /
`dense_embedding_grad` taken away, as then)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perfmodel.search import search
from perfmodel.spec.hardware.system import load_hardware

BEFORE = json.loads((Path(__file__).parent / "fixtures" / "search_top20_before_speedup.json").read_text())
PLAN_FIELDS = ("gpus", "tp", "pp", "dp", "cp", "vpp", "ep", "etp", "micro_batch", "recompute", "sequence_parallel",
               "zero", "schedule", "account_for_embedding", "account_for_loss")


@pytest.fixture(scope="module")
def hostless(tmp_path_factory):
    """megatron-core's profile without its host rates and vocabulary padding, as a profile file (what the search
    priced at df0a726)."""
    import yaml

    from perfmodel.spec.stack.profile import load_stack

    data = load_stack("megatron-core").model_dump(exclude_none=True)
    data.pop("host")
    data.pop("memory_band", None)  # and without the measured band: the fit test's 10% headroom alone (below)
    data["vocab_multiple"] = 1
    # ... and without Megatron-LM's own step passes and dense embedding gradient (as at df0a726)
    data.update(step_passes=[], dense_embedding_grad=False)
    path = tmp_path_factory.mktemp("stack") / "megatron-core-no-host.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_top_20_plans_and_their_numbers_are_unchanged(name, hostless):
    job = BEFORE[name]["job"]
    system = load_hardware(job["hardware"])
    # 0.86: the sustained_fraction the specs held at df0a726 (the datasheet path's; benchmarks/tools/sustained_fraction.py)
    datasheet = system.on_datasheet().model_copy(
        update={"efficiency": system.efficiency.model_copy(update={"sustained_fraction": 0.86})})
    datasheet = datasheet.model_copy(update={"accelerator": datasheet.accelerator.model_copy(update={"power": None})})
    result = search(job["model"], datasheet, job["gpus"], job["global_batch"], job["seq_len"], stack=hostless,
                    headroom=0.10)
    after = [r for r in result.records() if not r["memory_tight"]][:20]
    assert len(after) == len(BEFORE[name]["top"]) == 20
    for rank, (a, b) in enumerate(zip(after, BEFORE[name]["top"])):
        assert {k: a[k] for k in PLAN_FIELDS} == {k: b[k] for k in PLAN_FIELDS}, f"rank {rank} of {name}"
        for k, v in b.items():
            if k not in PLAN_FIELDS and isinstance(v, float) and k in a:
                assert math.isclose(a[k], v, rel_tol=1e-9), f"rank {rank} of {name}: {k} {a[k]} != {v}"
