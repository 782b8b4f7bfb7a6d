"""One cost model: PaSE's cost tables price Megatron-LM's assignment exactly as `estimate` prices the plan.

A property test over random dense models and every kind of layout the search can emit (tp, sequence
parallelism, cp, pp, vpp and the interleaved schedule, explicit stage splits, recompute (with the names policy's
saved and host-offloaded tensors), ZeRO 0-3, the optimizer state in host memory, micro-batch,
fp8, unfused attention, bf16 gradients), on GPU systems, a TPU torus, and a system whose collectives cannot
overlap compute and whose ranks share a host's cores: per micro-batch, one layer, the embedding and the head
cost in PaSE's tables (vertices and the edges they own) what `estimate` says (`Step.unit_time`), and the memory
PaSE counts for the assignment is the estimate's memory of the plan, to 1e-9 relative.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from perfmodel.cost.layouts import Layouts
from perfmodel.cost.step.evaluate import evaluate
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import SharedHost, load_hardware
from perfmodel.spec.model.config import ModelConfig, MoEConfig
from perfmodel.spec.model.operators import UNIT_OF, edge_unit
from perfmodel.spec.plan.layout import Plan, divisors, resolve
from perfmodel.spec.plan.recompute import SAVED_TENSORS
from perfmodel.search.pase import solver as pase

A100 = load_hardware("dgx-a100-80gb")
_GB200 = load_hardware("gb200-nvl72")
# a torus; a 72-wide domain groups straddle, at one clock: the solver prices ops at the loop's clock, the step's own
# clock under the power limit (cost.power) comes after, from the whole step's mix
OTHERS = [load_hardware("tpu-v4"), _GB200.model_copy(update={"accelerator": _GB200.accelerator.model_copy(
    update={"power": None})})]
SHARED = A100.model_copy(update={  # and a host link, for the names policy's offloaded tensors
    "name": "no-overlap-shared-host",
    "efficiency": A100.efficiency.model_copy(update={"comm_overlap": 0.25}),
    "shared_host": SharedHost(ranks=8, cores=4), "host": load_hardware("dgx-h100").host})


@st.composite
def models(draw) -> ModelConfig:
    heads = draw(st.sampled_from([4, 8]))
    kv = draw(st.sampled_from(divisors(heads)))
    head_dim = draw(st.sampled_from([8, 16]))
    hidden = draw(st.sampled_from([heads * head_dim, 2 * heads * head_dim]))
    position = draw(st.sampled_from(["learned", "rope", "alibi"]))
    return ModelConfig(
        name="random", n_layers=draw(st.integers(1, 6)), hidden=hidden, n_heads=heads, n_kv_heads=kv,
        head_dim=head_dim, ffn_hidden=draw(st.sampled_from([32, 48, 64, 96])),
        vocab=draw(st.sampled_from([96, 100, 256])), max_seq_len=256, mlp=draw(st.sampled_from(["gelu", "swiglu"])),
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])), position=position,
        tie_embeddings=draw(st.booleans()), linear_bias=draw(st.sampled_from(["none", "qkv", "all"])),
        dropout=draw(st.sampled_from([0.0, 0.1])))


@st.composite
def plans(draw, model: ModelConfig) -> Plan:
    tp = draw(st.sampled_from(divisors(math.gcd(model.n_heads, model.n_kv_heads, model.ffn_hidden))))
    pp = draw(st.integers(1, min(4, model.n_layers)))
    cp = draw(st.sampled_from([1, 2, 4]))
    dp = draw(st.sampled_from([1, 2, 4]))
    vpp = draw(st.sampled_from([v for v in (1, 2) if pp > 1 or v == 1 if model.n_layers >= pp * v]))
    mb = draw(st.sampled_from([1, 2]))
    m = pp * draw(st.integers(1, 3)) if vpp > 1 else draw(st.integers(1, 6))
    schedule = "interleaved" if vpp > 1 else draw(st.sampled_from(["1f1b", "gpipe"]))
    split = None
    if pp > 1 and draw(st.booleans()):  # an explicit split, as plan files from the stage-split DP carry
        cuts = sorted(draw(st.lists(st.integers(1, model.n_layers - 1), min_size=pp - 1, max_size=pp - 1,
                                    unique=True))) if model.n_layers > pp else list(range(1, pp))
        split = [b - a for a, b in zip([0, *cuts], [*cuts, model.n_layers])]
        assume(min(split) >= vpp)
    return Plan(gpus=tp * pp * cp * dp, tp=tp, pp=pp, cp=cp, vpp=vpp, micro_batch=mb, global_batch=dp * mb * m,
                seq_len=draw(st.sampled_from([32, 64, 128])),
                recompute=(rc := draw(st.sampled_from(["none", "selective", "full", "names"]))),
                recompute_saved=(saved := draw(st.lists(st.sampled_from(SAVED_TENSORS), unique=True)))
                if rc == "names" else None,
                recompute_offloaded=draw(st.lists(st.sampled_from(["layer_input", *saved]), unique=True)) or None
                if rc == "names" else None,
                sequence_parallel=draw(st.booleans()), zero=draw(st.sampled_from([0, 1, 2, 3])),
                precision=draw(st.sampled_from(["bf16", "bf16", "fp8"])), schedule=schedule,
                attention=draw(st.sampled_from(["flash", "unfused"])),
                grad_dtype=draw(st.sampled_from(["fp32", "bf16"])), overlap_dp_comm=draw(st.booleans()),
                grad_compression=draw(st.sampled_from(["none", "none", "bf16", "powersgd"]))
                if tp * pp * cp == 1 else draw(st.sampled_from(["none", "bf16"])),
                powersgd_rank=draw(st.sampled_from([1, 4])), optimizer_offload=draw(st.booleans()),
                stage_layers=split)


def per_unit(graph: pase.Graph, tables: pase.CostTables, assignment, use_alt) -> dict[str, float]:
    """Seconds per micro-batch of one layer (the last: its input edges come from a layer), the embedding and the
    head, from PaSE's tables: the unit's vertices without their per-step part, and the edges it owns."""
    m, last = tables.microbatches, max(v.layer for v in graph.vertices if v.layer is not None)
    out = dict.fromkeys(("layer", "embedding", "head"), 0.0)
    for v, vert in enumerate(graph.vertices):
        if vert.layer in (None, last):
            k, c = vert.kind, assignment[v]
            out[UNIT_OF[k]] += (tables.time[k][c] - tables.per_step[k][c]) / m
    seconds, _, _ = pase.edge_parts(graph, tables, assignment, 0.0, use_alt)
    for e, t in zip(graph.edges, seconds):
        src, dst = graph.vertices[e.src], graph.vertices[e.dst]
        if dst.layer in (None, last) or UNIT_OF[src.kind] == "embedding":
            out[edge_unit(src.kind, dst.kind)] += t / m
    return out


@st.composite
def moe_models(draw) -> ModelConfig:
    """A dense random model with experts: routed (some shared), on every layer or after dense-first ones, with
    MTP on some."""
    base = draw(models())
    experts = draw(st.sampled_from([4, 8]))
    return base.model_copy(update={"moe": MoEConfig(
        n_experts=experts, top_k=draw(st.sampled_from([1, 2])), expert_ffn_hidden=draw(st.sampled_from([16, 32])),
        n_shared_experts=draw(st.sampled_from([0, 1])), layer_freq=draw(st.sampled_from([1, 2])),
        first_dense_layers=draw(st.integers(0, min(1, base.n_layers - 1)))),
        "mtp_layers": draw(st.sampled_from([0, 0, 1, 2]))})


@st.composite
def moe_plans(draw, model: ModelConfig) -> Plan:
    plan = draw(plans(model))
    ranks = plan.gpus // plan.pp  # tp x cp x dp
    ep = draw(st.sampled_from([e for e in divisors(model.moe.n_experts) if ranks % e == 0]))
    etp = draw(st.sampled_from([e for e in divisors(ranks // ep) if model.moe.expert_ffn_hidden % e == 0]))
    dispatcher = draw(st.sampled_from(["alltoall", "allgather", "flex"]))
    return plan.model_copy(update={"ep": ep, "etp": etp, "sequence_parallel": plan.sequence_parallel or plan.tp > 1,
                                   "moe_dispatcher": dispatcher, "expert_imbalance": draw(st.sampled_from([1.0, 1.5])),
                                   "moe_overlap": dispatcher != "allgather" and draw(st.booleans())})


def check_agreement(model: ModelConfig, system, plan: Plan):
    step = evaluate(model, system, Layouts.from_plan(plan))
    graph = pase.operator_graph(model.n_layers, model.moe is not None)
    tables = pase.cost_tables(graph, model, system, plan)
    a = pase.megatron_assignment(graph, tables, plan.sequence_parallel)
    alt = pase.megatron_alternatives(graph, tables)
    got = per_unit(graph, tables, a, alt)
    for unit, seconds in got.items():
        want = float(step.unit_time[unit][0])
        assert math.isclose(seconds, want, rel_tol=1e-9, abs_tol=1e-18), (unit, seconds, want, plan)
    _, memory = pase.evaluate(graph, tables, a, use_alt=alt)
    want = float(step.memory["allocated"][0] + step.memory["runtime"][0])  # PaSE: allocated view + runtime
    assert math.isclose(memory, want, rel_tol=1e-9), (memory, step.memory, plan)


@pytest.mark.parametrize("model_kind", ["dense", "moe"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pase_prices_the_megatron_assignment_as_estimate_does(model_kind, data):
    """Dense models, and MoE models: their MoE MLP a vertex of every layer ("moe", between norm2 and residual2),
    the experts over ep x etp with every dispatcher and moe_overlap, their ZeRO-3 traffic over edp in the
    layer's window."""
    model = data.draw(moe_models() if model_kind == "moe" else models())
    system = data.draw(st.sampled_from([A100, SHARED, *OTHERS]))
    plan = data.draw(moe_plans(model) if model_kind == "moe" else plans(model))
    if system.host is None:  # offloading needs a host link
        plan = plan.model_copy(update={"recompute_offloaded": None, "optimizer_offload": False})
    try:
        plan = resolve(plan, model, system)
    except InputError:
        assume(False)
    check_agreement(model, system, plan)
