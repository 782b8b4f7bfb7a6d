"""`perfmodel.export` of mixture-of-experts plans: experts, expert parallelism, latent attention and multi-token
prediction in Megatron-LM arguments, a torchtitan TOML and DeepSpeed notes.

The models are built here with ModelConfig(moe=MoEConfig(...)) (a Qwen3-30B-A3B-like and a DeepSeek-V3-like one,
shapes from their Hugging Face configs), not taken from the presets. Plan files are built in memory as
tests/test_export.py builds them: the prediction is a fixed stand-in (export reads it, never recomputes it) and
`spec.plan.file.check` resolves the plan, so no cost model runs.
"""

from __future__ import annotations

import importlib
import re
import shlex
import shutil
import subprocess

import pytest

from perfmodel.errors import InputError
from perfmodel.export.targets import export
from perfmodel.export.megatron.script import MEGATRON_ARGS, MEGATRON_NAMED_ARGS, nearest_plan, pattern_expression
from perfmodel.export.nearest import export_plan
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.config import MLAConfig, ModelConfig, MoEConfig
from perfmodel.spec.plan.layout import Plan, resolve, split_of
from perfmodel.spec.plan.file import PlanFile, check, mesh_of

from perfmodel.export.torchtitan.config import nearest_plan as titan_nearest_plan, torchtitan
from test_export import PREDICTION, ds_config, flag, megatron_args, megatron_not_expressed, titan, toml

QWEN3_MOE = ModelConfig(
    name="qwen3-30b-a3b-like", n_layers=48, hidden=2048, n_heads=32, n_kv_heads=4, head_dim=128, ffn_hidden=6144,
    vocab=151936, max_seq_len=40960, mlp="swiglu", norm="rmsnorm", position="rope",
    moe=MoEConfig(n_experts=128, top_k=8, expert_ffn_hidden=768))
DEEPSEEK_V3 = ModelConfig(
    name="deepseek-v3-like", n_layers=61, hidden=7168, n_heads=128, ffn_hidden=18432, vocab=129280,
    max_seq_len=163840, mlp="swiglu", norm="rmsnorm", position="rope",
    moe=MoEConfig(n_experts=256, top_k=8, expert_ffn_hidden=2048, n_shared_experts=1, first_dense_layers=3,
                  router_scoring="sigmoid"),
    mla=MLAConfig(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
    mtp_layers=1)
megatron_module = importlib.import_module("perfmodel.export.megatron.script")  # the package exports the function
DENSE = ModelConfig(name="dense-8b-like", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336,
                    vocab=128256, max_seq_len=8192, mlp="swiglu", norm="rmsnorm", position="rope")

# ep 8, tp 2, pp 4 (the examples of the report): 64 GPUs give dp 8 and edp 2 for Qwen3; 256 GPUs dp 32, edp 8
QWEN3_PLAN = {"gpus": 64, "tp": 2, "pp": 4, "ep": 8, "sequence_parallel": True, "zero": 1, "micro_batch": 1,
              "global_batch": 512, "seq_len": 4096}
OVERLAP = {"moe_overlap": True, "vpp": 2}  # Megatron-Core overlaps with pp > 1 only under virtual pipelining
DSV3_PLAN = {"gpus": 256, "tp": 2, "pp": 4, "ep": 8, "sequence_parallel": True, "zero": 1, "micro_batch": 1,
             "global_batch": 1024, "seq_len": 4096, "first_stage_layers": 16}


def moe_plan_file(model: ModelConfig, hardware="dgx-h100", **plan) -> PlanFile:
    h = load_hardware(hardware)
    p = resolve(Plan(**plan), model, h)
    return check(PlanFile(version=1, model=model, hardware=h, plan=p, mesh=mesh_of(p),
                          stage_layers=split_of(p, model.n_layers), placements=[], prediction=PREDICTION,
                          created_by="tests"))


def notes_of(text: str) -> list[str]:
    return megatron_not_expressed(text)


def with_moe(model: ModelConfig, **changes) -> ModelConfig:
    moe = model.moe.model_copy(update=changes)
    return model.model_copy(update={"moe": MoEConfig(**moe.model_dump())})


# ---------------------------------------------------------------------------------------------------------
# Megatron-LM
# ---------------------------------------------------------------------------------------------------------
MOE_FLAGS = ("--num-experts", "--moe-ffn-hidden-size", "--moe-router-topk", "--moe-layer-freq",
             "--moe-shared-expert-intermediate-size", "--moe-router-score-function",
             "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-router-enable-expert-bias",
             "--moe-grouped-gemm", "--moe-token-dispatcher-type", "--expert-model-parallel-size",
             "--expert-tensor-parallel-size", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank",
             "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--qk-layernorm", "--mtp-num-layers")


def test_megatron_qwen3_moe_arguments():
    text = export(moe_plan_file(QWEN3_MOE, **QWEN3_PLAN), "megatron")
    args = megatron_args(text)
    assert len(args) == len({a.split()[0] for a in args}), "an argument given twice"
    expect = {"--num-layers": "48", "--hidden-size": "2048", "--num-attention-heads": "32",
              "--group-query-attention": "", "--num-query-groups": "4", "--kv-channels": "128",
              "--num-experts": "128", "--moe-ffn-hidden-size": "768", "--moe-router-topk": "8",
              "--moe-layer-freq": "1", "--moe-router-score-function": "softmax",
              "--moe-router-load-balancing-type": "aux_loss", "--moe-aux-loss-coeff": "1e-2",
              "--moe-grouped-gemm": "", "--moe-token-dispatcher-type": "alltoall",
              "--tensor-model-parallel-size": "2", "--pipeline-model-parallel-size": "4",
              "--expert-model-parallel-size": "8", "--expert-tensor-parallel-size": "1",
              "--sequence-parallel": "", "--use-distributed-optimizer": "", "--bf16": ""}
    for name, value in expect.items():
        assert flag(args, name) == value, name
    for absent in ("--moe-shared-expert-intermediate-size", "--moe-router-enable-expert-bias",
                   "--multi-latent-attention", "--mtp-num-layers", "--moe-router-force-load-balancing"):
        assert flag(args, absent) is None, absent
    # tp x cp x dp = 2 x 1 x 8 = 16 ranks per stage; experts etp x ep x edp = 1 x 8 x 2
    assert "tp=2 pp=4 dp=8 cp=1 ep=8 etp=1 edp=2" in text
    assert "etp x ep x edp = 1 x 8 x 2" in text
    assert "each rank's 16 local experts" in text  # 128 / ep 8
    # the only thing not carried: balanced routing (a benchmarking flag), said, not forced
    (note,) = notes_of(text)
    assert note.startswith("expert_imbalance=1.0:") and "--moe-router-force-load-balancing" in note
    assert "benchmarking" in note


def test_megatron_deepseek_v3_arguments():
    text = export(moe_plan_file(DEEPSEEK_V3, **DSV3_PLAN), "megatron")
    args = megatron_args(text)
    assert len(args) == len({a.split()[0] for a in args}), "an argument given twice"
    expect = {"--num-layers": "61", "--hidden-size": "7168", "--ffn-hidden-size": "18432",
              "--num-attention-heads": "128",
              "--multi-latent-attention": "", "--q-lora-rank": "1536", "--kv-lora-rank": "512",
              "--qk-head-dim": "128", "--qk-pos-emb-head-dim": "64", "--v-head-dim": "128", "--qk-layernorm": "",
              "--mtp-num-layers": "1",
              "--num-experts": "256", "--moe-ffn-hidden-size": "2048", "--moe-router-topk": "8",
              "--moe-layer-freq": "'([0]*3+[1]*58)'", "--moe-shared-expert-intermediate-size": "2048",
              "--moe-router-score-function": "sigmoid", "--moe-router-load-balancing-type": "seq_aux_loss",
              "--moe-aux-loss-coeff": "1e-4", "--moe-router-enable-expert-bias": "", "--moe-grouped-gemm": "",
              "--moe-token-dispatcher-type": "alltoall",
              "--tensor-model-parallel-size": "2", "--pipeline-model-parallel-size": "4",
              "--expert-model-parallel-size": "8", "--expert-tensor-parallel-size": "1",
              "--decoder-first-pipeline-num-layers": "16", "--sequence-parallel": ""}
    for name, value in expect.items():
        assert flag(args, name) == value, name
    # latent attention sets its own head widths: no GQA or kv-channels arguments (head_dim = 7168 / 128 = 56)
    for absent in ("--group-query-attention", "--num-query-groups", "--kv-channels"):
        assert flag(args, absent) is None, absent
    # the shell reads the pattern as one word, and Megatron's eval gives one entry per layer: 3 dense, 58 MoE
    line = next(x for x in text.splitlines() if x.startswith("    --moe-layer-freq "))
    (value,) = shlex.split(line.strip().removesuffix("\\"))[1:]
    assert eval(value) == [0] * 3 + [1] * 58  # noqa: S307 - what Megatron-LM's moe_freq_type does
    if shutil.which("bash"):  # the script is valid bash (the pattern's brackets and parentheses are quoted)
        assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0
    assert "tp=2 pp=4 dp=32 cp=1 ep=8 etp=1 edp=8" in text
    assert "etp x ep x edp = 1 x 8 x 8" in text
    assert [n.split(":")[0] for n in notes_of(text)] == ["mtp_layers=1", "expert_imbalance=1.0"]


def test_megatron_moe_without_sequence_parallel_is_refused_before_export():
    # Megatron-LM refuses MoE layers with tp and no sequence parallelism; so does the plan, so no export says it
    with pytest.raises(InputError, match=r"sequence_parallel = false with tp=2 .*valid: sequence_parallel = true"):
        moe_plan_file(QWEN3_MOE, **(QWEN3_PLAN | {"sequence_parallel": False}))
    text = export(moe_plan_file(QWEN3_MOE, **QWEN3_PLAN), "megatron")
    assert flag(megatron_args(text), "--sequence-parallel") == ""
    # tp = 1: nothing to turn on
    text = export(moe_plan_file(QWEN3_MOE, gpus=32, pp=4, ep=8, micro_batch=1, global_batch=64, seq_len=4096),
                  "megatron")
    assert flag(megatron_args(text), "--sequence-parallel") is None
    assert not any(n.startswith("sequence_parallel") for n in notes_of(text))


def test_megatron_expert_layout_dispatcher_and_imbalance():
    # etp = tp = 2 with ep 4 over tp x dp = 16 ranks: edp = 2; the allgather dispatcher; imbalance priced at 1.3
    text = export(moe_plan_file(QWEN3_MOE, **(QWEN3_PLAN | {"ep": 4, "etp": 2, "moe_dispatcher": "allgather",
                                                             "expert_imbalance": 1.3})), "megatron")
    args = megatron_args(text)
    assert flag(args, "--expert-model-parallel-size") == "4"
    assert flag(args, "--expert-tensor-parallel-size") == "2"
    assert flag(args, "--moe-token-dispatcher-type") == "allgather"
    assert "ep=4 etp=2 edp=2" in text and "expert_imbalance = 1.3" in text
    assert notes_of(text) == []  # every setting carried; the imbalance is the run's, a comment
    assert "--moe-router-force-load-balancing" not in text


@pytest.mark.parametrize("first_dense, freq, n_layers, expr", [
    (0, 1, 48, None),  # every layer: Megatron's integer 1
    (3, 1, 61, "([0]*3+[1]*58)"),
    (0, 2, 48, "([0]+[1])*24"),  # layers 1, 3, 5, ... (transformers' decoder_sparse_step)
    (1, 2, 8, "([0]+[1])*4"),
    (2, 2, 9, "([0]*3+([1]+[0])*3)"),
    (4, 3, 12, "([0]*5+([1]+[0]*2)*2+[1])"),  # layers 5, 8, 11
])
def test_megatron_moe_layer_freq_pattern(first_dense, freq, n_layers, expr):
    model = ModelConfig(name="m", n_layers=n_layers, hidden=512, n_heads=8, ffn_hidden=2048, vocab=32000,
                        max_seq_len=4096, mlp="swiglu", norm="rmsnorm", position="rope",
                        moe=MoEConfig(n_experts=8, top_k=2, expert_ffn_hidden=512, first_dense_layers=first_dense,
                                      layer_freq=freq))
    want = [int(i >= first_dense and (i + 1) % freq == 0) for i in range(n_layers)]
    assert sum(want) == model.moe_layers()
    value = flag(megatron_args(export(moe_plan_file(model, gpus=8, ep=8, micro_batch=1, global_batch=8,
                                                    seq_len=1024), "megatron")), "--moe-layer-freq")
    if expr is None:
        assert value == "1"
        return
    assert value == f"'{expr}'"
    assert pattern_expression(want) == expr
    assert eval(expr) == want  # noqa: S307


def test_megatron_moe_notes():
    # fp16 with expert parallelism: Megatron-LM refuses it; the plan is changed to bf16, re-predicted, and said
    text = export_plan(moe_plan_file(QWEN3_MOE, **(QWEN3_PLAN | {"precision": "fp16"})), "megatron")
    args = megatron_args(text)
    assert flag(args, "--bf16") == "" and flag(args, "--fp16") is None
    assert "precision fp16 -> bf16: Megatron-LM refuses expert parallelism (ep=8) with fp16" in text
    # router / expert biases without biases elsewhere: Megatron cannot have them alone
    gpt_oss_like = with_moe(QWEN3_MOE, router_bias=True, expert_bias=True)
    text = export(moe_plan_file(gpt_oss_like, **QWEN3_PLAN), "megatron")
    assert flag(megatron_args(text), "--disable-bias-linear") == ""
    assert any(n.startswith("router_bias=True, expert_bias=True:") for n in notes_of(text))
    # a multi-token prediction block after a dense last layer: Megatron builds it dense
    dense_last = with_moe(DEEPSEEK_V3, layer_freq=2)  # 61 layers: layer 60 is (60 + 1) % 2 = 1, dense
    text = export(moe_plan_file(dense_last, **DSV3_PLAN), "megatron")
    assert any(n.startswith("mtp_layers=1:") for n in notes_of(text))


def test_megatron_dense_plan_has_no_moe_arguments():
    text = export(moe_plan_file(DENSE, gpus=64, tp=2, pp=4, sequence_parallel=True, zero=1, micro_batch=1,
                                global_batch=512, seq_len=4096), "megatron")
    args = megatron_args(text)
    for name in MOE_FLAGS:
        assert flag(args, name) is None, name
    assert "--moe-" not in text and "expert" not in text and " ep=" not in text
    assert "argument names of Megatron-LM core_r0.16 (megatron/training/arguments.py)." in text
    assert notes_of(text) == []
    # dense models refuse expert layouts before any export
    with pytest.raises(InputError):
        moe_plan_file(DENSE, gpus=64, tp=2, pp=4, ep=2, micro_batch=1, global_batch=512, seq_len=4096)


# ---------------------------------------------------------------------------------------------------------
# The vendored Megatron-LM argument names
# ---------------------------------------------------------------------------------------------------------
def _every_export() -> list[str]:
    """Megatron-LM exports of plans that, together, reach every argument the exporter writes."""
    plans = [
        (QWEN3_MOE, QWEN3_PLAN), (DEEPSEEK_V3, DSV3_PLAN), (QWEN3_MOE, QWEN3_PLAN | OVERLAP),
        (DENSE, {"gpus": 64, "tp": 4, "pp": 2, "cp": 2, "vpp": 2, "micro_batch": 1, "global_batch": 64,
                 "seq_len": 8192, "sequence_parallel": True, "zero": 1, "recompute": "selective"}),
        (DENSE, {"gpus": 16, "tp": 4, "micro_batch": 1, "global_batch": 64, "seq_len": 4096, "zero": 1,
                 "moment_dtype": "bf16"}),  # --use-precision-aware-optimizer (core_r0.16)
        (DENSE, {"gpus": 16, "tp": 2, "pp": 2, "micro_batch": 1, "global_batch": 64, "seq_len": 4096,
                 "recompute": "full", "precision": "fp8", "account_for_embedding": True, "account_for_loss": True,
                 "vpp": 1}),
        (DENSE, {"gpus": 8, "tp": 8, "micro_batch": 1, "global_batch": 8, "seq_len": 4096, "precision": "fp16",
                 "attention": "unfused", "zero": 2}),
        (DENSE, {"gpus": 32, "pp": 4, "micro_batch": 1, "global_batch": 64, "seq_len": 4096,
                 "stage_layers": [7, 9, 9, 7]}),
        (DENSE, {"gpus": 32, "pp": 4, "vpp": 2, "micro_batch": 1, "global_batch": 64, "seq_len": 4096,
                 "first_stage_layers": 6, "last_stage_layers": 6}),
    ]
    gpt = ModelConfig(name="gpt-like", n_layers=12, hidden=768, n_heads=12, n_kv_heads=12, head_dim=96,
                      ffn_hidden=3072, vocab=50257, max_seq_len=1024, mlp="gelu", linear_bias="qkv")
    plans.append((gpt, {"gpus": 8, "micro_batch": 1, "global_batch": 8, "seq_len": 1024}))
    fp4 = moe_plan_file(DENSE, "gb200-nvl72", gpus=32, pp=4, vpp=3, micro_batch=1, global_batch=64, seq_len=4096,
                        precision="fp4")  # FP4 GEMMs (Blackwell) and a layout for uneven chunks: core_r0.16
    files = [moe_plan_file(m, **plan) for m, plan in plans] + [fp4]
    return [export(pf, "megatron", version) for pf in files for version in ("core_r0.16", "core_r0.12")
            if not nearest_plan(pf, version)[0]]


def test_every_megatron_argument_written_is_a_vendored_name():
    written = set()
    for text in _every_export():
        written |= {a.split()[0] for a in megatron_args(text)}
    assert written <= MEGATRON_ARGS, sorted(written - MEGATRON_ARGS)
    # the list holds nothing the exporter cannot write (each name checked against Megatron-LM is one it uses)
    assert written == MEGATRON_ARGS, sorted(MEGATRON_ARGS - written)
    assert set(MOE_FLAGS) <= written


def test_megatron_arguments_named_in_comments_are_vendored_names():
    torchrun = {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port",
                "--check"}  # torchrun's, and perfmodel export's own --check
    named = set()
    for text in _every_export():
        named |= set(re.findall(r"--[a-z][a-z0-9-]*(?![a-z0-9/-])", text))
    assert named - torchrun <= MEGATRON_ARGS | MEGATRON_NAMED_ARGS, sorted(named - torchrun - MEGATRON_ARGS
                                                                           - MEGATRON_NAMED_ARGS)
    # every named one is used ("--tokenizer-type/--tokenizer-model" escapes the pattern, which skips a/b forms)
    assert MEGATRON_NAMED_ARGS - named == {"--tokenizer-type"}
    assert not MEGATRON_ARGS & MEGATRON_NAMED_ARGS


def test_megatron_exporter_checks_against_the_vendored_list(monkeypatch):
    pf = moe_plan_file(DEEPSEEK_V3, **DSV3_PLAN)
    export(pf, "megatron")
    for name in ("--num-experts", "--moe-layer-freq", "--num-layers"):
        monkeypatch.setattr(megatron_module, "MEGATRON_ARGS", MEGATRON_ARGS - {name})
        with pytest.raises(AssertionError, match=f"{name} not in MEGATRON_ARGS"):
            export(pf, "megatron")
    monkeypatch.setattr(megatron_module, "MEGATRON_ARGS", MEGATRON_ARGS)
    assert megatron_module.check_args(["--num-experts 8", "--bf16"]) == ["--num-experts 8", "--bf16"]


# ---------------------------------------------------------------------------------------------------------
# torchtitan
# ---------------------------------------------------------------------------------------------------------
def titan_writer(pf: PlanFile) -> str:
    """torchtitan 0.2.2's writer itself, for the plan as planned (what `titan_changes` says changes aside)."""
    return torchtitan(pf, "0.2.2")


def titan_changes(pf: PlanFile) -> list[str]:
    """What nearest_plan changes for torchtitan 0.2.2, each 'field old -> new'."""
    return [line.split(":")[0] for line in titan_nearest_plan(pf, "0.2.2")[1]]


def test_torchtitan_qwen3_moe():
    pf = moe_plan_file(QWEN3_MOE, **QWEN3_PLAN)
    text = titan_writer(pf)
    cfg = toml(text)
    assert cfg["model"] == {"name": "qwen3", "flavor": "30B-A3B"}
    assert "[model] qwen3 flavor 30B-A3B has this plan's shape" in text
    par = cfg["parallelism"]
    assert par["expert_parallel_degree"] == 8 and par["expert_tensor_parallel_degree"] == 1
    assert par["tensor_parallel_degree"] == 2 and par["pipeline_parallel_degree"] == 4
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (1, 8)
    # etp = 1: ep takes its ranks from dp_shard x cp x tp = 16, 16 / 8 = 2 left for expert data parallelism
    assert "split over 8 of the data_parallel_shard_degree x cp x tp = 16 ranks" in text
    keys = [n.split(":")[0] for n in megatron_not_expressed(text)]
    assert sorted(keys) == ["expert_imbalance=1.0"]
    assert titan_changes(pf) == ["zero 1 -> 2", "pp 4 -> 1 (dp 8 -> 32)"]  # 0.2.2's qwen3 cannot pipeline
    assert any("debug.moe_force_load_balance" in n for n in megatron_not_expressed(text))


def test_torchtitan_deepseek_v3():
    pf = moe_plan_file(DEEPSEEK_V3, **DSV3_PLAN)
    text = titan_writer(pf)
    cfg = toml(text)
    assert cfg["model"] == {"name": "deepseek_v3", "flavor": "671B"}
    par = cfg["parallelism"]
    assert par["expert_parallel_degree"] == 8 and par["expert_tensor_parallel_degree"] == 1
    assert par["data_parallel_shard_degree"] == 32
    parts = par["module_fqns_per_model_part"]
    assert [len([x for x in p if x.startswith("layers.")]) for p in parts] == [16, 15, 15, 15]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    keys = [n.split(":")[0] for n in megatron_not_expressed(text)]
    assert sorted(keys) == ["expert_imbalance=1.0", "mtp_layers=1"]
    assert titan_changes(pf)[0] == "zero 1 -> 2"


@pytest.mark.parametrize("settings, starts", [
    ({"ep": 4, "etp": 2}, None),  # etp = tp: ep 4 over dp_shard x cp = 8, fine
    ({"ep": 1, "etp": 1}, "etp 1 -> 2"),  # at ep = 1 torchtitan splits experts over tp
    ({"ep": 16, "etp": 1, "moe_dispatcher": "allgather"}, "moe_dispatcher allgather -> alltoall"),
])
def test_torchtitan_expert_layouts(settings, starts):
    pf = moe_plan_file(QWEN3_MOE, **(QWEN3_PLAN | settings))
    text = titan_writer(pf)
    par = toml(text)["parallelism"]
    assert par["expert_parallel_degree"] == settings["ep"]
    assert par["expert_tensor_parallel_degree"] == settings["etp"]
    keys = [n.split(":")[0] for n in megatron_not_expressed(text)]
    assert not any(k.startswith(("etp", "ep=")) for k in keys), keys
    changes = [c for c in titan_changes(pf) if c.startswith(("etp", "moe_dispatcher"))]
    assert changes == ([starts] if starts else []), changes


def test_torchtitan_etp_without_tensor_or_expert_parallelism_is_said():
    # Megatron folds etp 2 over the data-parallel ranks; torchtitan splits experts only over tp when ep = 1
    pf = moe_plan_file(QWEN3_MOE, gpus=8, etp=2, micro_batch=1, global_batch=8, seq_len=4096)
    assert "etp 2 -> 1" in titan_changes(pf)


def test_torchtitan_etp_other_than_1_or_tp_is_said():
    plan = {"gpus": 64, "tp": 4, "pp": 2, "ep": 4, "etp": 2, "sequence_parallel": True, "micro_batch": 1,
            "global_batch": 64, "seq_len": 4096}
    pf = moe_plan_file(QWEN3_MOE, **plan)
    assert toml(titan_writer(pf))["parallelism"]["expert_tensor_parallel_degree"] == 2  # as given
    assert "etp 2 -> 1" in titan_changes(pf)  # expert_tensor_parallel_degree is 1 or tp


def test_torchtitan_moe_shape_without_a_flavor():
    odd = with_moe(QWEN3_MOE, n_experts=64, layer_freq=2)
    text = titan(moe_plan_file(odd, gpus=8, ep=8, micro_batch=1, global_batch=8, seq_len=4096))
    cfg = toml(text)
    assert cfg["model"] == {"name": "qwen3", "flavor": "30B-A3B"}
    assert "differs in num_experts 128 (plan 64)" in text
    keys = [n.split(":")[0] for n in megatron_not_expressed(text)]
    assert keys[0].startswith("model shape of qwen3-30b-a3b-like") and "layer_freq=2" in keys


def test_torchtitan_dense_plan_has_no_expert_keys():
    text = titan(moe_plan_file(DENSE, gpus=64, tp=2, pp=4, sequence_parallel=True, zero=1, micro_batch=1,
                                global_batch=512, seq_len=4096))
    cfg = toml(text)
    assert cfg["model"]["name"] == "llama3"
    assert "expert_parallel_degree" not in cfg["parallelism"]
    assert "expert_tensor_parallel_degree" not in cfg["parallelism"]
    assert "expert" not in text


# ---------------------------------------------------------------------------------------------------------
# DeepSpeed
# ---------------------------------------------------------------------------------------------------------
def test_deepspeed_moe_notes_without_config_keys():
    # DeepSpeed's PipelineEngine reduces after the last micro-batch: no overlap_dp_comm (nearest_plan)
    cfg = ds_config(moe_plan_file(DEEPSEEK_V3, **DSV3_PLAN, overlap_dp_comm=False))
    dense = ds_config(moe_plan_file(DENSE, gpus=256, tp=2, pp=4, sequence_parallel=True, zero=1, micro_batch=1,
                                    global_batch=1024, seq_len=4096, overlap_dp_comm=False))
    assert set(cfg) == set(dense)  # no invented MoE keys
    notes = cfg["_perfmodel_not_expressed"]
    (ep,) = [n for n in notes if n.startswith("ep=8:")]
    assert "deepspeed.moe.layer.MoE" in ep and "ep_size=8" in ep and "num_experts=256" in ep and "k=8" in ep
    assert "enable_expert_tensor_parallelism=False" in ep  # etp = 1
    for key in ("router_scoring=sigmoid", "n_shared_experts=1", "first_dense_layers=3, layer_freq=1",
                "expert_imbalance=1.0", "latent attention and multi-token prediction"):
        assert any(n.startswith(key) for n in notes), key
    assert not any(n.startswith("ep=") for n in dense["_perfmodel_not_expressed"])


def test_deepspeed_ep_beyond_data_parallel():
    # ep 16 folds over tp x dp = 2 x 8 ranks: DeepSpeed's expert groups live inside dp = 8
    cfg = ds_config(moe_plan_file(QWEN3_MOE, **(QWEN3_PLAN | {"ep": 16, "overlap_dp_comm": False})))
    assert any(n.startswith("ep=16 with dp=8:") for n in cfg["_perfmodel_not_expressed"])


def test_moe_overlap_exported_where_the_framework_has_it():
    """Megatron-LM: --overlap-moe-expert-parallel-comm (and nothing without moe_overlap); torchtitan and
    DeepSpeed have no such setting and say so in a note."""
    on = moe_plan_file(QWEN3_MOE, **(QWEN3_PLAN | OVERLAP))
    assert flag(megatron_args(export(on, "megatron")), "--overlap-moe-expert-parallel-comm") == ""
    off = export(moe_plan_file(QWEN3_MOE, **QWEN3_PLAN), "megatron")
    assert flag(megatron_args(off), "--overlap-moe-expert-parallel-comm") is None
    for fw in ("torchtitan", "deepspeed"):  # neither has it: the plan is changed, or the setting noted
        assert "moe_overlap" in export_plan(on, fw)


def test_dense_dispatch_is_maxtexts_alone():
    """MaxText's one-hot dispatch (Plan.moe_dense_dispatch) is written as sparse_matmul: false; the frameworks that
    route tokens to grouped GEMMs only move the plan to their grouped path, saying why."""
    from perfmodel.export.deepspeed import nearest_plan as ds_nearest_plan
    from perfmodel.spec.model.catalogue import load_model

    pf = moe_plan_file(load_model("mixtral-8x7b"), "tpu-v6e", gpus=256, tp=1, pp=1, zero=3, micro_batch=1,
                       global_batch=256, seq_len=4096, moe_capacity_factor=1.25, moe_dense_dispatch=True,
                       stack="maxtext")
    text = export(pf, "maxtext")
    assert "sparse_matmul: false" in text.lower() and "capacity_factor: 1.25" in text
    assert "price it with moe_pad_to_capacity" not in text  # dense dispatch pads to capacity by construction
    for nearest, version in ((nearest_plan, "core_r0.16"), (ds_nearest_plan, "0.19.8"), (titan_nearest_plan, "0.3.0")):
        up, why = nearest(pf, version)
        assert up["moe_dense_dispatch"] is False
        assert any(w.startswith("moe_dense_dispatch true -> false: ") and "grouped expert GEMMs" in w for w in why)


def test_the_executor_refuses_dense_dispatch(monkeypatch):
    from perfmodel.execute import run_plans
    from perfmodel.spec.model.catalogue import load_model

    monkeypatch.setattr(run_plans, "check_device", lambda *a: None)
    pf = moe_plan_file(load_model("mixtral-8x7b"), gpus=8, tp=1, pp=1, ep=8, zero=1, micro_batch=1, global_batch=8,
                       seq_len=1024, moe_dense_dispatch=True)
    with pytest.raises(InputError, match="moe_dense_dispatch = true: the torch executor routes tokens"):
        run_plans.check_runnable(pf, "plan.json", 8, 1, "cuda")
