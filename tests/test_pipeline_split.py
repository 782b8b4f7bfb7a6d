"""Uneven pipelines as Megatron-LM runs them: embedding and loss counted as layers, first / last stage counts."""

import pytest

import perfmodel as pm
from perfmodel.errors import InputError
from perfmodel.export.targets import export
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.megatron_split import megatron_chunks
from perfmodel.spec.plan.layout import Plan, chunk_layers, resolve, split_of
from perfmodel.spec.plan.file import load_plan_file, write_plan_file
from perfmodel.search.ranking import search
from perfmodel.search.plan_writer import plan_file
from perfmodel.search.space import pipeline_candidates

H100 = load_hardware("dgx-h100")
L405 = load_model("llama-3.1-405b")  # 126 layers


def plan405(**kw):
    base = dict(gpus=2048, tp=8, pp=16, vpp=8, micro_batch=1, global_batch=2048, seq_len=8192,
                sequence_parallel=True, zero=1, recompute="full")
    return Plan(**{**base, **kw})


def test_megatron_chunks_by_hand():
    # 126 layers + embedding + loss = 128 slots over 16 x 8 chunks of 1: the first chunk is the embedding alone,
    # the last the loss alone
    chunks = megatron_chunks(126, 16, 8, embedding=True, loss=True)
    assert len(chunks) == 128 and chunks[0] == 0 and chunks[-1] == 0 and set(chunks[1:-1]) == {1}
    # stage 0 holds chunks 0, 16, ..., 112: 7 layers; stage 15 holds 15, 31, ..., 127: 7; the rest 8
    p = resolve(plan405(account_for_embedding=True, account_for_loss=True), L405, H100)
    assert split_of(p, 126) == [7] + [8] * 14 + [7]
    # first / last stage counts: 80 layers, pp 4, first 18, last 22: the middle two share 40
    assert megatron_chunks(80, 4, 1, first=18, last=22) == [18, 20, 20, 22]
    assert megatron_chunks(80, 4, 2, first=18, last=22) == [9, 10, 10, 11, 9, 10, 10, 11]
    # explicit uneven stages split over chunks as evenly as possible, earlier chunks first
    q = resolve(Plan(gpus=2, pp=2, vpp=2, micro_batch=1, global_batch=8, seq_len=1024, stage_layers=[5, 7]),
                load_model("gpt2-124m"), H100)
    assert chunk_layers(q, 12) == [3, 4, 2, 3]


def test_405b_at_pp16_vpp8_needs_the_accounting_and_is_predicted_with_it():
    with pytest.raises(InputError) as e:
        pm.estimate(L405, H100, plan405())
    assert "account_for_embedding" in str(e.value) and "1..8" in str(e.value)
    est = pm.estimate(L405, H100, plan405(account_for_embedding=True, account_for_loss=True))
    assert est.stage_layers == [7] + [8] * 14 + [7]
    assert est.bottleneck_stage == "middle"  # the first and last stages hold one layer fewer


@pytest.mark.parametrize("kw,needle", [
    (dict(account_for_embedding=True, first_stage_layers=6, vpp=1), "exclusive"),
    (dict(first_stage_layers=6, last_stage_layers=6, vpp=1), "share the remaining 114"),
    (dict(account_for_embedding=True, vpp=3), "do not split over pp*vpp"),
    (dict(account_for_embedding=True, account_for_loss=True, stage_layers=[8] * 15 + [6]), "both set the split"),
])
def test_bad_splits_are_refused_in_one_line(kw, needle):
    with pytest.raises(InputError) as e:
        pm.estimate(L405, H100, plan405(**kw))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_search_offers_the_accounted_interleaving():
    assert (8, True) in pipeline_candidates(126, 16) and (8, False) not in pipeline_candidates(126, 16)
    assert all(not acc for _, acc in pipeline_candidates(128, 16))  # 128 layers split evenly without it
    r = search(L405, H100, [2048], 2048, 8192, space={"tp": [8], "pp": [16], "vpp": [8], "zero": [1],
                                                      "recompute": ["full"], "micro_batch": [1]})
    plan = r.plan(0)
    assert plan.vpp == 8 and plan.account_for_embedding and plan.account_for_loss
    assert r.estimate(0).step_time_s == pytest.approx(r.columns["step_time_s"][0])


def test_plan_file_and_megatron_export_carry_the_split(tmp_path):
    p = resolve(plan405(account_for_embedding=True, account_for_loss=True), L405, H100)
    pf = plan_file(L405, H100, p, "test", False)
    path = write_plan_file(pf, tmp_path / "405b.json")
    again = load_plan_file(path)
    assert again.stage_layers == [7] + [8] * 14 + [7] and again.plan.account_for_loss
    text = export(again, "megatron")
    for flag in ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
                 "--num-layers-per-virtual-pipeline-stage 1"):
        assert flag in text
