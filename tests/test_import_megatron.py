"""`perfmodel import --from megatron`: Megatron-LM's own launch scripts and functional-test YAMLs (verbatim fixtures,
tests/fixtures/configs/SOURCES.md) read as data, every argument accounted for, and the round trip through
`perfmodel export --to megatron` for every version it writes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.export.megatron.script import VERSIONS
from perfmodel.export.nearest import export_plan, nearest
from perfmodel.ingest import plan_of, read_config
from perfmodel.search.plan_writer import plan_file
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, chunk_layers, resolve

FIX = Path(__file__).parent / "fixtures" / "configs" / "megatron"
SCRIPTS = sorted(FIX.glob("*.sh"))
YAMLS = sorted(FIX.glob("*.yaml"))


def argument_count_by_bash(script: Path, tmp: Path) -> int:
    """The `--` words bash itself passes to pretrain_gpt.py and torchrun: the script run with torchrun a shell
    function that prints its arguments (in an empty folder holding a pretrain_gpt.py, so its checks pass)."""
    (tmp / "pretrain_gpt.py").write_text("")
    out = subprocess.run(["bash", "-c", f"torchrun() {{ printf '%s\\n' \"$@\"; }}; mkdir() {{ :; }}; "
                                        f"source {script}"], cwd=tmp, capture_output=True, text=True, timeout=30)
    return sum(w.startswith("--") for w in out.stdout.splitlines())


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_accounts_for_every_argument(script, tmp_path):
    imp = read_config([script], "megatron")
    stated = [k for k in imp.keys if k.fate != "default"]
    if shutil.which("bash"):
        assert len(stated) == argument_count_by_bash(script, tmp_path)
    assert all(k.why for k in imp.not_priced())


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.name)
def test_yaml_accounts_for_every_key(path):
    data = yaml.safe_load(path.read_text())
    count = len(data["MODEL_ARGS"]) + len(data.get("ENV_VARS", {})) + len(set(data) - {"MODEL_ARGS", "ENV_VARS"})
    imp = read_config([path], "megatron")
    assert len([k for k in imp.keys if k.fate != "default"]) == count
    model, _, plan = plan_of(imp, "dgx-h100", 8)  # the harness's 1N8G
    assert (plan.tp, plan.pp, plan.dp, plan.micro_batch, plan.global_batch) == (2, 2, 2, 4, 32)
    assert model.n_layers == int(data["MODEL_ARGS"]["--num-layers"])


def test_gpt3_175b_script_by_hand():
    imp = read_config([FIX / "train_gpt3_175b_distributed.sh"], "megatron")
    p = imp.plan
    assert (p["tp"], p["pp"], p["global_batch"], p["micro_batch"], p["precision"]) == (8, 16, 1536, 1, "fp16")
    # the GPT-2 BPE vocabulary (50257) padded to a multiple of 128 x tp 8 = 1024: 50 x 1024 = 51200
    assert imp.model.name == "gpt3-175b" and imp.model.vocab == 51200
    assert (imp.model.hidden, imp.model.n_layers, imp.model.ffn_hidden, imp.model.dropout) == (12288, 96, 4 * 12288,
                                                                                               0.1)
    # --nproc_per_node 8 x --nnodes 1 cannot hold tp 8 x pp 16 (parallel_state.py:822): the script's one-node
    # default of a multi-node job, so the device count is --gpus's
    assert imp.gpus is None and "8 devices cannot run tp x pp x cp = 128" in next(
        k.why for k in imp.keys if k.key == "--nproc_per_node")
    with pytest.raises(InputError, match="--gpus is needed"):
        plan_of(imp, "dgx-h100")
    assert plan_of(imp, "dgx-h100", 128)[2].dp == 1
    assert "not priced" in next(k for k in imp.keys if k.key == "--lr").line()


def test_llama3_fp8_script_by_hand():
    imp = read_config([FIX / "train_llama3_8b_h100_fp8.sh"], "megatron")
    model, _, plan = plan_of(imp, "dgx-h100")
    assert model.name == "llama-3-8b"  # --vocab-size 128256 of the MOCK branch, 128256 = 1002 x 128: no padding
    assert (plan.gpus, plan.dp, plan.precision, plan.zero, plan.grad_dtype, plan.overlap_dp_comm) == (
        8, 8, "fp8", 1, "bf16", True)


def test_mla_moe_mtp_yaml_by_hand():
    imp = read_config([FIX / "gpt3_mcore_te_tp2_pp2_ep4_etp1_mtp_resume_torch_dist_fp8.yaml"], "megatron")
    m = imp.model
    assert (m.moe.n_experts, m.moe.top_k, m.moe.first_dense_layers, m.moe.layer_freq) == (32, 4, 1, 1)
    assert (m.moe.shared_ffn_hidden, m.moe.router_scoring, m.mtp_layers) == (1024, "sigmoid", 1)
    assert (m.mla.q_lora_rank, m.mla.kv_lora_rank, m.head_dim) == (1536, 512, 128 + 64)
    p = imp.plan
    assert (p["vpp"], p["ep"], p["etp"], p["precision"], p["fp8_recipe"], p["zero"]) == (4, 4, 1, "fp8", "tensorwise",
                                                                                        1)


SMALL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
         "--global-batch-size 8 --vocab-size 1024 --bf16 ")


def args_file(tmp_path: Path, extra: str, launcher: str = ""):
    """A small model's arguments and `extra`, read as an argument list (or, with `launcher`, a launch script)."""
    f = tmp_path / ("train.sh" if launcher else "args.txt")
    f.write_text(f"{launcher} pretrain_gpt.py {SMALL}{extra}\n" if launcher else SMALL + extra + "\n")
    return read_config([f], "megatron")


def test_launcher_counts_give_the_devices_only_where_both_are_read(tmp_path):
    """torchrun --nproc_per_node 8 --nnodes 2: 16 devices; --nnodes unstated: one node (torchrun's default, 8);
    --nnodes $SLURM_NNODES (not read) or 1:4 (elastic) had read as 8 devices: the count is --gpus's."""
    for launch, gpus in (("torchrun --nproc_per_node 8 --nnodes 2", 16), ("torchrun --nproc-per-node=8", 8),
                         ("torchrun --nproc_per_node 8 --nnodes $SLURM_NNODES", None),
                         ("torchrun --nproc_per_node 8 --nnodes 1:4", None),
                         ("torchrun --nproc_per_node $GPUS --nnodes 2", None)):
        imp = args_file(tmp_path, "", launch)
        assert imp.gpus == gpus, launch
        fates = {k.key: k for k in imp.keys if k.key.startswith(("--nproc", "--nnodes"))}
        assert all(k.fate == ("mapped" if gpus else "not priced") for k in fates.values()), launch
    assert imp.set_by == {k: v for k, v in imp.set_by.items() if not k.startswith("launch")}
    imp = args_file(tmp_path, "", "torchrun --nproc_per_node 8 --nnodes 2")
    assert imp.set_by["launch.gpus"] == "--nproc_per_node = 8 x --nnodes = 2"


def test_main_grads_dtype_takes_effect_with_bf16_alone(tmp_path):
    """arguments.py:1204-1217 at d98e8a64: with --bf16, --main-grads-dtype (default fp32) decides whether gradients
    accumulate and reduce in fp32 -- no --use-precision-aware-optimizer needed; --grad-reduce-in-bf16 overrides it,
    and bf16 beside --accumulate-allreduce-grads-in-fp32 is Megatron's assertion, refused naming both."""
    def imported(extra: str):
        return args_file(tmp_path, extra)

    for dtype in ("bf16", "fp32"):
        imp = imported(f"--main-grads-dtype {dtype}")
        assert imp.plan["grad_dtype"] == dtype
    imp = imported("--main-grads-dtype fp32 --grad-reduce-in-bf16")
    assert imp.plan["grad_dtype"] == "bf16"
    assert next(k for k in imp.keys if k.key == "--main-grads-dtype").fate == "not priced"
    with pytest.raises(InputError, match="--accumulate-allreduce-grads-in-fp32.*--main-grads-dtype = bf16"):
        imported("--accumulate-allreduce-grads-in-fp32 --main-grads-dtype bf16")


def test_cuda_graph_scopes(tmp_path):
    """Per-layer graphs (--cuda-graph-impl local / transformer_engine, --enable-cuda-graph) are priced eager, named
    with the reason (no stack profile counts their replays); --cuda-graph-scope full_iteration graphs the step."""
    def imported(extra: str):
        return args_file(tmp_path, extra)

    for extra, key in (("--cuda-graph-impl transformer_engine", "--cuda-graph-impl"),
                       ("--cuda-graph-impl local", "--cuda-graph-impl"), ("--enable-cuda-graph", "--enable-cuda-graph")):
        imp = imported(extra)
        assert "cuda_graphs" not in imp.plan
        fate = next(k for k in imp.keys if k.key == key)
        assert fate.fate == "not priced" and "priced eager" in fate.why
    imp = imported("--cuda-graph-impl local --cuda-graph-scope full_iteration")
    assert imp.plan["cuda_graphs"] == "step"


def test_pipeline_layout_shorthand_and_uneven_chunks(tmp_path):
    """DeepSeek-V3's layout as Megatron-Bridge's recipes write it, 'Et|(tt|)*30mL' over pp 16: 32 chunks, vpp 2;
    chunk c runs on stage c % 16, so stage 0 holds 'Et' and 'tt' (3 layers), stages 1-14 'tt' twice (4), stage 15
    'tt' and 'mL' (2): 3 + 14 x 4 + 2 = 61. Stage 0's [1, 2] and stage 15's [2, 0] are priced as the even split of
    their layers ([2, 1], [1, 1]) and the ledger says so."""
    f = tmp_path / "args.txt"
    f.write_text("--num-layers 61 --hidden-size 1024 --num-attention-heads 8 --seq-length 128 --micro-batch-size 1 "
                 "--global-batch-size 64 --vocab-size 1024 --bf16 --pipeline-model-parallel-size 16 "
                 "--pipeline-model-parallel-layout 'Et|(tt|)*30mL'\n")
    imp = read_config([f], "megatron")
    assert imp.plan["stage_layers"] == [3] + [4] * 14 + [2] and imp.plan["vpp"] == 2
    why = next(k.why for k in imp.keys if k.key == "--pipeline-model-parallel-layout")
    assert "stage 0 [1, 2] priced as [2, 1]" in why and "15 [2, 0] priced as [1, 1]" in why


def test_refusals(tmp_path):
    both = tmp_path / "args.txt"
    both.write_text("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
                    "--global-batch-size 8 --vocab-size 1000 --bf16 --fp16\n")
    with pytest.raises(InputError, match="--bf16 and --fp16"):
        read_config([both], "megatron")
    twice = tmp_path / "twice.txt"
    twice.write_text("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
                     "--vocab-size 1000 --bf16 --num-layers-per-virtual-pipeline-stage 1 "
                     "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2\n")
    with pytest.raises(InputError, match="--num-layers-per-virtual-pipeline-stage = 1.*--num-virtual-stages"):
        read_config([twice], "megatron")  # 2 layers over 2 stages of 1-layer chunks is vpp 1, not 2
    hf = tmp_path / "hf.txt"
    hf.write_text("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
                  "--bf16 --tokenizer-type HuggingFaceTokenizer --tokenizer-model /models/my-tokenizer\n")
    with pytest.raises(InputError, match="--vocab-size is needed"):  # a local folder: its size is not known
        read_config([hf], "megatron")
    with pytest.raises(InputError, match="--name"):
        read_config([hf], "megatron", "x")
    schedule = tmp_path / "schedule.txt"
    schedule.write_text("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --bf16 "
                        "--micro-batch-size 1 --vocab-size 1000 --global-batch-size 8 --step-batch-size-schedule "
                        "'0:8 1B:16'\n")
    imp = read_config([schedule], "megatron")  # beside --global-batch-size the schedule is named, not priced
    assert imp.plan["global_batch"] == 8 and "Megatron-LM refuses the pair" in next(
        k.why for k in imp.keys if k.key == "--step-batch-size-schedule")
    schedule.write_text(schedule.read_text().replace("--global-batch-size 8 ", ""))
    assert read_config([schedule], "megatron").plan["global_batch"] == 16  # alone: its last phase


def test_cli_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.sh"
    bad.write_text('torchrun pretrain_gpt.py --num-layers "32\n')
    assert main(["import", str(bad), "--from", "megatron", "--hardware", "dgx-h100", "--gpus", "8"]) == 2
    assert "not shell" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["import", str(bad), "--from", "megatronlm"])
    assert exit_.value.code == 2


def test_cli_explain(capsys):
    path = FIX / "gpt3_mcore_te_tp2_pp2.yaml"
    assert main(["import", str(path), "--from", "megatron", "--hardware", "dgx-h100", "--gpus", "8", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "--tensor-model-parallel-size = 2 -> plan.tp = 2" in out and "--lr = 0.00015: not priced" in out


# ---- the round trip: search-style plans -> export --to megatron (each version) -> import ----------------------

def _plans():
    h = load_hardware("dgx-h100")
    dense, moe = load_model("llama-3-8b"), load_model("qwen3-30b-a3b")
    common = dict(micro_batch=1, seq_len=4096, stack="megatron-core")
    return [
        (dense, h, Plan(gpus=16, tp=2, pp=2, vpp=2, global_batch=64, recompute="selective", zero=1,
                        sequence_parallel=True, **common)),
        (dense, h, Plan(gpus=16, tp=2, cp=2, global_batch=32, recompute="full", recompute_method="block",
                        recompute_num_layers=2, precision="fp8", zero=0, **common)),
        (dense, h, Plan(gpus=32, tp=2, pp=4, stage_layers=[7, 9, 9, 7], global_batch=64, zero=1,
                        overlap_dp_comm=False, **common)),
        (dense, h, Plan(gpus=8, tp=1, global_batch=32, zero=3, **common)),
        (moe, h, Plan(gpus=16, tp=2, pp=2, ep=4, etp=1, global_batch=64, zero=1, sequence_parallel=True,
                      moe_dispatcher="alltoall", recompute="selective", recompute_modules=["core_attn", "moe_act"],
                      **common)),
    ]


@pytest.fixture(scope="module")
def plan_files():
    return [plan_file(m, h, resolve(p, m, h), created_by="test") for m, h, p in _plans()]


SHAPE = ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden", "vocab", "mlp", "norm", "position",
         "tie_embeddings", "linear_bias", "dropout", "mla", "mtp_layers")


@pytest.mark.parametrize("version", list(VERSIONS))
def test_round_trip(plan_files, version, tmp_path):
    for i, pf in enumerate(plan_files):
        runs, _ = nearest(pf, "megatron", version)
        script = tmp_path / f"plan{i}.sh"
        script.write_text(export_plan(pf, "megatron", version))
        # the export leaves the tokenizer to the arguments after its name ("$@"): --vocab-size stands for it
        tokenizer = tmp_path / f"tokenizer{i}.txt"
        tokenizer.write_text(f"--vocab-size {pf.model.vocab}\n")
        model, _, plan = plan_of(read_config([script, tokenizer], "megatron"), pf.hardware)
        for field in SHAPE:
            assert getattr(model, field) == getattr(runs.model, field), (version, i, field)
        if runs.model.moe is not None:  # Megatron takes the shared experts as one width, not a count
            assert model.moe.model_dump(exclude={"n_shared_experts"}) == runs.model.moe.model_dump(
                exclude={"n_shared_experts"})
        want = runs.plan.model_dump()
        got = plan.model_dump()
        # the pipeline split compared as the layers of every chunk: Megatron writes stage_layers [7, 9, 9, 7] as
        # --decoder-first/last-pipeline-num-layers 7, which imports as first/last_stage_layers
        assert chunk_layers(plan, model.n_layers) == chunk_layers(runs.plan, model.n_layers), (version, i)
        split = {"stage_layers", "first_stage_layers", "last_stage_layers"}
        # not carried: expert_imbalance (no Megatron-LM setting but force-balancing, which the export leaves out)
        for field in set(want) - {"expert_imbalance"} - split:
            assert got[field] == want[field], (version, i, field, got[field], want[field])
