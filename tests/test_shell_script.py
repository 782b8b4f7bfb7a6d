"""The shell reader (perfmodel.ingest.shell.script) against bash itself: every script here and every launch script of
the corpus is run under bash with the launchers stubbed as shell functions that print their words, and the reader's
words must be bash's (a word the reader names as not read stands for whatever bash made of it: one word or none);
the files its heredocs write must be the files bash writes."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.errors import InputError
from perfmodel.ingest.shell.script import Script

ROOT = Path(__file__).parent / "fixtures"
STUBS = ("bash", "sh", "torchrun", "python", "python3", "deepspeed", "srun", "cd", "accelerate", "nohup", "sbatch",
         "pip", "git", "sleep", "ray", "docker", "mpirun", "rm", "cp", "ln", "wget", "curl", "source", "xpk", "gcloud",
         "kubectl", "huggingface-cli")
# mkdir makes the folders the script writes its files into, inside the test's folder only
# `set -e` / `set -u` would stop the script at the first stub that fails or the first unset variable, and a guard's
# `exit` at a test the reader cannot know (`[ -d "$CHECKPOINT_PATH" ]`), where the reader follows no branch
NO_EXIT = ('set() { local a=(); for x in "$@"; do [[ $x == -[!-]* ]] && x=${x//[eu]/}; a+=("$x"); done; '
           'builtin set "${a[@]}"; }\nexit() { :; }\n')
MKDIR = 'mkdir() { for a in "$@"; do case $a in -*|/*) ;; *) command mkdir -p -- "$a" ;; esac; done; }\n'
SCRIPTS = sorted(p for p in (ROOT / "corpus").rglob("*.sh")) + sorted((ROOT / "configs").rglob("*.sh"))


def bash_run(text: str, folder: Path) -> list[list[str]]:
    """The stubbed commands bash runs for `text` (in `folder`, without arguments, in a bare environment), each as
    its words."""
    for name in re.findall(r"(?<![\w/$.-])([\w.-][\w./-]*\.py)\b", text):  # run from its repository's root
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).touch()
    log = folder.parent / f"{folder.name}.commands"
    stubs = "".join(f"{n}() {{ printf '\\035'; printf '%s\\037' {n} \"$@\"; printf '\\036'; }} >> {log}\n"
                    for n in STUBS)
    env = {"PATH": os.environ["PATH"], "HOME": str(folder)}
    subprocess.run(["bash", "-c", stubs + MKDIR + NO_EXIT + text, "script.sh"], cwd=folder, env=env,
                   capture_output=True, text=True, timeout=60)
    out = log.read_text() if log.exists() else ""
    return [r.split("\036")[0].split("\037")[:-1] for r in out.split("\035")[1:]]


def same_words(read: Script, ours: list[str], theirs: list[str]) -> bool:
    """`ours` matches `theirs` word for word, a word with something not read in it standing for one word or none."""
    @__import__("functools").cache
    def match(i: int, j: int) -> bool:
        if i == len(ours):
            return j == len(theirs)
        if read.not_read(ours[i]):
            return match(i + 1, j) or (j < len(theirs) and match(i + 1, j + 1))
        return j < len(theirs) and ours[i] == theirs[j] and match(i + 1, j + 1)

    return match(0, 0)


def check_against_bash(text: str, tmp_path: Path) -> Script:
    read = Script(text, "script.sh")
    written = [p for p in read.files if not read.not_read(p) and not p.startswith("/")]
    for path in written:  # the folders it writes into exist (made by an earlier step of the job)
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    bash = bash_run(text, tmp_path)
    ours = [c for i, c in enumerate(read.commands) if c[0] in STUBS and i not in read.inner]
    assert len(ours) == len(bash), (ours, bash)
    for a, b in zip(ours, bash):
        assert same_words(read, a, b), (a, b)
    for path in written:
        assert (tmp_path / path).read_text() == read.files[path], path
    return read


@pytest.mark.parametrize("path", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_every_launch_script_reads_as_bash_runs_it(path, tmp_path):
    check_against_bash(path.read_text(), tmp_path)


def test_a_double_quoted_string_over_several_lines_is_one_word(tmp_path):
    text = '''export XLA_FLAGS="--xla_gpu_enable_latency_hiding_scheduler=true
 --xla_gpu_enable_command_buffer=''"
TRAINING_CMD="torchrun --nproc_per_node 8 pretrain_gpt.py \\
    --num-layers 32
    --hidden-size 4096"
srun bash -c "$TRAINING_CMD"
python train.py $TRAINING_CMD $XLA_FLAGS
'''
    read = check_against_bash(text, tmp_path)
    assert read.vars["XLA_FLAGS"] == ("--xla_gpu_enable_latency_hiding_scheduler=true\n "
                                      "--xla_gpu_enable_command_buffer=''")
    assert read.commands[0] == ["srun", "bash", "-c", "torchrun --nproc_per_node 8 pretrain_gpt.py     --num-layers "
                                                      "32\n    --hidden-size 4096"]
    # the string bash -c runs: its unescaped newline ends the first command, as it does in bash
    assert read.commands[1:3] == [["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", "--num-layers", "32"],
                                  ["--hidden-size", "4096"]] and read.inner == {1, 2}
    assert read.commands[3][:5] == ["python", "train.py", "torchrun", "--nproc_per_node", "8"]


def test_heredocs_write_the_files_bash_writes(tmp_path):
    text = '''GBS=256
MBS=2
ZERO=3
DIR=configs
mkdir -p $DIR
cat > ds_config.json <<EOF
{
  "train_batch_size": $GBS,
  "train_micro_batch_size_per_gpu": $((GBS / 128 / MBS)),
  "zero_optimization": {"stage": ${ZERO}}
}
EOF
cat <<'EOF' > raw.yaml
seq: $SEQ
EOF
cat <<EOF >> raw.yaml
gbs: $GBS
EOF
	cat <<-EOF | tee tabs.txt
	zero $ZERO
	EOF
echo "stage: $ZERO" > echoed.txt
tee teed.txt <<"END"
$GBS stays
END
'''
    read = check_against_bash(text, tmp_path)
    assert read.files["ds_config.json"] == ('{\n  "train_batch_size": 256,\n  "train_micro_batch_size_per_gpu": 1,\n'
                                            '  "zero_optimization": {"stage": 3}\n}\n')
    assert read.files["raw.yaml"] == "seq: $SEQ\ngbs: 256\n"  # quoted delimiter: the body as written
    assert read.files["tabs.txt"] == "zero 3\n"  # <<-: leading tabs stripped
    assert read.files["echoed.txt"] == "stage: 3\n"
    assert read.files["teed.txt"] == "$GBS stays\n"
    assert (tmp_path / "tabs.txt").read_text() == "zero 3\n"


def test_functions_run_where_called_with_their_arguments(tmp_path):
    text = '''launch() {
    local tp=$1
    local extra=("${@:2}")
    torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $tp "${extra[@]}"
}
function never_called {
    python never.py
}
tp=1
launch 4 --bf16 --seq-length 4096
launch 2
python after.py --tp $tp
'''
    read = check_against_bash(text, tmp_path)
    assert [c[-3:] for c in read.commands] == [["--bf16", "--seq-length", "4096"],
                                               ["pretrain_gpt.py", "--tensor-model-parallel-size", "2"],
                                               ["after.py", "--tp", "1"]]  # `local` restored the outer tp


def test_case_for_and_parameter_forms(tmp_path):
    text = '''MODEL=Llama3-8B
case ${MODEL,,} in
    llama3-70b|llama3-405b) LAYERS=80 ;;
    llama3-8*) LAYERS=32 ;;
    *) LAYERS=0 ;;
esac
: ${SEQ:=8192}
ARGS=(--num-layers $LAYERS)  # a comment
ARGS+=(--seq-length $SEQ)
for TP in 1 2 4; do
    ARGS+=("--tp-$TP")
done
torchrun pretrain_gpt.py "${ARGS[@]}" --n "${#ARGS[@]}" ${FP8:+--fp8-format hybrid} ${BF16:-"--bf16"}
FP8=1
python x.py ${FP8:+--fp8-format hybrid} ${MODEL^^} ${MODEL%-*} ${MODEL#*-} ${MODEL/3/4}
if [ "$LAYERS" -gt 40 ]; then N=big; elif [[ $MODEL == Llama* && $SEQ -ge 4096 ]]; then N=mid; else N=small; fi
python y.py $N $(( (LAYERS + 1) / 2 % 7 ))
'''
    read = check_against_bash(text, tmp_path)
    assert read.commands[0] == ["torchrun", "pretrain_gpt.py", "--num-layers", "32", "--seq-length", "8192", "--tp-1",
                                "--tp-2", "--tp-4", "--n", "7", "--bf16"]
    assert read.commands[2] == ["python", "y.py", "mid", "2"]


def test_arithmetic_commands_comparisons_and_array_elements_as_bash_makes_them(tmp_path):
    text = '''TP=4
if (( TP > 2 )); then python big.py $(( TP >= 4 )) $(( 7 / -2 )) $(( -7 % 3 )) $(( 2 ** 10 )) $(( 1 << 3 )); fi
A=x
A[1]=z
A[-1]+=w
python arr.py ${A[@]} ${#A[@]}
'''
    read = check_against_bash(text, tmp_path)  # bash: 1 -3 -1 1024 8; x zw 2
    assert read.commands == [["python", "big.py", "1", "-3", "-1", "1024", "8"], ["python", "arr.py", "x", "zw", "2"]]


def test_arithmetic_and_elements_a_list_cannot_hold_are_not_read():
    # `3 >> 99999999999` had computed 3 ** 99999999999 (a hang), `1 @ 2` raised KeyError, `(( a < b ))`
    # AttributeError, B[100000000000]=1 a MemoryError; bash's arrays are sparse, B[1] past B's end
    read = Script("X=$(( 3 >> 99999999999 ))\nY=$(( 1 @ 2 ))\nB[100000000000]=1\nC[1]=q\n"
                  "python x.py $X $Y ${B[@]} ${C[@]} $(( 1 < 2 ))\n", "script.sh")
    cmd = read.commands[0]
    assert read.not_read(cmd[2]) == "$(( 3 >> 99999999999 )): arithmetic on a value not read"
    assert read.not_read(cmd[3]) == "$(( 1 @ 2 )): arithmetic on a value not read"
    assert read.not_read(cmd[4]) == "${B[100000000000]}: an element set at an index not read, or past the array's end"
    assert read.not_read(cmd[5]) == "${C[1]}: an element set at an index not read, or past the array's end"
    assert cmd[6] == "1"


def test_what_cannot_be_known_is_named_not_read_and_never_refuses(tmp_path):
    text = '''WORLD_SIZE=$(nvidia-smi -L | wc -l)
NODES=`hostname | wc -l`
PORT=$((RANDOM + 6000))
TOTAL=$((WORLD_SIZE * 2))
torchrun --nproc_per_node $WORLD_SIZE --nnodes $NODES --master_port $PORT train.py --save $1 --total $TOTAL \\
    --data $DATA_DIR/x
'''
    tests = '''if [ "$WORLD_SIZE" -gt 4 ]; then python big.py; fi
case $NODES in 1) python one.py ;; esac
diff <(sort a) <(sort b) > /dev/null
'''
    check_against_bash(text, tmp_path)
    read = Script(text + tests, "script.sh")
    cmd = read.commands[0]
    assert read.not_read(cmd[2]) == "$(nvidia-smi -L | wc -l): command output"
    assert read.not_read(cmd[4]) == "`hostname | wc -l`: command output"
    assert read.not_read(cmd[6]) == "$((RANDOM + 6000)): arithmetic on a value not read"
    assert read.not_read(cmd[9]) == "$1: the script's argument"
    assert read.not_read(cmd[11]) == "$((WORLD_SIZE * 2)): arithmetic on a value not read"
    assert read.not_read(cmd[13]) == "$DATA_DIR: not set in the script: its environment's value"
    assert read.not_read(cmd[1]) is None
    assert read.unread["WORLD_SIZE"] == "= $(nvidia-smi -L | wc -l): command output"
    assert len(read.commands) == 2  # neither test is known: no branch, no arm
    assert read.not_read(read.commands[1][1]) == "<(sort a): a process substitution (a command's output as a file)"


def test_a_heredoc_whose_body_does_not_expand_is_named_not_read(tmp_path):
    # `bash -n` accepts it (a heredoc's body expands when the command runs, and there fails): the file is not
    # written, the reading goes on; the refusal had named no file ("': line 0 is not shell")
    text = "cat > ds.json <<EOF\n{\"stage\": $(oops}\nEOF\npython train.py --deepspeed ds.json\n"
    read = Script(text, "script.sh")
    assert read.files == {} and read.commands[-1] == ["python", "train.py", "--deepspeed", "ds.json"]
    assert read.unread["<<EOF (line 1)"].startswith("its body does not expand: script.sh: line 1 is not shell: the "
                                                    "$( opened here is never closed")


def test_a_usage_guard_on_what_a_bare_run_lacks_does_not_end_the_reading():
    """`[ $# -lt 1 ]`, `[ -z "$1" ] &&`, `case $1 in *)` and `[ -z "$DATA" ]` read as a bare run has them (no
    arguments, nothing set) take the usage branch, whose `exit` had ended the reading before the launch (the file
    then refused as launching nothing, no flag named); the exit is noted and the reading goes on. An exit past a
    test of known values still ends it."""
    launch = "torchrun --nproc_per_node 8 pretrain_gpt.py --save $1\n"
    for guard in ('if [ $# -lt 1 ]; then\n  echo "usage: $0 DIR"\n  exit 1\nfi\n',
                  '[ -z "$1" ] && { echo usage; exit 1; }\n',
                  "case $1 in\n  /*) ;;\n  *) echo usage; exit 1 ;;\nesac\n",
                  'if [[ -z "$DATA" ]]; then echo "set DATA"; exit 1; fi\n',
                  "(( $# < 1 )) && exit 1\n"):
        read = Script(guard + launch, "script.sh")
        assert read.commands[-1][:3] == ["torchrun", "--nproc_per_node", "8"], guard
        assert read.unread["exit"].startswith("reached past a test not known, or one read as a bare run"), guard
    for guard in ("if [ 1 -eq 1 ]; then exit 0; fi\n", "X=${X:-5}\n[ $X -gt 3 ] && exit 0\n"):
        read = Script(guard + launch, "script.sh")
        assert read.commands == [] and "exit" not in read.unread, guard


def test_a_script_past_its_budget_keeps_its_words_and_names_the_rest():
    # perfmodel.ingest.reading's budget: 200 x 200 iterations are past its 20,000 steps, a function calling itself is
    # followed 16 calls deep; the words read stand (a recipe past its budget is refused: test_import_bridge)
    words = " ".join(map(str, range(200)))
    read = Script(f"torchrun a.py\nL='{words}'\nfor a in $L; do for b in $L; do x=$b; done; done\npython b.py\n",
                  "script.sh")
    assert read.commands == [["torchrun", "a.py"]]
    assert read.unread["(the rest of the script)"] == "more than 20000 commands followed"
    read = Script("f() { echo $1; f $(( $1 + 1 )); }\nf 1\npython b.py\n", "script.sh")
    assert read.commands == [["echo", str(k)] for k in range(1, 17)] + [["python", "b.py"]]
    assert read.unread["f (call)"] == "more than 16 nested calls: not followed"


def test_a_script_bash_refuses_is_refused_in_one_line():
    for text, words in (("python x.py --a 'open\n", "the quote ' opened here is never closed"),
                        ("if [ 1 ]; then\n  python x.py\n", "expected 'fi', found the end of the file"),
                        ('X="$(date\n', "is never closed"),
                        ("for x in a b; do echo; fi\n", "expected 'done', found 'fi'"),
                        ("( " * 3000 + "x" + " )" * 3000, "nested too deep")):
        with pytest.raises(InputError, match="script.sh: (line [0-9]+ )?is not shell") as err:
            Script(text, "script.sh")
        assert words in str(err.value) and "\n" not in str(err.value)


# pieces of the shell the frameworks' scripts are written in, and of its arithmetic, tests, arrays and expansions
SHELL_BITS = ("A=", "A[", "]", "=", "+=", "$((", "))", "((", "$(", ")", "(", "${", "}", "{", "#", "0", "1", "-1",
              "99999999999", "<", ">", ">>", "<=", "==", "@", "**", "/", "%", "?", ":", "!", "&&", "||", "|", ";",
              ";;", "\n", " ", "'", '"', "`", "\\", "if", "then", "elif", "else", "fi", "for", "in", "do", "done",
              "while", "until", "case", "esac", "[[", "]]", "[", "-gt", "-z", "echo", "cat", "tee", "<<EOF\n",
              "\nEOF\n", "<<-'E'\n", "\tE\n", "X", "$X", "$1", "$@", "${A[@]}", "${#A[@]}", "${X:-1}", "${X:=2}",
              "${X:1:2}", "${X//a/b}", "${X,,}", "${!X}", "true", "false", "local", "function", "f()", "f", "eval",
              "set --", "shift", "read", "exit", "return", "export", "bash -c", "<(", "$'\\n'",
              "$((1<2))", "((X>1))", "$((3>>70))", "A[5]=1", "$((1@2))")


@settings(max_examples=400, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SHELL_BITS), max_size=40).map("".join))
def test_any_shellish_text_reads_or_is_refused_in_one_line(text):
    """Whatever a file holds, the reader gives its words or one InputError line (a traceback for a user's file is a
    bug: `(( a < b ))` had raised AttributeError, `A[99999999999]=1` MemoryError, `$((3 >> N))` hung)."""
    try:
        Script(text, "script.sh")
    except InputError as err:
        assert "\n" not in str(err) and str(err).startswith("script.sh")
