"""megatron-core 0.16.1's GPTModel (from PyPI, unpacked by perfmodel.export.checks) on a one-rank gloo group: the
Transformer Engine spec emulated (main, te_llama) and the local spec run as is (local, local_no_fusion, local_llama).
"""

from __future__ import annotations

import contextlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from benchmarks.tools.host_counts.counter import (BATCH, SEQ, Counter, compiled_stub, count_model, framework_path,
                                                  fused_stub, make_rules, one_node, tokens)


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


SOURCE = (
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
    "(TransformerConfig's defaults: what benchmarks/probes/host_megatron.py measured), local_llama")


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
    SOURCE)."""
    return megatron_core(arch, True, n_layers, te=True)


def megatron_core(arch: str = "gpt2", fusions: bool = True, n_layers: int = 2, te: bool = False) -> dict:
    """Megatron-Core 0.16.1's GPTModel with get_gpt_layer_local_spec (no TE, no apex: torch LayerNorm / RMSNorm,
    Column/RowParallelLinear, DotProductAttention with FusedScaleMaskSoftmax's torch fallback), Float16Module bf16,
    dropout 0.1, tp = pp = 1 on a one-rank gloo group, loss inside the model (labels=: vocab-parallel cross
    entropy). fusions: Megatron-LM's defaults (bias_dropout_fusion, bias_activation_fusion, masked_softmax_fusion
    on; their jit_fuser functions are torch.compile'd: counted as compiled regions, MEG_COMPILED); else
    TransformerConfig's defaults (all off: what benchmarks/probes/host_megatron.py measured)."""
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

