"""torchtitan exports through torchtitan's own config loading (perfmodel.export.checks.torchtitan_check), at
every version perfmodel writes for (0.3.0: a Python Trainer.Config module; 0.2.2: a TOML JobConfig), for every
plan of the spread; the checks refuse what torchtitan refuses, so an accepted export means something. Each
torchtitan release is downloaded from PyPI once (no GPU); its light dependencies are the `frameworks` extra."""

from __future__ import annotations

import pytest

from perfmodel.export.torchtitan.config import VERSIONS, nearest_plan, torchtitan
from perfmodel.export.nearest import export_plan
from perfmodel.export.checks.releases import run_check, run_checks
from perfmodel.export.checks.spread import SPREAD, spread_plan_file

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None


def _check(text: str, version: str):
    return run_check("torchtitan", version, VERSIONS[version], text)


@pytest.mark.parametrize("version", list(VERSIONS))
def test_every_spread_plan_is_accepted(version):
    texts = [export_plan(spread_plan_file(name), "torchtitan", version) for name in SPREAD]
    for name, r in zip(SPREAD, run_checks("torchtitan", version, VERSIONS[version], texts)):
        assert r.accepted, (name, r.error)
        assert r.checks[0] == "ConfigManager.parse_args" and "ParallelDims.build_mesh" in r.checks, r.checks


def test_versions_newest_first_and_formats():
    assert list(VERSIONS) == ["0.3.0", "0.2.2"]
    pf = spread_plan_file("dp-tp4-nosp")
    assert torchtitan(pf).startswith('"""torchtitan 0.3.0 config module')  # default: the newest
    assert torchtitan(pf, "0.2.2", ["x"]).startswith("# torchtitan 0.2.2 TOML job config")
    assert "# Plan changed for torchtitan 0.2.2 (then re-predicted): x" in torchtitan(pf, "0.2.2", ["x"])


def test_tokens_and_batches():
    # pp4-gpipe: 32 GPUs, tp 2 x pp 4 -> dp 4; global 32 -> local 32 / 4 = 8 = 8 micro-batches of 1 x 4096 tokens
    text = export_plan(spread_plan_file("pp4-gpipe"), "torchtitan", "0.3.0")
    assert "local_batch_size=8," in text and "global_batch_size=32," in text
    assert "pipeline_parallel_schedule='GPipe'," in text and "pipeline_parallel_microbatch_size=1," in text
    assert "tokens per micro-batch 1 x 4096 = 4096" in text
    assert "disable_cuda_graphs=True," in text  # Trainer.Config refuses CUDA graphs with pp


def test_40_layer_model_names_its_layers():
    pf = spread_plan_file("40-layers-pp2")
    # 0.3.0: the plan's own sizes; 20 + 20 of its 40 layers, the output projection is lm_head
    new = export_plan(pf, "torchtitan", "0.3.0")
    assert "n_layers=40, dim=dim, n_heads=40, n_kv_heads=40, hidden_dim=13824" in new
    assert "model_registry('perfmodel')" in new
    assert "'layers.19']" in new and "'layers.20', " in new and "'layers.39', 'norm', 'lm_head']" in new
    # 0.2.2 names a flavor only: llama3 8B has 32 layers, split 16 + 16 like the plan's 20 + 20, and said
    old = export_plan(pf, "torchtitan", "0.2.2")
    if tomllib is not None:
        parts = tomllib.loads(old)["parallelism"]["module_fqns_per_model_part"]
        assert [len([x for x in p if x.startswith("layers.")]) for p in parts] == [16, 16]
        assert parts[-1][-3:] == ["layers.31", "norm", "output"]
    assert "pipeline split [20, 20] of 40 layers: llama3 8B has 32 layers" in old


@pytest.mark.parametrize("version, converter", [("0.3.0", "converters=[Float8LinearConverter.Config()]"),
                                                ("0.2.2", 'converters = ["quantize.linear.float8"]')])
def test_fp8_converter_per_version(version, converter):
    text = export_plan(spread_plan_file("cp2-fp8-zero1"), "torchtitan", version)
    assert converter in text
    assert "\n[float8]" not in text


def test_compile_per_version():
    """compile model+loss: 0.2.2's [compile] table and 0.3.0's CompileConfig (accepted with the spread above)."""
    pf = spread_plan_file("zero3-compile")
    old, new = (export_plan(pf, "torchtitan", v) for v in ("0.2.2", "0.3.0"))
    assert '[compile]\nenable = true\ncomponents = ["model", "loss"]' in old
    assert "compile=CompileConfig(enable=True, components=['model', 'loss'])," in new
    assert "compile, " not in new.split('"""')[1] and "[compile]." not in old
    # Megatron-LM and DeepSpeed run no such compile: their nearest plans drop it, and say so
    from perfmodel.export import deepspeed
    from perfmodel.export.megatron import versions as megatron_plan
    assert megatron_plan.nearest_plan(pf, "core_r0.16")[0]["compile"] == "none"
    assert deepspeed.nearest_plan(pf, "0.19.8")[0]["compile"] == "none"


def test_zero_levels():
    pf = spread_plan_file("zero3-per-op")  # 8 GPUs, dp 8
    for zero, want in ((0, {}), (1, {"zero": 2}), (2, {}), (3, {})):
        plan = pf.plan.model_copy(update={"zero": zero})
        assert nearest_plan(pf.model_copy(update={"plan": plan}), "0.3.0")[0] == want
    # zero 0 on a 1-D mesh: replicate over dp 8 (DDP in 0.2.2; HSDP sharding nothing in 0.3.0)
    zero0 = pf.model_copy(update={"plan": pf.plan.model_copy(update={"zero": 0})})
    assert "data_parallel_replicate_degree=8," in torchtitan(zero0, "0.3.0")
    assert "data_parallel_shard_degree=1," in torchtitan(zero0, "0.3.0")
    # zero 0 with tp: 0.2.2 has no DDP on a 2-D mesh -> ZeRO-2; 0.3.0 replicates (HSDP with shard degree 1)
    tp = spread_plan_file("dp-tp4-nosp").plan.model_copy(update={"zero": 0})
    pf_tp = spread_plan_file("dp-tp4-nosp").model_copy(update={"plan": tp})
    assert nearest_plan(pf_tp, "0.2.2")[0]["zero"] == 2
    assert "zero" not in nearest_plan(pf_tp, "0.3.0")[0]


def test_nearest_plan_changes_only_what_cannot_be_expressed():
    updates, why = nearest_plan(spread_plan_file("zero2-fp16-selective"), "0.3.0")
    assert updates == {"precision": "bf16", "recompute": "per-op", "recompute_modules": None}
    assert len(why) == 2
    # sequence parallelism off: 0.3.0 has enable_sequence_parallel, 0.2.2 always applies it
    nosp = spread_plan_file("dp-tp4-nosp")
    assert nearest_plan(nosp, "0.3.0")[0] == {}
    # (and zero 0 at tp 4: 0.2.2 has no DDP on a 2-D mesh)
    assert nearest_plan(nosp, "0.2.2")[0] == {"zero": 2, "sequence_parallel": True}
    assert "enable_sequence_parallel=False," in torchtitan(nosp, "0.3.0")


def test_the_checks_refuse_what_torchtitan_refuses():
    new = export_plan(spread_plan_file("40-layers-pp2"), "torchtitan", "0.3.0")
    old = export_plan(spread_plan_file("cp2-fp8-zero1"), "torchtitan", "0.2.2")
    cases = {  # version -> [(text, what torchtitan's error names)]; one subprocess per version
        "0.3.0": [(new.replace("tensor_parallel_degree=4", "tensor_parallel_degre=4"), "tensor_parallel_degre"),
                  (new.replace("n_layers=40", "n_layers=30"), "30"),  # names of layers the model lacks
                  (new.replace("global_batch_size=128", "global_batch_size=100"),
                   "global batch size must be multiple")],
        "0.2.2": [(old.replace("[quantize.linear.float8]", "[float8]"), "float8"),  # the mid-2025 table
                  (old.replace("tensor_parallel_degree = 2", "tensor_parallel_degree = 3"), "Invalid parallel dims")],
    }
    for version, pairs in cases.items():
        results = run_checks("torchtitan", version, VERSIONS[version], [text for text, _ in pairs])
        assert len(results) == len(pairs)
        for (_, error), r in zip(pairs, results):
            assert not r.accepted and error in r.error, (version, error, r.error)
