"""perfmodel import --from deepspeed: DeepSpeed config JSONs (verbatim fixtures from DeepSpeedExamples,
Megatron-DeepSpeed and transformers; tests/fixtures/configs/SOURCES.md) with their launch scripts, every key
accounted for, the batch rule, and the round trip of perfmodel's own DeepSpeed export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.export.deepspeed import VERSIONS
from perfmodel.export.nearest import export_plan, nearest
from perfmodel.ingest import plan_of, read_config
from perfmodel.ingest.deepspeed_launch import command_of
from perfmodel.search.plan_writer import plan_file
from perfmodel.spec.hardware import load_hardware
from perfmodel.spec.model_catalogue import load_model
from perfmodel.spec.plan import Plan

FIX = Path(__file__).parent / "fixtures" / "configs" / "deepspeed"
LLAMA2_7B_ARGS = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 11008 --num-attention-heads 32 --swiglu "
                  "--normalization rmsnorm --use-rotary-position-embeddings --untie-embeddings-and-output-weights "
                  "--disable-bias-linear --attention-dropout 0 --hidden-dropout 0 --seq-length 2048 "
                  "--max-position-embeddings 4096")


def count_leaves(obj) -> int:
    """Leaf keys of a JSON object, counted independently of the reader: a value that is not a non-empty object."""
    return sum(count_leaves(v) if isinstance(v, dict) and v else 1 for v in obj.values())


def fates(imp) -> dict[str, str]:
    return {k.key: k.fate for k in imp.keys}


def script(tmp_path: Path, text: str, name: str = "run.sh") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_megatron_deepspeed_finetune_llama():
    """examples_deepspeed/finetune_hf_llama: Llama-2-7B's shape, TP=2 PP=2, ZeRO 0, bf16, batch 16 / 256, on 8
    devices (the script's `deepspeed` launcher takes every local GPU: --gpus)."""
    files = [FIX / "finetune_hf_llama_ds_config.json", FIX / "finetune_hf_llama.sh"]
    imp = read_config(files, "deepspeed")
    model, _, plan = plan_of(imp, "dgx-h100", 8)
    assert (model.name, model.n_layers, model.hidden, model.ffn_hidden, model.n_heads, model.vocab) == (
        "llama-2-7b", 32, 4096, 11008, 32, 32000)
    assert (model.mlp, model.norm, model.position, model.tie_embeddings, model.max_seq_len) == (
        "swiglu", "rmsnorm", "rope", False, 512)
    assert (plan.tp, plan.pp, plan.dp, plan.zero, plan.precision) == (2, 2, 8 // 4, 0, "bf16")
    assert (plan.micro_batch, plan.global_batch, plan.seq_len, plan.num_microbatches) == (16, 256, 512, 256 // (2 * 16))
    assert plan.overlap_dp_comm is False and plan.stack == "deepspeed"
    # every leaf key of the JSON and every argument of the command is accounted for, once
    cfg = json.loads(files[0].read_text())
    launcher, program = command_of(files[1], files[0])
    args = sum(w.startswith("--") for w in launcher + program)
    stated = [k for k in imp.keys if k.fate != "default"]
    assert len(stated) == count_leaves(cfg) + args == 5 + 47
    assert fates(imp)["steps_per_print"] == "not priced" and fates(imp)["--lr"] == "not priced"
    assert next(k for k in imp.keys if k.key == "vocab").fate == "default"  # HFTokenizer: the preset's 32000


def test_hf_zero3_offload_auto(tmp_path):
    """transformers' ds_config_zero3.json: ZeRO-3 with CPU offload of optimizer and parameters, every batch and
    precision key "auto", filled from a Hugging Face script's arguments."""
    ds = FIX / "hf_zero3_offload_auto.json"
    run = script(tmp_path, "deepspeed --num_gpus 4 run_clm.py --model_name_or_path meta-llama/Llama-2-7b-hf "
                           "--per_device_train_batch_size 2 --gradient_accumulation_steps 8 --fp16 True "
                           "--block_size 2048 --output_dir out --deepspeed hf_zero3_offload_auto.json\n")
    imp = read_config([ds, run], "deepspeed")
    model, _, plan = plan_of(imp, "dgx-h100")
    assert model.name == "llama-2-7b" and imp.gpus == 4
    assert (plan.zero, plan.precision, plan.micro_batch, plan.global_batch, plan.seq_len) == (3, "fp16", 2, 2 * 8 * 4,
                                                                                               2048)
    assert plan.overlap_dp_comm is True and plan.optimizer_offload is False
    why = {k.key: k.why for k in imp.keys}
    assert "DeepSpeedCPUAdam" in why["zero_optimization.offload_optimizer.device"]
    assert "parameter offload" in why["zero_optimization.offload_param.device"]
    assert "auto" in why["train_batch_size"] and "auto" in why["fp16.enabled"]
    assert fates(imp)["--per_device_train_batch_size"] == "mapped"
    cfg = json.loads(ds.read_text())
    assert len([k for k in imp.keys if k.fate != "default"]) == count_leaves(cfg) + 8


def test_bf16_master_weights_zero3(tmp_path):
    """DeepSpeedExamples bf16_master_weight/bf16_full.json: ZeRO-3 with bf16 master weights, gradients and Adam
    moments (no fp32 copy)."""
    run = script(tmp_path, "deepspeed --num_gpus 8 train.py --model_name meta-llama/Llama-2-7b-hf --seq_length 512 "
                           "--deepspeed_config bf16_master_zero3.json\n")
    imp = read_config([FIX / "bf16_master_zero3.json", run], "deepspeed")
    _, _, plan = plan_of(imp, "dgx-h100")
    assert (plan.zero, plan.precision, plan.grad_dtype, plan.micro_batch, plan.global_batch) == (3, "bf16", "bf16", 4,
                                                                                                 4 * 1 * 8)
    if "weight_dtype" in Plan.model_fields:
        assert (plan.weight_dtype, plan.moment_dtype) == ("bf16", "bf16")
    assert plan.overlap_dp_comm is True


@pytest.mark.parametrize("fixture,zero,precision,micro", [
    ("universal_checkpointing_bf16_zero1.json", 1, "bf16", 16),  # train 16 = micro 16 x 1 x dp 1
    ("curriculum_fp16_zero1.json", 1, "fp16", 512 // 2),  # train 512, accumulation 1, dp = 4 / (tp 2) = 2
])
def test_zero1_configs_with_a_megatron_script(tmp_path, fixture, zero, precision, micro):
    gpus = 4 if fixture.startswith("curriculum") else 2
    run = script(tmp_path, f"deepspeed --num_nodes 1 --num_gpus {gpus} pretrain_gpt.py --tensor-model-parallel-size 2 "
                           f"{LLAMA2_7B_ARGS} --{precision} --deepspeed --deepspeed_config {fixture}\n")
    imp = read_config([FIX / fixture, run], "deepspeed")
    _, _, plan = plan_of(imp, "dgx-h100")
    assert (plan.zero, plan.precision, plan.micro_batch, plan.tp, plan.gpus) == (zero, precision, micro, 2, gpus)
    assert plan.overlap_dp_comm is False  # DeepSpeed's default at stages 1-2


def test_megatron_deepspeed_defaults_its_script_leaves(tmp_path):
    """--swiglu without --ffn-hidden-size takes Megatron-DeepSpeed's default int(4 h 2/3 / 64) x 64
    (megatron/arguments.py:288-294 at 4efb479d): 4 x 2048 x 2/3 = 5461.3 -> 85 x 64 = 5440; and two dropout
    probabilities (attention 0, hidden 0.1, both Megatron arguments) are not a contradiction: the model's one
    dropout is --hidden-dropout's."""
    args = (LLAMA2_7B_ARGS.replace("--hidden-size 4096 --ffn-hidden-size 11008", "--hidden-size 2048")
            .replace("--hidden-dropout 0", "--hidden-dropout 0.1") + " --vocab-size 32000")
    run = script(tmp_path, f"deepspeed --num_gpus 2 pretrain_gpt.py --tensor-model-parallel-size 2 {args} --bf16 "
                           "--deepspeed_config "
                           "universal_checkpointing_bf16_zero1.json\n")
    imp = read_config([FIX / "universal_checkpointing_bf16_zero1.json", run], "deepspeed")
    model, _, _ = plan_of(imp, "dgx-h100")
    assert (model.hidden, model.ffn_hidden, model.dropout) == (2048, 5440, 0.1)
    assert fates(imp)["--attention-dropout"] == "not priced" and fates(imp)["--ffn-hidden-size"] == "default"


def test_refusals_name_why(tmp_path):
    with pytest.raises(InputError, match="does not define the model.*launch script"):
        read_config([FIX / "bf16_master_zero3.json"], "deepspeed")
    # facebook/opt-125m is a preset (opt-125m); the script states no sequence length
    with pytest.raises(InputError, match="plan.seq_len: neither the DeepSpeed config nor the launch script"):
        read_config([FIX / "autotp_hf_auto.json", FIX / "autotp_hf_run.sh"], "deepspeed")
    with pytest.raises(InputError, match="seq_len"):  # the ZenFlow script names Llama-2-7B but no sequence length
        read_config([FIX / "zenflow_zero2_offload.json", FIX / "zenflow_finetune_llama.sh"], "deepspeed")
    with pytest.raises(InputError, match="malformed JSON at line 2"):  # a sed template, not JSON
        read_config([FIX / "offload_pp_TEMPLATE.json"], "deepspeed")


def test_batch_contradiction_names_all_three(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 16,
                              "gradient_accumulation_steps": 4, "bf16": {"enabled": True}}))
    run = script(tmp_path, f"deepspeed --num_gpus 8 pretrain_gpt.py --tensor-model-parallel-size 2 {LLAMA2_7B_ARGS} "
                           "--deepspeed_config ds.json\n")
    _, _, plan = plan_of(read_config([ds, run], "deepspeed"), "dgx-h100")  # 16 x 4 x 8 / 2 = 256: agrees
    assert (plan.dp, plan.num_microbatches) == (4, 4)
    ds.write_text(json.dumps({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 16,
                              "gradient_accumulation_steps": 2, "bf16": {"enabled": True}}))
    with pytest.raises(InputError) as err:
        read_config([ds, run], "deepspeed")
    msg = str(err.value)
    assert "\n" not in msg and "16 x 2 x 4 = 128" in msg
    assert all(k in msg for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"))
    # with no launch script the device count is --gpus: the three keys imply dp = 256 / (16 x 2) = 8 ranks
    ds.write_text(json.dumps({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 16,
                              "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
                              "_perfmodel_plan": "llama-2-7b on dgx-h100 (8 x H100-SXM5-80GB), tp=1 pp=1 dp=8 cp=1, "
                                                 "micro_batch=16 global_batch=256 seq_len=2048"}))
    with pytest.raises(InputError, match=r"dp = 1\*1\*1\*8 = 8 != gpus = 16.*from the config's _perfmodel_plan"):
        plan_of(read_config([ds], "deepspeed"), "dgx-h100", 16)


def test_cli_bad_json_and_explain(tmp_path, capsys):
    bad = tmp_path / "ds.json"
    bad.write_text("{\"train_batch_size\": 8,")
    assert main(["import", str(bad), "--from", "deepspeed", "--hardware", "dgx-h100", "--gpus", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "malformed JSON" in err and len(err.splitlines()) == 1 and "Traceback" not in err
    files = [str(FIX / "finetune_hf_llama_ds_config.json"), str(FIX / "finetune_hf_llama.sh")]
    assert main(["import", *files, "--from", "deepspeed", "--hardware", "dgx-h100", "--gpus", "8", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "zero_optimization.stage = 0 -> plan.zero = 0" in out and "--lr = 2e-5: not priced" in out


# ---- the round trip of perfmodel's own export -----------------------------------------------------------------

# Fields a DeepSpeed export does not carry: the PaSE placements' layer split (stage_layers; DeepSpeed's
# PipelineModule partitions by its own method) and what the import cannot know of a plan beyond its notes.
NOT_CARRIED = {"stage_layers"}
PLANS = [  # (model, gpus, plan fields): ZeRO 0-3, a pipeline, AutoTP, fp8, bf16 gradients, recompute kinds
    ("llama-2-7b", 8, dict(zero=3, micro_batch=1, global_batch=64, seq_len=4096, recompute="full")),
    ("llama-2-7b", 16, dict(tp=2, pp=2, zero=1, micro_batch=1, global_batch=64, seq_len=4096,
                            sequence_parallel=True)),
    ("llama-3-8b", 8, dict(tp=2, zero=2, micro_batch=2, global_batch=64, seq_len=8192, precision="fp8",
                           grad_dtype="bf16", recompute="selective")),
    ("gpt3-1.3b", 8, dict(zero=0, micro_batch=4, global_batch=64, seq_len=2048, grad_dtype="fp32")),
    ("llama-2-13b", 16, dict(tp=4, zero=1, micro_batch=1, global_batch=32, seq_len=4096, recompute="full",
                             recompute_method="block", recompute_num_layers=2, grad_compression="bf16")),
]
if "weight_dtype" in Plan.model_fields:  # bf16 master and moments (DeepSpeed 0.19.8's bf16_master_weights_and_grads)
    PLANS.append(("llama-2-7b", 8, dict(zero=1, micro_batch=1, global_batch=64, seq_len=4096, grad_dtype="bf16",
                                        weight_dtype="bf16", moment_dtype="bf16")))


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("case", range(len(PLANS)))
def test_round_trip(tmp_path, case, version):
    name, gpus, fields = PLANS[case]
    model, system = load_model(name), load_hardware("dgx-h100")
    pf = plan_file(model, system, Plan(gpus=gpus, stack="deepspeed", **fields))
    runs, _ = nearest(pf, "deepspeed", version)  # the plan this version expresses
    path = tmp_path / "ds.json"
    path.write_text(export_plan(pf, "deepspeed", version))
    got_model, _, got = plan_of(read_config([path], "deepspeed"))  # hardware and gpus from the export's own keys
    assert got_model == runs.model
    want = runs.plan.model_dump()
    for field, value in got.model_dump().items():
        if field not in NOT_CARRIED:
            assert value == want[field], f"{field}: imported {value!r}, exported {want[field]!r}"
