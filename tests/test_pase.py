"""PaSE per-operator sharding search: the DP against brute force, Megatron-LM rediscovered, other hardware, edge
costs by hand, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfmodel import estimate
from perfmodel.spec.plan import file as PF
from perfmodel.cost.comm import collectives as C
from perfmodel.cost.compute.kernels import Device, linear_op
from perfmodel.cost.comm.mesh import Mesh
from perfmodel.cost.compute.operator_table import operators
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.config import ModelConfig
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, default_stage_layers, resolve
from perfmodel.spec.model.operators import AXES, GRAPH_OPS, OPS, SPECS
from perfmodel.spec.plan.file import PLACEMENT_AXES, OpPlacement
from perfmodel.search.pase import solver as pase

_DGX = load_hardware("dgx-a100-80gb")
# the by-hand ring formulas below use the tier's own efficiency and latency: the system without its measured
# per-group NCCL fits (tests/test_nccl_tables.py checks those)
A100 = _DGX.on_datasheet(gemms=False)
NVL_BW, NVL_LAT = 300e9 * 0.78, 3.4e-6  # dgx-a100-80gb nvlink per direction x collective efficiency
IB_BW, IB_LAT = 25e9 * 0.90, 14e-6
TINY = ModelConfig(name="tiny", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, ffn_hidden=128, vocab=96,
                   max_seq_len=64, mlp="swiglu", norm="rmsnorm", position="rope")


def tiny(n_layers=1, **plan):
    model = TINY.model_copy(update={"n_layers": n_layers})
    kw = {"micro_batch": 2, "global_batch": 16, "seq_len": 32} | plan
    p = resolve(Plan(**kw), model, A100)
    graph = pase.operator_graph(model.n_layers)
    return graph, pase.cost_tables(graph, model, A100, p), p


# ---------------------------------------------------------------------------------------------------------
# 1. The DP is exact: it matches brute force
# ---------------------------------------------------------------------------------------------------------
def random_tables(graph: pase.Graph, rng, sizes: dict[str, int]) -> pase.CostTables:
    """Integer costs (exact in float64): a vector per kind, a matrix per edge key over random placement classes."""
    t = pase.CostTables({}, {}, {}, {}, {}, {})
    for k, n in sizes.items():
        t.time[k] = rng.integers(0, 50, n).astype(float)
        t.memory[k] = rng.integers(0, 9, n).astype(float)
    for e in graph.edges:
        if e.key in t.edge:
            continue
        ks, kd = graph.vertices[e.src].kind, graph.vertices[e.dst].kind
        rows, cols = rng.integers(1, sizes[ks] + 1), rng.integers(1, sizes[kd] + 1)
        t.src_class[e.key] = rng.integers(0, rows, sizes[ks])
        t.dst_class[e.key] = rng.integers(0, cols, sizes[kd])
        t.edge[e.key] = rng.integers(0, 30, (rows, cols)).astype(float)
        t.edge_kinds[e.key] = (ks, kd)
        if rng.random() < 0.5:  # a second way to run the edge: slower, saves memory
            t.alt[e.key] = (t.edge[e.key] + rng.integers(0, 9, (rows, cols)), -rng.integers(0, 9, (rows, cols)) * 1.0)
    return t


def random_graph(rng, n: int) -> pase.Graph:
    """A DAG in topological order: a chain plus random skip edges (joins and forks), one kind per vertex."""
    verts = [pase.Vertex(f"v{i}", f"k{i}") for i in range(n)]
    pairs = {(i, i + 1) for i in range(n - 1)}
    pairs |= {tuple(sorted(rng.choice(n, 2, replace=False))) for _ in range(n // 2 + 1)}
    edges = [pase.Edge(int(a), int(b), 0, f"e{a}-{b}") for a, b in sorted(pairs)]
    return pase.Graph(verts, edges)


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_brute_force_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    graph = random_graph(rng, int(rng.integers(5, 9)))
    tables = random_tables(graph, rng, {v.kind: int(rng.integers(2, 5)) for v in graph.vertices})
    for lam in (0.0, 1.0, 2.0):
        best, _ = pase.brute_force(graph, tables, lam)
        for value, assignment in (pase.dp(graph, tables, lam), pase.dp(graph, tables, lam, chain=True)):
            assert value == best
            t, mem = pase.evaluate(graph, tables, assignment, lam)
            assert t + lam * mem == best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n_layers", [1, 2])
def test_dp_equals_brute_force_on_operator_graphs_with_random_costs(seed, n_layers):
    # Topology of the transformer (residual edges included), identical layers sharing cost tables.
    rng = np.random.default_rng(100 + seed)
    graph = pase.operator_graph(n_layers)
    kinds = list(GRAPH_OPS)
    sizes = dict.fromkeys(kinds, 2)
    for k in rng.choice(kinds, 5, replace=False):
        sizes[str(k)] = 3 if n_layers == 1 else 1  # at most ~1e6 strategies
    tables = random_tables(graph, rng, sizes)
    best, _ = pase.brute_force(graph, tables)
    assert pase.dp(graph, tables)[0] == best
    assert pase.dp(graph, tables, chain=True)[0] == best


def small_subsets(tables: pase.CostTables, graph: pase.Graph, rng, limit: int) -> dict[str, np.ndarray]:
    """A random subset of each kind's configurations (config 0 always kept) with at most `limit` strategies."""
    count = {k: sum(v.kind == k for v in graph.vertices) for k in tables.time}
    keep = {k: min(3, tables.size(k)) for k in tables.time}
    while math.prod(keep[k] ** count[k] for k in keep) > limit:
        k = max((k for k in keep if keep[k] > 1), key=lambda k: (count[k], rng.random()))
        keep[k] -= 1
    return {k: np.r_[0, rng.choice(np.arange(1, tables.size(k)), n - 1, replace=False)] for k, n in keep.items()}


@pytest.mark.parametrize("mesh", [{"gpus": 2, "tp": 2}, {"gpus": 4, "tp": 2}, {"gpus": 8, "tp": 2, "cp": 2}])
@pytest.mark.parametrize("n_layers", [1, 2])
def test_dp_equals_brute_force_on_real_cost_tables(mesh, n_layers):
    graph, tables, _ = tiny(n_layers, **mesh)
    rng = np.random.default_rng(n_layers)
    sub = pase.restrict_tables(tables, small_subsets(tables, graph, rng, 300_000))
    lam_scale = np.mean([t.mean() for t in sub.time.values()]) / np.mean([m.mean() for m in sub.memory.values()])
    for lam in (0.0, 0.3 * lam_scale, 30 * lam_scale):
        best, _ = pase.brute_force(graph, sub, lam)
        for value, assignment in (pase.dp(graph, sub, lam), pase.dp(graph, sub, lam, chain=True)):
            assert value == pytest.approx(best, rel=1e-12)
            t, mem = pase.evaluate(graph, sub, assignment, lam)
            assert t + lam * mem == pytest.approx(best, rel=1e-12)


def test_chain_dp_equals_whole_graph_dp_on_full_tables_of_a_three_axis_mesh():
    graph, tables, _ = tiny(2, gpus=8, tp=2, cp=2)
    assert {a: int(tables.mesh.size[a]) for a in AXES} == {"dp": 2, "cp": 2, "tp": 2}
    # dp splits only the batch and cp only the sequence (executor semantics): qkv's choices are tp's
    assert tables.size("qkv") == 5 and (tables.configs["qkv"][:, :2] == tables.configs["qkv"][0, :2]).all()
    for lam in (0.0, 1e-9):
        whole, a = pase.dp(graph, tables, lam)
        chain, b = pase.dp(graph, tables, lam, chain=True)
        assert whole == pytest.approx(chain, rel=1e-12)
        for assignment in (a, b):
            t, mem = pase.evaluate(graph, tables, assignment, lam)
            assert t + lam * mem == pytest.approx(whole, rel=1e-12)


def test_generate_seq_keeps_the_dependent_set_at_two_on_a_transformer():
    graph, tables, _ = tiny(2, gpus=4, tp=2)
    order = pase.generate_seq(graph)
    assert sorted(order) == list(range(len(graph.vertices)))
    assert order[:3] == [0, 1, 2]  # embedding, its output, norm1.0: the chain first, the residual joins later
    prob = pase.Problem(graph, tables, order)
    prob.solve()
    # Processed-set frontier: the layer input (waiting for residual1) and the current op of the branch.
    assert prob.stats.max_dependent_set == 2
    assert pase.separators(graph) == [0] + [v for v, x in enumerate(graph.vertices) if x.kind in (
        "embedding_output", "residual1", "residual2", "final_norm", "lm_head", "loss")]


def test_budget_search_returns_the_smallest_lambda_that_fits():
    graph, tables, _ = tiny(2, gpus=8, tp=2, cp=2)
    prob = pase.ChainProblem(graph, tables)
    t0, m0 = prob.evaluate(prob.solve(0.0)[1])
    big = prob.evaluate(prob.solve(1e6 * t0 / m0)[1], 1e6 * t0 / m0)[1]
    budget = 0.5 * (m0 + big)
    point, met, runs = pase.fit_budget(prob, budget)
    lam = point.reported_lam
    assert met and point.memory <= budget and lam > 0 and runs >= 3
    # optimal at lam ...
    value, _ = prob.solve(lam)
    assert point.time + lam * point.memory == pytest.approx(value, rel=1e-9)
    # ... and below it the optimum does not fit
    below = prob.solve(lam * (1 - 1e-6))[1]
    assert prob.evaluate(below, lam * (1 - 1e-6))[1] > budget


# ---------------------------------------------------------------------------------------------------------
# 2. Megatron-LM rediscovered on NVLink under memory pressure
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def megatron_case():
    model = load_model("llama-3-8b")
    plan = resolve(Plan(gpus=8, tp=8, micro_batch=1, global_batch=32, seq_len=8192, zero=1), model, A100)
    graph = pase.operator_graph(model.n_layers)
    tables = pase.cost_tables(graph, model, A100, plan)
    sp = pase.megatron_assignment(graph, tables, sequence_parallel=True)
    budget = pase.evaluate(graph, tables, sp)[1]  # Megatron-LM's own footprint: weights must be sharded
    result = pase.solve(model, A100, plan, memory_budget=budget)
    return model, plan, graph, tables, sp, result


def by_name(result: pase.PaseResult) -> dict[str, pase.VertexResult]:
    return {v.name: v for v in result.vertices}


def test_megatron_pattern_rediscovered(megatron_case):
    model, plan, graph, tables, sp, r = megatron_case
    assert r.budget_met and r.lam > 0
    # Replicating the weights (pure data parallelism over the tp axis) would need far more memory.
    unconstrained = pase.solve(model, A100, plan, memory_budget=1e15)
    assert unconstrained.memory_bytes > 2 * r.memory_budget_bytes
    v = by_name(r)
    for layer in range(model.n_layers):
        assert v[f"qkv.{layer}"].style == "colwise" and v[f"qkv.{layer}"].split == {"heads": ["tp"]}
        assert v[f"mlp_in.{layer}"].style == "colwise" and v[f"mlp_in.{layer}"].weight[2] == "Shard(0)"
        assert v[f"out_proj.{layer}"].style == "rowwise" and v[f"out_proj.{layer}"].output[2] == "Partial()"
        assert v[f"mlp_out.{layer}"].style == "rowwise" and v[f"mlp_out.{layer}"].weight[2] == "Shard(1)"
        assert v[f"attention.{layer}"].split == {"heads": ["tp"]}
        for op in ("residual1", "norm2", "residual2") + (("norm1",) if layer else ()):
            assert v[f"{op}.{layer}"].style == "sequence", op
            assert v[f"{op}.{layer}"].output == ["Replicate()", "Replicate()", "Shard(1)"]
    assert v["final_norm"].style == "sequence"
    assert v["lm_head"].style == "vocab" and v["lm_head"].weight[2] == "Shard(0)"
    assert v["loss"].split == {"vocab": ["tp"]}
    # Cheaper than (or equal to) Megatron-LM's assignment under the same cost function, within the same memory
    # (solve keeps it as an incumbent where the Lagrangian walk lands on a slower hull point) ...
    assert r.time_s <= pase.evaluate(graph, tables, sp)[0] + 1e-9
    # ... and the walk by itself finds Megatron-LM's configuration of every transformer layer
    walk = pase.fit_budget(pase.ChainProblem(graph, tables), r.memory_budget_bytes)[0].assignment
    layers = [i for i, v in enumerate(graph.vertices) if "." in v.name]
    assert [walk[i] for i in layers] == [sp[i] for i in layers]
    assert r.memory_bytes <= r.memory_budget_bytes


def test_sequence_parallel_norms_beat_replicated_norms_by_hand(megatron_case):
    # Row-parallel output into a replicated residual: one all-reduce forward, nothing backward (Shoeybi et al.
    # 2019, the g operator). Into a sequence-sharded residual: reduce-scatter forward, all-gather backward
    # (Korthikanti et al. 2022). Ring collectives make both cost the same, so SP wins by the norm/residual work.
    model, plan, graph, tables, sp, _ = megatron_case
    m, F = plan.num_microbatches, 1 * 8192 * model.hidden * 2
    ph = C.group_phases(A100, 8, 1, 8)
    rs, ag, ar = (float(C.collective_time(k, F, ph)) for k in ("reduce_scatter", "all_gather", "all_reduce"))
    assert rs == pytest.approx(7 / 8 * F / NVL_BW + 7 * NVL_LAT, rel=1e-12)
    assert ar == pytest.approx(rs + ag, rel=1e-12)
    rowwise = pase.find_config(tables, graph, "out_proj", {"heads": ["tp"]})
    seq = pase.find_config(tables, graph, "residual1", {"seq": ["tp"]})
    rep = pase.find_config(tables, graph, "residual1", {})
    key = "out_proj->residual1:0"
    edge = lambda a, b: tables.edge[key][tables.src_class[key][a], tables.dst_class[key][b]]
    assert edge(rowwise, seq) == pytest.approx(m * (rs + ag), rel=1e-12)
    assert edge(rowwise, rep) == pytest.approx(m * ar, rel=1e-12)
    # norm -> column-parallel GEMM: all-gather forward + reduce-scatter backward, or the backward all-reduce (f).
    col = pase.find_config(tables, graph, "mlp_in", {"ffn": ["tp"]})
    key = "norm2->mlp_in:0"
    n_seq, n_rep = (pase.find_config(tables, graph, "norm2", s) for s in ({"seq": ["tp"]}, {}))
    assert edge(n_seq, col) == pytest.approx(m * (ag + rs), rel=1e-12)
    assert edge(n_rep, col) == pytest.approx(m * ar, rel=1e-12)
    # Whole graph: the same communication, less elementwise work with SP.
    no_sp = pase.megatron_assignment(graph, tables, sequence_parallel=False)
    edges = lambda a: sum(pase.edge_parts(graph, tables, a, 0.0)[0])
    assert edges(sp) == pytest.approx(edges(no_sp), rel=1e-9)
    assert pase.evaluate(graph, tables, sp)[0] < pase.evaluate(graph, tables, no_sp)[0]


def test_embedding_sharded_by_hidden_beats_vocab_parallel_by_hand(megatron_case):
    # The search shards the embedding table over tp by columns (torch ColwiseParallel on nn.Embedding), not by
    # vocabulary rows as Megatron-LM does: a vocab-parallel lookup writes a full-size Partial that must be
    # reduce-scattered, while column shards need only an all-to-all of 1/8 of the tensor.
    model, plan, graph, tables, _, r = megatron_case
    v = by_name(r)
    assert v["embedding"].weight == ["Replicate()", "Replicate()", "Shard(1)"] and v["embedding"].style == "colwise"
    a = [x.config for x in r.vertices]
    b = list(a)
    b[0] = pase.find_config(tables, graph, "embedding", {"vocab": ["tp"]})
    m, F = plan.num_microbatches, 8192 * model.hidden * 2
    ph = C.group_phases(A100, 8, 1, 8)
    rs, ag, a2a = (float(C.collective_time(k, s, ph))
                   for k, s in (("reduce_scatter", F), ("all_gather", F), ("all_to_all", F / 8)))
    assert a2a == pytest.approx(7 / 8 * F / 8 / NVL_BW + 7 * NVL_LAT, rel=1e-12)
    # a: S(2) -> the embedding's output, sequence-split (S(1)) as norm1.0 and residual1.0 read it: an all-to-all
    #    each way. b: Partial -> S(1): reduce-scatter forward, all-gather backward.
    assert v["embedding_output"].input[2] == "Shard(1)" and v["norm1.0"].input[2] == "Shard(1)"
    hand = m * ((rs + ag) - 2 * a2a) + tables.time["embedding"][b[0]] - tables.time["embedding"][a[0]]
    (ta, ma), (tb, mb) = pase.evaluate(graph, tables, a), pase.evaluate(graph, tables, b)
    assert tb - ta == pytest.approx(hand, rel=1e-9)
    assert hand > 0 and mb == pytest.approx(ma, rel=1e-12)  # same memory: both shard the table by 8


def test_placements_follow_the_plan_file_conventions(megatron_case):
    model, _, _, _, _, r = megatron_case
    pl = r.placements()
    assert all(isinstance(p, OpPlacement) for p in pl)
    ops = [p.op for p in pl]
    assert ops[0] == "embedding" and ops[-3:] == ["final_norm", "lm_head", "loss"]
    qkv = [p for p in pl if p.op == "qkv"]
    assert len(qkv) == 1 and qkv[0].layers == (0, model.n_layers - 1)
    assert qkv[0].weight == ["Replicate()", "Replicate()", "Shard(0)"]  # nn.Linear [out, in]: colwise
    norm1 = [p for p in pl if p.op == "norm1"]
    assert [p.layers for p in norm1] == [(0, model.n_layers - 1)]  # the first layer reads what the others do
    assert "embedding_output" not in ops  # a vertex of the graph, not a module of the executor
    for p in pl:
        assert len(p.input) == len(p.output) == len(PLACEMENT_AXES)
        assert (p.layers is None) == (p.op in ("embedding", "final_norm", "lm_head", "loss"))
    text = r.summary()
    assert "qkv" in text and "colwise" in text and "0-31" in text
    assert pase.PaseResult.model_validate_json(r.model_dump_json()).time_s == r.time_s


def test_placements_make_a_valid_plan_file():
    model, system = load_model("llama-3-8b"), load_hardware("dgx-h100")
    plan = resolve(Plan(gpus=64, tp=8, pp=2, micro_batch=1, global_batch=64, seq_len=4096, zero=1), model, system)
    r = pase.solve("llama-3-8b", "dgx-h100", plan)
    est = estimate(model, system, plan)
    pf = PF.PlanFile(version=1, model=model, hardware=system, plan=plan, mesh=PF.mesh_of(plan),
                     stage_layers=default_stage_layers(model.n_layers, plan.pp), placements=r.placements(),
                     prediction=PF.Prediction(step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s,
                                              mfu=est.mfu, memory_bytes=est.memory_bytes.reserved,
                                              memory_capacity_bytes=est.memory_capacity_bytes,
                                              fits_in_memory=est.fits_in_memory))
    assert PF.check(pf) is pf
    assert {p.op for p in pf.placements} == set(OPS)


# ---------------------------------------------------------------------------------------------------------
# 3. Something else where the hardware makes it cheaper
# ---------------------------------------------------------------------------------------------------------
def test_slow_tp_network_gives_data_parallelism_on_that_axis():
    slow_tiers = [A100.tiers[0].model_copy(update={"bandwidth_gbps": 2.0})] + A100.tiers[1:]
    slow = A100.model_copy(update={"tiers": slow_tiers, "name": "slow-first-tier"})
    model = load_model("llama-3-8b")
    plan = resolve(Plan(gpus=8, tp=8, micro_batch=8, global_batch=64, seq_len=8192, zero=1), model, slow)
    r = pase.solve(model, slow, plan, memory_budget=1e13)
    for v in r.vertices:
        if v.layer is not None:
            assert v.split == {"batch": ["tp"]}, v.name
            assert v.weight in (None, ["Replicate()"] * 3)
    graph = pase.operator_graph(model.n_layers)
    tables = pase.cost_tables(graph, model, slow, plan)
    chosen = [v.config for v in r.vertices]
    assert r.time_s == pytest.approx(pase.evaluate(graph, tables, chosen)[0], rel=1e-12)
    megatron = pase.evaluate(graph, tables, pase.megatron_assignment(graph, tables))[0]
    assert r.time_s < 0.2 * megatron


def test_small_model_with_room_to_spare_replicates_its_mlp_weights():
    model = load_model("gpt3-1.3b")
    plan = resolve(Plan(gpus=8, tp=8, micro_batch=1, global_batch=64, seq_len=2048, zero=1), model, A100)
    r = pase.solve(model, A100, plan, memory_budget=1e13)
    assert r.lam == 0.0 and r.budget_met
    v = by_name(r)
    for layer in range(model.n_layers):
        for op in ("mlp_in", "mlp_out"):
            assert v[f"{op}.{layer}"].weight[2] == "Replicate()"
            assert set(v[f"{op}.{layer}"].split) <= {"batch", "seq"}
    graph = pase.operator_graph(model.n_layers)
    tables = pase.cost_tables(graph, model, A100, plan)
    assert r.time_s < pase.evaluate(graph, tables, pase.megatron_assignment(graph, tables))[0]


# ---------------------------------------------------------------------------------------------------------
# 4. Redistribution costs by hand
# ---------------------------------------------------------------------------------------------------------
def mesh(**plan):
    p = resolve(Plan(micro_batch=1, global_batch=16, seq_len=32, **plan), load_model("llama-3-8b"), A100)
    return Mesh(A100, p.gpus, p.dp, p.cp, p.tp)


def test_single_axis_redistributions():
    tp8, F = mesh(gpus=8, tp=8), 1e8
    gather = 7 / 8 * F / NVL_BW + 7 * NVL_LAT
    ph = C.group_phases(A100, 8, 1, 8)
    cases = {
        ("Partial()", "Shard(1)"): gather,  # reduce-scatter
        ("Shard(1)", "Replicate()"): gather,  # all-gather
        ("Partial()", "Replicate()"): 2 * gather,  # all-reduce
        ("Shard(2)", "Shard(1)"): 7 / 8 * F / 8 / NVL_BW + 7 * NVL_LAT,  # all-to-all of each rank's 1/8
        ("Replicate()", "Shard(0)"): 0.0,  # local slice
        ("Shard(1)", "Shard(1)"): 0.0,
    }
    r = ["Replicate()", "Replicate()"]  # dp and cp: size 1
    for (src, dst), want in cases.items():
        assert pase.redistribute_time(tp8, [*r, src], [*r, dst], F) == pytest.approx(want, rel=1e-12), (src, dst)
    assert pase.redistribute_time(tp8, [*r, "Partial()"], [*r, "Shard(1)"], F) == pytest.approx(
        float(C.collective_time("reduce_scatter", F, ph)), rel=1e-12)


def test_two_axis_redistributions_run_hierarchically():
    m2 = mesh(gpus=16, tp=8)  # dp = 2, stride 8: across nodes on InfiniBand
    assert {a: int(m2.size[a]) for a in AXES} == {"dp": 2, "cp": 1, "tp": 8}
    F = 1e8
    rt = lambda a, b: pase.redistribute_time(m2, [a[0], "Replicate()", a[1]], [b[0], "Replicate()", b[1]], F)
    nvl = 7 / 8 * F / NVL_BW + 7 * NVL_LAT
    ib_of_shard = 1 / 2 * F / 8 / IB_BW + IB_LAT  # the outer phase moves what the inner one left
    # tp reduce-scatter of a batch-sharded tensor: half the bytes
    assert rt(["Shard(0)", "Partial()"], ["Shard(0)", "Shard(1)"]) == pytest.approx(
        7 / 8 * F / 2 / NVL_BW + 7 * NVL_LAT, rel=1e-12)
    # gather over both axes: NVLink phase on the whole tensor, then InfiniBand on 1/8 of it
    assert rt(["Shard(0)", "Shard(1)"], ["Replicate()", "Replicate()"]) == pytest.approx(
        nvl + ib_of_shard, rel=1e-12)
    assert rt(["Partial()", "Partial()"], ["Replicate()", "Replicate()"]) == pytest.approx(
        2 * (nvl + ib_of_shard), rel=1e-12)
    # reduce-scatter on tp first (shrinking), then the dp all-gather of the tp-sharded tensor
    assert rt(["Shard(0)", "Partial()"], ["Replicate()", "Shard(1)"]) == pytest.approx(
        (7 / 8 * F / 2 / NVL_BW + 7 * NVL_LAT) + (1 / 2 * F / 8 / IB_BW + IB_LAT), rel=1e-12)


def test_weight_gradient_reduction_and_zero_states_by_hand():
    model = load_model("llama-3-8b")
    plan = resolve(Plan(gpus=64, tp=8, micro_batch=1, global_batch=64, seq_len=2048, zero=1), model, A100)
    graph = pase.operator_graph(model.n_layers)
    tables = pase.cost_tables(graph, model, A100, plan)
    dev, m, h, f = Device(model, A100, plan), plan.num_microbatches, model.hidden, model.ffn_hidden
    params = 2 * h * f  # gate and up
    share = params / model.params_per_layer()  # one bucket per layer: its part of the call's latency
    dp_ph, tp_ph = C.group_phases(A100, 8, 8, 64), C.group_phases(A100, 8, 1, 64)
    adam = (26 + 2 * 4) / (2.039e12 * A100.efficiency.memory_bandwidth)  # s per parameter updated, fp32 grads

    def coll(kind, size, ph):
        lat = float(C.collective_time(kind, 0.0, ph))
        return share * lat + float(C.collective_time(kind, size, ph)) - lat

    def kernels(tokens, n):
        return sum(float(op.fwd_s + op.bwd_s) for op in linear_op(dev, "mlp_in", tokens, n, h))

    assert A100.accelerator.hbm_bandwidth == pytest.approx(2.039e12) and A100.efficiency.optimizer_bandwidth is None
    # ZeRO-1 over dp: gradients reduce-scattered and bf16 weights all-gathered once per step on the dp groups;
    # the Adam step updates 1/dp of the tp shard.
    cfg = pase.find_config(tables, graph, "mlp_in", {"batch": ["dp"], "ffn": ["tp"]})
    # ... and Megatron-LM's own passes of the step (megatron-core's step_passes, cost.memory.states): the master re-read
    # over the updated 1/dp, the gradient buffer's zero, NaN-check norm and 1/dp prescale over the tp shard
    from perfmodel.cost.memory.states import grad_buffer_bytes, master_copy_bytes
    from perfmodel.spec.stack.profile import load_stack

    def passes(local):  # Megatron's passes over `local` gradient-buffer parameters, 1/dp of them updated
        return (local / 8 * master_copy_bytes("fp32") + local * grad_buffer_bytes(
            4, load_stack("megatron-core").step_passes, True)) / (2.039e12 * A100.efficiency.memory_bandwidth)

    want = m * kernels(2048, 2 * f / 8) + coll("reduce_scatter", params / 8 * 4, dp_ph) + coll(
        "all_gather", params / 8 * 2, dp_ph) + params / 8 / 8 * adam + passes(params / 8)
    assert tables.time["mlp_in"][cfg] == pytest.approx(want, rel=1e-12)
    # states: 2 + 4 B per parameter over the tp shards, 12 B Adam over tp x dp; kept input 2 B x tokens x hidden
    assert tables.memory["mlp_in"][cfg] == pytest.approx(params / 8 * (2 + 4 + 12 / 8) + 2 * 2048 * h, rel=1e-12)
    # Replicated weight, batch over dp and sequence over tp: the gradient is Partial on both axes; the dp
    # reduce-scatter, then the whole local gradient all-reduced over tp (Megatron-LM's order for the sequence-
    # parallel norms), and the dp all-gather of the weights.
    cfg = pase.find_config(tables, graph, "mlp_in", {"batch": ["dp"], "seq": ["tp"]})
    want = m * kernels(2048 / 8, 2 * f) + coll("reduce_scatter", params * 4, dp_ph) + coll(
        "all_reduce", params * 4, tp_ph) + coll("all_gather", params * 2, dp_ph) + params / 8 * adam + passes(params)
    assert tables.time["mlp_in"][cfg] == pytest.approx(want, rel=1e-12)
    assert tables.memory["mlp_in"][cfg] == pytest.approx(params * (2 + 4 + 12 / 8) + 2 * 2048 / 8 * h, rel=1e-12)
    # tp unused (every tp rank repeats the work): nothing to reduce over tp.
    cfg = pase.find_config(tables, graph, "mlp_in", {"batch": ["dp"]})
    want = m * kernels(2048, 2 * f) + coll("reduce_scatter", params * 4, dp_ph) + coll(
        "all_gather", params * 2, dp_ph) + params / 8 * adam + passes(params)
    assert tables.time["mlp_in"][cfg] == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------------------------------------------------
# 5. Bad input
# ---------------------------------------------------------------------------------------------------------
def one_line(err) -> str:
    msg = str(err.value)
    assert msg and "\n" not in msg
    return msg


def test_impossible_mesh_is_one_input_error_line():
    model = load_model("llama-3-8b")
    with pytest.raises(InputError) as e:
        pase.solve(model, A100, Plan(gpus=24, tp=3, micro_batch=1, global_batch=8, seq_len=2048))
    assert "tp=3" in one_line(e)
    with pytest.raises(InputError) as e:
        pase.solve(model, A100, Plan(gpus=12, tp=8, micro_batch=1, global_batch=8, seq_len=2048))
    assert "gpus = 12" in one_line(e)


def test_bad_budget_and_placements_are_input_errors():
    model = load_model("gpt3-125m")
    plan = Plan(gpus=8, tp=2, micro_batch=1, global_batch=8, seq_len=1024)
    with pytest.raises(InputError) as e:
        pase.solve(model, A100, plan, memory_budget=-1.0)
    assert "memory_budget" in one_line(e)
    with pytest.raises(InputError) as e:
        pase.redistribute_time(mesh(gpus=2, tp=2), ["Replicate()", "Replicate()", "Shard(x)"], ["Replicate()"] * 3, 1.0)
    assert "Shard(x)" in one_line(e)


def test_unmeetable_budget_is_reported_not_raised():
    _, _, plan = tiny(1, gpus=4, tp=2)
    r = pase.solve(TINY.model_copy(update={"n_layers": 1}), A100, plan, memory_budget=1.0)
    assert not r.budget_met and r.lam is None and r.memory_bytes > 1.0
    assert "does NOT fit" in r.summary()


def test_configurations_respect_divisibility():
    graph, tables, _ = tiny(1, gpus=8, tp=2, cp=2)  # batch = micro_batch 2 x dp 2 = 4
    sizes = [int(tables.mesh.size[a]) for a in AXES]
    ops = operators(TINY)
    split = lambda row, d: math.prod(n for n, c in zip(sizes, row) if c == d)
    for kind, configs in tables.configs.items():
        dims = SPECS[kind].dims
        div = dict(ops[kind].divisors, batch=4, seq=32)
        for row in configs:
            for d, dim in enumerate(dims):
                assert dim == "vocab" or div[dim] % split(row, d) == 0
    # heads = 4 with 2 kv heads: qkv and attention may split heads by 2 only; out_proj too, as only tp may
    # split heads (dp splits the batch and cp the sequence, the executor's semantics)
    heads = lambda k: {split(r, SPECS[k].dim_index("heads")) for r in tables.configs[k]}
    assert heads("qkv") == {1, 2} and heads("out_proj") == {1, 2}
    # every assignment of axes to dims is listed once
    n = {k: len({tuple(r) for r in c}) for k, c in tables.configs.items()}
    assert n == {k: len(c) for k, c in tables.configs.items()}
    for kind, c in tables.configs.items():
        dims = SPECS[kind].dims
        assert (c[:, AXES.index("dp")] == dims.index("batch")).all()
        assert (c[:, AXES.index("cp")] == dims.index("seq")).all()
        assert c[0, AXES.index("tp")] == -1
        if kind == "attention":
            assert dims.index("seq") not in c[:, AXES.index("tp")]


def test_solve_runs_the_walks_edges_the_faster_way_where_that_fits(megatron_case):
    # The Lagrangian walk stops at lambda > 0, where an edge that may keep a gathered input or gather it again
    # runs the way cheaper in time + lambda * bytes; with_incumbent runs those edges the faster way when the
    # memory still fits: the same configurations, faster, within the budget.
    model, plan, graph, tables, sp, r = megatron_case
    walk = pase.fit_budget(pase.ChainProblem(graph, tables), r.memory_budget_bytes)[0]
    assert walk.lam > 0
    assert [v.config for v in r.vertices] == list(walk.assignment)
    t0, m0 = pase.evaluate(graph, tables, walk.assignment, 0.0)
    assert r.time_s == pytest.approx(t0, rel=1e-12) and r.time_s < walk.time
    assert m0 <= r.memory_budget_bytes


def test_moe_mlp_is_a_vertex_of_every_layer_that_splits_only_tokens():
    """A MoE model's graph has one "moe" vertex per layer (norm2 -> moe -> residual2, beside the dense MLP's
    chain); on a tp = 2 mesh its configurations split the tokens over tp (batch or sequence), never the hidden
    dim or nothing; every configuration costs the same (the experts sit where ep x etp put them), and what
    moves between norm2 and the MoE MLP under sequence parallelism is free: both hold the same sequence shard."""
    from perfmodel.spec.model.config import MoEConfig

    model = TINY.model_copy(update={"moe": MoEConfig(n_experts=4, top_k=2, expert_ffn_hidden=32)})
    plan = resolve(Plan(gpus=4, tp=2, ep=2, sequence_parallel=True, micro_batch=2, global_batch=16, seq_len=32),
                   model, A100)
    graph = pase.operator_graph(model.n_layers, moe=True)
    assert [v.layer for v in graph.vertices if v.kind == "moe"] == [0, 1]
    assert {(graph.vertices[e.src].kind, graph.vertices[e.dst].kind) for e in graph.edges
            if "moe" in (graph.vertices[e.src].kind, graph.vertices[e.dst].kind)} == {("norm2", "moe"),
                                                                                     ("moe", "residual2")}
    tables = pase.cost_tables(graph, model, A100, plan)
    spec, tp = SPECS["moe"], AXES.index("tp")
    assert sorted(spec.dims[d] for d in tables.configs["moe"][:, tp]) == ["batch", "seq"]
    assert np.ptp(tables.time["moe"]) == 0 and np.ptp(tables.memory["moe"]) == 0 and tables.time["moe"][0] > 0
    a = pase.megatron_assignment(graph, tables, sequence_parallel=True)
    into = next(i for i, e in enumerate(graph.edges) if e.key == "norm2->moe:0")
    seconds, _, _ = pase.edge_parts(graph, tables, a, 0.0, pase.megatron_alternatives(graph, tables))
    assert seconds[into] == 0.0
    found = pase.solve(model, A100, plan)
    t_mega, m_mega = pase.evaluate(graph, tables, a, use_alt=pase.megatron_alternatives(graph, tables))
    assert m_mega <= A100.accelerator.hbm_bytes  # fits, so PaSE is never slower than Megatron-LM's assignment
    assert found.budget_met and found.time_s <= t_mega * (1 + 1e-9)
    assert sum(v.op == "moe" for v in found.vertices) == 2
    assert "moe" not in OPS  # the plan file places the stage's operators; the experts are the plan's ep x etp


def test_shared_experts_move_their_tokens_in_the_moe_vertex_not_on_the_dense_mlps_edges():
    """A MoE model whose every layer routes, with a shared expert, on tp = 2 with sequence parallelism: the dense
    MLP's operators cost nothing and neither do its edges in any configuration (so PaSE cannot claim a speed-up
    by placing them elsewhere); the shared expert's gather and scatter over tp are in the "moe" vertex, which
    costs more than without the shared expert by at least that traffic."""
    from perfmodel.cost.layouts import Layouts
    from perfmodel.cost.comm.sharded import shared_expert_comms
    from perfmodel.spec.model.config import MoEConfig

    moe = MoEConfig(n_experts=4, top_k=2, expert_ffn_hidden=32, n_shared_experts=1)
    model = TINY.model_copy(update={"moe": moe})
    plan = resolve(Plan(gpus=4, tp=2, ep=2, sequence_parallel=True, micro_batch=2, global_batch=16, seq_len=32),
                   model, A100)
    graph = pase.operator_graph(model.n_layers, moe=True)
    tables = pase.cost_tables(graph, model, A100, plan)
    for key in ("norm2->mlp_in:0", "mlp_in->activation:0", "mlp_out->residual2:0"):
        assert not tables.edge[key].any()
    assert not tables.time["mlp_in"].any() and not tables.time["mlp_out"].any()
    comms = shared_expert_comms(model, A100, Layouts.from_plan(plan))
    assert [c.collective for c in comms] == ["all_gather", "reduce_scatter"] and all(c.exposed[0] > 0 for c in comms)
    plain = model.model_copy(update={"moe": MoEConfig(n_experts=4, top_k=2, expert_ffn_hidden=32)})
    t_plain = pase.cost_tables(graph, plain, A100, plan).time["moe"][0]
    assert tables.time["moe"][0] - t_plain > plan.num_microbatches * sum(float(c.exposed[0]) for c in comms) * 0.999
