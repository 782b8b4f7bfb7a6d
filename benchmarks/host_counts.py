"""How many host calls of each kind a training step makes, per operator, counted in each stack's own model code.

    python benchmarks/host_counts.py [--out call_counts.json] [--txt call_counts.txt] [--compile] [--only S1,S2]

perfmodel prices the host (CPU) time of a training step as counts x per-call costs: the host's seconds per call by
kind (perfmodel.calibrate.host.calls), the stack's calls per operator by kind (the stack profiles,
hardware_specs/stacks/NAME.yaml). This script makes the counts: for each operator of perfmodel's operator table
(perfmodel.spec.model.operators.GRAPH_OPS) and each pass, the calls of each kind one transformer layer (and the embedding
and the head) makes, counted by running the stack's real model code on this CPU with tiny tensors (hidden 64, 2
layers, 2 x 16 tokens), or, for stacks that cannot run here (llm.c, Megatron-DeepSpeed, nanotron, llm-foundry), read
from their source and written down with file@commit citations (READ_ONLY). ~40 s on 2 cores (+30 s with --compile).

Kinds (what one call of each costs is the host's, measured elsewhere):
  eager_op        a Python-level torch call that dispatched at least one aten op that is neither a view nor an
                  allocation (a kernel on a GPU); plus, under autocast, each cast autocast inserts (an aten._to_copy of
                  one of the call's own tensor arguments inside a call that is not itself a conversion)
  view_op         a Python-level torch call that dispatched only views (view, reshape of a viewable tensor, transpose,
                  split, permute, t, expand, chunk, unsqueeze ...), allocations or record_function bookkeeping; the
                  __call__ of a module that is not a torch.nn leaf (Block, Attention, MLP, HF's Conv1D and
                  LlamaRMSNorm ...: their own ops are counted one by one); a leaf module call that dispatched no kernel
                  (nn.Dropout(p=0), Identity)
  module_call     the call of a torch.nn leaf module (an instance of a torch.nn.modules class or a subclass, without
                  children: Linear, LayerNorm, RMSNorm, Embedding, Dropout, GELU ...): its __call__ and the ops inside,
                  which are not counted again (autocast's casts inside it are: eager_op)
  fused_module    a fused framework module's call (Transformer Engine, apex; Megatron's linear autograd Function)
  autograd_node   a node the autograd engine runs in backward (AccumulateGrad included), from the autograd graph
  nccl_call       a c10d collective dispatched (c10d.* / _c10d_functional.* ops)
  compiled_entry, compiled_kernel: a torch.compile'd region entered / a kernel it launches
  kernel_launch   llm.c's cudaLaunchKernel / cuBLASLt / cuDNN / cudaMemcpy calls
Not priced, in "_diagnostics": meta (torch calls that dispatched nothing: x.shape, x.size(), x.dim(), a no-op
.contiguous(), .to() to the same dtype ... ~0.1 us each, NOT view_op), aten_kernels (non-view aten ops dispatched,
inside modules too; in backward the nodes' kernels: a CPU count, below a GPU's: see _sanity), autocast_casts (in
eager_op already), inner_calls (torch calls inside leaf / fused modules), cuda_autocast_would_cast.

How it counts (class Counter):
  * torch.overrides.TorchFunctionMode sees every Python-level torch call; its handler runs the call under a
    TorchDispatchMode that records the aten ops it dispatched (below autograd and autocast: a CompositeImplicit op shows
    the ops it decomposes into, autocast's casts show as aten._to_copy). View: OpOverload.is_view (or aten._unsafe_view,
    detach, alias); allocation: empty*, lift_fresh, resize_, set_; the profiler namespace is bookkeeping. A call is
    eager_op if it dispatched a kernel, view_op if it dispatched only those, meta if nothing. Calls nested in a call are
    not seen (a mode is off inside its own handler): a Python function such as F.cross_entropy is one call.
  * global module forward pre-hooks and forward hooks (torch.nn.modules.module.register_module_forward_pre_hook /
    register_module_forward_hook) count module calls and drive the attribution: each stack's RULES map its module names
    (under the block: the name relative to it) to (operator, operator in force after the module returns[, operator its
    body starts in]); a call belongs to the operator in force when it is made. So `x + attn(...)` after the out
    projection is residual1, the split/view/transpose/SDPA after the qkv projection is attention, F.gelu after c_fc is
    activation (the tables: NANOGPT_RULES, PLAIN_RULES, HF_GPT2_RULES, HF_LLAMA_RULES, TITAN_RULES, MEG_RULES).
  * backward: when the loop calls Tensor.backward (intercepted), the autograd graph is walked from the loss
    (next_functions); each node is attributed to the operator whose forward window created it by its sequence number
    (Node._sequence_nr(): a thread-local counter every node takes at creation, read at each change of operator by
    creating a throw-away node); AccumulateGrad nodes (no sequence number) go to the operator of their earliest
    consumer (a tied embedding's to the embedding). A pre-hook on every node sets the operator while the engine runs
    it (its kernels and a Python backward's torch calls are attributed: the hook pushes a fresh function mode for the
    node) and checks that every walked node ran.
  * per layer: each layer's calls are attributed to it (the block's window); layer operators are the mean over the
    layers (checked equal layer to layer: "_uneven_layers" lists any that are not). The block's own call and whatever
    runs between blocks is "_layer"; model-level work that is none of the operators (the root's call, HF's rotary
    table, torchtitan's block mask) is "_model" ("detail": per-layer operators' work done once at model level).
  * GPU dispatch where a CPU differs, emulated so that the counts are a GPU run's: nn.RMSNorm / F.rms_norm is
    CompositeImplicit on CPU (pow, mean, add, rsqrt, mul, mul: 6 nodes) but aten::_fused_rms_norm on CUDA (torch >= 2.8:
    _fused_rms_norm_cuda_dispatch.h; one kernel, one FusedRmsNormBackward0 node); F.scaled_dot_product_attention falls
    back to the math path on CPU when dropout > 0 (HF GPT-2) while CUDA runs flash / memory-efficient attention (one
    kernel, one node; its output laid out [b, s, h, d] so a following transpose(1, 2).contiguous() copies nothing):
    both run as one-node autograd.Functions after CUDA autocast's casts of their inputs. Autocast runs as CPU autocast
    (bf16): torch._C._dispatch_dump shows where CUDA's and CPU's autocast lists differ (layer_norm, rms_norm, softmax,
    log_softmax, pow, sum ... fp32 on CUDA only; cross_entropy_loss fp32 on CPU only, CUDA casts at log_softmax: one
    cast either way); none of those sees a bf16 input in these models ("cuda_autocast_would_cast" would say).
    torch.compile'd pieces of a stack (torchtitan's flex attention, Megatron's jit_fuser fusions) are emulated: one
    compiled_entry and their kernels (FLEX_KERNELS, MEG_COMPILED) each way, one node; Transformer Engine's modules in
    Megatron's TE spec likewise (one fused_module, one node: te_linear, te_attention, te_norm).

Stacks run here:
  plain-torch     perfmodel/execute/transformer.py built and stepped by perfmodel/execute/train.py's Trainer for a
                  one-process plan (Trainer.step counted whole: "_step" is the loop's own calls), bf16 autocast as on
                  CUDA; GPT-2 (main) and Llama ("_variants"."llama")
  nanogpt         benchmarks/host_launch.py's GPT (nanoGPT's model.py), bf16 autocast; --compile: torch.compile'd,
                  Inductor's kernels per region read from its output code ("_compiled")
  hf-transformers GPT2LMHeadModel (main), LlamaForCausalLM (_variants.llama), SDPA attention, bf16 autocast
  torchtitan      torchtitan 0.3.0's Llama3 (fused wqkv, ComplexRoPE, flex attention), no autocast
  megatron-core   megatron-core 0.16.1 GPTModel on a one-rank gloo group: the TE spec emulated (main, te_llama) and
                  the local spec run as is (local, local_no_fusion, local_llama)
Also: AdamW step (fused / foreach / for-loop), clip_grad_norm_ (foreach), zero_grad(set_to_none) per tensor and per
step (the line through 8 and 64 tensors); FSDP2 per hook (fsdp2_worker: fully_shard on a 2-rank mesh of torch's fake
process group in a subprocess: on a one-rank mesh FSDP2 skips its all-gather and reduce-scatter); this CPU's
view_op / eager_op / meta cost ratios; the sanity check: counts x the H100 VM's per-call costs against the measured
nanoGPT twin (benchmarks/results/host/h100-third-*.json). --gpu-check FILE (on a CUDA machine): the same counts without
emulation, compared with the CPU's, and the host's view_op / eager_op / meta seconds per call
(benchmarks/results/host/h100-host_counts-gpu_check.json: nanoGPT and plain-torch GPT-2 / Llama identical but for one
autocast cast in nanoGPT's loss, see there).

Output: the table (stdout, --txt) and --out JSON: {stack: {op: {"forward": {kind: n}, "backward": {kind: n}},
"_layer", "_model", "_step", "_optimizer", "_fsdp2", "_variants", "_diagnostics", "_samples" (what was counted, by
call name), "_source"}, "_sanity", "_cpu_ratios"}. Layer operators per layer (means over layers), others per step;
one micro-batch.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import json
import os
import re
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from perfmodel.spec.model.operators import GRAPH_OPS  # noqa: E402

KINDS = ("eager_op", "view_op", "module_call", "fused_module", "autograd_node", "nccl_call", "compiled_entry",
         "compiled_kernel", "graph_replay", "kernel_launch")
PASSES = ("forward", "backward")
LAYER_OPS = ("norm1", "qkv", "attention", "out_proj", "residual1", "norm2", "mlp_in", "activation", "mlp_out", "moe",
             "residual2")
EXTRA = ("_layer", "_model")
REGIONS = ("_step", "_optimizer", "_zero_grad", "_clip")
DEVICE = torch.device("cpu")  # --gpu-check runs the counts on cuda (no emulation) to check the CPU's emulation
FRAMEWORKS = Path(os.environ.get("PERFMODEL_FRAMEWORKS_DIR", Path.home() / ".cache" / "perfmodel" / "frameworks"))

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
            return _FusedSDPA.apply(q, k, v, m, kw)

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
            if type(n).__name__ == "_FlexEmulationBackward":  # the compiled flex_attention's backward region
                self.tally.add(attr[n], "backward", "compiled_entry")
                self.tally.add(attr[n], "backward", "compiled_kernel", FLEX_KERNELS["backward"])
            bwd = getattr(n, "compiled_backward_kernels", None)  # _CompiledRegion's node: its backward region
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


class _FusedSDPA(torch.autograd.Function):
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


def _clean(counter) -> dict:
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
    res = {op: {p: _clean(out[op][p]) for p in PASSES} for op in out}
    res["_diagnostics"] = {op: {p: _clean(diag[op][p]) for p in PASSES} for op in diag
                           if any(diag[op][p] for p in PASSES)}
    if detail:
        res["_model"]["detail"] = {op: {p: _clean(d[p]) for p in PASSES} for op, d in detail.items()}
    res["_samples"] = {op: {p: _clean(s[p]) for p in PASSES} for op, s in samples.items()}
    if uneven:
        res["_uneven_layers"] = {op: {str(k): v for k, v in ls.items()} for op, ls in uneven.items()}
    res["_layers_seen"] = sorted(c.layers_seen)
    return res


# -- nanoGPT (benchmarks/host_launch.py) -----------------------------------------------------------------------------
TINY = dict(n_layer=2, n_head=2, n_embd=64, vocab=128, block=64)
BATCH, SEQ = 2, 16

NANOGPT_RULES = make_rules(r"h\.(\d+)", {
    "ln_1": ("norm1", None), "c_attn": ("qkv", "attention"), "attn_proj": ("out_proj", "residual1"),
    "ln_2": ("norm2", None), "c_fc": ("mlp_in", "activation"), "mlp_proj": ("mlp_out", "residual2"),
}, {
    "": ("_model", "loss", "embedding"), "wte": ("embedding", "embedding_output"), "wpe": ("embedding_output", None),
    "ln_f": ("final_norm", None), "lm_head": ("lm_head", "loss"),
})


def tokens(vocab: int, batch: int = BATCH, seq: int = SEQ):
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def nanogpt(n_layer: int = 2, autocast: bool = True) -> dict:
    from host_launch import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**TINY, "n_layer": n_layer})).to(DEVICE)
    x, y = (t.to(DEVICE) for t in tokens(TINY["vocab"]))
    return count_model(model, lambda: model(x, y), *NANOGPT_RULES, n_layer, autocast)


# -- plain-torch: perfmodel's executor (perfmodel/execute/transformer.py, train.py) ---------------------------------
PLAIN_RULES = make_rules(r"layers\.(\d+)", {
    "norm1": ("norm1", None), "attention": ("qkv", "residual1"), "attention.wq": ("qkv", None),
    "attention.wk": ("qkv", None), "attention.wv": ("qkv", None), "attention.core": ("attention", "out_proj"),
    "attention.wo": ("out_proj", None), "residual1": ("residual1", None), "norm2": ("norm2", None),
    "mlp": ("mlp_in", "residual2"), "mlp.w1": ("mlp_in", None), "mlp.w3": ("mlp_in", None),
    "mlp.act": ("activation", "mlp_out"), "mlp.w2": ("mlp_out", None), "residual2": ("residual2", None),
}, {
    "": ("_model", "loss", "embedding"), "embedding": ("embedding", "embedding_output"),
    "embedding.tok": ("embedding", "embedding_output"), "embedding.pos": ("embedding_output", None),
    "final_norm": ("final_norm", None), "lm_head": ("lm_head", "loss"),
})


def executor_config(arch: str, n_layers: int = 2):
    from perfmodel.spec.model.config import ModelConfig

    if arch == "llama":
        return ModelConfig(name="tiny-llama", n_layers=n_layers, hidden=64, n_heads=4, n_kv_heads=2, ffn_hidden=128,
                           vocab=128, max_seq_len=64, mlp="swiglu", norm="rmsnorm", position="rope")
    return ModelConfig(name="tiny-gpt", n_layers=n_layers, hidden=64, n_heads=2, ffn_hidden=256, vocab=128,
                       max_seq_len=64, mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True,
                       linear_bias="all")


def executor_trainer(arch: str, n_layers: int = 2, micro_batches: int = 1):
    """perfmodel's Trainer for a one-process plan (no parallelism), as tests/test_execute.py builds one, with the bf16
    autocast a CUDA run enters (train.py's _autocast, CPU autocast here)."""
    from perfmodel.execute.data import Batches
    from perfmodel.execute.train import Trainer
    from perfmodel.spec.hardware.system import load_hardware
    from perfmodel.spec.plan.layout import Plan, resolve, split_of
    from perfmodel.spec.plan.file import PlanFile, Prediction, mesh_of

    cfg = executor_config(arch, n_layers)
    hw = load_hardware(ROOT / "tests" / "fixtures" / "cpu-test.yaml")
    plan = resolve(Plan(gpus=1, micro_batch=BATCH, global_batch=BATCH * micro_batches, seq_len=SEQ), cfg, hw)
    pred = Prediction(step_time_s=0.1, tokens_per_s=1.0, mfu=0.1, memory_bytes=1.0, memory_capacity_bytes=2.0,
                      fits_in_memory=True)
    pf = PlanFile(version=1, model=cfg, hardware=hw, plan=plan, mesh=mesh_of(plan),
                  stage_layers=split_of(plan, n_layers), placements=[], prediction=pred,
                  created_by="benchmarks/host_counts.py")
    trainer = Trainer(pf, DEVICE, seed=0)
    if DEVICE.type == "cpu":  # (on CUDA the Trainer enters bf16 autocast itself)
        trainer._autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return trainer, Batches(cfg.vocab, plan.global_batch, plan.seq_len, seed=0)


def in_region(counter: Counter, state: str, fn, after=None):
    def wrapped(*a, **k):
        with counter.region(state, after):
            return fn(*a, **k)
    return wrapped


def plain_torch(arch: str = "gpt2", n_layers: int = 2) -> dict:
    """One Trainer.step counted whole: the model's operators, the loop's own calls ("_step": slicing, the loss's
    division, backward(), the loss's read-back), the optimizer's step and zero_grad ("_optimizer")."""
    trainer, batches = executor_trainer(arch, n_layers)
    trainer.step(batches.step(0))  # optimizer state, caches
    model = trainer.modules[0]
    c = Counter(model, *PLAIN_RULES, start="_step")
    loss_fn, opt = trainer.loss_fn, trainer.optimizer
    trainer.loss_fn = in_region(c, "loss", loss_fn, after="_step")
    opt_step, opt_zero = opt.step, opt.zero_grad
    opt.step, opt.zero_grad = in_region(c, "_optimizer", opt_step), in_region(c, "_zero_grad", opt_zero)
    tok = batches.step(1)
    with c.active():
        c.set("_step")
        trainer.step(tok)
    opt.step, opt.zero_grad, trainer.loss_fn = opt_step, opt_zero, loss_fn
    res = summarize(c, n_layers)
    res["_step"] = region_counts(c, "_step")
    res["_step"]["optimizer"] = region_counts(c, "_optimizer")
    res["_step"]["zero_grad"] = region_counts(c, "_zero_grad")
    res["_step"]["parameter_tensors"] = len(trainer.params)
    # on CUDA x.to(device), y.to(device) are host-to-device copies (eager ops; no-ops on this CPU: meta here), and
    # self.positions.cpu() in Trainer.step a device-to-host copy that waits for the device
    if DEVICE.type == "cpu":
        res["_step"]["forward"]["eager_op"] = res["_step"]["forward"].get("eager_op", 0) + 3
    res["_step"]["cuda_adjustment"] = ("+3 eager_op: x.to(cuda), y.to(cuda) (host-to-device copies) and "
                                       "positions.cpu() (a device-to-host copy and sync) are no-ops on a CPU")
    res["_step"]["note"] = ("Trainer.step of a one-process plan, one micro-batch: local_slice, the copies to the "
                            "device, the micro-batch slices, autocast, the loss's division, backward() (counted as "
                            "one eager_op), loss.detach(), optimizer.step() (fused AdamW), zero_grad(set_to_none), the "
                            "loss's float() (one device sync)")
    return res


def region_counts(c: Counter, state: str) -> dict:
    out = {}
    for p in PASSES:
        counts = c.tally.counts.get((state, None), {}).get(p)
        if counts:
            out[p] = _clean(counts)
        d = c.tally.diag.get((state, None), {}).get(p)
        if d:
            out.setdefault("diagnostics", {})[p] = _clean(d)
        smp = c.tally.samples.get((state, None), {}).get(p)
        if smp:
            out.setdefault("samples", {})[p] = _clean(smp)
    return out


# -- HuggingFace transformers -----------------------------------------------------------------------------------------
HF_GPT2_RULES = make_rules(r"transformer\.h\.(\d+)", {
    "ln_1": ("norm1", None), "attn": ("qkv", "residual1"), "attn.c_attn": ("qkv", "attention"),
    "attn.attn_dropout": ("attention", None), "attn.c_proj": ("out_proj", "residual1"),
    "attn.resid_dropout": ("residual1", None), "ln_2": ("norm2", None), "mlp": ("mlp_in", "residual2"),
    "mlp.c_fc": ("mlp_in", "activation"), "mlp.act": ("activation", None), "mlp.c_proj": ("mlp_out", "residual2"),
    "mlp.dropout": ("residual2", None),
}, {
    "": ("_model", "loss", "_model"), "transformer": ("_model", "lm_head", "embedding"),
    "transformer.wte": ("embedding", "embedding_output"), "transformer.wpe": ("embedding_output", None),
    "transformer.drop": ("embedding_output", None), "transformer.ln_f": ("final_norm", "final_norm"),
    "lm_head": ("lm_head", "loss"),
})
HF_LLAMA_RULES = make_rules(r"model\.layers\.(\d+)", {
    "input_layernorm": ("norm1", None), "self_attn": ("qkv", "residual1"),
    "self_attn.q_proj": ("qkv", "attention"), "self_attn.k_proj": ("qkv", "attention"),
    "self_attn.v_proj": ("qkv", "attention"), "self_attn.o_proj": ("out_proj", "residual1"),
    "post_attention_layernorm": ("norm2", None), "mlp": ("mlp_in", "residual2"), "mlp.gate_proj": ("mlp_in", None),
    "mlp.act_fn": ("activation", None), "mlp.up_proj": ("mlp_in", "activation"),
    "mlp.down_proj": ("mlp_out", "residual2"),
}, {
    "": ("_model", "loss", "_model"), "model": ("_model", "lm_head", "embedding"),
    "model.embed_tokens": ("embedding", "_model"), "model.rotary_emb": ("attention", "_model"),
    "model.norm": ("final_norm", None), "lm_head": ("lm_head", "loss"),
})


def hf(arch: str = "gpt2", n_layers: int = 2, autocast: bool = True) -> dict:
    """transformers' GPT2LMHeadModel (its defaults: gelu_new, dropout 0.1) or LlamaForCausalLM, SDPA attention,
    called as a training loop calls it: model(input_ids, labels=input_ids).loss (the model shifts the labels)."""
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    if arch == "llama":
        cfg = LlamaConfig(num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                          intermediate_size=128, vocab_size=128, max_position_embeddings=64)
        cfg._attn_implementation = "sdpa"
        model, rules = LlamaForCausalLM(cfg), HF_LLAMA_RULES
    else:
        cfg = GPT2Config(n_layer=n_layers, n_head=2, n_embd=64, vocab_size=128, n_positions=64, bos_token_id=0,
                         eos_token_id=0)
        cfg._attn_implementation = "sdpa"
        model, rules = GPT2LMHeadModel(cfg), HF_GPT2_RULES
    model.train()
    x, _ = tokens(128)
    res = count_model(model, lambda: model(input_ids=x, labels=x).loss, *rules, n_layers, autocast)
    res["_version"] = f"transformers {transformers.__version__}"
    return res


# -- torchtitan (0.3.0 from PyPI, unpacked by perfmodel.export.checks) ------------------------------------------------
TORCHTITAN = "torchtitan==0.3.0"
TITAN_RULES = make_rules(r"layers\.(\d+)", {
    "attention_norm": ("norm1", None), "attention": ("qkv", "residual1"),
    "attention.qkv_linear": ("qkv", "attention"), "attention.qkv_linear.wqkv": ("qkv", "attention"),
    "attention.rope": ("attention", None), "attention.inner_attention": ("attention", None),
    "attention.wo": ("out_proj", "residual1"), "ffn_norm": ("norm2", None), "feed_forward": ("mlp_in", "residual2"),
    "feed_forward.w1": ("mlp_in", "activation"), "feed_forward.w3": ("mlp_in", "activation"),
    "feed_forward.w2": ("mlp_out", "residual2"),
}, {
    "": ("_model", "loss", "embedding"), "tok_embeddings": ("embedding", "_model"), "norm": ("final_norm", None),
    "lm_head": ("lm_head", "loss"),
})
# torch.compile'd flex_attention on a GPU (torch/_inductor/kernel/flex/flex_attention.py, torch 2.13): the forward
# lowers to one Triton template kernel; the backward to delta = sum(out * grad_out) (one reduction kernel) and one
# template kernel (dq, dk, dv; GQA inside it)
FLEX_KERNELS = {"forward": 1, "backward": 2}
CREATE_BLOCK_MASK_KERNELS = 8


class _FlexEmulation(_FusedSDPA):
    """torchtitan's FlexAttention.compiled_flex_attn (a torch.compile'd flex_attention: one compiled region, one
    CompiledFunctionBackward node) with causal SDPA maths."""


def _flex_attn(q, k, v, *, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_aux=None,
               kernel_options=None):
    from types import SimpleNamespace

    kw = {"is_causal": True, "scale": scale, "enable_gqa": enable_gqa}
    c = Counter.current
    if c is None:
        return _FlexEmulation.apply(q, k, v, None, kw), SimpleNamespace(lse=None)
    c.muted += 1
    try:
        out = _FlexEmulation.apply(q, k, v, None, kw)
    finally:
        c.muted -= 1
    c.tally.add(c.key, c.pas, "compiled_entry")
    c.tally.add(c.key, c.pas, "compiled_kernel", FLEX_KERNELS["forward"])
    c.tally.samples[c.key][c.pas]["compiled flex_attention:compiled_entry"] += 1
    return out, SimpleNamespace(lse=None)


def framework_path(dist: str) -> Path:
    """The import root of a framework release in perfmodel's cache (downloaded there once if absent)."""
    from perfmodel.export.checks.releases import fetch

    return fetch(dist)


def torchtitan(n_layers: int = 2) -> dict:
    """torchtitan 0.3.0's Llama3 (its _build_llama3_layers: fused wqkv, ComplexRoPE at per-document positions, the
    default flex attention backend, RMSNorm, SwiGLU), loss as its trainer computes it (cross_entropy_loss, sum,
    divided by the valid tokens), no autocast (torchtitan's bf16 is FSDP2's param dtype: see _fsdp2)."""
    root = str(framework_path(TORCHTITAN))
    if root not in sys.path:
        sys.path.insert(0, root)
    import torchtitan.models.common.attention as A
    from torch.nn.attention.flex_attention import create_block_mask
    from torchtitan.components.loss import cross_entropy_loss
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers

    # torch.compile'd create_block_mask: one region; its kernels as Inductor compiles it for this block mask on this
    # CPU (4 fused kernels and 4 sorts; measured once: CREATE_BLOCK_MASK_KERNELS)
    A._compiled_create_block_mask = compiled_stub(create_block_mask, "create_block_mask", CREATE_BLOCK_MASK_KERNELS,
                                                  None)
    A.FlexAttention.compiled_flex_attn = staticmethod(_flex_attn)
    torch.manual_seed(0)
    dim, vocab = 64, 128
    cfg = Llama3Model.Config(
        dim=dim, vocab_size=vocab, tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim),
        norm=RMSNorm.Config(normalized_shape=dim), lm_head=Linear.Config(in_features=dim, out_features=vocab),
        layers=_build_llama3_layers(n_layers=n_layers, dim=dim, n_heads=4, n_kv_heads=2, hidden_dim=128,
                                    rope=ComplexRoPE.Config(dim=dim // 4, max_seq_len=64, theta=500000,
                                                            scaling="llama"), attn_backend="flex"))
    model = cfg.build()
    model.init_states(buffer_device=torch.device("cpu"))
    x, y = tokens(vocab)
    positions = torch.arange(SEQ).repeat(BATCH, 1)

    def forward():
        c = Counter.current
        with (c.region("_model", after="_model") if c else contextlib.nullcontext()):
            masks = model.get_attention_masks(positions=positions)
        pred = model(x, positions=positions, attention_masks=masks)
        return cross_entropy_loss(pred, y) / y.numel()

    res = count_model(model, forward, *TITAN_RULES, n_layers, autocast=False)
    res["_version"] = TORCHTITAN
    return res


# -- torch.compile'd helpers of other stacks, emulated ----------------------------------------------------------------
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


def _functional(mod, forward=None):
    """(parameter names, f(params, *args) -> mod's forward (or `forward`) with those parameters)."""
    from torch.nn.utils.stateless import _reparametrize_module

    names = [n for n, _ in mod.named_parameters()]
    fwd = forward or mod.forward

    def f(ps, *a, **k):
        with _reparametrize_module(mod, dict(zip(names, ps))):
            return fwd(*a, **k)

    return names, f


def te_linear(mod: nn.Module, name: str, norm: nn.Module | None = None):
    """Megatron's TELayerNormColumnParallelLinear (norm given) / TERowParallelLinear: one fused_module call, one node
    (TE's _LayerNormLinear / _Linear autograd Function), returning (output, bias if skip_bias_add else None)."""
    lin_names, lin = _functional(mod, mod.forward)  # (before fused_stub replaces it)
    nrm_names, nrm = _functional(norm) if norm is not None else ([], None)
    params = [p for _, p in mod.named_parameters()] + ([p for _, p in norm.named_parameters()] if norm else [])
    k = len(lin_names)

    def run(orig, x, *a, **kw):
        def fn(x, *ps):
            y = nrm(ps[k:], x) if nrm is not None else x
            return lin(ps[:k], y, *a, **kw)[0]
        bias = mod.bias if getattr(mod, "skip_bias_add", False) else None
        return [x, *params], fn, lambda out: (out, bias)

    fused_stub(mod, name, run)


def te_attention(mod: nn.Module):
    """TEDotProductAttention (TE's FusedAttention: one FusedAttnFunc node)."""
    def run(orig, q, k, v, *a, **kw):
        return [q, k, v], (lambda q, k, v: orig(q, k, v, *a, **kw)), (lambda out: out)

    fused_stub(mod, "TEDotProductAttention", run)


def te_norm(mod: nn.Module):
    """TENorm (te.pytorch.LayerNorm / RMSNorm): one fused_module, one node."""
    names, f = _functional(mod, mod.forward)
    params = [p for _, p in mod.named_parameters()]

    def run(orig, x):
        return [x, *params], (lambda x, *ps: f(ps, x)), (lambda out: out)

    fused_stub(mod, "TENorm", run)


MEGATRON_SOURCE = (
    "counted: megatron-core 0.16.1 (PyPI wheel unpacked by perfmodel.export.checks) GPTModel on a one-rank gloo group, "
    "Float16Module bf16, dropout 0.1 (GPT-2) / 0 (Llama), tp = pp = 1, loss inside (vocab-parallel cross entropy: ~24 "
    "eager ops and 3 all-reduces even at tp 1), Megatron-LM's default fusions (bias_dropout_fusion, "
    "bias_activation_fusion: torch.compile'd jit_fuser functions, MEG_COMPILED; masked_softmax_fusion without its "
    "kernels: the torch softmax path); Column/RowParallelLinear's LinearWithGradAccumulationAndAsyncCommunication "
    "forward = one fused_module (its Python backward's torch calls counted in backward). Main entry: the Transformer "
    "Engine spec (models/gpt/gpt_layer_specs.py get_gpt_layer_with_transformer_engine_spec@0.16.1: linear_qkv = "
    "TELayerNormColumnParallelLinear (norm1 fused into it: input_layernorm is IdentityOp), core_attention = "
    "TEDotProductAttention, linear_proj / linear_fc2 = TERowParallelLinear, linear_fc1 = "
    "TELayerNormColumnParallelLinear (pre_mlp_layernorm IdentityOp), final_layernorm = TENorm; "
    "extensions/transformer_engine.py) emulated: Megatron's own code runs around one fused_module call and one "
    "autograd node per TE module (te_linear, te_attention, te_norm), RoPE (llama) as TE's fused rope (one eager_op, "
    "one node per q and k: apply_rope_fusion). _variants: te_llama (RMSNorm, SwiGLU, RoPE, no biases), local "
    "(get_gpt_layer_local_spec: torch norms, unfused DotProductAttention with the rng-tracker fork), local_no_fusion "
    "(TransformerConfig's defaults: what benchmarks/host_megatron.py measured), local_llama")


# -- Megatron-Core (0.16.1 from PyPI), local spec ---------------------------------------------------------------------
MEGATRON = "megatron-core==0.16.1"
MEG_RULES = make_rules(r"module\.decoder\.layers\.(\d+)", {
    "input_layernorm": ("norm1", None), "self_attention": ("qkv", "residual1"),
    "self_attention.linear_qkv": ("qkv", "attention"), "self_attention.q_layernorm": ("attention", None),
    "self_attention.k_layernorm": ("attention", None), "self_attention.core_attention": ("attention", None),
    "self_attention.core_attention.scale_mask_softmax": ("attention", None),
    "self_attention.core_attention.attention_dropout": ("attention", None),
    "self_attention.linear_proj": ("out_proj", "residual1"), "pre_cross_attn_layernorm": ("residual1", None),
    "cross_attention": ("residual1", None), "cross_attn_bda": ("residual1", None),
    "pre_mlp_layernorm": ("norm2", None), "mlp": ("mlp_in", "residual2"),
    "mlp.linear_fc1": ("mlp_in", "activation"), "mlp.linear_fc2": ("mlp_out", "residual2"),
}, {
    "": ("_model", "loss", "_model"), "module": ("_model", "loss", "embedding"),
    "module.embedding": ("embedding", "_model", "embedding"),
    "module.embedding.word_embeddings": ("embedding", "embedding_output"),
    "module.embedding.position_embeddings": ("embedding_output", None),
    "module.embedding.embedding_dropout": ("embedding_output", None),
    "module.rotary_pos_emb": ("attention", "_model"), "module.decoder": ("_model", "lm_head", "_model"),
    "module.decoder.final_layernorm": ("final_norm", None), "module.output_layer": ("lm_head", "loss"),
})
# Megatron-Core's jit_fuser (megatron/core/jit.py: torch.compile on torch >= 2.2) functions, with the kernels Inductor
# makes of them on a GPU (pointwise fusions: one kernel; dropout adds Inductor's seed kernel; a bias gradient adds a
# reduction): (forward kernels, backward kernels or None where called without gradients, inside an autograd.Function)
MEG_COMPILED = {
    ("megatron.core.fusions.fused_bias_dropout", "bias_dropout_add_fused_train"): (2, 1),
    ("megatron.core.fusions.fused_bias_gelu", "bias_gelu"): (1, None),
    ("megatron.core.fusions.fused_bias_gelu", "bias_gelu_back"): (1, None),
    ("megatron.core.fusions.fused_bias_swiglu", "swiglu"): (1, None),
    ("megatron.core.fusions.fused_bias_swiglu", "bias_swiglu"): (1, None),
    ("megatron.core.fusions.fused_bias_swiglu", "swiglu_back"): (1, None),
    ("megatron.core.fusions.fused_bias_swiglu", "bias_swiglu_back"): (1, None),
}
# autograd.Functions whose forward is priced as one fused_module (the torch calls inside are not counted again; their
# Python backward's calls are counted in backward): Megatron's linear layers
MEG_FUSED_FUNCTIONS = ("megatron.core.tensor_parallel.layers", "LinearWithGradAccumulationAndAsyncCommunication")


def fused_function(cls):
    """Make `cls`'s forward count as one fused_module call (idempotent)."""
    if getattr(cls, "_host_counts_fused", False):
        return
    orig = cls.forward

    def forward(ctx, *args, **kwargs):
        c = Counter.current
        if c is None or c.muted:
            return orig(ctx, *args, **kwargs)
        c.fused_depth += 1
        try:
            return orig(ctx, *args, **kwargs)
        finally:
            c.fused_depth -= 1
            if not c.fused_depth:
                c.tally.add(c.key, c.pas, "fused_module")
                c.tally.samples[c.key][c.pas][f"{cls.__name__}.apply:fused_module"] += 1

    cls.forward = staticmethod(forward)
    cls._host_counts_fused = True


def process_group():
    """A one-rank gloo process group (HashStore) for Megatron and FSDP2, made once."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def megatron_te(arch: str = "gpt2", n_layers: int = 2) -> dict:
    """Megatron-Core's GPTModel as get_gpt_layer_with_transformer_engine_spec builds it, TE's modules emulated (see
    MEGATRON_SOURCE)."""
    return megatron_core(arch, True, n_layers, te=True)


def megatron_core(arch: str = "gpt2", fusions: bool = True, n_layers: int = 2, te: bool = False) -> dict:
    """Megatron-Core 0.16.1's GPTModel with get_gpt_layer_local_spec (no TE, no apex: torch LayerNorm / RMSNorm,
    Column/RowParallelLinear, DotProductAttention with FusedScaleMaskSoftmax's torch fallback), Float16Module bf16,
    dropout 0.1, tp = pp = 1 on a one-rank gloo group, loss inside the model (labels=: vocab-parallel cross
    entropy). fusions: Megatron-LM's defaults (bias_dropout_fusion, bias_activation_fusion, masked_softmax_fusion
    on; their jit_fuser functions are torch.compile'd: counted as compiled regions, MEG_COMPILED); else
    TransformerConfig's defaults (all off: what benchmarks/host_megatron.py measured)."""
    import importlib

    root = str(framework_path(MEGATRON))
    if root not in sys.path:
        sys.path.insert(0, root)
    import megatron.core.jit as J

    J.disable_jit_fuser()  # before the modules that decorate with it are imported: plain functions, stubbed below
    torch.cuda.current_device = lambda: "cpu"  # Megatron names the device for buffers
    process_group()
    from megatron.core import parallel_state, tensor_parallel

    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    tracker = tensor_parallel.get_cuda_rng_tracker()
    tracker.fork = _rng_fork
    for (mod, name), (fk, bk) in MEG_COMPILED.items():
        m = importlib.import_module(mod)
        orig = getattr(m, name)
        orig = getattr(orig, "__wrapped_meg__", orig)
        stub = compiled_stub(orig, name, fk, bk)
        stub.__wrapped_meg__ = orig
        setattr(m, name, stub)
    fused_function(getattr(importlib.import_module(MEG_FUSED_FUNCTIONS[0]), MEG_FUSED_FUNCTIONS[1]))
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import Float16Module

    torch.manual_seed(0)
    kw = dict(num_layers=n_layers, hidden_size=64, num_attention_heads=2, bf16=True, params_dtype=torch.bfloat16,
              pipeline_dtype=torch.bfloat16, hidden_dropout=0.1, attention_dropout=0.1, use_cpu_initialization=True)
    if fusions:
        kw.update(bias_dropout_fusion=True, bias_activation_fusion=True, masked_softmax_fusion=True)
    spec_kw, model_kw = {}, {"position_embedding_type": "learned_absolute"}
    if arch == "llama":
        kw.update(normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
                  num_query_groups=1, ffn_hidden_size=128, hidden_dropout=0.0, attention_dropout=0.0)
        spec_kw = {"normalization": "RMSNorm"}
        model_kw = {"position_embedding_type": "rope", "share_embeddings_and_output_weights": False}
    cfg = TransformerConfig(**kw)
    model = GPTModel(config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(**spec_kw), vocab_size=128,
                     max_sequence_length=64, **model_kw)
    if te:
        from megatron.core.transformer.identity_op import IdentityOp

        import megatron.core.transformer.attention as attn_mod

        for layer in model.decoder.layers:
            ln1, ln2 = layer.input_layernorm, layer.pre_mlp_layernorm
            layer.input_layernorm, layer.pre_mlp_layernorm = IdentityOp(), IdentityOp()
            te_linear(layer.self_attention.linear_qkv, "TELayerNormColumnParallelLinear", ln1)
            te_attention(layer.self_attention.core_attention)
            te_linear(layer.self_attention.linear_proj, "TERowParallelLinear")
            te_linear(layer.mlp.linear_fc1, "TELayerNormColumnParallelLinear", ln2)
            te_linear(layer.mlp.linear_fc2, "TERowParallelLinear")
        te_norm(model.decoder.final_layernorm)
        if arch == "llama":
            rope = getattr(attn_mod, "_host_counts_rope", attn_mod.apply_rotary_pos_emb)
            attn_mod._host_counts_rope = rope

            def fused_rope(t, freqs, config, *a, **kw):
                c = Counter.current
                if c is None or c.muted:
                    return rope(t, freqs, config, *a, **kw)
                c.tally.add(c.key, c.pas, "eager_op")
                c.tally.samples[c.key][c.pas]["fused_apply_rotary_pos_emb:eager_op"] += 1
                return one_node(lambda t: rope(t, freqs, config, *a, **kw), [t])

            attn_mod.apply_rotary_pos_emb = fused_rope
    model = Float16Module(cfg, model)
    model.train()
    tok, lab = tokens(128)
    pos = torch.arange(SEQ).unsqueeze(0).expand(BATCH, -1)
    mask = torch.triu(torch.ones(SEQ, SEQ), diagonal=1).bool()[None, None]
    loss_mask = torch.ones(BATCH, SEQ)

    def forward():
        out = model(tok, pos, mask, labels=lab)  # [b, s] per-token losses (fp32)
        return (out.float() * loss_mask).sum() / loss_mask.sum()  # pretrain_gpt's loss_func

    rules, layer_of = MEG_RULES
    try:
        res = count_model(model, forward, rules, layer_of, n_layers, autocast=False)
    finally:
        if te and arch == "llama":
            attn_mod.apply_rotary_pos_emb = attn_mod._host_counts_rope
    res["_version"] = MEGATRON
    return res


@contextlib.contextmanager
def _rng_fork(name=None):
    """Megatron's CudaRNGStatesTracker.fork (tensor_parallel/random.py) with the CPU generator: get and set the
    device RNG state, record the CPU state, then compare it (eq, all, item), get and set back. The generator calls
    are not torch functions; each counts as a view_op (host work, no kernel)."""
    c = Counter.current
    if c is not None and not c.muted:
        c.tally.add(c.key, c.pas, "view_op", 4)  # get_rng_state, set_state; at exit get_rng_state, set_state
        c.tally.samples[c.key][c.pas]["rng_tracker.fork get/set_state:view_op"] += 4
    cpu = torch.get_rng_state()
    try:
        yield
    finally:
        if not torch.all(cpu == torch.get_rng_state()).item():
            pass


# -- optimizer, gradient clipping, zero_grad: per tensor and per step ----------------------------------------------
def _count_call(fn, state="_call") -> dict:
    """Kinds (and meta, kernels) of one call of fn() under a model-less Counter."""
    c = Counter(None, lambda n: None, lambda n: None, state)
    with c.active():
        c.set(state)
        fn()
    out = dict(c.tally.counts.get((state, None), {}).get("forward", {}))
    d = c.tally.diag.get((state, None), {}).get("forward", {})
    out.update({f"diag.{k}": v for k, v in d.items() if k in ("meta", "aten_kernels", "syncs")})
    return out


def _line(measure) -> dict:
    """Per tensor and per step: the line through 8 and 64 tensors."""
    a, b = measure(8), measure(64)
    keys = sorted(set(a) | set(b))
    per = {k: (b.get(k, 0) - a.get(k, 0)) / 56 for k in keys}
    step = {k: a.get(k, 0) - 8 * per[k] for k in keys}
    clean = lambda d: {k: round(v, 3) for k, v in d.items() if abs(v) > 1e-9}  # noqa: E731
    return {"per_tensor": clean(per), "per_step": clean(step), "n8": a, "n64": b}


def _params(n):
    ps = [torch.zeros(16, requires_grad=True) for _ in range(n)]
    for p in ps:
        p.grad = torch.ones_like(p)
    return ps


def optimizer_counts() -> dict:
    """torch.optim.AdamW.step (fused, foreach, for-loop), clip_grad_norm_ (foreach) and zero_grad(set_to_none=True):
    calls by kind per parameter tensor and per step (8 and 64 tensors of 16 elements, after one warm-up step that
    creates the state). On a GPU the same Python runs: fused is one _fused_adamw_ for all tensors of a device and
    dtype, foreach one _foreach_* per arithmetic step, the for-loop ~a dozen ops per tensor."""
    out = {}
    for name, kw in (("adamw_fused", dict(fused=True)), ("adamw_foreach", dict(foreach=True)),
                     ("adamw_forloop", dict(foreach=False))):
        def measure(n, kw=kw):
            opt = torch.optim.AdamW(_params(n), lr=1e-4, weight_decay=0.1, **kw)
            opt.step()
            return _count_call(opt.step)
        out[name] = _line(measure)

    def clip(n):
        ps = _params(n)
        torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True)
        return _count_call(lambda: torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True))
    out["clip_grad_norm_foreach"] = _line(clip)

    def zero(n):
        opt = torch.optim.AdamW(_params(n), lr=1e-4, fused=True)
        return _count_call(lambda: opt.zero_grad(set_to_none=True))
    out["zero_grad_set_to_none"] = _line(zero)
    out["note"] = ("record_function's enter/exit (profiler ops, no kernel) count as view_op; diag.meta: attribute "
                   "reads (p.grad, .is_sparse, ...: ~0.1 us each), not priced; clip_grad_norm_ returns the norm as a "
                   "device tensor (no sync); a loop that then calls .item() on it pays a sync")
    return out


# -- FSDP2 ------------------------------------------------------------------------------------------------------------
FSDP_HOOKS = {  # (class path, method) -> phase
    ("torch.distributed.fsdp._fully_shard._fsdp_state", "FSDPState", "_pre_forward"): "pre_forward",
    ("torch.distributed.fsdp._fully_shard._fsdp_state", "FSDPState", "_post_forward"): "post_forward",
    ("torch.distributed.fsdp._fully_shard._fsdp_state", "FSDPState", "_pre_backward"): "pre_backward",
    ("torch.distributed.fsdp._fully_shard._fsdp_param_group", "FSDPParamGroup", "post_backward"): "post_backward",
    ("torch.distributed.fsdp._fully_shard._fsdp_state", "FSDPState",
     "_root_post_backward_final_callback"): "root_final_callback",
}


def fsdp2_counts(n_layers: int = 2) -> dict:
    """fsdp2_worker's counts, from a subprocess (it needs a process group of its own: torch's fake backend)."""
    import subprocess

    run = subprocess.run([sys.executable, __file__, "--fsdp2-worker"], capture_output=True, text=True, timeout=300)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
    if run.returncode or not lines:
        return {"error": (run.stderr or run.stdout).strip()[-800:]}
    return json.loads(lines[-1])


def fsdp2_worker(n_layers: int = 2) -> dict:
    """nanoGPT's twin (benchmarks/host_launch.py) with each block and the root under fully_shard on a mesh of 2 ranks
    of torch's fake process group (one process; collectives dispatched, not run: on a one-rank mesh FSDP2 skips its
    all-gather and reduce-scatter, _fsdp_param_group.py unshard/wait_for_unshard, _fsdp_collectives.py
    foreach_reduce), bf16 params, fp32 reduce (torchtitan's wrapping; host_launch.py's fsdp2 variant): the calls FSDP2's
    hooks make per step, by hook, per wrapped block and for the root (one micro-batch, the second step). Each hook runs
    under its own function mode (tensor hooks and the engine's callback run outside the model's), so every torch call
    in it is counted; collectives are the c10d ops dispatched (nccl_call)."""
    import importlib

    from host_launch import GPT, GPTConfig
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    root_states = set()

    def scope(obj):
        mods = getattr(obj, "_modules", None) or getattr(obj, "modules", None) or []
        return "root" if any(id(m) in root_states for m in mods) else "block"

    saved = []  # patched before fully_shard: it registers the bound hooks
    for (mod, cls, meth), phase in FSDP_HOOKS.items():
        k = getattr(importlib.import_module(mod), cls)
        orig = getattr(k, meth)
        saved.append((k, meth, orig))

        def wrapped(self_, *a, _orig=orig, _phase=phase, **kw):
            cur = Counter.current
            if cur is None or cur.muted:
                return _orig(self_, *a, **kw)
            push = torch._C._len_torch_function_stack() == 0
            with cur.region(f"fsdp2.{scope(self_)}.{_phase}"), (cur.FM() if push else contextlib.nullcontext()):
                return _orig(self_, *a, **kw)

        setattr(k, meth, wrapped)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**TINY, "n_layer": n_layers}))
    root_states.add(id(model))
    mesh = init_device_mesh("cpu", (2,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.h:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    x, y = tokens(TINY["vocab"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    for _ in range(2):  # lazy init, optimizer state
        model(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    c = Counter(model, *NANOGPT_RULES, start="_step")
    try:
        with c.active():
            c.set("_step")
            loss = model(x, y)
            loss.backward()
    finally:
        for k, meth, orig in saved:
            setattr(k, meth, orig)
    out = {}
    for (state, layer), passes in c.tally.counts.items():
        if not state.startswith("fsdp2."):
            continue
        _, who, phase = state.split(".")
        n = n_layers if who == "block" else 1
        d = out.setdefault(who, {}).setdefault(phase, collections.Counter())
        for p in PASSES:
            for kk, v in passes[p].items():
                d[kk] += v / n
        diag = c.tally.diag.get((state, layer), {})
        for p in PASSES:
            for kk, v in diag.get(p, {}).items():
                if kk in ("meta", "aten_kernels", "c10d_ops"):
                    d[f"diag.{kk}"] += v / n
        smp = c.tally.samples.get((state, layer), {})
        for p in PASSES:
            for kk, v in smp.get(p, {}).items():
                if not kk.endswith(":meta"):
                    smp_out = out.setdefault(who, {}).setdefault("samples", {})
                    smp_out.setdefault(phase, collections.Counter())[kk] += v / n
    res = {who: {ph: (_clean(v) if ph != "samples" else {q: _clean(w) for q, w in v.items()})
                  for ph, v in phases.items()} for who, phases in out.items()}
    model_res = summarize(c, n_layers)
    res["model_under_fsdp2"] = {op: model_res[op] for op in ("qkv", "attention", "mlp_in")}
    res["world_size"] = 2
    res["note"] = ("per wrapped block per step (mean over the blocks) and for the root module; pre_forward: the "
                   "all-gather (unshard: copy-in, all_gather_into_tensor, copy-out) and the input cast; post_forward: "
                   "reshard (frees the unsharded parameters) and the pre-backward hook registration; pre_backward: the "
                   "all-gather again (prefetches the next block's); post_backward: reduce-scatter "
                   "(reduce_scatter_tensor "
                   "of the fp32 gradients, the copy into the sharded grads); root_final_callback: finalize, waits. "
                   "The root keeps its parameters unsharded after forward (no all-gather in backward). FSDP2's Python "
                   "bookkeeping beyond these torch calls is not a torch call and is not counted: price the hooks by "
                   "their measured time where one is available (the host's zero3_hook_s, spec.host.cpu)")
    return res


# -- torch.compile'd nanoGPT ---------------------------------------------------------------------------------------
KERNEL_CALL = re.compile(r"^\s*(?:\w+\s*=\s*)?(cpp_fused_\w+|triton_\w+\.run|extern_kernels\.\w+"
                         r"|torch\.ops\.\w+\.\w+(?:\.\w+)?|aten\.\w+(?:\.\w+)?)\(", re.M)


def inductor_kernels(modules) -> list[list[str]]:
    """The kernel calls in each Inductor output module's call(): generated kernels (cpp_fused_* on a CPU, triton_* on
    a GPU), extern kernels (GEMMs) and ATen fallbacks (SDPA, sort ...); allocations and views are not calls."""
    out = []
    for m in modules:
        src = Path(m.__file__).read_text()
        i = src.find("def call(")
        body = src[i:src.find("\nrunner", i) if "\nrunner" in src[i:] else None]
        out.append([k for k in KERNEL_CALL.findall(body)])
    return out


def nanogpt_compiled() -> dict:
    """torch.compile(model) of nanoGPT's twin (host_launch.py's compiled step, bf16 autocast), 1 and 2 layers: compiled
    regions entered per step (forward, and the backward's CompiledFunctionBackward), kernels per region from Inductor's
    output code (this CPU's C++ kernels; a GPU build's Triton kernels differ in fusion: see the note), autograd
    nodes."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    from torch._inductor.codecache import PyCodeCache

    from host_launch import GPT, GPTConfig

    res = {}
    for n in (1, 2):
        torch._dynamo.reset()
        counters.clear()
        before = list(PyCodeCache.modules)
        torch.manual_seed(0)
        model = GPT(GPTConfig(**{**TINY, "n_layer": n}))
        run = torch.compile(model)
        x, y = tokens(TINY["vocab"])
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = run(x, y)
            nodes, _ = walk([loss.grad_fn])
            loss.backward()
            model.zero_grad(set_to_none=True)
        new = [m for m in PyCodeCache.modules if m not in before]
        kernels = inductor_kernels(new)
        res[n] = {"graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(counters["graph_break"].values()),
                  "regions": len(new), "kernels_per_region": [len(k) for k in kernels],
                  "kernel_names": kernels, "autograd_nodes": len(nodes),
                  "node_types": dict(collections.Counter(type(q).__name__ for q in nodes))}
    one, two = res[1], res[2]
    fwd = [len(k) for k in one["kernel_names"]]
    per_layer = [b - a for a, b in zip(one["kernels_per_region"], two["kernels_per_region"])]
    summary = {
        "forward": {"compiled_entry": 1, "compiled_kernel": one["kernels_per_region"][0]},
        "backward": {"compiled_entry": 1, "compiled_kernel": one["kernels_per_region"][-1],
                     "autograd_node": one["autograd_nodes"]},
        "per_layer": {"forward": {"compiled_kernel": per_layer[0]},
                      "backward": {"compiled_kernel": per_layer[-1],
                                   "autograd_node": two["autograd_nodes"] - one["autograd_nodes"]}},
    }
    for p in PASSES:  # the model-level part (embedding, head, loss, the region's own entry) = 1 layer - per layer
        summary[p + "_model_level"] = {k: summary[p][k] - summary["per_layer"][p].get(k, 0)
                                       for k in summary[p] if k != "compiled_entry"}
    del fwd
    return {"summary": summary, "layers_1": one, "layers_2": two,
            "note": ("Inductor on this CPU (C++ kernels, extern GEMMs and SDPA as ATen calls); a GPU build fuses "
                     "differently (Triton: a reduction and its pointwise consumers, e.g. layer norm, can take separate "
                     "kernels; the CPU backend fuses loops more), so compiled_kernel is the CPU count, a lower bound "
                     "for "
                     "the GPU's. The measured H100 compiled twin's kernels per step are in _sanity.")}


# -- this CPU's per-call costs (the view_op / eager_op ratio the sanity check borrows) -------------------------------
def cpu_ratios(reps: int = 9) -> dict:
    """Seconds per call on this CPU of perfmodel.calibrate.host.calls' eager_op (torch.matmul of 16x16, no grad) and
    view_op (x.view(-1) / x.t() of a tensor requiring grad) probes, of a meta call (x.shape, x.size(-1)) and of
    module_call (nn.Linear(16, 16) forward with grad); and their ratios to eager_op."""
    from perfmodel.calibrate.host import calls as hc

    dev = torch.device("cpu")
    x = torch.randn(16, 16, requires_grad=True)
    out = {"eager_op": hc.eager_op(dev, reps), "view_op": hc.view_op(dev, reps),
           "module_call": hc.module_call(dev, reps),
           "meta": hc.burst_s(lambda: (x.shape, x.size(-1)), dev, reps=reps) / 2}
    out["ratios_to_eager_op"] = {k: round(v / out["eager_op"], 3) for k, v in out.items() if k != "eager_op"}
    return out


# -- the read-only stacks ------------------------------------------------------------------------------------------
READ_ONLY: dict = {}  # filled below (READ_ONLY.update): counts read from each stack's source, with file@commit



def _op(fwd: dict | None = None, bwd: dict | None = None, note: str = "") -> dict:
    d = {"forward": fwd or {}, "backward": bwd or {}}
    if note:
        d["note"] = note
    return d


LLMC = "karpathy/llm.c@f1e2ace651495b74ae22d45d1723443fd00ecd3a"
MDS = "microsoft/Megatron-DeepSpeed@f4157bea69f3df8c6cb66f2ebcda66ba03d1288e"
NANOTRON = "huggingface/nanotron@2411b022a75fb7f7561a1bb4166706da5e1b76de"
FOUNDRY = "mosaicml/llm-foundry@8c8dd48f72168c5d51e2f7b151595892a8fba43d"
K = "kernel_launch"
READ_ONLY.update({
    "llmc": {
        "embedding": _op({K: 1}, {K: 4}, "encoder_forward (wte + wpe in one kernel); backward: wpe_backward_kernel, "
                                         "2 cudaMemcpyAsync H2D of the bucket tables (built on the CPU from the tokens "
                                         "every step: O(B*T) host work), wte_backward_kernel (llmc/encoder.cuh)"),
        "embedding_output": _op(note="in encoder_forward"),
        "norm1": _op({}, {K: 2}, "forward fused into the previous layer's fused_residual_forward5 (layer 0's: _model); "
                                 "backward: cudaMemsetAsync + layernorm_backward_kernel10 (llmc/layernorm.cuh)"),
        "qkv": _op({K: 1}, {K: 4}, "matmul_forward_cublaslt (bias fused in the cuBLASLt epilogue); backward: "
                                   "matmul_backward_bias_kernel9 + reduce_add_sum_kernel (bias), dinp GEMM, dweight "
                                   "GEMM (llmc/matmul.cuh). Each GEMM also builds cuBLASLt descriptors and queries "
                                   "cublasLtMatmulAlgoGetHeuristic on the host"),
        "attention": _op({K: 1}, {K: 1}, "cuDNN build (USE_CUDNN=1): one cuDNN-frontend graph execute each way "
                                         "(llmc/cudnn_att.cpp; the backward graph runs a few kernels). Without cuDNN: "
                                         "forward 5 (permute, 2 batched cuBLASLt GEMMs, softmax, unpermute), "
                                         "backward 7 "
                                         "(unpermute, 4 GEMMs, softmax backward, permute) (llmc/attention.cuh)"),
        "out_proj": _op({K: 1}, {K: 4}),
        "residual1": _op({K: 1}, {}, "fused_residual_forward5: residual add + ln2 in one kernel; the residual's "
                                     "gradient is accumulated by layernorm_backward (+=)"),
        "norm2": _op({}, {K: 2}, "forward in residual1's kernel"),
        "mlp_in": _op({K: 1}, {K: 4}, "gelu_fusion defaults to 0 (train_gpt2.cu main: gelu_fusion = 0)"),
        "activation": _op({K: 1}, {K: 1}, "gelu_forward; gelu_backward_inplace (not fused: gelu_fusion 0)"),
        "mlp_out": _op({K: 1}, {K: 4}),
        "residual2": _op({K: 1}, {},
                         "fused_residual_forward5: residual + the next layer's ln1 (the last layer's: lnf)"),
        "final_norm": _op({}, {K: 2}, "forward in the last layer's residual2 kernel"),
        "lm_head": _op({K: 1}, {K: 2}, "no bias: dinp and dweight GEMMs"),
        "loss": _op({K: 1}, {}, "fused_classifier_kernel5: softmax, loss and dlogits in one kernel "
                                "(llmc/fused_classifier.cuh), launched at the start of gpt2_backward_and_reduce"),
        "_layer": _op(note="12 ncclAllReduce (ZeRO-1: ncclReduceScatter) in one ncclGroupStart/End per layer on the "
                           "last "
                           "micro-step when multi-GPU (llmc/zero.cuh multi_gpu_async_reduce_gradient): 1 NCCL kernel, "
                           "cudaEventRecord + cudaStreamWaitEvent; nothing on one GPU"),
        "_model": _op({K: 3}, {K: 6}, "forward: cudaMemcpy of the inputs (H2D, synchronous), layer 0's "
                                      "layernorm_forward, cudaDeviceSynchronize at the end of gpt2_forward; backward: "
                                      "2 cudaMemsetAsync (losses, grads; first micro-step), cudaMemcpy targets, "
                                      "cudaMemset "
                                      "dresidual, global_sum_deterministic of the loss, cudaMemcpyAsync D2H of the "
                                      "loss"),
        "_optimizer": {"per_step": {K: 20, "note": (
            "gpt2_calculate_grad_norm: cudaMemsetAsync + global_norm_squared_kernel + global_sum_deterministic + "
            "cudaMemcpy D2H (a sync); gpt2_update: one adamw_kernel3 launch per parameter tensor kind "
            "(NUM_PARAMETER_TENSORS = 16: each launch covers all layers' slices)")}, "per_tensor": {}},
        "_source": f"read: {LLMC} train_gpt2.cu gpt2_forward / gpt2_backward_and_reduce / gpt2_update, llmc/*.cuh; "
                   "bf16, cuDNN attention, recompute 0, gelu_fusion 0 (defaults); kernel_launch counts "
                   "cudaLaunchKernel, "
                   "cuBLASLt GEMM, cuDNN execute and cudaMemset/Memcpy calls alike",
    },
    "deepspeed": {
        "embedding": _op({"eager_op": 1, "view_op": 3}, {"autograd_node": 3}, "as megatron-core's (counted)"),
        "embedding_output": _op({"eager_op": 2, "module_call": 2, "view_op": 1}, {"autograd_node": 6},
                                "position add, transpose/contiguous, nn.Dropout: as megatron-core's (counted)"),
        "norm1": _op({"fused_module": 1}, {"autograd_node": 3}, "apex MixedFusedLayerNorm "
                     "(FusedLayerNormAffineFunction: one node, AccumulateGrad for weight and bias)"),
        "qkv": _op({"view_op": 1, "fused_module": 1}, {"autograd_node": 4, "eager_op": 3, "view_op": 3},
                   "ColumnParallelLinear -> LinearWithGradAccumulationAndAsyncCommunication "
                   "(megatron/core/tensor_parallel/"
                   "layers.py, the same design as megatron-core's: counted there); backward Python: 2 matmul + bias "
                   "sum"),
        "attention": _op({"eager_op": 4, "view_op": 25, "module_call": 1}, {"autograd_node": 20},
                         "ParallelAttention.forward (megatron/model/transformer.py L697-878): 3 last-dim slices + 3 "
                         "reshape of mixed_x_layer; CoreAttention (L287-375): views, baddbmm into the global memory "
                         "buffer, FusedScaleMaskSoftmax's ScaledUpperTriangMaskedSoftmax kernel (one eager_op, one "
                         "node), "
                         "rng-tracker fork (4 generator calls), nn.Dropout, bmm, permute + contiguous, view. Derived "
                         "from "
                         "megatron-core's counted DotProductAttention (same code) without its torch softmax fallback "
                         "(4 ops, 4 nodes -> 1, 1) and without mcore's CPU RNG-state check (eq, all, item). "
                         "use_flash_attn: "
                         "instead 3 rearrange + contiguous (e3 v3), flash_attn_func (e1, 1 node), rearrange + "
                         "contiguous"),
        "out_proj": _op({"view_op": 2, "fused_module": 1}, {"autograd_node": 3, "eager_op": 2, "view_op": 3},
                        "RowParallelLinear, skip_bias_add (bias goes to bias-dropout-add)"),
        "residual1": _op({"view_op": 1, "eager_op": 3}, {"autograd_node": 5},
                         "attention_bias.expand_as(residual); bias_dropout_add_fused_train (@torch.jit.script, "
                         "L895-901): one Python call running add, dropout, add in the TorchScript interpreter (3 ops "
                         "dispatched from C++; dropout is not fused); backward: Add, Dropout, Add, Expand nodes + bias "
                         "AccumulateGrad"),
        "norm2": _op({"fused_module": 1}, {"autograd_node": 3}),
        "mlp_in": _op({"view_op": 3, "fused_module": 1}, {"autograd_node": 3, "eager_op": 2, "view_op": 3},
                      "ColumnParallelLinear, skip_bias_add (bias to bias_gelu)"),
        "activation": _op({"eager_op": 1}, {"autograd_node": 2, "eager_op": 1},
                          "bias_gelu_impl = GeLUFunction.apply (megatron/model/fused_bias_gelu.py: @torch.jit.script "
                          "bias_gelu / bias_gelu_back, one kernel each); node + the bias's AccumulateGrad"),
        "mlp_out": _op({"view_op": 2, "fused_module": 1}, {"autograd_node": 3, "eager_op": 2, "view_op": 3}),
        "residual2": _op({"view_op": 1, "eager_op": 3}, {"autograd_node": 5},
                         "as residual1; then core.utils.make_viewless_tensor (a no-op on a non-view)"),
        "final_norm": _op({"fused_module": 1}, {"autograd_node": 3}),
        "lm_head": _op({"view_op": 2, "fused_module": 1}, {"autograd_node": 3, "eager_op": 2, "view_op": 3},
                       "parallel_lm_logits: copy_to_tensor_model_parallel_region + LinearWithGradAccumulation... "
                       "(megatron/model/language_model.py)"),
        "loss": _op({"eager_op": 24, "view_op": 8, "nccl_call": 3}, {"autograd_node": 6, "eager_op": 7, "view_op": 3},
                    "vocab_parallel_cross_entropy (megatron/core/tensor_parallel/cross_entropy.py: 3 all-reduces over "
                    "the tensor group even at tp 1): as megatron-core's (counted)"),
        "_layer": _op({"view_op": 1, "eager_op": 2}, {},
                      "the layer's call; torch.tensor(0.0, device=...) twice (moe_loss, mlp_bias: host-to-device "
                      "copies) in ParallelTransformerLayer.forward (L1320-1480)"),
        "_step": {"per_parameter_per_micro_batch": {"eager_op": 1, "view_op": 3, "note": (
            "ZeRO-1/2 gradient hook (deepspeed==0.19.8 deepspeed/runtime/zero/stage_1_and_2.py "
            "reduce_independent_p_g_buckets_and_remove_grads L1414: narrow, copy_ into the IPG bucket, view_as, plus "
            "Python bookkeeping); one reduce (nccl_call) per full bucket (reduce_bucket_size) in reduce_ipg_grads")}},
        "_source": f"read: {MDS} megatron/model/transformer.py ParallelTransformerLayer / ParallelAttention / "
                   "CoreAttention / ParallelMLP (GPT-2 style: apex fused LayerNorm, bias_gelu_fusion, "
                   "bias_dropout_fusion, masked_softmax_fusion, unfused core attention, dropout 0.1), with the pieces "
                   "it shares with megatron-core's counted local-spec run taken from that run",
    },
    "nanotron": {
        "embedding": _op({"view_op": 2, "module_call": 1}, {"autograd_node": 3},
                         "Embedding.forward (src/nanotron/models/llama.py L797): input_ids.transpose, "
                         "TensorParallelEmbedding (an nn.Embedding: no masking at tp 1); PipelineBlock wrapper call"),
        "norm1": _op({"view_op": 1, "fused_module": 1}, {"autograd_node": 2},
                     "TritonRMSNorm (src/nanotron/nn/layer_norm.py): flash-attn's Triton layer_norm_fn "
                     "(LayerNormFn: one Triton kernel each way)"),
        "qkv": _op({"view_op": 1, "module_call": 1}, {"autograd_node": 6},
                   "CausalSelfAttention call; TensorParallelColumnLinear (an nn.Linear: differentiable_identity + "
                   "F.linear at tp 1, tp_mode ALL_REDUCE) (src/nanotron/parallel/tensor_parallel/functional.py "
                   "column_linear); nodes: identity Function, View, Mm, T, UnsafeView, AccumulateGrad"),
        "attention": _op({"eager_op": 14, "view_op": 20}, {"autograd_node": 24},
                         "GQA split (1 view), 3 x transpose + contiguous + view; _forward_training: 2 unsqueeze, cat, "
                         "permute + contiguous, flash_attn's RotaryEmbedding module (2 Triton rotary Functions: q, "
                         "kv), "
                         "split, 3 views; CoreAttention (L267): 2 zeros, 2 sum, 2 cumsum into slices of cu_seqlens, "
                         "flash_attn_varlen_func (one Function, one node); contiguous (no-op), view, transpose"),
        "out_proj": _op({"module_call": 1}, {"autograd_node": 6},
                        "TensorParallelRowLinear: F.linear + differentiable_all_reduce_sum (a Function, identity at tp "
                        "1)"),
        "residual1": _op({"eager_op": 1}, {"autograd_node": 1}),
        "norm2": _op({"view_op": 1, "fused_module": 1}, {"autograd_node": 2}),
        "mlp_in": _op({"view_op": 1, "module_call": 1}, {"autograd_node": 6}, "MLP call; gate_up_proj (one fused "
                      "column linear for gate and up)"),
        "activation": _op({"view_op": 2, "module_call": 1, "eager_op": 1}, {"autograd_node": 3},
                          "GLUActivation: split, ACT2FN silu (an nn.Module), mul"),
        "mlp_out": _op({"module_call": 1}, {"autograd_node": 6}, "down_proj (row linear)"),
        "residual2": _op({"eager_op": 1}, {"autograd_node": 1}),
        "final_norm": _op({"view_op": 2, "fused_module": 1}, {"autograd_node": 2}, "PipelineBlock + TritonRMSNorm"),
        "lm_head": _op({"view_op": 1, "module_call": 1}, {"autograd_node": 5}),
        "loss": _op({"eager_op": 14, "view_op": 4}, {"autograd_node": 4},
                    "cast_to_fp32 (.float()), label transpose + contiguous, sharded_cross_entropy "
                    "(_ShardedCrossEntropy: ~9 eager ops, its all-reduces skipped at tp 1), transpose, masked_mean "
                    "(@torch.jit.script: mul, sum, sum, div)"),
        "_layer": _op({"view_op": 2}, {}, "LlamaDecoderLayer call and its PipelineBlock wrapper"),
        "_source": f"read: {NANOTRON} src/nanotron/models/llama.py (LlamaDecoderLayer, CausalSelfAttention."
                   "_forward_training, CoreAttention, MLP, Loss), "
                   "nanotron/parallel/tensor_parallel/{nn,functional}.py, "
                   "nanotron/nn/layer_norm.py; tp 1, bf16 params (no autocast), flash-attn varlen, Triton RMSNorm",
    },
    "composer-fsdp1": {
        "embedding": _op({"module_call": 1, "eager_op": 1}, {"autograd_node": 3},
                         "MPTModel.forward (llmfoundry/models/mpt/modeling_mpt.py): wte (SharedEmbedding), "
                         "the autocast cast of the embedding output"),
        "embedding_output": _op({"module_call": 1, "eager_op": 2, "view_op": 1}, {"autograd_node": 3},
                                "learned positions: arange, wpe, add; emb_drop (nn.Dropout(p=0): a call that launches "
                                "nothing, view_op); the per-forward flash_attn_padding_info (unpad indices, "
                                "cu_seqlens: "
                                "several eager ops) not itemised"),
        "norm1": _op({"module_call": 1, "eager_op": 3}, {"autograd_node": 6},
                     "LPLayerNorm (llmfoundry/models/layers/norm.py: a torch LayerNorm subclass): "
                     "_cast_if_autocast_enabled of x, weight, bias (3 casts), F.layer_norm with autocast off"),
        "qkv": _op({"view_op": 1, "module_call": 1, "eager_op": 3}, {"autograd_node": 9},
                   "attention module call; Wqkv nn.Linear under bf16 autocast (casts of x, weight, bias), biases "
                   "(no_bias False)"),
        "attention": _op({"eager_op": 5, "view_op": 9}, {"autograd_node": 13},
                         "qkv.split; flash_attn_fn (llmfoundry/models/layers/attention.py): 3 x (rearrange + "
                         "bert_padding.index_first_axis (a Function: gather) + rearrange), flash_attn_varlen_func, "
                         "pad_input (IndexPutFirstAxis Function) + rearrange"),
        "out_proj": _op({"module_call": 1, "eager_op": 2}, {"autograd_node": 8}, "out_proj nn.Linear (bf16 input "
                        "already: weight and bias casts)"),
        "residual1": _op({"view_op": 1, "eager_op": 1}, {"autograd_node": 1},
                         "resid_attn_dropout (nn.Dropout(p=0): returns its input, no node) + add"),
        "norm2": _op({"module_call": 1, "eager_op": 3}, {"autograd_node": 6}),
        "mlp_in": _op({"view_op": 2, "module_call": 1, "eager_op": 3}, {"autograd_node": 9},
                      "apply_ffn (m.size(), padding branch off), MPTMLP call, up_proj"),
        "activation": _op({"module_call": 1}, {"autograd_node": 1}, "nn.GELU(approximate='none')"),
        "mlp_out": _op({"module_call": 1, "eager_op": 2}, {"autograd_node": 8}),
        "residual2": _op({"view_op": 1, "eager_op": 1}, {"autograd_node": 1},
                         "resid_ffn_dropout (p=0), x.to(device) and .to(device) (no-ops: meta), add"),
        "final_norm": _op({"module_call": 1, "eager_op": 3}, {"autograd_node": 6}),
        "lm_head": _op({"eager_op": 3}, {"autograd_node": 5}, "tied: F.linear(x, wte.weight) under autocast"),
        "loss": _op({"eager_op": 4, "view_op": 3}, {"autograd_node": 4}, "ComposerMPTCausalLM.loss: roll targets, "
                    "view, cross_entropy"),
        "_layer": _op({"view_op": 1}, {}, "MPTBlock call (FSDP1 per-block hooks: _fsdp2-like all-gather / reduce-"
                      "scatter per wrapped block, FullyShardedDataParallel._pre_forward/_post_forward, in "
                      "torch/distributed/fsdp/_runtime_utils.py)"),
        "_source": f"read: {FOUNDRY} llmfoundry/models/layers/blocks.py MPTBlock, attention.py "
                   "GroupedQueryAttention/flash_attn_fn, ffn.py MPTMLP, norm.py LPLayerNorm, mpt/modeling_mpt.py; "
                   "MPT defaults (attn_impl flash, low_precision_layernorm, learned positions, biases, GELU, dropouts "
                   "0: nn.Dropout(p=0) calls launch nothing and add no node), Composer amp_bf16 (torch.autocast); "
                   "approximate (not run)",
    },
})


# -- sanity check against the measured H100 twin ---------------------------------------------------------------------
def sanity(nano: dict, opt: dict, ratios: dict, compiled: dict | None = None) -> dict:
    """nanoGPT's GPT-2 124M tiny twin as host_launch.py steps it (12 layers, bf16 autocast, one micro-batch, fused
    AdamW in two weight-decay groups, clip_grad_norm_, zero_grad, loss.item()): counts x the H100 VM's per-call
    seconds (h100-third-host_calls.json) against its measured host time (h100-third-host_launch.json)."""
    res_dir = ROOT / "benchmarks" / "results" / "host"
    calls = json.loads((res_dir / "h100-third-host_calls.json").read_text())
    launch = json.loads((res_dir / "h100-third-host_launch.json").read_text())
    twin = next(r["twin"] for r in launch["steps"] if r["mode"] == "eager" and r["micro_batch"] == 1
                and r.get("code", "nanogpt") == "nanogpt")
    cost = dict(calls["calls_s"])
    gpu = res_dir / "h100-host_counts-gpu_check.json"  # --gpu-check on a lent H100: view_op measured there
    view_ratio, view_src = ratios["ratios_to_eager_op"]["view_op"], "this CPU's view_op / eager_op"
    if gpu.exists():
        view_ratio = json.loads(gpu.read_text())["per_call_us"]["view_over_eager"]
        view_src = f"the lent H100's view_op / eager_op ({gpu.name})"
    cost["view_op"] = cost["eager_op"] * view_ratio
    layers, tensors = 12, 12 * 6 + 3  # per block: ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj; wte, wpe, ln_f

    def price(counts: dict) -> float:
        return sum(v * cost.get(k, 0.0) for k, v in counts.items() if k in KINDS)

    parts = {}
    for p in PASSES:
        per_layer = sum(price(nano[op][p]) for op in LAYER_OPS) + price(nano["_layer"][p])
        model = sum(price(nano[op][p]) for op in GRAPH_OPS if op not in LAYER_OPS) + price(nano["_model"][p])
        parts[p] = layers * per_layer + model
    parts["backward"] += cost["eager_op"]  # the backward() call
    o = calls["optimizer_s"]
    parts["optimizer"] = (2 * o["adamw_fused_step_s"] + tensors * o["adamw_fused_tensor_s"]  # two param groups
                          + o["clip_grad_norm_step_s"] + tensors * o["clip_grad_norm_tensor_s"]
                          + price(opt["zero_grad_set_to_none"]["per_step"]))
    parts["loss_item_and_loop"] = 2 * cost["eager_op"]  # loss.item() (a sync), the micro-batch's copy to the device
    total = sum(parts.values())
    kernels = {p: layers * sum(nano["_diagnostics"].get(op, {}).get(p, {}).get("aten_kernels", 0) for op in LAYER_OPS)
               + sum(nano["_diagnostics"].get(op, {}).get(p, {}).get("aten_kernels", 0)
                     for op in GRAPH_OPS if op not in LAYER_OPS) for p in PASSES}
    counts = {p: {k: round(layers * sum(nano[op][p].get(k, 0) for op in (*LAYER_OPS, "_layer"))
                           + sum(nano[op][p].get(k, 0) for op in (*GRAPH_OPS, "_model") if op not in LAYER_OPS), 2)
                  for k in KINDS if any(nano[op][p].get(k) for op in (*GRAPH_OPS, *EXTRA))} for p in PASSES}
    extra = {}
    if compiled:  # the torch.compile'd twin: one region each way, the CPU's kernel counts
        ctwin = next((r["twin"] for r in launch["steps"] if r["mode"] == "compiled" and r["micro_batch"] == 1), None)
        sm = compiled["summary"]
        ck = {p: layers * sm["per_layer"][p]["compiled_kernel"] + sm[p + "_model_level"]["compiled_kernel"]
              for p in PASSES}
        nodes = layers * sm["per_layer"]["backward"]["autograd_node"] + sm["backward_model_level"]["autograd_node"]
        cf = cost["compiled_entry"] + ck["forward"] * cost["compiled_kernel"]
        cb = cost["compiled_entry"] + ck["backward"] * cost["compiled_kernel"] + nodes * cost["autograd_node"]
        extra["compiled"] = {
            "counts": {"compiled_kernel": ck, "autograd_node_backward": nodes, "compiled_entry": {"forward": 1,
                                                                                             "backward": 1}},
            "predicted_ms": {"forward": round(cf * 1e3, 3), "backward": round(cb * 1e3, 3),
                             "optimizer": round(parts["optimizer"] * 1e3, 3)},
            "measured_ms": ({"wall": round(ctwin["wall_s"] * 1e3, 2),
                             "forward": round(ctwin["issue_forward_s"] * 1e3, 2),
                             "backward": round(ctwin["issue_backward_s"] * 1e3, 2),
                             "kernels_per_step": ctwin.get("kernels_per_step")} if ctwin else None),
            "ratio_predicted_over_measured": (round((cf + cb + parts["optimizer"]) / ctwin["wall_s"], 3)
                                              if ctwin else None)}
    return {
        **extra,
        "per_call_us": {k: round(v * 1e6, 2) for k, v in cost.items() if k in KINDS},
        "view_op_estimate": f"view_op = eager_op x {view_ratio:.3f} ({view_src}; this CPU's: "
                            f"{ratios['ratios_to_eager_op']['view_op']})",
        "counts_per_step": counts, "tensors": tensors,
        "predicted_ms": {k: round(v * 1e3, 3) for k, v in parts.items()}, "predicted_total_ms": round(total * 1e3, 2),
        "measured_ms": {"wall": round(twin["wall_s"] * 1e3, 2), "forward": round(twin["issue_forward_s"] * 1e3, 2),
                        "backward": round(twin["issue_backward_s"] * 1e3, 2),
                        "optimizer": round(twin["issue_optimizer_s"] * 1e3, 2)},
        "ratio_predicted_over_measured": round(total / twin["wall_s"], 3),
        "ratio_by_part": {"forward": round(parts["forward"] / twin["issue_forward_s"], 3),
                          "backward": round(parts["backward"] / twin["issue_backward_s"], 3),
                          "optimizer": round(parts["optimizer"] / twin["issue_optimizer_s"], 3)},
        "kernels_predicted_fwd_bwd": {p: round(v) for p, v in kernels.items()},
        "kernels_measured_per_step": twin.get("kernels_per_step"),
        "source": "benchmarks/results/host/h100-third-host_calls.json, h100-third-host_launch.json (eager, mb 1)",
    }


# -- output ----------------------------------------------------------------------------------------------------------
ABBREV = {"eager_op": "e", "view_op": "v", "module_call": "m", "fused_module": "f", "autograd_node": "n",
          "nccl_call": "c", "compiled_entry": "ce", "compiled_kernel": "ck", "graph_replay": "g", "kernel_launch": "k"}


def fmt(counts: dict) -> str:
    parts = []
    for k in KINDS:
        v = counts.get(k)
        if v:
            parts.append(f"{ABBREV[k]}{v:g}" if float(v).is_integer() else f"{ABBREV[k]}{v:.2f}")
    return " ".join(parts) or "-"


def table(results: dict) -> str:
    keys = " ".join(f"{a}={k}" for k, a in ABBREV.items())
    lines = [f"calls per operator (layer operators: per layer; others: per step, one micro-batch); {keys}", ""]
    for stack, r in results.items():
        if not isinstance(r, dict) or "qkv" not in r:
            continue
        for label, res in [(stack, r)] + [(f"{stack} [{v}]", rv) for v, rv in r.get("_variants", {}).items()
                                          if isinstance(rv, dict) and "qkv" in rv]:
            lines.append(f"== {label}")
            lines.append(f"  {'operator':17s} {'forward':34s} backward")
            for op in (*GRAPH_OPS, *EXTRA):
                d = res.get(op, {})
                f, b = fmt(d.get("forward", {})), fmt(d.get("backward", {}))
                if f == "-" and b == "-":
                    continue
                lines.append(f"  {op:17s} {f:34s} {b}")
            lines.append("")
    return "\n".join(lines)


def strip(res: dict) -> dict:
    """A stack's result without the per-layer check's bookkeeping."""
    return {k: v for k, v in res.items() if k not in ("_layers_seen",)}


def run_all(only: set | None, compile_: bool, echo) -> dict:
    want = lambda s: only is None or s in only  # noqa: E731
    out: dict = {}
    t0 = time.perf_counter()
    opt = optimizer_counts()
    echo(f"optimizer counts ({time.perf_counter() - t0:.0f} s)")
    ratios = cpu_ratios()
    echo(f"CPU ratios: {ratios['ratios_to_eager_op']}")
    fsdp = fsdp2_counts() if (want("torchtitan") or want("plain-torch")) else None
    echo(f"FSDP2 counts ({time.perf_counter() - t0:.0f} s)")
    if want("plain-torch"):
        main, llama = plain_torch("gpt2"), plain_torch("llama")
        step = main.pop("_step")
        llama.pop("_step")
        out["plain-torch"] = {**strip(main), "_step": step, "_optimizer": opt, "_fsdp2": fsdp,
                              "_variants": {"llama": strip(llama)}, "_source": (
            "counted: perfmodel/execute/transformer.py Transformer as perfmodel/execute/train.py's Trainer builds "
            "and steps it for a one-process plan (Trainer.step counted whole), bf16 autocast as on CUDA; main: GPT-2 "
            "(layernorm, learned positions, biases, tied embeddings, tanh-GeLU); _variants.llama: RMSNorm, RoPE (the "
            "executor's rotate(): cos/sin recomputed per call), GQA, SwiGLU; optimizer: fused AdamW "
            "(data_parallel.adamw)")}
        echo(f"plain-torch ({time.perf_counter() - t0:.0f} s)")
    if want("nanogpt"):
        nano = nanogpt()
        out["nanogpt"] = {**strip(nano), "_optimizer": opt, "_source": (
            "counted: benchmarks/host_launch.py GPT/Block (Karpathy's nanoGPT model.py: no biases, fused c_attn, SDPA, "
            "tied wte/lm_head, loss inside forward), bf16 autocast (torch.autocast on CPU; casts as CUDA autocast "
            "makes them for these ops); optimizer: fused AdamW in two weight-decay groups + clip_grad_norm_(1.0) + "
            "zero_grad(set_to_none) + loss.item() per step")}
        if compile_:
            out["nanogpt"]["_compiled"] = nanogpt_compiled()
            echo(f"nanogpt compiled ({time.perf_counter() - t0:.0f} s)")
        out["_sanity"] = sanity(nano, opt, ratios, out["nanogpt"].get("_compiled"))
        echo(f"nanogpt ({time.perf_counter() - t0:.0f} s)")
    if want("hf-transformers"):
        try:
            g, ll = hf("gpt2"), hf("llama")
            out["hf-transformers"] = {**strip(g), "_optimizer": opt, "_variants": {"llama": strip(ll)}, "_source": (
                f"counted: {g['_version']} GPT2LMHeadModel (defaults: gelu_new as NewGELUActivation's 8 eager ops, "
                "dropout 0.1 (embd, attn inside SDPA, resid), Conv1D = addmm + views, DynamicCache built and updated "
                "because config.use_cache defaults True in a plain model(input_ids, labels=...) call: 2 cat per "
                "layer), "
                "SDPA attention, bf16 autocast, loss inside (ForCausalLMLoss: float(), pad, shift, cross_entropy); "
                "_variants.llama: LlamaForCausalLM (LlamaRMSNorm = 6 eager ops, rotary table at model level (_model), "
                "rotate_half, SDPA with GQA); optimizer: torch's default AdamW (foreach on CUDA)")}
        except ImportError as err:
            out["hf-transformers"] = {"_error": f"transformers not importable: {err}"}
        echo(f"hf-transformers ({time.perf_counter() - t0:.0f} s)")
    if want("torchtitan"):
        try:
            tt = torchtitan()
            out["torchtitan"] = {**strip(tt), "_optimizer": opt, "_fsdp2": fsdp, "_source": (
                f"counted: {tt['_version']} (PyPI wheel unpacked by perfmodel.export.checks) "
                "torchtitan/models/llama3/__init__.py _build_llama3_layers + Llama3Model, "
                "models/common/{attention,rope,decoder,feed_forward}.py; flex attention (the default backend) as a "
                "torch.compile'd region (1 forward / 2 backward kernels, FLEX_KERNELS), its block mask created per "
                "step in _model (get_attention_masks: the document-mask closures' eager ops, and create_block_mask "
                "compiled: one compiled_entry and 8 kernels, Inductor's count on this CPU); loss: "
                "components/loss.py cross_entropy_loss (sum) / tokens; no autocast (bf16 params under FSDP2: see "
                "_fsdp2); optimizer: AdamW implementation 'fused' (components/optimizer/optimizer.py)")}
        except Exception as err:  # noqa: BLE001 - a framework that cannot run here is reported
            out["torchtitan"] = {"_error": repr(err)[:500]}
        echo(f"torchtitan ({time.perf_counter() - t0:.0f} s)")
    if want("megatron-core"):
        try:
            mg, nf, ml = megatron_core("gpt2", True), megatron_core("gpt2", False), megatron_core("llama", True)
            te = megatron_te("gpt2"), megatron_te("llama")
            out["megatron-core"] = {**strip(te[0]), "_variants": {
                "te_llama": strip(te[1]), "local": strip(mg), "local_no_fusion": strip(nf), "local_llama": strip(ml)},
                "_source": MEGATRON_SOURCE}
        except Exception:  # noqa: BLE001
            import traceback
            out["megatron-core"] = {"_error": traceback.format_exc()[-1500:]}
        echo(f"megatron-core ({time.perf_counter() - t0:.0f} s)")
    for name, res in READ_ONLY.items():
        if want(name):
            out[name] = res
    out["_cpu_ratios"] = ratios
    out["_kinds"] = {"priced": list(KINDS), "abbreviations": ABBREV}
    return out


def gpu_check(out: Path) -> dict:
    """On a CUDA device: the counts without emulation (nanoGPT, plain-torch GPT-2 and Llama), against this file's CPU
    counts (benchmarks/results/host/call_counts.json); the node SDPA with dropout makes; view_op / eager_op / meta
    seconds per call on this host (perfmodel.calibrate.host.calls' probes, inlined)."""
    global DEVICE
    import time as _t

    DEVICE = torch.device("cuda")
    cpu = json.loads((ROOT / "benchmarks" / "results" / "host" / "call_counts.json").read_text())
    res: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "diffs": {}}
    runs = {"nanogpt": lambda: nanogpt(), "plain-torch": lambda: plain_torch("gpt2"),
            "plain-torch/llama": lambda: plain_torch("llama")}
    for name, fn in runs.items():
        try:
            r = fn()
        except Exception as err:  # noqa: BLE001
            res["diffs"][name] = {"error": repr(err)[:400]}
            continue
        ref = cpu[name.split("/")[0]]
        if "/" in name:
            ref = ref["_variants"][name.split("/")[1]]
        d = {}
        for op in (*GRAPH_OPS, *EXTRA):
            for p in PASSES:
                a = {k: v for k, v in r[op][p].items() if k in KINDS}
                b = {k: v for k, v in ref.get(op, {}).get(p, {}).items() if k in KINDS}
                if a != b:
                    d[f"{op}.{p}"] = {"cuda": a, "cpu_emulated": b,
                                      "cuda_samples": r["_samples"].get(op, {}).get(p)}
        res["diffs"][name] = d or "identical"
        res.setdefault("kernels", {})[name] = {op: r["_diagnostics"].get(op) for op in ("qkv", "attention", "norm1")}
    q = torch.randn(2, 2, 16, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    o = F.scaled_dot_product_attention(q, q, q, dropout_p=0.1, is_causal=True)
    res["sdpa_dropout_node"] = type(o.grad_fn).__name__
    res["sdpa_out_transposed_contiguous"] = o.transpose(1, 2).is_contiguous()
    x = torch.randn(4, 8, device="cuda", requires_grad=True)
    res["rms_norm_node"] = type(F.rms_norm(x, (8,), torch.ones(8, device="cuda", requires_grad=True)).grad_fn).__name__

    def burst(fn, n=200, reps=25):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = _t.perf_counter()
            for _ in range(n):
                fn()
            ts.append((_t.perf_counter() - t0) / n)
        return sorted(ts)[len(ts) // 2]

    a, b = torch.randn(16, 16, device="cuda"), torch.randn(16, 16, device="cuda")
    v = torch.randn(16, 16, device="cuda", requires_grad=True)
    with torch.no_grad():
        eager = burst(lambda: torch.matmul(a, b))
    view = burst(lambda: (v.view(-1), v.t())) / 2
    meta = burst(lambda: (v.shape, v.size(-1))) / 2
    res["per_call_us"] = {"eager_op": eager * 1e6, "view_op": view * 1e6, "meta": meta * 1e6,
                          "view_over_eager": view / eager, "meta_over_eager": meta / eager}
    out.write_text(json.dumps(res, indent=1, default=str))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the counts as JSON")
    ap.add_argument("--txt", type=Path, help="write the printed table")
    ap.add_argument("--compile", action="store_true", help="also the torch.compile'd nanoGPT (~30 s more)")
    ap.add_argument("--only", default="", help="comma-separated stacks")
    ap.add_argument("--fsdp2-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--gpu-check", type=Path, help="on a CUDA machine: compare CUDA's counts with the CPU's (JSON)")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    if a.fsdp2_worker:
        print(json.dumps(fsdp2_worker()))
        return 0
    if a.gpu_check:
        r = gpu_check(a.gpu_check)
        print(json.dumps(r, indent=1, default=str)[:6000])
        return 0
    echo = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    results = run_all({x for x in a.only.split(",") if x} or None, a.compile, echo)
    args = argv if argv is not None else sys.argv[1:]
    results["_meta"] = {"command": "python benchmarks/host_counts.py " + " ".join(args),
                        "torch": torch.__version__, "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d"),
                        "seconds": round(time.perf_counter() - t0, 1)}
    text = table(results)
    sn = results.get("_sanity")
    if sn:
        text += ("\nsanity (nanoGPT GPT-2 124M twin, 12 layers, eager, H100 VM per-call costs): predicted "
                 f"{sn['predicted_total_ms']} ms vs measured {sn['measured_ms']['wall']} ms: ratio "
                 f"{sn['ratio_predicted_over_measured']} (by part {sn['ratio_by_part']}); kernels predicted fwd+bwd "
                 f"{sn['kernels_predicted_fwd_bwd']}, measured per step {sn['kernels_measured_per_step']}\n")
    print(text)
    if a.txt:
        a.txt.write_text(text)
    if a.out:
        a.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
