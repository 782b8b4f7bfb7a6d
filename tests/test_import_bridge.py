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
]
REFUSALS = [
    ([LLAMA, COMMON], "llama32_1b_pretrain_1gpu_h100_bf16_config", 1,
     "'meta-llama/Llama-3.2-1B' has no perfmodel preset"),
    ([OLD], "llama3_8b_low_precision_pretrain_config", 8, "takes mixed_precision_recipe"),
    ([QWEN, COMMON], "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config", 16, "cuda_graphs = layer"),
    ([LLAMA, COMMON], "llama3_8b_pretrain_2gpu_h100_fp8mx_config", 2, "mxfp8 on H100"),
    ([LLAMA, COMMON], "llama3_8b_peft_1gpu_h100_bf16_config", 1, "parameter-efficient fine-tuning is not priced"),
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
    conf = tmp_path / "conf.yaml"  # Bridge requires model.seq_length == dataset.seq_length
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
