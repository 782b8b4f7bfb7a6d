"""`perfmodel import --from bridge`: Megatron-Bridge recipe modules of three styles (v0.1.0rc4 provider classes,
v0.2.0 `**user_kwargs` into `_llama3_common`, 067f987 `cfg = _pretrain_common()` then assignments; verbatim
fixtures, tests/fixtures/configs/SOURCES.md) read as data, their YAML and key=value overrides layered on top, every
assignment and keyword accounted for. There is no Bridge exporter, so no round trip: the expected values below are
read off the recipe text (line numbers of the fixtures)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.ingest import plan_of, read_config
from perfmodel.spec.plan.finetune import LoRA

FIX = Path(__file__).parent / "fixtures" / "configs" / "bridge"
LLAMA, COMMON, QWEN, DSV3 = (FIX / f for f in ("h100_llama3.py", "common.py", "h100_qwen3_moe.py",
                                                "h100_deepseek_v3.py"))
OLD, OLDEST = FIX / "llama3_v0_2_0.py", FIX / "llama3_8b_v0_1_0rc4.py"


def imported(files, name, gpus):
    imp = read_config(files, "bridge", name)
    return imp, plan_of(imp, "dgx-h100", gpus)[2]


# (files, --name, --gpus (the recipe's own count where its name says it), what the plan must hold)
IMPORTS = [
    ([LLAMA, COMMON], "llama3_70b_pretrain_32gpu_h100_bf16_config", 32, dict(tp=4, pp=4, vpp=5, cp=2)),
    ([LLAMA, COMMON], "llama31_405b_pretrain_256gpu_h100_bf16_config", 256, dict(tp=8, pp=8, cp=4, vpp=2)),
    ([LLAMA, COMMON], "llama3_8b_pretrain_2gpu_h100_fp8cs_config", 2, dict(precision="fp8", fp8_recipe="tensorwise")),
    ([QWEN, COMMON], "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config", 256, dict(tp=4, pp=16, ep=8, cp=2)),
    ([DSV3, COMMON], "deepseek_v3_pretrain_1024gpu_h100_bf16_config", 1024, dict(tp=2, pp=16, ep=64)),
    ([OLD], "llama3_70b_pretrain_config", 64, dict(tp=4, pp=4, vpp=5, cp=2, tp_comm_overlap=True)),
    ([OLDEST], None, 16, dict(cp=2, global_batch=512, seq_len=8192)),
    ([OLDEST, FIX / "llama3_8b_pretrain_override_example.yaml"], None, 8, dict(global_batch=8, seq_len=4096)),
    ([LLAMA, COMMON, FIX / "llama32_1b_pretrain.yaml"], "llama3_8b_pretrain_2gpu_h100_bf16_config", 8,
     dict(global_batch=8, seq_len=4096, tp=1)),
    # h100_llama3.py: meta-llama/Llama-3.2-1B (a preset since the 2026 catalogue), TP 1 PP 1 CP 1, seq 8192, GBS 512
    ([LLAMA, COMMON], "llama32_1b_pretrain_1gpu_h100_bf16_config", 1, dict(tp=1, pp=1, seq_len=8192, global_batch=512)),
    # h100_qwen3_moe.py: TP 1, PP 1, EP 16, GBS 1024, MBS 1, seq 4096; its per-layer CUDA graphs priced eager
    # (megatron_keys.GRAPHS_EAGER_WHY)
    ([QWEN, COMMON], "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config", 16,
     dict(tp=1, pp=1, ep=16, global_batch=1024, micro_batch=1, seq_len=4096)),
    # h100_llama3.py:2336-2392: default_peft_config("lora") (LoRA's default targets: qkv, proj, fc1, fc2), then
    # dim = 8 for "lora"; TP 1, GBS 8, MBS 1, seq 4096
    ([LLAMA, COMMON], "llama3_8b_peft_1gpu_h100_bf16_config", 1,
     dict(lora=LoRA(rank=8, modules="all"), tp=1, global_batch=8, micro_batch=1, seq_len=4096)),
]
REFUSALS = [
    ([OLD], "llama3_8b_low_precision_pretrain_config", 8, "takes mixed_precision_recipe"),
    ([LLAMA, COMMON], "llama3_8b_pretrain_2gpu_h100_fp8mx_config", 2, "mxfp8 on H100"),
]


@pytest.mark.parametrize("files,name,gpus,want", IMPORTS, ids=lambda x: None)
def test_fixture_imports(files, name, gpus, want):
    imp, plan = imported(files, name, gpus)
    assert plan.stack == "megatron-bridge"
    for field, value in want.items():
        assert getattr(plan, field) == value, field


@pytest.mark.parametrize("files,name,gpus,why", REFUSALS, ids=lambda x: None)
def test_fixture_refusals_name_why(files, name, gpus, why):
    with pytest.raises(InputError) as err:
        imp = read_config(files, "bridge", name)
        plan_of(imp, "dgx-h100", gpus)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_llama3_70b_by_hand():
    """h100_llama3.py:720-800: TP 4, PP 4, VPP 5, CP 2, SP, seq 8192, GBS 512, MBS 1, bf16_mixed from
    common.py:_pretrain_common, CommOverlapConfig(tp_comm_overlap=True), distributed optimizer, no recompute."""
    imp, plan = imported([LLAMA, COMMON], "llama3_70b_pretrain_32gpu_h100_bf16_config", 32)
    assert imp.model.name == "llama-3-70b"
    assert (plan.tp, plan.pp, plan.vpp, plan.cp, plan.dp) == (4, 4, 5, 2, 32 // (4 * 4 * 2))
    assert (plan.seq_len, plan.global_batch, plan.micro_batch) == (8192, 512, 1)
    assert plan.sequence_parallel and plan.tp_comm_overlap and plan.overlap_dp_comm
    assert (plan.precision, plan.zero, plan.recompute, plan.grad_dtype) == ("bf16", 1, "none", "fp32")


def test_qwen3_235b_by_hand():
    """h100_qwen3_moe.py:228-349: TP 4, PP 16, CP 2, EP 8, ETP 1, seq 4096, MBS 1 (GBS 32 left to
    _pretrain_common, common.py:62), alltoall made flex by apply_flex_dispatcher_backend(deepep), embedding and loss
    accounted in the pipeline split."""
    imp, plan = imported([QWEN, COMMON], "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config", 256)
    assert imp.model.name == "qwen3-235b-a22b"
    assert (plan.tp, plan.pp, plan.cp, plan.ep, plan.etp) == (4, 16, 2, 8, 1)
    assert (plan.seq_len, plan.micro_batch, plan.global_batch) == (4096, 1, 32)
    assert plan.moe_dispatcher == "flex" and plan.account_for_embedding and plan.account_for_loss
    assert plan.precision == "bf16"


def test_deepseek_v3_layout_followed():
    """set_deepseek_v3_pipeline_model_parallel_layout (h100_deepseek_v3.py:80-106) picks layout (16, 1): an
    embedding and 4 decoder layers, 14 stages of 4, then 1 decoder layer with MTP and loss: 4*15 + 1 = 61 layers."""
    imp, plan = imported([DSV3, COMMON], "deepseek_v3_pretrain_1024gpu_h100_bf16_config", 1024)
    assert plan.stage_layers == [4] * 15 + [1]
    assert (plan.grad_dtype, plan.moment_dtype) == ("bf16", "bf16")  # MixedPrecisionConfig(grad_reduce_in_fp32=False)


def assignments(path: Path, fn: str) -> list[tuple[str, int]]:
    """(cfg.<section>.<key> as 'section.key', line) of every attribute assignment the recipe function states."""
    tree = ast.parse(path.read_text())
    body = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == fn)
    out = []
    for node in ast.walk(body):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
            text = ast.unparse(node.targets[0])
            if text.startswith("cfg."):
                out.append((text[4:], node.lineno))
    return out


@pytest.mark.parametrize("path,fn", [(LLAMA, "llama3_70b_pretrain_32gpu_h100_bf16_config"),
                                     (DSV3, "deepseek_v3_pretrain_1024gpu_h100_bf16_config")])
def test_explain_accounts_for_every_assignment(path, fn):
    imp = read_config([path, COMMON], "bridge", fn)
    sources = {(k.key, k.source.split(" ")[0]) for k in imp.keys}
    for key, line in assignments(path, fn):
        if key.startswith(("dist.", "model._")):  # under `if cfg.model.apply_rope_fusion:` / a function reference
            assert any(f"{path.name}:{line}" in k.source for k in imp.keys), key
            continue
        assert (key, f"{path.name}:{line}") in sources, (key, line)


def test_explain_accounts_for_every_keyword_of_the_old_style():
    """v0.2.0: each recommended_kwargs entry of llama31_405b_pretrain_config reaches a key (named with where it came
    from) or is listed as an argument of _llama3_common."""
    imp = read_config([OLD], "bridge", "llama31_405b_pretrain_config")
    text = "\n".join(f"{k.key} {k.source}" for k in imp.keys)
    fn = next(f for f in ast.parse(OLD.read_text()).body if getattr(f, "name", "") == "llama31_405b_pretrain_config")
    kwargs = next(n for n in ast.walk(fn) if isinstance(n, ast.Dict))
    for k in kwargs.keys:
        assert f"({k.value} from " in text or f"_llama3_common({k.value}=...)" in text, k.value
    keys = {k.key: k for k in imp.keys}
    assert keys["model.account_for_embedding_in_pipeline_split"].became == "plan.account_for_embedding = true"
    assert keys["_llama3_common(hf_path=...)"].value == "meta-llama/Meta-Llama-3.1-405B"
    lr = keys["distributed_fused_adam_with_cosine_annealing(max_lr=...)"]  # lr: float = 3e-4, _llama3_common's default
    assert (lr.value, lr.fate) == ("0.0003", "not priced") and "lr from llama3_v0_2_0.py:454" in lr.source


def test_name_listing_and_unknown_name():
    with pytest.raises(InputError) as err:
        read_config([QWEN, COMMON], "bridge")
    msg = str(err.value)
    assert "--name is needed" in msg and "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config" in msg and "\n" not in msg
    assert "_pretrain_common" not in msg  # helpers are not recipes
    with pytest.raises(InputError, match="no such recipe"):
        read_config([QWEN], "bridge", "qwen3_9b_config")


def test_overrides_layer_in_order(tmp_path):
    """recipe (tp 4) < YAML (tp 2) < key=value words (tp 8, gbs 1024): the later layer wins, the earlier is named."""
    conf = tmp_path / "conf.yaml"
    conf.write_text("model:\n  tensor_model_parallel_size: 2\ntrain:\n  global_batch_size: 256\n")
    words = tmp_path / "run.sh"
    words.write_text("python run_recipe.py --config-file conf.yaml model.tensor_model_parallel_size=8 "
                     "train.global_batch_size=1024\n")
    name = "llama3_70b_pretrain_32gpu_h100_bf16_config"
    imp, plan = imported([LLAMA, COMMON, conf], name, 64)
    assert (plan.tp, plan.global_batch) == (2, 256)
    imp, plan = imported([LLAMA, COMMON, conf, words], name, 128)
    assert (plan.tp, plan.global_batch) == (8, 1024)
    replaced = [k for k in imp.keys if k.key == "model.tensor_model_parallel_size" and k.fate == "not priced"]
    assert [k.value for k in replaced] == ["4", "2"] and "run.sh" in replaced[1].why


def test_contradictions_refused(tmp_path):
    words = tmp_path / "over.txt"
    words.write_text("model.tensor_model_parallel_size=8 model.tensor_model_parallel_size=4\n")
    with pytest.raises(InputError, match="contradicts itself.*tensor_model_parallel_size=8.*=4"):
        read_config([LLAMA, COMMON, words], "bridge", "llama3_70b_pretrain_32gpu_h100_bf16_config")
    conf = tmp_path / "conf.yaml"  # Bridge requires model.seq_length == dataset.seq_length (both stated by the user)
    conf.write_text("model:\n  seq_length: 4096\ndataset:\n  seq_length: 2048\n")
    with pytest.raises(InputError, match="contradicts itself.*seq_length.*seq_length"):
        read_config([LLAMA, COMMON, conf], "bridge", "llama3_70b_pretrain_32gpu_h100_bf16_config")


def test_cli_explain_and_bad_input(tmp_path, capsys):
    assert main(["import", str(OLD), "--from", "bridge", "--name", "llama3_70b_pretrain_config", "--hardware",
                 "dgx-h100", "--gpus", "64", "--explain"]) in (0, None)
    out = capsys.readouterr().out
    assert "model.tensor_model_parallel_size = 4 -> plan.tp = 4" in out
    assert "lr_warmup_iters" in out and "not priced" in out
    bad = tmp_path / "recipe.py"
    bad.write_text("def llama3_config(:\n    pass\n")
    assert main(["import", str(bad), "--from", "bridge", "--hardware", "dgx-h100", "--gpus", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not Python" in err and len(err.splitlines()) == 1


def test_precision_by_name_replaces_the_section(tmp_path):
    """`mixed_precision=bf16_with_fp8_current_scaling_mixed` replaces DeepSeek-V3's MixedPrecisionConfig(bf16=True,
    grad_reduce_in_fp32=False) (h100_deepseek_v3.py:203-209) whole: fp8 tensorwise (mixed_precision.py:284-305 at
    067f987, built on bf16_mixed, whose grad_reduce_in_fp32 is True)."""
    words = tmp_path / "w.txt"
    words.write_text("mixed_precision=bf16_with_fp8_current_scaling_mixed\n")
    imp, plan = imported([DSV3, COMMON, words], "deepseek_v3_pretrain_1024gpu_h100_bf16_config", 1024)
    assert (plan.precision, plan.fp8_recipe, plan.grad_dtype) == ("fp8", "tensorwise", "fp32")
    assert any(k.key == "mixed_precision.grad_reduce_in_fp32" and "replaced with its section" in k.why
               for k in imp.keys)
    words.write_text("mixed_precision=fp64_mixed\n")
    with pytest.raises(InputError, match="fp64_mixed.*valid: bf16_mixed"):
        read_config([DSV3, COMMON, words], "bridge", "deepseek_v3_pretrain_1024gpu_h100_bf16_config")


# ---- 2026 perf recipes, legacy perf formats (the corpus files, tests/fixtures/corpus/bridge/cases.yaml) -------------

CORPUS = Path(__file__).parent / "fixtures" / "corpus" / "bridge"
PERF_405B = CORPUS / "perf_recipes" / "llama" / "h100" / "llama31.py"


def test_perf_recipe_without_its_base_recipe():
    """llama31.py (h100):28-48 calls llama31_405b_pretrain_config(), imported from a module not given: the model is
    the preset its name names, 1024 H100 from the recipe's name, its own TP 8 PP 8 CP 2 VPP 8 GBS 1536; what it leaves
    to the base (the distributed optimizer, recipes/llama/h100/llama3.py:1276 at 067f987) is a cited default."""
    imp = read_config([PERF_405B], "bridge", "llama31_405b_pretrain_1024gpu_h100_bf16_config")
    keys = {k.key: k for k in imp.keys}
    assert "not among the files; its model read as the preset llama-3.1-405b by the function's name" in keys["model"].why
    assert (imp.gpus, imp.hardware) == (1024, "dgx-h100")
    zero = keys["ddp.use_distributed_optimizer"]
    assert zero.fate == "default" and "recipes/llama/h100/llama3.py:1276" in zero.why and "067f987" in zero.why
    _, _, plan = plan_of(imp)
    assert (plan.tp, plan.pp, plan.cp, plan.vpp, plan.dp, plan.global_batch, plan.zero) == (8, 8, 2, 8, 8, 1536, 1)
    # the 512-GPU recipe: _with_global_batch_size(<the 1024-GPU recipe>, 768) (perf_recipes/llama/common.py:44-46)
    imp = read_config([PERF_405B], "bridge", "llama31_405b_pretrain_512gpu_h100_bf16_config")
    _, _, plan = plan_of(imp)
    assert (imp.gpus, plan.global_batch, plan.dp) == (512, 768, 4)


def test_helper_not_given_is_read_from_bridge_at_its_commit():
    """gpt_oss.py (b300):31-76 calls _apply_gpt_oss_20b_common_configs(cfg), which sets PP 1 and seq 8192
    (perf_recipes/gpt_oss/common.py:98-100 at 067f987) over the base recipe's PP 4; the helper-built NVFP4 precision
    (_gpt_oss_20b_nvfp4_precision, common.py:65-76) is bf16_with_nvfp4_mixed."""
    imp = read_config([CORPUS / "perf_recipes" / "gpt_oss" / "b300" / "gpt_oss.py"], "bridge",
                      "gpt_oss_20b_pretrain_8gpu_b300_nvfp4_config")
    assert (imp.plan["pp"], imp.plan["seq_len"], imp.plan["precision"], imp.hardware) == (1, 8192, "fp4", "dgx-b300")
    pp = next(k for k in imp.keys if k.key == "model.pipeline_model_parallel_size" and k.fate == "default")
    assert "perf_recipes/gpt_oss/common.py:98" in pp.why


def test_base_recipe_given_through_its_alias_module():
    """With recipes/gpt_oss/gpt_oss.py (gpt_oss_20b_pretrain_config = gpt_oss_20b_pretrain_16gpu_h100_bf16_config)
    and recipes/gpt_oss/h100/gpt_oss.py given, the base is followed: its TP 2 is replaced by the perf recipe's TP 1 and
    its model is the AutoBridge id it names."""
    files = [CORPUS / "perf_recipes" / "gpt_oss" / "b300" / "gpt_oss.py", CORPUS / "recipes" / "gpt_oss" / "gpt_oss.py",
             CORPUS / "recipes" / "gpt_oss" / "h100" / "gpt_oss.py"]
    imp = read_config(files, "bridge", "gpt_oss_20b_pretrain_8gpu_b300_nvfp4_config")
    keys = [k for k in imp.keys if k.key == "model.tensor_model_parallel_size"]
    assert [k.value for k in keys] == ["2", "1"] and keys[0].fate == "not priced" and "gpt_oss.py:" in keys[0].source
    assert next(k for k in imp.keys if k.key == "model").value == "AutoBridge('openai/gpt-oss-20b')"


def test_gpu_kind_the_catalogue_lacks_is_named(tmp_path):
    """A VR200 perf recipe: the catalogue has no VR200 system, so --hardware is asked for (never a guessed system)."""
    recipe = tmp_path / "llama31.py"
    recipe.write_text(PERF_405B.read_text().replace("1024gpu_h100_bf16_config", "1024gpu_vr200_bf16_config"))
    imp = read_config([recipe], "bridge", "llama31_405b_pretrain_1024gpu_vr200_bf16_config")
    assert imp.hardware is None and imp.gpus == 1024
    assert any("no VR200 system" in k.why for k in imp.keys)
    with pytest.raises(InputError, match="--hardware is needed"):
        plan_of(imp)


def test_workload_base_config_table():
    """llama31_workload_base_configs.py:148-156 (c3e43e6): num_gpus 1024, TP 8 PP 8 CP 2 VPP 8 GBS 512; MBS the
    dataclass's 1 (utils.py:45); bf16 and H100 from the name (utils.py:79-82)."""
    table = CORPUS / "2025-12" / "llama" / "llama31_workload_base_configs.py"
    with pytest.raises(InputError) as err:
        read_config([table], "bridge")
    assert "--name is needed" in str(err.value) and "LLAMA31_405B_PRETRAIN_CONFIG_H100_BF16_BASE_CONFIG" in str(err.value)
    imp = read_config([table], "bridge", "LLAMA31_405B_PRETRAIN_CONFIG_H100_BF16_BASE_CONFIG")
    _, system, plan = plan_of(imp)
    assert (imp.gpus, system.name, imp.model.name) == (1024, "dgx-h100", "llama-3.1-405b")
    assert (plan.tp, plan.pp, plan.cp, plan.vpp, plan.micro_batch, plan.global_batch) == (8, 8, 2, 8, 1, 512)
    assert plan.sequence_parallel and plan.precision == "bf16"
    mbs = next(k for k in imp.keys if k.key == "train.micro_batch_size")
    assert "utils.py:45" in mbs.source


def test_workload_table_read_by_its_pretrain_module():
    """deepseek_llm_pretrain.py:158-183 (c3e43e6): precision "bf16" picks DEEPSEEK_V3_PRETRAIN_CONFIG_H100_BF16_
    BASE_CONFIG, which set_workload_base_configs lays over the base (TP 2 PP 8 VPP 4 EP 64, ETP 1 from the table's
    BASE_DEEPSEEK_V3_CONFIG, GBS 8192); set_deepseek_v3_common_configs sets seq 4096 (:44)."""
    files = [CORPUS / "2025-12" / "deepseek" / n for n in ("deepseek_llm_pretrain.py", "deepseek_workload_base_configs.py")]
    imp = read_config(files, "bridge", "deepseek_v3_pretrain_config_h100")
    _, _, plan = plan_of(imp)
    assert (imp.gpus, imp.model.name) == (1024, "deepseek-v3")
    assert (plan.tp, plan.pp, plan.vpp, plan.ep, plan.etp, plan.global_batch, plan.seq_len) == (2, 8, 4, 64, 1, 8192, 4096)


def test_perf_matrix_yaml():
    """deepseek_v3_llm_pretrain.yaml (8cec56d): perf_matrix.h100.num_gpus_1024.common: TP 2 PP 8 VP 2 EP 64 ETP 1,
    seq 4096, GBS 8192; the model from the file's name (setup_experiment.py:53)."""
    yaml = CORPUS / "2025-09" / "deepseek" / "deepseek_v3_llm_pretrain.yaml"
    with pytest.raises(InputError) as err:
        read_config([yaml], "bridge")
    assert "h100.num_gpus_1024.bf16" in str(err.value) and "gb200.num_gpus_256.fp8_mx" in str(err.value)
    imp = read_config([yaml], "bridge", "h100.num_gpus_1024.fp8_cs")  # fp8 current scaling (helpers.py:65-81)
    _, system, plan = plan_of(imp)
    assert (imp.gpus, system.name, imp.model.name) == (1024, "dgx-h100", "deepseek-v3")
    assert (plan.tp, plan.pp, plan.vpp, plan.ep, plan.etp, plan.seq_len) == (2, 8, 2, 64, 1, 4096)
    assert (plan.precision, plan.fp8_recipe) == ("fp8", "tensorwise")


def test_full_iteration_scope_and_pipeline_split_without_pipeline(tmp_path):
    """cuda_graph_impl "local" with cuda_graph_scope ["full_iteration"] graphs the step (Megatron-Core promotes it,
    perf_recipes/_common.py:76-77), so plan.cuda_graphs is step, not a contradiction; a pipeline-split key with pp 1 is
    named, not priced. The base llama3_8b_pretrain_config() is not given: seq 8192 is its cited default."""
    recipe = tmp_path / "llama3.py"
    recipe.write_text("def llama3_8b_pretrain_8gpu_h100_bf16_config() -> ConfigContainer:\n"
                      "    cfg = llama3_8b_pretrain_config()\n"
                      "    cfg.model.cuda_graph_impl = 'local'\n"
                      "    cfg.model.cuda_graph_scope = ['full_iteration']\n"
                      "    cfg.model.pipeline_model_parallel_size = 1\n"
                      "    cfg.model.account_for_embedding_in_pipeline_split = True\n"
                      "    return cfg\n")
    imp = read_config([recipe], "bridge", None)
    _, _, plan = plan_of(imp)
    assert (plan.cuda_graphs, plan.pp, plan.account_for_embedding, plan.seq_len, imp.gpus) == ("step", 1, False, 8192, 8)
    split = next(k for k in imp.keys if k.key == "model.account_for_embedding_in_pipeline_split")
    assert split.fate == "not priced" and "pp = 1" in split.why
    seq = next(k for k in imp.keys if k.key == "model.seq_length")
    assert seq.fate == "default" and "recipes/llama/h100/llama3.py:" in seq.why


def test_counts_that_are_no_whole_number_are_refused_in_one_line(tmp_path, capsys):
    """`1e400` is inf to Python's parser: it had raised OverflowError (int(inf)) in the count check; a count that is
    not a finite whole number of 0 or more is refused naming the key, its value and what is valid."""
    for value, shown in (("1e400", "inf"), ("2.5", "2.5"), ("-4", "-4"), ("True", "true")):
        recipe = tmp_path / "llama3.py"
        recipe.write_text("def llama3_8b_pretrain_8gpu_h100_bf16_config() -> ConfigContainer:\n"
                          "    cfg = llama3_8b_pretrain_config()\n"
                          f"    cfg.model.tensor_model_parallel_size = {value}\n"
                          "    return cfg\n")
        assert main(["import", str(recipe), "--from", "bridge"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert f"model.tensor_model_parallel_size = {shown} (" in err and "is not a whole number >= 0; valid: a " \
                                                                          "count of 0 or more" in err, err


def test_a_recipe_past_its_budget_is_refused_in_one_line(tmp_path):
    """perfmodel.ingest.reading's budget, which the shell reader shares: helpers that recurse are refused at 16 calls
    nested, a recipe that follows more than 20,000 statements at the one past them."""
    recipe = tmp_path / "loop.py"
    recipe.write_text("def _helper(n):\n    return _helper(n + 1)\n\n\n"
                      "def loop_config() -> ConfigContainer:\n    return _helper(0)\n")
    with pytest.raises(InputError) as err:
        read_config([recipe], "bridge", None)
    assert str(err.value) == ("Megatron-Bridge recipe loop.py:2 _helper: more than 16 nested calls; valid: a recipe "
                              "module whose helpers do not recurse")
    body = "".join(f"    x{k} = {k}\n" for k in range(2_000))
    recipe.write_text(f"def _helper():\n{body}\n\ndef loop_config() -> ConfigContainer:\n" + "    _helper()\n" * 11
                      + "    return ConfigContainer()\n")
    with pytest.raises(InputError) as err:
        read_config([recipe], "bridge", None)
    assert str(err.value) == ("Megatron-Bridge recipe loop.py: more than 20000 statements followed; valid: a recipe "
                              "module (hundreds of statements)")
