"""A Megatron-LM launch script as `perfmodel import --from megatron` reads it (as data, never run): the command that
runs pretrain_*.py (also inside a job script on sbatch's standard input or a `bash -c` string) split into the
launcher's options and the training arguments; the device count the launcher states, where the arguments' layout can
run on it; values the script leaves not read; hybrid (Mamba) models refused in one line."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .ledger import Ledger
from .megatron_keys import HYBRID, LAUNCH_COUNT, NARGS, NEEDED, REASONS
from .shell_script import Script
from .sources import options as arg_pairs, read_text

Arg = tuple[str, "str | None", str]  # (key, value or None for a bare flag, where it came from)


def options(words: list[str], source: str) -> list[Arg]:
    """The arguments of `words` (sources.options, NARGS arguments taking several words), each with its source."""
    return [(k, v, source) for k, v in arg_pairs(words, NARGS)]


def program(word: str) -> bool:
    """A word naming the Python program a command runs (pretrain_gpt.py), not a string that mentions one."""
    return word.endswith(".py") and not any(c.isspace() for c in word)


def from_script(path: Path) -> tuple[list[Arg], list[Arg], Script, str]:
    """(launcher options, training arguments, the script as read, the program it runs) of a launch script or an
    argument list (also a job script on sbatch's standard input, or a `bash -c` string, shell_script reads)."""
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


def launch_fates(launch: list[Arg], led: Ledger, opts: dict) -> None:
    """torchrun's options: --nproc-per-node x --nnodes (where literal) is the device count; the rest not priced.
    A count the arguments' layout cannot run on (parallel_state.py:822 and :881 at d98e8a64: the world must divide
    by tp x pp x cp and by etp x ep x pp) is the script's one-node default of a multi-node job: left to --gpus."""
    counts = {k: int(v) for k, v, _ in launch if k in LAUNCH_COUNT and v is not None and v.isdigit() and int(v) > 0}
    per = counts.get("--nproc_per_node", counts.get("--nproc-per-node"))
    total = per * counts.get("--nnodes", 1) if per else None
    ways = layout_ways(opts)
    misfit = total is not None and any(total % w for w in ways.values())
    for k, v, src in launch:
        if k in LAUNCH_COUNT and k in counts and not misfit:
            led.set(k, v, src, "devices = processes per node x nodes")
        elif k in LAUNCH_COUNT and misfit:
            name, w = next((n, w) for n, w in ways.items() if total % w)
            led.skip(k, v, src, f"{total} devices cannot run {name} = {w}: the job's device count comes from --gpus")
        elif k in LAUNCH_COUNT:
            led.skip(k, v, src, "not a literal count: the device count comes from --gpus")
        else:
            led.skip(k, v, src, REASONS["launch"])
    if total is not None and not misfit:
        led.fields["launch.gpus"] = total


def layout_ways(opts: dict) -> dict[str, int]:
    """The products the device count must divide, from the arguments (where literal; 1 otherwise)."""
    def n(key: str, default: int = 1) -> int:
        v = str(opts.get(key, default))
        return int(v) if v.isdigit() and int(v) > 0 else default

    tp, pp = n("--tensor-model-parallel-size"), n("--pipeline-model-parallel-size")
    return {"tp x pp x cp": tp * pp * n("--context-parallel-size"),
            "etp x ep x pp": n("--expert-tensor-parallel-size", tp) * n("--expert-model-parallel-size") * pp}
