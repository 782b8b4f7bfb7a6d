"""The optimizer state kept in host memory between steps (Plan.optimizer_offload; MaxText
optimizer_memory_host_offload): off the device through forward and backward, on it for the update, copied in and
out over the host link once per step. Values worked out by hand for Llama 2 7B (6.74e9 parameters) on 8 H100s."""

from __future__ import annotations

import pytest

from perfmodel import Plan, estimate, load_hardware, load_model
from perfmodel.errors import InputError
from perfmodel.export.checks.spread import maxtext_plan_file
from perfmodel.export.nearest import export_plan
from perfmodel.export.targets import export, nearest_updates
from perfmodel.search.ranking import search
from perfmodel.search.space import Space


def plan(**kw) -> Plan:
    base = dict(gpus=8, micro_batch=1, global_batch=8, seq_len=4096, zero=3, recompute="full")
    return Plan(**{**base, **kw})


@pytest.fixture(scope="module")
def pair(llama2_7b, dgx_h100_fixed_clock):
    """(state on the device, state in host memory) of one plan, at one clock."""
    return tuple(estimate(llama2_7b, dgx_h100_fixed_clock, plan(optimizer_offload=x)) for x in (False, True))


def test_the_host_holds_the_state_and_the_device_holds_it_only_for_the_update(pair):
    on, off = (e.memory_bytes for e in pair)
    params = pair[0].params  # 6.74e9
    # Megatron-style mixed-precision Adam: fp32 master, m and v, 12 B per parameter, over the 8 ZeRO-3 ranks
    assert on.optimizer == pytest.approx(params * 12 / 8)
    assert (off.optimizer, off.host, on.host) == (0.0, pytest.approx(on.optimizer), 0.0)
    # the device's peak: the backward's (without the state) or the update's (weights, gradients and the state)
    update = on.weights + on.gradients + on.optimizer
    assert off.allocated == pytest.approx(max(on.allocated - on.optimizer, update))
    assert off.between_steps == pytest.approx(on.between_steps - on.optimizer)
    assert (off.weights, off.gradients, off.activations) == (on.weights, on.gradients, on.activations)


def test_the_update_sets_the_peak_where_the_state_outweighs_the_activations(pair):
    on, off = (e.memory_bytes for e in pair)
    # one 4096-token sequence with full recompute keeps little (32 layer inputs of 32 MiB): 3.4 GB of Adam is more
    assert on.optimizer > on.activations + on.transient
    assert off.allocated == pytest.approx(on.weights + on.gradients + on.optimizer)
    assert off.transient == pytest.approx(on.optimizer - on.activations)


def test_the_copies_take_the_state_over_the_host_link_twice_a_step(dgx_h100, pair):
    on, off = pair
    link = dgx_h100.host.bandwidth_gbps * 1e9 * dgx_h100.host.efficiency  # 64 GB/s x 0.8 (PCIe Gen5 x16)
    copies = 2 * on.memory_bytes.optimizer / link  # in before the update, out after it; nothing hides them
    assert off.time_s.offload_comm - on.time_s.offload_comm == pytest.approx(copies)
    assert off.time_s.total - on.time_s.total == pytest.approx(copies, rel=1e-6)
    row = next(c for c in off.comms if c.name == "optimizer state host copies")
    assert (row.calls, row.exposed_s, row.bytes) == (2, pytest.approx(copies), pytest.approx(on.memory_bytes.optimizer))


def test_a_system_without_a_host_link_refuses_it(llama2_7b, predict_cli):
    with pytest.raises(InputError, match="optimizer_offload = true on dgx-a100-80gb, whose spec gives no host link"):
        estimate(llama2_7b, load_hardware("dgx-a100-80gb"), plan(optimizer_offload=True))
    bad = predict_cli("--model", "llama-2-7b", "--hardware", "dgx-a100-80gb", "--gpus", 8, "--tp", 1, "--pp", 1,
                      "--micro-batch", 1, "--global-batch", 8, "--seq-len", 4096, "--optimizer-offload")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "valid: no optimizer_offload, or a system spec with a host section" in bad.stderr


def test_maxtext_writes_it_and_the_torch_targets_keep_the_state_on_the_device():
    pf = maxtext_plan_file("v6e-names-custom")  # MaxText's own config check accepts it (test_framework_checks)
    assert pf.plan.optimizer_offload
    assert "optimizer_memory_host_offload: true" in export(pf, "maxtext")
    for target, version, stack in (("megatron", "core_r0.16.1", "HybridDeviceOptimizer"),
                                   ("torchtitan", "0.3.0", "CPUOffloadPolicy")):
        up, why = nearest_updates(pf, target, version)
        assert up["optimizer_offload"] is False
        assert any(w.startswith("optimizer_offload true -> false") and stack in w for w in why)
    assert "DeepSpeedCPUAdam" in export_plan(pf, "deepspeed")


def test_the_executor_refuses_it(monkeypatch):
    from perfmodel.execute import run_plans

    monkeypatch.setattr(run_plans, "check_device", lambda *a: None)
    pf = maxtext_plan_file("h100-fsdp-tp2")
    pf = pf.model_copy(update={"plan": pf.plan.model_copy(update={"optimizer_offload": True})})
    with pytest.raises(InputError, match="optimizer_offload = true: the torch executor keeps the optimizer state"):
        run_plans.check_runnable(pf, "plan.json", 16, 1, "cuda")


def test_search_ranks_every_layout_with_the_state_on_the_host(llama2_7b, dgx_h100):
    space = Space(pp=[1], recompute=["full"], zero=[3])
    res = search(llama2_7b, dgx_h100, 8, 8, 4096, space=space, optimizer_offload=True)
    best = res.plan(0)
    assert best.optimizer_offload
    again = estimate(llama2_7b, dgx_h100, best)
    assert res.table["step_time_s"].iloc[0] == pytest.approx(again.step_time_s)
    assert again.memory_bytes.optimizer == 0.0 and again.time_s.offload_comm > 0
    plain = search(llama2_7b, dgx_h100, 8, 8, 4096, space=space)
    assert res.table["step_time_s"].iloc[0] > plain.table["step_time_s"].iloc[0]  # nothing hides the copies


def test_pase_charges_each_operator_the_copies_of_its_state(llama2_7b, dgx_h100, pair):
    """PaSE's per-step vertex costs (cost.pase.tables) carry the copies of the state each operator's weights hold:
    over Megatron's assignment of every vertex they add up to the estimate's copies."""
    from perfmodel.search.pase import solver as pase

    graph = pase.operator_graph(llama2_7b.n_layers, False)
    per_step = []
    for e in pair:
        tables = pase.cost_tables(graph, llama2_7b, dgx_h100, e.plan)
        a = pase.megatron_assignment(graph, tables, e.plan.sequence_parallel)
        per_step.append(sum(tables.per_step[v.kind][a[i]] for i, v in enumerate(graph.vertices)))
    copies = pair[1].time_s.offload_comm - pair[0].time_s.offload_comm
    assert per_step[1] - per_step[0] == pytest.approx(copies, rel=1e-9)


def test_a_search_whose_plans_fit_the_device_but_not_the_host_says_so(llama2_7b, dgx_h100, pair):
    small = dgx_h100.model_copy(update={"host": dgx_h100.host.model_copy(update={"memory_gib": 0.5})})
    with pytest.raises(InputError) as err:
        search(llama2_7b, small, 8, 8, 4096, space=Space(pp=[1], zero=[3]), optimizer_offload=True)
    msg = str(err.value)
    assert "every plan that fits the" in msg and "offloads more than its host holds" in msg
    assert "> 0.5 GiB per device" in msg and "keep the optimizer state on the device" in msg
    # under ZeRO-3 every layout of 8 devices holds 12 B x 6.74e9 / 8 of Adam: 9.4 GiB, whatever its tp
    least = float(msg.split("least host memory ")[1].split(" GiB")[0])
    assert least == pytest.approx(pair[0].memory_bytes.optimizer / 2**30, abs=0.05)


@pytest.mark.parametrize("model, fields", [
    ("llama-2-7b", dict(pp=4, zero=1, global_batch=32)),  # four stages, each its own state
    ("mixtral-8x7b", dict(gpus=64, ep=8, zero=1, sequence_parallel=False, global_batch=64)),  # experts over edp
    ("llama-2-7b", dict(lora={"rank": 16}, zero=0)),  # the adapters' state alone
    ("llama-2-7b", dict(zero=1, stack="maxtext")),  # fp32 parameters on the device, Adam's 8 B on the host
])
def test_each_rank_sends_its_own_state_and_the_fullest_stage_times_the_copies(dgx_h100, model, fields):
    m = load_model(model)
    on, off = (estimate(m, dgx_h100, plan(**fields, optimizer_offload=x)) for x in (False, True))
    states = [r.memory_bytes.optimizer for r in on.memory_ranks]  # per stage, on the device without offload
    assert [r.memory_bytes.host for r in off.memory_ranks] == pytest.approx(states)
    assert all(r.memory_bytes.optimizer == 0.0 for r in off.memory_ranks)
    link = dgx_h100.host.bandwidth_gbps * 1e9 * dgx_h100.host.efficiency
    assert off.time_s.offload_comm - on.time_s.offload_comm == pytest.approx(2 * max(states) / link)
    if fields.get("stack") == "maxtext":  # MaxText keeps its fp32 parameters whole below ZeRO-3
        assert on.memory_bytes.weights == pytest.approx(4 * on.params) and max(states) == pytest.approx(8 * on.params / 8)
