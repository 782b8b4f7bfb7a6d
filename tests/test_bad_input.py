"""Bad input through the Python API and spec files: one InputError line naming the field, value and what is valid."""

import json
from importlib import resources

import pytest
import yaml

import perfmodel as pm
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import load_hardware


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_plan_counts_are_not_coerced_from_bools():
    with pytest.raises(InputError) as e:
        pm.Plan(tp=True, micro_batch=1, global_batch=8, seq_len=8)
    assert "Plan.tp = True" in one_line(e)


def test_estimate_rejects_a_non_plan_and_accepts_a_dict():
    with pytest.raises(InputError) as e:
        pm.estimate("gpt2-124m", "dgx-h100", None)
    assert "perfmodel.Plan" in one_line(e)
    est = pm.estimate("gpt2-124m", "dgx-h100", dict(gpus=8, micro_batch=1, global_batch=8, seq_len=1024))
    assert est.plan.dp == 8


def test_unresolved_plan_has_no_microbatch_count():
    with pytest.raises(InputError) as e:
        pm.Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=2048).num_microbatches
    assert "dp" in one_line(e)


def test_interleaving_with_uneven_chunks_is_predicted_and_noted():
    # Llama 3 405B: 126 layers, pp=16, vpp=2 (Dubey et al. 2024 trained this layout with uneven stages).
    plan = pm.Plan(gpus=16384, tp=8, pp=16, vpp=2, micro_batch=1, global_batch=2048, seq_len=8192,
                   sequence_parallel=True, zero=1)
    est = pm.estimate("llama-3.1-405b", "dgx-h100", plan)
    assert est.stage_layers == [7] + [8] * 14 + [7]
    assert any("do not split evenly" in n for n in est.notes)
    one = pm.estimate("llama-3.1-405b", "dgx-h100", plan.model_copy(update={"vpp": 1, "schedule": None}))
    assert est.time_s.bubble < one.time_s.bubble  # interleaving shrinks the bubble by about vpp


def test_vpp_beyond_layers_per_stage_is_rejected():
    plan = pm.Plan(gpus=64, tp=8, pp=8, vpp=11, micro_batch=1, global_batch=64, seq_len=4096)
    with pytest.raises(InputError) as e:
        pm.estimate("llama-3-70b", "dgx-h100", plan)
    assert "pp*vpp = 8*11 = 88 chunks exceeds n_layers = 80" in one_line(e)


def test_sequence_parallel_needs_tp_to_divide_each_context_rank_tokens():
    plan = pm.Plan(gpus=4, tp=4, micro_batch=1, global_batch=4, seq_len=90, sequence_parallel=True)
    with pytest.raises(InputError) as e:
        pm.estimate("gpt2-124m", "dgx-h100", plan)
    assert "tp=4" in one_line(e) and "multiple of cp*tp = 4" in one_line(e)
    est = pm.estimate("gpt2-124m", "dgx-h100", plan.model_copy(update={"sequence_parallel": False}))
    assert est.step_time_s > 0


def test_pase_refuses_bad_budgets_and_placements_in_one_line():
    from perfmodel.cost.comm.mesh import Mesh
    from perfmodel.search.pase import solver as pase

    plan = dict(gpus=2, tp=2, micro_batch=1, global_batch=2, seq_len=64)
    for budget in ("1e9", float("nan"), -1.0, True):
        with pytest.raises(InputError) as e:
            pase.solve("gpt2-124m", "dgx-h100", plan, memory_budget=budget)
        assert "memory_budget" in one_line(e)
    assert pase.solve("gpt2-124m", "dgx-h100", plan).budget_met  # a dict plan, as estimate takes
    mesh, r = Mesh(load_hardware("dgx-h100"), 2, 1, 1, 2), ["Replicate()", "Replicate()"]
    bad = [([*r, "Shard(1)"], [*r, "Partial()"], 1.0, "Partial()"), ([*r, "Shard(9)"], [*r, "Replicate()"], 1.0, "Shard(9)"),
           ([*r, "Shard(1)"], [*r, "Replicate()"], -1.0, "full_bytes"), ([*r, "Shard(1)"], r, 1.0, "one entry per")]
    for src, dst, nbytes, needle in bad:
        with pytest.raises(InputError) as e:
            pase.redistribute_time(mesh, src, dst, nbytes)
        assert needle in one_line(e)


def _spec(tmp_path, mutate) -> str:
    data = yaml.safe_load(open(resources.files("perfmodel.hardware_specs") / "systems" / "dgx-h100.yaml"))
    mutate(data)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("mutate, expect", [
    (lambda d: d["tiers"][0].update(latency_us=float("inf")), "tiers.0.latency_us"),
    (lambda d: d["efficiency"].update(memory_bandwidth=float("nan")), "efficiency.memory_bandwidth"),
    (lambda d: d["tiers"][0].update(torus_dims=[2, 4]), "torus_dims"),
    (lambda d: d.update(memory_overhead_gib=1000), "memory_overhead_gib = 1000"),
    (lambda d: d["tiers"][0].update(domain_size=True), "tiers.0.domain_size = True"),
    (lambda d: d.update(accelerator="H100-SXM9"), "did you mean"),
])
def test_bad_spec_files(tmp_path, mutate, expect):
    path = _spec(tmp_path, mutate)
    with pytest.raises(InputError) as e:
        load_hardware(path)
    assert expect in one_line(e)


@pytest.mark.parametrize("field, value, expect", [
    ("n_embd", "768", "n_embd = '768' is not valid; valid: a positive integer"),
    ("n_layer", True, "n_layer = True"),
    ("resid_pdrop", "x", "resid_pdrop = 'x' is not valid; valid: a probability in [0, 1)"),
    ("resid_pdrop", -0.1, "resid_pdrop = -0.1"),
    ("tie_word_embeddings", "no", "tie_word_embeddings = 'no' is not valid; valid: true or false"),
])
def test_bad_hf_config_fields(tmp_path, field, value, expect):
    cfg = dict(model_type="gpt2", n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    cfg[field] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as e:
        pm.load_model(str(path))
    assert expect in one_line(e)


def test_zero_kv_heads_is_an_error_not_multi_head(tmp_path):
    cfg = dict(model_type="llama", num_hidden_layers=2, hidden_size=256, num_attention_heads=4,
               num_key_value_heads=0, intermediate_size=512, vocab_size=100, max_position_embeddings=128)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as e:
        pm.load_model(str(path))
    assert "num_key_value_heads = 0" in one_line(e)


def test_missing_file_names_what_it_was_for():
    with pytest.raises(InputError) as e:
        pm.load_model("nofile.json")
    assert one_line(e) == "model file nofile.json: file does not exist"


@pytest.mark.parametrize("model, hw, kw", [
    ("llama-3-70b", "dgx-h100", dict(gpus=512, tp=8, pp=4, micro_batch=1, global_batch=1024, seq_len=8192,
                                     sequence_parallel=True, zero=1, recompute="selective")),
    ("llama-3-8b", "dgx-h100", dict(gpus=64, micro_batch=1, global_batch=64, seq_len=8192, zero=3)),
    ("gpt3-1.3b", "dgx-a100-80gb", dict(gpus=32, tp=2, pp=2, cp=2, micro_batch=1, global_batch=16, seq_len=2048,
                                        zero=2, recompute="full")),
    ("gpt2-124m", "mi300x-8", dict(gpus=48, tp=2, pp=3, micro_batch=1, global_batch=24, seq_len=1024, zero=3,
                                   recompute="full", precision="fp8", overlap_dp_comm=False)),
])
def test_comm_rows_reconcile_with_the_time_breakdown(model, hw, kw):
    est = pm.estimate(model, hw, pm.Plan(**kw))
    t = est.time_s
    exposed = sum(c.exposed_s for c in est.comms)
    assert exposed == pytest.approx(t.tp_comm + t.cp_comm + t.pp_comm + t.zero3_comm + t.dp_comm, rel=1e-9)
    for c in est.comms:
        assert 0 <= c.exposed_s <= c.total_s * (1 + 1e-9), c


@pytest.mark.parametrize("attention", ["flash", "unfused"])
def test_recompute_order_holds_for_one_layer_stages(attention):
    # One layer per stage: the recomputed layer's working set must not make full recompute cost more
    # activation memory than selective, nor selective more than none.
    acts = []
    for rc in ("full", "selective", "none"):
        plan = pm.Plan(gpus=12, pp=12, micro_batch=2, global_batch=24, seq_len=1024, recompute=rc, attention=attention)
        acts.append(pm.estimate("gpt2-124m", "dgx-h100", plan).memory_bytes.activations)
    assert acts[0] <= acts[1] <= acts[2]
