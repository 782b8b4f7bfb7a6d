"""`perfmodel export --to maxtext`: a plan as MaxText 0.2.5's config YAML (overrides on its base.yml), the mesh
degrees, batch and keys worked out by hand; the plans MaxText cannot run changed to the nearest it can, with the
reason (perfmodel.export.maxtext.mesh). MaxText's own config code runs on these exports in
tests/test_framework_checks_maxtext.py."""

from __future__ import annotations

import json

import pytest

from perfmodel import estimate
from perfmodel.errors import InputError
from perfmodel.export.checks.maxtext_check import aot_args
from perfmodel.export.checks.spread import maxtext_plan_file
from perfmodel.export.maxtext.mesh import mesh, nearest_plan, slices
from perfmodel.export.nearest import export_plan
from perfmodel.export.targets import export, versions


def keys(text: str) -> dict:
    """The YAML's top-level key: value lines (JSON scalars and lists, as the writer writes them)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition(": ")
            assert k not in out, f"{k} written twice"
            out[k] = json.loads(v)
    return out


def test_versions():
    assert versions("maxtext") == {"0.2.5": "maxtext==0.2.5"}


def test_v6e_two_slices_fsdp_by_hand():
    # llama-3-70b on 512 v6e chips, tp 4, ZeRO-3: the v6e ICI domain is 256 chips, so 2 slices of 256 (v6e-256).
    # dp = 512 / 4 = 128 ranks on the fsdp axis; outermost first over the slices: fsdp 2 over DCN, 64 inside.
    pf = maxtext_plan_file("v6e-2-slices-fsdp")
    assert slices(pf) == 2
    k = keys(export(pf, "maxtext"))
    assert (k["ici_fsdp_parallelism"], k["ici_tensor_parallelism"], k["dcn_fsdp_parallelism"]) == (64, 4, 2)
    assert all(k[f"{s}_{a}_parallelism"] == 1 for s in ("ici", "dcn")
               for a in ("data", "pipeline", "context", "expert")) and k["dcn_tensor_parallelism"] == 1
    # global 512 = 512 devices x 0.25 x 4: micro-batch 1 per rank over the tensor axis's 4 chips, 4 steps
    assert (k["per_device_batch_size"], k["gradient_accumulation_steps"]) == (0.25, 4)
    assert k["base_config"] == "base.yml" and k["decoder_block"] == "llama2" and k["remat_policy"] == "full"
    assert (k["base_emb_dim"], k["base_num_query_heads"], k["base_num_kv_heads"], k["head_dim"], k["base_mlp_dim"],
            k["base_num_decoder_layers"], k["vocab_size"], k["max_target_length"]) == (
        8192, 64, 8, 128, 28672, 80, 128256, 4096)
    assert k["weight_dtype"] == "float32" and k["dtype"] == "bfloat16" and "quantization" not in k
    assert aot_args(export(pf, "maxtext")) == ["compile_topology=v6e-256", "compile_topology_num_slices=2"]


def test_v5p_slice_names_count_tensorcores():
    # 128 v5p chips: one slice, v5p-256 (two TensorCores a chip, one megacore device)
    pf = maxtext_plan_file("v5p-fsdp-tp4")
    m = mesh(pf)
    assert (m.slices, m.per_slice, m.topology) == (1, 128, "v5p-256")
    assert (m.ici["fsdp"], m.ici["tensor"]) == (32, 4) and set(m.dcn.values()) == {1}


def test_zero_levels_pick_the_data_axis():
    k = keys(export(maxtext_plan_file("v6e-data-zero1"), "maxtext"))  # 256 chips, tp 8: 32 replicas, ZeRO-1
    assert (k["ici_data_parallelism"], k["ici_fsdp_parallelism"], k["shard_optimizer_over_data"]) == (32, 1, True)
    assert k["remat_policy"] == "minimal" and (k["per_device_batch_size"], k["gradient_accumulation_steps"]) == (
        0.125, 8)
    k = keys(export(maxtext_plan_file("v5p-cp2-zero0"), "maxtext"))  # tp 2 x cp 2 of 64: 16 replicas, no sharding
    assert (k["ici_data_parallelism"], k["ici_context_parallelism"], k["ici_tensor_parallelism"]) == (16, 2, 2)
    assert "shard_optimizer_over_data" not in k and k["remat_policy"] == "minimal_with_context"


def test_pipeline_and_experts():
    k = keys(export(maxtext_plan_file("v5p-pp4-gpipe"), "maxtext"))
    # 256 chips = pp 4 x tp 4 x fsdp 16; the whole batch of 256 in one step, 16 micro-batches of 16 sequences
    assert (k["ici_pipeline_parallelism"], k["ici_fsdp_parallelism"], k["ici_tensor_parallelism"]) == (4, 16, 4)
    assert (k["per_device_batch_size"], k["gradient_accumulation_steps"], k["num_pipeline_microbatches"],
            k["num_layers_per_pipeline_stage"]) == (1, 1, 16, 20)
    k = keys(export(maxtext_plan_file("v5p-moe-ep8"), "maxtext"))  # 64 chips: ep 8 beside fsdp 8
    assert (k["ici_expert_parallelism"], k["ici_fsdp_parallelism"], k["decoder_block"]) == (8, 8, "mixtral")
    assert (k["num_experts"], k["num_experts_per_tok"], k["base_moe_mlp_dim"]) == (128, 8, 768)
    assert keys(export(maxtext_plan_file("v7-fp8"), "maxtext"))["quantization"] == "fp8"
    assert "shard_exp_on_fsdp" not in k  # the experts have their own axis


def test_experts_without_expert_parallelism_are_stored_on_the_fsdp_axis():
    """ep 1 under ZeRO-3: the experts' weights over fsdp by expert (MaxText's shard_exp_on_fsdp), gathered whole
    for the grouped GEMMs, as the plan prices them (ZeRO-3 gathers, no token dispatch)."""
    pf = maxtext_plan_file("v5p-moe-experts-on-fsdp")  # 128 experts over fsdp 64
    k = keys(export(pf, "maxtext"))
    assert (k["shard_exp_on_fsdp"], k["ici_fsdp_parallelism"], k["ici_expert_parallelism"]) == (True, 64, 1)
    e = estimate(pf.model, pf.hardware, pf.plan)
    assert e.time_s.ep_comm == 0.0 and not any("dispatch" in c.name or "combine" in c.name for c in e.comms)
    # the experts' mesh axes (fsdp and context) must split them evenly: 96 of them over 64 chips do not
    odd = pf.model_copy(update={"model": pf.model.model_copy(update={
        "moe": pf.model.moe.model_copy(update={"n_experts": 96})})})
    assert "shard_exp_on_fsdp" not in keys(export(odd, "maxtext"))
    # with cp 2 the experts spread over fsdp 32 x context 2 = 64 shards: 128 of them split, 32 do not (though
    # fsdp alone divides them)
    cp2 = pf.model_copy(update={"plan": pf.plan.model_copy(update={"cp": 2, "dp": 32})})
    k = keys(export(cp2, "maxtext"))
    assert (k["ici_fsdp_parallelism"], k["ici_context_parallelism"], k["shard_exp_on_fsdp"]) == (32, 2, True)
    few = cp2.model_copy(update={"model": pf.model.model_copy(update={
        "moe": pf.model.moe.model_copy(update={"n_experts": 32, "top_k": 4})})})
    assert "shard_exp_on_fsdp" not in keys(export(few, "maxtext"))
    dense = keys(export(maxtext_plan_file("v5p-fsdp-tp4"), "maxtext"))
    assert "shard_exp_on_fsdp" not in dense


def test_gpu_plan_is_one_slice_checked_by_device_count():
    text = export(maxtext_plan_file("h100-fsdp-tp2"), "maxtext")
    assert keys(text)["hardware"] == "gpu" and keys(text)["ici_fsdp_parallelism"] == 8
    assert aot_args(text) == ["internal_compile=true", "internal_compile_num_devices=16",
                              "compile_topology_num_slices=1"]
    assert "GPU system" in text


def test_nearest_plan_reasons():
    pf = maxtext_plan_file("v5p-fsdp-tp4")
    assert nearest_plan(pf, "0.2.5") == ({}, [])
    changed = pf.model_copy(update={"plan": pf.plan.model_copy(update={"zero": 2, "recompute": "per-op",
                                                                       "sequence_parallel": False})})
    up, why = nearest_plan(changed, "0.2.5")
    assert up == {"sequence_parallel": True, "zero": 1, "recompute": "selective"}
    assert why[1].startswith("zero 2 -> 1: MaxText 0.2.5 has replicas (data axis), ZeRO-1")
    # 1F1B with 16 micro-batches on 4 stages -> GPipe's order, re-predicted in the export's comments
    pf = maxtext_plan_file("v5p-pp4-gpipe")
    onef = pf.model_copy(update={"plan": pf.plan.model_copy(update={"schedule": "1f1b"})})
    up, why = nearest_plan(onef, "0.2.5")
    assert up == {"schedule": "gpipe"} and "GPipe's order" in why[0]
    text = export_plan(onef, "maxtext")
    assert "# changed to run on MaxText 0.2.5: schedule 1f1b -> gpipe" in text
    assert "re-predicted for the plan exported" in text


def test_fp8_with_accumulation_and_lora_refused_or_changed():
    pf = maxtext_plan_file("v7-fp8")
    accum = pf.model_copy(update={"plan": pf.plan.model_copy(update={"global_batch": 128})})
    up, why = nearest_plan(accum, "0.2.5")
    assert up == {"precision": "bf16", "fp8_recipe": None} and "gradient accumulation" in why[0]  # the recipe goes with fp8
    with pytest.raises(InputError, match="cannot run it as planned"):
        export(accum, "maxtext")
