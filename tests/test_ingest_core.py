"""The framework-neutral parts of `perfmodel import`: the ledger's account of keys, the readers of shell and Python
configs as data, and what a config leaves to its launcher (perfmodel.ingest)."""

from __future__ import annotations

import ast

import pytest

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.ingest import launch_notes, launch_of, plan_of, read_config
from perfmodel.ingest.ledger import Ledger
from perfmodel.ingest.reading import NotRead
from perfmodel.ingest.shell.script import Script
from perfmodel.ingest.sources import literal, options
from perfmodel.spec.model.catalogue import load_model


def test_a_field_set_twice_differently_names_both_keys():
    led = Ledger("megatron")
    led.set("--bf16", True, "run.sh", plan__precision="bf16")
    led.set("--bf16", True, "run.sh", plan__precision="bf16")  # the same value again: fine, recorded twice
    with pytest.raises(InputError) as err:
        led.set("--fp16", True, "run.sh", plan__precision="fp16")
    msg = str(err.value)
    assert "--bf16 = true" in msg and "--fp16 = true" in msg and "plan.precision" in msg
    assert [k.fate for k in led.keys] == ["mapped", "mapped"]


def test_defaults_never_override_what_a_key_set_and_are_marked():
    led = Ledger("torchtitan")
    led.set("parallelism.tensor_parallel_degree", 2, "a.toml", plan__tp=2)
    led.default("parallelism.tensor_parallel_degree", 1, plan__tp=1)  # stated: the default does not apply
    led.default("parallelism.context_parallel_degree", 1, plan__cp=1)
    led.skip("optimizer.lr", 3e-4, "a.toml", "a learning rate changes neither step time nor memory")
    assert led.group("plan") == {"tp": 2, "cp": 1}
    fates = [(k.key, k.fate) for k in led.keys]
    assert fates == [("parallelism.tensor_parallel_degree", "mapped"), ("parallelism.context_parallel_degree",
                                                                          "default"), ("optimizer.lr", "not priced")]
    imp = led.imported(["a.toml"], load_model("llama-3-8b"))
    assert imp.plan == {"tp": 2, "cp": 1} and len(imp.not_priced()) == 1
    assert imp.keys[2].line() == ("optimizer.lr = 0.0003: not priced: a learning rate changes neither step time nor "
                                  "memory")


def test_shell_script_joins_continuations_expands_variables_and_arrays():
    script = """#!/bin/bash
GPUS_PER_NODE=8
NNODES=${NNODES:-4}
TP=2  # a comment
MODEL_ARGS=(
    --num-layers 32  # a comment inside the array does not end it
    --hidden-size 4096
)
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES pretrain_gpt.py \\
    ${MODEL_ARGS[@]} \\
    --tensor-model-parallel-size ${TP} --bf16
"""
    read = Script(script, "run.sh")
    commands, env = read.commands, read.scalars()
    assert env["NNODES"] == "4" and env["TP"] == "2" and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert commands == [["torchrun", "--nproc_per_node", "8", "--nnodes", "4", "pretrain_gpt.py", "--num-layers", "32",
                         "--hidden-size", "4096", "--tensor-model-parallel-size", "2", "--bf16"]]
    assert options(commands[0]) == [("--nproc_per_node", "8"), ("--nnodes", "4"), ("--num-layers", "32"),
                                    ("--hidden-size", "4096"), ("--tensor-model-parallel-size", "2"), ("--bf16", None)]


def test_unbalanced_quotes_are_one_line():
    with pytest.raises(InputError, match="run.sh: line .* is not shell"):
        Script("torchrun --x 'open\n", "run.sh")


def test_a_test_the_script_cannot_know_runs_no_branch_unless_every_branch_is_asked_for():
    script = """if [ -f "$CONFIG" ]; then
    CMD="deepspeed --num_gpus=8 train.py"
else
    CMD="echo missing"
fi
eval $CMD
"""
    assert Script(script, "run.sh").commands == [["echo", "missing"]]  # unknown test: the else branch; eval runs it
    assert Script(script, "run.sh", every_branch=True).commands == [["echo", "missing"]]  # the last write
    known = 'MODE=zero2\nif [ "$MODE" == "zero1" ]; then\n  Z=1\nelif [ "$MODE" == "zero2" ]; then\n  Z=2\nfi\n'
    assert Script(known, "run.sh").vars["Z"] == "2"


def test_python_is_read_as_data_never_run():
    tree = ast.parse("SEQ = 8192\nf(seq_len=SEQ, gbs=2 * 64, lr=-3e-4, mesh=[1, 2], name=os.environ['X'], "
                     "big=10 ** 9 ** 9)")
    call = tree.body[1].value
    names = {"SEQ": 8192}
    got = {kw.arg: literal(kw.value, names) for kw in call.keywords}
    assert got["seq_len"] == 8192 and got["gbs"] == 128 and got["lr"] == -3e-4 and got["mesh"] == [1, 2]
    assert got["name"] == NotRead("os.environ['X']")
    assert isinstance(got["big"], NotRead)  # never computed: a config cannot make the reader hang


def test_both_readers_name_what_they_do_not_read_with_one_marker():
    """perfmodel.ingest.reading: a value not read is its source text and why, whichever reader met it."""
    read = Script("N=$(nvidia-smi -L | wc -l)\ntorchrun --nproc_per_node $N x.py\n", "run.sh")
    shell = read.unread.of("$(nvidia-smi -L | wc -l)")
    python = literal(ast.parse("os.environ['X']").body[0].value)
    assert (type(shell), str(shell), shell.named) == (NotRead, "$(nvidia-smi -L | wc -l)",
                                                       "$(nvidia-smi -L | wc -l): command output")
    assert read.not_read(read.commands[0][2]) == shell.named
    assert (type(python), str(python), python.named) == (NotRead, "os.environ['X']",
                                                         "os.environ['X']: computed by the module: not a literal")


def _imported(**launch):
    led = Ledger("megatron")
    led.set("--tensor-model-parallel-size", "3", "run.sh", plan__tp=3)
    for k, v in {"micro_batch": 1, "global_batch": 8, "seq_len": 1024}.items():
        led.set(f"--{k}", v, "run.sh", **{f"plan__{k}": v})
    for k, v in launch.items():
        led.set(f"--{k}", v, "run.sh", **{f"launch__{k}": v})
    return led.imported(["run.sh"], load_model("llama-3-8b"))


def test_what_the_launcher_leaves_is_asked_for_by_flag():
    with pytest.raises(InputError, match="--hardware is needed"):
        launch_of(_imported(), None, 8)
    with pytest.raises(InputError, match="--gpus is needed"):
        launch_of(_imported(), "dgx-h100", None)
    # a flag asks about the same config at another size (or on another cluster): it wins, and says what it replaced
    assert launch_of(_imported(gpus=8), "dgx-h100", 16) == ("dgx-h100", 16)
    assert launch_notes(_imported(gpus=8), "dgx-h100", 16) == ["--gpus 16 replaces the config's launch of 8 devices "
                                                               "(--gpus = 8)"]
    assert launch_of(_imported(gpus=8), "dgx-h100", None) == ("dgx-h100", 8)
    assert launch_notes(_imported(gpus=8), "dgx-h100", None) == []


def test_a_plan_refusal_names_the_config_key_that_set_the_field():
    with pytest.raises(InputError) as err:
        plan_of(_imported(), "dgx-h100", 24)
    msg = str(err.value)
    assert msg.startswith("megatron config: ") and "tp" in msg
    assert "--tensor-model-parallel-size = 3" in msg


def test_unknown_framework_and_missing_file_are_one_line(capsys, tmp_path):
    with pytest.raises(InputError, match="--from = 'nemo' is not a known framework; valid: megatron, bridge"):
        read_config([tmp_path / "a"], "nemo")
    assert main(["import", str(tmp_path / "missing.toml"), "--from", "torchtitan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err


def test_predict_config_refuses_plan_flags_beside_it(capsys, tmp_path):
    assert main(["predict", "--config", str(tmp_path / "x.toml"), "--from", "torchtitan", "--tp", "2"]) == 2
    assert "drop --tp" in capsys.readouterr().err
    assert main(["predict", "--from", "torchtitan"]) == 2
    assert "--from needs --config FILE..." in capsys.readouterr().err


def test_the_report_names_unpriced_keys_one_line_per_reason():
    from perfmodel.cli.commands.import_config import SHOWN_KEYS, reasons

    led = Ledger("maxtext")
    for i in range(SHOWN_KEYS + 3):
        led.skip(f"log_{i}", i, "base.yml", "logging: does not change step time or memory")
    led.skip("megablox", "true", "base.yml", "a kernel choice perfmodel does not price")
    lines = reasons(led.keys)
    assert lines[1] == "a kernel choice perfmodel does not price: megablox"
    assert lines[0].startswith("logging: does not change step time or memory: log_0, log_1, ")
    assert lines[0].endswith(f"log_{SHOWN_KEYS - 1} and 3 more (--explain lists each)")
