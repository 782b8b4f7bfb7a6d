"""A search over MaxText's named remat policies (Space.remat_policy, `--only remat_policy=P1,P2`): each policy's
names layouts keep (and offload) its tensors (spec.plan.recompute.MAXTEXT_REMAT / MAXTEXT_OFFLOADED), ranked beside
each other and beside the other recompute modes, each priced as predict prices its plan."""

from __future__ import annotations

import pytest

from perfmodel import estimate
from perfmodel.errors import InputError
from perfmodel.search.ranking import search
from perfmodel.search.space import Space
from perfmodel.spec.plan.recompute import MAXTEXT_REMAT

POLICIES = ["minimal", "save_dot_except_mlp", "save_qkv_proj", "full"]
NAMES = dict(pp=[1], zero=[3], tp=[1, 2], recompute=["names"])


@pytest.fixture(scope="module")
def ranked(llama2_7b, tpu_v6e):
    return search(llama2_7b, tpu_v6e, 64, 128, 4096, space=Space(**NAMES, remat_policy=POLICIES), stack="maxtext")


def test_each_policy_is_a_search_of_its_own_ranked_together(llama2_7b, tpu_v6e, ranked):
    t = ranked.table
    assert set(t["remat_policy"]) == set(POLICIES) and (t["recompute"] == "names").all()
    for policy in POLICIES:  # the same layouts as a search with that policy's tensors given by hand
        alone = search(llama2_7b, tpu_v6e, 64, 128, 4096, space=Space(**NAMES), stack="maxtext",
                       recompute_saved=MAXTEXT_REMAT[policy])
        mine = t[t["remat_policy"] == policy]
        assert len(mine) == len(alone.table)
        assert mine["step_time_s"].min() == pytest.approx(alone.table["step_time_s"].min())
    counts = ranked.counts
    assert list(counts["remat_policy"]) == POLICIES and counts["enumerated"].sum() == ranked.enumerated


def test_the_best_plan_carries_its_policys_tensors(llama2_7b, tpu_v6e, ranked):
    for rank in range(5):
        p = ranked.plan(rank)
        assert p.recompute_saved == MAXTEXT_REMAT[ranked.table["remat_policy"][rank]]
        assert estimate(llama2_7b, tpu_v6e, p).step_time_s == pytest.approx(ranked.table["step_time_s"][rank])


def test_the_other_modes_stay_beside_the_policies(llama2_7b, tpu_v6e):
    res = search(llama2_7b, tpu_v6e, 64, 128, 4096, space=Space(pp=[1], zero=[3], tp=[1], remat_policy=["minimal"]),
                 stack="maxtext")
    t = res.table
    assert set(t["recompute"]) == {"none", "selective", "full", "names"}
    assert set(t.loc[t["recompute"] == "names", "remat_policy"]) == {"minimal"}
    assert set(t.loc[t["recompute"] != "names", "remat_policy"]) == {""}
    assert res.plan(int((t["recompute"] == "full").idxmax())).recompute_saved is None


def test_an_offloading_policy_without_a_host_link_is_skipped_with_a_note(llama2_7b, tpu_v5p):
    no_host = tpu_v5p.model_copy(update={"host": None})  # a spec without the host block (the catalogue's has one)
    res = search(llama2_7b, no_host, 64, 128, 4096, space=Space(**NAMES, remat_policy=["minimal", "minimal_offloaded"]),
                 stack="maxtext")
    assert set(res.table["remat_policy"]) == {"minimal"}
    assert any(n.startswith("GPU count 64, remat policy minimal_offloaded skipped: recompute_offloaded") for n in
               res.notes)


def test_bad_remat_policy_input(llama2_7b, tpu_v6e):
    with pytest.raises(InputError, match="remat_policy"):
        Space(remat_policy=["minimal_flash_attention"])
    with pytest.raises(InputError, match=r"leaves out; valid: add names to it, or no remat_policy"):
        search(llama2_7b, tpu_v6e, 64, 128, 4096, space=Space(recompute=["full"], remat_policy=["minimal"]))
    with pytest.raises(InputError, match="not both"):
        search(llama2_7b, tpu_v6e, 64, 128, 4096, space=Space(**NAMES, remat_policy=["minimal"]),
               recompute_saved=["qkv"])
