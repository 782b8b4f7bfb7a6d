"""MaxText's config files as layers of keys (read as data, never run): YAML configs (base.yml, a model's YAML, a
config of overrides), `key=value` words of a train command in a shell script or in a Kubernetes / xpk manifest's
container command, and `MaxTextModel(...)` recipes of a Python benchmark module (MaxText's
benchmarks/maxtext_trillium_model_configs.py). Each file also gives what its launch states: the TPU slice type and
the slices.

MaxText's layering (maxtext e591f30, src/maxtext/configs/pyconfig.py _initialize_pydantic): base.yml and the
config file's base_config chain, then configs/models/<model_name>.yml, then the command line's key=value words
(OmegaConf.from_cli, YAML-typed). MaxText's benchmarks/maxtext_xpk_runner.py runs a recipe as
`model_name=<model_type>` plus its tuning_params on the command line; benchmark_utils._add_to_model_dictionary keys
recipes by model_name with '-' as '_'.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ...errors import InputError
from ..shell.script import Script
from ..reading import NotRead
from ..sources import call_name, literal, module_names, options, parse_python, read_text, read_yaml

# a train entry point: python3 -m MaxText.train / maxtext.trainers.pre_train.train(_compile) / MaxText/train.py
_TRAIN = re.compile(r"(^|[./])(MaxText|maxtext)[./](trainers[./]pre_train[./])?train(_compile)?(\.py)?$")
_STOP = {"&&", "||", ";", "|", "&"}


@dataclass
class Layer:
    """One layer of keys, in the order stated: kind base | config | model | overrides."""

    kind: str
    source: str
    items: list[tuple[str, Any]]
    launch: dict[str, Any] = field(default_factory=dict)  # slice, slices, chips, accelerator, recipe, (and where)


def typed(text: str) -> Any:
    """A command-line value as OmegaConf.from_cli types it (YAML scalars: 2 -> int, true -> bool, '' -> '')."""
    try:
        v = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text
    return text if v is None and text.strip() not in ("null", "~") else v


def yaml_layer(path: Path) -> list[Layer]:
    data = read_yaml(path, "MaxText config")
    if "apiVersion" in data and "kind" in data:
        return manifest_layers(path, data)
    keys = set(data)
    if path.name in ("base.yml", "base.yaml") or "mesh_axes" in keys or len(keys) > 150:
        kind = "base"
    elif "base_config" in keys:  # a config layered on base.yml (configs/gpu/models/*.yml), not a model YAML
        kind = "config"
    elif path.parent.name == "models" or ("decoder_block" in keys and not any(
            k.startswith(("ici_", "dcn_")) or k in ("per_device_batch_size", "base_config") for k in keys)):
        kind = "model"
    else:
        kind = "config"
    return [Layer(kind, str(path), list(data.items()))]


def train_words(words: list[str]) -> tuple[str | None, list[str]] | None:
    """(the config path, the key=value words) of a train command among `words`, or None."""
    for i, w in enumerate(words):
        if _TRAIN.search(w):
            rest, config = words[i + 1:], None
            out = []
            sub = any(w.startswith("(") for w in words[:i])  # inside `( ... )`: a word ending in ")" closes it
            for j, a in enumerate(rest):
                end = a in _STOP or a.endswith(";") or (sub and a.endswith(")"))
                a = a.rstrip(";)") if end and a not in _STOP else a
                if a in _STOP:
                    break
                if j == 0 and a.endswith((".yml", ".yaml")):
                    config = a
                elif "=" in a and not a.startswith("-"):
                    out.append(a)
                if end:
                    break
            return config, out
    return None


def command_layers(commands: list[list[str]], where: str) -> tuple[list[tuple[str, Any]], dict]:
    """The key=value words of the train command among `commands` and the launch facts (benchmark_runner's and
    xpk's flags); several train commands are refused."""
    found, launch = [], {}
    for words in commands:
        opts = dict(options(words))
        text = " ".join(words)
        if "benchmark_runner" in text or re.search(r"\bxpk(\.py)?\b", text):
            for flag in ("--device_type", "--device-type", "--tpu-type", "--tpu_type"):
                if opts.get(flag):
                    launch["slice"] = (opts[flag], f"{where}: {flag}")
            for flag in ("--num_slices", "--num-slices"):
                if opts.get(flag):
                    launch["slices"] = (typed(opts[flag]), f"{where}: {flag}")
            if opts.get("--model_name"):
                launch["recipe"] = (opts["--model_name"], f"{where}: --model_name")
            if opts.get("--command"):
                inner = Script(opts["--command"], f"{where}: --command").commands
                items, more = command_layers(inner, f"{where}: --command")
                launch.update(more)
                if items:
                    found.append(items)
        hit = train_words(words)
        if hit:
            config, kv = hit
            items = [("(config file)", config)] if config else []
            items += [(k, typed(v)) for k, v in (a.split("=", 1) for a in kv)]
            found.append(items)
    if len(found) > 1 and any(f != found[0] for f in found[1:]):
        raise InputError(f"{where}: {len(found)} different MaxText train commands; valid: a script or manifest with "
                         "one (pass each run's file on its own)")
    return (found[0] if found else []), launch


def shell_layer(path: Path) -> list[Layer]:
    commands = Script(read_text(path, "MaxText launch script"), str(path)).commands
    items, launch = command_layers(commands, str(path))
    if not items and not launch:
        raise InputError(f"MaxText launch script {str(path)!r}: no MaxText train command (python3 -m MaxText.train "
                         "or maxtext.trainers.pre_train.train) and no benchmark_runner / xpk launch in it; valid: a "
                         "script that runs one")
    return [Layer("overrides", str(path), items, launch)]


def _walk(node, found: dict) -> None:
    """Collect a manifest's container commands, TPU node selectors, chip limits and slice replicas."""
    if isinstance(node, dict):
        sel = node.get("nodeSelector")
        if isinstance(sel, dict):
            for k, key in (("cloud.google.com/gke-tpu-accelerator", "accelerator"),
                           ("cloud.google.com/gke-tpu-topology", "topology")):
                if sel.get(k):
                    found[key] = str(sel[k])
        if isinstance(node.get("replicatedJobs"), list):
            reps = [j.get("replicas", 1) for j in node["replicatedJobs"] if isinstance(j, dict)]
            found["slices"] = sum(r for r in reps if isinstance(r, int))
        for c in node.get("containers", []) if isinstance(node.get("containers"), list) else []:
            if isinstance(c, dict):
                cmd = [str(w) for w in (c.get("command") or []) + (c.get("args") or [])]
                found.setdefault("commands", []).append(cmd)
        for v in node.values():
            _walk(v, found)
    elif isinstance(node, list):
        for v in node:
            _walk(v, found)


def manifest_layers(path: Path, data: dict) -> list[Layer]:
    """A Kubernetes JobSet / Job (xpk's, tpu-recipes' k8s_manifest.yaml): the container's train command, and the
    slice from the GKE node selectors (cloud.google.com/gke-tpu-accelerator, gke-tpu-topology) and replicas."""
    found: dict = {}
    _walk(data, found)
    commands = []
    for cmd in found.get("commands", []):
        if len(cmd) >= 3 and cmd[1] == "-c" and cmd[0].endswith(("bash", "sh")):
            more = Script(cmd[2] + " " + " ".join(cmd[3:]), f"{path} (container command)").commands
            commands += more
        else:
            commands.append(cmd)
    items, launch = command_layers(commands, f"{path} (container command)")
    if not items:
        raise InputError(f"Kubernetes manifest {str(path)!r}: no container runs a MaxText train command; valid: a "
                         "manifest whose container command or args run python3 -m MaxText.train")
    where = f"{path}: nodeSelector"
    if "accelerator" in found:
        launch["accelerator"] = (found["accelerator"], f"{where} cloud.google.com/gke-tpu-accelerator")
    if "topology" in found:
        launch["topology"] = (found["topology"], f"{where} cloud.google.com/gke-tpu-topology")
    if "slices" in found:
        launch["slices"] = (found["slices"], f"{path}: replicatedJobs replicas")
    return [Layer("overrides", str(path), items, launch)]


def recipes(path: Path) -> dict[str, tuple[str, list[tuple[str, Any]], list[tuple[str, Any]]]]:
    """The MaxTextModel(...) calls of a benchmark module: model_name -> (model_type, tuning_params items, the
    other arguments)."""
    tree = parse_python(path, "MaxText benchmark recipes")
    names = module_names(tree)
    out = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and call_name(node).split(".")[-1] == "MaxTextModel"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        name = literal(kw["model_name"], names) if "model_name" in kw else None
        if not isinstance(name, str):
            continue
        mtype = literal(kw["model_type"], names) if "model_type" in kw else "default"
        params = _dict_items(kw.get("tuning_params"), names)
        others = [(k, literal(v, names)) for k, v in kw.items() if k not in ("model_name", "model_type",
                                                                             "tuning_params")]
        out[name] = (mtype, params, others)
    return out


def _dict_items(node, names: dict) -> list[tuple[str, Any]]:
    """A dict display's items, `**NAME` entries expanded from the module's literal dicts."""
    if node is None:
        return []
    if isinstance(node, ast.Name) and isinstance(names.get(node.id), dict):
        return list(names[node.id].items())
    if not isinstance(node, ast.Dict):
        return [("tuning_params", NotRead(ast.unparse(node)))]
    items = []
    for k, v in zip(node.keys, node.values):
        if k is None:
            items += _dict_items(v, names)
        else:
            items.append((literal(k, names), literal(v, names)))
    return items


def recipe_layer(path: Path, name: str | None) -> tuple[Layer, str]:
    found = recipes(path)
    if not found:
        raise InputError(f"MaxText benchmark recipes {str(path)!r}: no MaxTextModel(model_name=..., tuning_params="
                         "{...}) call; valid: a module like MaxText's benchmarks/maxtext_trillium_model_configs.py")
    by_key = {n.replace("-", "_"): n for n in found}
    if name is None and len(found) == 1:
        name = next(iter(found))
    if name is None:
        raise InputError(f"{str(path)!r} defines {len(found)} MaxText recipes; valid: --name one of "
                         f"{', '.join(found)}")
    real = name if name in found else by_key.get(name.replace("-", "_"))
    if real is None:
        raise InputError(f"--name = {name!r} is not a recipe of {str(path)!r}; valid: {', '.join(found)}")
    mtype, params, others = found[real]
    where = f"{path}: MaxTextModel {real!r}"
    return Layer("overrides", where, [("model_name", mtype), *params], {"others": others}), real
