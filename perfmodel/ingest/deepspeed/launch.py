"""A DeepSpeed job's launch script as `perfmodel import --from deepspeed` reads it (as data, never run): the command
that launches the training program, the DeepSpeed config it passes (a JSON given beside it, or the one the script
writes itself: `cat <<EOF > ds_config.json`, perfmodel.ingest.shell.script's `files`), the launcher's device count
(`deepspeed --num_nodes N --num_gpus G`, `torchrun --nnodes N --nproc_per_node G`) and the program's arguments:
Megatron-DeepSpeed's (pretrain_gpt.py --num-layers ... --deepspeed_config ds.json), a Hugging Face script's
(--model_name_or_path, --per_device_train_batch_size, --bf16 True, ...), or DeepSpeed-Chat's, whose main.py builds the
config from its flags (--zero_stage, --dtype, --offload: perfmodel.ingest.deepspeed.chat).

Megatron-DeepSpeed's arguments are a fork of Megatron-LM's (megatron/arguments.py at deepspeedai/Megatron-DeepSpeed
4efb479d): their defaults and not-priced reasons are perfmodel.ingest.megatron.keys'; the model and layout
arguments those scripts state are read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...errors import InputError
from ...spec.model.catalogue import list_models, preset_for_name
from .chat import CHAT_FLAGS, read_chat_flag
from ..given import ARGS_FLAG, GIVEN
from ..ledger import Ledger
from ..megatron.keys import NOT_PRICED_WHY
from ..shell.script import Script
from ..sources import options, read_text

LAUNCHERS = ("deepspeed", "torchrun", "python", "python3", "accelerate")
CONFIG_ARGS = ("--deepspeed_config", "--deepspeed-config", "--deepspeed")
MODEL_ARGS = ("--model_name_or_path", "--model_name")  # Hugging Face examples' (run_clm.py, finetune scripts)
# Megatron's vocabulary arguments: read together once the model's shape is known (megatron.model.vocabulary)
TOKENIZER_ARGS = ("--vocab-size", "--tokenizer-type", "--vocab-file", "--merge-file", "--make-vocab-size-divisible-by",
                  "--tokenizer-model")

# Megatron-DeepSpeed arguments -> (field, type); flags (no value) -> (field, value)
MEGATRON_VALUES = {
    "--num-layers": ("model.n_layers", int), "--hidden-size": ("model.hidden", int),
    "--ffn-hidden-size": ("model.ffn_hidden", int), "--num-attention-heads": ("model.n_heads", int),
    "--num-key-value-heads": ("model.n_kv_heads", int), "--num-query-groups": ("model.n_kv_heads", int),
    "--kv-channels": ("model.head_dim", int), "--max-position-embeddings": ("model.max_seq_len", int),
    "--seq-length": ("plan.seq_len", int),
    "--micro-batch-size": ("plan.micro_batch", int), "--global-batch-size": ("plan.global_batch", int),
    "--tensor-model-parallel-size": ("plan.tp", int), "--pipeline-model-parallel-size": ("plan.pp", int),
    "--zero-stage": ("plan.zero", int), "--recompute-num-layers": ("plan.recompute_num_layers", int),
    "--recompute-method": ("plan.recompute_method", str), "--recompute-granularity": ("plan.recompute", str),
    "--normalization": ("model.norm", str.lower), "--position-embedding-type": ("model.position", str),
    "--attention-dropout": ("model.dropout", float), "--hidden-dropout": ("model.dropout", float),
}
MEGATRON_FLAGS = {
    "--swiglu": ("model.mlp", "swiglu"), "--use-rotary-position-embeddings": ("model.position", "rope"),
    "--untie-embeddings-and-output-weights": ("model.tie_embeddings", False),
    "--disable-bias-linear": ("model.linear_bias", "none"), "--bf16": ("plan.precision", "bf16"),
    "--fp16": ("plan.precision", "fp16"), "--sequence-parallel": ("plan.sequence_parallel", True),
    "--checkpoint-activations": ("plan.recompute", "full"),
    "--deepspeed-activation-checkpointing": ("plan.recompute", "full"), "--no-pipeline-parallel": ("plan.pp", 1),
    "--use-flash-attn": ("plan.attention", "flash"), "--use-flash-attn-v2": ("plan.attention", "flash"),
}
POSITIONS = {"rope": "rope", "rotary": "rope", "learned_absolute": "learned", "alibi": "alibi"}
HF_VALUES = {"--per_device_train_batch_size": "micro", "--gradient_accumulation_steps": "accumulation"}
# the training sequence: Hugging Face scripts' (run_clm.py --block_size, FastChat --model_max_length, ...),
# DeepSpeed-Chat's --max_seq_len, DeepSpeed-SuperOffload's --max_length (finetune_zero3.py:96-97 pads every sample
# to it)
HF_SEQ = ("--max_seq_length", "--model_max_length", "--block_size", "--seq_length", "--max_seq_len", "--max_length")
HF_FLAGS = {"--bf16": ("plan.precision", "bf16"), "--fp16": ("plan.precision", "fp16"),
            "--gradient_checkpointing": ("plan.recompute", "full"),
            "--activation_checkpointing": ("plan.recompute", "full")}  # SuperOffload finetune_zero3.py:150-156
# a switch given alone: on (a Hugging Face bool argument, a store_true flag of DeepSpeed-Chat's or SuperOffload's)
BARE_ON = ("--gradient_checkpointing", "--activation_checkpointing")
# A PEFT script's LoRA rank (FastChat fastchat/train/train_lora.py LoraArguments at 02d4581: lora_r, target modules
# ["q_proj", "v_proj"] by default, the base frozen by peft.get_peft_model): Plan.lora at that rank on the attention
# projections (perfmodel's "attention" adapts q, k, v and o: the k and o adapters, r (n + k) parameters each, are
# under 1% of a layer at r = 8)
PEFT_RANK = "--lora_r"
PEFT_WHY = ("PEFT LoRA on the base the script loads, frozen (peft.get_peft_model); FastChat's default targets q_proj and "
            "v_proj, priced as the attention projections")
NOT_READ_WHY = ("an argument of the training program perfmodel does not price (data, logging, optimizer "
                "hyperparameters, checkpoints, evaluation)")
LAUNCH_WHY = "where the launcher meets its peers (port, address, hostfile, rank): does not change the step"
# Megatron-DeepSpeed's --cpu-optimizer (megatron/optimizer/__init__.py:83 at 4efb479d) builds DeepSpeedCPUAdam
CPU_OPTIMIZER_WHY = ("Megatron-DeepSpeed builds DeepSpeedCPUAdam, the update ZeRO-Offload runs on the host's CPUs: the "
                     "config's offload_optimizer.device cpu gives the plan's host update (plan.optimizer_update)")


@dataclass
class Launch:
    """The command that runs the training program, and the DeepSpeed config it passes."""

    launcher: list[str]  # the launcher's words up to the program
    program: list[str]  # the program's arguments
    named: str | None  # the config file the command passes (--deepspeed_config X / --deepspeed X), as expanded
    written: str | None  # the JSON the script itself writes there (a heredoc), None where it writes none
    unread: Callable[[str], str | None]  # why a value of the script is not known (Script.not_read)


def launch_of(script: Path, config: Path | None) -> Launch:
    """The launch command of `script` that runs `config` (the one naming it, else the only launcher command), or,
    with no config given, the only launcher command and the JSON the script writes to the file it passes."""
    text = read_text(script, "launch script")
    where = str(script)
    sc = Script(text, where)
    found = _launches(sc.commands)
    if not found:  # a command under an `if` whose test needs the file system (if [ -f ... ]): every branch
        sc = Script(text, where, every_branch=True)
        found = _launches(sc.commands)
    naming = [c for c in found if config is not None and _named(c[1]) and Path(_named(c[1])).name == config.name]
    pick = naming or found
    if len(pick) != 1:
        what = ("no launcher command (deepspeed / torchrun / python ... train.py)" if not pick else
                f"{len(pick)} launcher commands ({'; '.join(' '.join(a[-2:]) for a, _ in pick)})")
        want = f"passes --deepspeed_config {config.name}" if config else "launches the training program"
        raise InputError(f"launch script {where!r}: {what}{f' runs {config.name}' if config else ''}; valid: a "
                         f"script whose one command {want}")
    launcher, program = pick[0]
    named = _named(program)
    written = None if config is not None or named is None else _written(sc.files, named)
    if config is None and named is not None and written is None:
        _not_written(text, where, named, sc)
    return Launch(launcher, program, named, written, sc.not_read)


def command_of(script: Path, config: Path) -> tuple[list[str], list[str]]:
    """The launcher's words and the program's words of the command that runs `config`."""
    launch = launch_of(script, config)
    return launch.launcher, launch.program


def _launches(commands: list[list[str]]) -> list[tuple[list[str], list[str]]]:
    """Each launcher command's (launcher words up to the program, the program's arguments)."""
    found = []
    for words in commands:
        words = [w for w in words if w != "eval"]
        while words and "=" in words[0] and not words[0].startswith("-"):  # VAR=value before the command
            words = words[1:]
        if not words or Path(words[0]).name not in LAUNCHERS:
            continue
        cut = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
        if cut is None:
            continue
        found.append((words[:cut + 1], words[cut + 1:]))
    return found


def _named(program: list[str]) -> str | None:
    """The config file the program's arguments pass (--deepspeed_config X, or Hugging Face's --deepspeed X)."""
    named = [v for k, v in options(program) if k in CONFIG_ARGS and v and not v.startswith("-")]
    return named[-1] if named else None


def _written(files: dict[str, str], named: str) -> str | None:
    """The text the script writes to the file its launch passes: the same path, else the one file of that name."""
    if named in files:
        return files[named]
    same = [text for path, text in files.items() if Path(path).name == Path(named).name]
    return same[0] if len(same) == 1 else None


def _not_written(text: str, where: str, named: str, sc: Script) -> None:
    """One line for a launch whose config the script does not write where it runs."""
    every = Script(text, where, every_branch=True)
    if _written(every.files, named) is not None:
        if GIVEN.get().script_args is None and any(k.startswith("$") and k[1:2].isdigit() for k in sc.unread):
            raise InputError(f"launch script {where!r}: {ARGS_FLAG} is needed: the DeepSpeed config its launch passes "
                             f"({named}) is written only under an if/case branch that tests the script's arguments "
                             f"({', '.join(k for k in sc.unread if k.startswith('$') and k[1:2].isdigit())}); valid: "
                             f"{ARGS_FLAG} 'WORDS', the arguments it is run with, or that JSON beside the script")
        raise InputError(f"launch script {where!r}: the DeepSpeed config its launch passes ({named}) is written only "
                         "under an if/case branch the script does not take (its tests read its arguments or what it "
                         "cannot know); valid: pass that JSON, as a run writes it, beside the script")
    why = sc.not_read(named)
    raise InputError(f"launch script {where!r}: its launch passes the DeepSpeed config {named}, which the script does "
                     f"not write{f' ({why})' if why else ''}; valid: pass that JSON beside the script")


# ---- the launcher and the program's arguments ------------------------------------------------------------------

def _int(key: str, value, where: str, why: str | None = None) -> int:
    try:
        n = int(str(value))
    except ValueError:
        raise InputError(f"{where}: {key} = {value!r} is not a whole number ({_unknown(why)}); valid: a positive "
                         "integer") from None
    if n < 1:
        raise InputError(f"{where}: {key} = {n}; valid: a positive integer")
    return n


def _unknown(why: str | None) -> str:
    return f"not read: {why}" if why else "a value the shell computes is not read"


def read_launcher(led: Ledger, words: list[str], where: str, unread=None) -> None:
    """The launcher's options: the device count (launch.gpus = nodes x processes per node, one node where --num_nodes
    / --nnodes is unstated) and the rest named. A count the script leaves not read (`--num_gpus $NGPU`: `unread` says
    why) or the hostfile's node count leaves the device count to --gpus."""
    opts = dict(options(words))
    per_key = next((k for k in ("--num_gpus", "--nproc_per_node", "--nproc-per-node") if k in opts), None)
    nodes_key = "--num_nodes" if "--num_nodes" in opts else "--nnodes"
    why = {k: unread(opts[k]) if unread and opts[k] else None for k in (per_key, nodes_key) if k in opts}
    counts = {k: _int(k, opts[k], where) for k in why if why[k] is None}
    blocked = next((f"{k} is not read ({w})" for k, w in why.items() if w), None)
    if blocked is None and per_key is not None and nodes_key not in opts and "--hostfile" in opts:
        blocked = "the node count is the hostfile's, which is not read"
    if blocked is None and per_key is None and counts:
        blocked = "the processes per node are not stated"
    total = None if blocked or per_key is None else counts[per_key] * counts.get(nodes_key, 1)
    for key, value in options(words):
        if key in (per_key, nodes_key) and total is not None:
            what = "processes per node" if key == per_key else "nodes"
            led.set(key, value, where, what + ("" if nodes_key in opts else ", one node"), launch__gpus=total)
        elif key in (per_key, nodes_key):
            own = f"not read: {why[key]}" if why.get(key) else blocked
            led.skip(key, value, where, f"{own}: the device count comes from --gpus")
        else:
            led.skip(key, value, where, LAUNCH_WHY)


def read_program(led: Ledger, words: list[str], where: str, facts: dict, unread=None) -> None:
    """The training program's arguments: Megatron-DeepSpeed's model and layout, a Hugging Face script's model name
    and batch, or DeepSpeed-Chat's flags; `facts` gets the model preset ('preset'), the batch flags ('micro',
    'accumulation'), the tokenizer arguments ('tokenizer'), and what kind of program it is ('megatron', 'chat')."""
    hidden_dropout = dict(options(words)).get("--hidden-dropout")
    for key, value in options(words):
        why = unread(value) if unread and value else None
        if key in CONFIG_ARGS:
            led.skip(key, value or "true", where, "names the DeepSpeed config file (read as its JSON)" if value else
                     "switches DeepSpeed on (deepspeed.add_config_arguments)")
        elif key in MODEL_ARGS:
            facts["preset"] = (key, value, _preset(key, value or "", where, why))
        elif key in HF_VALUES:
            facts[HF_VALUES[key]] = (key, _int(key, value, where, why), where)
        elif key in HF_SEQ:
            led.set(key, value, where, plan__seq_len=_int(key, value, where, why))
        elif key in BARE_ON and value is None:
            field, v = HF_FLAGS[key]
            led.set(key, "true", where, **{field.replace(".", "__"): v})
        elif key in HF_FLAGS and value is not None and value.lower() in ("true", "false", "1", "0"):
            if value.lower() in ("true", "1"):
                field, v = HF_FLAGS[key]
                led.set(key, value, where, **{field.replace(".", "__"): v})
            else:
                led.skip(key, value, where, "false: off")
        elif key in CHAT_FLAGS:
            read_chat_flag(led, key, value, where, facts, why)
        elif key == PEFT_RANK:
            rank = _int(key, value, where, why)
            if rank > 0:
                led.set(key, value, where, PEFT_WHY, plan__lora={"rank": rank, "modules": "attention"})
            else:
                led.skip(key, value, where, "0: no LoRA adapters")
        elif key in TOKENIZER_ARGS:
            facts.setdefault("tokenizer", {})[key] = value
        elif key in ("--ds-sequence-parallel-size", "--num-experts"):
            n = _int(key, value, where, why)
            if n > 1:
                what = ("DeepSpeed-Ulysses sequence parallelism (an all-to-all over heads)" if key.startswith("--ds")
                        else "DeepSpeed-MoE experts defined in Megatron-DeepSpeed's model code")
                raise InputError(f"{where}: {key} = {n}: {what} is not read by perfmodel import; valid: {key} 1")
            led.skip(key, value, where, "1: off")
        elif key == "--attention-dropout" and hidden_dropout is not None and value != hidden_dropout:
            facts["megatron"] = True  # two probabilities, as Megatron's two modules have: not a contradiction
            led.skip(key, value, where, "the model has one dropout probability, --hidden-dropout's")
        elif key in MEGATRON_VALUES or key in MEGATRON_FLAGS:
            facts["megatron"] = True
            _megatron(led, key, value, where, why)
        else:
            led.skip(key, value if value is not None else "true", where,
                     CPU_OPTIMIZER_WHY if key == "--cpu-optimizer" else NOT_PRICED_WHY.get(key, NOT_READ_WHY))
    if "tokenizer" in facts:
        facts["tokenizer"]["--tensor-model-parallel-size"] = led.get("plan.tp", 1)


def _preset(key: str, value: str, where: str, why: str | None) -> str:
    """The preset a Hugging Face id or model name names; one line with the presets where none does."""
    preset = preset_for_name(value) if value and not why else None
    if preset is None:
        raise InputError(f"{where}: {key} = {value}: " + (f"not read ({why})" if why else f"no preset for {value}") +
                         f"; valid: a Hugging Face id or name of a perfmodel preset ({', '.join(list_models())})")
    return preset


def _megatron(led: Ledger, key: str, value, where: str, why: str | None) -> None:
    if key in MEGATRON_FLAGS:
        field, v = MEGATRON_FLAGS[key]
        led.set(key, "true" if value is None else value, where, **{field.replace(".", "__"): v})
        return
    field, kind = MEGATRON_VALUES[key]
    if value is None:
        raise InputError(f"{where}: {key} needs a value; valid: {key} N")
    try:
        v = kind(value)
    except ValueError:
        raise InputError(f"{where}: {key} = {value!r} is not a {kind.__name__} ({_unknown(why)}); valid: a script "
                         "that states it") from None
    if key == "--position-embedding-type":
        if value not in POSITIONS:
            raise InputError(f"{where}: {key} = {value}; valid: {', '.join(POSITIONS)}")
        v = POSITIONS[value]
    if key == "--recompute-granularity" and v not in ("full", "selective"):
        raise InputError(f"{where}: {key} = {value}; valid: full, selective")
    led.set(key, value, where, **{field.replace(".", "__"): v})
