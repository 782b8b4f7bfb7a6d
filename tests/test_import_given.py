"""What the user states beside a config's files (perfmodel.ingest.given): a launch script's arguments
(`--script-args`) and a tokenizer file's vocabulary (`--vocab-size`). Without them the refusal names the flag, in one
line; with them the files read as a run would read them."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from perfmodel.cli.main import main
from perfmodel.errors import InputError
from perfmodel.ingest import Given, needed_flag, read_config
from perfmodel.ingest.shell.script import Script

DS = Path(__file__).parent / "fixtures" / "corpus" / "deepspeed"
SUPEROFFLOAD = DS / "deepspeed-examples" / "superoffload_finetune_gpt-oss-20b_1gpu.sh"
LLAMA_TP2_PP2 = DS / "megatron-deepspeed" / "pretrain_llama2_distributed.sh"


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_script_args_are_the_scripts_positional_parameters():
    """$1, ${2:-4}, $# and $@ as bash gives them for `bash script.sh superoffload`."""
    text = 'MODE=$1\nBATCH=${2:-4}\nN=$#\nALL="$@"\n'
    from perfmodel.ingest.given import GIVEN

    token = GIVEN.set(Given.of("superoffload"))
    try:
        sc = Script(text, "t.sh")
    finally:
        GIVEN.reset(token)
    assert sc.scalars() == {"MODE": "superoffload", "BATCH": "4", "N": "1", "ALL": "superoffload"}
    assert "$1" in Script(text, "t.sh").unread  # not given: the argument is named as not read


def test_a_config_written_under_the_scripts_argument_needs_script_args():
    """SuperOffload's script writes its DeepSpeed JSON only under `if [ "$MODE" = "superoffload" ]`, MODE=$1."""
    with pytest.raises(InputError) as err:
        read_config([SUPEROFFLOAD], "deepspeed")
    assert needed_flag(str(err.value)) == "--script-args" and "($1)" in str(err.value)
    imp = read_config([SUPEROFFLOAD], "deepspeed", given=Given.of("superoffload"))
    # the superoffload branch's JSON: train_batch_size $BATCH_SIZE = ${2:-4} = 4, ZeRO-3, bf16
    assert (imp.plan["zero"], imp.plan["precision"], imp.plan["global_batch"]) == (3, "bf16", 4)
    imp = read_config([SUPEROFFLOAD], "deepspeed", given=Given.of("zerooffload 2"))
    assert imp.plan["global_batch"] == 2  # $2 is the batch


def test_a_tokenizer_file_needs_vocab_size_and_it_is_padded_as_megatron_pads():
    """Megatron-DeepSpeed's llama script names the tokenizer by its path (a SentencePiece .model): 32000 tokens given,
    padded to a multiple of 128 x tp 2 = 256: 32000 (125 x 256); 32001 pads to 32256 (126 x 256)."""
    with pytest.raises(InputError) as err:
        read_config([LLAMA_TP2_PP2], "deepspeed")
    assert needed_flag(str(err.value)) == "--vocab-size"
    assert read_config([LLAMA_TP2_PP2], "deepspeed", given=Given(vocab_size=32000)).model.vocab == 32000
    imp = read_config([LLAMA_TP2_PP2], "deepspeed", given=Given(vocab_size=32001))
    assert imp.model.vocab == 32256
    assert [k.source for k in imp.keys if k.key.startswith("--vocab-size")] == ["the command line"]


def test_the_cli_flags(tmp_path):
    rc, _, err = run(["import", str(LLAMA_TP2_PP2), "--from", "deepspeed", "--hardware", "dgx-h100"])
    assert rc == 2 and len(err.splitlines()) == 1 and "--vocab-size is needed" in err
    rc, out, _ = run(["import", str(LLAMA_TP2_PP2), "--from", "deepspeed", "--hardware", "dgx-h100", "--vocab-size",
                      "32000"])
    assert rc == 0 and "vocab=32000" in out
    rc, out, _ = run(["predict", "--config", str(SUPEROFFLOAD), "--from", "deepspeed", "--hardware", "dgx-h100",
                      "--script-args", "superoffload", "--format", "json"])
    assert rc == 0 and '"zero": 3' in out
    rc, _, err = run(["import", str(SUPEROFFLOAD), "--from", "deepspeed", "--script-args", "'unclosed"])
    assert rc == 2 and err.startswith("error: --script-args") and len(err.splitlines()) == 1
    rc, _, err = run(["predict", "--vocab-size", "32000"])  # no config to give it to
    assert rc == 2 and "--vocab-size gives what a framework config's files leave out" in err


def test_a_flag_no_file_needs_is_said_to_be_unused():
    """--vocab-size beside a script whose tokenizer's size is known, --script-args beside a TOML: each named as not
    used in import's report; taken where a file reads it."""
    toml = Path(__file__).parent / "fixtures" / "configs" / "torchtitan" / "llama3_8b.toml"
    imp = read_config([toml], "torchtitan", given=Given.of("x", 32000))
    assert [line.split(":")[0] for line in imp.given_unused] == ["--vocab-size 32000", "--script-args 'x'"]
    assert read_config([SUPEROFFLOAD], "deepspeed", given=Given.of("superoffload")).given_unused == []
    assert read_config([LLAMA_TP2_PP2], "deepspeed", given=Given(vocab_size=32000)).given_unused == []
    rc, out, _ = run(["import", str(toml), "--from", "torchtitan", "--hardware", "dgx-h100", "--gpus", "8",
                      "--vocab-size", "32000"])
    assert rc == 0 and "--vocab-size 32000: not used" in out


def test_calibrate_config_takes_the_same_flags(tmp_path):
    """calibrate --from-trace --config reads the config as import does: --vocab-size reaches the reader; without
    --config it is refused naming what it describes."""
    trace = Path(__file__).parent / "fixtures" / "traces" / "hta" / "nccl_data.json.gz"
    rc, _, err = run(["calibrate", "--from-trace", str(trace), "--config", str(LLAMA_TP2_PP2), "--from", "deepspeed"])
    assert rc == 2 and "--vocab-size is needed" in err and len(err.splitlines()) == 1
    rc, _, err = run(["calibrate", "--from-trace", str(trace), "--vocab-size", "32000"])
    assert rc == 2 and "--vocab-size" in err and "with --config FILE" in err
