"""The counting: a Counter sees every Python-level torch call of a model's forward and backward (a TorchFunctionMode
over a TorchDispatchMode), classifies it by kind, and attributes it to the operator in force (module hooks driven by a
stack's rules; backward nodes by their autograd sequence numbers); summarize() turns its tally into calls per operator
and pass. Also the emulations that make a CPU run count what a GPU run dispatches (fused RMSNorm and SDPA, compiled
and fused regions), and the tiny batch every stack runs. The package docstring says what each kind is and how the
attribution works; the stacks' rules are theirs (stacks/).
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import json
import re
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from perfmodel.spec.model.operators import GRAPH_OPS

KINDS = ("eager_op", "view_op", "module_call", "fused_module", "autograd_node", "nccl_call", "compiled_entry",
         "compiled_kernel", "graph_replay", "kernel_launch")
PASSES = ("forward", "backward")
LAYER_OPS = ("norm1", "qkv", "attention", "out_proj", "residual1", "norm2", "mlp_in", "activation", "mlp_out", "moe",
             "residual2")
EXTRA = ("_layer", "_model")
DEVICE = torch.device("cpu")  # --gpu-check runs the counts on cuda (no emulation) to check the CPU's emulation


# aten ops that launch no kernel: allocations, aliasing and bookkeeping (views are OpOverload.is_view)
NO_KERNEL = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "_unsafe_view", "lift_fresh",
             "resize_", "set_", "_reshape_alias", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
             "is_same_size", "record_stream", "_has_compatible_shallow_copy_type", "detach", "alias"}
NO_KERNEL_NAMESPACES = {"profiler"}  # record_function's enter/exit: bookkeeping, no kernel
CONVERSIONS = {"to", "float", "half", "bfloat16", "double", "type", "type_as", "_to_copy", "cuda", "cpu", "long", "int",
               "bool", "copy_", "clone", "contiguous"}
# ops that CUDA autocast runs in fp32 and CPU autocast leaves alone (torch._C._dispatch_dump: AutocastCUDA, not
# AutocastCPU): a bf16 input to one of them is one cast more on a GPU than here (noted, "cuda_autocast_would_cast")
CUDA_ONLY_FP32 = {"layer_norm", "rms_norm", "softmax", "log_softmax", "pow", "exp", "sum", "rsqrt", "addcmul", "cumsum",
                  "norm", "group_norm", "cosine_similarity"}
# modules that only hold others
CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential, nn.ParameterList, nn.ParameterDict)


def op_name(func) -> str:
    """'add' of aten.add.Tensor."""
    return func._schema.name.split("::")[-1] if hasattr(func, "_schema") else str(func)


def is_torch_leaf(m: nn.Module) -> bool:
    """A torch.nn leaf: an instance of a torch.nn.modules class (or a subclass of one) without child modules."""
    if next(m.children(), None) is not None:
        return False
    return _torch_class(type(m))


@__import__("functools").lru_cache(maxsize=None)
def _torch_class(t) -> bool:
    for cls in t.__mro__:
        if cls is nn.Module or cls in CONTAINERS:
            return False
        if cls.__module__.startswith("torch.nn.modules"):
            return True
    return False


def _new_pass():
    return collections.Counter()


class Tally:
    """counts[(op, layer)][pass][kind] and diag[(op, layer)][pass][name]."""

    def __init__(self):
        self.counts = collections.defaultdict(lambda: {p: _new_pass() for p in PASSES})
        self.diag = collections.defaultdict(lambda: {p: _new_pass() for p in PASSES})
        self.samples = collections.defaultdict(lambda: {p: collections.Counter() for p in PASSES})

    def add(self, key, pas, kind, n=1):
        self.counts[key][pas][kind] += n

    def note(self, key, pas, name, n=1):
        self.diag[key][pas][name] += n


class _Rec:
    """What one Python-level call dispatched."""
    __slots__ = ("kernels", "views", "casts", "c10d", "ops", "syncs", "arg_ids")

    def __init__(self, args=(), kwargs=None):
        self.kernels = self.views = self.casts = self.c10d = self.syncs = 0
        self.ops = []
        ids = set()
        for a in (*args, *(kwargs or {}).values()):
            if isinstance(a, torch.Tensor):
                ids.add(id(a))
            elif isinstance(a, (list, tuple)):
                ids.update(id(t) for t in a if isinstance(t, torch.Tensor))
        self.arg_ids = ids


class Counter:
    current: "Counter | None" = None
    """Counts the host calls of a model's forward and backward by operator (see the module docstring).

    rules(name) -> (op, after) or None: the operator a module's window belongs to, and the operator in force after it
    returns (None: the one in force before it). layer_of(name) -> int or None: the layer index of a block module.
    """

    def __init__(self, model: nn.Module | None, rules, layer_of, start: str = "embedding",
                 emulate_cuda: bool | None = None, extra_names: dict | None = None):
        emulate_cuda = DEVICE.type != "cuda" if emulate_cuda is None else emulate_cuda
        self.model, self.rules, self.layer_of = model, rules, layer_of
        self.names = {id(m): n for n, m in model.named_modules()} if model is not None else {}
        if extra_names:
            self.names.update(extra_names)
        self.tally = Tally()
        self.state = start
        self.layer = None
        self.pas = "forward"
        self.muted = 0
        self.leaf_depth = 0
        self.frames: list[_Rec] = []
        self.windows: list[tuple[int, tuple]] = []
        self.saved: dict[int, list] = collections.defaultdict(list)
        self.leaf_frames: list[_Rec] = []
        self.emulate_cuda = emulate_cuda
        self._probe_leaf = torch.zeros((), requires_grad=True)
        self.autocast = False
        self.layers_seen = set()
        self.nodes_walked = 0
        self.fused_functions: set[str] = set()  # autograd.Functions priced as fused_module (Megatron's linears)
        self.fused_depth = 0
        self.fused_frames = 0
        outer = self

        class FM(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                return outer._on_call(func, types, args, kwargs or {})

        class DM(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return outer._on_dispatch(func, args, kwargs or {})

        self.FM = FM
        self.fm, self.dm = FM(), DM()

    # -- state ----------------------------------------------------------------------------------------------------
    @property
    def key(self):
        return (self.state, self.layer)

    def _probe(self):
        """Record the start of a window at the autograd sequence counter's current value."""
        if self.pas != "forward" or not torch.is_grad_enabled():
            return
        self.muted += 1
        try:
            with torch.autocast(DEVICE.type, enabled=False):
                seq = (self._probe_leaf * 1.0).grad_fn._sequence_nr()
        finally:
            self.muted -= 1
        self.windows.append((seq, self.key))

    def set(self, state):
        """Make `state` the operator in force (model-level operators have no layer) and open its window."""
        self.state = state
        if state in MODEL_LEVEL:
            self.layer = None
        self._probe()

    # -- module hooks ---------------------------------------------------------------------------------------------
    def _pre(self, module, args):
        if self.muted:
            return
        name = self.names.get(id(module))
        if name is None:
            return
        leaf = is_torch_leaf(module)
        layer = self.layer_of(name)
        if getattr(module, "_host_counts_fused", False):  # an emulated fused module: its call is its fused_module
            leaf = True
            self.saved[id(module)].append((self.state, self.layer, False))
            rule = self.rules(name)
            if rule is not None:
                self.saved[id(module)][-1] = (self.state, self.layer, True)
                self.set(rule[0])
            self.fused_frames += 1
            return
        rule = None if layer is not None else self.rules(name)
        self.saved[id(module)].append((self.state, self.layer, layer is not None or rule is not None))
        if layer is not None:  # a block: its call is the layer's; its window starts at norm1
            self.layer = layer
            self.layers_seen.add(layer)
            self.tally.add(("_layer", layer), self.pas, "view_op")
            self.set("norm1")
        elif rule is not None:
            self.set(rule[0])
            if not leaf:
                self.tally.add(self.key, self.pas, "view_op")
                if len(rule) > 2:  # a container whose body starts in another operator
                    self.set(rule[2])
        elif not leaf:
            self.tally.add(self.key, self.pas, "view_op")
        if leaf:
            self.leaf_depth += 1
            self.leaf_frames.append(_Rec())
            self.autocast = torch.is_autocast_enabled(DEVICE.type) and self.pas == "forward"

    def _post(self, module, args, out):
        if self.muted:
            return
        name = self.names.get(id(module))
        if name is None or not self.saved[id(module)]:
            return
        state, layer, changed = self.saved[id(module)].pop()
        if getattr(module, "_host_counts_fused", False):
            self.fused_frames -= 1
        elif is_torch_leaf(module):
            rec = self.leaf_frames.pop()
            self.leaf_depth -= 1
            kind = "module_call" if rec.kernels - rec.casts > 0 else "view_op"
            self.tally.add(self.key, self.pas, kind)
            if kind == "view_op":
                self.tally.note(self.key, self.pas, "empty_module_calls")
            if rec.casts:
                self.tally.add(self.key, self.pas, "eager_op", rec.casts)
            self.tally.samples[self.key][self.pas][f"{type(module).__name__}():{kind}"] += 1
        if not changed:
            return
        if self.layer_of(name) is not None:
            self.set("_layer")  # between blocks (the layer index stays the finished block's)
            return
        after = self.rules(name)[1]
        if after:
            self.set(after)
        else:
            self.state, self.layer = state, layer
            self._probe()

    # -- calls ----------------------------------------------------------------------------------------------------
    def _on_call(self, func, types, args, kwargs):
        if self.muted:
            return func(*args, **kwargs)
        if self.emulate_cuda and func in (F.rms_norm, torch.rms_norm):
            return self._fused_rms_norm(func, args, kwargs)
        if func in (torch.Tensor.backward, torch.autograd.backward):  # the loop's call: counted in "_step"
            self.tally.add(("_step", None), self.pas, "eager_op")
            self.tally.samples[("_step", None)][self.pas]["backward():eager_op"] += 1
            return self.backward(func, args, kwargs)
        if self.autocast and getattr(func, "__name__", "") in CUDA_ONLY_FP32:
            low = sum(1 for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)
                      and a.dtype in (torch.bfloat16, torch.float16))
            if low:
                self.tally.note(self.key, self.pas, "cuda_autocast_would_cast", low)
        self.autocast = torch.is_autocast_enabled(DEVICE.type) and self.pas == "forward"
        if self.emulate_cuda and func is F.scaled_dot_product_attention:
            return self._fused_sdpa(func, args, kwargs)
        rec = _Rec(args, kwargs)
        self.frames.append(rec)
        try:
            out = func(*args, **kwargs)
        finally:
            self.frames.pop()
        self._classify(func, rec, args=args)
        return out

    def _classify(self, func, rec, name=None, args=()):
        name = name or getattr(func, "__name__", str(func))
        key, pas = self.key, self.pas
        if name == "custom_function_call" and args:  # autograd.Function.apply under a TorchFunctionMode
            fn = getattr(args[0], "__name__", "Function")
            if fn in self.fused_functions:
                if not self.leaf_depth:
                    self.tally.add(key, pas, "fused_module")
                    self.tally.samples[key][pas][f"{fn}.apply:fused_module"] += 1
                return
            name = f"{fn}.apply"
        if self.leaf_depth or self.fused_depth:
            self.tally.note(key, pas, "inner_calls")
            return
        if rec.c10d:
            self.tally.add(key, pas, "nccl_call", rec.c10d)
            self.tally.samples[key][pas][f"{name}:nccl_call"] += rec.c10d
            if not rec.kernels:
                return
        casts = 0 if name in CONVERSIONS else rec.casts
        if rec.kernels - casts > 0:
            kind = "eager_op"
        elif rec.ops:
            kind = "view_op"
        else:
            kind = "meta"
        if kind == "meta":
            self.tally.note(key, pas, "meta")
            self.tally.samples[key][pas][f"{name}:meta"] += 1
        else:
            self.tally.add(key, pas, kind)
            self.tally.samples[key][pas][f"{name}:{kind}"] += 1
        if casts:
            self.tally.add(key, pas, "eager_op", casts)
            self.tally.samples[key][pas][f"{name}:autocast_cast"] += casts

    def _on_dispatch(self, func, args, kwargs):
        with torch._C.DisableTorchFunction():  # (an OpOverload call would reach a function mode pushed in backward)
            out = func(*args, **kwargs)
        if self.muted:
            return out
        name = op_name(func)
        ns = func.namespace if hasattr(func, "namespace") else ""
        key, pas = self.key, self.pas
        targets = [f for f in (self.frames[-1:] + self.leaf_frames[-1:])]
        if ns in ("c10d", "_c10d_functional"):
            for t in targets:
                t.c10d += 1
            if not targets:  # a collective called outside any torch function (dist.* from Python)
                self.tally.add(key, pas, "nccl_call")
                self.tally.samples[key][pas][f"{name}:nccl_call"] += 1
            self.tally.note(key, pas, "c10d_ops")
            return out
        view = getattr(func, "is_view", False) or name in NO_KERNEL or ns in NO_KERNEL_NAMESPACES
        # autocast's cast: an aten._to_copy of one of the Python call's own tensor arguments (inside autocast's wrapper
        # its TLS flag reads False, so the call's flag is kept); _to_copy of intermediates is the op's own work
        cast = (name == "_to_copy" and self.autocast and bool(self.frames) and bool(args)
                and id(args[0]) in self.frames[-1].arg_ids)
        if name == "_local_scalar_dense":
            self.tally.note(key, pas, "syncs")
        for t in targets:
            t.ops.append(name)
            if view:
                t.views += 1
            else:
                t.kernels += 1
                if cast:
                    t.casts += 1
        if not view:
            self.tally.note(key, pas, "aten_kernels")
            if cast:
                self.tally.note(key, pas, "autocast_casts")
        return out

    def _emulated(self, func, name, tensors, cast_to, run):
        """A call CUDA runs as one fused op with one autograd node (F.rms_norm: aten::_fused_rms_norm; SDPA: flash or
        memory-efficient attention, dropout included) where this CPU decomposes it or falls back to the math path:
        autocast's casts of the tensor inputs (CUDA's policy: `cast_to`) done as autocast would (nodes and all), then
        one kernel and one node (an autograd.Function)."""
        rec = _Rec()
        self.frames.append(rec)
        self.muted += 1
        try:
            if self.autocast:
                cast = []
                for t in tensors:
                    if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != cast_to:
                        t = t.to(cast_to)
                        rec.casts += 1
                        rec.kernels += 1
                    cast.append(t)
                tensors = cast
            with torch.autocast("cpu", enabled=False):
                out = run(*tensors)
        finally:
            self.muted -= 1
            self.frames.pop()
        rec.kernels += 1
        rec.ops = [name]
        for t in self.leaf_frames[-1:]:
            t.kernels += rec.kernels
            t.casts += rec.casts
        self.tally.note(self.key, self.pas, "aten_kernels", rec.kernels)
        if rec.casts:
            self.tally.note(self.key, self.pas, "autocast_casts", rec.casts)
        self._classify(func, rec, name)
        return out

    def _fused_rms_norm(self, func, args, kwargs):
        x, shape, w, eps = _rms_args(*args, **kwargs)
        return self._emulated(func, "rms_norm", [x, w], torch.float32,
                              lambda x, w: _FusedRMSNorm.apply(x, shape, w, eps))

    def _fused_sdpa(self, func, args, kwargs):
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
        kw = dict(zip(names, args))
        kw.update(kwargs)
        q, k, v, mask = kw.pop("query"), kw.pop("key"), kw.pop("value"), kw.pop("attn_mask", None)
        float_mask = isinstance(mask, torch.Tensor) and mask.is_floating_point()
        tensors = [q, k, v] + ([mask] if float_mask else [])

        def run(q, k, v, m=mask):
            return FusedSDPA.apply(q, k, v, m, kw)

        return self._emulated(func, "scaled_dot_product_attention", tensors, torch.bfloat16, run)

    # -- run ------------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def active(self):
        from torch.nn.modules import module as mm

        h1 = mm.register_module_forward_pre_hook(self._pre)
        h2 = mm.register_module_forward_hook(self._post)
        Counter.current = self
        try:
            with self.fm, self.dm:
                yield self
        finally:
            Counter.current = None
            h1.remove()
            h2.remove()

    def backward(self, func, args, kwargs):
        """Tensor.backward / torch.autograd.backward: walk the graph from its roots, attribute each node, run it with
        a pre-hook on every node (the operator in force while the node runs; a check that it ran)."""
        roots = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.grad_fn is not None]
        nodes, consumers = walk([r.grad_fn for r in roots])
        starts = [s for s, _ in self.windows]
        attr = {}
        for n in nodes:
            seq = n._sequence_nr()
            if seq < 2**63:
                i = bisect.bisect_right(starts, seq) - 1
                attr[n] = self.windows[i][1] if i >= 0 else ("_model", None)
        for n in nodes:
            if n not in attr:  # AccumulateGrad: its earliest consumer's operator
                cons = [c for c in consumers.get(n, []) if c in attr]
                attr[n] = attr[min(cons, key=lambda c: c._sequence_nr())] if cons else ("_model", None)
        ran = set()
        handles = []
        for n in nodes:
            def hook(grads, n=n):
                self.state, self.layer = attr[n]
                ran.add(n)
                # this handler runs with the mode off, and the engine restores its thread-local state after each
                # node: push a fresh mode for this node, so that a Python backward's torch calls are counted
                torch.overrides._push_mode(self.FM())
            handles.append(n.register_prehook(hook))
            self.tally.add(attr[n], "backward", "autograd_node")
            self.tally.samples[attr[n]]["backward"][type(n).__name__] += 1
            bwd = getattr(n, "compiled_backward_kernels", None)  # a compiled region's node: its backward region
            if bwd is not None:
                self.tally.add(attr[n], "backward", "compiled_entry")
                self.tally.add(attr[n], "backward", "compiled_kernel", bwd)
        saved = self.state, self.layer, self.autocast
        self.pas, self.autocast = "backward", False
        self.state, self.layer = "_model", None
        try:
            return func(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()
            self.pas = "forward"
            self.state, self.layer, self.autocast = saved
            self.nodes_walked += len(nodes)
            if len(ran) != len(nodes):
                warnings.warn(f"{len(nodes) - len(ran)} of {len(nodes)} walked autograd nodes did not run")

    @contextlib.contextmanager
    def region(self, state, after=None):
        """Calls inside are `state`'s (the training loop's parts: "_step", "_optimizer" ...); then `after`'s (None:
        the operator in force before)."""
        saved = self.state, self.layer
        self.set(state)
        try:
            yield
        finally:
            if after:
                self.set(after)
            else:
                self.state, self.layer = saved
                self._probe()


@contextlib.contextmanager
def _muted():
    """The emulations' own maths: not counted (their counts are set by hand)."""
    c = Counter.current
    if c is not None:
        c.muted += 1
    try:
        yield
    finally:
        if c is not None:
            c.muted -= 1


MODEL_LEVEL = {"embedding", "embedding_output", "final_norm", "lm_head", "loss", "_model"}


class _FusedRMSNorm(torch.autograd.Function):
    """Stands in for CUDA's aten::_fused_rms_norm: one node; the maths is the composite's."""

    @staticmethod
    def forward(ctx, x, shape, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.shape, ctx.eps = shape, eps
        with torch.no_grad():
            return _rms_composite(x, shape, weight, eps)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        with _muted(), torch.enable_grad():
            x_ = x.detach().requires_grad_(True)
            w_ = w.detach().requires_grad_(True) if w is not None else None
            y = _rms_composite(x_, ctx.shape, w_, ctx.eps)
            grads = torch.autograd.grad(y, [t for t in (x_, w_) if t is not None], g)
        return grads[0], None, (grads[1] if w is not None else None), None


class FusedSDPA(torch.autograd.Function):
    """Stands in for CUDA's flash / memory-efficient SDPA (one kernel, one node, dropout inside)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, kw):
        ctx.save_for_backward(q, k, v)
        ctx.mask, ctx.kw = mask, {k_: v_ for k_, v_ in kw.items() if k_ != "dropout_p"}
        with torch.no_grad():
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
        # flash / memory-efficient attention write [batch, seq, heads, dim] and return its transpose, so that the
        # usual out.transpose(1, 2).contiguous() after SDPA copies nothing on a GPU
        return out.transpose(1, 2).contiguous().transpose(1, 2) if out.dim() == 4 else out

    @staticmethod
    def backward(ctx, g):
        q, k, v = ctx.saved_tensors
        with _muted(), torch.enable_grad():
            ins = [t.detach().requires_grad_(True) for t in (q, k, v)]
            y = F.scaled_dot_product_attention(*ins, attn_mask=ctx.mask, **ctx.kw)
            gq, gk, gv = torch.autograd.grad(y, ins, g)
        return gq, gk, gv, None, None


def _rms_args(input, normalized_shape, weight=None, eps=None):
    return input, tuple(normalized_shape), weight, eps


def _rms_composite(x, shape, w, eps):
    dims = tuple(range(-len(shape), 0))
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    y = x.float() * torch.rsqrt(x.float().pow(2).mean(dims, keepdim=True) + eps)
    y = y if w is None else y * w
    return y.type_as(x)


def walk(roots):
    """Every node reachable from `roots`, and each node's consumers."""
    seen, stack, consumers = set(roots), list(roots), collections.defaultdict(list)
    while stack:
        n = stack.pop()
        for nxt, _ in n.next_functions:
            if nxt is None:
                continue
            consumers[nxt].append(n)
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return list(seen), consumers


# -- rules ---------------------------------------------------------------------------------------------------------
def make_rules(block: str, inner: dict, model: dict):
    """(rules, layer_of) for a model whose blocks are named by regex `block` (group 1: the layer index), the modules
    inside a block by their name under it (`inner`), the others by their full name (`model`; "" is the root).
    A rule is (operator, operator after it returns or None: the one before it[, operator its body starts in])."""
    blk = re.compile(f"^{block}$")
    inside = re.compile(f"^{block}\\.(.+)$")

    def layer_of(name):
        m = blk.match(name)
        return int(m.group(1)) if m else None

    def rules(name):
        m = inside.match(name)
        if m:
            return inner.get(m.group(2))
        return model.get(name)

    return rules, layer_of


def count_model(model: nn.Module, forward, rules, layer_of, n_layers: int, autocast: bool, start: str = "_model",
                warmup: int = 1, emulate_cuda: bool | None = None, fused_functions=()) -> dict:
    """Count one forward (forward() -> loss, under bf16 autocast if `autocast`) and its backward, after `warmup`
    uncounted steps (lazy initialisation, caches). Returns summarize()'s dict."""
    ac = (lambda: torch.autocast(DEVICE.type, dtype=torch.bfloat16)) if autocast else contextlib.nullcontext
    for _ in range(warmup):
        with ac():
            loss = forward()
        loss.backward()
        model.zero_grad(set_to_none=True)
    c = Counter(model, rules, layer_of, start, emulate_cuda=emulate_cuda)
    c.fused_functions = set(fused_functions)
    with c.active():
        c.set(start)
        c.autocast = autocast
        with ac():
            loss = forward()
        c.autocast = False
        c.set("_step")
        loss.backward()
    model.zero_grad(set_to_none=True)
    return summarize(c, n_layers)


def clean_counts(counter) -> dict:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in sorted(counter.items()) if v}


def summarize(c: Counter, n_layers: int) -> dict:
    """Per operator and pass: kinds (layer operators: mean per layer), diagnostics, samples of what was counted."""
    t = c.tally
    out = {op: {p: collections.Counter() for p in PASSES} for op in (*GRAPH_OPS, *EXTRA)}
    diag = {op: {p: collections.Counter() for p in PASSES} for op in (*GRAPH_OPS, *EXTRA)}
    detail = collections.defaultdict(lambda: {p: collections.Counter() for p in PASSES})
    samples = collections.defaultdict(lambda: {p: collections.Counter() for p in PASSES})
    per_layer = collections.defaultdict(dict)
    for src, dst in ((t.counts, out), (t.diag, diag), (t.samples, samples)):
        for (op, layer), passes in src.items():
            if op not in out:  # the training loop's own calls ("_step", "_optimizer" ...: region_counts)
                continue
            layered = op in LAYER_OPS or op == "_layer"
            if layered and layer is None:  # layer work done once at model level (e.g. a rotary table)
                for p in PASSES:
                    if dst is out:
                        out["_model"][p].update(passes[p])
                        detail[op][p].update(passes[p])
                    elif dst is diag:
                        diag["_model"][p].update(passes[p])
                continue
            w = 1.0 / n_layers if layered else 1.0
            target = dst[op] if dst is not samples else samples[op]
            for p in PASSES:
                for k, v in passes[p].items():
                    target[p][k] += v * w
            if dst is out and layered:
                per_layer[op][layer] = {p: dict(passes[p]) for p in PASSES}
    uneven = {op: ls for op, ls in per_layer.items() if len({json.dumps(v, sort_keys=True) for v in ls.values()}) > 1}
    res = {op: {p: clean_counts(out[op][p]) for p in PASSES} for op in out}
    res["_diagnostics"] = {op: {p: clean_counts(diag[op][p]) for p in PASSES} for op in diag
                           if any(diag[op][p] for p in PASSES)}
    if detail:
        res["_model"]["detail"] = {op: {p: clean_counts(d[p]) for p in PASSES} for op, d in detail.items()}
    res["_samples"] = {op: {p: clean_counts(s[p]) for p in PASSES} for op, s in samples.items()}
    if uneven:
        res["_uneven_layers"] = {op: {str(k): v for k, v in ls.items()} for op, ls in uneven.items()}
    res["_layers_seen"] = sorted(c.layers_seen)
    return res


# -- the batch every stack runs: 2 sequences of 16 tokens --------------------------------------------------------------
BATCH, SEQ = 2, 16


def tokens(vocab: int, batch: int = BATCH, seq: int = SEQ):
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


# -- a framework release's code (torchtitan, megatron-core) ---------------------------------------------------------
def framework_path(dist: str) -> Path:
    """The import root of a framework release in perfmodel's cache (downloaded there once if absent)."""
    from perfmodel.export.checks.releases import fetch

    return fetch(dist)


# -- a training loop's own calls (plain-torch's "_step", "_optimizer" ...) ------------------------------------------
def in_region(counter: Counter, state: str, fn, after=None):
    def wrapped(*a, **k):
        with counter.region(state, after):
            return fn(*a, **k)
    return wrapped


def region_counts(c: Counter, state: str) -> dict:
    out = {}
    for p in PASSES:
        counts = c.tally.counts.get((state, None), {}).get(p)
        if counts:
            out[p] = clean_counts(counts)
        d = c.tally.diag.get((state, None), {}).get(p)
        if d:
            out.setdefault("diagnostics", {})[p] = clean_counts(d)
        smp = c.tally.samples.get((state, None), {}).get(p)
        if smp:
            out.setdefault("samples", {})[p] = clean_counts(smp)
    return out


# -- compiled and fused regions of the stacks, emulated ---------------------------------------------------------------
class _CompiledRegion(torch.autograd.Function):
    """A torch.compile'd function called with gradients (AOTAutograd: one CompiledFunctionBackward node whose backward
    is one compiled region): the eager maths, one node."""

    @staticmethod
    def forward(ctx, run, bwd_kernels, *tensors):
        ctx.run, ctx.compiled_backward_kernels = run, bwd_kernels
        ctx.save_for_backward(*tensors)
        with torch.no_grad():
            return run(*tensors)

    @staticmethod
    def backward(ctx, *grads):
        with _muted():
            ts = [t.detach().requires_grad_(t.is_floating_point()) for t in ctx.saved_tensors]
            with torch.enable_grad():
                out = ctx.run(*ts)
            outs = out if isinstance(out, tuple) else (out,)
            need = [t for t in ts if t.requires_grad]
            got = iter(torch.autograd.grad(outs, need, grads, allow_unused=True))
        return (None, None, *[next(got) if t.requires_grad else None for t in ts])


def compiled_stub(fn, name: str, fwd_kernels: int, bwd_kernels: int | None):
    """Stands in for a torch.compile'd `fn` (Megatron's jit_fuser): one compiled_entry and `fwd_kernels` kernels per
    call; called with gradients (bwd_kernels not None), one node whose backward is one compiled region of
    `bwd_kernels` kernels. Without a counter (warm-up) it runs `fn`."""
    from torch.utils._pytree import tree_flatten, tree_unflatten

    def stub(*args, **kwargs):
        c = Counter.current
        if c is None or c.muted:
            return fn(*args, **kwargs)
        c.tally.add(c.key, c.pas, "compiled_entry")
        c.tally.add(c.key, c.pas, "compiled_kernel", fwd_kernels)
        c.tally.samples[c.key][c.pas][f"{name}:compiled_entry"] += 1
        c.muted += 1
        try:
            flat, spec = tree_flatten((args, kwargs))
            pos = [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]
            grad = bwd_kernels is not None and torch.is_grad_enabled() and any(flat[i].requires_grad for i in pos)
            if not grad:
                return fn(*args, **kwargs)

            def run(*ts):
                f = list(flat)
                for i, t in zip(pos, ts):
                    f[i] = t
                a, k = tree_unflatten(f, spec)
                return fn(*a, **k)

            return _CompiledRegion.apply(run, bwd_kernels, *[flat[i] for i in pos])
        finally:
            c.muted -= 1

    return stub


def one_node(run, tensors):
    """run(*tensors) as one autograd node (muted maths)."""
    with _muted():
        return _CompiledRegion.apply(run, None, *tensors)


def fused_stub(mod: nn.Module, name: str, run, kind: str = "fused_module"):
    """Replace `mod`'s forward by one `kind` call and one autograd node; run(mod, *args, **kw) -> (tensors,
    forward(*tensors) -> output, finish(output) -> what forward returns)."""
    orig = mod.forward

    def forward(*args, **kw):
        c = Counter.current
        tensors, fn, finish = run(orig, *args, **kw)
        if c is None or c.muted:
            return finish(fn(*tensors))
        c.tally.add(c.key, c.pas, kind)
        c.tally.samples[c.key][c.pas][f"{name}:{kind}"] += 1
        return finish(one_node(fn, tensors))

    mod.forward = forward
    mod._host_counts_fused = True


