"""torchtitan's own config read as data: a TOML job config (torchtitan <= 0.2.x, torchtitan/config/job_config.py
JobConfig, `--job.config_file`; 2025's older spellings through torchtitan.spellings) or, since 2026, a Python config
registry module whose functions return `Trainer.Config(...)` (torchtitan/models/<family>/config_registry.py,
`--module M --config F`; the format `perfmodel export --to torchtitan --version 0.3.0` writes), read as its syntax
tree, never run.

Both are turned into one list of dotted keys in torchtitan's own names (`parallelism.tensor_parallel_degree`,
`training.local_batch_size`, `model.flavor`, `model.converters`), which torchtitan.keys maps onto the plan and the
model. A registry function is followed statement by statement: `config = llama3_8b()` then `config.training.x = v`
edits the config another function returned; what the reader cannot follow (a helper called on the config, an `if`)
is named as not read.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

from ...errors import InputError
from ..ledger import Imported, Ledger
from ..reading import NotRead
from ..sources import call_name, functions, literal, module_names, parse_python, read_toml
from .keys import FAMILIES, Entry, apply
from .spellings import respell

WHAT = "torchtitan config"


def read(paths: list[Path], name: str | None) -> Imported:
    """One torchtitan config: a .toml job config, or a .py config registry (`name` picks its function)."""
    if len(paths) != 1:
        raise InputError(f"{WHAT}: {len(paths)} files given; valid: one file, a TOML job config or a Python config "
                         "registry module (torchtitan reads one --job.config_file or one --module)")
    path = paths[0]
    led = Ledger("torchtitan")
    if path.suffix == ".py":
        entries, chosen, custom = registry_entries(path, name)
        return _imported(led, paths, apply(entries, led, python=True, custom=custom), chosen)
    if path.suffix != ".toml":
        raise InputError(f"{WHAT} {str(path)!r}: unknown file type {path.suffix or '(none)'!r}; valid: a .toml job "
                         "config (torchtitan <= 0.2.x) or a .py config registry module")
    if name is not None:
        raise InputError(f"--name {name}: a TOML job config defines one config; valid: no --name")
    data = read_toml(path, WHAT)
    entries, era = respell([Entry(k, v, f"{path.name} [{k.rsplit('.', 1)[0]}]" if "." in k else path.name)
                            for k, v in flatten(data)])
    return _imported(led, paths, apply(entries, led, python=False, era=era), None)


def _imported(led: Ledger, paths: list[Path], model, name: str | None) -> Imported:
    """The import; a global batch of -1 (one accumulation step of every dp rank) waits for the device count."""
    per_dp = led.group("launch").get("global_batch_per_dp")
    deferred = {}
    if per_dp is not None:
        deferred = {"global_batch_per_dp": per_dp,
                    "model_parallel": led.get("plan.tp", 1) * led.get("plan.pp", 1) * led.get("plan.cp", 1)}
    return led.imported(paths, model, name, deferred)


def complete(deferred: dict, gpus: int, system) -> dict:
    """The global batch once --gpus gives dp = gpus / (tp x pp x cp): its per-dp-rank batch x dp."""
    return {"global_batch": deferred["global_batch_per_dp"] * max(gpus // deferred["model_parallel"], 1)}


def flatten(data: dict, prefix: str = "") -> list[tuple[str, object]]:
    """Every leaf key of a TOML document as (dotted key, value); lists are leaves."""
    out = []
    for k, v in data.items():
        key = f"{prefix}{k}"
        out += flatten(v, key + ".") if isinstance(v, dict) else [(key, v)]
    return out


# ---- Python config registries, as data ---------------------------------------------------------------------

class Obj:
    """A call the reader keeps as data: `TrainingConfig(seq_len=8192)` -> Obj('TrainingConfig', [], {...})."""

    def __init__(self, name: str, args: list, kwargs: dict) -> None:
        self.name, self.args, self.kwargs = name, args, kwargs

    def __repr__(self) -> str:
        inner = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(inner)})"


def config_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's functions annotated to return Trainer.Config (a registry's configs)."""
    return {n: f for n, f in functions(tree).items()
            if f.returns is not None and ast.unparse(f.returns).endswith("Trainer.Config")}


def registry_entries(path: Path, name: str | None) -> tuple[list[Entry], str, dict | None]:
    """The keys of config function `name` of registry module `path` (the only one when name is None), the
    function's name, and the sizes of a flavor the module registers itself (the 0.3.0 export's "perfmodel")."""
    tree = parse_python(path, WHAT)
    configs = config_functions(tree)
    if not configs:
        raise InputError(f"{WHAT} {str(path)!r}: no function returning Trainer.Config; valid: a torchtitan config "
                         "registry module (def NAME() -> Trainer.Config)")
    if name is None and len(configs) > 1:
        raise InputError(f"{WHAT} {str(path)!r} defines {len(configs)} configs; valid: --name one of "
                         f"{', '.join(configs)}")
    name = name or next(iter(configs))
    if name not in configs:
        raise InputError(f"--name {name}: {str(path)!r} has no config function of that name; valid: "
                         f"{', '.join(configs)}")
    reader = _Reader(tree, path)
    result = reader.call(name)
    if not isinstance(result, Obj) or not result.name.endswith("Trainer.Config"):
        raise InputError(f"{WHAT} {str(path)!r}: {name}() does not return a Trainer.Config the reader can follow "
                         f"(it returns {result!r}); valid: return Trainer.Config(...) or a config another function "
                         "returned")
    source = f"{path.name} {name}()"
    entries = reader.unread + trainer_keys(result, source, reader.family(name))
    return entries, name, reader.custom_flavor()


class _Reader:
    """Follows config functions as data: assignments, attribute edits of a config, returns."""

    def __init__(self, tree: ast.Module, path: Path) -> None:
        self.tree, self.path = tree, path
        self.names = module_names(tree)
        self.configs = config_functions(tree)
        self.unread: list[Entry] = []
        self.depth = 0

    def call(self, name: str):
        self.depth += 1
        if self.depth > 20:
            raise InputError(f"{WHAT} {str(self.path)!r}: config functions call each other more than 20 deep; valid: "
                             "a registry without cycles")
        env = dict(self.names)
        result = None
        for stmt in self.configs[name].body:
            if isinstance(stmt, ast.Return):
                result = self.value(stmt.value, env) if stmt.value is not None else None
                break
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                value = self.value(stmt.value, env)
                for t in targets:
                    self.assign(t, value, env, name, stmt)
            elif isinstance(stmt, (ast.Assert, ast.Import, ast.ImportFrom, ast.Pass)) or _docstring(stmt):
                continue  # checks and imports: nothing of the config changes
            else:
                self.unread.append(Entry(f"{name}(): {ast.unparse(stmt).splitlines()[0][:80]}", "(statement)",
                                         f"{self.path.name} line {stmt.lineno}", unread=True))
        self.depth -= 1
        return result

    def assign(self, target: ast.AST, value, env: dict, fn: str, stmt: ast.AST) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
            return
        chain = []
        node = target
        while isinstance(node, ast.Attribute):
            chain.insert(0, node.attr)
            node = node.value
        root = env.get(node.id) if isinstance(node, ast.Name) else None
        if not isinstance(root, Obj):
            self.unread.append(Entry(f"{fn}(): {ast.unparse(stmt)[:80]}", "(statement)",
                                     f"{self.path.name} line {stmt.lineno}", unread=True))
            return
        for attr in chain[:-1]:
            nxt = root.kwargs.get(attr)
            if not isinstance(nxt, Obj):  # a section the config left at its defaults: edited field by field
                nxt = root.kwargs[attr] = Obj(f"{attr} (defaults)", [], {})
            root = nxt
        root.kwargs[chain[-1]] = value

    def value(self, node: ast.AST, env: dict):
        if isinstance(node, ast.Call):
            cname = call_name(node)
            if cname in self.configs and not node.args and not node.keywords:
                return copy.deepcopy(self.call(cname))
            return Obj(cname, [self.value(a, env) for a in node.args],
                       {k.arg: self.value(k.value, env) for k in node.keywords if k.arg is not None})
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e, env) for e in node.elts]
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        return literal(node, {k: v for k, v in env.items() if not isinstance(v, Obj)})

    def family(self, fn: str) -> str | None:
        """The model family of a bare `model_registry(...)`: the module's import of it, else the function's name."""
        for stmt in ast.walk(self.tree):
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "model_registry" for a in stmt.names):
                if stmt.module and stmt.module.startswith("torchtitan.models."):
                    return stmt.module.split(".")[2]
                if stmt.level == 1 and not stmt.module and self.path.resolve().parent.name in FAMILIES:
                    return self.path.resolve().parent.name
        return next((f for f in sorted(FAMILIES, key=len, reverse=True) if fn.startswith(f + "_")), None)

    def custom_flavor(self) -> dict | None:
        """Sizes of a flavor the module registers (`llama3.llama3_configs["perfmodel"] = fn`): the keyword values
        of fn's calls (n_layers, n_heads, n_kv_heads, hidden_dim, rope dim) and its literal tuple assignments."""
        for stmt in self.tree.body:
            if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Subscript)
                    and isinstance(stmt.value, ast.Name)):
                key = literal(stmt.targets[0].slice)
                fn = functions(self.tree).get(stmt.value.id)
                if isinstance(key, str) and fn is not None:
                    return {"flavor": key, **_function_sizes(fn)}
        return None


def _docstring(stmt: ast.AST) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _function_sizes(fn: ast.FunctionDef) -> dict:
    names: dict = {}
    sizes: dict = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value,
                                                                                                   ast.Tuple):
            for t, v in zip(node.targets[0].elts, node.value.elts):
                if isinstance(t, ast.Name):
                    names[t.id] = literal(v)
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            cname = call_name(node)
            for k in node.keywords:
                v = literal(k.value, names)
                if isinstance(v, int) and k.arg:
                    sizes[("rope_" if cname.endswith("replace") and k.arg == "dim" else "") + k.arg] = v
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("_configs"):
            base = literal(node.slice)
            if isinstance(base, str):
                sizes["base"] = base
    sizes.update({k: v for k, v in names.items() if isinstance(v, int)})
    return sizes


_SECTIONS = ("training", "parallelism", "compile", "comm", "debug")


def trainer_keys(cfg: Obj, source: str, family: str | None) -> list[Entry]:
    """The keys of a Trainer.Config in the TOML job config's names, where torchtitan kept them."""
    out: list[Entry] = []
    for k, v in cfg.kwargs.items():
        if k == "model_spec":
            out += _model_keys(v, source, family)
        elif k in _SECTIONS and isinstance(v, Obj):
            out += [Entry(f"{k}.{kk}", vv, source) for kk, vv in v.kwargs.items()]
        elif k == "activation_checkpoint":
            mode = ("none" if v is None else "full" if isinstance(v, Obj) and "FullAC" in v.name else
                    "selective" if isinstance(v, Obj) and "SelectiveAC" in v.name else repr(v))
            out.append(Entry("activation_checkpoint.mode", mode, source, written=repr(v)))
            if isinstance(v, Obj):
                out += [Entry(f"activation_checkpoint.{kk}", vv, source) for kk, vv in v.kwargs.items()]
        elif k == "loss" and isinstance(v, Obj):
            chunked = "ChunkedLossWrapper" in v.name
            out.append(Entry("loss.num_chunks", v.kwargs.get("num_chunks", 8) if chunked else 1, source,
                             written=f"{v.name}(num_chunks={v.kwargs.get('num_chunks', 8)})" if chunked else v.name))
        else:
            out.append(Entry(k, v, source))
    return out


def _model_keys(spec, source: str, family: str | None) -> list[Entry]:
    if not (isinstance(spec, Obj) and spec.name.endswith("model_registry") and spec.args):
        return [Entry("model_spec", spec, source, written=repr(spec))]
    prefix = spec.name.rsplit(".", 1)[0] if "." in spec.name else family
    out = [Entry("model.name", prefix, source),
           Entry("model.flavor", spec.args[0], source)]
    for k, v in spec.kwargs.items():
        if k == "converters" and isinstance(v, list):
            names = [c.name.removesuffix(".Config") if isinstance(c, Obj) else repr(c) for c in v]
            out.append(Entry("model.converters", names, source))
            for c, short in zip(v, names):
                if isinstance(c, Obj):
                    out += [Entry(f"model.converters.{short}.{kk}", vv, source) for kk, vv in c.kwargs.items()]
        else:
            out.append(Entry(f"model.{k}", v, source))
    return out


def is_unevaluated(v) -> bool:
    return isinstance(v, (NotRead, Obj))
