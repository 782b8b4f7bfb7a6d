"""Layout search: the enumeration against `resolve`, the ranked table against `estimate`, pruning, Pareto fronts,
the stage-split DP against brute force, and one-line errors."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

import perfmodel as pm
from perfmodel.cost.estimate import evaluate
from perfmodel.cost.layouts import Layouts
from perfmodel.errors import InputError
from perfmodel.spec.plan.layout import Plan, default_stage_layers, resolve
from perfmodel.search.ranking import pareto_front, search
from perfmodel.search.space import Job, Space, enumerate_layouts, pipeline_candidates, vpp_candidates
from perfmodel.search.stage_split import balance_stages

H100 = pm.load_hardware("dgx-h100")
A100 = pm.load_hardware("dgx-a100-80gb")


def small_model(layers=8):
    return pm.ModelConfig(name="small", n_layers=layers, hidden=1024, n_heads=16, n_kv_heads=4, ffn_hidden=4096,
                          vocab=32000, max_seq_len=4096, mlp="swiglu", norm="rmsnorm", position="rope")


# ---------------------------------------------------------------------------------------------------------
# Enumeration
# ---------------------------------------------------------------------------------------------------------
def test_vpp_candidates_give_equal_chunks():
    assert vpp_candidates(96, 8) == [1, 2, 3, 4, 6, 12]  # 12 layers per stage
    assert vpp_candidates(126, 16) == [1]  # 126 layers never split into 16 v equal chunks
    assert vpp_candidates(80, 4) == [1, 2, 4, 5, 10, 20]
    assert vpp_candidates(32, 1) == [1]


def test_enumeration_equals_brute_force_over_resolve():
    """Every combination resolve accepts, filtered by the search's stated policy, and nothing else."""
    model, job = small_model(), Job(gpus=16, global_batch=32, seq_len=2048)
    lay = enumerate_layouts(model, H100, job, Space(sequence_parallel=[False, True]))
    got = {tuple(lay.plan(i).model_dump()[k] for k in ("tp", "pp", "cp", "dp", "vpp", "micro_batch", "recompute",
                                                       "sequence_parallel", "zero", "schedule", "account_for_loss"))
           for i in range(len(lay))}
    want = set()
    for tp, pp, cp, vpp, mb, rc, sp, zero, acc in itertools.product(
            [1, 2, 4, 8, 16], [1, 2, 4, 8, 16], [1, 2, 4, 8, 16], range(1, 11), [1, 2, 4, 8, 16, 32],
            ["none", "selective", "full"], [False, True], [0, 1, 2, 3], [False, True]):
        try:
            p = resolve(Plan(gpus=16, tp=tp, pp=pp, cp=cp, vpp=vpp, micro_batch=mb, global_batch=32, seq_len=2048,
                             recompute=rc, sequence_parallel=sp, zero=zero, account_for_embedding=acc,
                             account_for_loss=acc), model, H100)
        except InputError:
            continue
        if p.sequence_parallel != sp or (zero > 0 and p.dp * cp == 1) or (vpp, acc) not in pipeline_candidates(8, pp):
            continue  # resolve turns sp off at tp=1; ZeRO without replicas; the search's pipeline policy
        want.add((p.tp, p.pp, p.cp, p.dp, p.vpp, p.micro_batch, p.recompute, p.sequence_parallel, p.zero, p.schedule,
                  acc))
    assert got == want
    assert len(lay) == len(got)  # no duplicates


def test_default_space_drops_only_the_dominated_non_sequence_parallel_plans():
    model, job = small_model(), Job(gpus=16, global_batch=32, seq_len=2048)
    both = enumerate_layouts(model, H100, job, Space(sequence_parallel=[False, True]))
    default = enumerate_layouts(model, H100, job)
    dropped = (both.tp > 1) & ~both.sequence_parallel
    assert len(default) == len(both) - dropped.sum()


def test_sequence_parallel_is_never_slower_nor_larger():
    """The reason the default search skips sp=False at tp > 1 (space.py), on ring collectives where an all-reduce
    costs its reduce-scatter plus all-gather (the tier's own values). With the measured NCCL fits it need not:
    NCCL's 8-GPU all-reduce on H100 reaches 392 GB/s bus bandwidth, its all-gather 305 (checked below)."""
    ring = H100.on_datasheet(gemms=False)
    model, job = small_model(), Job(gpus=16, global_batch=32, seq_len=2048)
    lay = enumerate_layouts(model, ring, job, Space(sequence_parallel=[False]))
    lay = lay.take(np.flatnonzero(lay.tp > 1))
    on = dataclasses.replace(lay, sequence_parallel=np.ones(len(lay), bool))
    off_step, on_step = evaluate(model, ring, lay), evaluate(model, ring, on)
    nvl = H100.tiers[0]
    assert nvl.ring("all_reduce", 8)[0] > 1.25 * nvl.ring("all_gather", 8)[0]
    # SP adds one thing: the step-end all-reduce of the norm gradients it leaves partial (a few KB per layer)
    norm_grads = next(p for p in on_step.step_comms if p.name.startswith("tp replicated-weight")).exposed
    assert np.all(norm_grads > 0)
    # on the device; the host makes twice the calls (a reduce-scatter and an all-gather for each all-reduce), so a
    # plan its host bounds can be slower with SP: only those
    device = lambda st: st.step_time_s - st.time["host"]  # noqa: E731
    assert np.all(device(on_step) <= (device(off_step) + norm_grads) * (1 + 1e-12))
    slower = on_step.step_time_s > (off_step.step_time_s + norm_grads) * (1 + 1e-12)
    assert np.all(on_step.time["host"][slower] > 0) and np.all(on_step.host_calls[slower] > off_step.host_calls[slower])
    assert np.mean(device(on_step) < device(off_step)) > 0.9
    assert np.all(on_step.memory["reserved"] <= off_step.memory["reserved"] * (1 + 1e-12))


# ---------------------------------------------------------------------------------------------------------
# Search = estimate, vectorised
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama8b_search():
    return search("llama-3-8b", "dgx-h100", 64, 256, 8192)


def test_ranked_rows_equal_estimate(llama8b_search):
    r = llama8b_search
    assert (np.diff(r.table["step_time_s"]) >= 0).all()
    rows = list(range(5)) + list(np.linspace(5, len(r.table) - 1, 6).astype(int))
    for i in rows:
        est = pm.estimate(r.model, r.system, r.plan(i))
        row = r.table.iloc[i]
        assert est.step_time_s == pytest.approx(row["step_time_s"], rel=1e-9)
        assert est.memory_bytes.reserved / 2**30 == pytest.approx(row["memory_gib"], rel=1e-9)
        assert est.mfu == pytest.approx(row["mfu"], rel=1e-9)
        assert est.fits_in_memory


def test_counts_add_up_and_pruned_plans_do_not_fit(llama8b_search):
    r = llama8b_search
    c = r.counts.iloc[0]
    assert c["enumerated"] == c["feasible"] + c["pruned_for_memory"] == r.enumerated
    assert c["feasible"] == len(r.table) == r.feasible
    lay = enumerate_layouts(r.model, r.system, r.job)
    step = evaluate(r.model, r.system, lay)
    assert (~step.fits).sum() == c["pruned_for_memory"]
    assert step.step_time_s[step.fits].min() == pytest.approx(r.table["step_time_s"].iloc[0], rel=1e-12)


def test_cost_objective_ranks_gpu_hours_across_counts():
    r = search("llama-3-8b", "dgx-h100", [32, 64], 256, 8192, objective="cost", space={"zero": [1]})
    assert (np.diff(r.table["gpu_hours_per_step"]) >= 0).all()
    assert np.allclose(r.table["gpu_hours_per_step"], r.table["step_time_s"] * r.table["gpus"] / 3600)
    assert set(r.table["gpus"]) == {32, 64} and set(r.table["zero"]) == {1}


def test_pareto_front_matches_brute_force():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"gpus": rng.choice([8, 16, 32], 300), "step_time_s": rng.integers(1, 40, 300).astype(float),
                       "memory_gib": rng.integers(1, 40, 300).astype(float)})
    keys = ["gpus", "step_time_s", "memory_gib"]
    a = df[keys].to_numpy()
    dominated = [(np.all(a <= a[i], axis=1) & np.any(a < a[i], axis=1)).any() for i in range(len(a))]
    want = {tuple(x) for x in a[~np.array(dominated)]}
    got = {tuple(x) for x in pareto_front(df, keys)[keys].to_numpy()}
    assert got == want


# ---------------------------------------------------------------------------------------------------------
# Stage split DP
# ---------------------------------------------------------------------------------------------------------
def _stage_times(model, system, plan, split):
    p = resolve(plan.model_copy(update={"stage_layers": list(split)}), model, system)
    step = evaluate(model, system, Layouts.from_plan(p))
    return float(step.stage_time_max[0]), pm.estimate(model, system, p)


def test_stage_split_dp_equals_brute_force(dgx_h100_fixed_clock):
    # at one clock: the split's DP prices stages at the loop's clock, each split's own step clock comes after
    H100 = dgx_h100_fixed_clock
    model = small_model(layers=11)
    plan = resolve(Plan(gpus=8, tp=2, pp=4, micro_batch=1, global_batch=64, seq_len=2048, sequence_parallel=True),
                   model, H100)
    split = balance_stages(model, H100, plan)
    best = min(_stage_times(model, H100, plan, c)[0]
               for c in itertools.product(range(1, 9), repeat=4) if sum(c) == 11)
    assert split.t_max == pytest.approx(best, rel=1e-12)
    assert sum(split.layers) == 11 and len(split.layers) == 4
    # the LM head (32000 x 1024 / tp) is heavy for this small model, so the last stage takes fewer layers
    assert split.layers[-1] < max(split.layers)
    assert split.t_max <= split.default_t_max


def test_stage_split_respects_memory_where_the_default_does_not_fit():
    """Llama 3 405B, pp=16: the default 7/8x14/7 split overfills the first-stage-heavy 1F1B memory of the
    second stage; the DP moves a layer so that every stage fits, at some cost in time."""
    model = pm.load_model("llama-3.1-405b")
    plan = resolve(Plan(gpus=16384, tp=8, pp=16, micro_batch=1, global_batch=2048, seq_len=8192,
                        sequence_parallel=True, zero=1), model, H100)
    assert not pm.estimate(model, H100, plan).fits_in_memory
    split = balance_stages(model, H100, plan)
    assert split.fits and split.layers != default_stage_layers(126, 16)
    est = pm.estimate(model, H100, plan.model_copy(update={"stage_layers": split.layers}))
    assert est.fits_in_memory
    assert max(split.memory) <= H100.accelerator.hbm_bytes


# ---------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------
def test_no_feasible_plan_names_the_binding_constraint():
    with pytest.raises(InputError) as e:
        search("llama-3.1-405b", "dgx-h100", 8, 8, 8192)
    msg = str(e.value)
    assert "\n" not in msg and "smallest reserved memory" in msg and "GiB >" in msg and "tp=8" in msg


def test_gpu_count_without_factorisation():
    with pytest.raises(InputError) as e:
        search("llama-3-8b", "dgx-h100", 37, 16, 4096)  # prime > 32 layers, and 37 does not divide the batch
    msg = str(e.value)
    assert "gpus = 37 has no valid layout" in msg and "valid gpus nearby: 36, 38" in msg


def test_bad_objective_and_space():
    with pytest.raises(InputError, match="objective"):
        search("llama-3-8b", "dgx-h100", 8, 16, 4096, objective="speed")
    with pytest.raises(InputError, match="zero"):
        search("llama-3-8b", "dgx-h100", 8, 16, 4096, space={"zero": [5]})


def test_plan_file_placements_stay_within_megatron_memory_and_beat_its_time():
    """Plan files get PaSE's placements under the memory of Megatron's (what `estimate` assumes)."""
    from perfmodel.search.pase import solver as pase
    from perfmodel.search.plan_writer import megatron_cost

    model = pm.load_model("llama-3-8b")
    plan = resolve(Plan(gpus=64, tp=8, pp=2, micro_batch=1, global_batch=256, seq_len=8192,
                        sequence_parallel=True, zero=1), model, H100)
    graph = pase.operator_graph(model.n_layers)
    tables = pase.cost_tables(graph, model, H100, plan)
    a = pase.megatron_assignment(graph, tables, True)
    mega_s, mega_bytes = pase.evaluate(graph, tables, a, use_alt=pase.megatron_alternatives(graph, tables))
    assert megatron_cost(model, H100, plan) == (mega_s, mega_bytes)
    # the memory Megatron's placements need is the estimate's memory of the plan: one model counts both
    mb = pm.estimate(model, H100, plan).memory_bytes  # PaSE counts the allocated view and the runtime
    assert mega_bytes == pytest.approx(mb.allocated + mb.runtime, rel=1e-12)
    res = pase.solve(model, H100, plan, memory_budget=mega_bytes)
    assert res.budget_met and res.memory_bytes <= mega_bytes * (1 + 1e-12)
    assert res.time_s <= mega_s * (1 + 1e-12)


def test_plan_file_placements_rediscover_megatron_for_gpt3_175b():
    """GPT-3 175B (tied embeddings) on DGX A100, tp=8 over NVLink, under the plan-file budget: PaSE finds
    exactly Megatron-LM's pattern with sequence parallelism."""
    from perfmodel.search.pase import solver as pase
    from perfmodel.search.plan_writer import megatron_cost

    model = pm.load_model("gpt3-175b")
    plan = resolve(Plan(gpus=1024, tp=8, pp=16, micro_batch=1, global_batch=1536, seq_len=2048,
                        sequence_parallel=True, zero=1, recompute="selective"), model, A100)
    res = pase.solve(model, A100, plan, memory_budget=megatron_cost(model, A100, plan)[1])
    style = {p.op: p.style for p in res.placements()}
    assert style == {"embedding": "vocab", "norm1": "sequence", "qkv": "colwise", "attention": None,
                     "out_proj": "rowwise", "residual1": "sequence", "norm2": "sequence", "mlp_in": "colwise",
                     "activation": None, "mlp_out": "rowwise", "residual2": "sequence", "final_norm": "sequence",
                     "lm_head": "vocab", "loss": None}
    assert all(p.layers in (None, (0, 95)) for p in res.placements())  # every layer alike
