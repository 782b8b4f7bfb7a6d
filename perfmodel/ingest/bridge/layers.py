"""The override layers of a Megatron-Bridge run (`perfmodel import --from bridge`), each read as data: a YAML file
of `model:` / `train:` / ... sections (Bridge's `--config-file`), and Hydra-style `section.key=value` words (a launch
line, or a file of them) -- each `section.key -> (value, where)`."""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import InputError
from ..shell.script import Script
from ..sources import read_text, read_yaml

WORD = re.compile(r"^\+{0,2}([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)=(.*)$")
TOP = re.compile(r"^\+{0,2}(mixed_precision|comm_overlap|peft)=(.*)$")  # whole sections a word may replace

Stated = tuple[object, str]  # (value, where)


def yaml_layer(path: Path) -> dict[str, Stated]:
    data = read_yaml(path, "Megatron-Bridge override YAML")
    out: dict[str, Stated] = {}

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and prefix.count(".") < 1:  # sections and their sub-configs (comm_overlap, ...)
                walk(v, key + ".")
            else:
                out[key] = (v, path.name)
    walk(data, "")
    return out


def parse_word(text: str):
    """A Hydra override value: int, float, true/false, null, a list, else the text (quotes dropped)."""
    t = text.strip().strip("'\"")
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    if t.startswith("[") and t.endswith("]"):
        return [parse_word(x) for x in t[1:-1].split(",") if x.strip()]
    return t


def word_layer(path: Path) -> dict[str, Stated]:
    """`section.key=value` words of a launch line or a file of them; one key stated twice differently is refused."""
    where = f"Megatron-Bridge overrides {str(path)!r}"
    script = Script(read_text(path, "Megatron-Bridge overrides"), where)
    commands, env = script.commands, script.scalars()
    out: dict[str, Stated] = {}
    alone = [f"{k}={v}" for k, v in env.items() if TOP.match(f"{k}={v}")]  # a line of its own reads as shell's
    for word in [w for c in commands for w in c] + alone:
        m = WORD.match(word) or TOP.match(word)
        if not m:
            continue
        key, value = m.group(1), parse_word(m.group(2))
        if key in out and out[key][0] != value:
            raise InputError(f"bridge config contradicts itself: {path.name} states {key}={out[key][0]} and "
                             f"{key}={m.group(2)}; valid: one of them")
        out[key] = (value, path.name)
    if not out:
        raise InputError(f"{where}: no section.key=value override word (and not .py or .yaml); valid: words such "
                         "as model.tensor_model_parallel_size=8 train.global_batch_size=1024")
    return out
