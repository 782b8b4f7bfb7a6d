"""A DeepSpeed job's launch script as `perfmodel import --from deepspeed` reads it (as data, never run): the
launcher's device count (`deepspeed --num_nodes N --num_gpus G`, `torchrun --nnodes N --nproc_per_node G`) and the
training program's arguments: Megatron-DeepSpeed's (pretrain_gpt.py --num-layers ... --deepspeed_config ds.json)
or a Hugging Face script's (--model_name_or_path, --per_device_train_batch_size, --bf16, ...).

Megatron-DeepSpeed's arguments are a fork of Megatron-LM's (megatron/arguments.py at deepspeedai/Megatron-DeepSpeed
4efb479d): their defaults and not-priced reasons are perfmodel.ingest.megatron_keys'; the model and layout
arguments those scripts state are read here.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..spec.model_catalogue import list_models, preset_for_hf_id
from .ledger import Ledger
from .megatron_keys import NOT_PRICED_WHY
from .shell_script import Script
from .sources import options, read_text

LAUNCHERS = ("deepspeed", "torchrun", "python", "python3", "accelerate")
CONFIG_ARGS = ("--deepspeed_config", "--deepspeed-config", "--deepspeed")
MODEL_ARGS = ("--model_name_or_path", "--model_name")  # Hugging Face examples' (run_clm.py, finetune scripts)

# Megatron-DeepSpeed arguments -> (field, type); flags (no value) -> (field, value)
MEGATRON_VALUES = {
    "--num-layers": ("model.n_layers", int), "--hidden-size": ("model.hidden", int),
    "--ffn-hidden-size": ("model.ffn_hidden", int), "--num-attention-heads": ("model.n_heads", int),
    "--num-key-value-heads": ("model.n_kv_heads", int), "--num-query-groups": ("model.n_kv_heads", int),
    "--kv-channels": ("model.head_dim", int), "--max-position-embeddings": ("model.max_seq_len", int),
    "--vocab-size": ("model.vocab", int), "--seq-length": ("plan.seq_len", int),
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
HF_SEQ = ("--max_seq_length", "--model_max_length", "--block_size", "--seq_length", "--max_seq_len")
HF_FLAGS = {"--bf16": ("plan.precision", "bf16"), "--fp16": ("plan.precision", "fp16"),
            "--gradient_checkpointing": ("plan.recompute", "full")}
NOT_READ_WHY = ("an argument of the training program perfmodel does not price (data, logging, optimizer "
                "hyperparameters, checkpoints, evaluation)")
LAUNCH_WHY = "where the launcher meets its peers (port, address, hostfile, rank): does not change the step"


def command_of(script: Path, config: Path) -> tuple[list[str], list[str]]:
    """The launcher's words and the training program's words of the command that runs `config` (the one naming it
    in --deepspeed_config / --deepspeed, else the only launcher command); one line when none or several do."""
    text = read_text(script, "launch script")
    found = _launches(Script(text, str(script)).commands)
    if not found:  # a command under an `if` whose test needs the file system (if [ -f ... ]): every line, in order
        found = _launches(Script(text, str(script), every_branch=True).commands)
    naming = [(a, b) for a, b in found if any(Path(v).name == config.name for k, v in options(b) if k in CONFIG_ARGS
                                              and v)]
    pick = naming or found
    if len(pick) != 1:
        what = ("no launcher command (deepspeed / torchrun / python ... train.py)" if not pick else
                f"{len(pick)} launcher commands ({'; '.join(' '.join(a[-2:]) for a, _ in pick)})")
        raise InputError(f"launch script {str(script)!r}: {what} runs the DeepSpeed config {config.name}; valid: a "
                         f"script whose one command passes --deepspeed_config {config.name}")
    return pick[0]


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


def _int(key: str, value, where: str) -> int:
    try:
        n = int(str(value))
    except ValueError:
        raise InputError(f"{where}: {key} = {value!r} is not a whole number (a value the shell computes is not "
                         "read); valid: a positive integer") from None
    if n < 1:
        raise InputError(f"{where}: {key} = {n}; valid: a positive integer")
    return n


def read_launcher(led: Ledger, words: list[str], where: str) -> None:
    """The launcher's options: the device count (launch.gpus = nodes x processes per node) and the rest named."""
    opts = dict(options(words))
    per = opts.get("--num_gpus", opts.get("--nproc_per_node", opts.get("--nproc-per-node")))
    nodes_key = "--num_nodes" if "--num_nodes" in opts else "--nnodes"
    nodes = opts.get(nodes_key)
    for key, value in options(words):
        if key in ("--num_gpus", "--nproc_per_node", "--nproc-per-node"):
            n = _int(key, value, where)
            if nodes is None and "--hostfile" in opts:
                led.skip(key, value, where, "processes per node; the node count is the hostfile's, which is not read "
                                            "(pass --gpus)")
            else:
                total = n * (_int(nodes_key, nodes, where) if nodes is not None else 1)
                led.set(key, value, where, "processes per node" + (f" x {nodes_key} {nodes}" if nodes else
                                                                   ", one node"), launch__gpus=total)
        elif key in ("--num_nodes", "--nnodes"):
            if per is None:
                led.skip(key, value, where, "nodes; the processes per node are not stated (pass --gpus)")
            else:
                led.set(key, value, where, "nodes", launch__gpus=_int(key, value, where) * _int("--num_gpus", per,
                                                                                                 where))
        else:
            led.skip(key, value, where, LAUNCH_WHY)


def read_program(led: Ledger, words: list[str], where: str, facts: dict) -> None:
    """The training program's arguments: Megatron-DeepSpeed's model and layout, or a Hugging Face script's model
    name and batch; `facts` gets the model preset ('preset'), the HF batch ('micro', 'accumulation') and whether
    the arguments are Megatron's ('megatron')."""
    hidden_dropout = dict(options(words)).get("--hidden-dropout")
    for key, value in options(words):
        if key in CONFIG_ARGS:
            led.skip(key, value or "true", where, "names the DeepSpeed config file (read as the JSON given)")
        elif key in MODEL_ARGS:
            preset = preset_for_hf_id(value or "")
            if preset is None:
                raise InputError(f"{where}: {key} = {value} is not a model perfmodel has a preset for; valid: one of "
                                 f"{', '.join(list_models())} (or import the model's own config with perfmodel "
                                 "predict --model config.json)")
            facts["preset"] = (key, value, preset)
        elif key in HF_VALUES:
            facts[HF_VALUES[key]] = (key, _int(key, value, where), where)
        elif key in HF_SEQ:
            led.set(key, value, where, plan__seq_len=_int(key, value, where))
        elif key in HF_FLAGS and value is not None and value.lower() in ("true", "false", "1", "0"):
            if value.lower() in ("true", "1"):
                field, v = HF_FLAGS[key]
                led.set(key, value, where, **{field.replace(".", "__"): v})
            else:
                led.skip(key, value, where, "false: off")
        elif key in ("--ds-sequence-parallel-size", "--num-experts"):
            n = _int(key, value, where)
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
            _megatron(led, key, value, where)
        else:
            led.skip(key, value if value is not None else "true", where, NOT_PRICED_WHY.get(key, NOT_READ_WHY))


def _megatron(led: Ledger, key: str, value, where: str) -> None:
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
        raise InputError(f"{where}: {key} = {value!r} is not a {kind.__name__}; a value the shell computes is not "
                         "read") from None
    if key == "--position-embedding-type":
        if value not in POSITIONS:
            raise InputError(f"{where}: {key} = {value}; valid: {', '.join(POSITIONS)}")
        v = POSITIONS[value]
    if key == "--recompute-granularity" and v not in ("full", "selective"):
        raise InputError(f"{where}: {key} = {value}; valid: full, selective")
    led.set(key, value, where, **{field.replace(".", "__"): v})
