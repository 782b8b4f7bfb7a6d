"""perfmodel import --from torchtitan: torchtitan's own TOML job configs (v0.2.2) and 2026 config registry modules
(tests/fixtures/configs/torchtitan, verbatim; SOURCES.md) and the corpus's older spellings (2025-02, 2025-08), every
key accounted for, and the round trip of
perfmodel's own exports (perfmodel.export.torchtitan.config, every version) back to the plan exported."""

from __future__ import annotations

import pytest

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.export.nearest import export_plan, nearest
from perfmodel.export.torchtitan.config import VERSIONS
from perfmodel.ingest import plan_of, read_config
from perfmodel.ingest.torchtitan.reader import flatten
from perfmodel.ingest.sources import read_toml
from perfmodel.search.plan_writer import plan_file
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, chunk_layers, resolve

FIX = "tests/fixtures/configs/torchtitan/"
TOMLS = ["llama3_8b", "llama3_70b", "llama3_405b", "deepseek_v3_16b", "llama4_17bx16e"]


def imp(name, config=None):
    return read_config([FIX + name], "torchtitan", config)


def test_llama3_8b_values_by_hand():
    """llama3_8b.toml: tp 1, dp_shard -1 (the rest: 64 / 1), local_batch_size 1, seq_len 8192, selective 'op'."""
    i = imp("llama3_8b.toml")
    model, _, plan = plan_of(i, "dgx-h100", 64)
    assert model.name == "llama-3.1-8b"
    assert (plan.tp, plan.pp, plan.cp, plan.dp, plan.dp_replicate) == (1, 1, 1, 64, 1)
    # global_batch_size unstated (-1): local_batch_size 1 x dp 64 in one accumulation step
    assert (plan.micro_batch, plan.global_batch, plan.seq_len) == (1, 64, 8192)
    assert plan.recompute == "per-op" and plan.zero == 3 and plan.compile == "none" and plan.stack == "torchtitan"
    assert plan.precision == "bf16"  # converters commented out: the [quantize.linear.float8] table is unused


def test_llama3_405b_and_70b():
    model, _, plan = plan_of(imp("llama3_405b.toml"), "dgx-h100", 128)
    assert model.name == "llama-3.1-405b"
    assert (plan.tp, plan.dp, plan.micro_batch, plan.global_batch) == (8, 16, 2, 32)  # 128 / 8 = 16 dp ranks x 2
    assert (plan.recompute, plan.precision, plan.fp8_recipe, plan.compile) == ("full", "fp8", "tensorwise",
                                                                                 "model+loss")
    assert plan.tp_comm_overlap is True and plan.sequence_parallel is True
    _, _, plan = plan_of(imp("llama3_70b.toml"), "dgx-h100", 64)
    assert (plan.tp, plan.dp, plan.micro_batch, plan.global_batch, plan.recompute) == (8, 8, 8, 64, "full")


def test_moe_fixtures():
    i = imp("deepseek_v3_16b.toml")
    m = i.model  # torchtitan's 16B flavor: dim 2048, 27 layers, 64 experts top 6, moe_inter_dim 1408, vocab 102400
    assert (m.hidden, m.n_layers, m.moe.n_experts, m.moe.top_k, m.moe.expert_ffn_hidden, m.vocab) == (
        2048, 27, 64, 6, 1408, 102400)
    _, _, plan = plan_of(i, "dgx-h100", 64)
    assert (plan.ep, plan.etp, plan.micro_batch, plan.seq_len, plan.recompute) == (8, 1, 4, 4096, "per-op")
    assert plan.compile == "none"  # components = ["loss"]: a compiled loss alone is priced eager, and said
    assert any(k.key == "compile.components" and "loss alone" in k.why for k in i.keys)
    i = imp("llama4_17bx16e.toml")
    # 17bx16e: ffn 4 x 5120 x 2/3 x 1.2 rounded up to a multiple of 2048 = 16384, over top_k + shared = 2 per expert
    assert i.model.name == "llama-4-scout" and i.model.moe.expert_ffn_hidden == 16384 // 2
    _, _, plan = plan_of(i, "dgx-h100", 64)
    assert (plan.tp, plan.ep, plan.etp) == (8, 1, 8)


@pytest.mark.parametrize("name", TOMLS)
def test_explain_accounts_for_every_toml_key(name):
    leaves = flatten(read_toml(__import__("pathlib").Path(FIX + name + ".toml"), "t"))
    i = imp(name + ".toml")
    stated = [k for k in i.keys if k.fate != "default"]
    assert len(stated) == len(leaves)
    assert sorted(k.key for k in stated) == sorted(k for k, _ in leaves)
    assert all(k.why for k in i.keys if k.fate == "not priced")


def test_registry_needs_name_and_reads_both_batch_forms():
    with pytest.raises(InputError, match=r"defines 14 configs; valid: --name one of llama3_debugmodel, .*llama3_8b"):
        imp("llama3_config_registry.py")
    with pytest.raises(InputError, match="--name nope.*llama3_70b"):
        imp("llama3_config_registry.py", "nope")
    for module in ("llama3_config_registry.py", "llama3_config_registry_2e92be1.py"):
        i = imp(module, "llama3_70b")
        model, _, plan = plan_of(i, "dgx-h100", 64)
        # num_tokens_per_microbatch_per_dp_rank 8 x 8192 / max_context_length 8192 = 8 (or local_batch_size 8)
        assert model.name == "llama-3.1-70b" and i.name == "llama3_70b"
        assert (plan.tp, plan.dp, plan.micro_batch, plan.global_batch, plan.seq_len) == (8, 8, 8, 64, 8192)
        assert (plan.recompute, plan.loss_chunks) == ("full", 8)  # FullAC; ChunkedLossWrapper's 8 chunks
    # llama3_8b_mxfp8 = llama3_8b() edited: compile model, MXFP8 converter
    _, _, plan = plan_of(imp("llama3_config_registry.py", "llama3_8b_mxfp8"), "dgx-b200", 8)
    assert (plan.precision, plan.fp8_recipe, plan.compile, plan.recompute) == ("fp8", "mxfp8", "model", "per-op")
    with pytest.raises(InputError, match="debugmodel"):  # no perfmodel model has the debug flavor's shape
        imp("llama3_config_registry.py", "llama3_debugmodel")


def test_cli_refusals_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[training\nseq_len = 1\n")
    notpy = tmp_path / "cfg.py"
    notpy.write_text("def f(:\n")
    for f in (bad, notpy):
        assert main(["import", str(f), "--from", "torchtitan", "--hardware", "dgx-h100", "--gpus", "8"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(f) in err
    assert main(["import", FIX + "llama3_config_registry.py", "--from", "torchtitan"]) == 2
    assert "--name one of" in capsys.readouterr().err
    for value in ('"two"', "true", "2.5"):  # JobConfig's int fields: refused naming the key, never a traceback
        odd = tmp_path / "odd.toml"
        odd.write_text(f'[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ntensor_parallel_degree = {value}\n')
        assert main(["import", str(odd), "--from", "torchtitan", "--hardware", "dgx-h100", "--gpus", "8"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "parallelism.tensor_parallel_degree = " in err and "an integer" in err
    # degrees and sizes out of range: pipeline_parallel_degree -3 had raised IndexError (torchtitan_parts), a
    # micro-batch size 0 ZeroDivisionError; each refused naming the key, the value and what is valid
    for key, value, valid in (("parallelism.pipeline_parallel_degree", -3, "an integer >= 1"),
                              ("parallelism.tensor_parallel_degree", 0, "an integer >= 1"),
                              ("parallelism.data_parallel_shard_degree", 0, "-1 (the rest) or an integer >= 1"),
                              ("parallelism.pipeline_parallel_layers_per_stage", -2, "an integer >= 1"),
                              ("parallelism.pipeline_parallel_first_stage_less_layers", -1, "an integer >= 0"),
                              ("training.seq_len", 0, "an integer >= 1")):
        tables = {"model": {"name": '"llama3"', "flavor": '"8B"'}, "training": {},
                  "parallelism": {"pipeline_parallel_degree": 2, "pipeline_parallel_microbatch_size": 1}}
        section, name = key.split(".")
        tables[section][name] = value
        odd = tmp_path / "odd.toml"
        odd.write_text("".join(f"[{t}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items())
                               for t, kv in tables.items()))
        assert main(["import", str(odd), "--from", "torchtitan", "--hardware", "dgx-h100", "--gpus", "8"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{key} = {value}; valid: {valid}" in err, err
    assert main(["import", FIX + "llama3_8b.toml", "--from", "torchtitan", "--hardware", "dgx-h100"]) == 2
    assert "--gpus" in capsys.readouterr().err


# ---- older spellings, flavors from the source (tests/fixtures/corpus/torchtitan; cases.yaml checks the plans) ----

CORPUS = "tests/fixtures/corpus/torchtitan/"


def test_2025_02_spelling_keeps_the_keys_as_written():
    """train_configs/llama3_405b.toml at 3cabf56b (2025-02): [training] tensor_parallel_degree = 8 and batch_size = 2,
    [experimental] pipeline / context parallel degrees and enable_async_tensor_parallel, converters = "float8" (a
    string) and training.compile = true, which then compiled the blocks alone."""
    i = read_config([CORPUS + "2025-02/llama3_405b.toml"], "torchtitan")
    fate = {k.key: k for k in i.keys}
    assert fate["training.tensor_parallel_degree"].became == "plan.tp = 8"
    assert "today's parallelism.tensor_parallel_degree" in fate["training.tensor_parallel_degree"].why
    assert fate["experimental.pipeline_parallel_degree"].became == "plan.pp = 1"
    assert fate["experimental.enable_async_tensor_parallel"].became == "plan.tp_comm_overlap = true"
    assert fate["training.batch_size"].became == "plan.micro_batch = 2"
    assert fate["training.compile"].became == "plan.compile = model" and "blocks only" in fate["training.compile"].why
    assert fate["model.converters"].value == "float8" and "plan.precision = fp8" in fate["model.converters"].became
    assert fate["model.norm_type"].fate == "not priced"
    assert not any(k.key.startswith("parallelism.") and k.fate == "mapped" for k in i.keys)  # none written so


@pytest.mark.parametrize("path", ["2025-02/llama3_8b.toml", "2025-02/llama3_405b.toml", "2025-08/llama4_17bx128e.toml",
                                  "2025-08/deepseek_v3_671b.toml", "sytelus/qwen3_1.7b_longcontext_cp.toml"])
def test_corpus_tomls_account_for_every_key(path):
    leaves = flatten(read_toml(__import__("pathlib").Path(CORPUS + path), "t"))
    i = read_config([CORPUS + path], "torchtitan")
    stated = [k for k in i.keys if k.fate != "default"]
    assert sorted(k.key for k in stated) == sorted(k for k, _ in leaves)
    assert all(k.why for k in i.keys if k.fate == "not priced")


def test_old_pipeline_counts_micro_batches_and_split_points(tmp_path):
    """Before 2025-06, batch_size split into pipeline_parallel_microbatches (default: one per stage); split points
    start a part each: llama3 8B's 32 layers split at layers.10 and layers.20 over pp 3 -> parts 10, 10, 12."""
    head = '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nbatch_size = 12\nseq_len = 2048\n'
    cfg = tmp_path / "pp.toml"
    cfg.write_text(head + '[experimental]\npipeline_parallel_degree = 3\n'
                   'pipeline_parallel_split_points = ["layers.10", "layers.20"]\n')
    _, _, plan = plan_of(read_config([cfg], "torchtitan"), "dgx-h100", 6)
    assert (plan.pp, plan.dp, plan.vpp, plan.stage_layers) == (3, 2, 1, [10, 10, 12])
    assert (plan.micro_batch, plan.global_batch) == (12 // 3, 12 * 2)  # one micro-batch per stage: 3 of 4
    cfg.write_text(head + '[experimental]\npipeline_parallel_degree = 2\npipeline_parallel_microbatches = 6\n')
    _, _, plan = plan_of(read_config([cfg], "torchtitan"), "dgx-h100", 2)
    assert (plan.micro_batch, plan.global_batch, plan.stage_layers) == (2, 12, [16, 16])  # 32 // 2 first, rest last
    cfg.write_text(head + '[experimental]\npipeline_parallel_degree = 3\n')  # 32 // 3 = 10 first, 2 extra: 1 middle
    _, _, plan = plan_of(read_config([cfg], "torchtitan"), "dgx-h100", 3)
    assert (plan.stage_layers, plan.micro_batch) == ([10, 11, 11], 4)  # (today's split: 11, 11, 10)
    cfg.write_text(head + '[experimental]\npipeline_parallel_degree = 2\npipeline_parallel_microbatches = 5\n')
    with pytest.raises(InputError, match="batch_size = 12 is not split evenly into pipeline_parallel_microbatches = 5"):
        read_config([cfg], "torchtitan")
    cfg.write_text(head + '[experimental]\npipeline_parallel_degree = 2\n'
                   'pipeline_parallel_split_points = ["layers.40"]\n')
    with pytest.raises(InputError, match="split_points: 'layers.40'; valid: layers.N with 0 < N < 32"):
        read_config([cfg], "torchtitan")


def test_stale_spelling_beside_todays(tmp_path):
    """A 2025-08 file states both [training] compile = false and [compile] enable = true: torchtitan then read only
    [compile]; the old key is named, not read."""
    cfg = tmp_path / "both.toml"
    cfg.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\ncompile = false\n'
                   '[compile]\nenable = true\ncomponents = ["model"]\n')
    i = read_config([cfg], "torchtitan")
    fate = {k.key: k for k in i.keys}
    assert fate["training.compile"].fate == "not priced" and "compile.enable" in fate["training.compile"].why
    assert i.plan["compile"] == "model"


def test_flavors_from_the_source_match_the_presets():
    """Every flavor perfmodel maps has the shape torchtitan's source gives it (model_of checks); families the registries
    name: gpt_oss from the module's folder or the function's name, its flavors the gpt-oss presets."""
    from perfmodel.ingest.torchtitan.flavors import _known, _preset, model_of
    mapped = {(fam, fl): model_of(fam, fl).name for fam, fl in _known() if _preset(fam, fl)}
    assert mapped[("qwen3", "14B")] == "qwen3-14b" and mapped[("llama4", "17bx128e")] == "llama-4-maverick"
    m = read_config([CORPUS + "2026-08/gpt_oss/config_registry.py"], "torchtitan", "gpt_oss_120b").model
    assert (m.name, m.n_layers, m.moe.n_experts, m.moe.top_k) == ("gpt-oss-120b", 36, 128, 4)
    with pytest.raises(InputError, match=r"flavor = 4x4B: perfmodel has no model .*valid: .*qwen3 32B"):
        model_of("qwen3", "4x4B")


# ---- the round trip: perfmodel's exports import back to the plan exported ---------------------------------

def _plans():
    hw = load_hardware("dgx-h100")
    dense, moe = load_model("llama-3.1-8b"), load_model("qwen3-30b-a3b")
    common = dict(stack="torchtitan", seq_len=8192, micro_batch=1)
    specs = [(dense, dict(gpus=64, tp=2, pp=4, vpp=2, global_batch=256, zero=3, recompute="full",
                          compile="model+loss")),
             (dense, dict(gpus=32, tp=2, pp=2, global_batch=64, zero=2, recompute="per-op", loss_chunks=4)),
             (dense, dict(gpus=32, tp=4, cp=2, dp_replicate=2, global_batch=32, zero=3, recompute="none",
                          precision="fp8", compile="model")),
             (dense, dict(gpus=16, tp=1, global_batch=64, micro_batch=2, zero=0, recompute="full")),
             (moe, dict(gpus=32, tp=2, ep=8, global_batch=64, zero=3, recompute="per-op", seq_len=4096,
                        sequence_parallel=True))]
    out = []
    for model, kw in specs:
        plan = resolve(Plan(**{**common, **kw}), model, hw)
        out.append(plan_file(model, hw, plan))
    return out


PLANS = _plans()
SHAPE = ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden", "vocab", "moe", "mla")
# fields an export does not carry: the split rules become module names (read back as stage_layers, compared as
# chunk_layers); cuda_graphs and expert_imbalance have no torchtitan key
NOT_CARRIED = {"stage_layers", "account_for_embedding", "account_for_loss", "first_stage_layers", "last_stage_layers",
               "cuda_graphs", "expert_imbalance"}


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("index", range(len(PLANS)))
def test_round_trip(version, index, tmp_path):
    pf = PLANS[index]
    exported, _ = nearest(pf, "torchtitan", version)
    path = tmp_path / ("perfmodel_plan.py" if version == "0.3.0" else "plan.toml")
    path.write_text(export_plan(pf, "torchtitan", version))
    i = read_config([path], "torchtitan", None)
    model, _, plan = plan_of(i, exported.hardware, exported.plan.gpus)
    want, got = exported.plan.model_dump(), plan.model_dump()
    diff = {k: (want[k], got[k]) for k in want if k not in NOT_CARRIED and want[k] != got[k]}
    assert not diff
    assert chunk_layers(plan, model.n_layers) == chunk_layers(exported.plan, exported.model.n_layers)
    for f in SHAPE:
        assert getattr(model, f) == getattr(exported.model, f), f
