"""Regenerate perfmodel/ingest/bridge_bases.json: what each Megatron-Bridge base recipe sets that perfmodel prices,
read from a Megatron-Bridge git checkout with perfmodel's own Bridge reader (the files are read as data, never run).

    python -m benchmarks.tools.bridge_bases [--repo /work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo] [--commit 067f987...]

The bases: every function a perf recipe (src/megatron/bridge/perf_recipes/**) imports from megatron.bridge.recipes, as
the perf recipe calls it (its alias), followed through Bridge's legacy-name alias modules (recipes/<family>/<model>.py:
`from ...h100.llama3 import llama31_405b_pretrain_256gpu_h100_bf16_config as llama31_405b_pretrain_config`) to the
function that defines it; the recipes the year-old perf scripts call (scripts/performance/configs/**/*.py at c3e43e6);
and recipes/common.py's _pretrain_common / _sft_common. Each is read with recipes/common.py beside it; a key is kept
where the reader prices it (its ledger fate is mapped onto a plan or model field), with the line that sets it.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

from benchmarks import ROOT

from perfmodel.errors import InputError
from perfmodel.ingest.bridge import bases as bridge_bases
from perfmodel.ingest.bridge.bases import FILE
from perfmodel.ingest.bridge.fates import fates
from perfmodel.ingest.bridge.reader import annotated, model_of, stated
from perfmodel.ingest.bridge.keys import SHAPE
from perfmodel.ingest.bridge.recipe import Module, Obj, Recipe, flatten, run
from perfmodel.ingest.ledger import Ledger
from perfmodel.ingest.reading import NotRead
from perfmodel.ingest.sources import functions, module_names
from perfmodel.spec.model.catalogue import load_model

HEAD = "067f987df03b8355b03192d88d70f1709fedf51a"
LEGACY = "c3e43e6aa8d6a3bb52a3e2d2a34ef484eb90bd7c"  # the WorkloadBaseConfig tables' perf scripts
COMMON = "src/megatron/bridge/recipes/common.py"
CONTEXT = ("ddp.use_megatron_fsdp", "optimizer.use_precision_aware_optimizer", "model.cpu_offloading",
           "model.fine_grained_activation_offloading")  # keys that decide others' fates
STAND_IN = "llama-3-8b"  # where a base names no preset: the model decides only which keys are priced, not values


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def module(repo: str, commit: str, path: str) -> Module | None:
    try:
        tree = ast.parse(git(repo, "show", f"{commit}:{path}"))
    except subprocess.CalledProcessError:
        return None
    return Module(path, tree, module_names(tree) | annotated(tree), functions(tree))


def path_of(dotted: str) -> str:
    return "src/" + dotted.replace(".", "/") + ".py"


def resolve(repo: str, dotted: str, name: str, depth: int = 0) -> tuple[str, str] | None:
    """(path, function) defining `name` as module `dotted` exports it at HEAD, through `import ... as` aliases."""
    mod = module(repo, HEAD, path_of(dotted))
    if mod is None or depth > 4:
        return None
    if name in mod.functions:
        return mod.file, name
    for stmt in mod.tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("megatron.bridge.recipes"):
            for n in stmt.names:
                if (n.asname or n.name) == name:
                    return resolve(repo, stmt.module, n.name, depth + 1)
    return None


def called(repo: str) -> dict[str, tuple[str, str]]:
    """name as configs call it -> (module it is imported from, its name there)."""
    out = {}
    files = [(HEAD, f) for f in git(repo, "ls-tree", "-r", "--name-only", HEAD, "src/megatron/bridge/perf_recipes").split()]
    files += [(LEGACY, f) for f in git(repo, "ls-tree", "-r", "--name-only", LEGACY, "scripts/performance/configs").split()]
    for commit, f in files:
        if not f.endswith(".py") or "/qwen_vl/" in f or "/wan/" in f:  # multimodal and video: not priced
            continue
        for stmt in ast.parse(git(repo, "show", f"{commit}:{f}")).body:
            if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("megatron.bridge.recipes."):
                for n in stmt.names:
                    if n.name.endswith("_config"):
                        base = (n.asname or n.name) if commit == HEAD else n.name  # the legacy aliases are generic
                        out.setdefault(base, (stmt.module, n.name))
    for name in ("_pretrain_common", "_sft_common"):
        out[name] = ("megatron.bridge.recipes.common", name)
    return out


SKIP = object()  # a value JSON cannot hold (a config section, a value the reader does not read)


def plain(v):
    """A value as JSON holds it: a named precision recipe by its name, a helper's return value (an optimizer
    config: the reader prices Bridge's Muon helper) by the helper's, torch dtypes by theirs; SKIP for the rest."""
    if isinstance(v, Obj):
        return v.origin if v.kind in ("precision", "call") or v.kind.endswith("_mixed") else SKIP
    if isinstance(v, NotRead):
        return str(v) if str(v).startswith("torch.") else SKIP
    if isinstance(v, (list, tuple)):
        items = [plain(x) for x in v]
        return SKIP if any(x is SKIP for x in items) else items
    return v


def priced(keys: dict[str, list]) -> set[str]:
    """The keys perfmodel's reader maps onto a plan field (read with a stand-in model: the shape does not decide)."""
    led = Ledger("bridge")
    try:
        fates({k: (v, at) for k, (v, at) in keys.items()}, led, load_model(STAND_IN))
    except InputError:
        return set()
    shape = {k for k in keys if k.startswith("model.") and k[6:] in SHAPE}  # judged against the config's own model
    return {k.key for k in led.keys if k.fate == "mapped" and k.became} | shape


def read_base(repo: str, path: str, fn: str) -> dict:
    mods = [m for m in (module(repo, HEAD, path), module(repo, HEAD, COMMON) if path != COMMON else None) if m]
    recipe = Recipe(mods)
    root = run(recipe, fn)
    if not isinstance(root, Obj):
        raise InputError(f"{fn} returns {root!r}, not a config")
    final = stated(recipe, root, Ledger("bridge"))
    got = final.get("model", (None, ""))
    named = None
    if isinstance(got[0], Obj) and not got[0].auto and isinstance(got[0].origin, str):
        named = [got[0].kind, got[0].origin, got[1]]
    shape_led = Ledger("bridge")
    try:
        model = model_of(final, shape_led, [Path(path)])
    except InputError:
        model, shape_led = load_model(STAND_IN), Ledger("bridge")
    led = Ledger("bridge")
    fates(final, led, model)
    priced = {k.key for k in led.keys + shape_led.keys if k.fate == "mapped" and k.became and k.key != "model"}
    keys = {k: [plain(final[k][0]), final[k][1]] for k in sorted(priced) if k in final and plain(final[k][0]) is not SKIP}
    line = mods[0].functions[fn].lineno
    return {"defined": f"{path}:{line} {fn}", "model": named, "keys": keys}


def helpers(repo: str) -> dict[str, dict]:
    """The perf recipes' helpers (perf_recipes/_common.py and perf_recipes/<family>/common.py at HEAD), each followed
    with an unknown config for its ConfigContainer parameter and an unknown value for each other parameter without a
    default: the keys it sets unconditionally (a value its parameter gives: {"$arg": name}), and what it returns (the
    config it was given, or a named precision recipe and the keys it sets on it)."""
    out: dict[str, dict] = {}
    shared = module(repo, HEAD, "src/megatron/bridge/perf_recipes/_common.py")
    for f in git(repo, "ls-tree", "-r", "--name-only", HEAD, "src/megatron/bridge/perf_recipes").split():
        if not f.endswith("common.py") or "/qwen_vl/" in f or "/wan/" in f:
            continue
        mod = module(repo, HEAD, f)
        for name, fn in mod.functions.items():
            if name in out or fn.returns is not None and ast.unparse(fn.returns) not in ("None", "ConfigContainer") \
                    and fn.args.args:
                continue
            params = [a.arg for a in fn.args.args]
            cfg_at = next((i for i, a in enumerate(fn.args.args) if a.arg == "cfg" or (a.annotation is not None and
                           ast.unparse(a.annotation) == "ConfigContainer")), None)
            required = len(params) - len(fn.args.defaults)
            args = [Obj("call", "cfg", auto=True) if i == cfg_at else NotRead(f"$arg {p}")
                    for i, p in enumerate(params[:required])]
            recipe = Recipe([m for m in (mod, shared) if m is not None])
            try:
                ret = recipe.call(name, args, {}, name)
            except InputError:
                continue
            owner = args[cfg_at] if cfg_at is not None and cfg_at < len(args) else None
            returned = ret if isinstance(ret, Obj) and (ret.kind == "precision" or ret.kind.endswith("_mixed")) else None
            keys, on_returned = {}, {}
            paths = flatten(owner) if owner is not None else {}
            for w in recipe.writes:
                v = {"$arg": str(w.value)[5:]} if str(w.value).startswith("$arg ") else plain(w.value)
                if v is SKIP:
                    continue
                at = w.where.split(" (")[0] if "_perf_precision sets it" not in w.where else w.where
                if returned is not None and w.obj is returned:
                    on_returned[w.attr] = [v, at]
                elif id(w.obj) in paths and paths[id(w.obj)]:
                    keys[f"{paths[id(w.obj)]}.{w.attr}"] = [v, at]
            # priced together: a key's fate can hang on another's (data_parallel_sharding_strategy prices a ZeRO
            # stage only beside use_megatron_fsdp, an optimizer dtype only beside use_precision_aware_optimizer)
            together = priced(keys)
            keys = {k: v for k, v in keys.items()
                    if "$arg" in str(v[0]) or k in together or k in CONTEXT or k in priced({k: v})}
            out[name] = {"defined": f"{f}:{fn.lineno} {name}", "params": params, "config": cfg_at,
                         "returns": "config" if owner is not None and ret is owner else
                         {"precision": returned.origin, "keys": on_returned} if returned is not None else None,
                         "keys": keys}
    return out


def dump(table: dict) -> str:
    """The JSON, one base key a line (reviewable as a diff)."""
    lines = ["{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in table.items()
                   if k not in ("bases", "helpers")) + ",",
             ' "bases": {']
    for i, (name, b) in enumerate(table["bases"].items()):
        lines.append(f"  {json.dumps(name)}: {{\"defined\": {json.dumps(b['defined'])}, \"model\": "
                     f"{json.dumps(b['model'])}, \"keys\": {{")
        lines += [f"    {json.dumps(k)}: {json.dumps(v)}," for k, v in b["keys"].items()]
        if b["keys"]:
            lines[-1] = lines[-1].rstrip(",")
        lines.append("  }}" + ("," if i < len(table["bases"]) - 1 else ""))
    lines += [" },", ' "helpers": {']
    helpers_ = list(table["helpers"].items())
    for i, (name, h) in enumerate(helpers_):
        lines.append(f"  {json.dumps(name)}: {json.dumps(h)}" + ("," if i < len(helpers_) - 1 else ""))
    return "\n".join(lines + [" }", "}"]) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default="/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
    a = ap.parse_args(argv)
    FILE.write_text(json.dumps({"commit": HEAD, "bases": {}, "helpers": {}}))  # read Bridge as it is, not the table
    bridge_bases._table.cache_clear()
    bases, skipped = {}, []
    for name, (dotted, original) in sorted(called(a.repo).items()):
        where = resolve(a.repo, dotted, original)
        if where is None:
            skipped.append(f"{name}: not found from {dotted} at HEAD")
            continue
        try:
            bases[name] = read_base(a.repo, *where)
        except InputError as err:
            skipped.append(f"{name}: {err}")
    FILE.write_text(dump({"source": "NVIDIA-NeMo/Megatron-Bridge", "commit": HEAD,
                          "generated_by": "benchmarks/tools/bridge_bases.py", "bases": bases, "helpers": helpers(a.repo)}))
    print(f"{len(bases)} bases written to {FILE.relative_to(ROOT)}")
    for s in skipped:
        print(f"  skipped {s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
