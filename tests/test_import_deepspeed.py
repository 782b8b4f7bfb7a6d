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
from perfmodel.ingest.deepspeed.launch import command_of
from perfmodel.search.plan_writer import plan_file
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan

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
    # offload_optimizer device cpu at ZeRO-3, no super_offload: ZeRO-Offload's host update, the whole state offloaded
    assert plan.overlap_dp_comm is True and plan.optimizer_offload is True
    assert (plan.optimizer_update, plan.optimizer_offload_ratio) == ("host", 1.0)
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
    # a sed template with placeholders where values go: refused in one line naming it as one
    with pytest.raises(InputError, match="a template, not a config: CONFIG_BATCH_SIZE \\(line 2\\)"):
        read_config([FIX / "offload_pp_TEMPLATE.json"], "deepspeed")


def test_launcher_counts_not_read_leave_the_devices_to_gpus(tmp_path):
    """`deepspeed --num_gpus $NGPU` (not read) had refused the import ('not a whole number'); it, and a literal count
    beside one not read, leave the device count to --gpus, which then imports: 8 x 2 nodes = 16 where both are
    literal, 4 where --num_nodes is unstated (one node)."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                              "bf16": {"enabled": True}}))
    for launch, gpus in (("--num_gpus $NGPU", None), ("--num_gpus 8 --num_nodes $NNODES", None),
                         ("--num_gpus 8 --num_nodes 2", 16), ("--num_gpus 4", 4), ("--num_nodes 2", None),
                         ("--num_gpus 8 --hostfile hosts", None)):
        run = script(tmp_path, f"deepspeed {launch} train.py --model_name_or_path meta-llama/Llama-2-7b-hf "
                               "--max_seq_len 2048 --deepspeed ds.json\n")
        imp = read_config([ds, run], "deepspeed")
        assert imp.gpus == gpus, launch
        if gpus is None:
            with pytest.raises(InputError, match="--gpus is needed"):
                plan_of(imp, "dgx-h100")
            assert plan_of(imp, "dgx-h100", 16)[2].global_batch == 2 * 4 * 16
        counts = [k for k in imp.keys if k.key in ("--num_gpus", "--num_nodes")]
        assert all(k.fate == ("mapped" if gpus else "not priced") for k in counts), launch
        assert gpus or all("the device count comes from --gpus" in k.why for k in counts), launch


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
    bad.write_text('{"train_micro_batch_size_per_gpu": 1e400, "bf16": {"enabled": true}}')  # inf: had OverflowError
    run = script(tmp_path, "deepspeed --num_gpus 8 train.py --model_name_or_path meta-llama/Llama-2-7b-hf "
                           "--max_seq_len 2048 --deepspeed ds.json\n")
    assert main(["import", str(bad), str(run), "--from", "deepspeed", "--hardware", "dgx-h100"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train_micro_batch_size_per_gpu = inf is not a whole number >= 1" in err
    files = [str(FIX / "finetune_hf_llama_ds_config.json"), str(FIX / "finetune_hf_llama.sh")]
    assert main(["import", *files, "--from", "deepspeed", "--hardware", "dgx-h100", "--gpus", "8", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "zero_optimization.stage = 0 -> plan.zero = 0" in out and "--lr = 2e-5: not priced" in out


# ---- a launch script alone: the JSON it writes itself, or the config its program builds -------------------------

CORPUS = Path(__file__).parent / "fixtures" / "corpus" / "deepspeed"


def test_script_that_writes_its_json_by_heredoc():
    """Megatron-DeepSpeed's universal_checkpointing/megatron_gpt/run_fp16.sh, passed alone: it writes ds_config.json
    with `cat <<EOT > $CONFIG_JSON` (train_batch_size $GLOBAL_BATCH = 16, micro $((GLOBAL_BATCH/WORLD_SIZE)) = 16 / 8
    = 2, stage $ZERO_STAGE = 1, fp16) and launches `deepspeed --num_gpus $WORLD_SIZE` with WORLD_SIZE = TP 2 x PP 2 x
    DP 2 x SP 1 = 8 through `eval`; DEBUG_MODE=1 picks 4 layers, hidden 512, seq 512; GPT-2's 50257 tokens padded to
    a multiple of --make-vocab-size-divisible-by 256 x tp 2 = 512: 99 x 512 = 50688."""
    run = CORPUS / "megatron-deepspeed" / "uc_gpt_run_fp16.sh"
    imp = read_config([run], "deepspeed")
    model, _, plan = plan_of(imp, "dgx-h100")
    assert imp.gpus == 8
    assert (plan.tp, plan.pp, plan.dp, plan.zero, plan.precision, plan.recompute) == (2, 2, 2, 1, "fp16", "full")
    assert (plan.micro_batch, plan.global_batch, plan.seq_len) == (2, 16, 512)
    assert (model.n_layers, model.hidden, model.n_heads, model.ffn_hidden, model.vocab) == (4, 512, 32, 4 * 512, 50688)
    # the heredoc's 12 leaf keys (counted by hand: the 3 top-level scalars, zero_optimization.stage, bf16.enabled,
    # fp16's 6, wall_clock_breakdown), each read from the JSON the script writes
    written = [k for k in imp.keys if "the JSON it writes to" in k.source]
    assert len(written) == 12
    assert fates(imp)["fp16.loss_scale_window"] == "not priced" and fates(imp)["bf16.enabled"] == "not priced"


def test_heredoc_values_and_the_config_the_launch_names(tmp_path):
    """Variables expand in an unquoted heredoc as the shell expands them at that line; of two JSONs the script
    writes, the one the launch passes is read."""
    run = script(tmp_path, "MB=4\nGB=$((MB * 8))\ncat > other.json <<EOF\n{\"fp16\": {\"enabled\": true}}\nEOF\n"
                           "cat > ds.json <<EOF\n{\"train_batch_size\": $GB, \"train_micro_batch_size_per_gpu\": $MB, "
                           "\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 2}}\nEOF\n"
                           f"deepspeed --num_gpus 8 pretrain_gpt.py {LLAMA2_7B_ARGS} --deepspeed_config ds.json\n")
    _, _, plan = plan_of(read_config([run], "deepspeed"), "dgx-h100")
    assert (plan.micro_batch, plan.global_batch, plan.dp, plan.zero, plan.precision) == (4, 32, 8, 2, "bf16")


def test_megatron_global_batch_replaces_the_jsons():
    """run_deepspeed_example.sh: the JSON says train_batch_size 64, the arguments --global-batch-size 1024;
    Megatron-DeepSpeed sets DeepSpeed's batch from --global-batch-size every step, so 1024 is the step's batch and
    the JSON's 64 only has to pass DeepSpeed's start-up check (64 = 4 x 8 ranks x 2). `deepspeed pretrain_gpt.py`
    states no device count: --gpus."""
    imp = read_config([CORPUS / "megatron-deepspeed" / "run_deepspeed_example.sh"], "deepspeed")
    assert imp.gpus is None
    _, _, plan = plan_of(imp, "dgx-h100", 8)
    assert (plan.micro_batch, plan.global_batch, plan.dp, plan.zero, plan.seq_len) == (4, 1024, 8, 2, 256)
    why = next(k.why for k in imp.keys if k.key == "train_batch_size")
    assert "--global-batch-size" in why and "set_train_batch_size" in why


def test_devices_from_the_three_batch_keys():
    """azure/run-175b.sh launches through a hostfile (not read), but its JSON states all three batch keys:
    32 = micro 4 x accumulation 1 x dp, so dp = 8 and, with tp = pp = 1, 8 devices (DeepSpeed's _batch_assertion)."""
    imp = read_config([CORPUS / "megatron-deepspeed" / "run-175b.sh"], "deepspeed")
    model, _, plan = plan_of(imp, "dgx-h100")
    assert imp.gpus == 8 and (plan.dp, plan.micro_batch, plan.global_batch, plan.zero) == (8, 4, 32, 3)
    assert model.name == "gpt3-175b" and model.vocab == 50304  # GPT-2's 50257 padded to a multiple of 128


def test_deepspeed_chat_builds_its_config_from_flags(tmp_path):
    """DeepSpeed-Chat step1's run_llama2_7b.sh run without arguments (as its README does): ZERO_STAGE falls to 3;
    main.py builds the config: --dtype left to its default fp16, train_batch_size = 4 per device x the world x
    accumulation 1, so 32 on 8 devices and 64 on 16; get_train_ds_config turns overlap_comm on."""
    imp = read_config([CORPUS / "deepspeed-examples" / "chat_step1_run_llama2_7b.sh"], "deepspeed")
    for gpus in (8, 16):
        model, _, plan = plan_of(imp, "dgx-h100", gpus)
        assert (model.name, plan.zero, plan.precision, plan.recompute, plan.seq_len) == ("llama-2-7b", 3, "fp16",
                                                                                         "full", 512)
        assert (plan.micro_batch, plan.global_batch, plan.overlap_dp_comm) == (4, 4 * gpus, True)
    assert fates(imp)["--dtype"] == "default" and fates(imp)["--zero_stage"] == "mapped"
    # a script that leaves the batch out: main.py's --per_device_train_batch_size default 16
    run = script(tmp_path, "deepspeed main.py --model_name_or_path facebook/opt-1.3b --zero_stage 1 --dtype bf16 "
                           "--deepspeed\n")
    _, _, plan = plan_of(read_config([run], "deepspeed"), "dgx-h100", 2)
    assert (plan.micro_batch, plan.global_batch, plan.precision, plan.zero, plan.seq_len) == (16, 32, "bf16", 1, 512)
    assert plan.optimizer_offload is False
    # --offload (get_train_ds_config: offload_optimizer device cpu, gradient_clipping 1.0): ZeRO-Offload's host
    # update at stage 1, whichever comes first of it and --zero_stage; at stage 0 DeepSpeed offloads nothing
    for flags, want in (("--offload --zero_stage 1", (True, "host")), ("--zero_stage 0 --offload", (False, "device"))):
        run = script(tmp_path, f"deepspeed main.py --model_name_or_path facebook/opt-1.3b {flags} --dtype bf16 "
                               "--deepspeed\n", "offload.sh")
        imp = read_config([run], "deepspeed")
        plan = plan_of(imp, "dgx-h100", 2)[2]
        assert (plan.optimizer_offload, plan.optimizer_update) == want
        assert fates(imp)["--offload"] == ("mapped" if want[0] else "not priced")


def test_hf_auto_keys_take_the_scripts_flags_or_the_trainers_defaults(tmp_path):
    """FastChat's deepspeed_config_s2.json leaves micro, accumulation and fp16 to the Trainer ("auto"); with a
    model that has a preset, its train_lora.sh's flags fill them: --per_device_train_batch_size 2, accumulation 1,
    --fp16 True; `deepspeed fastchat/train/train_lora.py` states no device count, so the global batch waits for
    --gpus: 2 x 1 x 8 = 16. Without the batch flag the Trainer's default 8 per device applies; without --fp16 the
    JSON's "auto" is False and DeepSpeed trains in fp32, which is refused naming it."""
    ds = CORPUS / "fastchat" / "deepspeed_config_s2.json"
    text = (CORPUS / "fastchat" / "train_lora.sh").read_text()
    text = text.replace("lmsys/vicuna-7b-v1.5", "meta-llama/Llama-2-7b-hf")
    run = script(tmp_path, text)
    _, _, plan = plan_of(read_config([run, ds], "deepspeed"), "dgx-h100", 8)
    assert (plan.zero, plan.precision, plan.micro_batch, plan.global_batch, plan.seq_len) == (2, "fp16", 2, 16, 2048)
    run = script(tmp_path, text.replace("--per_device_train_batch_size 2", ""), "nobatch.sh")
    imp = read_config([run, ds], "deepspeed")
    _, _, plan = plan_of(imp, "dgx-h100", 4)
    assert (plan.micro_batch, plan.global_batch) == (8, 8 * 1 * 4) and fates(imp)["--per_device_train_batch_size"] \
        == "default"
    run = script(tmp_path, text.replace("--fp16 True", ""), "fp32.sh")
    with pytest.raises(InputError, match="fp16.enabled \"auto\".*default False"):
        read_config([run, ds], "deepspeed")


def test_script_alone_refusals_name_the_way_out(tmp_path):
    """A launch that passes a config the script does not write, or writes only under a branch the script does not
    take run without arguments (SuperOffload's `if [ "$MODE" = "superoffload" ]` on $1), is refused in one line
    naming the JSON to pass beside it; passing it imports."""
    with pytest.raises(InputError, match="PATH_TO_DEEPSPEED_CONFIG, which the script does not write"):
        read_config([CORPUS / "fastchat" / "train_lora.sh"], "deepspeed")
    run = CORPUS / "deepspeed-examples" / "superoffload_finetune_gpt-oss-20b_1gpu.sh"
    with pytest.raises(InputError, match="--script-args is needed: .*written only under an if/case branch.*that JSON beside the script"):
        read_config([run], "deepspeed")
    ds = tmp_path / "gpt-oss-20b_superoffload_config.json"  # the superoffload branch's heredoc, BATCH_SIZE = 4
    ds.write_text(json.dumps({"train_batch_size": 4, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 3, "overlap_comm": False,
                                                    "offload_optimizer": {"device": "cpu", "super_offload": True}}}))
    model, _, plan = plan_of(read_config([run, ds], "deepspeed"), "dgx-h100")
    assert (model.name, plan.gpus, plan.micro_batch, plan.global_batch, plan.zero) == ("gpt-oss-20b", 1, 4, 4, 3)
    assert (plan.seq_len, plan.recompute, plan.overlap_dp_comm) == (8192, "full", False)
    bad = script(tmp_path, "deepspeed main.py --model_name_or_path meta-llama/Llama-2-7b-hf\n", "bare.sh")
    with pytest.raises(InputError, match="passes no DeepSpeed config"):
        read_config([bad], "deepspeed")


def test_no_vocabulary_no_preset_is_named(tmp_path):
    """pretrain_llama2_distributed.sh: a SentencePiece tokenizer by path and a shape no preset has (24 layers,
    hidden 2048): the vocabulary is what the file leaves out."""
    with pytest.raises(InputError, match="does not state the vocabulary.*24 layers, hidden 2048.*--vocab-size N"):
        read_config([CORPUS / "megatron-deepspeed" / "pretrain_llama2_distributed.sh"], "deepspeed")
    # FastChat's LoRA script with a model id no preset has (BLOOM): the id is named, with the presets
    script = tmp_path / "train_lora.sh"
    script.write_text((CORPUS / "fastchat" / "train_lora.sh").read_text().replace("lmsys/vicuna-7b-v1.5",
                                                                                   "bigscience/bloom-560m"))
    with pytest.raises(InputError, match="no preset for bigscience/bloom-560m; valid: .*llama-2-7b"):
        read_config([script, CORPUS / "fastchat" / "deepspeed_config_s2.json"], "deepspeed")


def test_peft_lora_rank_is_the_plans_lora():
    """FastChat's train_lora.sh: --lora_r 8 on lmsys/vicuna-7b-v1.5 (Llama 2 7B fine-tuned, FastChat's README):
    LoRA of rank 8 on the attention projections (train_lora.py's default targets q_proj, v_proj), the base frozen."""
    imp = read_config([CORPUS / "fastchat" / "train_lora.sh", CORPUS / "fastchat" / "deepspeed_config_s2.json"],
                      "deepspeed")
    assert imp.model.name == "llama-2-7b"
    assert imp.plan["lora"] == {"rank": 8, "modules": "attention"}
    assert [k.fate for k in imp.keys if k.key == "--lora_r"] == ["mapped"]


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
    # the optimizer updated on the host (offload_optimizer cpu): SuperOffload over 80% at ZeRO-3 (0.16.9 has none:
    # ZeRO-Offload's update, nearest_plan), ZeRO-Offload at ZeRO-2
    ("llama-3-8b", 8, dict(zero=3, micro_batch=1, global_batch=64, seq_len=4096, recompute="full",
                           optimizer_offload=True, optimizer_update="host_overlapped", optimizer_offload_ratio=0.8)),
    ("llama-3-8b", 8, dict(zero=2, micro_batch=1, global_batch=64, seq_len=4096, optimizer_offload=True,
                           optimizer_update="host")),
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
