"""A Megatron-Bridge recipe function read as data: its statements followed over the syntax tree (never run) to the
ConfigContainer it returns, as `section.key -> value` with where each value was stated.

What is followed: assignments to names and to attributes (`cfg.model.tensor_model_parallel_size = 2`), config
constructors' keywords (`TrainingConfig(global_batch_size=512)`), calls of functions defined in the recipe module
or in another module the user passes (`_llama3_common(**combined_kwargs)`, `_pretrain_common()`), their keyword
defaults, `{**a, **b}` merges, `if` on what is known, `try`, and list, tuple, dict and arithmetic expressions of
known values. A call to anything else is kept as text (a `NotRead`, with why), and its keywords named, never
guessed. The design, and the budget that refuses a recipe whose helpers recurse, are perfmodel.ingest.reading's,
which the shell reader shares.
"""

from __future__ import annotations

import ast
import builtins
from typing import Any

from . import bases as bridge_bases
from .calls import CALL, NOT_HANDLED, apply_helper, base_call, bridge_call
from .objects import Module, Noted, Obj, Stop, Write
from .peft import scheme_object
from ..reading import MAX_LIST, Budget, NotRead, OverBudget, refusal

BUILTIN_TYPES = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict}

# why a value is not read (CALL: a call this import does not follow)
NAME = "a name the files do not define (an import, a global)"
PART = "a part of a value not read, or one the recipe does not set"
EXPRESSION = "an expression over a value not read, or one this reader does not compute"
PRECISION_CALLS = {"get_mixed_precision_config"}  # get_mixed_precision_config("bf16_mixed") names a recipe
MODEL_CALLS = {"to_megatron_provider", "get_model_config"}  # AutoBridge.from_hf_pretrained(ID).<these>()


class Recipe:
    """Follows recipe functions over the modules given; `writes` and `noted` keep what each statement stated."""

    def __init__(self, modules: list[Module]) -> None:
        self.modules = modules
        self.writes: list[Write] = []
        self.noted: list[Noted] = []
        self.passed: list[tuple[str, Any, str]] = []  # arguments a helper took that set no key by name
        self.launch: list[tuple[str, Any, str]] = []  # (key, GPU count, where) a WorkloadBaseConfig's num_gpus
        self.budget = Budget("statements")
        # `from X import a as b` of the modules given: b -> (a, the module importing it), which X is not: Bridge's
        # legacy recipe names alias the functions (a perf module may import a recipe under its own function's name)
        self.imports = {n.asname: (n.name, m) for m in modules for s in m.tree.body if isinstance(s, ast.ImportFrom)
                        for n in s.names if n.asname and n.asname != n.name}
        self.aliases = {b: a for b, (a, _) in self.imports.items()}
        self.shared: dict[str, Any] = {}  # module-level names of every module given, for the names one imports
        for m in modules:
            self.shared |= {k: v for k, v in m.names.items() if k not in self.shared}

    def find(self, name: str) -> tuple[Module, ast.FunctionDef] | None:
        """The module function `name` names: defined in a module given, else through `import ... as name` in another."""
        importer = None
        for _ in range(len(self.imports) + 1):
            for m in self.modules:
                if name in m.functions and m is not importer:
                    return m, m.functions[name]
            if name not in self.imports:
                return None
            name, importer = self.imports[name]
        return None

    def call(self, name: str, args: list, kwargs: dict[str, Any], where: str) -> Any:
        """Follow the module function `name` with these arguments; its return value."""
        mod, fn = self.find(name)
        try:
            self.budget.enter()
        except OverBudget as over:
            raise refusal(f"Megatron-Bridge recipe {where}", str(over), "a recipe module whose helpers do not "
                          "recurse") from None
        env: dict[str, Any] = dict(mod.names)
        origin: dict[str, str] = {}
        a = fn.args
        params = a.posonlyargs + a.args
        defaults = dict(zip([p.arg for p in params][len(params) - len(a.defaults):], a.defaults))
        defaults |= {p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
        for p, v in zip(params, args):
            env[p.arg], origin[p.arg] = v, where
        for p in params + a.kwonlyargs:
            if p.arg in kwargs:
                env[p.arg], origin[p.arg] = kwargs.pop(p.arg)
            elif p.arg not in env and p.arg in defaults:
                env[p.arg] = self.value(defaults[p.arg], env, {}, mod, fn)
                origin[p.arg] = f"{mod.file}:{defaults[p.arg].lineno} {fn.name}'s default"
        if a.kwarg is not None:
            env[a.kwarg.arg] = {k: v for k, (v, _) in kwargs.items()}  # **user_kwargs: none unless the caller passes
        passed = {p: (env[p], origin[p]) for p in list(origin) if p not in defaults or not origin[p].endswith(
            "'s default")}
        try:
            return self.block(fn.body, env, origin, mod, fn)
        except _Return as r:
            return r.value
        finally:
            self.budget.leave()
            said = " ".join(w.where for w in self.writes) + " ".join(n.where for n in self.noted)
            self.passed += [(f"{fn.name}({p}=...)", v, at) for p, (v, at) in passed.items()
                            if f"({p} from " not in said]

    # ---- statements ------------------------------------------------------------------------------------------

    def block(self, body: list[ast.stmt], env: dict, origin: dict, mod: Module, fn: ast.FunctionDef) -> Any:
        """Run statements; the value a `return` gives (a `_Return` carries it out of nested blocks)."""
        for stmt in body:
            try:
                self.budget.step()
            except OverBudget as over:
                raise refusal(f"Megatron-Bridge recipe {mod.file}", str(over), "a recipe module (hundreds of "
                              "statements)") from None
            where = f"{mod.file}:{stmt.lineno} {fn.name}"
            if isinstance(stmt, ast.Return):
                raise _Return(self.value(stmt.value, env, origin, mod, fn) if stmt.value else None)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if stmt.value is None:
                    continue
                v = self.value(stmt.value, env, origin, mod, fn)
                for t in targets:
                    self.assign(t, v, stmt.value, env, origin, where, mod, fn)
            elif isinstance(stmt, ast.If):
                test = self.value(stmt.test, env, origin, mod, fn)
                if isinstance(test, (NotRead, Obj)):
                    for s in ast.walk(ast.Module(body=stmt.body + stmt.orelse, type_ignores=[])):
                        if isinstance(s, (ast.Assign, ast.Expr)) and s is not stmt:
                            self.noted.append(Noted(ast.unparse(s).split("\n")[0], "", f"{mod.file}:{s.lineno} "
                                                    f"{fn.name}", f"runs only if {ast.unparse(stmt.test)}, which "
                                                    "the recipe leaves to what it does not state"))
                else:
                    self.block(stmt.body if test else stmt.orelse, env, origin, mod, fn)
            elif isinstance(stmt, ast.Try):
                try:
                    self.block(stmt.body, env, origin, mod, fn)
                except Stop:
                    pass
            elif isinstance(stmt, ast.Raise):
                raise Stop(where)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                self.value(stmt.value, env, origin, mod, fn)
            elif isinstance(stmt, (ast.Expr, ast.Assert, ast.Pass, ast.Import, ast.ImportFrom)):
                continue  # docstrings, asserts on what the recipe built
            else:
                self.noted.append(Noted(type(stmt).__name__.lower(), ast.unparse(stmt).split("\n")[0][:80], where,
                                        "a statement this import does not follow (loops, with, del)"))
        return None

    def assign(self, target, v, node, env, origin, where, mod, fn) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = v
            if isinstance(node, ast.Name) and node.id in origin:
                origin[target.id] = origin[node.id]
        elif isinstance(target, ast.Attribute):
            owner = self.value(target.value, env, origin, mod, fn)
            if isinstance(owner, Obj):
                owner.attrs[target.attr] = v
                self.writes.append(Write(owner, target.attr, v, self.stated(where, node, origin)))
            else:
                self.noted.append(Noted(ast.unparse(target), v, where, "sets an attribute of something the recipe "
                                        "does not build as a config (the result of a call this import does not follow)"))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, t in enumerate(target.elts):
                part = (v[i] if isinstance(v, (list, tuple)) and len(v) == len(target.elts) else
                        Obj("call", f"{v.origin}[{i}]", auto=True) if isinstance(v, Obj) and v.auto else
                        NotRead(f"{ast.unparse(node)}[{i}]", PART))
                self.assign(t, part, node, env, origin, where, mod, fn)

    @staticmethod
    def stated(where: str, node, origin: dict) -> str:
        """Where a value was stated: the line, and for a helper's parameter where its value came from."""
        if isinstance(node, ast.Name) and node.id in origin:
            return f"{where} ({node.id} from {origin[node.id]})"
        return where

    # ---- expressions -----------------------------------------------------------------------------------------

    def value(self, node: ast.AST, env: dict, origin: dict, mod: Module, fn: ast.FunctionDef) -> Any:
        ev = lambda n: self.value(n, env, origin, mod, fn)  # noqa: E731
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env[node.id] if node.id in env else self.shared.get(node.id, NotRead(node.id, NAME))
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [ev(e) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.Dict):
            out: dict = {}
            for k, v in zip(node.keys, node.values):
                got = ev(v)
                if k is None:  # {**a, **b}
                    if not isinstance(got, dict):
                        return NotRead(ast.unparse(node), PART)
                    out |= got
                else:
                    key = ev(k)
                    out[key if not isinstance(key, list) else tuple(key)] = got
            return out
        if isinstance(node, ast.Attribute):
            owner = ev(node.value)
            if isinstance(owner, Obj) and owner.auto and node.attr not in owner.attrs:
                owner.attrs[node.attr] = Obj("call", f"{owner.origin}.{node.attr}", auto=True)
            if isinstance(owner, Obj):
                return owner.attrs.get(node.attr, NotRead(ast.unparse(node), PART))
            return NotRead(ast.unparse(node), PART)
        if isinstance(node, ast.Subscript):
            owner, key = ev(node.value), ev(node.slice)
            key = tuple(key) if isinstance(key, list) else key
            try:
                if isinstance(owner, (dict, list, tuple)) and not isinstance(key, NotRead):
                    return owner[key]
            except (KeyError, IndexError, TypeError):
                pass
            return NotRead(ast.unparse(node), PART)
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            if any(isinstance(v, NotRead) for v in vals):
                return NotRead(ast.unparse(node), EXPRESSION)
            out = vals[0]
            for v in vals[1:]:
                out = (out or v) if isinstance(node.op, ast.Or) else (out and v)
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            v = ev(node.operand)
            if isinstance(v, (NotRead, Obj)):
                return NotRead(ast.unparse(node), EXPRESSION)
            return (not v) if isinstance(node.op, ast.Not) else -v
        if isinstance(node, ast.BinOp):
            return self.binop(node, ev(node.left), ev(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = ev(node.left), ev(node.comparators[0])
            if isinstance(a, NotRead) or isinstance(b, NotRead):
                return NotRead(ast.unparse(node), EXPRESSION)
            op = type(node.ops[0])
            b = [tuple(x) if isinstance(x, list) else x for x in b] if op in (ast.In, ast.NotIn) and isinstance(
                b, (list, tuple)) else b
            a = tuple(a) if isinstance(a, list) and op in (ast.In, ast.NotIn) else a
            table = {ast.Is: lambda: a is b, ast.IsNot: lambda: a is not b, ast.Eq: lambda: a == b,
                     ast.NotEq: lambda: a != b, ast.In: lambda: a in b, ast.NotIn: lambda: a not in b}
            if op in table:
                return table[op]()
        if isinstance(node, ast.IfExp):
            test = ev(node.test)
            if isinstance(test, (NotRead, Obj)):
                return NotRead(ast.unparse(node), EXPRESSION)
            return ev(node.body) if test else ev(node.orelse)
        if isinstance(node, ast.Call):
            return self.calls(node, env, origin, mod, fn)
        return NotRead(ast.unparse(node), EXPRESSION)

    @staticmethod
    def binop(node: ast.BinOp, a, b):
        num = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)  # noqa: E731
        if isinstance(node.op, ast.Add) and isinstance(a, list) and isinstance(b, list):
            return a + b
        if isinstance(node.op, ast.Mult) and isinstance(a, list) and isinstance(b, int) and len(a) * b <= MAX_LIST:
            return a * b
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b, ast.Div: lambda: a / b}
        if type(node.op) in ops and num(a) and num(b) and abs(a) < 2**50 and abs(b) < 2**50 and not (
                isinstance(node.op, (ast.FloorDiv, ast.Mod, ast.Div)) and b == 0):
            return ops[type(node.op)]()
        return NotRead(ast.unparse(node), EXPRESSION)

    def calls(self, node: ast.Call, env, origin, mod, fn) -> Any:
        ev = lambda n: self.value(n, env, origin, mod, fn)  # noqa: E731
        where = f"{mod.file}:{node.lineno} {fn.name}"
        name = ast.unparse(node.func)
        short = name.rsplit(".", 1)[-1]
        args = [ev(a) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs: dict[str, tuple[Any, str]] = {}
        for kw in node.keywords:
            got = ev(kw.value)
            if kw.arg is None:  # **combined_kwargs: each key stated where the dict was built
                for k, v in (got.items() if isinstance(got, dict) else []):
                    kwargs[str(k)] = (v, self.stated(where, kw.value, origin))
            else:
                kwargs[kw.arg] = (got, self.stated(where, kw.value, origin))
        if isinstance(node.func, ast.Name) and self.find(name):
            return self.call(name, args, kwargs, where)
        if short in ("from_hf_pretrained",) and args:
            return Obj("AutoBridge", args[0])
        if short in MODEL_CALLS:
            owner = ev(node.func.value) if isinstance(node.func, ast.Attribute) else None
            return Obj("AutoBridge", owner.origin) if isinstance(owner, Obj) else NotRead(name, CALL)
        if short in PRECISION_CALLS and args:
            return Obj("precision", args[0])
        if short in ("float", "int") and len(args) == 1 and isinstance(args[0], (int, float)):
            return float(args[0]) if short == "float" else int(args[0])
        if short == "isinstance" and len(args) == 2 and isinstance(node.args[1], ast.Name):
            x, cls = args[0], node.args[1].id
            if isinstance(x, Obj) and not x.auto:
                return x.kind == cls or (cls == "MixedPrecisionConfig" and x.kind in ("precision", cls)) or (
                    cls == "MixedPrecisionConfig" and x.kind.endswith("_mixed"))
            if cls in BUILTIN_TYPES and (x is None or isinstance(x, (str, int, float, bool, list, dict))):
                return isinstance(x, BUILTIN_TYPES[cls])
            if x is None or isinstance(x, (str, int, float)):
                return False
        if short in ("lower", "upper") and isinstance(node.func, ast.Attribute) and not args:  # "LoRA".lower()
            owner = ev(node.func.value)
            if isinstance(owner, str):
                return owner.lower() if short == "lower" else owner.upper()
        if short == "getattr" and len(args) >= 2 and isinstance(args[0], Obj):
            return args[0].attrs.get(args[1], args[2] if len(args) > 2 else NotRead(ast.unparse(node), PART))
        if short == "default_peft_config":  # recipes/utils/dataset_utils.py:48: "lora" -> LoRA(**kwargs), ...
            scheme = args[0] if args else kwargs.pop("peft_scheme", (None, ""))[0]
            peft = scheme_object(scheme)
            if peft is not None:
                for k, (v, at) in kwargs.items():
                    peft.attrs[k] = v
                    self.writes.append(Write(peft, k, v, at))
                return peft
            return None if scheme is None or str(scheme).lower() == "none" else NotRead(ast.unparse(node), CALL)
        got = bridge_call(self, short, args, kwargs, where)
        if got is not NOT_HANDLED:
            return got
        if short[:1].isupper() or short.endswith("_mixed"):  # a config class, a provider, a precision recipe
            obj = Obj(short, short if short.endswith(("_mixed",)) or "Provider" in short else None)
            for k, (v, at) in kwargs.items():
                obj.attrs[k] = v
                self.writes.append(Write(obj, k, v, at))
            return obj
        base_fn = isinstance(node.func, ast.Name) and name not in dir(builtins)
        scheme = kwargs.pop("peft_scheme", None) if base_fn else None  # a fine-tuning base recipe's PEFT
        for k, (v, at) in kwargs.items():
            self.noted.append(Noted(f"{name}({k}=...)", v, at, f"an argument of {name}, a function this import "
                                    "does not follow"))
        known = bridge_bases.helper(self.aliases.get(name, name)) if isinstance(node.func, ast.Name) else None
        if known is not None:  # a perf recipes' helper not among the files: what it sets at 067f987
            return apply_helper(self, name, known, args, kwargs, where)
        if any(isinstance(a, Obj) for a in args):  # _llama_benchmark_common(cfg): it may set anything on cfg
            self.noted.append(Noted(f"{name}(...)", "", where, f"{name} is not among the files: what it sets on the "
                                    "config is not read (pass the module that defines it)"))
        if base_fn:  # a function not among the files (_pretrain_common()): its result's sections hold what the
            # recipe states after it; peft_scheme="lora" is default_peft_config's LoRA (bridge.peft)
            cfg = base_call(name if bridge_bases.base(name) else self.aliases.get(name, name), where)
            if scheme is not None:
                cfg.attrs["peft"] = scheme_object(scheme[0])
                self.writes.append(Write(cfg, "peft", cfg.attrs["peft"], scheme[1]))
            return cfg
        return NotRead(ast.unparse(node), CALL)


class _Return(Exception):
    def __init__(self, value) -> None:
        self.value = value


def run(recipe: Recipe, name: str) -> Any:
    """The value the recipe function `name` returns (a ConfigContainer `Obj`)."""
    try:
        return recipe.call(name, [], {}, name)
    except Stop as s:
        raise refusal(f"Megatron-Bridge recipe {name}", f"reaches a raise at {s}", "a recipe that builds its "
                      "config") from None
    return None


def flatten(root: Obj) -> dict[int, str]:
    """id(object) -> its dotted path under the returned ConfigContainer ('' for the container itself)."""
    paths = {id(root): ""}
    todo = [root]
    while todo:
        obj = todo.pop()
        for k, v in obj.attrs.items():
            if isinstance(v, Obj) and id(v) not in paths:
                paths[id(v)] = f"{paths[id(obj)]}.{k}".lstrip(".")
                todo.append(v)
    return paths
