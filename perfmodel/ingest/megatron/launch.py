"""A Megatron-LM launch script as `perfmodel import --from megatron` reads it (as data, never run): the command that
runs pretrain_*.py (also inside a job script on sbatch's standard input or a `bash -c` string) split into the
launcher's options and the training arguments; the device count the launcher states, where the arguments' layout can
run on it; values the script leaves not read; hybrid (Mamba) models refused in one line."""

from __future__ import annotations

from pathlib import Path

from ...errors import InputError
from ..ledger import Ledger
from .keys import HYBRID, LAUNCH_COUNT, NARGS, NEEDED, REASONS
from ..shell.script import Script
from ..sources import options as arg_pairs, read_text

Arg = tuple[str, "str | None", str]  # (key, value or None for a bare flag, where it came from)


def options(words: list[str], source: str) -> list[Arg]:
    """The arguments of `words` (sources.options, NARGS arguments taking several words), each with its source."""
    return [(k, v, source) for k, v in arg_pairs(words, NARGS)]


def program(word: str) -> bool:
    """A word naming the Python program a command runs (pretrain_gpt.py), not a string that mentions one."""
    return word.endswith(".py") and not any(c.isspace() for c in word)


def from_script(path: Path) -> tuple[list[Arg], list[Arg], Script, str]:
    """(launcher options, training arguments, the script as read, the program it runs) of a launch script or an
    argument list (also a job script on sbatch's standard input, or a `bash -c` string, shell.script reads)."""
    where = f"Megatron-LM launch script {str(path)!r}"
    script = Script(read_text(path, "Megatron-LM launch script"), where)
    runs = [c for c in script.commands if any(program(w) for w in c)]
    if len(runs) > 1:
        raise InputError(f"{where}: {len(runs)} commands run a Python script ({', '.join(runs[0][:1] + runs[1][:1])}"
                         " ...); valid: a script that launches one pretrain_*.py")
    if runs:
        cmd = runs[0]
        at = next(i for i, w in enumerate(cmd) if program(w))
        return (options(cmd[:at], f"{path.name} (launcher)"), options(cmd[at + 1:], path.name), script,
                Path(cmd[at]).name)
    if script.commands and all(c[0].startswith("--") for c in script.commands):
        return [], options([w for c in script.commands for w in c], path.name), script, ""
    first = script.commands[0][0] if script.commands else "nothing"
    raise InputError(f"{where}: no command runs pretrain_*.py and it is not an argument list (its first command is "
                     f"{first!r}); valid: a torchrun ... pretrain_gpt.py script, or --flag value lines")


def not_read(args: list[Arg], script: Script, led: Ledger) -> list[Arg]:
    """The arguments whose value the script leaves not read (command output, its own arguments, a variable it never
    sets) named so in the ledger and left out (the framework's default, or the flag, gives the field); the rest.
    A model or batch argument Megatron-LM cannot run without is refused, naming what it stands for."""
    out = []
    for k, v, src in args:
        why = script.not_read(v)
        if why is None:
            out.append((k, v, src))
        elif k in NEEDED:
            raise InputError(f"megatron config: {k} = {v} is not read ({why}); valid: {k} N written in the file")
        else:
            led.skip(k, v, src, f"not read: {why}")
    return out


def hybrid(prog: str, opts: dict) -> None:
    """Megatron-LM's hybrid models (pretrain_mamba.py / pretrain_hybrid.py, --hybrid-* patterns and ratios) are
    refused in one line: perfmodel prices transformer layers, not Mamba-2's."""
    key = next((k for k in HYBRID if k in opts), None)
    if not key and Path(prog).stem not in ("pretrain_mamba", "pretrain_hybrid"):
        return
    what = f"{key} {opts[key]!r}" if key else prog
    raise InputError(f"megatron config: {what}: a hybrid model with Mamba-2 layers ('M': a recurrent state per "
                     "sequence), which perfmodel does not price; valid: a transformer's pretrain_gpt.py arguments")


def launch_fates(launch: list[Arg], led: Ledger, opts: dict, unread: set[str]) -> None:
    """torchrun's options: --nproc-per-node x --nnodes (where literal; --nnodes unstated is one node) is the device
    count; the rest not priced. A count stated but not read (`unread`: --nnodes $SLURM_NNODES) or not literal
    (--nnodes 1:4, elastic) leaves the device count to --gpus. So does a count the arguments' layout cannot run on
    (parallel_state.py:822 and :881 at d98e8a64: the world must divide by tp x pp x cp and by etp x ep x pp): the
    script's one-node default of a multi-node job."""
    literal = {k: int(v) for k, v, _ in launch if k in LAUNCH_COUNT and v is not None and v.isdigit() and int(v) > 0}
    stated = {k for k, _, _ in launch if k in LAUNCH_COUNT} | (unread & LAUNCH_COUNT)
    per_key = next((k for k in ("--nproc_per_node", "--nproc-per-node") if k in literal), None)
    whole = per_key is not None and "--nnodes" not in stated - set(literal)
    total = literal[per_key] * literal.get("--nnodes", 1) if whole else None
    ways = layout_ways(opts)
    misfit = next(((n, w) for n, w in ways.items() if total % w), None) if total is not None else None
    for k, v, src in launch:
        if k in literal and total is not None and misfit is None:
            field = "nodes" if k == "--nnodes" else "per_node"
            led.set(k, v, src, "devices = processes per node x nodes", **{f"launch__{field}": literal[k]})
        elif k in LAUNCH_COUNT and misfit is not None:
            led.skip(k, v, src, f"{total} devices cannot run {misfit[0]} = {misfit[1]}: the job's device count comes "
                                "from --gpus")
        elif k in literal:
            led.skip(k, v, src, "the other count is not read: the device count comes from --gpus")
        elif k in LAUNCH_COUNT:
            led.skip(k, v, src, "not a literal count: the device count comes from --gpus")
        else:
            led.skip(k, v, src, REASONS["launch"])
    if total is not None and misfit is None:
        led.fields["launch.gpus"] = total
        led.set_by["launch.gpus"] = " x ".join(f"{k} = {literal[k]}" for k in (per_key, "--nnodes") if k in literal)


def layout_ways(opts: dict) -> dict[str, int]:
    """The products the device count must divide, from the arguments (where literal; 1 otherwise)."""
    def n(key: str, default: int = 1) -> int:
        v = str(opts.get(key, default))
        return int(v) if v.isdigit() and int(v) > 0 else default

    tp, pp = n("--tensor-model-parallel-size"), n("--pipeline-model-parallel-size")
    return {"tp x pp x cp": tp * pp * n("--context-parallel-size"),
            "etp x ep x pp": n("--expert-tensor-parallel-size", tp) * n("--expert-model-parallel-size") * pp}
