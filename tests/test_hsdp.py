"""Hybrid sharding (Plan.dp_replicate: FSDP2 HSDP, torchtitan data_parallel_replicate_degree, MaxText dcn_data
beside fsdp): ZeRO shards over dp*cp / r ranks, gathers and reduce-scatters inside that group, and the r replicas
all-reduce the gradient shards once a step. Values worked out by hand on two TPU v6e slices (512 chips), whose
cross-slice DCN tier is priced from its spec alone (12.5 GB/s per chip x 0.8, 20 us per ring step)."""

from __future__ import annotations

import pytest

from perfmodel import Plan, estimate, load_model
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.comm.sharded import bucketed, overlap_fraction, with_overlap
from perfmodel.cost.step.evaluate import evaluate
from perfmodel.errors import InputError
from perfmodel.export.checks.spread import maxtext_plan_file, spread_plan_file
from perfmodel.export.targets import export, nearest_updates
from perfmodel.spec.plan.layout import resolve
from perfmodel.spec.stack.profile import load_stack

GIB = 2**30


@pytest.fixture(scope="module")
def llama3_8b():
    return load_model("llama-3-8b")


def plan(r: int) -> Plan:
    return Plan(gpus=512, micro_batch=1, global_batch=512, seq_len=4096, zero=3, dp_replicate=r, stack="maxtext",
                recompute="full")


def test_zero_shards_over_one_group_and_the_replicas_all_reduce_the_shards(llama3_8b, tpu_v6e):
    full, hybrid = estimate(llama3_8b, tpu_v6e, plan(1)), estimate(llama3_8b, tpu_v6e, plan(2))
    assert (full.plan.zero_shard, hybrid.plan.zero_shard) == (512, 256)
    # the states are sharded over half as many ranks: twice the bytes each
    assert hybrid.memory_bytes.optimizer == pytest.approx(2 * full.memory_bytes.optimizer)
    g_full, g_hybrid = (next(c for c in e.comms if c.name == "zero3 weight all-gather") for e in (full, hybrid))
    assert (g_full.group_size, g_hybrid.group_size) == (512, 256)
    assert "dcn" in g_full.tiers and "dcn" not in g_hybrid.tiers  # one slice holds a whole group
    ar = next(c for c in hybrid.comms if c.name == "dp replicate gradient all-reduce")
    shard = llama3_8b.n_params() * 4 / 256  # fp32 gradients (MaxText's weight_dtype), 1/256 of them per chip
    assert ar.bytes == pytest.approx(shard)
    assert (ar.group_size, ar.calls, ar.tiers) == (2, 1, "dcn x2")
    # a ring all-reduce over 2 chips on the DCN: 2 (n - 1)/n S / (B e) + 2 (n - 1) latency
    assert ar.seconds_per_call == pytest.approx(shard / (12.5e9 * 0.8) + 2 * 20e-6)
    assert not any(c.name == "dp replicate gradient all-reduce" for c in full.comms)


def test_bad_replicate_input(llama3_8b, tpu_v6e, predict_cli):
    with pytest.raises(InputError, match=r"dp_replicate = 3 does not divide dp = 512; valid dp_replicate: 1, 2, 4"):
        resolve(plan(3), llama3_8b, tpu_v6e)
    with pytest.raises(InputError, match="dp_replicate = 2 with zero = 0: .* valid: zero 1, 2 or 3, or dp_replicate 1"):
        resolve(plan(2).model_copy(update={"zero": 0}), llama3_8b, tpu_v6e)
    args = ("--model", "llama-3-8b", "--hardware", "tpu-v6e", "--gpus", 512, "--tp", 1, "--pp", 1, "--micro-batch", 1,
            "--global-batch", 512, "--seq-len", 4096, "--zero", 3, "--stack", "maxtext")
    ok = predict_cli(*args, "--dp-replicate", 2)
    assert ok.returncode == 0 and "dp=512 (dp_replicate=2)" in ok.stdout, ok.stderr
    bad = predict_cli(*args, "--dp-replicate", 5)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "dp_replicate = 5 does not divide" in bad.stderr


def test_exports_write_hsdp_where_the_framework_has_it():
    mt = export(maxtext_plan_file("v6e-2-slices-hsdp"), "maxtext")  # MaxText's own config check accepts it
    assert "dcn_data_parallelism: 2" in mt and "ici_fsdp_parallelism: 64" in mt and "dcn_fsdp_parallelism: 1" in mt
    pf = spread_plan_file("zero3-per-op")  # 8 GPUs: 2 replicas of 4 (torchtitan's config check accepts it)
    tt = export(pf, "torchtitan", "0.3.0")
    assert "data_parallel_replicate_degree=2" in tt.replace(" ", "") and "data_parallel_shard_degree=4" in \
        tt.replace(" ", "")
    for to, version in (("megatron", "core_r0.16.1"), ("deepspeed", "0.19.8")):
        up, why = nearest_updates(pf, to, version)
        assert up["dp_replicate"] == 1 and any(w.startswith("dp_replicate 2 -> 1") for w in why)


def test_the_executor_runs_it_on_fsdp2_only(monkeypatch):
    """FSDP2's 2-D (replicate, shard) mesh runs zero 2 and 3 (tests/test_execute.py trains it on 4 processes to the
    one-process losses); its ZeRO-1 has no replicas."""
    from perfmodel.execute import run_plans

    monkeypatch.setattr(run_plans, "check_device", lambda *a: None)  # this machine has no H100: the plan is the point
    pf = spread_plan_file("zero3-per-op")
    run_plans.check_runnable(pf, "plan.json", 8, 1, "cuda")
    zero1 = pf.model_copy(update={"plan": pf.plan.model_copy(update={"zero": 1})})
    with pytest.raises(InputError, match="plan.json: dp_replicate = 2 with zero = 1: .* valid: zero 2 or 3, or "
                                         "dp_replicate 1"):
        run_plans.check_runnable(zero1, "plan.json", 8, 1, "cuda")


def test_search_ranks_hybrid_sharding_where_asked():
    from perfmodel.search.ranking import search
    from perfmodel.search.space import Space

    space = Space(pp=[1], zero=[3], recompute=["full"], tp=[1])
    plain = search("llama-3-8b", "tpu-v6e", 512, 512, 4096, space=space, stack="maxtext")
    both = search("llama-3-8b", "tpu-v6e", 512, 512, 4096, space=space.model_copy(update={"dp_replicate": [1, 2]}),
                  stack="maxtext")
    assert set(plain.table["dp_replicate"]) == {1}
    reps = both.table["dp_replicate"]
    assert set(reps) == {1, 2}
    # every layout again with 2 replicas, but those whose dp (1: cp 512) has no 2 ranks to replicate over
    assert both.enumerated == plain.enumerated + (plain.table["dp"] % 2 == 0).sum() == 100
    best = both.plan(0)
    # a replica per slice keeps ZeRO's gathers inside a slice's ICI: the HSDP layout ranks first
    assert best.dp_replicate == 2 and both.table["step_time_s"].iloc[0] < plain.table["step_time_s"].iloc[0]


@pytest.mark.parametrize("zero, backwards", [(1, 1), (2, 2)])
def test_the_replicas_all_reduce_shares_the_backward_window_with_the_reduction(llama3_8b, tpu_v6e, zero, backwards):
    """ZeRO-2 with replicas: each micro-batch's backward runs the group's reduce-scatter and the replicas'
    all-reduce (FSDP2); ZeRO-1: the last one runs both. They hide behind that one backward together: exposed as
    one collective carrying both (cost.comm.sharded.bucketed over the layers' buckets), split between them by
    traffic."""
    p = resolve(plan(2).model_copy(update={"zero": zero, "global_batch": 1024}), llama3_8b, tpu_v6e)
    step = evaluate(llama3_8b, tpu_v6e, Layouts.from_plan(p))
    rows = {c.name: c for c in step.step_comms}
    g, g_r = (rows[n].seconds[0] for n in ("dp gradient reduction", "dp replicate gradient all-reduce"))
    assert (p.num_microbatches, rows["dp replicate gradient all-reduce"].calls[0]) == (2, backwards)
    window = sum((step.unit_time[u] - step.unit_fwd[u])[0] * n  # one micro-batch's backward
                 for u, n in (("layer", llama3_8b.n_layers), ("embedding", 1), ("head", 1)))
    f = overlap_fraction(tpu_v6e, load_stack("maxtext"))
    want = backwards * with_overlap(g + g_r, bucketed(g + g_r, window, llama3_8b.n_layers), f)
    got = rows["dp gradient reduction"].bwd[0], rows["dp replicate gradient all-reduce"].bwd[0]
    assert sum(got) == pytest.approx(want) and got[0] / got[1] == pytest.approx(g / g_r)
